//! The plugin's calls in Rust terms, shared by every exported ABI version: each takes the C
//! arguments as NCCL passes them, checks them (NULL pointers, negative counts and tags, a
//! device out of range) and drives the socket net. Comms, requests, registrations and
//! contexts cross the ABI as boxes turned into pointers; a request's box is freed when
//! `test` reports it done, as the plugin API says.
//!
//! [`guard`] runs a call: its error becomes an `ncclResult_t` and a warning through NCCL's
//! logger, and a panic is caught there, so nothing unwinds into NCCL.

use std::ffi::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use oxccl_transports::net::plugin::abi::{self, CommConfigC, Logger, Ptr, RawProperties, Status, PTR_CUDA, PTR_HOST, TRAFFIC_CLASS_UNDEF};
use oxccl_transports::net::{CommConfig, Context, MemoryKind, Net, Opaque, RecvBuffer, HANDLE_MAX_BYTES};
use oxccl_transports::Error;

use crate::log;
use crate::state::{plugin, Plugin};

/// Why a call failed: the `ncclResult_t` to answer and what to log.
pub struct Failure {
    status: Status,
    message: String,
}

impl Failure {
    /// NCCL passed something the ABI rules out.
    fn usage(message: impl Into<String>) -> Failure {
        Failure { status: abi::INVALID_ARGUMENT, message: message.into() }
    }

    fn internal(message: impl Into<String>) -> Failure {
        Failure { status: abi::INTERNAL_ERROR, message: message.into() }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        let status = match &error {
            Error::Io { .. } => abi::SYSTEM_ERROR,
            Error::Closed(_) | Error::PeerExited { .. } | Error::Timeout { .. } => abi::REMOTE_ERROR,
            _ => abi::INTERNAL_ERROR,
        };
        Failure { status, message: error.to_string() }
    }
}

type Outcome = Result<(), Failure>;

/// Runs the body of the exported call `call`: success, or the failure's status after a
/// warning naming the call. A panic is caught and reported as `ncclInternalError`.
pub fn guard(call: &str, body: impl FnOnce() -> Outcome) -> Status {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => abi::SUCCESS,
        Ok(Err(failure)) => {
            tracing::warn!(target: "oxccl::net", "{call}: {}", failure.message);
            failure.status
        }
        Err(panic) => {
            let what = panic.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| panic.downcast_ref::<String>().cloned()).unwrap_or_default();
            tracing::warn!(target: "oxccl::net", "{call}: internal error (a panic, caught): {what}");
            abi::INTERNAL_ERROR
        }
    }
}

fn state() -> Result<&'static Plugin, Failure> {
    plugin().map_err(Failure::internal)
}

/// Writes `value` to NCCL's out-parameter `place`.
///
/// # Safety
/// `place` is NULL (an error) or valid for a write.
pub unsafe fn put<T>(place: *mut T, what: &str, value: T) -> Outcome {
    if place.is_null() {
        return Err(Failure::usage(format!("NULL {what}")));
    }
    // SAFETY: non-null and valid for a write (the caller's promise).
    unsafe { place.write(value) };
    Ok(())
}

/// A box the plugin handed out, back from its pointer.
///
/// # Safety
/// `pointer` is NULL (an error) or came from `Box::into_raw` of a `T` by this plugin and is
/// not in use by another call.
unsafe fn borrow<'a, T>(pointer: Ptr, what: &str) -> Result<&'a mut T, Failure> {
    if pointer.is_null() {
        return Err(Failure::usage(format!("NULL {what}")));
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { &mut *pointer.cast::<T>() })
}

fn boxed<T>(value: T) -> Ptr {
    Box::into_raw(Box::new(value)).cast()
}

fn device(device: c_int) -> Result<usize, Failure> {
    usize::try_from(device).map_err(|_| Failure::usage(format!("device {device}")))
}

/// `init` for v11 and later: one context per communicator.
///
/// # Safety
/// `context` is valid for a write; `config` is NULL or valid.
pub unsafe fn init(context: *mut Ptr, comm_id: u64, config: *const CommConfigC, logger: Logger) -> Outcome {
    log::install(logger);
    let net = &state()?.net;
    let traffic_class = match config.is_null() {
        true => TRAFFIC_CLASS_UNDEF,
        // SAFETY: non-null, and valid (the caller's promise).
        false => unsafe { (*config).traffic_class },
    };
    let traffic_class = match traffic_class {
        TRAFFIC_CLASS_UNDEF => None,
        class => Some(u32::try_from(class).map_err(|_| Failure::usage(format!("traffic class {class}")))?),
    };
    let created = net.init(comm_id, &CommConfig { traffic_class })?;
    tracing::info!(target: "oxccl::init", "initialized for communicator {comm_id:#x}");
    // SAFETY: the caller's promise.
    unsafe { put(context, "context", boxed(created)) }
}

/// `init` before v11: the process's one context.
pub fn init_process(logger: Logger) -> Outcome {
    log::install(logger);
    state().map(|_| ())
}

/// # Safety
/// `context` came from [`init`] and is finalized once.
pub unsafe fn finalize(context: Ptr) -> Outcome {
    if context.is_null() {
        return Err(Failure::usage("NULL context"));
    }
    // SAFETY: a box of ours (the caller's promise), taken back once.
    let context = unsafe { Box::from_raw(context.cast::<Context>()) };
    let net = &state()?.net;
    net.finalize(*context)?;
    // What the process's net did so far: whether messages waited for notices, or arrived
    // before their receives and were copied twice.
    let done = net.stats().snapshot();
    tracing::info!(
        target: "oxccl::net",
        "so far in this process: {} messages sent, {} isend calls answered \"later\" for want of a notice, {} reads of notices, {} asks for them; {} irecvs of {} buffers ({} grouped), {} writes of their notices; {} messages ({} bytes) arrived before their receives; {} bytes of bodies copied out of the receive stage",
        done.isend_calls,
        done.sends_held,
        done.notice_reads,
        done.asks,
        done.irecv_calls,
        done.irecv_buffers,
        done.irecv_grouped,
        done.notice_writes,
        done.early_messages,
        done.early_bytes,
        done.staged_body_bytes
    );
    Ok(())
}

/// # Safety
/// `count` is valid for a write.
pub unsafe fn devices(count: *mut c_int) -> Outcome {
    let devices = state()?.net.devices()?;
    let devices = c_int::try_from(devices).map_err(|_| Failure::internal(format!("{devices} devices")))?;
    // SAFETY: the caller's promise.
    unsafe { put(count, "device count", devices) }
}

/// A device's properties as C values (each version writes its own struct from them).
pub fn properties(index: c_int) -> Result<RawProperties, Failure> {
    let plugin = state()?;
    let device = device(index)?;
    let properties = plugin.net.properties(device)?;
    let (name, pci_path) = plugin.names(device).ok_or_else(|| Failure::usage(format!("device {index}")))?;
    RawProperties::from_properties(&properties, index, name, pci_path).map_err(Failure::internal)
}

/// The context of a call: the communicator's (v11 and later) or the process's.
///
/// # Safety
/// `context` is NULL (the process's) or came from [`init`] and is not finalized.
unsafe fn context<'a>(context: Ptr) -> Result<&'a Context, Failure> {
    if context.is_null() {
        return Ok(&state()?.process_context);
    }
    // SAFETY: the caller's promise.
    Ok(unsafe { &*context.cast::<Context>() })
}

/// # Safety
/// `handle` holds `HANDLE_MAX_BYTES` writable bytes, `listen` is valid for a write, and
/// `context` is NULL or live.
pub unsafe fn listen(context_pointer: Ptr, index: c_int, handle: Ptr, listen: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let context = unsafe { context(context_pointer) }?;
    let (bytes, comm) = state()?.net.listen(context, device(index)?)?;
    if handle.is_null() || bytes.len() > HANDLE_MAX_BYTES {
        return Err(Failure::usage(format!("a handle of {} bytes for a {} buffer", bytes.len(), if handle.is_null() { "NULL" } else { "128-byte" })));
    }
    // SAFETY: the handle buffer holds HANDLE_MAX_BYTES bytes (the ABI's size).
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), handle.cast::<u8>(), bytes.len()) };
    // SAFETY: the caller's promise.
    unsafe { put(listen, "listen comm", boxed(comm)) }
}

/// # Safety
/// `handle` holds `HANDLE_MAX_BYTES` readable bytes, `send` is valid for a write, and
/// `context` is NULL or live.
pub unsafe fn connect(context_pointer: Ptr, index: c_int, handle: Ptr, send: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let context = unsafe { context(context_pointer) }?;
    if handle.is_null() {
        return Err(Failure::usage("NULL handle"));
    }
    // SAFETY: the handle buffer holds HANDLE_MAX_BYTES bytes (the ABI's size).
    let bytes = unsafe { std::slice::from_raw_parts(handle.cast::<u8>(), HANDLE_MAX_BYTES) };
    let comm = state()?.net.connect(context, device(index)?, bytes)?;
    // SAFETY: the caller's promise.
    unsafe { put(send, "send comm", comm.map_or(std::ptr::null_mut(), boxed)) }
}

/// # Safety
/// `listen` came from [`listen`] and `recv` is valid for a write.
pub unsafe fn accept(listen: Ptr, recv: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let listen = unsafe { borrow::<Opaque>(listen, "listen comm") }?;
    let comm = state()?.net.accept(listen)?;
    // SAFETY: the caller's promise.
    unsafe { put(recv, "receive comm", comm.map_or(std::ptr::null_mut(), boxed)) }
}

/// # Safety
/// `comm` came from [`connect`] or [`accept`] and `registration` is valid for a write.
pub unsafe fn reg_mr(comm: Ptr, data: Ptr, size: usize, kind: c_int, registration: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let comm = unsafe { borrow::<Opaque>(comm, "comm") }?;
    let kind = match kind {
        PTR_HOST => MemoryKind::Host,
        PTR_CUDA => MemoryKind::Cuda,
        other => return Err(Failure::usage(format!("memory type {other} (NCCL_PTR_HOST or NCCL_PTR_CUDA)"))),
    };
    let handle = state()?.net.reg_mr(comm, data.cast(), size, kind)?;
    // SAFETY: the caller's promise.
    unsafe { put(registration, "registration", boxed(handle)) }
}

/// # Safety
/// `registration` came from [`reg_mr`] on `comm` and is deregistered once.
pub unsafe fn dereg_mr(comm: Ptr, registration: Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let comm = unsafe { borrow::<Opaque>(comm, "comm") }?;
    if registration.is_null() {
        return Err(Failure::usage("NULL registration"));
    }
    // SAFETY: a box of ours (the caller's promise), taken back once.
    let registration = unsafe { Box::from_raw(registration.cast::<Opaque>()) };
    Ok(state()?.net.dereg_mr(comm, *registration)?)
}

fn tag(tag: c_int) -> Result<u32, Failure> {
    u32::try_from(tag).map_err(|_| Failure::usage(format!("tag {tag}")))
}

/// # Safety
/// The plugin API's: `comm` came from [`connect`], `registration` from [`reg_mr`], and
/// `data..data+size` stays valid until the request is done.
pub unsafe fn isend(comm: Ptr, data: Ptr, size: usize, message_tag: c_int, registration: Ptr, request: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let (comm, registration) = unsafe { (borrow::<Opaque>(comm, "send comm")?, borrow::<Opaque>(registration, "registration")?) };
    // SAFETY: the caller's promise is isend's contract.
    let sent = unsafe { state()?.net.isend(comm, data.cast::<u8>().cast_const(), size, tag(message_tag)?, registration) }?;
    // SAFETY: the caller's promise.
    unsafe { put(request, "request", sent.map_or(std::ptr::null_mut(), boxed)) }
}

/// # Safety
/// The plugin API's: `comm` came from [`accept`], the arrays hold `n` entries, and every
/// buffer stays valid and untouched until the request is done.
pub unsafe fn irecv(comm: Ptr, n: c_int, data: *mut Ptr, sizes: *const usize, tags: *const c_int, registrations: *const Ptr, request: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    let comm = unsafe { borrow::<Opaque>(comm, "receive comm") }?;
    let n = usize::try_from(n).map_err(|_| Failure::usage(format!("irecv of {n} buffers")))?;
    if n == 0 || data.is_null() || sizes.is_null() || tags.is_null() || registrations.is_null() {
        return Err(Failure::usage(format!("irecv of {n} buffers with a NULL array")));
    }
    let mut buffers = Vec::with_capacity(n);
    let mut handles = Vec::with_capacity(n);
    for index in 0..n {
        // SAFETY: the arrays hold n entries (the caller's promise).
        let (buffer, len, buffer_tag, handle) = unsafe { (*data.add(index), *sizes.add(index), *tags.add(index), *registrations.add(index)) };
        buffers.push(RecvBuffer { data: buffer.cast(), len, tag: tag(buffer_tag)? });
        // SAFETY: a registration of ours (the caller's promise), only read.
        handles.push(&*unsafe { borrow::<Opaque>(handle, "registration") }?);
    }
    // SAFETY: the caller's promise is irecv's contract.
    let received = unsafe { state()?.net.irecv(comm, &buffers, &handles) }?;
    // SAFETY: the caller's promise.
    unsafe { put(request, "request", received.map_or(std::ptr::null_mut(), boxed)) }
}

/// Nothing to flush: the socket net writes host memory with the CPU (and offers no GPU
/// memory), so there is no request.
///
/// # Safety
/// `request` is valid for a write.
pub unsafe fn iflush(request: *mut Ptr) -> Outcome {
    // SAFETY: the caller's promise.
    unsafe { put(request, "request", std::ptr::null_mut()) }
}

/// # Safety
/// `request` came from [`isend`] or [`irecv`] and was not reported done; `done` is valid
/// for a write and `sizes` is NULL or holds an int per buffer of the request.
pub unsafe fn test(request: Ptr, done: *mut c_int, sizes: *mut c_int) -> Outcome {
    // SAFETY: the caller's promise.
    let pending = unsafe { borrow::<Opaque>(request, "request") }?;
    let Some(completed) = state()?.net.test(pending)? else {
        // SAFETY: the caller's promise.
        return unsafe { put(done, "done flag", 0) };
    };
    if !sizes.is_null() {
        for (index, &size) in completed.iter().enumerate() {
            let size = c_int::try_from(size).map_err(|_| Failure::internal(format!("{size} bytes do not fit test's int sizes")))?;
            // SAFETY: an int per buffer (the caller's promise).
            unsafe { *sizes.add(index) = size };
        }
    }
    // Done: the request is NCCL's no longer.
    // SAFETY: a box of ours (the caller's promise), taken back once: NCCL never tests a
    // request after it is reported done.
    drop(unsafe { Box::from_raw(request.cast::<Opaque>()) });
    // SAFETY: the caller's promise.
    unsafe { put(done, "done flag", 1) }
}

/// `closeSend`, `closeRecv` or `closeListen`, as `which` names.
///
/// # Safety
/// `comm` came from [`connect`], [`accept`] or [`listen`] (as `which` says) and is closed
/// once.
pub unsafe fn close(which: &str, comm: Ptr) -> Outcome {
    if comm.is_null() {
        return Err(Failure::usage("NULL comm"));
    }
    // SAFETY: a box of ours (the caller's promise), taken back once.
    let comm = *unsafe { Box::from_raw(comm.cast::<Opaque>()) };
    let net = &state()?.net;
    Ok(match which {
        "closeSend" => net.close_send(comm),
        "closeRecv" => net.close_recv(comm),
        _ => net.close_listen(comm),
    }?)
}
