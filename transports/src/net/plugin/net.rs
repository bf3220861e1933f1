//! [`PluginNet`]: a loaded plugin behind the [`Net`] trait. Comms, registrations and
//! requests are the plugin's pointers, boxed with what oxccl checks them against: each comm
//! counts its requests in flight (at most what the ABI version promises: 32, or 8 for v6,
//! times `maxRecvs` on the sending side) and knows its device's largest message; each
//! request remembers its outcome, since a plugin frees a request once `test` reports it done
//! and must not be asked about it again.

use std::collections::HashMap;
use std::ffi::{c_int, CStr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use super::abi::{self, CommConfigC, Fault, Ptr, Status, PTR_CUDA, PTR_HOST, TEST_SIZES, TRAFFIC_CLASS_UNDEF};
use super::logger;
use super::table::Table;
use crate::net::{CommConfig, Context, ListenComm, MemoryKind, MrHandle, Net, NetProperties, Opaque, RecvBuffer, RecvComm, Request, SendComm, HANDLE_MAX_BYTES};
use crate::{Error, Result};

/// A loaded NCCL net plugin.
pub struct PluginNet {
    /// `<file> (v<version>, "<name>")`, for messages.
    label: String,
    /// The vtable's name (what `NCCL_NET` selects).
    name: String,
    path: String,
    table: Table,
}

/// A communicator's context: the plugin's (NULL before v11), its config (v10's `connect`
/// takes it), and the handles of connections being made, each kept at one address because
/// plugins keep their connection progress inside the handle.
struct PluginContext {
    pointer: Ptr,
    config: CommConfigC,
    connecting: Mutex<HashMap<Vec<u8>, Box<[u8; HANDLE_MAX_BYTES]>>>,
}

struct PluginListen {
    pointer: Ptr,
    device: usize,
}

struct PluginComm {
    pointer: Ptr,
    /// Requests the comm may have in flight.
    max_requests: usize,
    /// Buffers one `irecv` may carry.
    max_recvs: usize,
    /// The largest message of the comm's device and of the ABI version.
    max_message: usize,
    in_flight: Arc<AtomicUsize>,
}

struct PluginRegistration {
    pointer: Ptr,
}

struct PluginRequest {
    pointer: Ptr,
    kind: RequestKind,
    outcome: Outcome,
    in_flight: Arc<AtomicUsize>,
}

enum RequestKind {
    Send { len: usize },
    Receive { capacities: Vec<usize> },
    Flush,
}

enum Outcome {
    Pending,
    Done(Vec<usize>),
    Failed(String),
}

// SAFETY: each holds pointers the plugin owns. The plugin API lets any thread use a comm, a
// context, a registration or a request (NCCL's proxy threads do), one call at a time, which
// `&mut` (and the context's mutex) ensures.
unsafe impl Send for PluginContext {}
// SAFETY: as above; the context's plugin pointer is only passed along, and its map is locked.
unsafe impl Sync for PluginContext {}
// SAFETY: as above.
unsafe impl Send for PluginListen {}
// SAFETY: as above.
unsafe impl Send for PluginComm {}
// SAFETY: as above.
unsafe impl Send for PluginRegistration {}
// SAFETY: as above.
unsafe impl Send for PluginRequest {}

impl PluginNet {
    pub(super) fn new(path: String, table: Table) -> Result<PluginNet> {
        if table.name.is_null() {
            return Err(Error::Plugin { plugin: path, call: format!("ncclNetPlugin_v{}", table.version), reason: "its name is NULL".into() });
        }
        // SAFETY: non-null, and a plugin's name is a NUL-terminated static string.
        let name = unsafe { CStr::from_ptr(table.name) }.to_string_lossy().into_owned();
        Ok(PluginNet { label: format!("{path} (v{}, \"{name}\")", table.version), name, path, table })
    }

    /// The library's file, its ABI version and its name, for messages.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The file the plugin was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The ABI version oxccl drives it through.
    pub fn version(&self) -> u32 {
        self.table.version
    }

    fn error(&self, call: &str, fault: impl std::fmt::Display) -> Error {
        Error::Plugin { plugin: self.label.clone(), call: call.into(), reason: fault.to_string() }
    }

    /// Checks a C count from the plugin.
    fn count(&self, call: &str, what: &str, value: c_int) -> Result<usize> {
        usize::try_from(value).map_err(|_| self.error(call, format!("{what} is {value}")))
    }

    fn c_int(&self, call: &str, what: &str, value: u64) -> Result<c_int> {
        c_int::try_from(value).map_err(|_| self.error(call, format!("{what} {value} does not fit the ABI's int")))
    }

    /// A comm the plugin gave, with the limits of its device.
    fn comm(&self, call: &str, pointer: Ptr, device: usize, sending: bool) -> Result<Opaque> {
        let properties = self.properties(device)?;
        let max_recvs = properties.max_recvs;
        // The multi-receive contract: the sending side takes max_recvs times as many.
        let max_requests = self.table.max_requests * if sending { max_recvs } else { 1 };
        let max_message = properties.max_p2p_bytes.min(self.table.max_message);
        if pointer.is_null() {
            return Err(self.error(call, "it succeeded but gave a NULL comm"));
        }
        Ok(Opaque::new(PluginComm { pointer, max_requests, max_recvs, max_message, in_flight: Arc::default() }))
    }

    fn request(&self, pointer: Ptr, kind: RequestKind, in_flight: &Arc<AtomicUsize>) -> Request {
        in_flight.fetch_add(1, Ordering::Relaxed);
        Opaque::new(PluginRequest { pointer, kind, outcome: Outcome::Pending, in_flight: in_flight.clone() })
    }

    /// The sizes a completed request reports, checked against its buffers.
    fn sizes(&self, kind: &RequestKind, reported: &[c_int]) -> Result<Vec<usize>> {
        match kind {
            // What NCCL's proxy uses of a send is that it is done; its size is the caller's.
            RequestKind::Send { len } => Ok(vec![*len]),
            RequestKind::Flush => Ok(Vec::new()),
            RequestKind::Receive { capacities } => capacities
                .iter()
                .zip(reported)
                .enumerate()
                .map(|(index, (&capacity, &size))| {
                    let size = self.count("test", &format!("the size of receive buffer {index}"), size)?;
                    if size > capacity {
                        return Err(self.error("test", format!("it reports {size} bytes received into buffer {index} of {capacity} bytes")));
                    }
                    Ok(size)
                })
                .collect(),
        }
    }

    /// Closes a comm of type `T` (the downcast proves it is one of this plugin's kind).
    fn close<T: 'static>(&self, which: &'static str, comm: Opaque, pointer: fn(&T) -> Ptr) -> Result<()> {
        let comm = comm.0.downcast::<T>().map_err(|_| Error::InvalidArgument(format!("{which}: not a comm of that kind of {}", self.label)))?;
        // SAFETY: a live comm of this plugin, closed once (the comm is consumed).
        unsafe { self.table.close(which, pointer(&comm)) }.map_err(|fault| self.error(which, fault))
    }
}

/// The profiler callback handed to plugins: oxccl records no plugin events.
unsafe extern "C" fn no_profiler(event: *mut Ptr, _kind: c_int, _parent: Ptr, _plugin_id: i64, _data: Ptr) -> Status {
    if !event.is_null() {
        // SAFETY: the plugin passes a valid place for the event handle.
        unsafe { *event = std::ptr::null_mut() };
    }
    abi::SUCCESS
}

impl Net for PluginNet {
    fn name(&self) -> &str {
        &self.name
    }

    fn init(&self, comm_id: u64, config: &CommConfig) -> Result<Context> {
        let traffic_class = match config.traffic_class {
            Some(class) => self.c_int("init", "traffic class", class.into())?,
            None => TRAFFIC_CLASS_UNDEF,
        };
        let mut config = CommConfigC { traffic_class };
        let mut pointer: Ptr = std::ptr::null_mut();
        // SAFETY: valid places for the context and config; the logger and profiler are
        // functions of this library, callable for ever.
        unsafe { self.table.init(&mut pointer, comm_id, &mut config, logger::logger(), Some(no_profiler)) }.map_err(|fault| self.error("init", fault))?;
        Ok(Context::new(PluginContext { pointer, config, connecting: Mutex::default() }))
    }

    fn finalize(&self, context: Context) -> Result<()> {
        let context = context.into_inner::<PluginContext>()?;
        // SAFETY: the context came from this plugin's init (the downcast says it is a plugin
        // context) and is finalized once (it is consumed).
        unsafe { self.table.finalize(context.pointer) }.map_err(|fault| self.error("finalize", fault))
    }

    fn devices(&self) -> Result<usize> {
        let mut count: c_int = 0;
        // SAFETY: a valid int to fill.
        unsafe { self.table.devices(&mut count) }.map_err(|fault| self.error("devices", fault))?;
        self.count("devices", "the device count", count)
    }

    fn properties(&self, device: usize) -> Result<NetProperties> {
        let device_c = self.c_int("getProperties", "device", device as u64)?;
        let raw = self.table.properties(device_c).map_err(|fault| self.error("getProperties", fault))?;
        // SAFETY: the plugin's strings are NUL-terminated or NULL (the ABI's rule).
        unsafe { raw.check() }.map_err(|reason| self.error(&format!("getProperties({device})"), reason))
    }

    fn listen(&self, context: &Context, device: usize) -> Result<(Vec<u8>, ListenComm)> {
        let context = context.get::<PluginContext>()?;
        let device_c = self.c_int("listen", "device", device as u64)?;
        let mut handle = [0u8; HANDLE_MAX_BYTES];
        let mut listen: Ptr = std::ptr::null_mut();
        // SAFETY: a handle buffer of the ABI's size and a valid place for the listen comm.
        unsafe { self.table.listen(context.pointer, device_c, handle.as_mut_ptr().cast(), &mut listen) }.map_err(|fault| self.error("listen", fault))?;
        if listen.is_null() {
            return Err(self.error("listen", "it succeeded but gave a NULL listen comm"));
        }
        Ok((handle.to_vec(), Opaque::new(PluginListen { pointer: listen, device })))
    }

    fn connect(&self, context: &Context, device: usize, handle: &[u8]) -> Result<Option<SendComm>> {
        let context = context.get::<PluginContext>()?;
        if handle.len() > HANDLE_MAX_BYTES {
            return Err(Error::InvalidArgument(format!("a listen handle of {} bytes (at most {HANDLE_MAX_BYTES})", handle.len())));
        }
        let device_c = self.c_int("connect", "device", device as u64)?;
        let mut connecting = context.connecting.lock().map_err(|_| Error::Closed("the communicator's pending connections are unusable after a panic".into()))?;
        let buffer = connecting.entry(handle.to_vec()).or_insert_with(|| {
            let mut buffer = Box::new([0u8; HANDLE_MAX_BYTES]);
            buffer[..handle.len()].copy_from_slice(handle);
            buffer
        });
        let mut config = context.config;
        let mut send: Ptr = std::ptr::null_mut();
        // SAFETY: the handle stays at one address for every call of this connection (boxed
        // in the context), config and send are valid places.
        let outcome = unsafe { self.table.connect(context.pointer, &mut config, device_c, buffer.as_mut_ptr().cast(), &mut send) };
        if outcome.is_err() || !send.is_null() {
            connecting.remove(handle);
        }
        outcome.map_err(|fault| self.error("connect", fault))?;
        if send.is_null() {
            return Ok(None);
        }
        drop(connecting);
        self.comm("connect", send, device, true).map(Some)
    }

    fn accept(&self, listen: &mut ListenComm) -> Result<Option<RecvComm>> {
        let listen = listen.get::<PluginListen>("listen comm")?;
        let mut recv: Ptr = std::ptr::null_mut();
        // SAFETY: a live listen comm of this plugin and a valid place for the receive comm.
        unsafe { self.table.accept(listen.pointer, &mut recv) }.map_err(|fault| self.error("accept", fault))?;
        if recv.is_null() {
            return Ok(None);
        }
        self.comm("accept", recv, listen.device, false).map(Some)
    }

    fn reg_mr(&self, comm: &mut Opaque, data: *mut u8, len: usize, kind: MemoryKind) -> Result<MrHandle> {
        let comm = comm.get::<PluginComm>("send or receive comm")?;
        let kind = match kind {
            MemoryKind::Host => PTR_HOST,
            MemoryKind::Cuda => PTR_CUDA,
        };
        let mut registration: Ptr = std::ptr::null_mut();
        // SAFETY: a live comm and a valid place; registering reads no memory (the plugin API).
        unsafe { self.table.reg_mr(comm.pointer, data.cast(), len, kind, &mut registration) }.map_err(|fault| self.error("regMr", fault))?;
        // A NULL registration is valid: nets that need none answer it (NCCL's socket net).
        Ok(Opaque::new(PluginRegistration { pointer: registration }))
    }

    fn dereg_mr(&self, comm: &mut Opaque, handle: MrHandle) -> Result<()> {
        let comm = comm.get::<PluginComm>("send or receive comm")?;
        let registration = handle.get_ref::<PluginRegistration>("memory registration")?;
        // SAFETY: a registration of this plugin (the downcast says so) on this comm,
        // deregistered once (the handle is consumed).
        unsafe { self.table.dereg_mr(comm.pointer, registration.pointer) }.map_err(|fault| self.error("deregMr", fault))
    }

    unsafe fn isend(&self, comm: &mut SendComm, data: *const u8, len: usize, tag: u32, handle: &MrHandle) -> Result<Option<Request>> {
        let comm = comm.get::<PluginComm>("send comm")?;
        let registration = handle.get_ref::<PluginRegistration>("memory registration")?;
        if len > comm.max_message {
            return Err(self.error("isend", Fault::Range(format!("a message of {len} bytes (this device and ABI version take at most {})", comm.max_message))));
        }
        let tag = self.c_int("isend", "tag", tag.into())?;
        if comm.in_flight.load(Ordering::Relaxed) >= comm.max_requests {
            return Ok(None);
        }
        let mut request: Ptr = std::ptr::null_mut();
        // SAFETY: the caller's isend contract is the plugin API's (the bytes stay valid until
        // the request is done); the plugin does not write through a send's data pointer.
        unsafe { self.table.isend(comm.pointer, data.cast_mut().cast(), len, tag, registration.pointer, &mut request) }.map_err(|fault| self.error("isend", fault))?;
        if request.is_null() {
            return Ok(None);
        }
        Ok(Some(self.request(request, RequestKind::Send { len }, &comm.in_flight)))
    }

    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> Result<Option<Request>> {
        let comm = comm.get::<PluginComm>("receive comm")?;
        if buffers.is_empty() || buffers.len() > comm.max_recvs || handles.len() != buffers.len() {
            return Err(Error::InvalidArgument(format!("irecv of {} buffers with {} registrations (this device takes 1..={})", buffers.len(), handles.len(), comm.max_recvs)));
        }
        if let Some(buffer) = buffers.iter().find(|buffer| buffer.len > comm.max_message) {
            return Err(self.error("irecv", Fault::Range(format!("a receive buffer of {} bytes (at most {})", buffer.len, comm.max_message))));
        }
        if comm.in_flight.load(Ordering::Relaxed) >= comm.max_requests {
            return Ok(None);
        }
        let mut data: Vec<Ptr> = buffers.iter().map(|buffer| buffer.data.cast()).collect();
        let sizes: Vec<usize> = buffers.iter().map(|buffer| buffer.len).collect();
        let mut tags = buffers.iter().map(|buffer| self.c_int("irecv", "tag", buffer.tag.into())).collect::<Result<Vec<c_int>>>()?;
        let mut registrations =
            handles.iter().map(|handle| Ok(handle.get_ref::<PluginRegistration>("memory registration")?.pointer)).collect::<Result<Vec<Ptr>>>()?;
        let mut request: Ptr = std::ptr::null_mut();
        // SAFETY: the caller's irecv contract is the plugin API's (the buffers stay valid and
        // untouched until the request is done); the arrays are as long as the count passed.
        unsafe { self.table.irecv(comm.pointer, &mut data, &sizes, &mut tags, &mut registrations, &mut request) }.map_err(|fault| self.error("irecv", fault))?;
        if request.is_null() {
            return Ok(None);
        }
        Ok(Some(self.request(request, RequestKind::Receive { capacities: sizes }, &comm.in_flight)))
    }

    unsafe fn iflush(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], handles: &[&MrHandle]) -> Result<Option<Request>> {
        let comm = comm.get::<PluginComm>("receive comm")?;
        if handles.len() != buffers.len() {
            return Err(Error::InvalidArgument(format!("iflush of {} buffers with {} registrations", buffers.len(), handles.len())));
        }
        let mut data: Vec<Ptr> = buffers.iter().map(|buffer| buffer.data.cast()).collect();
        let mut sizes = buffers.iter().map(|buffer| self.c_int("iflush", "size", buffer.len as u64)).collect::<Result<Vec<c_int>>>()?;
        let mut registrations =
            handles.iter().map(|handle| Ok(handle.get_ref::<PluginRegistration>("memory registration")?.pointer)).collect::<Result<Vec<Ptr>>>()?;
        let mut request: Ptr = std::ptr::null_mut();
        // SAFETY: the caller's iflush contract is the plugin API's; the arrays are as long as
        // the count passed.
        unsafe { self.table.iflush(comm.pointer, &mut data, &mut sizes, &mut registrations, &mut request) }.map_err(|fault| self.error("iflush", fault))?;
        if request.is_null() {
            return Ok(None);
        }
        Ok(Some(self.request(request, RequestKind::Flush, &comm.in_flight)))
    }

    fn test(&self, request: &mut Request) -> Result<Option<Vec<usize>>> {
        let request = request.get::<PluginRequest>("request")?;
        match &request.outcome {
            Outcome::Done(sizes) => return Ok(Some(sizes.clone())),
            Outcome::Failed(reason) => return Err(self.error("test", format!("failed before: {reason}"))),
            Outcome::Pending => {}
        }
        let buffers = match &request.kind {
            RequestKind::Receive { capacities } => capacities.len(),
            _ => 1,
        };
        let mut sizes: Vec<c_int> = vec![-1; buffers.max(TEST_SIZES)];
        let mut done: c_int = 0;
        // SAFETY: a live request of this plugin (never tested again once done), a valid done
        // flag and a sizes array of at least the length NCCL passes.
        let outcome = unsafe { self.table.test(request.pointer, &mut done, sizes.as_mut_ptr()) };
        let result = match outcome {
            Err(fault) => Err(self.error("test", fault)),
            Ok(()) if done == 0 => return Ok(None),
            Ok(()) => self.sizes(&request.kind, &sizes[..buffers]),
        };
        // Done or failed: the plugin is finished with the request either way.
        request.in_flight.fetch_sub(1, Ordering::Relaxed);
        request.outcome = match &result {
            Ok(sizes) => Outcome::Done(sizes.clone()),
            Err(Error::Plugin { reason, .. }) => Outcome::Failed(reason.clone()),
            Err(other) => Outcome::Failed(other.to_string()),
        };
        result.map(Some)
    }

    fn close_send(&self, comm: SendComm) -> Result<()> {
        self.close("closeSend", comm, |comm: &PluginComm| comm.pointer)
    }

    fn close_recv(&self, comm: RecvComm) -> Result<()> {
        self.close("closeRecv", comm, |comm: &PluginComm| comm.pointer)
    }

    fn close_listen(&self, comm: ListenComm) -> Result<()> {
        self.close("closeListen", comm, |listen: &PluginListen| listen.pointer)
    }
}
