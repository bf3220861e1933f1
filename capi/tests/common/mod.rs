//! Helpers shared by the C ABI tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

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

pub fn run(mut cmd: Command, timeout: Duration) -> std::process::Output {
    let child = cmd.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let start = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if start.elapsed() > timeout {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("{cmd:?} did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().unwrap()
}

/// `mpirun -np n` of `exe` on loopback.
pub fn mpirun(n: u32, exe: &Path) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("PMIX_MCA_ptl_tcp_if_include", "lo")
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("OXCCL_COLL_TIMEOUT_MS", "60000")
        .args(["-np", &n.to_string(), "--oversubscribe", "-x", "NCCL_SOCKET_IFNAME", "-x", "OXCCL_COLL_TIMEOUT_MS"])
        .arg(exe);
    cmd
}
