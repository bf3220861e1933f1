//! Net plugin ABI v9 (`ncclNetPlugin_v9`, NCCL 2.22–2.25): `size_t` sizes in `isend` and
//! `irecv`, `forceFlush`, virtual NICs (`vProps`, `makeVDevice`) and the largest message
//! sizes in the properties; `init` still once per process.

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;

/// `ncclNetVDeviceProps_v9_t` (4 devices, also v10's and v11's).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct VirtualDevicesV9 {
    pub count: c_int,
    pub devices: [c_int; 4],
}

/// `ncclNetProperties_v9_t` (v10's too).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PropertiesV9 {
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
    pub virtual_devices: VirtualDevicesV9,
    pub max_p2p_bytes: usize,
    pub max_coll_bytes: usize,
}

/// `ncclNet_v9_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NetV9 {
    pub name: *const c_char,
    pub init: Option<InitOnceFn>,
    pub devices: Option<DevicesFn>,
    pub get_properties: Option<unsafe extern "C" fn(device: c_int, properties: *mut PropertiesV9) -> Status>,
    pub listen: Option<ListenFn>,
    pub connect: Option<ConnectFn>,
    pub accept: Option<AcceptFn>,
    pub reg_mr: Option<RegMrFn>,
    pub reg_mr_dma_buf: Option<RegMrDmaBufFn>,
    pub dereg_mr: Option<DeregMrFn>,
    pub isend: Option<IsendSizeFn>,
    pub irecv: Option<IrecvSizeFn>,
    pub iflush: Option<IflushFn>,
    pub test: Option<TestFn>,
    pub close_send: Option<CloseFn>,
    pub close_recv: Option<CloseFn>,
    pub close_listen: Option<CloseFn>,
    pub get_device_mr: Option<GetDeviceMrFn>,
    pub irecv_consumed: Option<IrecvConsumedFn>,
    pub make_virtual_device: Option<unsafe extern "C" fn(device: *mut c_int, properties: *mut VirtualDevicesV9) -> Status>,
}

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV9 {}

// SAFETY: function pointers and a pointer to a static string, never written once made (the
// exported plugin's vtable is a static).
unsafe impl Sync for NetV9 {}

/// The first devices of a virtual NIC, in the newest version's 8 places.
pub(super) fn virtual_devices(count: c_int, devices: &[c_int]) -> (c_int, [c_int; 8]) {
    let mut all = [0; 8];
    all[..devices.len()].copy_from_slice(devices);
    (count, all)
}

pub(super) fn raw(p: &PropertiesV9, device: c_int) -> RawProperties {
    same_fields!(
        RawProperties from p,
        [name, pci_path, guid, ptr_support, speed, port, latency, max_comms, max_recvs, reg_is_global, force_flush, device_type, device_version, max_p2p_bytes, max_coll_bytes],
        virtual_devices: virtual_devices(p.virtual_devices.count, &p.virtual_devices.devices),
        ..RawProperties::defaults(device)
    )
}

impl PropertiesV9 {
    /// This version's struct of `raw` (for the exported plugin).
    pub fn from_raw(raw: &RawProperties) -> PropertiesV9 {
        let mut devices = [0; 4];
        devices.copy_from_slice(&raw.virtual_devices.1[..4]);
        same_fields!(
            PropertiesV9 from raw,
            [name, pci_path, guid, ptr_support, speed, port, latency, max_comms, max_recvs, reg_is_global, force_flush, device_type, device_version, max_p2p_bytes, max_coll_bytes],
            virtual_devices: VirtualDevicesV9 { count: raw.virtual_devices.0.min(4), devices }
        )
    }
}

pub(super) fn table(v: &NetV9) -> Table {
    table!(9, v, raw, {
        init: v.init.map(InitCall::Once),
        listen: v.listen.map(ListenCall::Plain),
        connect: v.connect.map(ConnectCall::Plain),
        accept: v.accept.map(AcceptCall::Device),
        reg_mr: v.reg_mr.map(RegMrCall::Size),
        isend: v.isend.map(IsendCall::Size),
        irecv: v.irecv.map(IrecvCall::Size),
    })
}
