//! The collective matrix on host memory across namespaced hosts (`oxccl_testkit::cluster`),
//! the ranks started as users start jobs on a cluster:
//!
//! - `mpirun` with a hostfile of the hosts' addresses, its daemons started in the other
//!   hosts by `scripts/netns-rsh.sh` instead of ssh; the unique id travels over MPI;
//! - `srun -N 3` of a Slurm with one slurmd per host: the id derived from Slurm's
//!   environment (the root at the first host of the step), and over MPI through PMIx.
//!
//! Each rank is this test binary re-run as `child`; it checks every result of the matrix
//! (`oxccl_testkit::check`: every collective × datatype × op × size × placement) and reports
//! its host, the ranks it shares the host with and its receives over the network. The test
//! checks that every rank reported, ran in the host the launcher was told to put it in,
//! bootstrapped on that host's rail address, counted exactly its host's ranks as local,
//! received over the network, and got the id the way the job says. Every job runs under a
//! hard timeout.

use std::process::Output;
use std::time::{Duration, Instant};

use oxccl_runtime::{bootstrap::Config, Communicator};
use oxccl_testkit::check as matrix;
use oxccl_testkit::cluster::{mpirun, slurm::Slurm, Cluster, Spec};

/// A job's bound: a hang fails the test (a job takes 1-7 s here).
const JOB_TIMEOUT: Duration = Duration::from_secs(120);

/// One rank (does nothing when run as an ordinary test): runs the matrix named by
/// OXCCL_TEST_LAUNCHED and reports.
#[test]
fn child() {
    let Ok(which) = std::env::var("OXCCL_TEST_LAUNCHED") else { return };
    let config = Config::from_env().unwrap();
    oxccl_runtime::bootstrap::log::init(&config);
    let comm = Communicator::from_env(&config).unwrap_or_else(|e| panic!("joining the job: {e}"));
    let n = comm.nranks();
    let cases = match which.as_str() {
        "small" => matrix::full_matrix(n, &matrix::SMALL_COUNTS),
        "large" => matrix::large_cases(n, 1 << 20),
        other => panic!("unknown OXCCL_TEST_LAUNCHED {other}"),
    };
    let failures = matrix::run_cases(&comm, &cases);
    let (receives, _) = comm.net_receive_stats();
    let local = comm.local_ranks();
    comm.finalize().unwrap();
    assert!(failures.is_empty(), "rank {}: {} of {} cases failed:\n{}", comm.rank(), failures.len(), cases.len(), failures[..failures.len().min(20)].join("\n"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    println!("rank {} of {n} on host {}: local ranks {local:?}, {receives} network receives: {which} matrix ok", comm.rank(), host.trim());
}

/// The arguments that make this binary one rank.
const CHILD: [&str; 5] = ["child", "--exact", "--nocapture", "--test-threads", "1"];

/// The variables every rank gets: the bootstrap's log lines, which the checks read.
const RANK_ENV: [(&str, &str); 2] = [("NCCL_DEBUG", "INFO"), ("NCCL_DEBUG_SUBSYS", "BOOTSTRAP")];

/// How a job's ranks get the unique id.
#[derive(Clone, Copy, Debug)]
enum Id {
    /// Rank 0 creates it in its host and broadcasts it over MPI (OXCCL_BOOTSTRAP=mpi).
    OverMpi,
    /// Every rank derives it from Slurm's variables: the root at the step's first host.
    FromSlurm,
}

/// A finished job whose rank `r` was to run in `cluster.hosts[hosts[r / per_host]]`.
struct Job<'a> {
    what: String,
    cluster: &'a Cluster,
    hosts: &'a [usize],
    per_host: usize,
    which: &'a str,
    id: Id,
}

impl Job<'_> {
    /// Panics, with the job's output, unless every rank reported as it should.
    fn check(&self, output: &Output) {
        let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        let what = &self.what;
        let all = || format!("stdout:\n{stdout}\nstderr:\n{stderr}");
        assert!(output.status.success(), "{what}: the launcher failed ({})\n{}", output.status, all());
        let n = self.hosts.len() * self.per_host;
        for rank in 0..n {
            let host = &self.cluster.hosts[self.hosts[rank / self.per_host]];
            let first = rank / self.per_host * self.per_host;
            let local: Vec<usize> = (first..first + self.per_host).collect();
            let report = format!("rank {rank} of {n} on host {}: local ranks {local:?}, ", host.name);
            let Some(at) = stdout.find(&report) else {
                panic!("{what}: rank {rank} did not report running in {} with local ranks {local:?}\n{}", host.name, all());
            };
            let line = stdout[at + report.len()..].lines().next().unwrap_or_default();
            let receives: u64 = line.split_whitespace().next().and_then(|count| count.parse().ok()).unwrap_or(0);
            let ok = format!("network receives: {} matrix ok", self.which);
            assert!(receives > 0 && line.ends_with(&ok), "{what}: rank {rank} received nothing over the network: {line}\n{}", all());
            let bootstrapped = format!("rank {rank}/{n} bootstrapped, listening on {}:", host.address(0));
            assert!(stderr.contains(&bootstrapped), "{what}: rank {rank} did not bootstrap on {}'s rail address ({bootstrapped:?} is not logged)\n{}", host.name, all());
            if let Id::FromSlurm = self.id {
                let launched = format!("launched by Slurm: rank {rank} of {n}");
                assert!(stderr.contains(&launched), "{what}: rank {rank} did not take its place from Slurm ({launched:?} is not logged)\n{}", all());
            }
        }
        // The root, in the first host: made there by rank 0 (over MPI), or at the address
        // every rank derived from the step's node list (from Slurm).
        let root = self.cluster.hosts[self.hosts[0]].address(0);
        let created = format!("bootstrap root listening on {root}:");
        match self.id {
            Id::OverMpi => assert!(stderr.contains(&created), "{what}: rank 0 did not create the id in its host ({created:?} is not logged)\n{}", all()),
            Id::FromSlurm => assert!(!stderr.contains("bootstrap root listening on"), "{what}: an id was created, not derived from Slurm's variables\n{}", all()),
        }
        let joined = stderr.lines().any(|line| line.contains(&format!("bootstrap root {root}:")) && line.ends_with(&format!(": all {n} ranks joined")));
        assert!(joined, "{what}: no root at {root} saw all {n} ranks join\n{}", all());
    }
}

/// mpirun in the first host of each job, ranks in 3 and 4 hosts, one or two each, the id
/// over MPI and the collectives over the socket Net between hosts.
#[cfg(feature = "mpi")]
#[test]
fn mpirun_across_namespaced_hosts() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(4, 1)) else { return };
    let exe = std::env::current_exe().unwrap();
    // (hosts, ranks per host, matrix): a job may start in any host, not only in host 0.
    let jobs: [(&[usize], usize, &str); 3] = [(&[0, 1, 2], 2, "small"), (&[3, 1, 2], 1, "small"), (&[2, 3, 0, 1], 2, "large")];
    for (hosts, per_host, which) in jobs {
        let start = Instant::now();
        let env = [RANK_ENV[0], RANK_ENV[1], ("OXCCL_TEST_LAUNCHED", which), ("OXCCL_BOOTSTRAP", "mpi")];
        let mut command = mpirun::command(&cluster, hosts, per_host, &env, &exe).unwrap();
        command.args(CHILD);
        let output = oxccl_testkit::run(command, JOB_TIMEOUT);
        let what = format!("mpirun in hosts {hosts:?}, {per_host} ranks each, {which} matrix");
        Job { what: what.clone(), cluster: &cluster, hosts, per_host, which, id: Id::OverMpi }.check(&output);
        eprintln!("{what}: {:.1?}", start.elapsed());
    }
}

/// srun -N 3 of the cluster's Slurm: two tasks a host with the id from Slurm's
/// environment, one a host with the id over MPI through PMIx (`--mpi=pmix`).
#[test]
fn srun_across_namespaced_hosts() {
    let Some(cluster) = Cluster::or_skip(&Spec::new(3, 1)) else { return };
    let start = Instant::now();
    let Some(slurm) = Slurm::or_skip(&cluster) else { return };
    eprintln!("the cluster's Slurm took {:.1?} to start", start.elapsed());
    let exe = std::env::current_exe().unwrap();
    let job = |per_host: usize, options: &[&str], env: &[(&str, &str)], id: Id| {
        let start = Instant::now();
        let tasks = (3 * per_host).to_string();
        let command = || {
            let mut command = slurm.srun(&[&["-N", "3", "-n", &tasks], options].concat());
            command.envs(RANK_ENV).envs(env.iter().copied()).env("OXCCL_TEST_LAUNCHED", "small").arg(&exe).args(CHILD);
            command
        };
        let what = format!("srun -N 3 -n {tasks} {}", options.join(" "));
        let mut output = oxccl_testkit::run(command(), JOB_TIMEOUT);
        // Open MPI 4.1's MPI_Init under srun --mpi=pmix now and then calls a NULL receive
        // callback in its TCP BTL (a message of ob1's arrives before ob1 has registered;
        // core dumps of 2026-11-27 show it inside PMPI_Init_thread, open upstream as
        // open-mpi/ompi#12495): not oxccl's code, which runs only once MPI_Init has
        // returned. Such a job runs again, twice at most (on 2026-12-02 it crashed twice in
        // a row under the full suite's load); a third crash fails.
        let reruns = if matches!(id, Id::OverMpi) { 2 } else { 0 };
        for _ in 0..reruns {
            let Some(task) = died_in_mpi_init(&output) else { break };
            eprintln!("{what}: task {task} died inside MPI_Init (Open MPI), running the job again\n{}", String::from_utf8_lossy(&output.stderr));
            output = oxccl_testkit::run(command(), JOB_TIMEOUT);
        }
        if !output.status.success() {
            eprintln!("{}", slurm.log_tails());
        }
        Job { what: what.clone(), cluster: &cluster, hosts: &[0, 1, 2], per_host, which: "small", id }.check(&output);
        eprintln!("{what}: {:.1?}", start.elapsed());
    };
    job(2, &[], &[], Id::FromSlurm);
    // Open MPI's own messages between the hosts go over rail 0 as well.
    #[cfg(feature = "mpi")]
    job(1, &["--mpi=pmix"], &[("OXCCL_BOOTSTRAP", "mpi"), ("OMPI_MCA_pml", "ob1"), ("OMPI_MCA_btl", "self,vader,tcp"), ("OMPI_MCA_btl_tcp_if_include", "rail0")], Id::OverMpi);
}

/// The task of an MPI job that srun saw die of a signal before its MPI_Init returned (it
/// never logged "MPI initialized"), if one did.
fn died_in_mpi_init(output: &Output) -> Option<usize> {
    let stderr = String::from_utf8_lossy(&output.stderr);
    stderr.lines().filter_map(|line| line.split(": task ").nth(1)).find_map(|rest| {
        let (task, what) = rest.split_once(": ")?;
        let task: usize = task.parse().ok()?;
        let signalled = what.starts_with("Segmentation fault") || what.starts_with("Bus error") || what.starts_with("Aborted");
        (signalled && !stderr.contains(&format!("MPI initialized: rank {task} of "))).then_some(task)
    })
}

/// The crash srun reported on 2026-11-27 (task 2 inside MPI_Init) is told apart from one
/// after MPI_Init returned, and from a task that failed without a signal.
#[test]
fn a_task_that_died_inside_mpi_init_is_told_apart() {
    use std::os::unix::process::ExitStatusExt;
    let output = |stderr: &str| Output { status: std::process::ExitStatus::from_raw(143 << 8), stdout: Vec::new(), stderr: stderr.as_bytes().to_vec() };
    let crash = "srun: error: h2: task 2: Segmentation fault (core dumped)\nsrun: error: h0: task 0: Terminated\n";
    let up = |ranks: &[usize]| ranks.iter().map(|r| format!("INFO oxccl::bootstrap: MPI initialized: rank {r} of 3\n")).collect::<String>();
    assert_eq!(died_in_mpi_init(&output(&format!("{}{crash}", up(&[0, 1])))), Some(2));
    assert_eq!(died_in_mpi_init(&output(&format!("{}{crash}", up(&[0, 1, 2])))), None, "task 2 crashed after MPI_Init");
    assert_eq!(died_in_mpi_init(&output("srun: error: h1: task 1: Exited with exit code 101\n")), None);
}
