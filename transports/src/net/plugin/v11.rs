//! Net plugin ABI v11 (`ncclNetPlugin_v11`, NCCL 2.28.3 to 2.29): `init` once per
//! communicator, giving a context that `listen` and `connect` take and `finalize` ends;
//! `maxMultiRequestSize` in the properties; the optional `setNetAttr`.

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

/// `ncclNet_v11_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV11 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut PropertiesV11) -> Status>,
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
    pub make_virtual_device: Option<unsafe extern "C" fn(device: *mut c_int, properties: *mut VirtualDevicesV11) -> Status>,
    pub finalize: Option<FinalizeFn>,
    pub set_net_attributes: Option<SetNetAttrFn>,
}

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV11 {}

// SAFETY: function pointers and a pointer to a static string, never written once made (the
// exported plugin's vtable is a static).
unsafe impl Sync for NetV11 {}

fn raw(p: &PropertiesV11, _device: c_int) -> RawProperties {
    RawProperties {
        name: p.name,
        pci_path: p.pci_path,
        guid: p.guid,
        ptr_support: p.ptr_support,
        reg_is_global: p.reg_is_global,
        force_flush: p.force_flush,
        speed: p.speed,
        port: p.port,
        latency: p.latency,
        max_comms: p.max_comms,
        max_recvs: p.max_recvs,
        device_type: p.device_type,
        device_version: p.device_version,
        virtual_devices: super::v9::virtual_devices(p.virtual_devices.count, &p.virtual_devices.devices),
        max_p2p_bytes: p.max_p2p_bytes,
        max_coll_bytes: p.max_coll_bytes,
        max_multi_request: p.max_multi_request,
        rail: ID_UNDEF,
        plane: ID_UNDEF,
    }
}

impl PropertiesV11 {
    /// This version's struct of `raw` (for the exported plugin).
    pub fn from_raw(raw: &RawProperties) -> PropertiesV11 {
        let v9 = super::v9::PropertiesV9::from_raw(raw);
        PropertiesV11 {
            name: v9.name,
            pci_path: v9.pci_path,
            guid: v9.guid,
            ptr_support: v9.ptr_support,
            reg_is_global: v9.reg_is_global,
            force_flush: v9.force_flush,
            speed: v9.speed,
            port: v9.port,
            latency: v9.latency,
            max_comms: v9.max_comms,
            max_recvs: v9.max_recvs,
            device_type: v9.device_type,
            device_version: v9.device_version,
            virtual_devices: v9.virtual_devices,
            max_p2p_bytes: v9.max_p2p_bytes,
            max_coll_bytes: v9.max_coll_bytes,
            max_multi_request: raw.max_multi_request,
        }
    }
}

pub(super) fn table(v: &NetV11) -> Table {
    Table {
        init: v.init.map(InitCall::PerCommunicator),
        finalize: v.finalize,
        devices: v.devices,
        properties: v.get_properties.map(|get| properties_call(get, raw)),
        listen: v.listen.map(ListenCall::Context),
        connect: v.connect.map(ConnectCall::Context),
        accept: v.accept.map(AcceptCall::Device),
        reg_mr: v.reg_mr.map(RegMrCall::Size),
        dereg_mr: v.dereg_mr,
        isend: v.isend.map(IsendCall::Profiled),
        irecv: v.irecv.map(IrecvCall::Profiled),
        iflush: v.iflush,
        test: v.test,
        close_send: v.close_send,
        close_recv: v.close_recv,
        close_listen: v.close_listen,
        ..Table::empty(11, v.name)
    }
}
