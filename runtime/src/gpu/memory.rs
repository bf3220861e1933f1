//! Device memory and copies for callers without the CUDA runtime API: test and benchmark
//! buffers ([`DeviceBuffer`]), and what the C ABI needs in place of `cudaSetDevice`,
//! `cudaMemcpy` and `ncclMemAlloc`.

use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::driver::{self, Device, DeviceMemory};
use super::Inner;
use crate::error::{Error, Result};

/// Device memory from [`GpuBackend::alloc`](super::GpuBackend::alloc).
pub struct DeviceBuffer {
    pub(super) memory: DeviceMemory,
    pub(super) inner: Arc<Inner>,
}

impl DeviceBuffer {
    /// The device address.
    pub fn ptr(&self) -> u64 {
        self.memory.ptr
    }

    pub fn len(&self) -> usize {
        self.memory.bytes
    }

    pub fn is_empty(&self) -> bool {
        self.memory.bytes == 0
    }

    /// Copies `data` to the start of the buffer (synchronously).
    pub fn upload(&self, data: &[u8]) -> Result<()> {
        if data.len() > self.len() {
            return Err(Error::invalid(format!("{} bytes do not fit a buffer of {}", data.len(), self.len())));
        }
        self.inner.device.bind()?;
        self.memory.upload(data)
    }

    /// Copies the start of the buffer into `out` (synchronously).
    pub fn download(&self, out: &mut [u8]) -> Result<()> {
        if out.len() > self.len() {
            return Err(Error::invalid(format!("{} bytes are more than a buffer of {}", out.len(), self.len())));
        }
        self.inner.device.bind()?;
        self.memory.download(out)
    }
}

/// The calling thread's current GPU (what `cudaSetDevice` chose; 0 when none was).
pub fn current_device() -> Result<usize> {
    Ok(Device::current()?.ordinal as usize)
}

/// Makes GPU `ordinal`'s primary context current on the calling thread, as `cudaSetDevice`
/// does, keeping it alive for the rest of the process as the CUDA runtime does (for Rust
/// callers without the runtime API: tests, tools).
pub fn set_current_device(ordinal: usize) -> Result<()> {
    static RETAINED: std::sync::LazyLock<Mutex<FxHashMap<usize, Device>>> = std::sync::LazyLock::new(Default::default);
    let mut retained = RETAINED.lock();
    let device = match retained.entry(ordinal) {
        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
        std::collections::hash_map::Entry::Vacant(e) => e.insert(Device::open(ordinal)?),
    };
    device.bind()
}

/// Copies `data` to GPU memory at `dst` (`cudaMemcpy` host to device: done when it returns).
///
/// # Safety
/// `dst` is device memory of the current context with room for `data.len()` bytes.
pub unsafe fn copy_to_device(dst: u64, data: &[u8]) -> Result<()> {
    // SAFETY: per this function's contract.
    unsafe { driver::copy_to_device(dst, data) }
}

/// Copies GPU memory at `src` into `out` (`cudaMemcpy` device to host, on the legacy
/// default stream: after the work queued there).
///
/// # Safety
/// `src` is device memory of the current context holding `out.len()` bytes.
pub unsafe fn copy_from_device(src: u64, out: &mut [u8]) -> Result<()> {
    // SAFETY: per this function's contract.
    unsafe { driver::copy_from_device(src, out) }
}

/// Allocations of [`mem_alloc`] still live: `mem_free` knows them from host pointers.
static ALLOCATIONS: std::sync::LazyLock<Mutex<FxHashMap<u64, DeviceMemory>>> = std::sync::LazyLock::new(Default::default);

/// `bytes` of memory on the calling thread's current GPU (ncclMemAlloc), zeroed.
pub fn mem_alloc(bytes: usize) -> Result<u64> {
    let device = Device::current()?;
    device.bind()?;
    let memory = DeviceMemory::zeroed(bytes)?;
    let ptr = memory.ptr;
    ALLOCATIONS.lock().insert(ptr, memory);
    Ok(ptr)
}

/// Frees what [`mem_alloc`] returned; `false` when `ptr` is not one of its allocations.
pub fn mem_free(ptr: u64) -> Result<bool> {
    Ok(ALLOCATIONS.lock().remove(&ptr).is_some())
}

