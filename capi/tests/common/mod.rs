//! Helpers shared by the C ABI tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// A directory with libnccl.so.2 (a link to the cdylib cargo built next to this test),
/// made once for all the tests of this binary.
pub fn library_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(make_library_dir).clone()
}

fn make_library_dir() -> PathBuf {
    let deps = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let lib = deps.join("libnccl.so");
    assert!(lib.exists(), "{} missing: cargo builds the cdylib with the tests", lib.display());
    let dir = std::env::temp_dir().join(format!("oxccl-capi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["libnccl.so", "libnccl.so.2"] {
        let link = dir.join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&lib, &link).unwrap();
    }
    dir
}

#[allow(unused_imports)]
pub use oxccl_testkit::run;

/// `mpirun -np n` of `exe` on loopback.
pub fn mpirun(n: u32, exe: &Path) -> Command {
    oxccl_testkit::mpirun(n, exe, &[])
}

/// Result codes and enum values the call tests use (NCCL's, checked against its header by
/// `nccl_header.rs`).
pub const SUCCESS: i32 = 0;
pub const INVALID_ARGUMENT: i32 = 4;
pub const INVALID_USAGE: i32 = 5;
pub const IN_PROGRESS: i32 = 7;
pub const FLOAT: i32 = 7;
pub const SUM: i32 = 0;

/// ncclGetLastError's text for this thread.
pub fn last_error() -> String {
    // SAFETY: ncclGetLastError returns a NUL-terminated string that lives until the next
    // failing call on this thread.
    unsafe { std::ffi::CStr::from_ptr(nccl::ncclGetLastError(std::ptr::null_mut())) }.to_string_lossy().into_owned()
}

/// NCCL_CONFIG_INITIALIZER's prefix: size, magic, version, blocking.
#[repr(C)]
pub struct ConfigPrefix {
    pub size: usize,
    pub magic: u32,
    pub version: u32,
    pub blocking: i32,
}

pub fn nonblocking_config() -> ConfigPrefix {
    ConfigPrefix { size: std::mem::size_of::<ConfigPrefix>(), magic: 0xcafe_beef, version: 22803, blocking: 0 }
}

/// ncclCommGetAsyncError's answer for `comm` (a live handle).
pub fn async_state(comm: *mut std::ffi::c_void) -> i32 {
    let mut state = IN_PROGRESS;
    // SAFETY: a live handle and an out pointer.
    assert_eq!(unsafe { nccl::ncclCommGetAsyncError(comm.cast(), &mut state) }, SUCCESS, "{}", last_error());
    state
}

/// Polls ncclCommGetAsyncError on `comm` until it is no longer ncclInProgress (at most
/// 20 s); returns the final code and how many InProgress answers came first.
pub fn poll_async(comm: *mut std::ffi::c_void) -> (i32, usize) {
    let mut polls = 0;
    loop {
        let state = async_state(comm);
        if state != IN_PROGRESS {
            return (state, polls);
        }
        polls += 1;
        assert!(polls < 20_000, "still in progress after 20 s");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
