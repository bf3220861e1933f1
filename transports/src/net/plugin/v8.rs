//! Net plugin ABI v8 (`ncclNetPlugin_v8`, NCCL 2.19–2.21): v7 with `regIsGlobal` in the
//! properties and a `size_t` size in `regMr`; `isend` and `irecv` sizes are still `int`.

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;

/// `ncclNetProperties_v8_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PropertiesV8 {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub reg_is_global: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
    pub device_type: c_int,
    pub device_version: c_int,
}

/// `ncclNet_v8_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV8 {
    pub name: *const c_char,
    pub init: Option<InitOnceFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut PropertiesV8) -> Status>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub accept: Option<AcceptFn>,
    pub reg_mr: Option<RegMrFn>,
    pub reg_mr_dma_buf: Option<RegMrDmaBufFn>,
    pub dereg_mr: Option<DeregMrFn>,
    pub isend: Option<IsendIntFn>,
    pub irecv: Option<IrecvIntFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub close_send: Option<CloseFn>,
    pub close_recv: Option<CloseFn>,
    pub close_listen: Option<CloseFn>,
    pub get_device_mr: Option<GetDeviceMrFn>,
    pub irecv_consumed: Option<IrecvConsumedFn>,
}

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV8 {}

fn raw(p: &PropertiesV8, device: c_int) -> RawProperties {
    same_fields!(RawProperties from p, [name, pci_path, guid, ptr_support, speed, port, latency, max_comms, max_recvs, reg_is_global, device_type, device_version], ..RawProperties::defaults(device))
}

pub(super) fn table(v: &NetV8) -> Table {
    table!(8, v, raw, {
        init: v.init.map(InitCall::Once),
        listen: v.listen.map(ListenCall::Plain),
        connect: v.connect.map(ConnectCall::Plain),
        accept: v.accept.map(AcceptCall::Device),
        reg_mr: v.reg_mr.map(RegMrCall::Size),
        isend: v.isend.map(IsendCall::Int),
        irecv: v.irecv.map(IrecvCall::Int),
    })
}
