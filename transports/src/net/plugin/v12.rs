//! Net plugin ABI v12 (`ncclNetPlugin_v12`, NCCL 2.30): v11 with virtual NICs of up to 8
//! devices, and the rail and plane of a device in the properties.

use std::ffi::{c_char, c_int};

use super::abi::*;
use super::table::*;
use super::v11::{context_table, ContextNet};

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
pub type NetV12 = ContextNet<PropertiesV12, VirtualDevicesV12>;

// SAFETY: integers, a float and pointers.
unsafe impl CStruct for PropertiesV12 {}

fn raw(p: &PropertiesV12, _device: c_int) -> RawProperties {
    let virtual_devices = (p.virtual_devices.count, p.virtual_devices.devices);
    same_fields!(RawProperties from p, [name, pci_path, guid, ptr_support, reg_is_global, force_flush, speed, port, latency, max_comms, max_recvs, device_type, device_version, max_p2p_bytes, max_coll_bytes, max_multi_request, rail, plane], virtual_devices: virtual_devices)
}

impl PropertiesV12 {
    /// This version's struct of `raw` (for the exported plugin).
    pub fn from_raw(raw: &RawProperties) -> PropertiesV12 {
        let virtual_devices = VirtualDevicesV12 { count: raw.virtual_devices.0, devices: raw.virtual_devices.1 };
        same_fields!(PropertiesV12 from raw, [name, pci_path, guid, ptr_support, reg_is_global, force_flush, speed, port, latency, max_comms, max_recvs, device_type, device_version, max_p2p_bytes, max_coll_bytes, max_multi_request, rail, plane], virtual_devices: virtual_devices)
    }
}

pub(super) fn table(v: &NetV12) -> Table {
    context_table(12, v, raw)
}
