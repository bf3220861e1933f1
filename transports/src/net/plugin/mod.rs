//! NCCL net plugins: shared libraries that vendors ship to reach their fabric (InfiniBand,
//! RoCE, EFA, ...), loaded at run time and driven through the [`Net`](super::Net) trait.
//!
//! Loading follows NCCL: a plugin is named by a path or a name; a name is tried as given,
//! then as `libnccl-net-<name>.so` (the dynamic loader's search path applies). The library
//! must export `ncclNetPlugin_v12` (NCCL 2.30), `_v11` (2.28.3), `_v10` (2.26), `_v9`,
//! `_v8`, `_v7` or `_v6`, tried newest first; each version is one small file here
//! ([`v6`] ... [`v12`]) turning its vtable into the call table (`table.rs`) that [`PluginNet`] drives.
//! What an older version lacks is emulated as NCCL does: per-communicator `init` and
//! `finalize` (before v11 `init` runs once per process), the comm config of v10's
//! `connect`, the 8 requests in flight per comm of v6, the `int` sizes of v6–v8 (a larger
//! message is an error, not a truncation).
//!
//! Every value a plugin returns is checked before use ([`abi::RawProperties::check`], sizes
//! of completed receives, counts): a negative count or size, a NULL comm from a successful
//! call, a receive that reports more bytes than its buffer holds are errors naming the
//! plugin and the call, as is every `ncclResult_t` other than success. A loaded library is
//! never unloaded (threads a plugin started may outlive its last communicator).
//!
//! The plugin's log lines go through oxccl's logs (`logger.rs`).

pub mod abi;
mod logger;
mod net;
mod table;
pub mod v10;
pub mod v11;
pub mod v12;
pub mod v6;
pub mod v7;
pub mod v8;
pub mod v9;

use std::collections::HashMap;
use std::ffi::{c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};

pub use net::PluginNet;
use table::Table;

use crate::{Error, Result};

/// The ABI versions oxccl reads, newest first (the order they are tried in).
pub const VERSIONS: [u32; 7] = [12, 11, 10, 9, 8, 7, 6];

/// The library tried when `NCCL_NET_PLUGIN` is unset.
pub const DEFAULT_LIBRARY: &str = "libnccl-net.so";

/// Loads the plugin `spec` names (a path, a file name, or a name `x` for
/// `libnccl-net-x.so`), through the newest ABI version it exports. A library loaded before
/// (by any spec) is the same [`PluginNet`]: a pre-v11 plugin is initialized once per process.
pub fn load(spec: &str) -> Result<Arc<PluginNet>> {
    load_library(spec, None)
}

/// Like [`load`], through ABI `version` only (tests and diagnostics: a plugin exporting
/// several versions can be driven through each).
pub fn load_version(spec: &str, version: u32) -> Result<Arc<PluginNet>> {
    if !VERSIONS.contains(&version) {
        return Err(Error::InvalidArgument(format!("net plugin ABI v{version} (oxccl reads v6 to v12)")));
    }
    load_library(spec, Some(version))
}

/// Whether an error of [`load`] means only that no such library exists (as opposed to one
/// that exists but cannot be used).
pub fn is_not_found(error: &Error) -> bool {
    matches!(error, Error::Plugin { call, .. } if call == "dlopen")
}

fn load_library(spec: &str, version: Option<u32>) -> Result<Arc<PluginNet>> {
    let (library, path) = open(spec)?;
    let handle = library.into_raw();
    /// Plugins by library handle and the version asked for (`None`: the newest).
    type Loaded = HashMap<(usize, Option<u32>), Arc<PluginNet>>;
    static LOADED: OnceLock<Mutex<Loaded>> = OnceLock::new();
    let mut loaded = LOADED.get_or_init(Mutex::default).lock().map_err(|_| Error::InvalidArgument("the loaded plugins' table is poisoned".into()))?;
    // SAFETY: the handle came from into_raw just above; re-wrapping it to look up symbols.
    // The library stays loaded: dlopen counted one more reference, and it is never closed.
    let library = unsafe { Library::from_raw(handle) };
    if let Some(plugin) = loaded.get(&(handle as usize, version)) {
        return Ok(plugin.clone());
    }
    let table = find_table(&library, &path, version)?;
    let plugin = Arc::new(PluginNet::new(path, table)?);
    tracing::info!(target: "oxccl::net", "NET/Plugin: loaded {}", plugin.label());
    loaded.insert((handle as usize, version), plugin.clone());
    // Never unloaded: see the module's doc.
    std::mem::forget(library);
    Ok(plugin)
}

/// Opens the library as NCCL would: `spec` as given, then `libnccl-net-<spec>.so` for a bare
/// name. Answers the library and the file it came from.
fn open(spec: &str) -> Result<(Library, String)> {
    let mut names = vec![spec.to_string()];
    let is_file_name = spec.starts_with("lib") && spec.ends_with(".so");
    if !spec.contains('/') && !is_file_name {
        names.push(format!("libnccl-net-{spec}.so"));
    }
    let mut failures = Vec::new();
    for name in &names {
        // SAFETY: loading a library runs its initializers; loading a net plugin is what the
        // user asked for, as with NCCL.
        match unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) } {
            Ok(library) => {
                let path = file_of(&library).unwrap_or_else(|| name.clone());
                return Ok((library, path));
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    Err(Error::Plugin { plugin: spec.to_string(), call: "dlopen".into(), reason: failures.join("; ") })
}

/// The file a library was loaded from (dladdr on one of its symbols; `None` if it has
/// none that dladdr can place).
fn file_of(library: &Library) -> Option<String> {
    VERSIONS.iter().find_map(|version| {
        let symbol = format!("ncclNetPlugin_v{version}");
        // SAFETY: looking up a data symbol's address; nothing is read through it here.
        let address = unsafe { library.get::<*const c_void>(symbol.as_bytes()) }.ok()?;
        let mut info: libc::Dl_info = libc::Dl_info { dli_fname: std::ptr::null(), dli_fbase: std::ptr::null_mut(), dli_sname: std::ptr::null(), dli_saddr: std::ptr::null_mut() };
        // SAFETY: dladdr reads the loader's tables and fills `info`.
        if unsafe { libc::dladdr(*address, &mut info) } == 0 || info.dli_fname.is_null() {
            return None;
        }
        // SAFETY: dli_fname is the loader's NUL-terminated string for a loaded object.
        Some(unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
    })
}

/// The vtable of `version`, or of the newest version the library exports.
fn find_table(library: &Library, path: &str, version: Option<u32>) -> Result<Table> {
    let wanted: Vec<u32> = match version {
        Some(version) => vec![version],
        None => VERSIONS.to_vec(),
    };
    for version in wanted {
        let symbol = CString::new(format!("ncclNetPlugin_v{version}")).expect("no NUL in a symbol name");
        // SAFETY: looking up a data symbol; its value is the address of the vtable.
        let Ok(address) = (unsafe { library.get::<*const c_void>(symbol.as_bytes_with_nul()) }) else { continue };
        let address = *address;
        if address.is_null() {
            continue;
        }
        // SAFETY: a library exporting ncclNetPlugin_vN promises a ncclNet_vN_t there; the
        // vtable is copied once (plugins do not change it after loading).
        let table = unsafe {
            match version {
                12 => v12::table(&*address.cast()),
                11 => v11::table(&*address.cast()),
                10 => v10::table(&*address.cast()),
                9 => v9::table(&*address.cast()),
                8 => v8::table(&*address.cast()),
                7 => v7::table(&*address.cast()),
                _ => v6::table(&*address.cast()),
            }
        };
        let missing = table.missing();
        if !missing.is_empty() {
            let reason = format!("it leaves {} NULL", missing.join(", "));
            return Err(Error::Plugin { plugin: path.to_string(), call: format!("ncclNetPlugin_v{version}"), reason });
        }
        return Ok(table);
    }
    Err(Error::Plugin { plugin: path.to_string(), call: "symbol lookup".into(), reason: unknown_versions(library, version) })
}

/// Why no vtable was found: which version symbols the library does export, if any.
fn unknown_versions(library: &Library, version: Option<u32>) -> String {
    let others: Vec<String> = (1..=20)
        .map(|v| format!("ncclNetPlugin_v{v}"))
        // SAFETY: only asks whether the symbol exists.
        .filter(|symbol| unsafe { library.get::<*const c_void>(symbol.as_bytes()) }.is_ok())
        .collect();
    let wanted = match version {
        Some(version) => format!("ncclNetPlugin_v{version}"),
        None => "ncclNetPlugin_v6 to ncclNetPlugin_v12".into(),
    };
    if others.is_empty() {
        format!("it exports none of {wanted} (is it an NCCL net plugin?)")
    } else {
        format!("it exports {} but not {wanted}, which oxccl reads", others.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    /// Sizes and offsets of NCCL's own headers (`src/include/plugin/net/net_v*.h`, NCCL
    /// 2.30.7) compiled with gcc for x86-64 Linux: a field out of place here would make
    /// every later field of a plugin's struct wrong.
    #[test]
    fn structs_have_the_layout_of_nccls_headers() {
        let properties = [
            (size_of::<v6::PropertiesV6>(), 48, offset_of!(v6::PropertiesV6, max_recvs), 44),
            (size_of::<v7::PropertiesV7>(), 56, offset_of!(v7::PropertiesV7, device_version), 52),
            (size_of::<v8::PropertiesV8>(), 64, offset_of!(v8::PropertiesV8, reg_is_global), 28),
            (size_of::<v8::PropertiesV8>(), 64, offset_of!(v8::PropertiesV8, device_version), 56),
            (size_of::<v9::PropertiesV9>(), 104, offset_of!(v9::PropertiesV9, virtual_devices), 64),
            (size_of::<v9::PropertiesV9>(), 104, offset_of!(v9::PropertiesV9, max_p2p_bytes), 88),
            (size_of::<v10::PropertiesV10>(), 104, offset_of!(v10::PropertiesV10, max_coll_bytes), 96),
            (size_of::<v11::PropertiesV11>(), 112, offset_of!(v11::PropertiesV11, max_multi_request), 104),
            (size_of::<v12::PropertiesV12>(), 128, offset_of!(v12::PropertiesV12, max_p2p_bytes), 104),
            (size_of::<v12::PropertiesV12>(), 128, offset_of!(v12::PropertiesV12, max_multi_request), 120),
            (size_of::<v12::PropertiesV12>(), 128, offset_of!(v12::PropertiesV12, plane), 126),
        ];
        let vtables = [
            (size_of::<v6::NetV6>(), 136, offset_of!(v6::NetV6, close_listen), 128),
            (size_of::<v7::NetV7>(), 152, offset_of!(v7::NetV7, irecv_consumed), 144),
            (size_of::<v8::NetV8>(), 152, offset_of!(v8::NetV8, irecv_consumed), 144),
            (size_of::<v9::NetV9>(), 160, offset_of!(v9::NetV9, make_virtual_device), 152),
            (size_of::<v10::NetV10>(), 160, offset_of!(v10::NetV10, make_virtual_device), 152),
            (size_of::<v11::NetV11>(), 176, offset_of!(v11::NetV11, finalize), 160),
            (size_of::<v12::NetV12>(), 176, offset_of!(v12::NetV12, set_net_attributes), 168),
        ];
        for (index, (size, expected_size, offset, expected_offset)) in properties.iter().chain(&vtables).enumerate() {
            assert_eq!((size, offset), (expected_size, expected_offset), "row {index}");
        }
        assert_eq!(size_of::<abi::DeviceHandle>(), 32);
        assert_eq!(size_of::<abi::CommConfigC>(), 4);
    }
}
