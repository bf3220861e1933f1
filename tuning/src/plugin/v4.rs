//! `ncclTunerPlugin_v4` (NCCL 2.23-2.25): `init(nRanks, nNodes, logger, &context)`,
//! `getCollInfo` with the cost table and `regBuff`, `destroy`.

use std::ffi::{c_char, c_int, c_void};

use super::c::{name_of, old_init, OldInit, Vtable};
use super::InitInfo;
use crate::nccl::Constants;

#[repr(C)]
pub(super) struct TunerV4 {
    name: *const c_char,
    init: OldInit,
    get_coll_info: unsafe extern "C" fn(*mut c_void, c_int, usize, c_int, *mut *mut f32, c_int, c_int, c_int, *mut c_int) -> c_int,
    destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
}

struct V4(&'static TunerV4);
// SAFETY: the vtable is immutable static data of the plugin; calls are serialised by CPlugin.
unsafe impl Send for V4 {}
// SAFETY: as for Send: shared references only read the static vtable.
unsafe impl Sync for V4 {}

pub(super) fn find(library: &libloading::Library) -> Option<Box<dyn Vtable>> {
    // SAFETY: the symbol, if present, is the plugin's static ncclTuner_v4_t, alive as long as the library.
    let table: &'static TunerV4 = unsafe { &**library.get::<*const TunerV4>(b"ncclTunerPlugin_v4\0").ok()? };
    Some(Box::new(V4(table)))
}

impl Vtable for V4 {
    fn version(&self) -> u32 {
        4
    }
    fn name(&self) -> String {
        name_of(self.0.name, "ncclTunerPlugin_v4")
    }
    unsafe fn init(&self, info: &InitInfo, _constants: &mut Constants) -> Result<*mut c_void, c_int> {
        // SAFETY: the plugin's v4 init.
        unsafe { old_init(self.0.init, info) }
    }
    unsafe fn get_coll_info(&self, context: *mut c_void, func: c_int, bytes: usize, pipe_ops: c_int, table: &mut [[f32; 3]; 7], registered: bool, channels: &mut c_int) -> c_int {
        // SAFETY: NCCL passes the float[7][3] array cast to float**.
        unsafe { (self.0.get_coll_info)(context, func, bytes, pipe_ops, table.as_mut_ptr().cast(), 7, 3, c_int::from(registered), channels) }
    }
    unsafe fn finalize(&self, context: *mut c_void) -> c_int {
        // SAFETY: the context init returned.
        unsafe { (self.0.destroy)(context) }
    }
}
