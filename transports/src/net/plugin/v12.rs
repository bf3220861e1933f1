//! Net plugin ABI v12 (`ncclNetPlugin_v12`, NCCL 2.30): v11 with virtual NICs of up to 8
//! devices, and the rail and plane of a device in the properties.

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;

/// `ncclNetVDeviceProps_v12_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VirtualDevicesV12 {
    pub count: c_int,
    pub devices: [c_int; 8],
}

/// `ncclNetProperties_v12_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PropertiesV12 {
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
    pub virtual_devices: VirtualDevicesV12,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
    pub max_multi_request: c_int,
    pub rail: i16,
    pub plane: i16,
}

/// `ncclNet_v12_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV12 {
    pub name: *const c_char,
    pub init: Option<InitFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut PropertiesV12) -> Status>,
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
    pub make_virtual_device: Option<unsafe extern "C" fn(device: *mut c_int, properties: *mut VirtualDevicesV12) -> Status>,
    pub finalize: Option<FinalizeFn>,
    pub set_net_attributes: Option<SetNetAttrFn>,
}

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV12 {}

// SAFETY: function pointers and a pointer to a static string, never written once made (the
// exported plugin's vtable is a static).
unsafe impl Sync for NetV12 {}

fn raw(p: &PropertiesV12, _device: c_int) -> RawProperties {
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
        virtual_devices: (p.virtual_devices.count, p.virtual_devices.devices),
        max_p2p_bytes: p.max_p2p_bytes,
        max_coll_bytes: p.max_coll_bytes,
        max_multi_request: p.max_multi_request,
        rail: p.rail,
        plane: p.plane,
    }
}

impl PropertiesV12 {
    /// This version's struct of `raw` (for the exported plugin).
    pub fn from_raw(raw: &RawProperties) -> PropertiesV12 {
        PropertiesV12 {
            name: raw.name,
            pci_path: raw.pci_path,
            guid: raw.guid,
            ptr_support: raw.ptr_support,
            reg_is_global: raw.reg_is_global,
            force_flush: raw.force_flush,
            speed: raw.speed,
            port: raw.port,
            latency: raw.latency,
            max_comms: raw.max_comms,
            max_recvs: raw.max_recvs,
            device_type: raw.device_type,
            device_version: raw.device_version,
            virtual_devices: VirtualDevicesV12 { count: raw.virtual_devices.0, devices: raw.virtual_devices.1 },
            max_p2p_bytes: raw.max_p2p_bytes,
            max_coll_bytes: raw.max_coll_bytes,
            max_multi_request: raw.max_multi_request,
            rail: raw.rail,
            plane: raw.plane,
        }
    }
}

pub(super) fn table(v: &NetV12) -> Table {
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
        ..Table::empty(12, v.name)
    }
}
