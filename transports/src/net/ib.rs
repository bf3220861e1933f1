//! RDMA devices through rdma-core (the `ibverbs` crate), behind the `ibverbs` feature.
//!
//! What is here: device discovery and properties. `ibverbs::devices()` answers ENOSYS (an
//! error, not an empty list) on machines without RDMA; that is treated as "no devices".
//! The verbs data path (queue pairs, RDMA writes, GPU memory registration) is not written:
//! no machine this project runs on has an RDMA NIC to test it against, so every data-path
//! call returns `Unsupported` naming that reason rather than pretending.

use super::{ListenComm, MemoryHandle, MemoryKind, Net, Opaque, PointerSupport, Properties, RecvBuffer, RecvComm, Request, SendComm};
use crate::{Error, Result};

/// InfiniBand / RoCE devices found through rdma-core.
pub struct IbNet {
    devices: Vec<(String, u64)>,
}

impl IbNet {
    /// Lists the machine's RDMA devices (none is not an error).
    pub fn new() -> IbNet {
        let devices = match ibverbs::devices() {
            Ok(list) => list
                .iter()
                .map(|d| {
                    let name = d.name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                    let guid = d.guid().map(u64::from).unwrap_or(0);
                    (name, guid)
                })
                .collect(),
            Err(_) => Vec::new(),
        };
        IbNet { devices }
    }

    fn unsupported<T>(&self) -> Result<T> {
        Err(Error::Unsupported("the verbs data path is not implemented (no RDMA NIC to test it on); use the socket net".into()))
    }
}

impl Default for IbNet {
    fn default() -> Self {
        IbNet::new()
    }
}

impl Net for IbNet {
    fn name(&self) -> &str {
        "IB"
    }

    fn devices(&self) -> Result<usize> {
        Ok(self.devices.len())
    }

    fn properties(&self, device: usize) -> Result<Properties> {
        let (name, guid) = self.devices.get(device).ok_or_else(|| Error::InvalidArgument(format!("IB device {device} of {}", self.devices.len())))?;
        Ok(Properties {
            name: name.clone(),
            pci_path: Some(format!("/sys/class/infiniband/{name}/device")),
            guid: *guid,
            ptr_support: PointerSupport { host: true, cuda: false, dmabuf: false },
            speed_mbps: 0,
            latency_us: 0.0,
            port: 1,
            max_comms: 0,
            max_recvs: 1,
            reg_is_global: false,
        })
    }

    fn listen(&self, _device: usize) -> Result<(Vec<u8>, ListenComm)> {
        self.unsupported()
    }
    fn connect(&self, _device: usize, _handle: &[u8]) -> Result<Option<SendComm>> {
        self.unsupported()
    }
    fn accept(&self, _listen: &mut ListenComm) -> Result<Option<RecvComm>> {
        self.unsupported()
    }
    fn register(&self, _comm: &mut Opaque, _data: *mut u8, _len: usize, _kind: MemoryKind) -> Result<MemoryHandle> {
        self.unsupported()
    }
    fn deregister(&self, _comm: &mut Opaque, _handle: MemoryHandle) -> Result<()> {
        self.unsupported()
    }
    unsafe fn isend(&self, _comm: &mut SendComm, _data: *const u8, _len: usize, _tag: u32, _handle: &MemoryHandle) -> Result<Option<Request>> {
        self.unsupported()
    }
    unsafe fn irecv(&self, _comm: &mut RecvComm, _buffers: &[RecvBuffer], _handles: &[&MemoryHandle]) -> Result<Option<Request>> {
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
    #[test]
    fn no_rdma_is_no_devices_not_an_error() {
        let net = super::IbNet::new();
        use super::Net;
        let n = net.devices().unwrap();
        assert!(net.properties(n).is_err());
    }
}
