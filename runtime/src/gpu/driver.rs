//! The few CUDA driver calls the GPU backend makes, each checked and turned into an
//! [`Error::Cuda`] naming what was being done, with owners that free what they allocate.
//! cudarc opens libcuda at run time; [`available`] probes for it first so that a machine
//! without a driver gets an error, never a panic.

use std::ffi::{c_void, CString};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUmodule, CUresult, CUstream};

use crate::error::{Error, Result};

/// Turns a driver status into a result, naming what was being done.
pub(crate) fn check(status: CUresult, what: impl FnOnce() -> String) -> Result<()> {
    if status == CUresult::CUDA_SUCCESS {
        return Ok(());
    }
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: cuGetErrorName writes a pointer to a static string (or leaves it null).
    unsafe { sys::cuGetErrorName(status, &mut name) };
    let name = if name.is_null() {
        format!("{status:?}")
    } else {
        // SAFETY: a NUL-terminated static string from the driver.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    };
    Err(Error::cuda(format!("{}: {name}", what())))
}

/// Whether libcuda can be loaded and initialised.
pub(crate) fn available() -> bool {
    // SAFETY: only tries to open the library by its candidate names.
    if !unsafe { sys::is_culib_present() } {
        return false;
    }
    // SAFETY: cuInit has no preconditions once the library is loaded.
    unsafe { sys::cuInit(0) == CUresult::CUDA_SUCCESS }
}

/// How many GPUs this process sees (0 without a driver).
pub fn device_count() -> usize {
    if !available() {
        return 0;
    }
    let mut n = 0;
    // SAFETY: writes one int.
    if unsafe { sys::cuDeviceGetCount(&mut n) } != CUresult::CUDA_SUCCESS {
        return 0;
    }
    n.max(0) as usize
}

/// A GPU and its primary context (the one the CUDA runtime uses, so that buffers and
/// streams from `cudaMalloc` and `cudaStreamCreate` work here unchanged).
pub(crate) struct Device {
    pub ordinal: i32,
    pub device: CUdevice,
    pub context: CUcontext,
}

// SAFETY: a primary context may be made current on any thread; the handles are plain ids.
unsafe impl Send for Device {}
// SAFETY: shared use is as safe as the move above: the handle has no interior state of its own.
unsafe impl Sync for Device {}

impl Device {
    /// Opens GPU `ordinal` (retains its primary context; [`Device::bind`] makes it current).
    pub fn open(ordinal: usize) -> Result<Device> {
        if !available() {
            return Err(Error::cuda("no usable CUDA driver (libcuda.so.1 missing or cuInit failed): this machine cannot run the GPU backend"));
        }
        let count = device_count();
        if ordinal >= count {
            return Err(Error::invalid(format!("GPU {ordinal} does not exist: this process sees {count} GPU(s)")));
        }
        let ordinal = ordinal as i32;
        let mut device = 0;
        // SAFETY: writes one device handle.
        check(unsafe { sys::cuDeviceGet(&mut device, ordinal) }, || format!("getting GPU {ordinal}"))?;
        let mut context = std::ptr::null_mut();
        // SAFETY: retains (creating if needed) the device's primary context.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut context, device) }, || format!("retaining GPU {ordinal}'s primary context"))?;
        Ok(Device { ordinal, device, context })
    }

    /// The GPU of the calling thread's current context (what `cudaSetDevice` chose).
    pub fn current() -> Result<Device> {
        if !available() {
            return Err(Error::cuda("no usable CUDA driver (libcuda.so.1 missing or cuInit failed)"));
        }
        let mut device = 0;
        // SAFETY: writes one device handle; fails when no context is current.
        match unsafe { sys::cuCtxGetDevice(&mut device) } {
            CUresult::CUDA_SUCCESS => {}
            // No context yet: the runtime's default device is 0.
            CUresult::CUDA_ERROR_INVALID_CONTEXT => return Device::open(0),
            status => check(status, || "asking which GPU is current".into())?,
        }
        let mut ordinal = 0;
        for i in 0..device_count() as i32 {
            let mut d = 0;
            // SAFETY: writes one device handle.
            if unsafe { sys::cuDeviceGet(&mut d, i) } == CUresult::CUDA_SUCCESS && d == device {
                ordinal = i;
            }
        }
        Device::open(ordinal as usize)
    }

    /// Makes the context current on the calling thread.
    pub fn bind(&self) -> Result<()> {
        // SAFETY: the context is retained for as long as `self` lives.
        check(unsafe { sys::cuCtxSetCurrent(self.context) }, || format!("making GPU {}'s context current", self.ordinal))
    }

    /// Compute capability (major, minor).
    pub fn capability(&self) -> Result<(i32, i32)> {
        let (mut major, mut minor) = (0, 0);
        // SAFETY: each call writes one int.
        unsafe {
            check(sys::cuDeviceGetAttribute(&mut major, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.device), || "asking the compute capability".into())?;
            check(sys::cuDeviceGetAttribute(&mut minor, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.device), || "asking the compute capability".into())?;
        }
        Ok((major, minor))
    }

    /// The PCI bus id (`0000:00:06.0`, lower case): what names this GPU to processes that
    /// number the GPUs otherwise.
    pub fn pci_bus_id(&self) -> Result<String> {
        let mut bus = [0 as std::ffi::c_char; 32];
        // SAFETY: the driver writes at most `len` bytes, NUL-terminated.
        check(unsafe { sys::cuDeviceGetPCIBusId(bus.as_mut_ptr(), bus.len() as i32, self.device) }, || format!("asking GPU {}'s PCI bus id", self.ordinal))?;
        // SAFETY: NUL-terminated within the buffer (the call succeeded).
        Ok(unsafe { std::ffi::CStr::from_ptr(bus.as_ptr()) }.to_string_lossy().to_ascii_lowercase())
    }

    /// Whether a warp's 128-byte store from this GPU reaches the GPU at PCI bus id `bus_id`
    /// whole (LL128's premise): the same GPU, or a peer over NVLink, told by native peer
    /// atomics (PCIe peers have none; the topology crate infers NVLinks the same way). False
    /// for a GPU this process does not see, and where the driver cannot say.
    pub fn stores_lines_whole_to(&self, bus_id: &str) -> bool {
        let Ok(bus) = CString::new(bus_id) else { return false };
        let mut peer = 0;
        // SAFETY: writes one device handle; fails for a GPU this process does not see.
        if unsafe { sys::cuDeviceGetByPCIBusId(&mut peer, bus.as_ptr()) } != CUresult::CUDA_SUCCESS {
            return false;
        }
        if peer == self.device {
            return true;
        }
        // An attribute the driver cannot say counts as absent: LL lines then, never an error.
        let p2p = |attribute| {
            let mut value = 0;
            // SAFETY: writes one int for two valid device handles.
            let status = unsafe { sys::cuDeviceGetP2PAttribute(&mut value, attribute, self.device, peer) };
            status == CUresult::CUDA_SUCCESS && value != 0
        };
        p2p(sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED) && p2p(sys::CUdevice_P2PAttribute::CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED)
    }

    /// Streaming multiprocessors.
    pub fn multiprocessors(&self) -> Result<usize> {
        let mut count = 0;
        // SAFETY: writes one int.
        check(unsafe { sys::cuDeviceGetAttribute(&mut count, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.device) }, || "asking the multiprocessor count".into())?;
        Ok(count.max(1) as usize)
    }

    /// Lets this context reach `peer`'s memory (same process, another GPU).
    pub fn enable_peer_access(&self, peer: &Device) -> Result<()> {
        if peer.device == self.device {
            return Ok(());
        }
        let mut can = 0;
        // SAFETY: writes one int.
        check(unsafe { sys::cuDeviceCanAccessPeer(&mut can, self.device, peer.device) }, || "asking for peer access".into())?;
        if can == 0 {
            return Err(Error::cuda(format!("GPU {} cannot access GPU {}'s memory (no NVLink or PCIe peer path)", self.ordinal, peer.ordinal)));
        }
        self.bind()?;
        // SAFETY: both contexts are retained.
        match unsafe { sys::cuCtxEnablePeerAccess(peer.context, 0) } {
            CUresult::CUDA_SUCCESS | CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            status => check(status, || format!("enabling GPU {}'s access to GPU {}", self.ordinal, peer.ordinal)),
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: releases the retain taken in `open`.
        unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// Device memory from `cuMemAlloc` (a plain allocation: pooled ones cannot be exported
/// through CUDA IPC), zeroed, freed on drop.
pub(crate) struct DeviceMemory {
    pub ptr: CUdeviceptr,
    pub bytes: usize,
}

impl DeviceMemory {
    /// Allocates `bytes` in the current context and zeroes them on the upload stream: the
    /// legacy default stream would wait for every kernel queued on the program's blocking
    /// streams (connections are set up at enqueue, behind the program's own work).
    pub fn zeroed(bytes: usize) -> Result<DeviceMemory> {
        let mut ptr = 0;
        // SAFETY: writes one device pointer; the context is current (callers bind first).
        check(unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) }, || format!("allocating {bytes} bytes of GPU memory"))?;
        let memory = DeviceMemory { ptr, bytes };
        let stream = upload_stream()?;
        // SAFETY: the allocation holds `bytes` bytes; the stream is of the current context.
        check(unsafe { sys::cuMemsetD8Async(ptr, 0, bytes, stream) }, || "zeroing GPU memory".into())?;
        // SAFETY: as above.
        check(unsafe { sys::cuStreamSynchronize(stream) }, || "zeroing GPU memory (waiting for it to land)".into())?;
        Ok(memory)
    }

    /// Copies `data` to the start of the allocation (synchronously).
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        self.upload_at(0, data)
    }

    /// Copies `data` to `offset` bytes into the allocation, landed when this returns: on
    /// a stream of the upload's own, so that it waits for no other work (see
    /// [`upload_stream`]).
    pub fn upload_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        assert!(offset + data.len() <= self.bytes);
        let stream = upload_stream()?;
        // SAFETY: the allocation holds offset + data.len() bytes; the stream is of the
        // current context.
        check(unsafe { sys::cuMemcpyHtoDAsync_v2(self.ptr + offset as u64, data.as_ptr().cast(), data.len(), stream) }, || "copying to the GPU".into())?;
        // SAFETY: as above.
        check(unsafe { sys::cuStreamSynchronize(stream) }, || "copying to the GPU (waiting for the copy to land)".into())
    }

    /// Copies the start of the allocation into `out` (synchronously).
    pub fn download(&self, out: &mut [u8]) -> Result<()> {
        assert!(out.len() <= self.bytes);
        // SAFETY: the allocation holds at least out.len() bytes.
        unsafe { copy_from_device(self.ptr, out) }
    }

    /// The allocation's CUDA IPC handle.
    pub fn ipc_handle(&self) -> Result<[u8; 64]> {
        let mut handle = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: writes the handle of an allocation made by cuMemAlloc.
        check(unsafe { sys::cuIpcGetMemHandle(&mut handle, self.ptr) }, || "exporting GPU memory through CUDA IPC".into())?;
        Ok(handle.reserved.map(|b| b as u8))
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: frees what cuMemAlloc returned, once.
        unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// The current context's stream for the backend's own uploads (plans, connection tables):
/// non-blocking, one per context, kept for the process. A copy on the legacy default
/// stream would wait for all work queued on the program's blocking streams (PyTorch's
/// default stream is one): every plan built would wait for the program's kernels.
fn upload_stream() -> Result<CUstream> {
    type Streams = std::collections::HashMap<usize, usize>;
    static STREAMS: std::sync::LazyLock<parking_lot::Mutex<Streams>> = std::sync::LazyLock::new(Default::default);
    let mut context: CUcontext = std::ptr::null_mut();
    // SAFETY: writes one context handle.
    check(unsafe { sys::cuCtxGetCurrent(&mut context) }, || "finding the current CUDA context".into())?;
    let mut streams = STREAMS.lock();
    if let Some(&stream) = streams.get(&(context as usize)) {
        return Ok(stream as CUstream);
    }
    let stream = Stream::create()?;
    let raw = stream.0;
    std::mem::forget(stream);
    streams.insert(context as usize, raw as usize);
    Ok(raw)
}

/// Copies `data` to device memory at `dst`, landed when this returns.
///
/// # Safety
/// `dst` is device memory of the current context with room for `data.len()` bytes.
pub(crate) unsafe fn copy_to_device(dst: CUdeviceptr, data: &[u8]) -> Result<()> {
    // SAFETY: per this function's contract.
    check(unsafe { sys::cuMemcpyHtoD_v2(dst, data.as_ptr().cast(), data.len()) }, || "copying to the GPU".into())?;
    legacy_stream_sync("copying to the GPU")
}

/// Copies device memory at `src` into `out`, after the work on the legacy default stream.
///
/// # Safety
/// `src` is device memory of the current context holding `out.len()` bytes.
pub(crate) unsafe fn copy_from_device(src: CUdeviceptr, out: &mut [u8]) -> Result<()> {
    // SAFETY: per this function's contract.
    check(unsafe { sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), src, out.len()) }, || "copying from the GPU".into())
}

/// Waits for the legacy default stream. A synchronous copy from pageable host memory (and
/// a synchronous memset) may return before its DMA lands; work on a non-blocking stream
/// launched after it would not wait for it and could read, or be overwritten by, the old
/// bytes. Waiting here makes "synchronous" mean it.
fn legacy_stream_sync(what: &str) -> Result<()> {
    // SAFETY: the null stream is the context's legacy default stream.
    check(unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) }, || format!("{what} (waiting for the copy to land)"))
}

/// Another process's GPU memory, opened through CUDA IPC; closed on drop.
pub(crate) struct IpcMemory {
    pub ptr: CUdeviceptr,
}

impl IpcMemory {
    pub fn open(handle: &[u8; 64]) -> Result<IpcMemory> {
        let handle = sys::CUipcMemHandle_st { reserved: handle.map(|b| b as std::ffi::c_char) };
        let mut ptr = 0;
        // SAFETY: writes one device pointer; the handle came from cuIpcGetMemHandle.
        check(unsafe { sys::cuIpcOpenMemHandle_v2(&mut ptr, handle, sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32) }, || "opening a peer's GPU memory through CUDA IPC".into())?;
        Ok(IpcMemory { ptr })
    }
}

impl Drop for IpcMemory {
    fn drop(&mut self) {
        // SAFETY: closes what cuIpcOpenMemHandle opened, once.
        unsafe { sys::cuIpcCloseMemHandle(self.ptr) };
    }
}

/// Pinned host memory (`cuMemHostAlloc`, portable): what asynchronous copies between the
/// GPU and the host need. Freed on drop (which waits for the device, as cudaFreeHost does).
pub(crate) struct PinnedHost {
    pub ptr: *mut u8,
    pub bytes: usize,
}

// SAFETY: plain host memory; who reads and writes it when is the owner's protocol.
unsafe impl Send for PinnedHost {}
// SAFETY: shared use is as safe as the move above: the handle has no interior state of its own.
unsafe impl Sync for PinnedHost {}

impl PinnedHost {
    pub fn new(bytes: usize) -> Result<PinnedHost> {
        PinnedHost::with_flags(bytes, sys::CU_MEMHOSTALLOC_PORTABLE, "pinned host memory")
    }

    fn with_flags(bytes: usize, flags: u32, what: &str) -> Result<PinnedHost> {
        let mut host: *mut c_void = std::ptr::null_mut();
        // SAFETY: writes one host pointer.
        check(unsafe { sys::cuMemHostAlloc(&mut host, bytes.max(1), flags) }, || format!("allocating {bytes} bytes of {what}"))?;
        Ok(PinnedHost { ptr: host.cast(), bytes })
    }
}

impl Drop for PinnedHost {
    fn drop(&mut self) {
        // SAFETY: frees what cuMemHostAlloc returned, once.
        unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// Host memory allocated elsewhere (a shared-memory segment another process made),
/// page-locked and mapped into the GPU's address space until dropped.
pub(crate) struct HostRegistration {
    ptr: *mut u8,
    pub device: CUdeviceptr,
}

// SAFETY: a registration is an address and the driver's record of it; who touches the
// memory when is its owner's protocol.
unsafe impl Send for HostRegistration {}
// SAFETY: as above.
unsafe impl Sync for HostRegistration {}

impl HostRegistration {
    /// Registers `bytes` at `ptr` (page-aligned; the context is current).
    ///
    /// # Safety
    /// The range stays mapped until the registration is dropped.
    pub unsafe fn new(ptr: *mut u8, bytes: usize) -> Result<HostRegistration> {
        let flags = sys::CU_MEMHOSTREGISTER_DEVICEMAP | sys::CU_MEMHOSTREGISTER_PORTABLE;
        // SAFETY: the range is mapped (the caller's contract).
        check(unsafe { sys::cuMemHostRegister_v2(ptr.cast(), bytes, flags) }, || format!("registering {bytes} bytes of shared host memory with the GPU"))?;
        let mut registration = HostRegistration { ptr, device: 0 };
        // SAFETY: writes the device address of registered mapped memory (unregistered with
        // `registration` if this fails).
        check(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut registration.device, ptr.cast(), 0) }, || "mapping shared host memory into the GPU".into())?;
        Ok(registration)
    }
}

impl Drop for HostRegistration {
    fn drop(&mut self) {
        // SAFETY: unregisters what `new` registered, once.
        unsafe { sys::cuMemHostUnregister(self.ptr.cast()) };
    }
}

/// Copies `bytes` from device address `src` to host memory at `dst` on `stream`.
///
/// # Safety
/// `src` holds `bytes` bytes of this context's reach, `dst` is pinned host memory holding
/// them; neither is touched by others until the stream passes the copy.
pub(crate) unsafe fn copy_to_host_async(dst: *mut u8, src: CUdeviceptr, bytes: usize, stream: CUstream) -> Result<()> {
    // SAFETY: per this function's contract.
    check(unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, bytes, stream) }, || format!("copying {bytes} bytes from the GPU to host memory"))
}

/// Copies `bytes` from pinned host memory at `src` to device address `dst` on `stream`.
///
/// # Safety
/// As [`copy_to_host_async`], the other way round.
pub(crate) unsafe fn copy_to_device_async(dst: CUdeviceptr, src: *const u8, bytes: usize, stream: CUstream) -> Result<()> {
    // SAFETY: per this function's contract.
    check(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), bytes, stream) }, || format!("copying {bytes} bytes from host memory to the GPU"))
}

/// Pinned host memory mapped into the GPU's address space (not write-combined: the host
/// reads it too): the abort flag, the kernels' status words, the staged path's counters.
pub(crate) struct MappedHost {
    memory: PinnedHost,
    pub device: CUdeviceptr,
    ints: usize,
}

impl MappedHost {
    pub fn zeroed(ints: usize) -> Result<MappedHost> {
        let memory = PinnedHost::with_flags(ints * 4, sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE, "mapped host memory")?;
        // SAFETY: the allocation holds `ints` ints.
        unsafe { std::ptr::write_bytes(memory.ptr, 0, ints * 4) };
        let mut device = 0;
        // SAFETY: writes the device address of mapped host memory (freed with `memory` if
        // this fails).
        check(unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, memory.ptr.cast(), 0) }, || "mapping host memory into the GPU".into())?;
        Ok(MappedHost { memory, device, ints })
    }

    /// The host address of its first byte.
    pub fn host(&self) -> *mut u8 {
        self.memory.ptr
    }

    fn int(&self, i: usize) -> *mut i32 {
        assert!(i < self.ints);
        // SAFETY: in bounds (checked above).
        unsafe { self.memory.ptr.cast::<i32>().add(i) }
    }

    fn u64_at(&self, i: usize) -> *mut u64 {
        // Ints `i` and `i + 1` (`i` even: 8-byte aligned, the allocation is page aligned).
        assert!(i % 2 == 0 && i + 1 < self.ints);
        self.int(i).cast()
    }

    pub fn get(&self, i: usize) -> i32 {
        // SAFETY: in bounds; the GPU writes it concurrently, hence volatile.
        unsafe { std::ptr::read_volatile(self.int(i)) }
    }

    pub fn set(&self, i: usize, value: i32) {
        // SAFETY: as above.
        unsafe { std::ptr::write_volatile(self.int(i), value) }
    }

    /// Ints `i` and `i + 1` as one u64, read with one load.
    pub fn get_u64(&self, i: usize) -> u64 {
        // SAFETY: in bounds and aligned; the GPU writes it concurrently, hence volatile.
        unsafe { std::ptr::read_volatile(self.u64_at(i)) }
    }

    /// Ints `i` and `i + 1` as one u64, written with one store.
    pub fn set_u64(&self, i: usize, value: u64) {
        // SAFETY: as above; the GPU reads it concurrently.
        unsafe { std::ptr::write_volatile(self.u64_at(i), value) }
    }

    /// The device address of int `i`.
    pub fn device_at(&self, i: usize) -> CUdeviceptr {
        assert!(i < self.ints);
        self.device + (i * 4) as u64
    }

    /// Copies int `i` to each device address of `dsts` (this GPU's memory or a peer's, as
    /// this context reaches it) and waits up to `limit` until they landed (whether they
    /// did). The copies run on a non-blocking stream of their own so that they wait for no
    /// kernel: the legacy default stream would wait for every blocking stream's work, and a
    /// kernel there may wait for these writes. Even so the GPU may queue that stream behind
    /// a waiting kernel's (streams share CUDA_DEVICE_MAX_CONNECTIONS hardware queues), so
    /// the wait is bounded.
    ///
    /// # Safety
    /// Each of `dsts` is 4 bytes of device memory this context reaches; the context is
    /// current.
    pub unsafe fn copy_int_to_devices(&self, i: usize, dsts: &[CUdeviceptr], limit: std::time::Duration) -> Result<bool> {
        let src = self.int(i);
        let stream = Stream::create()?;
        for &dst in dsts {
            // SAFETY: 4 bytes of pinned memory (in bounds) to 4 bytes at `dst` (the contract).
            check(unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), 4, stream.0) }, || "copying a flag to GPU memory".into())?;
        }
        // SAFETY: a stream this function made.
        let landed = unsafe { Event::record(stream.0)? };
        landed.done_by(std::time::Instant::now() + limit)
    }
}

/// A loaded PTX module and its kernels.
pub(crate) struct Module {
    module: CUmodule,
}

// SAFETY: module and function handles may be used from any thread with the context current.
unsafe impl Send for Module {}
// SAFETY: shared use is as safe as the move above: the handle has no interior state of its own.
unsafe impl Sync for Module {}

impl Module {
    pub fn load(ptx: &str) -> Result<Module> {
        let text = CString::new(ptx).map_err(|_| Error::Internal("PTX with a NUL byte".into()))?;
        let mut module = std::ptr::null_mut();
        // SAFETY: the image is a NUL-terminated PTX string; the context is current.
        check(unsafe { sys::cuModuleLoadData(&mut module, text.as_ptr().cast()) }, || "loading the kernels' PTX".into())?;
        Ok(Module { module })
    }

    pub fn function(&self, name: &str) -> Result<Function> {
        let cname = CString::new(name).map_err(|_| Error::Internal("kernel name with a NUL byte".into()))?;
        let mut f = std::ptr::null_mut();
        // SAFETY: writes one function handle of this module.
        check(unsafe { sys::cuModuleGetFunction(&mut f, self.module, cname.as_ptr()) }, || format!("finding kernel {name}"))?;
        Ok(Function(f))
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        // SAFETY: unloads what cuModuleLoadData loaded, once.
        unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// A kernel of a loaded [`Module`] (valid while the module is).
#[derive(Clone, Copy)]
pub(crate) struct Function(CUfunction);

// SAFETY: see Module.
unsafe impl Send for Function {}
// SAFETY: shared use is as safe as the move above: the handle has no interior state of its own.
unsafe impl Sync for Function {}

impl Function {
    /// Launches the kernel on `stream` with `params` (pointers to each argument's value).
    ///
    /// # Safety
    /// The parameters must match the kernel's signature, and what they point to in device
    /// memory must stay valid until the kernel finishes.
    pub unsafe fn launch(&self, grid: u32, block: u32, stream: CUstream, params: &mut [*mut c_void]) -> Result<()> {
        // SAFETY: a function of a loaded module; the parameters and what they point to are
        // the caller's contract.
        check(unsafe { sys::cuLaunchKernel(self.0, grid, 1, 1, block, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()) }, || format!("launching a kernel of {grid} block(s)"))
    }

    /// Launches a kernel whose parameters are the bytes of `params`, which may be fewer
    /// than the kernel declares (cuLaunchKernel's `extra`: CU_LAUNCH_PARAM_BUFFER_POINTER and
    /// _SIZE); the kernel must not read past them.
    ///
    /// # Safety
    /// As [`Function::launch`]; `params` laid out as the kernel's parameters begin.
    pub unsafe fn launch_bytes(&self, grid: u32, block: u32, stream: CUstream, params: &[u8]) -> Result<()> {
        // cuda.h's CU_LAUNCH_PARAM_END, CU_LAUNCH_PARAM_BUFFER_POINTER, CU_LAUNCH_PARAM_BUFFER_SIZE.
        const END: usize = 0;
        const BUFFER_POINTER: usize = 1;
        const BUFFER_SIZE: usize = 2;
        let mut size = params.len();
        let mut extra = [BUFFER_POINTER as *mut c_void, params.as_ptr().cast_mut().cast(), BUFFER_SIZE as *mut c_void, (&mut size as *mut usize).cast(), END as *mut c_void];
        // SAFETY: a function of a loaded module; the driver copies `size` bytes from
        // `params` before returning; the rest is the caller's contract.
        check(unsafe { sys::cuLaunchKernel(self.0, grid, 1, 1, block, 1, 1, 0, stream, std::ptr::null_mut(), extra.as_mut_ptr()) }, || format!("launching a kernel of {grid} block(s) with {} bytes of parameters", params.len()))
    }
}

/// A CUDA event (timing disabled) marking a point of a stream.
pub(crate) struct Event(CUevent);

// SAFETY: events may be queried from any thread.
unsafe impl Send for Event {}
// SAFETY: shared use is as safe as the move above: the handle has no interior state of its own.
unsafe impl Sync for Event {}

impl Event {
    /// Records an event on `stream` after the work enqueued so far.
    ///
    /// # Safety
    /// `stream` must be a valid stream of the current context (or null, the legacy stream).
    pub unsafe fn record(stream: CUstream) -> Result<Event> {
        let mut e = std::ptr::null_mut();
        // SAFETY: writes one event handle.
        check(unsafe { sys::cuEventCreate(&mut e, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) }, || "creating an event".into())?;
        let event = Event(e);
        // SAFETY: a live event; the stream is the caller's contract.
        check(unsafe { sys::cuEventRecord(e, stream) }, || "recording an event".into())?;
        Ok(event)
    }

    /// Moves the event to the end of `stream`'s work so far.
    ///
    /// # Safety
    /// As [`Event::record`].
    pub unsafe fn rerecord(&self, stream: CUstream) -> Result<()> {
        // SAFETY: a live event; the stream is the caller's contract.
        check(unsafe { sys::cuEventRecord(self.0, stream) }, || "recording an event".into())
    }

    /// Makes `stream`'s later work wait until the work before this event is done.
    ///
    /// # Safety
    /// `stream` must be a valid stream of the current context (or null).
    pub unsafe fn wait_on(&self, stream: CUstream) -> Result<()> {
        // SAFETY: a live event; the stream is the caller's contract.
        check(unsafe { sys::cuStreamWaitEvent(stream, self.0, 0) }, || "ordering a stream after an event".into())
    }

    /// Polls until the work before the event is done (true) or `until` passes (false);
    /// an error if the work failed.
    pub fn done_by(&self, until: std::time::Instant) -> Result<bool> {
        loop {
            if self.done()? {
                return Ok(true);
            }
            if std::time::Instant::now() >= until {
                return Ok(false);
            }
            std::thread::sleep(std::time::Duration::from_micros(20));
        }
    }

    /// Whether the work before the event is done; an error if it failed.
    pub fn done(&self) -> Result<bool> {
        // SAFETY: a valid event.
        match unsafe { sys::cuEventQuery(self.0) } {
            CUresult::CUDA_SUCCESS => Ok(true),
            CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            status => check(status, || "waiting for GPU work".into()).map(|_| false),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: destroys a valid event, once.
        unsafe { sys::cuEventDestroy_v2(self.0) };
    }
}

/// A stream owned by oxccl (tests, benchmarks).
pub struct Stream(pub(crate) CUstream);

// SAFETY: streams may be used from any thread with the context current.
unsafe impl Send for Stream {}
// SAFETY: shared use is as safe as the move above: the handle has no interior state of its own.
unsafe impl Sync for Stream {}

impl Stream {
    pub(crate) fn create() -> Result<Stream> {
        let mut s = std::ptr::null_mut();
        // SAFETY: writes one stream handle; the context is current.
        check(unsafe { sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }, || "creating a stream".into())?;
        Ok(Stream(s))
    }

    /// The raw handle, for the `unsafe` enqueue calls.
    pub fn raw(&self) -> CUstream {
        self.0
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: destroys a stream this wrapper created, once.
        unsafe { sys::cuStreamDestroy_v2(self.0) };
    }
}
