//! RDMA devices through rdma-core (the `ibverbs` crate), behind the `ibverbs` feature.
//!
//! What is here: device discovery and properties. `ibverbs::devices()` answers an error
//! (ENOSYS without kernel RDMA support; some setups also answer ENODEV or an empty list)
//! on machines without RDMA; all of those mean "no devices", not a failure. Properties
//! come from the device list and sysfs (`/sys/class/infiniband/<dev>/...`): name, GUID,
//! PCI path and the rate of port 1.
//!
//! What is not: the verbs data path (queue pairs, RDMA writes, memory registration, GPU
//! direct). No machine this project runs on has an RDMA NIC to test it against, so
//! `listen`, `connect`, `accept`, `reg_mr`, `isend`, `irecv` and `test` return
//! [`Error::Unsupported`] saying so, rather than pretending; use the socket net.

use std::path::{Path, PathBuf};

use super::{
    CommConfig, Context, DeviceOffload, ListenComm, MemoryKind, MrHandle, Net, NetProperties, Opaque, PointerSupport, RecvBuffer, RecvComm, Request, SendComm, MAX_MESSAGE_BYTES,
};
use crate::{Error, Result};

const SYSFS: &str = "/sys/class/infiniband";
/// Receives per `irecv` that NCCL's IB transport takes (NCCL_NET_IB_MAX_RECVS).
const MAX_RECVS: usize = 8;

/// InfiniBand / RoCE devices found through rdma-core.
pub struct IbNet {
    devices: Vec<Device>,
}

#[derive(Clone, Debug)]
struct Device {
    name: String,
    guid: u64,
}

impl IbNet {
    /// Lists the machine's RDMA devices; having none is not an error.
    pub fn new() -> IbNet {
        let devices = match ibverbs::devices() {
            Ok(list) => list
                .iter()
                .map(|device| Device {
                    name: device.name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default(),
                    guid: device.guid().map(u64::from).unwrap_or(0),
                })
                .collect(),
            Err(e) => {
                tracing::debug!(target: "oxccl::net", "no RDMA devices: {e}");
                Vec::new()
            }
        };
        IbNet { devices }
    }

    fn device(&self, device: usize) -> Result<&Device> {
        self.devices.get(device).ok_or_else(|| Error::InvalidArgument(format!("IB device {device} (there are {})", self.devices.len())))
    }

    fn unsupported<T>(&self) -> Result<T> {
        Err(Error::Unsupported("the verbs data path is not implemented (no RDMA NIC here to test it on); use the socket net".into()))
    }
}

impl Default for IbNet {
    fn default() -> Self {
        IbNet::new()
    }
}

/// The rate of a port in Mb/s, from sysfs text such as "100 Gb/sec (4X EDR)".
fn rate_mbps(text: &str) -> Option<u32> {
    let gigabits: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some((gigabits * 1000.0) as u32)
}

fn pci_path(name: &str) -> Option<String> {
    std::fs::canonicalize(Path::new(SYSFS).join(name).join("device")).ok().map(|path: PathBuf| path.to_string_lossy().into_owned())
}

impl Net for IbNet {
    fn name(&self) -> &str {
        "IB"
    }

    fn init(&self, _comm_id: u64, _config: &CommConfig) -> Result<Context> {
        Ok(Context::new(()))
    }

    fn finalize(&self, context: Context) -> Result<()> {
        context.into_inner::<()>()?;
        Ok(())
    }

    fn devices(&self) -> Result<usize> {
        Ok(self.devices.len())
    }

    fn properties(&self, device: usize) -> Result<NetProperties> {
        let Device { name, guid } = self.device(device)?.clone();
        let rate = std::fs::read_to_string(Path::new(SYSFS).join(&name).join("ports/1/rate")).ok();
        Ok(NetProperties {
            pci_path: pci_path(&name),
            name,
            guid,
            ptr_support: PointerSupport { host: true, cuda: false, dmabuf: false },
            reg_is_global: true,
            force_flush: false,
            speed_mbps: rate.as_deref().and_then(rate_mbps).unwrap_or(0),
            port: 1,
            latency_us: 0.0,
            max_comms: 0,
            max_recvs: MAX_RECVS,
            offload: DeviceOffload::Host,
            max_p2p_bytes: MAX_MESSAGE_BYTES,
            max_coll_bytes: MAX_MESSAGE_BYTES,
        })
    }

    fn listen(&self, _context: &Context, _device: usize) -> Result<(Vec<u8>, ListenComm)> {
        self.unsupported()
    }
    fn connect(&self, _context: &Context, _device: usize, _handle: &[u8]) -> Result<Option<SendComm>> {
        self.unsupported()
    }
    fn accept(&self, _listen: &mut ListenComm) -> Result<Option<RecvComm>> {
        self.unsupported()
    }
    fn reg_mr(&self, _comm: &mut Opaque, _data: *mut u8, _len: usize, _kind: MemoryKind) -> Result<MrHandle> {
        self.unsupported()
    }
    fn dereg_mr(&self, _comm: &mut Opaque, _handle: MrHandle) -> Result<()> {
        self.unsupported()
    }
    unsafe fn isend(&self, _comm: &mut SendComm, _data: *const u8, _len: usize, _tag: u32, _handle: &MrHandle) -> Result<Option<Request>> {
        self.unsupported()
    }
    unsafe fn irecv(&self, _comm: &mut RecvComm, _buffers: &[RecvBuffer], _handles: &[&MrHandle]) -> Result<Option<Request>> {
        self.unsupported()
    }
    fn test(&self, _request: &mut Request) -> Result<Option<Vec<usize>>> {
        self.unsupported()
    }
    fn close_send(&self, _comm: SendComm) -> Result<()> {
        Ok(())
    }
    fn close_recv(&self, _comm: RecvComm) -> Result<()> {
        Ok(())
    }
    fn close_listen(&self, _comm: ListenComm) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_rdma_is_no_devices_not_an_error() {
        let net = IbNet::new();
        let count = net.devices().unwrap();
        for device in 0..count {
            let properties = net.properties(device).unwrap();
            assert!(!properties.name.is_empty());
            assert_eq!(properties.max_recvs, MAX_RECVS);
        }
        assert!(net.properties(count).is_err());
    }

    #[test]
    fn the_data_path_says_it_is_unsupported() {
        let net = IbNet::new();
        let context = net.init(0, &CommConfig::default()).unwrap();
        let err = net.listen(&context, 0).unwrap_err();
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        assert!(err.to_string().contains("socket net"));
    }

    #[test]
    fn port_rates_parse() {
        assert_eq!(rate_mbps("100 Gb/sec (4X EDR)\n"), Some(100_000));
        assert_eq!(rate_mbps("2.5 Gb/sec (1X SDR)"), Some(2_500));
        assert_eq!(rate_mbps("garbage"), None);
    }
}
