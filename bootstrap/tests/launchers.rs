//! Real launchers: `mpirun` (Open MPI) through the MPI path and the environment path, and
//! `srun` on the single-host Slurm that scripts/test.sh starts (OXCCL_TEST_SLURM=1).

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

fn mpirun(np: u32, env: &[(&str, String)]) -> Command {
    assert!(have("mpirun"), "mpirun is missing: scripts/install-deps.sh installs Open MPI");
    let mut c = clean_command("mpirun");
    c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_tcp_if_include", "lo")
        .env("OMPI_MCA_oob_tcp_if_include", "lo")
        .env("OMPI_MCA_btl", "self,vader,tcp")
        .args(["-np", &np.to_string(), "--oversubscribe", "-x", "NCCL_SOCKET_IFNAME", "-x", "OXCCL_BOOTSTRAP_TIMEOUT_MS"]);
    for (name, value) in env {
        c.env(name, value).args(["-x", name]);
    }
    c.arg(check_program());
    c
}

fn assert_ranks_ok(r: &Finished, n: u32) {
    assert!(r.succeeded(), "launcher failed ({:?}):\nstdout:\n{}\nstderr:\n{}", r.status, r.stdout, r.stderr);
    for rank in 0..n {
        assert!(r.stdout.contains(&format!("rank {rank}/{n} ok")), "rank {rank} did not report:\n{}\n{}", r.stdout, r.stderr);
    }
}

#[cfg(feature = "mpi")]
#[test]
fn mpirun_through_mpi() {
    let r = run(mpirun(4, &[("OXCCL_BOOTSTRAP", "mpi".into())]), Duration::from_secs(120));
    assert_ranks_ok(&r, 4);
}

#[cfg(feature = "mpi")]
#[test]
fn mpirun_auto_chooses_mpi() {
    let r = run(mpirun(3, &[]), Duration::from_secs(120));
    assert_ranks_ok(&r, 3);
}

#[test]
fn mpirun_through_the_environment() {
    let port = free_port();
    let r = run(mpirun(4, &[("OXCCL_BOOTSTRAP", "env".into()), ("NCCL_COMM_ID", format!("127.0.0.1:{port}"))]), Duration::from_secs(120));
    assert_ranks_ok(&r, 4);
}

#[test]
fn mpirun_without_a_root_address_says_how_the_id_travels() {
    let r = run(mpirun(2, &[("OXCCL_BOOTSTRAP", "env".into())]), Duration::from_secs(120));
    assert!(!r.succeeded());
    assert!(r.stderr.contains("gives no root address") && r.stderr.contains("NCCL_COMM_ID"), "{}", r.stderr);
}

fn slurm_enabled() -> bool {
    if std::env::var("OXCCL_TEST_SLURM").as_deref() == Ok("1") {
        return true;
    }
    eprintln!("skipped: set OXCCL_TEST_SLURM=1 with a running Slurm (scripts/test.sh starts one)");
    false
}

fn srun(n: u32, extra: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = clean_command("srun");
    for (name, value) in env {
        c.env(name, value);
    }
    c.args(["-n", &n.to_string(), "-O", "--time=2", "--kill-on-bad-exit=1"]).args(extra).arg(check_program());
    c
}

#[test]
fn srun_through_the_environment() {
    if !slurm_enabled() {
        return;
    }
    let r = run(srun(4, &[], &[]), Duration::from_secs(180));
    assert_ranks_ok(&r, 4);
}

#[cfg(feature = "mpi")]
#[test]
fn srun_through_mpi_with_pmix() {
    if !slurm_enabled() {
        return;
    }
    let r = run(
        srun(4, &["--mpi=pmix"], &[("OXCCL_BOOTSTRAP", "mpi"), ("OMPI_MCA_btl_tcp_if_include", "lo"), ("OMPI_MCA_oob_tcp_if_include", "lo")]),
        Duration::from_secs(180),
    );
    assert_ranks_ok(&r, 4);
}
