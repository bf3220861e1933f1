//! Helpers the test suites of several crates share: running a process under a hard
//! timeout, so that a hang fails a test instead of stalling CI, and `mpirun` set up for
//! loopback, the skip rule of the GPU tests, C libraries built for a test (net plugins),
//! simulated clusters of hosts as network namespaces ([`cluster`]), and the process's own
//! sockets as the kernel describes them ([`sockets`]). With the `check`
//! feature, the collectives' checker ([`check`]: the runtime's test matrix and its
//! reference), which `oxccl-perf -c 1` uses too, the one use outside a test.

// Unsafe only where the checker hands buffers to the collectives it checks.
#![deny(unsafe_code)]

#[cfg(feature = "check")]
// The collectives take raw buffer addresses (the C ABI's calls, host and GPU).
#[allow(unsafe_code)]
pub mod check;
pub mod cluster;
mod logs;
pub mod sockets;

pub use logs::CapturedLogs;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command with the environment a test job needs and nothing inherited that could
/// change its behaviour (launcher variables of an outer job, say): PATH, HOME,
/// LD_LIBRARY_PATH and TMPDIR, and `NCCL_SOCKET_IFNAME=lo`.
pub fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new(program);
    keep_only_login_environment(&mut c);
    c.env("NCCL_SOCKET_IFNAME", "lo");
    c
}

/// Clears `command`'s environment but for PATH, HOME, LD_LIBRARY_PATH and TMPDIR (those of
/// the test process).
pub(crate) fn keep_only_login_environment(command: &mut Command) {
    command.env_clear();
    for keep in ["PATH", "HOME", "LD_LIBRARY_PATH", "TMPDIR"] {
        if let Ok(value) = std::env::var(keep) {
            command.env(keep, value);
        }
    }
}

/// The GPUs a GPU test runs on, given how many the driver shows: `None` (the test says
/// "skipped" and passes) when there are none — unless OXCCL_TEST_GPU=1 (the GPU machine's
/// runner sets it), which turns a missing GPU into a failure.
pub fn gpus_or_skip(visible: usize) -> Option<usize> {
    if visible == 0 {
        assert!(std::env::var("OXCCL_TEST_GPU").as_deref() != Ok("1"), "OXCCL_TEST_GPU=1 but no GPU is visible");
        eprintln!("skipped: no GPU");
        return None;
    }
    Some(visible)
}

/// Runs `cmd` with stdout and stderr captured; kills it and panics after `timeout`.
pub fn run(mut cmd: Command, timeout: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
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

/// `mpirun -np n --oversubscribe` of `exe` on loopback (Open MPI's own traffic included),
/// as root if need be, exporting `NCCL_SOCKET_IFNAME=lo`, a 60 s collective timeout and the
/// variables of `env`.
pub fn mpirun(n: u32, exe: &Path, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new("mpirun");
    cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("PMIX_MCA_ptl_tcp_if_include", "lo")
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("OXCCL_COLL_TIMEOUT_MS", "60000")
        .args(["-np", &n.to_string(), "--oversubscribe", "-x", "NCCL_SOCKET_IFNAME", "-x", "OXCCL_COLL_TIMEOUT_MS"]);
    for (k, v) in env {
        cmd.env(k, v).args(["-x", k]);
    }
    cmd.arg(exe);
    cmd
}

/// Compiles the C file `source` into a shared library named `file_name` with the system
/// `cc` (`-shared -fPIC -Wall -Wextra -Werror`, `flags` added: `-DNAME=value`...), in a
/// directory under `directory` named by a hash of the source and flags (so an edited source
/// is built again), unless it is there already; answers its path. Tests pass
/// `env!("CARGO_TARGET_TMPDIR")`. The library appears under its name at once (written
/// elsewhere, then renamed), so test processes building the same one at the same time never
/// load half a file.
pub fn c_library(directory: impl AsRef<Path>, source: impl AsRef<Path>, file_name: &str, flags: &[&str]) -> std::path::PathBuf {
    use std::hash::{Hash, Hasher};
    let text = std::fs::read(source.as_ref()).unwrap_or_else(|e| panic!("reading {}: {e}", source.as_ref().display()));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    (text, flags).hash(&mut hasher);
    let directory = directory.as_ref().join(format!("{:016x}", hasher.finish()));
    let path = directory.join(file_name);
    if path.exists() {
        return path;
    }
    std::fs::create_dir_all(&directory).unwrap_or_else(|e| panic!("creating {}: {e}", directory.display()));
    let partial = directory.join(format!(".{file_name}.{}", std::process::id()));
    let mut cc = Command::new("cc");
    cc.args(["-shared", "-fPIC", "-O1", "-Wall", "-Wextra", "-Werror"]).args(flags).arg(source.as_ref()).arg("-o").arg(&partial).arg("-lpthread");
    let output = run(cc, Duration::from_secs(120));
    assert!(output.status.success(), "cc {} {flags:?} failed:\n{}", source.as_ref().display(), String::from_utf8_lossy(&output.stderr));
    install(&partial, &path);
    path
}

/// Copies `built` to `directory/file_name` (written elsewhere, then renamed, as
/// [`c_library`] does); answers the new path. For libraries whose name cargo cannot make
/// (`libnccl-net-oxccl.so`).
pub fn copy_as(built: impl AsRef<Path>, directory: impl AsRef<Path>, file_name: &str) -> std::path::PathBuf {
    std::fs::create_dir_all(directory.as_ref()).unwrap_or_else(|e| panic!("creating {}: {e}", directory.as_ref().display()));
    let partial = directory.as_ref().join(format!(".{file_name}.{}", std::process::id()));
    std::fs::copy(built.as_ref(), &partial).unwrap_or_else(|e| panic!("copying {}: {e}", built.as_ref().display()));
    let path = directory.as_ref().join(file_name);
    install(&partial, &path);
    path
}

fn install(partial: &Path, path: &Path) {
    std::fs::rename(partial, path).unwrap_or_else(|e| panic!("renaming {} to {}: {e}", partial.display(), path.display()));
}
