//! NVLinks through NVML, opened at run time (`libnvidia-ml.so.1`); absent, discovery goes on
//! without it.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};

use super::cuda::{normalize_bus_id, NvLink};

type Device = *mut c_void;

/// NVML's `nvmlPciInfo_t` (NVML 11+ layout).
#[repr(C)]
struct PciInfo {
    bus_id_legacy: [c_char; 16],
    domain: c_uint,
    bus: c_uint,
    device: c_uint,
    pci_device_id: c_uint,
    pci_subsystem_id: c_uint,
    bus_id: [c_char; 32],
}
const _: () = assert!(std::mem::size_of::<PciInfo>() == 68);

const NVLINK_CAP_P2P_SUPPORTED: c_int = 0;
const FEATURE_ENABLED: c_int = 1;

pub(crate) struct Nvml {
    _library: libloading::Library,
    handle_by_bus_id: unsafe extern "C" fn(*const c_char, *mut Device) -> c_int,
    capability: unsafe extern "C" fn(Device, c_uint, c_int, *mut c_uint) -> c_int,
    state: unsafe extern "C" fn(Device, c_uint, *mut c_int) -> c_int,
    remote: unsafe extern "C" fn(Device, c_uint, *mut PciInfo) -> c_int,
    shutdown: unsafe extern "C" fn() -> c_int,
}

impl Nvml {
    /// Opens and initialises NVML; None (with a note) when it is absent or fails.
    pub fn open(notes: &mut Vec<String>) -> Option<Nvml> {
        // SAFETY: loading NVML runs only its initialisers, which have no preconditions.
        let library = match unsafe { libloading::Library::new("libnvidia-ml.so.1") } {
            Ok(l) => l,
            Err(_) => {
                notes.push("NVML (libnvidia-ml.so.1) not found".into());
                return None;
            }
        };
        // SAFETY: each symbol is NVML's exported function with the signature declared here (nvml.h).
        let nvml = unsafe {
            let init: libloading::Symbol<unsafe extern "C" fn() -> c_int> = library.get(b"nvmlInit_v2").ok()?;
            if init() != 0 {
                notes.push("nvmlInit_v2 failed: NVLinks not read".into());
                return None;
            }
            Nvml {
                handle_by_bus_id: *library.get(b"nvmlDeviceGetHandleByPciBusId_v2").ok()?,
                capability: *library.get(b"nvmlDeviceGetNvLinkCapability").ok()?,
                state: *library.get(b"nvmlDeviceGetNvLinkState").ok()?,
                remote: *library.get(b"nvmlDeviceGetNvLinkRemotePciInfo_v2").ok()?,
                shutdown: *library.get(b"nvmlShutdown").ok()?,
                _library: library,
            }
        };
        Some(nvml)
    }

    /// The GPU's active P2P NVLinks, grouped by what they lead to (NCCL's `ncclTopoGetXmlFromGpu`).
    pub fn links(&self, bus_id: &str, sm: i32) -> Vec<NvLink> {
        let max_links = match sm {
            s if s < 60 => 0,
            s if s < 70 => 4,
            s if s < 80 => 6,
            s if s < 90 => 12,
            _ => 18,
        };
        let Ok(bus) = CString::new(bus_id) else { return Vec::new() };
        let mut device: Device = std::ptr::null_mut();
        // SAFETY: a NUL-terminated bus id and a handle to write.
        if unsafe { (self.handle_by_bus_id)(bus.as_ptr(), &mut device) } != 0 {
            return Vec::new();
        }
        let mut links: Vec<NvLink> = Vec::new();
        for link in 0..max_links {
            let mut p2p: c_uint = 0;
            // SAFETY: a valid handle and link index; writes one uint.
            if unsafe { (self.capability)(device, link, NVLINK_CAP_P2P_SUPPORTED, &mut p2p) } != 0 || p2p == 0 {
                continue;
            }
            let mut active: c_int = 0;
            // SAFETY: as above. Hopper reports state through field values; a failing call is not taken as "down".
            let status = unsafe { (self.state)(device, link, &mut active) };
            if status == 0 && active != FEATURE_ENABLED {
                continue;
            }
            // SAFETY: zeroed PciInfo is a valid value (integers and char arrays).
            let mut info: PciInfo = unsafe { std::mem::zeroed() };
            // SAFETY: writes one PciInfo.
            if unsafe { (self.remote)(device, link, &mut info) } != 0 {
                continue;
            }
            // SAFETY: NVML NUL-terminates bus_id within its 32 bytes.
            let target = unsafe { std::ffi::CStr::from_ptr(info.bus_id.as_ptr()) }.to_string_lossy().to_ascii_lowercase();
            let target = normalize_bus_id(&target);
            match links.iter_mut().find(|l| l.target == target) {
                Some(l) => l.count += 1,
                None => {
                    // The class of what is on the other side; a device the VM cannot see is an NVSwitch.
                    let class = super::sysfs::read(&format!("/sys/bus/pci/devices/{target}"), "class").unwrap_or_else(|| "0x068000".into());
                    links.push(NvLink { target, count: 1, class });
                }
            }
        }
        links
    }
}

impl Drop for Nvml {
    fn drop(&mut self) {
        // SAFETY: balances the successful nvmlInit_v2.
        unsafe { (self.shutdown)() };
    }
}
