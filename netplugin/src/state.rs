//! The plugin's one net: oxccl's socket net on the interfaces `NCCL_SOCKET_IFNAME` and
//! `NCCL_SOCKET_FAMILY` allow, one device per interface, taking `OXCCL_NETPLUGIN_MAX_RECVS`
//! buffers per `irecv`, its comms moving large messages as `NCCL_SOCKET_NTHREADS` and
//! `NCCL_NSOCKS_PERTHREAD` say (as NCCL's own socket transport reads them). It is built from the environment at the first `init` and lives as
//! long as the process (NCCL never unloads a plugin it still uses).
//!
//! Without `NCCL_SOCKET_IFNAME` the devices are chosen as NCCL's socket transport chooses
//! them: the `ib*` interfaces if there are any, else every other interface except loopback
//! and container or VM bridges, else loopback.

use std::ffi::CString;
use std::net::IpAddr;
use std::sync::OnceLock;

use oxccl_bootstrap::iface::{self, AddressFamily, Interface};
use oxccl_bootstrap::Config;
use oxccl_transports::net::socket::{SocketDevice, SocketNet, StreamSettings};
use oxccl_transports::net::{CommConfig, Context, Net};

/// Interfaces NCCL's socket transport passes over unless nothing else is up.
const BRIDGES: &[&str] = &["docker", "virbr", "veth", "br-", "cni", "flannel"];
/// Devices at most (NCCL's MAX_IFS).
const MAX_DEVICES: usize = 16;

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
    let devices = choose(&interfaces, &config)?;
    let described: Vec<String> = devices.iter().map(|d| format!("{} ({}, {} Mb/s)", d.name, d.ip, d.speed_mbps)).collect();
    let names = devices
        .iter()
        .map(|d| (c_string(&d.name), d.pci_path.as_deref().map(c_string)))
        .collect();
    let net = SocketNet::with_devices(devices, config.netplugin_max_recvs).with_streams(StreamSettings::from_config(&config));
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

/// The devices: every interface the filter allows, or NCCL's default tiers.
fn choose(interfaces: &[Interface], config: &Config) -> Result<Vec<SocketDevice>, String> {
    let family_fits = |addr: &IpAddr| match config.socket_family {
        Some(AddressFamily::V4) => addr.is_ipv4(),
        Some(AddressFamily::V6) => addr.is_ipv6(),
        None => true,
    };
    let link_local = |addr: &IpAddr| matches!(addr, IpAddr::V6(v6) if (v6.segments()[0] & 0xffc0) == 0xfe80);
    let usable: Vec<&Interface> = interfaces.iter().filter(|i| i.up && family_fits(&i.addr) && !link_local(&i.addr)).collect();
    let chosen: Vec<&Interface> = match &config.socket_ifname {
        Some(filter) => usable.iter().copied().filter(|i| filter.allows(&i.name)).collect(),
        None => {
            let infiniband: Vec<&Interface> = usable.iter().copied().filter(|i| i.name.starts_with("ib")).collect();
            let other: Vec<&Interface> = usable.iter().copied().filter(|i| !i.loopback && !BRIDGES.iter().any(|b| i.name.starts_with(b))).collect();
            let loopback: Vec<&Interface> = usable.iter().copied().filter(|i| i.loopback).collect();
            [infiniband, other, loopback].into_iter().find(|tier| !tier.is_empty()).unwrap_or_default()
        }
    };
    let mut devices: Vec<SocketDevice> = Vec::new();
    for interface in chosen {
        // One address per interface, the first the system lists (as NCCL takes it).
        if devices.len() < MAX_DEVICES && !devices.iter().any(|d| d.name == interface.name) {
            devices.push(SocketDevice::interface(&interface.name, interface.addr));
        }
    }
    if devices.is_empty() {
        let names: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
        let filter = match &config.socket_ifname {
            Some(filter) => format!("NCCL_SOCKET_IFNAME {filter:?}"),
            None => "no NCCL_SOCKET_IFNAME".into(),
        };
        return Err(format!("no usable interface ({filter}; the machine has: {})", names.join(", ")));
    }
    Ok(devices)
}

fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', " ")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interface(name: &str, addr: &str) -> Interface {
        let addr: IpAddr = addr.parse().unwrap();
        Interface { name: name.into(), addr, prefix_len: Some(24), up: true, loopback: addr.is_loopback() }
    }

    fn names(devices: &[SocketDevice]) -> Vec<&str> {
        devices.iter().map(|d| d.name.as_str()).collect()
    }

    #[test]
    fn devices_follow_the_filter_or_nccls_default_order() {
        let machine = [interface("lo", "127.0.0.1"), interface("docker0", "172.17.0.1"), interface("eth0", "10.0.0.2"), interface("eth0", "fe80::1"), interface("eth1", "10.1.0.2")];
        let config = |pairs: &[(&str, &str)]| Config::from_vars(&pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()).unwrap();
        assert_eq!(names(&choose(&machine, &config(&[])).unwrap()), ["eth0", "eth1"]);
        assert_eq!(names(&choose(&machine, &config(&[("NCCL_SOCKET_IFNAME", "lo")])).unwrap()), ["lo"]);
        assert_eq!(names(&choose(&machine, &config(&[("NCCL_SOCKET_IFNAME", "^eth0")])).unwrap()), ["lo", "docker0", "eth1"]);
        let with_ib = [interface("ib0", "192.168.0.2"), interface("eth0", "10.0.0.2")];
        assert_eq!(names(&choose(&with_ib, &config(&[])).unwrap()), ["ib0"]);
        let err = choose(&machine, &config(&[("NCCL_SOCKET_IFNAME", "=rail9")])).unwrap_err();
        assert!(err.contains("rail9") && err.contains("eth1"), "{err}");
    }
}
