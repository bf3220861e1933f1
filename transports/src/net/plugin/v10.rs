//! Net plugin ABI v10 (`ncclNetPlugin_v10`, NCCL 2.26 to 2.28.2): v9 with the profiler
//! callback in `init`, the comm config in `connect` and profiler handles in `isend` and
//! `irecv`; properties as v9's. `init` still once per process: the communicator's config
//! reaches `connect` from the context oxccl keeps.

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;
pub use super::v9::{PropertiesV9 as PropertiesV10, VirtualDevicesV9 as VirtualDevicesV10};

/// `ncclNet_v10_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV10 {
    pub name: *const c_char,
    pub init: Option<InitOnceProfiledFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut PropertiesV10) -> Status>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectConfigFn>,
    pub accept: Option<AcceptFn>,
    pub reg_mr: Option<RegMrFn>,
    pub reg_mr_dma_buf: Option<RegMrDmaBufFn>,
    pub dereg_mr: Option<DeregMrFn>,
    pub isend: Option<IsendFn>,
    pub irecv: Option<IrecvFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub close_send: Option<CloseFn>,
    pub close_recv: Option<CloseFn>,
    pub close_listen: Option<CloseFn>,
    pub get_device_mr: Option<GetDeviceMrFn>,
    pub irecv_consumed: Option<IrecvConsumedFn>,
    pub make_virtual_device: Option<unsafe extern "C" fn(device: *mut c_int, properties: *mut VirtualDevicesV10) -> Status>,
}

// SAFETY: function pointers and a pointer to a static string, never written once made (the
// exported plugin's vtable is a static).
unsafe impl Sync for NetV10 {}

pub(super) fn table(v: &NetV10) -> Table {
    table!(10, v, super::v9::raw, {
        init: v.init.map(InitCall::OnceProfiled),
        listen: v.listen.map(ListenCall::Plain),
        connect: v.connect.map(ConnectCall::Config),
        accept: v.accept.map(AcceptCall::Device),
        reg_mr: v.reg_mr.map(RegMrCall::Size),
        isend: v.isend.map(IsendCall::Profiled),
        irecv: v.irecv.map(IrecvCall::Profiled),
    })
}
