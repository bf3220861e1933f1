//! The collective matrix with one process per rank: started by oxccl's own spawner over
//! shared memory and over the socket Net, and by `mpirun` (bootstrapped through MPI). Each
//! rank is this test binary re-run with `child` as its filter; every job runs under a hard
//! timeout, so a hang fails the test.

use std::process::Command;
use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator};
use oxccl_testkit::check as matrix;
use oxccl_testkit::sockets::{connected_tcp_buffers, reported_buffer_size};

/// What the children run, named by OXCCL_TEST_MATRIX.
fn cases(which: &str, n: usize) -> Vec<matrix::Case> {
    match which {
        "small" => {
            let mut cases = matrix::full_matrix(n, &matrix::SMALL_COUNTS);
            cases.extend(matrix::all_to_all_in_place(oxccl_runtime::DataType::Float32, &matrix::SMALL_COUNTS));
            cases
        }
        "large" => {
            let mut cases = matrix::large_cases(n, 1 << 20);
            cases.extend(matrix::all_to_all_in_place(oxccl_runtime::DataType::Float32, &[(1 << 20) / 4 + 3]));
            cases
        }
        other => panic!("unknown OXCCL_TEST_MATRIX {other}"),
    }
}

/// One rank of a job (does nothing when run as an ordinary test).
#[test]
fn child() {
    let Ok(which) = std::env::var("OXCCL_TEST_MATRIX") else { return };
    let config = Config::from_env().unwrap();
    let comm = Communicator::from_env(&config).unwrap();
    let failures = matrix::run_cases(&comm, &cases(&which, comm.nranks()));
    if std::env::var_os("OXCCL_TEST_SOCKET_BUFFERS").is_some() {
        check_socket_buffers(&config, comm.nranks());
    }
    comm.finalize().unwrap();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
    println!("rank {} of {}: {which} matrix ok", comm.rank(), comm.nranks());
}

/// Every rank's socket-net connections (one to and one from each peer at least, over the
/// ring and the trees) have the buffers NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF ask for,
/// as Linux reports them (twice, within the sysctl's maximum); the bootstrap's keep the
/// kernel's.
fn check_socket_buffers(config: &Config, nranks: usize) {
    let asked = (reported_buffer_size(config.socket_send_buffer.unwrap(), "wmem_max"), reported_buffer_size(config.socket_recv_buffer.unwrap(), "rmem_max"));
    let sockets = connected_tcp_buffers();
    let matching = sockets.iter().filter(|&&(_, send, recv)| (send, recv) == asked).count();
    assert!(matching >= 2 * (nranks - 1).min(2), "{matching} of the connected sockets {sockets:?} have {asked:?}");
}

fn child_command(which: &str, env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["child", "--exact", "--nocapture", "--test-threads", "1"])
        .env("OXCCL_TEST_MATRIX", which)
        .env("NCCL_SOCKET_IFNAME", "lo")
        .env("OXCCL_COLL_TIMEOUT_MS", "60000");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn spawned(n: u32, which: &str, env: &[(&str, &str)]) {
    let start = Instant::now();
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    let job = oxccl_runtime::bootstrap::spawn::spawn(n, &config, |_| child_command(which, env)).unwrap();
    job.wait(Duration::from_secs(300), Duration::from_secs(20)).unwrap_or_else(|e| panic!("{n} processes, {which} matrix, env {env:?}: {e}"));
    eprintln!("{n} processes, {which} matrix, {env:?}: {:.2?}", start.elapsed());
}

const NET: &[(&str, &str)] = &[("NCCL_SHM_DISABLE", "1"), ("OXCCL_SOCKET_MAX_RECVS", "8")];

/// NCCL_SOCKET_SNDBUF and NCCL_SOCKET_RCVBUF reach the socket net's connections of oxccl's
/// own runtime (each child reads them back from its sockets), and the matrix still passes.
#[test]
fn processes_over_the_socket_net_with_socket_buffers() {
    spawned(3, "small", &[NET[0], NET[1], ("NCCL_SOCKET_SNDBUF", "98304"), ("NCCL_SOCKET_RCVBUF", "0x14000"), ("OXCCL_TEST_SOCKET_BUFFERS", "1")]);
}

#[test]
fn processes_over_shared_memory() {
    for n in [2, 3, 4, 8] {
        spawned(n, "small", &[]);
    }
    spawned(4, "large", &[]);
}

#[test]
fn processes_over_the_socket_net() {
    for n in [2, 3, 4, 8] {
        spawned(n, "small", NET);
    }
    spawned(3, "large", NET);
    // Each process's links dealt over three proxy threads (this 2-core machine's default
    // is one): a rank's sends and receives progress on different threads.
    spawned(4, "small", &[NET[0], NET[1], ("OXCCL_PROXY_THREADS", "3")]);
}

/// Each rank claims its own host (NCCL_HOSTID differs per rank): the multi-node path,
/// chosen by host identity rather than forced by NCCL_SHM_DISABLE.
#[test]
fn processes_as_separate_hosts() {
    let start = Instant::now();
    let mut config = Config::defaults();
    config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    let job = oxccl_runtime::bootstrap::spawn::spawn(4, &config, |rank| {
        let mut cmd = child_command("small", &[]);
        cmd.env("NCCL_HOSTID", format!("node{}", rank / 2));
        cmd
    })
    .unwrap();
    job.wait(Duration::from_secs(300), Duration::from_secs(20)).unwrap();
    eprintln!("4 processes on 2 claimed hosts: {:.2?}", start.elapsed());
}

#[cfg(feature = "mpi")]
#[test]
fn under_mpirun() {
    for (np, which, net) in [(4, "small", false), (3, "small", true), (4, "large", false)] {
        let exe = std::env::current_exe().unwrap();
        let env = [("OXCCL_BOOTSTRAP", "mpi"), ("OXCCL_TEST_MATRIX", which), ("NCCL_SHM_DISABLE", if net { "1" } else { "0" }), ("OMPI_MCA_btl", "self,vader,tcp")];
        let mut cmd = oxccl_testkit::mpirun(np, &exe, &env);
        cmd.args(["child", "--exact", "--nocapture", "--test-threads", "1"]);
        let out = oxccl_testkit::run(cmd, Duration::from_secs(300));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "mpirun -np {np} ({which}, net {net}) failed: {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        for rank in 0..np {
            assert!(stdout.contains(&format!("rank {rank} of {np}: {which} matrix ok")), "rank {rank} did not report:\n{stdout}");
        }
    }
}
