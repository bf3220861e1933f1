//! Loading a C tuner plugin and calling it through its ABI version's vtable.

use std::ffi::{c_char, c_int, c_ulong, c_void, CStr};
use std::sync::Mutex;

use super::{InitInfo, TunerPlugin};
use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::names::{Algorithm, Protocol};
use crate::nccl::Constants;
use crate::table::CostTable;

/// `ncclNvlDomainInfo_v5_t`.
#[repr(C)]
pub(super) struct NvlDomainInfo {
    pub count: c_int,
    pub min_ranks: c_int,
    pub max_ranks: c_int,
}

/// NCCL's `ncclDebugLogger_t`: `(level, flags, file, line, fmt, ...)`.
pub(super) type Logger = unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char);

/// The logger plugins get: it logs the format string (Rust cannot read C varargs).
unsafe extern "C" fn log(level: c_int, _flags: c_ulong, _file: *const c_char, _line: c_int, fmt: *const c_char) {
    if fmt.is_null() {
        return;
    }
    // SAFETY: plugins pass a NUL-terminated format string.
    let text = unsafe { CStr::from_ptr(fmt) }.to_string_lossy();
    match level {
        1 => tracing::warn!(target: "oxccl::tuning", "tuner plugin: {text}"),
        _ => tracing::debug!(target: "oxccl::tuning", "tuner plugin: {text}"),
    }
}

/// The logger as the vtables declare it. A variadic caller may call a non-variadic callee
/// that reads only its fixed arguments on the System V x86-64 and AArch64 Linux ABIs.
pub(super) fn logger() -> Logger {
    log
}

/// One ABI version's entry points (unsafe: they call into the plugin). Their arguments are NCCL's.
#[allow(clippy::too_many_arguments)]
pub(super) trait Vtable: Send + Sync {
    fn version(&self) -> u32;
    fn name(&self) -> String;
    /// Runs `init`; the plugin's context, or its error code.
    unsafe fn init(&self, info: &InitInfo, constants: &mut Constants) -> std::result::Result<*mut c_void, c_int>;
    /// Runs `getCollInfo` on NCCL's rows; its status.
    unsafe fn get_coll_info(&self, context: *mut c_void, func: c_int, bytes: usize, pipe_ops: c_int, table: &mut [[f32; 3]; 7], registered: bool, channels: &mut c_int) -> c_int;
    unsafe fn finalize(&self, context: *mut c_void) -> c_int;
    /// v6's optional `getChunkSize`: None when the plugin has none.
    unsafe fn chunk_size(&self, _context: *mut c_void, _func: c_int, _bytes: usize, _algorithm: c_int, _protocol: c_int, _channels: c_int, _chunk: &mut usize) -> Option<c_int> {
        None
    }
}

/// A loaded C tuner plugin with its per-communicator context; `finalize` runs on drop.
pub struct CPlugin {
    name: String,
    path: String,
    vtable: Box<dyn Vtable>,
    context: Mutex<usize>,
    // Kept loaded while the vtable's pointers are used; dropped last.
    _library: libloading::Library,
}

impl CPlugin {
    /// Loads as described in the module doc of [`super`].
    pub fn load(setting: Option<&str>, info: &InitInfo, constants: &mut Constants) -> Result<Option<CPlugin>> {
        let explicit = setting.map(str::trim).filter(|s| !s.is_empty());
        if explicit.is_some_and(|s| s.eq_ignore_ascii_case("none")) {
            return Ok(None);
        }
        let candidates: Vec<String> = match explicit {
            None => vec!["libnccl-tuner.so".into()],
            Some(name) => {
                let mut c = vec![name.to_string()];
                let library_name = name.starts_with("lib") && name.ends_with(".so");
                if !name.contains('/') && !library_name {
                    c.push(format!("libnccl-tuner-{name}.so"));
                }
                c
            }
        };
        let mut tried = Vec::new();
        let mut library = None;
        for candidate in &candidates {
            // SAFETY: loading a library runs its initialisers; the user asked for this library (or NCCL's default name).
            match unsafe { libloading::Library::new(candidate) } {
                Ok(l) => {
                    library = Some((candidate.clone(), l));
                    break;
                }
                Err(e) => tried.push(format!("{candidate}: {e}")),
            }
        }
        let plugin_error = |plugin: &str, reason: String| Error::Plugin { plugin: plugin.into(), reason };
        let Some((path, library)) = library else {
            return match explicit {
                Some(name) => Err(plugin_error(name, format!("NCCL_TUNER_PLUGIN={name:?} could not be loaded ({})", tried.join("; ")))),
                None => Ok(None),
            };
        };
        let vtable = super::v6::find(&library).or_else(|| super::v5::find(&library)).or_else(|| super::v4::find(&library)).or_else(|| super::v3::find(&library)).or_else(|| super::v2::find(&library));
        let Some(vtable) = vtable else {
            let reason = format!("{path} exports none of ncclTunerPlugin_v6, _v5, _v4, _v3, _v2");
            if explicit.is_some() {
                return Err(plugin_error(&path, reason));
            }
            tracing::warn!(target: "oxccl::tuning", "{reason}: no tuner plugin");
            return Ok(None);
        };
        let name = vtable.name();
        // SAFETY: the vtable's init with a valid InitInfo and a Constants laid out as ncclTunerConstants_v5_t.
        let context = unsafe { vtable.init(info, constants) }.map_err(|code| plugin_error(&name, format!("init failed with ncclResult_t {code} ({path})")))?;
        tracing::info!(target: "oxccl::tuning", "TUNER/Plugin: Using {name} (v{}) from {path}", vtable.version());
        Ok(Some(CPlugin { name, path, vtable, context: Mutex::new(context as usize), _library: library }))
    }

    /// The library's path as loaded.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The ABI version the plugin was loaded through.
    pub fn version(&self) -> u32 {
        self.vtable.version()
    }
}

impl TunerPlugin for CPlugin {
    fn name(&self) -> &str {
        &self.name
    }

    fn get_coll_info(&self, collective: Collective, bytes: usize, pipe_ops: usize, table: &mut CostTable, registered: bool, channels: &mut usize) -> Result<()> {
        let context = self.context.lock().unwrap_or_else(|e| e.into_inner());
        let mut n: c_int = *channels as c_int;
        // SAFETY: the context init returned, NCCL's rows as a contiguous float[7][3], one int to write; calls are serialised by the lock.
        let status = unsafe { self.vtable.get_coll_info(*context as *mut c_void, collective.nccl_func(), bytes, pipe_ops as c_int, table.nccl_rows_mut(), registered, &mut n) };
        if status != 0 {
            return Err(Error::Plugin { plugin: self.name.clone(), reason: format!("getCollInfo({}, {bytes} bytes) failed with ncclResult_t {status}", collective.nccl_name()) });
        }
        *channels = n.max(0) as usize;
        Ok(())
    }

    fn chunk_size(&self, collective: Collective, bytes: usize, algorithm: Algorithm, protocol: Protocol, channels: usize, chunk: usize) -> Result<usize> {
        let context = self.context.lock().unwrap_or_else(|e| e.into_inner());
        let mut size = chunk;
        // SAFETY: as for get_coll_info; one size_t to write.
        match unsafe { self.vtable.chunk_size(*context as *mut c_void, collective.nccl_func(), bytes, algorithm as c_int, protocol as c_int, channels as c_int, &mut size) } {
            None => Ok(chunk),
            Some(0) => Ok(size),
            Some(status) => Err(Error::Plugin { plugin: self.name.clone(), reason: format!("getChunkSize failed with ncclResult_t {status}") }),
        }
    }
}

impl Drop for CPlugin {
    fn drop(&mut self) {
        let context = *self.context.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the context init returned, finalized once.
        let status = unsafe { self.vtable.finalize(context as *mut c_void) };
        if status != 0 {
            tracing::warn!(target: "oxccl::tuning", "tuner plugin {}: finalize failed with ncclResult_t {status}", self.name);
        }
    }
}

/// `init(nRanks, nNodes, logger, &context)`, the entry point of ABI v2 to v4.
pub(super) type OldInit = unsafe extern "C" fn(usize, usize, Logger, *mut *mut c_void) -> c_int;

/// Runs a v2-v4 `init`: the plugin's context, or its error code.
///
/// # Safety
/// `init` is the plugin's entry point with that signature.
pub(super) unsafe fn old_init(init: OldInit, info: &InitInfo) -> std::result::Result<*mut c_void, c_int> {
    let mut context = std::ptr::null_mut();
    // SAFETY: a valid out-pointer for the call's duration; the caller vouches for `init`.
    match unsafe { init(info.nranks, info.nnodes, logger(), &mut context) } {
        0 => Ok(context),
        e => Err(e),
    }
}

/// The plugin's name string, or its symbol name when null.
pub(super) fn name_of(name: *const c_char, fallback: &str) -> String {
    if name.is_null() {
        return fallback.into();
    }
    // SAFETY: plugins export a NUL-terminated static name.
    unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
}
