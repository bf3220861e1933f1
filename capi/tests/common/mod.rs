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
