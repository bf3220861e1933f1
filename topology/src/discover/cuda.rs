//! GPUs through the CUDA driver, opened at run time (cudarc's dynamic loading): absent
//! driver, no GPUs, never a panic.

use cudarc::driver::sys::{self, CUdevice_P2PAttribute, CUdevice_attribute, CUresult};

/// One GPU as the driver reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuInfo {
    pub ordinal: usize,
    /// `0000:19:00.0`, lower case.
    pub bus_id: String,
    /// Compute capability as NCCL writes it (90 for 9.0).
    pub sm: i32,
    pub multiprocessors: i32,
    /// GPUDirect RDMA or dma-buf supported.
    pub gdr: bool,
    /// Peer access towards every other GPU.
    pub peers: Vec<PeerInfo>,
}

/// Peer access from one GPU to another.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub ordinal: usize,
    pub access: bool,
    /// The driver's relative performance rank of the link (lower is better).
    pub performance_rank: i32,
    /// Native atomics across the link: NVLink (PCIe peers have none).
    pub native_atomics: bool,
}

/// An NVLink as written in the XML.
pub(crate) struct NvLink {
    pub target: String,
    pub count: u32,
    pub class: String,
}

fn ok(status: CUresult) -> bool {
    status == CUresult::CUDA_SUCCESS
}

/// The visible GPUs; none (with a note) when the driver cannot be loaded or initialised.
pub(crate) fn gpus(notes: &mut Vec<String>) -> Vec<GpuInfo> {
    // SAFETY: only tries to open the library by its candidate names.
    if !unsafe { sys::is_culib_present() } {
        notes.push("no CUDA driver (libcuda.so.1): no GPUs".into());
        return Vec::new();
    }
    // SAFETY: cuInit has no preconditions once the library is loaded.
    if !ok(unsafe { sys::cuInit(0) }) {
        notes.push("the CUDA driver did not initialise: no GPUs".into());
        return Vec::new();
    }
    let mut count = 0;
    // SAFETY: writes one int.
    if !ok(unsafe { sys::cuDeviceGetCount(&mut count) }) {
        notes.push("cuDeviceGetCount failed: no GPUs".into());
        return Vec::new();
    }
    let mut devices = Vec::new();
    for ordinal in 0..count.max(0) {
        let mut device = 0;
        // SAFETY: writes one device handle.
        if !ok(unsafe { sys::cuDeviceGet(&mut device, ordinal) }) {
            notes.push(format!("cuDeviceGet({ordinal}) failed: GPU skipped"));
            continue;
        }
        devices.push((ordinal as usize, device));
    }
    let attribute = |device, attribute| {
        let mut value = 0;
        // SAFETY: writes one int; an unknown attribute is an error status, not UB.
        if ok(unsafe { sys::cuDeviceGetAttribute(&mut value, attribute, device) }) {
            value
        } else {
            0
        }
    };
    let mut gpus = Vec::new();
    for &(ordinal, device) in &devices {
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        if !ok(unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, device) }) {
            notes.push(format!("GPU {ordinal}: no PCI bus id: skipped"));
            continue;
        }
        // SAFETY: NUL-terminated within the buffer (checked by the call's success).
        let bus_id = unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().to_ascii_lowercase();
        let sm = attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 + attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        let gdr = attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED) != 0 || attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED) != 0;
        let mut peers = Vec::new();
        for &(peer_ordinal, peer) in &devices {
            if peer_ordinal == ordinal {
                continue;
            }
            let p2p = |attribute| {
                let mut value = 0;
                // SAFETY: writes one int for two valid device handles.
                if ok(unsafe { sys::cuDeviceGetP2PAttribute(&mut value, attribute, device, peer) }) {
                    value
                } else {
                    0
                }
            };
            peers.push(PeerInfo {
                ordinal: peer_ordinal,
                access: p2p(CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED) != 0,
                performance_rank: p2p(CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK),
                native_atomics: p2p(CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED) != 0,
            });
        }
        let multiprocessors = attribute(device, CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        gpus.push(GpuInfo { ordinal, bus_id: normalize_bus_id(&bus_id), sm, multiprocessors, gdr, peers });
    }
    gpus
}

/// `00000000:19:00.0` (NVML, some drivers) → `0000:19:00.0`.
pub(crate) fn normalize_bus_id(bus_id: &str) -> String {
    match bus_id.split_once(':') {
        Some((domain, rest)) if domain.len() > 4 => format!("{}:{rest}", &domain[domain.len() - 4..]),
        _ => bus_id.to_string(),
    }
}

/// The links NCCL would read from NVML, inferred from CUDA when NVML is absent: a GPU pair
/// with peer access and native atomics is NVLink-connected; two such GPUs directly, more
/// through NVSwitch (all GPUs of an HGX board reach each other with the same links), with
/// the generation's link count (NCCL's maximum per GPU: 4 on sm6x, 6 sm7x, 12 sm8x, 18 sm90+).
pub(crate) fn inferred_nvlinks(gpu: &GpuInfo, all: &[GpuInfo], included: &[(usize, i32)]) -> Vec<NvLink> {
    let nvlinked: Vec<&PeerInfo> = gpu.peers.iter().filter(|p| p.access && p.native_atomics && included.iter().any(|(o, _)| *o == p.ordinal)).collect();
    if nvlinked.is_empty() {
        return Vec::new();
    }
    let count = match gpu.sm {
        s if s < 60 => return Vec::new(),
        s if s < 70 => 4,
        s if s < 80 => 6,
        s if s < 90 => 12,
        _ => 18,
    };
    if nvlinked.len() == 1 {
        let peer = &all[nvlinked[0].ordinal];
        return vec![NvLink { target: peer.bus_id.clone(), count, class: "0x030200".into() }];
    }
    vec![NvLink { target: "ffffffff:ffff:ff".into(), count, class: "0x068000".into() }]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu(ordinal: usize, peers: &[usize]) -> GpuInfo {
        GpuInfo {
            ordinal,
            bus_id: format!("0000:{:02x}:00.0", 0x10 + ordinal),
            sm: 90,
            multiprocessors: 132,
            gdr: true,
            peers: peers.iter().map(|&p| PeerInfo { ordinal: p, access: true, performance_rank: 0, native_atomics: true }).collect(),
        }
    }

    #[test]
    fn nvlinks_are_inferred_from_peer_atomics() {
        let two = [gpu(0, &[1]), gpu(1, &[0])];
        let links = inferred_nvlinks(&two[0], &two, &[(0, 0), (1, 1)]);
        assert_eq!((links.len(), links[0].count, links[0].target.as_str()), (1, 18, "0000:11:00.0"));
        let four: Vec<GpuInfo> = (0..4).map(|g| gpu(g, &(0..4).filter(|&p| p != g).collect::<Vec<_>>())).collect();
        let links = inferred_nvlinks(&four[2], &four, &[(0, 0), (1, 1), (2, 2), (3, 3)]);
        assert_eq!((links.len(), links[0].class.as_str()), (1, "0x068000"));
        let mut pcie = gpu(0, &[1]);
        pcie.peers[0].native_atomics = false;
        assert!(inferred_nvlinks(&pcie, &two, &[(0, 0), (1, 1)]).is_empty());
    }

    #[test]
    fn bus_ids_lose_the_long_domain() {
        assert_eq!(normalize_bus_id("00000000:19:00.0"), "0000:19:00.0");
        assert_eq!(normalize_bus_id("0000:19:00.0"), "0000:19:00.0");
    }
}
