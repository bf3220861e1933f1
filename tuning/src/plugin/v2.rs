//! `ncclTunerPlugin_v2` (NCCL 2.19-2.20): `getCollInfo` answers an algorithm and protocol
//! instead of editing a table; as NCCL's shim does, the answer becomes a 0.0 cost in the
//! table (where the pair may run), and CollNet/NVLS support is read off the table.

use std::ffi::{c_char, c_int, c_void};

use super::c::{name_of, old_init, OldInit, Vtable};
use super::InitInfo;
use crate::nccl::Constants;
use crate::table::IGNORE;

#[repr(C)]
pub(super) struct TunerV2 {
    name: *const c_char,
    init: OldInit,
    get_coll_info: unsafe extern "C" fn(*mut c_void, c_int, usize, c_int, c_int, c_int, *mut c_int, *mut c_int, *mut c_int) -> c_int,
    destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
}

struct V2(&'static TunerV2);
// SAFETY: the vtable is immutable static data of the plugin; calls are serialised by CPlugin.
unsafe impl Send for V2 {}
// SAFETY: as for Send: shared references only read the static vtable.
unsafe impl Sync for V2 {}

pub(super) fn find(library: &libloading::Library) -> Option<Box<dyn Vtable>> {
    // SAFETY: the symbol, if present, is the plugin's static ncclTuner_v2_t, alive as long as the library.
    let table: &'static TunerV2 = unsafe { &**library.get::<*const TunerV2>(b"ncclTunerPlugin_v2\0").ok()? };
    Some(Box::new(V2(table)))
}

impl Vtable for V2 {
    fn version(&self) -> u32 {
        2
    }
    fn name(&self) -> String {
        name_of(self.0.name, "ncclTunerPlugin_v2")
    }
    unsafe fn init(&self, info: &InitInfo, _constants: &mut Constants) -> Result<*mut c_void, c_int> {
        // SAFETY: the plugin's v2 init.
        unsafe { old_init(self.0.init, info) }
    }
    unsafe fn get_coll_info(&self, context: *mut c_void, func: c_int, bytes: usize, pipe_ops: c_int, table: &mut [[f32; 3]; 7], _registered: bool, channels: &mut c_int) -> c_int {
        let simple = 2;
        let nvls = c_int::from(table[4][simple] != IGNORE || table[5][simple] != IGNORE);
        let collnet = c_int::from(table[3][simple] != IGNORE);
        let (mut algorithm, mut protocol) = (-1, -1);
        // SAFETY: plain ints to write.
        let status = unsafe { (self.0.get_coll_info)(context, func, bytes, collnet, nvls, pipe_ops, &mut algorithm, &mut protocol, channels) };
        if status == 0 && (0..7).contains(&algorithm) && (0..3).contains(&protocol) {
            let entry = &mut table[algorithm as usize][protocol as usize];
            if *entry != IGNORE {
                *entry = 0.0;
            }
        }
        status
    }
    unsafe fn finalize(&self, context: *mut c_void) -> c_int {
        // SAFETY: the context init returned.
        unsafe { (self.0.destroy)(context) }
    }
}
