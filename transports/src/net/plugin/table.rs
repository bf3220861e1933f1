//! A loaded plugin's calls in one shape, whatever its ABI version. Each version file builds
//! a [`Table`] from its vtable, choosing for every call the C shape its version has
//! ([`InitCall`], [`ConnectCall`], ...); the table converts arguments to that shape (sizes
//! checked, never cast) and emulates what older versions lack: per-communicator `init` and
//! `finalize` (before v11 a plugin is initialized once per process and has no context) and
//! the comm config that v10 took in `connect`.

use std::ffi::{c_char, c_int};

use super::abi::*;
use crate::net::{MAX_MESSAGE_BYTES, MAX_REQUESTS};

#[derive(Clone, Copy)]
pub(super) enum InitCall {
    Once(InitOnceFn),
    OnceProfiled(InitOnceProfiledFn),
    PerCommunicator(InitFn),
}

#[derive(Clone, Copy)]
pub(super) enum ListenCall {
    Plain(ListenFn),
    Context(ListenContextFn),
}

#[derive(Clone, Copy)]
pub(super) enum ConnectCall {
    Bare(ConnectBareFn),
    Plain(ConnectFn),
    Config(ConnectConfigFn),
    Context(ConnectContextFn),
}

#[derive(Clone, Copy)]
pub(super) enum AcceptCall {
    Bare(AcceptBareFn),
    Device(AcceptFn),
}

#[derive(Clone, Copy)]
pub(super) enum RegMrCall {
    Int(RegMrIntFn),
    Size(RegMrFn),
}

#[derive(Clone, Copy)]
pub(super) enum IsendCall {
    Int(IsendIntFn),
    Size(IsendSizeFn),
    Profiled(IsendFn),
}

#[derive(Clone, Copy)]
pub(super) enum IrecvCall {
    Int(IrecvIntFn),
    Size(IrecvSizeFn),
    Profiled(IrecvFn),
}

/// `getProperties` through the version's own struct.
pub(super) type PropertiesCall = Box<dyn Fn(c_int) -> Result<RawProperties, Fault> + Send + Sync>;

/// A plugin's calls. `None`: the plugin left the call NULL.
pub(super) struct Table {
    pub version: u32,
    /// The vtable's `name`.
    pub name: *const c_char,
    /// Requests in flight per comm that the version promises.
    pub max_requests: usize,
    /// The largest message the version's C types can carry.
    pub max_message: usize,
    pub init: Option<InitCall>,
    /// v11 and later; nothing to call before.
    pub finalize: Option<FinalizeFn>,
    pub devices: Option<DevicesFn>,
    pub properties: Option<PropertiesCall>,
    pub listen: Option<ListenCall>,
    pub connect: Option<ConnectCall>,
    pub accept: Option<AcceptCall>,
    pub reg_mr: Option<RegMrCall>,
    pub dereg_mr: Option<DeregMrFn>,
    pub isend: Option<IsendCall>,
    pub irecv: Option<IrecvCall>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub close_send: Option<CloseFn>,
    pub close_recv: Option<CloseFn>,
    pub close_listen: Option<CloseFn>,
    /// The outcome of a pre-v11 plugin's one `init`.
    pub once: InitOnce,
}

// SAFETY: the table holds function pointers and a pointer to the plugin's static name; the
// plugin API lets any thread call a plugin, and the library is never unloaded.
unsafe impl Send for Table {}
// SAFETY: as above; nothing in the table is written after loading.
unsafe impl Sync for Table {}

impl Table {
    /// A table of `version` with no calls yet, and the version's limits: 32 requests per
    /// comm (8 for v6), messages of at most 1 TiB (1 GiB while sizes were `int`).
    pub fn empty(version: u32, name: *const c_char) -> Table {
        Table {
            version,
            name,
            max_requests: if version == 6 { 8 } else { MAX_REQUESTS },
            max_message: if version <= 8 { INT_ERA_MAX_BYTES } else { MAX_MESSAGE_BYTES },
            init: None,
            finalize: None,
            devices: None,
            properties: None,
            listen: None,
            connect: None,
            accept: None,
            reg_mr: None,
            dereg_mr: None,
            isend: None,
            irecv: None,
            iflush: None,
            test: None,
            close_send: None,
            close_recv: None,
            close_listen: None,
            once: InitOnce::default(),
        }
    }

    /// The calls oxccl needs that the plugin left NULL (`iflush` is needed only for GPU
    /// memory, and asked for then).
    pub fn missing(&self) -> Vec<&'static str> {
        let absent = [
            ("init", self.init.is_none()),
            ("devices", self.devices.is_none()),
            ("getProperties", self.properties.is_none()),
            ("listen", self.listen.is_none()),
            ("connect", self.connect.is_none()),
            ("accept", self.accept.is_none()),
            ("regMr", self.reg_mr.is_none()),
            ("deregMr", self.dereg_mr.is_none()),
            ("isend", self.isend.is_none()),
            ("irecv", self.irecv.is_none()),
            ("test", self.test.is_none()),
            ("closeSend", self.close_send.is_none()),
            ("closeRecv", self.close_recv.is_none()),
            ("closeListen", self.close_listen.is_none()),
            ("finalize", self.version >= 11 && self.finalize.is_none()),
        ];
        absent.iter().filter(|(_, absent)| *absent).map(|(name, _)| *name).collect()
    }

    /// `init` for one communicator. Before v11 the plugin's own `init` runs on the first
    /// call only, every later call answers its outcome, and the context is NULL.
    ///
    /// # Safety
    /// `context` and `config` point to valid places; `logger` and `profiler` stay callable
    /// for as long as the plugin is loaded.
    pub unsafe fn init(&self, context: *mut Ptr, comm_id: u64, config: *mut CommConfigC, logger: Logger, profiler: ProfilerCallback) -> Call {
        let init = call(self.init, "init")?;
        if !matches!(init, InitCall::PerCommunicator(_)) {
            // SAFETY: a valid place for the context (the caller's promise).
            unsafe { *context = std::ptr::null_mut() };
        }
        match init {
            // SAFETY: the version's init with what it takes (the caller's promise).
            InitCall::Once(init) => self.once.call(|| unsafe { init(logger) }),
            // SAFETY: as above.
            InitCall::OnceProfiled(init) => self.once.call(|| unsafe { init(logger, profiler) }),
            // SAFETY: as above.
            InitCall::PerCommunicator(init) => status(unsafe { init(context, comm_id, config, logger, profiler) }),
        }
    }

    /// `finalize` of a communicator's context (nothing before v11).
    ///
    /// # Safety
    /// `context` came from this table's `init` and is finalized once.
    pub unsafe fn finalize(&self, context: Ptr) -> Call {
        match self.finalize {
            // SAFETY: the caller's promise.
            Some(finalize) => status(unsafe { finalize(context) }),
            None if self.version >= 11 => Err(Fault::Missing("finalize")),
            None => Ok(()),
        }
    }

    /// # Safety
    /// `count` points to a valid int.
    pub unsafe fn devices(&self, count: *mut c_int) -> Call {
        // SAFETY: the caller's promise.
        status(unsafe { call(self.devices, "devices")?(count) })
    }

    pub fn properties(&self, device: c_int) -> Result<RawProperties, Fault> {
        call(self.properties.as_ref(), "getProperties")?(device)
    }

    /// # Safety
    /// `handle` points to `HANDLE_MAX_BYTES` writable bytes and `listen` to a valid place;
    /// `context` came from `init`.
    pub unsafe fn listen(&self, context: Ptr, device: c_int, handle: Ptr, listen: *mut Ptr) -> Call {
        status(match call(self.listen, "listen")? {
            // SAFETY: the caller's promise.
            ListenCall::Plain(listen_fn) => unsafe { listen_fn(device, handle, listen) },
            // SAFETY: the caller's promise.
            ListenCall::Context(listen_fn) => unsafe { listen_fn(context, device, handle, listen) },
        })
    }

    /// `connect` asking for no device offload.
    ///
    /// # Safety
    /// `handle` points to the same `HANDLE_MAX_BYTES` bytes on every call for one connection
    /// (plugins keep their progress in it), `config` to the communicator's config and `send`
    /// to a valid place; `context` came from `init`.
    pub unsafe fn connect(&self, context: Ptr, config: *mut CommConfigC, device: c_int, handle: Ptr, send: *mut Ptr) -> Call {
        let mut offload: *mut DeviceHandle = std::ptr::null_mut();
        status(match call(self.connect, "connect")? {
            // SAFETY: the caller's promise; `offload` is a valid place for the plugin's answer.
            ConnectCall::Bare(connect) => unsafe { connect(device, handle, send) },
            // SAFETY: as above.
            ConnectCall::Plain(connect) => unsafe { connect(device, handle, send, &mut offload) },
            // SAFETY: as above.
            ConnectCall::Config(connect) => unsafe { connect(device, config, handle, send, &mut offload) },
            // SAFETY: as above.
            ConnectCall::Context(connect) => unsafe { connect(context, device, handle, send, &mut offload) },
        })
    }

    /// `accept` asking for no device offload.
    ///
    /// # Safety
    /// `listen` came from `listen` and `recv` points to a valid place.
    pub unsafe fn accept(&self, listen: Ptr, recv: *mut Ptr) -> Call {
        let mut offload: *mut DeviceHandle = std::ptr::null_mut();
        status(match call(self.accept, "accept")? {
            // SAFETY: the caller's promise.
            AcceptCall::Bare(accept) => unsafe { accept(listen, recv) },
            // SAFETY: the caller's promise; `offload` is a valid place for the plugin's answer.
            AcceptCall::Device(accept) => unsafe { accept(listen, recv, &mut offload) },
        })
    }

    /// # Safety
    /// `comm` is a live comm of this plugin and `mr` a valid place.
    pub unsafe fn reg_mr(&self, comm: Ptr, data: Ptr, size: usize, kind: c_int, mr: *mut Ptr) -> Call {
        status(match call(self.reg_mr, "regMr")? {
            // SAFETY: the caller's promise.
            RegMrCall::Int(reg_mr) => unsafe { reg_mr(comm, data, int_size(size)?, kind, mr) },
            // SAFETY: the caller's promise.
            RegMrCall::Size(reg_mr) => unsafe { reg_mr(comm, data, size, kind, mr) },
        })
    }

    /// # Safety
    /// `mr` came from `reg_mr` on `comm` and is deregistered once.
    pub unsafe fn dereg_mr(&self, comm: Ptr, mr: Ptr) -> Call {
        // SAFETY: the caller's promise.
        status(unsafe { call(self.dereg_mr, "deregMr")?(comm, mr) })
    }

    /// # Safety
    /// The plugin API's: `data..data+size` stays valid until the request is done.
    pub unsafe fn isend(&self, send: Ptr, data: Ptr, size: usize, tag: c_int, mr: Ptr, request: *mut Ptr) -> Call {
        status(match call(self.isend, "isend")? {
            // SAFETY: the caller's promise.
            IsendCall::Int(isend) => unsafe { isend(send, data, int_size(size)?, tag, mr, request) },
            // SAFETY: the caller's promise.
            IsendCall::Size(isend) => unsafe { isend(send, data, size, tag, mr, request) },
            // SAFETY: the caller's promise; no profiler handle.
            IsendCall::Profiled(isend) => unsafe { isend(send, data, size, tag, mr, std::ptr::null_mut(), request) },
        })
    }

    /// A grouped receive of `data.len()` buffers (the other slices are as long).
    ///
    /// # Safety
    /// The plugin API's: every buffer stays valid until the request is done.
    pub unsafe fn irecv(&self, recv: Ptr, data: &mut [Ptr], sizes: &[usize], tags: &mut [c_int], mrs: &mut [Ptr], request: *mut Ptr) -> Call {
        let n = count(data.len())?;
        let (data, tags, mrs) = (data.as_mut_ptr(), tags.as_mut_ptr(), mrs.as_mut_ptr());
        status(match call(self.irecv, "irecv")? {
            IrecvCall::Int(irecv) => {
                let mut sizes = sizes.iter().map(|&size| int_size(size)).collect::<Result<Vec<c_int>, Fault>>()?;
                // SAFETY: the caller's promise; every array is n long.
                unsafe { irecv(recv, n, data, sizes.as_mut_ptr(), tags, mrs, request) }
            }
            IrecvCall::Size(irecv) => {
                let mut sizes = sizes.to_vec();
                // SAFETY: as above.
                unsafe { irecv(recv, n, data, sizes.as_mut_ptr(), tags, mrs, request) }
            }
            IrecvCall::Profiled(irecv) => {
                let (mut sizes, mut profiler_handles) = (sizes.to_vec(), vec![std::ptr::null_mut(); sizes.len()]);
                // SAFETY: as above; no profiler handles.
                unsafe { irecv(recv, n, data, sizes.as_mut_ptr(), tags, mrs, profiler_handles.as_mut_ptr(), request) }
            }
        })
    }

    /// # Safety
    /// The plugin API's: the buffers of a completed receive, valid until the flush is done.
    pub unsafe fn iflush(&self, recv: Ptr, data: &mut [Ptr], sizes: &mut [c_int], mrs: &mut [Ptr], request: *mut Ptr) -> Call {
        let n = count(data.len())?;
        // SAFETY: the caller's promise; the slices are n long.
        status(unsafe { call(self.iflush, "iflush")?(recv, n, data.as_mut_ptr(), sizes.as_mut_ptr(), mrs.as_mut_ptr(), request) })
    }

    /// # Safety
    /// `request` is a live request of this plugin; `sizes` holds [`TEST_SIZES`] ints.
    pub unsafe fn test(&self, request: Ptr, done: *mut c_int, sizes: *mut c_int) -> Call {
        // SAFETY: the caller's promise.
        status(unsafe { call(self.test, "test")?(request, done, sizes) })
    }

    /// `closeSend`, `closeRecv` or `closeListen`, as `which` names.
    ///
    /// # Safety
    /// `comm` is a live comm of that kind, closed once.
    pub unsafe fn close(&self, which: &'static str, comm: Ptr) -> Call {
        let close = match which {
            "closeSend" => self.close_send,
            "closeRecv" => self.close_recv,
            _ => self.close_listen,
        };
        // SAFETY: the caller's promise.
        status(unsafe { call(close, which)?(comm) })
    }
}

/// The [`Table`] of `$vtable`, of ABI `$version`: the calls whose shape never changed taken
/// as they are, `getProperties` through the version's own struct converted by `$raw`, and
/// the calls listed in braces in their version's shape.
macro_rules! table {
    ($version:expr, $vtable:expr, $raw:expr, { $($call:ident: $shape:expr),* $(,)? }) => {
        Table {
            devices: $vtable.devices,
            properties: $vtable.get_properties.map(|get| properties_call(get, $raw)),
            dereg_mr: $vtable.dereg_mr,
            iflush: $vtable.iflush,
            test: $vtable.test,
            close_send: $vtable.close_send,
            close_recv: $vtable.close_recv,
            close_listen: $vtable.close_listen,
            $($call: $shape,)*
            ..Table::empty($version, $vtable.name)
        }
    };
}
pub(super) use table;

/// A C properties struct: integers, floats and pointers only, so all-zero bytes are a valid
/// value of it.
///
/// # Safety
/// Implement only for `#[repr(C)]` structs of such fields.
pub(super) unsafe trait CStruct: Sized + 'static {}

/// `getProperties` through a version's own struct `P`, converted by `convert` to the newest
/// version's terms.
pub(super) fn properties_call<P: CStruct>(get: unsafe extern "C" fn(c_int, *mut P) -> Status, convert: fn(&P, c_int) -> RawProperties) -> PropertiesCall {
    Box::new(move |device| {
        // SAFETY: P is a CStruct, for which all-zero bytes are valid.
        let mut properties: P = unsafe { std::mem::zeroed() };
        // SAFETY: a valid struct of the version's type for the plugin to fill.
        status(unsafe { get(device, &mut properties) })?;
        Ok(convert(&properties, device))
    })
}
