//! The network transport interface, shaped like NCCL's net plugin API (v11 and later):
//! device properties; `init` once per communicator, giving it a [`Context`] that `listen`
//! and `connect` take and `finalize` ends; accept; memory registration; `isend`, `irecv` of
//! up to `max_recvs` tagged buffers at once, `iflush`, `test`; the three closes.
//!
//! As in the C API, every call returns at once. `connect` and `accept` answer `None` until
//! the connection is up (call again with the same arguments); `isend` and `irecv` answer
//! `None` when the comm has [`MAX_REQUESTS`] requests in flight; `test` answers `None`
//! until the request is done, and progresses the comm's I/O while it is at it.
//!
//! Buffers cross this interface as raw addresses, as in the C plugin API, so that a proxy
//! engine can hand the net the slots of a FIFO or a GPU buffer: a buffer passed to `isend`
//! or `irecv` must stay valid, and untouched by anyone else, until `test` reports the
//! request done (or the comm is closed). That is why those two calls are `unsafe`.
//! Implementations turn the addresses into `lent` values at once, the only place where
//! they are dereferenced.
//!
//! Listen handles are opaque bytes (at most [`HANDLE_MAX_BYTES`]); getting them from the
//! listening rank to the connecting one is the caller's job. Comms, requests and memory
//! registrations are [`Opaque`] boxes that each implementation downcasts to its own types.
//!
//! Implementations: [`socket`] (TCP; runs everywhere), [`plugin`] (an NCCL net plugin, a
//! shared library of ABI v6 to v12, loaded at run time) and, with the `ibverbs` feature,
//! `ib` (device discovery through rdma-core; its data path returns `Unsupported`).
//! [`open`] picks one as `NCCL_NET_PLUGIN` and `NCCL_NET` say.
//!
//! Multi-receive contract (NCCL's `plugins/net/README.md`): one `irecv` of n buffers is one
//! request, done when all n messages have arrived; messages arrive in the order they were
//! sent on the connection, and a message's tag only picks the buffer inside the oldest
//! posted receive. A buffer may be larger than its message (the real size is reported),
//! never smaller.

#[cfg(feature = "ibverbs")]
pub mod ib;
pub(crate) mod lent;
mod open;
pub mod plugin;
pub mod socket;

pub use open::open;

use std::any::Any;

use crate::Result;

/// Largest listen handle, in bytes (NCCL_NET_HANDLE_MAXSIZE).
pub const HANDLE_MAX_BYTES: usize = 128;
/// Requests in flight per comm that every implementation supports (NCCL_NET_MAX_REQUESTS).
pub const MAX_REQUESTS: usize = 32;
/// Largest message (NCCL_MAX_NET_SIZE_BYTES, 1 TiB).
pub const MAX_MESSAGE_BYTES: usize = 1 << 40;

/// Where a device can read and write (NCCL_PTR_HOST, NCCL_PTR_CUDA, NCCL_PTR_DMABUF).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointerSupport {
    pub host: bool,
    pub cuda: bool,
    pub dmabuf: bool,
}

/// Who drives the device's data path (ncclNetDeviceType): the host proxy, or GPU code.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeviceOffload {
    #[default]
    Host,
    /// The GPU unpacks received data itself (NCCL_NET_DEVICE_UNPACK).
    Unpack,
}

/// What a network device reports (ncclNetProperties_v12_t, less the fields of device
/// offload and virtual NICs that oxccl does not use).
#[derive(Clone, Debug, PartialEq)]
pub struct NetProperties {
    pub name: String,
    /// The device's sysfs path; `None` for virtual devices (such as a socket net).
    pub pci_path: Option<String>,
    /// Devices with the same guid share a port.
    pub guid: u64,
    pub ptr_support: PointerSupport,
    /// Registrations are not tied to one comm (the net keeps a registration cache).
    pub reg_is_global: bool,
    /// Received GPU data needs an `iflush` before the GPU may read it.
    pub force_flush: bool,
    pub speed_mbps: u32,
    pub port: u32,
    /// Latency in microseconds; 0 means "use the runtime's default".
    pub latency_us: f32,
    pub max_comms: u32,
    /// How many buffers one `irecv` may carry.
    pub max_recvs: usize,
    pub offload: DeviceOffload,
    /// Largest point-to-point message.
    pub max_p2p_bytes: usize,
    /// Largest collective-network message.
    pub max_coll_bytes: usize,
}

/// The kind of memory a registration covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryKind {
    Host,
    Cuda,
}

/// An opaque comm, request or registration of some implementation.
pub struct Opaque(pub Box<dyn Any + Send>);

impl std::fmt::Debug for Opaque {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The contents belong to the implementation and may not be Debug.
        f.write_str("Opaque(..)")
    }
}

impl Opaque {
    pub fn new<T: Any + Send>(value: T) -> Opaque {
        Opaque(Box::new(value))
    }

    /// The implementation's own type, or an error naming what was expected.
    pub fn get<T: Any>(&mut self, what: &'static str) -> Result<&mut T> {
        self.0.downcast_mut::<T>().ok_or_else(|| crate::Error::InvalidArgument(format!("not a {what} of this net")))
    }

    /// Like [`get`](Self::get), for a shared reference.
    pub fn get_ref<T: Any>(&self, what: &'static str) -> Result<&T> {
        self.0.downcast_ref::<T>().ok_or_else(|| crate::Error::InvalidArgument(format!("not a {what} of this net")))
    }
}

/// A communicator's settings for a net (ncclNetCommConfig_t).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommConfig {
    /// The traffic class of the communicator's connections; `None`: the net's default.
    pub traffic_class: Option<u32>,
}

/// A communicator's context in a net: what [`Net::init`] returns, passed to `listen` and
/// `connect`, and handed back to [`Net::finalize`] when the communicator goes away.
pub struct Context(Box<dyn Any + Send + Sync>);

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Context(..)")
    }
}

impl Context {
    pub fn new<T: Any + Send + Sync>(value: T) -> Context {
        Context(Box::new(value))
    }

    /// The implementation's own type, or an error naming what was expected.
    pub fn get<T: Any>(&self) -> Result<&T> {
        self.0.downcast_ref::<T>().ok_or_else(|| crate::Error::InvalidArgument("not a context of this net".into()))
    }

    /// The implementation's own type, by value (for `finalize`).
    pub fn into_inner<T: Any>(self) -> Result<Box<T>> {
        self.0.downcast::<T>().map_err(|_| crate::Error::InvalidArgument("not a context of this net".into()))
    }
}

pub type ListenComm = Opaque;
pub type SendComm = Opaque;
pub type RecvComm = Opaque;
pub type Request = Opaque;
/// A memory registration (NCCL's mhandle).
pub type MrHandle = Opaque;

/// One receive buffer of an `irecv`: where to put the message with this tag.
#[derive(Clone, Copy, Debug)]
pub struct RecvBuffer {
    pub data: *mut u8,
    pub len: usize,
    pub tag: u32,
}

/// A network transport. Implementations are shared by every communicator of a process,
/// hence `Send + Sync`; comms are used by one thread at a time (`&mut`).
pub trait Net: Send + Sync {
    /// The implementation's name ("Socket", "IB", a plugin's own), as `NCCL_NET` selects it.
    fn name(&self) -> &str;

    /// Starts a communicator's use of the net (NCCL v11's per-communicator `init`): the
    /// context its `listen` and `connect` calls take. `comm_id` tells communicators apart
    /// (NCCL passes its comm hash).
    fn init(&self, comm_id: u64, config: &CommConfig) -> Result<Context>;

    /// Ends a communicator's use of the net: releases what its context holds (connections
    /// still being made). Its comms are closed first.
    fn finalize(&self, context: Context) -> Result<()>;

    /// How many devices it drives.
    fn devices(&self) -> Result<usize>;

    fn properties(&self, device: usize) -> Result<NetProperties>;

    /// Starts listening on `device`. The handle (opaque bytes, at most
    /// [`HANDLE_MAX_BYTES`]) goes to the peer that will `connect`.
    fn listen(&self, context: &Context, device: usize) -> Result<(Vec<u8>, ListenComm)>;

    /// As [`Net::listen`], for a comm that several independent senders will share, their
    /// messages told apart by tag and sent in any order (PXN's shared comms): a Net that
    /// matches messages to receives in the order they were sent must make such a comm
    /// send each message only once its receive is posted. Nets that always do (an IB
    /// NIC's clear-to-send FIFO; NCCL's plugins) listen as usual.
    fn listen_shared(&self, context: &Context, device: usize) -> Result<(Vec<u8>, ListenComm)> {
        self.listen(context, device)
    }

    /// Connects to a peer's listen handle. `None`: not connected yet; call again with the
    /// same context and handle.
    fn connect(&self, context: &Context, device: usize, handle: &[u8]) -> Result<Option<SendComm>>;

    /// Accepts the peer that connected to `listen`. `None`: nobody yet; call again.
    fn accept(&self, listen: &mut ListenComm) -> Result<Option<RecvComm>>;

    /// Registers `data..data+len` for sends or receives on `comm` (a send or receive comm).
    /// Registering touches no memory; the later `isend`/`irecv` carry the obligations.
    fn reg_mr(&self, comm: &mut Opaque, data: *mut u8, len: usize, kind: MemoryKind) -> Result<MrHandle>;

    fn dereg_mr(&self, comm: &mut Opaque, handle: MrHandle) -> Result<()>;

    /// Starts sending `len` bytes at `data` with `tag`. `None`: too many requests in
    /// flight; try again later.
    ///
    /// # Safety
    /// Unless `len` is 0, `data..data+len` must stay valid and unchanged until `test`
    /// reports the request done or the comm is closed.
    unsafe fn isend(&self, comm: &mut SendComm, data: *const u8, len: usize, tag: u32, handle: &MrHandle) -> Result<Option<Request>>;

    /// Starts receiving one message into each buffer (1 ..= `max_recvs` of them, each with
    /// its registration in `handles`), matched by tag. `None`: try again later.
    ///
    /// # Safety
    /// Every buffer must stay valid, and untouched by anyone else, until `test` reports
    /// the request done or the comm is closed.
    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> Result<Option<Request>>;

    /// Makes received data visible to the GPU where the net wrote it behind the GPU's back
    /// (GPU memory received through RDMA; `force_flush`), for the buffers of a completed
    /// receive (`len`: the bytes received; tags are not used). `None`: nothing to wait for,
    /// which is all a net that moves host memory ever answers.
    ///
    /// # Safety
    /// As for `irecv`: the buffers stay valid until the returned request is done.
    unsafe fn iflush(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> Result<Option<Request>> {
        let _ = (comm, buffers, handles);
        Ok(None)
    }

    /// Progresses a request. Once done: the byte count of each of its buffers (for a send,
    /// the bytes sent). Asking again after done answers the same.
    fn test(&self, request: &mut Request) -> Result<Option<Vec<usize>>>;

    fn close_send(&self, comm: SendComm) -> Result<()>;
    fn close_recv(&self, comm: RecvComm) -> Result<()>;
    fn close_listen(&self, comm: ListenComm) -> Result<()>;
}
