//! `ncclTunerPlugin_v5` (NCCL 2.26-2.30): per-communicator `init` with the comm id, NVLink domains and the constants to edit; `finalize`.

use std::ffi::{c_char, c_int, c_void};

use super::c::{logger, name_of, Logger, NvlDomainInfo, Vtable};
use super::InitInfo;
use crate::nccl::Constants;

#[repr(C)]
pub(super) struct TunerV5 {
    name: *const c_char,
    init: unsafe extern "C" fn(*mut *mut c_void, u64, usize, usize, Logger, *mut NvlDomainInfo, *mut Constants) -> c_int,
    get_coll_info: unsafe extern "C" fn(*mut c_void, c_int, usize, c_int, *mut *mut f32, c_int, c_int, c_int, *mut c_int) -> c_int,
    finalize: unsafe extern "C" fn(*mut c_void) -> c_int,
}

pub(super) struct V5(pub(super) &'static TunerV5);
// SAFETY: the vtable is immutable static data of the plugin; calls are serialised by CPlugin.
unsafe impl Send for V5 {}
// SAFETY: as for Send: shared references only read the static vtable.
unsafe impl Sync for V5 {}

pub(super) fn find(library: &libloading::Library) -> Option<Box<dyn Vtable>> {
    // SAFETY: the symbol, if present, is the plugin's static ncclTuner_v5_t; it lives as long as the library, which CPlugin keeps.
    let table: &'static TunerV5 = unsafe { &**library.get::<*const TunerV5>(b"ncclTunerPlugin_v5\0").ok()? };
    Some(Box::new(V5(table)))
}

impl Vtable for V5 {
    fn version(&self) -> u32 {
        6
    }
    fn name(&self) -> String {
        name_of(self.0.name, "ncclTunerPlugin_v5")
    }
    unsafe fn init(&self, info: &InitInfo, constants: &mut Constants) -> Result<*mut c_void, c_int> {
        let mut context = std::ptr::null_mut();
        let mut domains = NvlDomainInfo { count: info.nvl_domains.count, min_ranks: info.nvl_domains.min_ranks, max_ranks: info.nvl_domains.max_ranks };
        // SAFETY: valid out-pointers for the call's duration (caller's contract).
        match unsafe { (self.0.init)(&mut context, info.comm_id, info.nranks, info.nnodes, logger(), &mut domains, constants) } {
            0 => Ok(context),
            e => Err(e),
        }
    }
    unsafe fn get_coll_info(&self, context: *mut c_void, func: c_int, bytes: usize, pipe_ops: c_int, table: &mut [[f32; 3]; 7], registered: bool, channels: &mut c_int) -> c_int {
        // SAFETY: NCCL passes the float[7][3] array cast to float** (the plugin casts it back).
        unsafe { (self.0.get_coll_info)(context, func, bytes, pipe_ops, table.as_mut_ptr().cast(), 7, 3, c_int::from(registered), channels) }
    }
    unsafe fn finalize(&self, context: *mut c_void) -> c_int {
        // SAFETY: the context init returned.
        unsafe { (self.0.finalize)(context) }
    }
}
