//! What every version of NCCL's net plugin ABI shares: the C types (`ncclResult_t`, the
//! logger and profiler callbacks, the device handle, the comm config), the function pointer
//! types, and [`RawProperties`] (a device's properties with the newest version's fields, as
//! C values), which each version file converts its own properties struct from and to.
//!
//! Every vtable field is an `Option` of a function pointer: a plugin may leave calls NULL,
//! and a NULL Rust function pointer would be undefined behaviour.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};

use crate::net::{DeviceOffload, NetProperties, PointerSupport, MAX_MESSAGE_BYTES};

/// `ncclResult_t`.
pub type Status = c_int;
/// `ncclSuccess`.
pub const SUCCESS: Status = 0;
/// `ncclInternalError`: what the exported plugin answers for its own failures.
pub const INTERNAL_ERROR: Status = 3;
/// `ncclInvalidArgument`.
pub const INVALID_ARGUMENT: Status = 4;
/// `ncclRemoteError`: the peer went away.
pub const REMOTE_ERROR: Status = 6;
/// `ncclSystemError`: a system call failed.
pub const SYSTEM_ERROR: Status = 2;

/// A pointer the plugin owns (comm, request, registration, context).
pub type Ptr = *mut c_void;

/// `NCCL_PTR_HOST`, `NCCL_PTR_CUDA`, `NCCL_PTR_DMABUF`.
pub const PTR_HOST: c_int = 0x1;
pub const PTR_CUDA: c_int = 0x2;
pub const PTR_DMABUF: c_int = 0x4;
/// `NCCL_NET_DEVICE_HOST`, `NCCL_NET_DEVICE_UNPACK`.
pub const DEVICE_HOST: c_int = 0;
pub const DEVICE_UNPACK: c_int = 1;
/// `NCCL_NET_DEVICE_INVALID_VERSION`.
pub const DEVICE_INVALID_VERSION: c_int = 0;
/// `NCCL_NET_ID_UNDEF`: a rail or plane the device does not know.
pub const ID_UNDEF: i16 = -1;
/// `NCCL_NET_TRAFFIC_CLASS_UNDEF`.
pub const TRAFFIC_CLASS_UNDEF: c_int = -1;
/// `MAX_NET_SIZE`: the largest message of the versions whose sizes are `int` (v6–v8), and the
/// `maxP2pBytes` NCCL assumes for versions that do not report it.
pub const INT_ERA_MAX_BYTES: usize = 1 << 30;
/// `MAX_COLLNET_SIZE`: the `maxCollBytes` assumed for versions that do not report it.
pub const INT_ERA_MAX_COLL_BYTES: usize = 512 << 20;
/// `NCCL_PROXY_MAX_SUBS`: the sizes array NCCL hands `test`, so the one plugins may fill.
pub const TEST_SIZES: usize = 64;

/// `ncclDebugLogLevel` values.
pub mod level {
    use std::ffi::c_int;
    pub const VERSION: c_int = 1;
    pub const WARN: c_int = 2;
    pub const INFO: c_int = 3;
    pub const ABORT: c_int = 4;
    pub const TRACE: c_int = 5;
}

/// `ncclDebugLogSubSys` bits the logger routes.
pub mod subsystem {
    use std::ffi::c_ulong;
    pub const INIT: c_ulong = 0x1;
    pub const ENV: c_ulong = 0x80;
    pub const NET: c_ulong = 0x10;
    pub const PROXY: c_ulong = 0x400;
}

/// `ncclDebugLogger_t`: `void (*)(level, flags, file, line, const char* fmt, ...)`.
pub type Logger = Option<unsafe extern "C" fn(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, format: *const c_char, ...)>;

/// `ncclProfilerCallback_t`.
pub type ProfilerCallback = Option<unsafe extern "C" fn(event: *mut Ptr, kind: c_int, parent: Ptr, plugin_id: i64, data: Ptr) -> Status>;

/// `ncclNetDeviceHandle_v7_t` (the same through v12).
#[repr(C)]
#[derive(Debug)]
pub struct DeviceHandle {
    pub device_type: c_int,
    pub device_version: c_int,
    pub handle: Ptr,
    pub size: usize,
    pub needs_proxy_progress: c_int,
}

/// `ncclNetCommConfig_v10_t` (the same through v12).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CommConfigC {
    pub traffic_class: c_int,
}

// The calls whose signature is the same in every version that has them.
pub type DevicesFn = unsafe extern "C" fn(count: *mut c_int) -> Status;
pub type AcceptFn = unsafe extern "C" fn(listen: Ptr, recv: *mut Ptr, device_comm: *mut *mut DeviceHandle) -> Status;
pub type RegMrFn = unsafe extern "C" fn(comm: Ptr, data: Ptr, size: usize, kind: c_int, mr: *mut Ptr) -> Status;
pub type RegMrDmaBufFn = unsafe extern "C" fn(comm: Ptr, data: Ptr, size: usize, kind: c_int, offset: u64, fd: c_int, mr: *mut Ptr) -> Status;
pub type DeregMrFn = unsafe extern "C" fn(comm: Ptr, mr: Ptr) -> Status;
pub type IflushFn = unsafe extern "C" fn(recv: Ptr, n: c_int, data: *mut Ptr, sizes: *mut c_int, mrs: *mut Ptr, request: *mut Ptr) -> Status;
pub type TestFn = unsafe extern "C" fn(request: Ptr, done: *mut c_int, sizes: *mut c_int) -> Status;
pub type CloseFn = unsafe extern "C" fn(comm: Ptr) -> Status;
pub type GetDeviceMrFn = unsafe extern "C" fn(comm: Ptr, mr: Ptr, device_mr: *mut Ptr) -> Status;
pub type IrecvConsumedFn = unsafe extern "C" fn(recv: Ptr, n: c_int, request: Ptr) -> Status;
/// v6–v9's `init`, once per process; v10's adds the profiler callback.
pub type InitOnceFn = unsafe extern "C" fn(logger: Logger) -> Status;
pub type InitOnceProfiledFn = unsafe extern "C" fn(logger: Logger, profiler: ProfilerCallback) -> Status;
/// v6–v10's `listen`, without a context.
pub type ListenFn = unsafe extern "C" fn(device: c_int, handle: Ptr, listen: *mut Ptr) -> Status;
/// v6's `connect` and `accept`, without device handles.
pub type ConnectBareFn = unsafe extern "C" fn(device: c_int, handle: Ptr, send: *mut Ptr) -> Status;
pub type AcceptBareFn = unsafe extern "C" fn(listen: Ptr, recv: *mut Ptr) -> Status;
/// v7–v9's `connect`.
pub type ConnectFn = unsafe extern "C" fn(device: c_int, handle: Ptr, send: *mut Ptr, device_comm: *mut *mut DeviceHandle) -> Status;
/// v10's `connect`, with the comm config.
pub type ConnectConfigFn = unsafe extern "C" fn(device: c_int, config: *mut CommConfigC, handle: Ptr, send: *mut Ptr, device_comm: *mut *mut DeviceHandle) -> Status;
/// v6–v7's `regMr`, with an `int` size.
pub type RegMrIntFn = unsafe extern "C" fn(comm: Ptr, data: Ptr, size: c_int, kind: c_int, mr: *mut Ptr) -> Status;
/// v6–v8's `isend` and `irecv`, with `int` sizes.
pub type IsendIntFn = unsafe extern "C" fn(send: Ptr, data: Ptr, size: c_int, tag: c_int, mr: Ptr, request: *mut Ptr) -> Status;
pub type IrecvIntFn = unsafe extern "C" fn(recv: Ptr, n: c_int, data: *mut Ptr, sizes: *mut c_int, tags: *mut c_int, mrs: *mut Ptr, request: *mut Ptr) -> Status;
/// v9's `isend` and `irecv`, with `size_t` sizes.
pub type IsendSizeFn = unsafe extern "C" fn(send: Ptr, data: Ptr, size: usize, tag: c_int, mr: Ptr, request: *mut Ptr) -> Status;
pub type IrecvSizeFn = unsafe extern "C" fn(recv: Ptr, n: c_int, data: *mut Ptr, sizes: *mut usize, tags: *mut c_int, mrs: *mut Ptr, request: *mut Ptr) -> Status;
/// v10 and later: `isend` and `irecv` with profiler handles.
pub type IsendFn = unsafe extern "C" fn(send: Ptr, data: Ptr, size: usize, tag: c_int, mr: Ptr, phandle: Ptr, request: *mut Ptr) -> Status;
pub type IrecvFn =
    unsafe extern "C" fn(recv: Ptr, n: c_int, data: *mut Ptr, sizes: *mut usize, tags: *mut c_int, mrs: *mut Ptr, phandles: *mut Ptr, request: *mut Ptr) -> Status;
/// v11 and later: per-communicator `init`, `listen` and `connect` with a context, `finalize`.
pub type InitFn = unsafe extern "C" fn(context: *mut Ptr, comm_id: u64, config: *mut CommConfigC, logger: Logger, profiler: ProfilerCallback) -> Status;
pub type ListenContextFn = unsafe extern "C" fn(context: Ptr, device: c_int, handle: Ptr, listen: *mut Ptr) -> Status;
pub type ConnectContextFn = unsafe extern "C" fn(context: Ptr, device: c_int, handle: Ptr, send: *mut Ptr, device_comm: *mut *mut DeviceHandle) -> Status;
pub type FinalizeFn = unsafe extern "C" fn(context: Ptr) -> Status;
/// v11 and later's optional `setNetAttr` (oxccl never calls it).
pub type SetNetAttrFn = unsafe extern "C" fn(context: Ptr, attributes: Ptr) -> Status;

/// Why a call through the ABI did not succeed.
#[derive(Debug, PartialEq, Eq)]
pub enum Fault {
    /// The plugin returned this `ncclResult_t`.
    Returned(Status),
    /// The plugin left this call NULL.
    Missing(&'static str),
    /// A value does not fit this version's C type (a size above `INT_MAX` for v8).
    Range(String),
}

/// A call's outcome.
pub type Call = Result<(), Fault>;

/// The outcome of a status code.
pub fn status(code: Status) -> Call {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(Fault::Returned(code))
    }
}

/// A call of the vtable, or [`Fault::Missing`] naming it.
pub fn call<F>(function: Option<F>, name: &'static str) -> Result<F, Fault> {
    function.ok_or(Fault::Missing(name))
}

/// `ncclResult_t`'s name, for messages.
pub fn status_name(code: Status) -> &'static str {
    match code {
        0 => "ncclSuccess",
        1 => "ncclUnhandledCudaError",
        2 => "ncclSystemError",
        3 => "ncclInternalError",
        4 => "ncclInvalidArgument",
        5 => "ncclInvalidUsage",
        6 => "ncclRemoteError",
        7 => "ncclInProgress",
        8 => "ncclTimeout",
        _ => "an unknown ncclResult_t",
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Returned(code) => write!(f, "returned {} ({code})", status_name(*code)),
            Fault::Missing(name) => write!(f, "the plugin's {name} is NULL"),
            Fault::Range(what) => f.write_str(what),
        }
    }
}

/// `$to { field: $from.field, ..., other: value, ..rest }`: a struct of `$to` from the
/// fields `$from` names alike, then the others.
macro_rules! same_fields {
    ($to:ident from $from:expr, [$($field:ident),* $(,)?] $(, $other:ident: $value:expr)* $(, ..$rest:expr)?) => {
        $to { $($field: $from.$field,)* $($other: $value,)* $(..$rest)? }
    };
}
pub(crate) use same_fields;

/// A device's properties as a plugin reports them, before any check: the newest version's
/// fields, as C values. Each version file converts its own struct from and to this one,
/// filling what its version lacks as NCCL does.
#[derive(Clone, Copy, Debug)]
pub struct RawProperties {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub force_flush: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub device_type: c_int,
    pub device_version: c_int,
    /// The devices a virtual NIC fuses: `(count, the first 8)`.
    pub virtual_devices: (c_int, [c_int; 8]),
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request: c_int,
    pub rail: i16,
    pub plane: i16,
}

impl RawProperties {
    /// What a version without a field means by it (NCCL's defaults in its compat layer).
    pub fn defaults(device: c_int) -> RawProperties {
        RawProperties {
            name: std::ptr::null(),
            pci_path: std::ptr::null(),
            guid: 0,
            ptr_support: PTR_HOST,
            reg_is_global: 0,
            force_flush: 0,
            speed: 0,
            port: 0,
            latency: 0.0,
            max_comms: 0,
            max_recvs: 1,
            device_type: DEVICE_HOST,
            device_version: DEVICE_INVALID_VERSION,
            virtual_devices: (1, [device, 0, 0, 0, 0, 0, 0, 0]),
            max_p2p_bytes: INT_ERA_MAX_BYTES,
            max_coll_bytes: INT_ERA_MAX_COLL_BYTES,
            max_multi_request: 1,
            rail: ID_UNDEF,
            plane: ID_UNDEF,
        }
    }

    /// Checks every value and converts it: a negative count, an unknown pointer kind or
    /// device type, a NULL name or a latency that is not a number is an error naming the
    /// field.
    ///
    /// # Safety
    /// `name` and `pci_path` are NULL or point to NUL-terminated strings.
    pub unsafe fn check(&self) -> Result<NetProperties, String> {
        let count = |field: &str, value: c_int| u32::try_from(value).map_err(|_| format!("{field} is {value}, a negative count"));
        if self.name.is_null() {
            return Err("name is NULL".into());
        }
        // SAFETY: non-null, and NUL-terminated (the caller's promise).
        let name = unsafe { CStr::from_ptr(self.name) }.to_string_lossy().into_owned();
        let pci_path = (!self.pci_path.is_null()).then(|| {
            // SAFETY: non-null, and NUL-terminated (the caller's promise).
            unsafe { CStr::from_ptr(self.pci_path) }.to_string_lossy().into_owned()
        });
        if self.ptr_support & !(PTR_HOST | PTR_CUDA | PTR_DMABUF) != 0 {
            return Err(format!("ptrSupport is {:#x}, beyond NCCL_PTR_HOST|CUDA|DMABUF", self.ptr_support));
        }
        let offload = match self.device_type {
            DEVICE_HOST => DeviceOffload::Host,
            DEVICE_UNPACK => DeviceOffload::Unpack,
            other => return Err(format!("netDeviceType is {other}: oxccl drives host (0) and unpack (1) devices only")),
        };
        if !self.latency.is_finite() || self.latency < 0.0 {
            return Err(format!("latency is {} µs", self.latency));
        }
        let max_recvs = count("maxRecvs", self.max_recvs)?;
        if max_recvs == 0 {
            return Err("maxRecvs is 0 (an irecv takes at least one buffer)".into());
        }
        if self.max_p2p_bytes == 0 || self.max_coll_bytes == 0 {
            return Err(format!("maxP2pBytes {} / maxCollBytes {}: a net moves at least one byte", self.max_p2p_bytes, self.max_coll_bytes));
        }
        Ok(NetProperties {
            name,
            pci_path,
            guid: self.guid,
            ptr_support: PointerSupport {
                host: self.ptr_support & PTR_HOST != 0,
                cuda: self.ptr_support & PTR_CUDA != 0,
                dmabuf: self.ptr_support & PTR_DMABUF != 0,
            },
            reg_is_global: self.reg_is_global != 0,
            force_flush: self.force_flush != 0,
            speed_mbps: count("speed", self.speed)?,
            port: count("port", self.port)?,
            latency_us: self.latency,
            max_comms: count("maxComms", self.max_comms)?,
            max_recvs: max_recvs as usize,
            offload,
            max_p2p_bytes: self.max_p2p_bytes.min(MAX_MESSAGE_BYTES),
            max_coll_bytes: self.max_coll_bytes.min(MAX_MESSAGE_BYTES),
        })
    }

    /// The C values of `properties` for device `device`, with `name` and `pci_path` (NULL:
    /// none) as the strings to point at; a count that does not fit an `int` is an error.
    pub fn from_properties(properties: &NetProperties, device: c_int, name: *const c_char, pci_path: *const c_char) -> Result<RawProperties, String> {
        let int = |field: &str, value: u64| c_int::try_from(value).map_err(|_| format!("{field} {value} does not fit an int"));
        let ptr_support = [(properties.ptr_support.host, PTR_HOST), (properties.ptr_support.cuda, PTR_CUDA), (properties.ptr_support.dmabuf, PTR_DMABUF)]
            .iter()
            .filter(|(supported, _)| *supported)
            .fold(0, |bits, (_, bit)| bits | bit);
        Ok(RawProperties {
            name,
            pci_path,
            guid: properties.guid,
            ptr_support,
            reg_is_global: c_int::from(properties.reg_is_global),
            force_flush: c_int::from(properties.force_flush),
            speed: int("speed", properties.speed_mbps.into())?,
            port: int("port", properties.port.into())?,
            latency: properties.latency_us,
            max_comms: int("maxComms", properties.max_comms.into())?,
            max_recvs: int("maxRecvs", properties.max_recvs as u64)?,
            device_type: match properties.offload {
                DeviceOffload::Host => DEVICE_HOST,
                DeviceOffload::Unpack => DEVICE_UNPACK,
            },
            max_p2p_bytes: properties.max_p2p_bytes,
            max_coll_bytes: properties.max_coll_bytes,
            ..RawProperties::defaults(device)
        })
    }
}

/// A buffer count as the C `int n` of `irecv` and `iflush`.
pub fn count(n: usize) -> Result<c_int, Fault> {
    c_int::try_from(n).map_err(|_| Fault::Range(format!("{n} buffers in one call")))
}

/// Versions before v11 initialized a plugin once per process; this keeps that first outcome.
#[derive(Default)]
pub struct InitOnce(std::sync::OnceLock<Status>);

impl InitOnce {
    /// The outcome of `init`, calling it the first time only.
    pub fn call(&self, init: impl FnOnce() -> Status) -> Call {
        status(*self.0.get_or_init(init))
    }
}

/// `int` sizes of the versions before v9, checked.
pub fn int_size(size: usize) -> Result<c_int, Fault> {
    c_int::try_from(size).map_err(|_| Fault::Range(format!("{size} bytes do not fit this ABI version's int sizes")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties() -> NetProperties {
        NetProperties {
            name: "eth0".into(),
            pci_path: None,
            guid: 7,
            ptr_support: PointerSupport { host: true, cuda: true, dmabuf: false },
            reg_is_global: true,
            force_flush: false,
            speed_mbps: 100_000,
            port: 1,
            latency_us: 2.5,
            max_comms: 65536,
            max_recvs: 8,
            offload: DeviceOffload::Host,
            max_p2p_bytes: MAX_MESSAGE_BYTES,
            max_coll_bytes: 1 << 29,
        }
    }

    #[test]
    fn properties_survive_the_round_trip_through_c_values() {
        let name = c"eth0";
        let raw = RawProperties::from_properties(&properties(), 3, name.as_ptr(), std::ptr::null()).unwrap();
        assert_eq!((raw.ptr_support, raw.reg_is_global, raw.virtual_devices.0, raw.virtual_devices.1[0]), (PTR_HOST | PTR_CUDA, 1, 1, 3));
        // SAFETY: the name points at a static C string; the PCI path is NULL.
        assert_eq!(unsafe { raw.check() }.unwrap(), properties());
    }

    #[test]
    fn nonsense_from_a_plugin_is_an_error_naming_the_field() {
        let name = c"x";
        let good = RawProperties { name: name.as_ptr(), ..RawProperties::defaults(0) };
        let bad = [
            (RawProperties { speed: -1, ..good }, "speed is -1"),
            (RawProperties { max_recvs: 0, ..good }, "maxRecvs is 0"),
            (RawProperties { max_comms: -5, ..good }, "maxComms is -5"),
            (RawProperties { ptr_support: 0x10, ..good }, "ptrSupport is 0x10"),
            (RawProperties { device_type: 3, ..good }, "netDeviceType is 3"),
            (RawProperties { latency: f32::NAN, ..good }, "latency is NaN"),
            (RawProperties { name: std::ptr::null(), ..good }, "name is NULL"),
            (RawProperties { max_p2p_bytes: 0, ..good }, "maxP2pBytes 0"),
        ];
        for (raw, expected) in bad {
            // SAFETY: names are NULL or static C strings.
            let err = unsafe { raw.check() }.unwrap_err();
            assert!(err.contains(expected), "{err} (expected {expected})");
        }
        let too_fast = NetProperties { speed_mbps: u32::MAX, ..properties() };
        assert!(RawProperties::from_properties(&too_fast, 0, name.as_ptr(), std::ptr::null()).unwrap_err().contains("speed"));
    }

    #[test]
    fn init_before_v11_runs_once_and_keeps_its_outcome() {
        let once = InitOnce::default();
        let mut calls = 0;
        assert_eq!(once.call(|| { calls += 1; 3 }), Err(Fault::Returned(3)));
        assert_eq!(once.call(|| unreachable!("init runs once")), Err(Fault::Returned(3)));
        assert_eq!(calls, 1);
        assert_eq!(Fault::Returned(3).to_string(), "returned ncclInternalError (3)");
        assert!(int_size(1 << 31).is_err() && int_size((1 << 31) - 1).is_ok());
    }
}
