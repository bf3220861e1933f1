//! `ncclTunerPlugin_v6` (NCCL 2.30): v5's entry points and an optional `getChunkSize`.

use std::ffi::{c_int, c_void};

use super::c::Vtable;
use super::v5::{TunerV5, V5};
use super::InitInfo;
use crate::nccl::Constants;

/// v5's layout followed by `getChunkSize` (NULL: none).
#[repr(C)]
struct TunerV6 {
    v5: TunerV5,
    get_chunk_size: Option<unsafe extern "C" fn(*mut c_void, c_int, usize, c_int, c_int, c_int, *mut usize) -> c_int>,
}

struct V6(&'static TunerV6);
// SAFETY: the vtable is immutable static data of the plugin; calls are serialised by CPlugin.
unsafe impl Send for V6 {}
// SAFETY: as for Send: shared references only read the static vtable.
unsafe impl Sync for V6 {}

pub(super) fn find(library: &libloading::Library) -> Option<Box<dyn Vtable>> {
    // SAFETY: the symbol, if present, is the plugin's static ncclTuner_v6_t; it lives as long as the library, which CPlugin keeps.
    let table: &'static TunerV6 = unsafe { &**library.get::<*const TunerV6>(b"ncclTunerPlugin_v6\0").ok()? };
    Some(Box::new(V6(table)))
}

impl Vtable for V6 {
    fn version(&self) -> u32 {
        6
    }
    fn name(&self) -> String {
        V5(&self.0.v5).name()
    }
    unsafe fn init(&self, info: &InitInfo, constants: &mut Constants) -> Result<*mut c_void, c_int> {
        // SAFETY: the caller's contract, passed on.
        unsafe { V5(&self.0.v5).init(info, constants) }
    }
    unsafe fn get_coll_info(&self, context: *mut c_void, func: c_int, bytes: usize, pipe_ops: c_int, table: &mut [[f32; 3]; 7], registered: bool, channels: &mut c_int) -> c_int {
        // SAFETY: the caller's contract, passed on.
        unsafe { V5(&self.0.v5).get_coll_info(context, func, bytes, pipe_ops, table, registered, channels) }
    }
    unsafe fn finalize(&self, context: *mut c_void) -> c_int {
        // SAFETY: the caller's contract, passed on.
        unsafe { V5(&self.0.v5).finalize(context) }
    }
    unsafe fn chunk_size(&self, context: *mut c_void, func: c_int, bytes: usize, algorithm: c_int, protocol: c_int, channels: c_int, chunk: &mut usize) -> Option<c_int> {
        // SAFETY: the context init returned; one size_t to read and write.
        self.0.get_chunk_size.map(|f| unsafe { f(context, func, bytes, algorithm, protocol, channels, chunk) })
    }
}
