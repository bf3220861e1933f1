//! The network transport interface, shaped like NCCL's net plugin API (v8–v10): device
//! properties, listen/connect/accept, memory registration, `isend`, `irecv` of up to
//! `max_recvs` tagged buffers at once, `test`, the three closes and a global finalize.
//!
//! Buffers cross this interface as raw addresses, as in the C plugin API: a buffer passed to
//! `isend` or `irecv` must stay valid, and untouched by anyone else, until `test` reports
//! the request done. Comms and requests are opaque boxes each implementation downcasts.
//!
//! Implementations: [`socket`] (TCP; runs everywhere) and, with the `ibverbs` feature,
//! `ib` (device discovery through rdma-core; no machine here has an RDMA NIC).

#[cfg(feature = "ibverbs")]
pub mod ib;
pub mod socket;

use std::any::Any;

use crate::Result;

/// Where a device can read and write (NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointerSupport {
    pub host: bool,
    pub cuda: bool,
    pub dmabuf: bool,
}

/// What a network device reports (ncclNetProperties_t).
#[derive(Clone, Debug, PartialEq)]
pub struct Properties {
    pub name: String,
    pub pci_path: Option<String>,
    pub guid: u64,
    pub ptr_support: PointerSupport,
    pub speed_mbps: u32,
    pub latency_us: f32,
    pub port: u32,
    pub max_comms: u32,
    /// How many receives one `irecv` may carry.
    pub max_recvs: usize,
    pub reg_is_global: bool,
}

/// The kind of memory a registration covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    Host,
    Cuda,
}

/// An opaque comm or request of some implementation.
pub struct Opaque(pub Box<dyn Any + Send>);

impl Opaque {
    pub fn new<T: Any + Send>(value: T) -> Opaque {
        Opaque(Box::new(value))
    }

    /// The implementation's own type, or an error naming what was expected.
    pub fn get<T: Any>(&mut self, what: &'static str) -> Result<&mut T> {
        self.0.downcast_mut::<T>().ok_or_else(|| crate::Error::InvalidArgument(format!("not a {what} of this net")))
    }
}

pub type ListenComm = Opaque;
pub type SendComm = Opaque;
pub type RecvComm = Opaque;
pub type Request = Opaque;
pub type MemoryHandle = Opaque;

/// One receive buffer of an `irecv`.
#[derive(Clone, Copy, Debug)]
pub struct RecvBuffer {
    pub data: *mut u8,
    pub len: usize,
    pub tag: u32,
}

/// A network transport.
pub trait Net: Send + Sync {
    /// The implementation's name ("Socket", "IB").
    fn name(&self) -> &str;
    /// How many devices it drives.
    fn devices(&self) -> Result<usize>;
    fn properties(&self, device: usize) -> Result<Properties>;
    /// Starts listening; the handle (opaque bytes) goes to the connecting peer.
    fn listen(&self, device: usize) -> Result<(Vec<u8>, ListenComm)>;
    /// Connects to a peer's handle. `None`: not yet, call again.
    fn connect(&self, device: usize, handle: &[u8]) -> Result<Option<SendComm>>;
    /// Accepts the peer that connected to `listen`. `None`: not yet, call again.
    fn accept(&self, listen: &mut ListenComm) -> Result<Option<RecvComm>>;
    /// Registers memory for sends or receives on `comm`.
    fn register(&self, comm: &mut Opaque, data: *mut u8, len: usize, kind: MemoryKind) -> Result<MemoryHandle>;
    fn deregister(&self, comm: &mut Opaque, handle: MemoryHandle) -> Result<()>;
    /// Starts sending `len` bytes at `data` with `tag`. `None`: try again later.
    ///
    /// # Safety
    /// `data..data+len` stays valid and unchanged until the request completes.
    unsafe fn isend(&self, comm: &mut SendComm, data: *const u8, len: usize, tag: u32, handle: &MemoryHandle) -> Result<Option<Request>>;
    /// Starts receiving one message into each buffer (at most `max_recvs`), matched by tag.
    /// `None`: try again later.
    ///
    /// # Safety
    /// Every buffer stays valid, and untouched, until the request completes.
    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MemoryHandle]) -> Result<Option<Request>>;
    /// Progresses a request: the byte count of each of its buffers once done.
    fn test(&self, request: &mut Request) -> Result<Option<Vec<usize>>>;
    fn close_send(&self, comm: SendComm) -> Result<()>;
    fn close_recv(&self, comm: RecvComm) -> Result<()>;
    fn close_listen(&self, comm: ListenComm) -> Result<()>;
    /// Releases global resources; no call may follow.
    fn finalize(&self) {}
}
