//! `libnccl-net-oxccl.so`: oxccl's socket net exported as an NCCL net plugin, so that NCCL
//! (or anything that loads NCCL net plugins, oxccl included) can run over it.
//!
//! It exports `ncclNetPlugin_v12` (NCCL 2.30), `ncclNetPlugin_v11` (NCCL 2.28.3 to 2.29),
//! `ncclNetPlugin_v10` (NCCL 2.26 to 2.28.2) and `ncclNetPlugin_v9` (NCCL 2.22 to 2.25),
//! all named `oxccl` (`NCCL_NET=oxccl` picks it). What it offers (the same in every version):
//! one device per interface that `NCCL_SOCKET_IFNAME` allows, host memory only
//! (`NCCL_PTR_HOST`), `maxRecvs` from `OXCCL_NETPLUGIN_MAX_RECVS` (8 unless set), 32
//! requests in flight per receiving comm and 32 × `maxRecvs` per sending comm, as the ABI
//! promises; each comm a control connection progressed by NCCL's own calls and, as
//! `NCCL_SOCKET_NTHREADS` and `NCCL_NSOCKS_PERTHREAD` say (read as NCCL's socket transport
//! reads them), data connections and helper threads of its own that move messages of
//! 64 KiB and more. It leaves `regMrDmaBuf`, `getDeviceMr`, `irecvConsumed`, `makeVDevice` and
//! `setNetAttr` NULL, which NCCL reads as "not supported".
//!
//! Nothing panics across the C ABI: every call runs under a guard (`calls.rs`). Log lines go
//! through the logger NCCL passes to `init` (`log.rs`).
//!
//! Cargo cannot put dashes in a library's name: the build makes `libnccl_net_oxccl.so`,
//! which scripts/gpu-build.sh and the tests copy to `libnccl-net-oxccl.so`.

#![allow(non_upper_case_globals)]

mod calls;
mod log;
mod state;

use std::ffi::{c_char, c_int};

use oxccl_transports::net::plugin::abi::{CommConfigC, DeviceHandle, Logger, ProfilerCallback, Ptr, RawProperties, Status};
use oxccl_transports::net::plugin::v10::NetV10;
use oxccl_transports::net::plugin::v11::{ContextNet, NetV11, PropertiesV11};
use oxccl_transports::net::plugin::v12::{NetV12, PropertiesV12};
use oxccl_transports::net::plugin::v9::{NetV9, PropertiesV9};

use calls::guard;

/// The plugin's name: what `NCCL_NET` selects.
const NAME: *const c_char = c"oxccl".as_ptr();

/// The v12 vtable (NCCL 2.30).
#[no_mangle]
pub static ncclNetPlugin_v12: NetV12 = context_vtable(properties_v12);

/// The v11 vtable (NCCL 2.28.3 to 2.29): v12's calls, v11's properties.
#[no_mangle]
pub static ncclNetPlugin_v11: NetV11 = context_vtable(properties_v11);

/// The vtable of the versions with per-communicator contexts, whose properties are `P`.
const fn context_vtable<P, V>(get_properties: unsafe extern "C" fn(c_int, *mut P) -> Status) -> ContextNet<P, V> {
    ContextNet {
        name: NAME,
        init: Some(init),
        devices: Some(devices),
        get_properties: Some(get_properties),
        listen: Some(listen),
        connect: Some(connect),
        accept: Some(accept),
        reg_mr: Some(reg_mr),
        reg_mr_dma_buf: None,
        dereg_mr: Some(dereg_mr),
        isend: Some(isend),
        irecv: Some(irecv),
        iflush: Some(iflush),
        test: Some(test),
        close_send: Some(close_send),
        close_recv: Some(close_recv),
        close_listen: Some(close_listen),
        get_device_mr: None,
        irecv_consumed: None,
        make_virtual_device: None,
        finalize: Some(finalize),
        set_net_attributes: None,
    }
}

/// The v10 vtable (NCCL 2.26 to 2.28.2): one process-wide context, the config in connect.
#[no_mangle]
pub static ncclNetPlugin_v10: NetV10 = NetV10 {
    name: NAME,
    init: Some(init_v10),
    devices: Some(devices),
    get_properties: Some(properties_v9),
    listen: Some(listen_v9),
    connect: Some(connect_v10),
    accept: Some(accept),
    reg_mr: Some(reg_mr),
    reg_mr_dma_buf: None,
    dereg_mr: Some(dereg_mr),
    isend: Some(isend),
    irecv: Some(irecv),
    iflush: Some(iflush),
    test: Some(test),
    close_send: Some(close_send),
    close_recv: Some(close_recv),
    close_listen: Some(close_listen),
    get_device_mr: None,
    irecv_consumed: None,
    make_virtual_device: None,
};

/// The v9 vtable (NCCL 2.22 to 2.25): no profiler handles.
#[no_mangle]
pub static ncclNetPlugin_v9: NetV9 = NetV9 {
    name: NAME,
    init: Some(init_v9),
    devices: Some(devices),
    get_properties: Some(properties_v9),
    listen: Some(listen_v9),
    connect: Some(connect_v9),
    accept: Some(accept),
    reg_mr: Some(reg_mr),
    reg_mr_dma_buf: None,
    dereg_mr: Some(dereg_mr),
    isend: Some(isend_v9),
    irecv: Some(irecv_v9),
    iflush: Some(iflush),
    test: Some(test),
    close_send: Some(close_send),
    close_recv: Some(close_recv),
    close_listen: Some(close_listen),
    get_device_mr: None,
    irecv_consumed: None,
    make_virtual_device: None,
};

unsafe extern "C" fn init(context: *mut Ptr, comm_id: u64, config: *mut CommConfigC, logger: Logger, _profiler: ProfilerCallback) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("init", || unsafe { calls::init(context, comm_id, config, logger) })
}

unsafe extern "C" fn init_v10(logger: Logger, _profiler: ProfilerCallback) -> Status {
    guard("init", || calls::init_process(logger))
}

unsafe extern "C" fn init_v9(logger: Logger) -> Status {
    guard("init", || calls::init_process(logger))
}

unsafe extern "C" fn finalize(context: Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("finalize", || unsafe { calls::finalize(context) })
}

unsafe extern "C" fn devices(count: *mut c_int) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("devices", || unsafe { calls::devices(count) })
}

/// `getProperties` through the version's struct `P`, made from the C values by `convert`.
///
/// # Safety
/// `out` is NULL (an error) or valid for a write.
unsafe fn properties_as<P>(device: c_int, out: *mut P, convert: fn(&RawProperties) -> P) -> Status {
    guard("getProperties", || {
        let properties = convert(&calls::properties(device)?);
        // SAFETY: the caller's promise.
        unsafe { calls::put(out, "properties", properties) }
    })
}

unsafe extern "C" fn properties_v12(device: c_int, out: *mut PropertiesV12) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    unsafe { properties_as(device, out, PropertiesV12::from_raw) }
}

unsafe extern "C" fn properties_v11(device: c_int, out: *mut PropertiesV11) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    unsafe { properties_as(device, out, PropertiesV11::from_raw) }
}

unsafe extern "C" fn properties_v9(device: c_int, out: *mut PropertiesV9) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    unsafe { properties_as(device, out, PropertiesV9::from_raw) }
}

unsafe extern "C" fn listen(context: Ptr, device: c_int, handle: Ptr, listen_comm: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("listen", || unsafe { calls::listen(context, device, handle, listen_comm) })
}

unsafe extern "C" fn listen_v9(device: c_int, handle: Ptr, listen_comm: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments; a NULL context is the process's.
    guard("listen", || unsafe { calls::listen(std::ptr::null_mut(), device, handle, listen_comm) })
}

unsafe extern "C" fn connect(context: Ptr, device: c_int, handle: Ptr, send: *mut Ptr, _offload: *mut *mut DeviceHandle) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("connect", || unsafe { calls::connect(context, device, handle, send) })
}

unsafe extern "C" fn connect_v10(device: c_int, _config: *mut CommConfigC, handle: Ptr, send: *mut Ptr, _offload: *mut *mut DeviceHandle) -> Status {
    // SAFETY: NCCL's arguments; a NULL context is the process's.
    guard("connect", || unsafe { calls::connect(std::ptr::null_mut(), device, handle, send) })
}

unsafe extern "C" fn connect_v9(device: c_int, handle: Ptr, send: *mut Ptr, _offload: *mut *mut DeviceHandle) -> Status {
    // SAFETY: NCCL's arguments; a NULL context is the process's.
    guard("connect", || unsafe { calls::connect(std::ptr::null_mut(), device, handle, send) })
}

unsafe extern "C" fn accept(listen_comm: Ptr, recv: *mut Ptr, _offload: *mut *mut DeviceHandle) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("accept", || unsafe { calls::accept(listen_comm, recv) })
}

unsafe extern "C" fn reg_mr(comm: Ptr, data: Ptr, size: usize, kind: c_int, registration: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("regMr", || unsafe { calls::reg_mr(comm, data, size, kind, registration) })
}

unsafe extern "C" fn dereg_mr(comm: Ptr, registration: Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("deregMr", || unsafe { calls::dereg_mr(comm, registration) })
}

unsafe extern "C" fn isend(comm: Ptr, data: Ptr, size: usize, tag: c_int, registration: Ptr, _profiler: Ptr, request: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("isend", || unsafe { calls::isend(comm, data, size, tag, registration, request) })
}

unsafe extern "C" fn isend_v9(comm: Ptr, data: Ptr, size: usize, tag: c_int, registration: Ptr, request: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("isend", || unsafe { calls::isend(comm, data, size, tag, registration, request) })
}

unsafe extern "C" fn irecv(comm: Ptr, n: c_int, data: *mut Ptr, sizes: *mut usize, tags: *mut c_int, registrations: *mut Ptr, _profiler: *mut Ptr, request: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("irecv", || unsafe { calls::irecv(comm, n, data, sizes, tags, registrations, request) })
}

unsafe extern "C" fn irecv_v9(comm: Ptr, n: c_int, data: *mut Ptr, sizes: *mut usize, tags: *mut c_int, registrations: *mut Ptr, request: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("irecv", || unsafe { calls::irecv(comm, n, data, sizes, tags, registrations, request) })
}

unsafe extern "C" fn iflush(_comm: Ptr, _n: c_int, _data: *mut Ptr, _sizes: *mut c_int, _registrations: *mut Ptr, request: *mut Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("iflush", || unsafe { calls::iflush(request) })
}

unsafe extern "C" fn test(request: Ptr, done: *mut c_int, sizes: *mut c_int) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("test", || unsafe { calls::test(request, done, sizes) })
}

unsafe extern "C" fn close_send(comm: Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("closeSend", || unsafe { calls::close("closeSend", comm) })
}

unsafe extern "C" fn close_recv(comm: Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("closeRecv", || unsafe { calls::close("closeRecv", comm) })
}

unsafe extern "C" fn close_listen(comm: Ptr) -> Status {
    // SAFETY: NCCL's arguments, as the ABI defines them.
    guard("closeListen", || unsafe { calls::close("closeListen", comm) })
}
