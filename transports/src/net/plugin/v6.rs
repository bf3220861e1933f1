//! Net plugin ABI v6 (`ncclNetPlugin_v6`, NCCL 2.12): `init` once per process, `int` sizes
//! in `regMr`, `isend` and `irecv`, no device handles in `connect` and `accept`, neither
//! `regIsGlobal` nor a device type in the properties, and 8 requests in flight per comm
//! (`NCCL_NET_MAX_REQUESTS_V6`).

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;

/// `ncclNetProperties_v6_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PropertiesV6 {
    pub name: *const c_char,
    pub pci_path: *const c_char,
    pub guid: u64,
    pub ptr_support: c_int,
    pub speed: c_int,
    pub port: c_int,
    pub latency: f32,
    pub max_comms: c_int,
    pub max_recvs: c_int,
}

/// `ncclNet_v6_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV6 {
    pub name: *const c_char,
    pub init: Option<InitOnceFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut PropertiesV6) -> Status>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectBareFn>,
    pub accept: Option<AcceptBareFn>,
    pub reg_mr: Option<RegMrIntFn>,
    pub reg_mr_dma_buf: Option<RegMrDmaBufFn>,
    pub dereg_mr: Option<DeregMrFn>,
    pub isend: Option<IsendIntFn>,
    pub irecv: Option<IrecvIntFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub close_send: Option<CloseFn>,
    pub close_recv: Option<CloseFn>,
    pub close_listen: Option<CloseFn>,
}

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV6 {}

fn raw(p: &PropertiesV6, device: c_int) -> RawProperties {
    same_fields!(RawProperties from p, [name, pci_path, guid, ptr_support, speed, port, latency, max_comms, max_recvs], ..RawProperties::defaults(device))
}

pub(super) fn table(v: &NetV6) -> Table {
    table!(6, v, raw, {
        init: v.init.map(InitCall::Once),
        listen: v.listen.map(ListenCall::Plain),
        connect: v.connect.map(ConnectCall::Bare),
        accept: v.accept.map(AcceptCall::Bare),
        reg_mr: v.reg_mr.map(RegMrCall::Int),
        isend: v.isend.map(IsendCall::Int),
        irecv: v.irecv.map(IrecvCall::Int),
    })
}
