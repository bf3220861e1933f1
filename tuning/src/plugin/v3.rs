//! `ncclTunerPlugin_v3` (NCCL 2.21-2.22): v4 without `regBuff`.

use std::ffi::{c_char, c_int, c_void};

use super::c::{name_of, old_init, OldInit, Vtable};
use super::InitInfo;
use crate::nccl::Constants;

#[repr(C)]
pub(super) struct TunerV3 {
    name: *const c_char,
    init: OldInit,
    get_coll_info: unsafe extern "C" fn(*mut c_void, c_int, usize, c_int, *mut *mut f32, c_int, c_int, *mut c_int) -> c_int,
    destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
}

struct V3(&'static TunerV3);
// SAFETY: the vtable is immutable static data of the plugin; calls are serialised by CPlugin.
unsafe impl Send for V3 {}
// SAFETY: as for Send: shared references only read the static vtable.
unsafe impl Sync for V3 {}

pub(super) fn find(library: &libloading::Library) -> Option<Box<dyn Vtable>> {
    // SAFETY: the symbol, if present, is the plugin's static ncclTuner_v3_t, alive as long as the library.
    let table: &'static TunerV3 = unsafe { &**library.get::<*const TunerV3>(b"ncclTunerPlugin_v3\0").ok()? };
    Some(Box::new(V3(table)))
}

impl Vtable for V3 {
    fn version(&self) -> u32 {
        3
    }
    fn name(&self) -> String {
        name_of(self.0.name, "ncclTunerPlugin_v3")
    }
    unsafe fn init(&self, info: &InitInfo, _constants: &mut Constants) -> Result<*mut c_void, c_int> {
        // SAFETY: the plugin's v3 init.
        unsafe { old_init(self.0.init, info) }
    }
    unsafe fn get_coll_info(&self, context: *mut c_void, func: c_int, bytes: usize, pipe_ops: c_int, table: &mut [[f32; 3]; 7], _registered: bool, channels: &mut c_int) -> c_int {
        // SAFETY: NCCL passes the float[7][3] array cast to float**.
        unsafe { (self.0.get_coll_info)(context, func, bytes, pipe_ops, table.as_mut_ptr().cast(), 7, 3, channels) }
    }
    unsafe fn finalize(&self, context: *mut c_void) -> c_int {
        // SAFETY: the context init returned.
        unsafe { (self.0.destroy)(context) }
    }
}
