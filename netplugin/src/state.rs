//! The plugin's one net: oxccl's socket net on the interfaces `NCCL_SOCKET_IFNAME` and
//! `NCCL_SOCKET_FAMILY` allow, one device per interface, taking `OXCCL_NETPLUGIN_MAX_RECVS`
//! buffers per `irecv`, its comms moving large messages as `NCCL_SOCKET_NTHREADS` and
//! `NCCL_NSOCKS_PERTHREAD` say, their sockets' buffers as `NCCL_SOCKET_SNDBUF` and
//! `NCCL_SOCKET_RCVBUF` say (all four as NCCL's own socket transport reads them). It is
//! built from the environment at the first `init` and lives as long as the process (NCCL
//! never unloads a plugin it still uses).
//!
//! Without `NCCL_SOCKET_IFNAME` the devices are chosen as NCCL's socket transport chooses
//! them (`oxccl_transports::net::socket::choose_devices`, as for oxccl's internal net).

use std::ffi::CString;
use std::sync::OnceLock;

use oxccl_bootstrap::iface;
use oxccl_bootstrap::Config;
use oxccl_transports::net::socket::{choose_devices, SocketBuffers, SocketNet, StreamSettings};
use oxccl_transports::net::{CommConfig, Context, Net};

/// The plugin's state.
pub struct Plugin {
    pub net: SocketNet,
    /// Each device's name and PCI path, as C strings that properties point at.
    names: Vec<(CString, Option<CString>)>,
    /// The context of the ABI versions without per-communicator `init` (v9, v10).
    pub process_context: Context,
}

/// The plugin, built at the first call; a failure to build it is kept and reported by
/// every `init`.
pub fn plugin() -> Result<&'static Plugin, String> {
    static PLUGIN: OnceLock<Result<Plugin, String>> = OnceLock::new();
    PLUGIN.get_or_init(build).as_ref().map_err(Clone::clone)
}

impl Plugin {
    /// Device `device`'s name and PCI path (NULL for a virtual interface).
    pub fn names(&self, device: usize) -> Option<(*const std::ffi::c_char, *const std::ffi::c_char)> {
        let (name, pci_path) = self.names.get(device)?;
        Some((name.as_ptr(), pci_path.as_ref().map_or(std::ptr::null(), |path| path.as_ptr())))
    }
}

fn build() -> Result<Plugin, String> {
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let interfaces = iface::list().map_err(|e| e.to_string())?;
    let devices = choose_devices(&interfaces, &config)?;
    let described: Vec<String> = devices.iter().map(|d| format!("{} ({}, {} Mb/s)", d.name, d.ip, d.speed_mbps)).collect();
    let names = devices
        .iter()
        .map(|d| (c_string(&d.name), d.pci_path.as_deref().map(c_string)))
        .collect();
    // Receiver-driven with several receives a call, as NCCL expects of such a net.
    let net = SocketNet::with_devices(devices, config.netplugin_max_recvs).with_streams(StreamSettings::from_config(&config)).with_buffers(SocketBuffers::from_config(&config)).receiver_driven();
    let process_context = net.init(0, &CommConfig::default()).map_err(|e| e.to_string())?;
    let streams = net.streams(0).map_err(|e| e.to_string())?;
    tracing::info!(
        target: "oxccl::init",
        "oxccl {} socket net plugin: devices {}; {} receives per irecv; {} helper thread(s) and {} data socket(s) per connection",
        env!("CARGO_PKG_VERSION"),
        described.join(", "),
        config.netplugin_max_recvs,
        streams.threads,
        streams.sockets
    );
    Ok(Plugin { net, names, process_context })
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}
