//! Net plugin ABI v11 (`ncclNetPlugin_v11`, NCCL 2.28.3 to 2.29): `init` once per
//! communicator, giving a context that `listen` and `connect` take and `finalize` ends;
//! `maxMultiRequestSize` in the properties; the optional `setNetAttr`. Its vtable is v12's
//! but for the properties and virtual devices ([`ContextNet`]).

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;
pub use super::v9::VirtualDevicesV9 as VirtualDevicesV11;

/// `ncclNetProperties_v11_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PropertiesV11 {
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
    pub virtual_devices: VirtualDevicesV11,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request: c_int,
}

/// The vtable of the versions with per-communicator contexts, `ncclNet_v11_t` and
/// `ncclNet_v12_t`, with their properties `P` and virtual devices `V`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ContextNet<P, V> {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut P) -> Status>,
    pub listen: Option<ListenContextFn>,
    pub connect: Option<ConnectContextFn>,
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
    pub make_virtual_device: Option<unsafe extern "C" fn(device: *mut c_int, properties: *mut V) -> Status>,
    pub finalize: Option<FinalizeFn>,
    pub set_net_attributes: Option<SetNetAttrFn>,
}

/// `ncclNet_v11_t`.
pub type NetV11 = ContextNet<PropertiesV11, VirtualDevicesV11>;

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV11 {}

// SAFETY: function pointers and a pointer to a static string, never written once made (the
// exported plugin's vtable is a static).
unsafe impl<P, V> Sync for ContextNet<P, V> {}

fn raw(p: &PropertiesV11, device: c_int) -> RawProperties {
    same_fields!(
        RawProperties from p,
        [name, pci_path, guid, ptr_support, reg_is_global, force_flush, speed, port, latency, max_comms, max_recvs, device_type, device_version, max_p2p_bytes, max_coll_bytes, max_multi_request],
        virtual_devices: super::v9::virtual_devices(p.virtual_devices.count, &p.virtual_devices.devices),
        ..RawProperties::defaults(device)
    )
}

impl PropertiesV11 {
    /// This version's struct of `raw` (for the exported plugin).
    pub fn from_raw(raw: &RawProperties) -> PropertiesV11 {
        let v9 = super::v9::PropertiesV9::from_raw(raw);
        same_fields!(
            PropertiesV11 from v9,
            [name, pci_path, guid, ptr_support, reg_is_global, force_flush, speed, port, latency, max_comms, max_recvs, device_type, device_version, virtual_devices, max_p2p_bytes, max_coll_bytes],
            max_multi_request: raw.max_multi_request
        )
    }
}

/// The table of a vtable with contexts, of ABI `version`, its properties converted by `raw`.
pub(super) fn context_table<P: CStruct, V>(version: u32, v: &ContextNet<P, V>, raw: fn(&P, c_int) -> RawProperties) -> Table {
    table!(version, v, raw, {
        init: v.init.map(InitCall::PerCommunicator),
        finalize: v.finalize,
        listen: v.listen.map(ListenCall::Context),
        connect: v.connect.map(ConnectCall::Context),
        accept: v.accept.map(AcceptCall::Device),
        reg_mr: v.reg_mr.map(RegMrCall::Size),
        isend: v.isend.map(IsendCall::Profiled),
        irecv: v.irecv.map(IrecvCall::Profiled),
    })
}

pub(super) fn table(v: &NetV11) -> Table {
    context_table(11, v, raw)
}
