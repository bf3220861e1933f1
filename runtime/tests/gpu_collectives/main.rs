//! The GPU backend on real GPUs: every collective × datatype × op × size, in and out of
//! place, checked against the collectives' definitions (`oxccl_testkit::check`, which
//! knows nothing of schedules or kernels), with ranks as threads and as processes, plus
//! abort of a kernel waiting on a peer that never comes. Output buffers are poisoned
//! before each run, so unwritten elements are caught.
//!
//! Without a GPU every test says "skipped" and passes, unless OXCCL_TEST_GPU=1 (the GPU
//! machine's runner sets it), which turns a missing GPU into a failure. Ranks outnumbering
//! GPUs share them: threads of one process run their kernels side by side; processes on one
//! GPU are time-sliced by it (slower, and each kernel waits for its peer's time slice, but
//! they run: the process tests use two on one GPU when there is only one).

#[path = "../common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use oxccl_runtime::bootstrap::Config;
use oxccl_runtime::algo::Algorithm;
use oxccl_runtime::gpu::{self, Route};
use oxccl_runtime::Memory;
use oxccl_runtime::{Collective, Communicator, DataType, ReduceOp};
use oxccl_testkit::check::{self, Case};

/// The GPUs, once the earlier tests' communicators have freed their memory: a free in the
/// background would hold up this test's CUDA calls while its kernels wait for them.
fn gpus() -> Option<usize> {
    let g = oxccl_testkit::gpus_or_skip(gpu::device_count())?;
    settle();
    Some(g)
}

fn settle() {
    assert!(gpu::wait_for_teardowns(Duration::from_secs(120)), "the communicators dropped before did not finish their teardown within 120 s");
}

fn config() -> Config {
    // NCCL_DEBUG (and NCCL_DEBUG_SUBSYS) set: the library's logs, as a program would see them.
    if std::env::var_os("NCCL_DEBUG").is_some() {
        oxccl_runtime::bootstrap::log::init(&Config::from_env().unwrap());
    }
    let mut c = Config::defaults();
    c.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
    c.set("OXCCL_COLL_TIMEOUT_MS", "60000").unwrap();
    c
}

/// Compiles every kernel specialisation into the disk cache, in parallel, so that the
/// ranks' first calls find them there.
fn warm_kernel_cache() {
    use oxccl_kernels::cuda::{Specialization, Toolchain};
    let toolchain = Toolchain::find().unwrap();
    let specs: Vec<Specialization> = Specialization::all().collect();
    let start = Instant::now();
    std::thread::scope(|s| {
        for part in specs.chunks(specs.len().div_ceil(12)) {
            let toolchain = &toolchain;
            s.spawn(move || part.iter().for_each(|&spec| drop(toolchain.compile(spec, "sm_90").unwrap())));
        }
    });
    eprintln!("kernel cache warm in {:.1?}", start.elapsed());
}

/// Device buffers reused by every case of a rank: allocating or freeing GPU memory
/// synchronizes the whole device, which would wait for a kernel of another rank sharing
/// this GPU that waits for this rank's next launch (as with NCCL, never free memory while
/// a collective on the same GPU awaits a launch this thread has yet to make).
struct Buffers {
    send: gpu::DeviceBuffer,
    recv: gpu::DeviceBuffer,
}

impl Buffers {
    fn for_cases(comm: &Communicator, cases: &[Case]) -> Buffers {
        let n = comm.nranks();
        let bytes = cases.iter().map(|c| (n * c.count + 64) * c.dtype.size()).max().unwrap_or(64);
        Buffers { send: comm.alloc(bytes).unwrap(), recv: comm.alloc(bytes).unwrap() }
    }
}

/// What a case runs on and is checked against.
#[derive(Clone, Copy, Debug)]
enum Inputs {
    /// The matrix's small integers, the output checked against the collective's
    /// definition (`check::run_case_on_gpu`).
    Exact,
    /// Random bits and values, the output checked bit for bit against the CPU running the
    /// route the call takes (`check::run_random_case_on_gpu`); case i draws from seed i.
    Random,
}

fn run_cases(comm: &Communicator, cases: &[Case], inputs: Inputs) -> Vec<String> {
    let stream = comm.stream().unwrap();
    let buffers = Buffers::for_cases(comm, cases);
    check::run_each(comm.rank(), cases, |i, case| match inputs {
        Inputs::Exact => check::run_case_on_gpu(comm, &stream, &buffers.send, &buffers.recv, case),
        Inputs::Random => check::run_random_case_on_gpu(comm, &stream, &buffers.send, &buffers.recv, case, i as u64),
    })
}

/// The matrix: small sizes of everything (the direct LL path, by default, and the LL
/// send/recv path for alltoall, gather and scatter), both sides of the direct path's limit
/// (OXCCL_GPU_DIRECT_BYTES unset: 1 MiB from all peers together up to 3 ranks, 2 MiB from
/// 4) and of the LL send/recv limit
/// (64 KiB blocks) in every datatype, then 8 MiB blocks of every collective (the ring: several channels, many
/// slots each) and odd datatypes at that size.
fn cases(n: usize) -> Vec<Case> {
    let mut cases = check::full_matrix(n, &check::SMALL_COUNTS);
    for dtype in DataType::ALL {
        let at_limit = Config::defaults().gpu_direct_limit(n) / (n - 1) / dtype.size();
        let edge = check::full_matrix(n, &[at_limit, at_limit + 1]);
        cases.extend(edge.into_iter().filter(|c| c.dtype == dtype && matches!(c.op, ReduceOp::Sum | ReduceOp::PreMulSum(_))));
    }
    // alltoall, gather and scatter on both sides of the LL send/recv limit
    // (NCCL_P2P_LL_THRESHOLD, 64 KiB blocks): up to it they run as one LL group.
    for dtype in DataType::ALL {
        let at_limit = (64 << 10) / dtype.size();
        let edge = check::full_matrix(n, &[at_limit, at_limit + 1]);
        cases.extend(edge.into_iter().filter(|c| c.dtype == dtype && matches!(c.collective, Collective::AllToAll | Collective::Gather | Collective::Scatter)));
    }
    // alltoall in place at the LL send/recv limit (from a copy of the input) and above it
    // (on one host, lanes that send each chunk before receiving over it).
    for dtype in DataType::ALL {
        let at_limit = (64 << 10) / dtype.size();
        cases.extend(check::all_to_all_in_place(dtype, &[at_limit, at_limit + 1]));
    }
    cases.extend(check::large_cases(n, 8 << 20));
    cases.extend(check::all_to_all_in_place(DataType::Float32, &[(8 << 20) / 4 + 3]));
    cases
}

/// The small sizes again with LL excluded (NCCL_PROTO=simple): the ring at every size, and
/// alltoall in place on the lanes that send each chunk before receiving over it.
fn simple_cases(n: usize) -> Vec<Case> {
    let mut cases = check::full_matrix(n, &check::SMALL_COUNTS);
    cases.extend(check::all_to_all_in_place(DataType::Uint8, &check::SMALL_COUNTS));
    cases.extend(check::all_to_all_in_place(DataType::Float64, &check::SMALL_COUNTS));
    cases
}

fn simple_config() -> Config {
    config_with(&[("NCCL_PROTO", "simple")])
}

/// [`config`] with `settings` (name, value) set.
fn config_with(settings: &[(&str, &str)]) -> Config {
    let mut c = config();
    for (name, value) in settings {
        c.set(name, value).unwrap();
    }
    c
}

/// A fresh directory `oxccl-<tag>-<pid>` under the temporary one, and [`config`] writing
/// each communicator's kernel timeline there (OXCCL_KERNEL_TRACE); the caller removes it.
fn kernel_traced(tag: &str) -> (std::path::PathBuf, Config) {
    let dir = std::env::temp_dir().join(format!("oxccl-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let traced = config_with(&[("OXCCL_KERNEL_TRACE", dir.join("kernel").to_str().unwrap())]);
    (dir, traced)
}

/// Across hosts, every call staged through host memory (OXCCL_GPU_ACROSS_HOSTS=staged).
fn staged_config() -> Config {
    config_with(&[("OXCCL_GPU_ACROSS_HOSTS", "staged")])
}

fn threads(n: usize, gpus: usize, which: fn(usize) -> Vec<Case>) {
    threads_with(n, gpus, which, Inputs::Exact, &config());
}

fn threads_with(n: usize, gpus: usize, which: fn(usize) -> Vec<Case>, inputs: Inputs, config: &Config) {
    let devices: Vec<usize> = (0..n).map(|r| r % gpus).collect();
    run_matrix(init_all(&devices, config), &devices, which, inputs, "threads");
}

/// Destroys `comms` at once, a thread each: a rank's destruction waits for its peers'.
fn destroy_all(comms: Vec<Communicator>) {
    std::thread::scope(|s| {
        for c in comms {
            s.spawn(move || drop(c));
        }
    });
}

/// Runs `which` cases on every rank of `comms` (threads), checks them, and frees the ranks.
fn run_matrix(comms: Vec<Communicator>, devices: &[usize], which: fn(usize) -> Vec<Case>, inputs: Inputs, how: &str) {
    let (start, n) = (Instant::now(), comms.len());
    let failures: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = comms.iter().map(|c| s.spawn(move || run_cases(c, &which(c.nranks()), inputs))).collect();
        handles.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    destroy_all(comms);
    assert!(failures.is_empty(), "{n} ranks on GPUs {devices:?}, {inputs:?} inputs: {} failures:\n{}", failures.len(), failures[..failures.len().min(30)].join("\n"));
    eprintln!("{n} ranks ({how}) on GPUs {devices:?}: {} cases ok ({inputs:?} inputs) in {:.1?}", which(n).len(), start.elapsed());
}

/// Ranks as threads on `devices`, made once the communicators dropped before have freed
/// their memory (see [`gpus`]).
fn init_all(devices: &[usize], config: &Config) -> Vec<Communicator> {
    settle();
    Communicator::init_all_gpus(devices, config).unwrap()
}

/// Ranks of one job as threads, each with a host id of its own (NCCL_HOSTID), as if on
/// separate hosts (made as [`init_all`]'s are).
fn init_on_separate_hosts(devices: &[usize], config: &Config) -> Vec<Communicator> {
    let hosts: Vec<String> = (0..devices.len()).map(|rank| format!("test-host-{rank}")).collect();
    init_on_hosts(devices, config, &hosts)
}

/// Ranks of one job as threads, rank r on GPU `devices[r]` with host id `hosts[r]`.
fn init_on_hosts(devices: &[usize], config: &Config, hosts: &[String]) -> Vec<Communicator> {
    settle();
    let configs: Vec<Config> = hosts
        .iter()
        .map(|host| {
            let mut config = config.clone();
            config.set("NCCL_HOSTID", host).unwrap();
            config
        })
        .collect();
    Communicator::init_all_gpus_with(devices, &configs).unwrap()
}

/// The random-input matrix: every collective × datatype × op at 0, 1, 7 and 4099 elements, in
/// and out of place; all_reduce on both sides of the direct kernel's limit (the largest
/// direct call, the smallest ring call) in every datatype (sum; PreMulSum and Avg for the
/// floats); and every collective at 3 MiB per rank (the ring or the direct exchange on
/// many channels) with the odd datatypes' all_reduce at that size.
fn random_cases(n: usize) -> Vec<Case> {
    let mut cases = check::full_matrix(n, &check::SMALL_COUNTS);
    for dtype in DataType::ALL {
        let at_limit = Config::defaults().gpu_direct_limit(n) / (n - 1) / dtype.size();
        let edge = check::full_matrix(n, &[at_limit, at_limit + 1]);
        let op_kept = |op: ReduceOp| op == ReduceOp::Sum || (dtype.is_float() && matches!(op, ReduceOp::Avg | ReduceOp::PreMulSum(_)));
        cases.extend(edge.into_iter().filter(|c| c.dtype == dtype && c.collective == Collective::AllReduce && op_kept(c.op)));
    }
    cases.extend(check::large_cases(n, 3 << 20));
    cases
}

mod across_hosts;
mod one_host;
mod processes;
mod faults;
mod p2p;
mod plans;

/// The route `comm` takes for a float `collective` of `count` elements, as a schedule's
/// (algorithm, over LL, channels); a test failure where it is not a schedule.
fn schedule_of(comm: &Communicator, collective: Collective, count: usize) -> (Algorithm, bool, usize) {
    match comm.route(collective, count, DataType::Float32, 0).unwrap() {
        Route::Schedule { shape, algorithm, ll } => (algorithm, ll, shape.channels),
        other => panic!("{collective:?} of {count} floats: {other:?}, not a schedule"),
    }
}

/// The project's rules tuner plugin (tuning/tests/plugin/rules_tuner.c, ABI v5 as NCCL 2.28
/// reads), built with cc into a directory of its own, with `rules` in the file
/// NCCL_TUNER_CONFIG_FILE names while it lives (the GPU tests run one at a time).
struct RulesTuner {
    dir: std::path::PathBuf,
    plugin: std::path::PathBuf,
}

impl RulesTuner {
    fn new(rules: &str) -> RulesTuner {
        let dir = std::env::temp_dir().join(format!("oxccl-gpu-tuner-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (source, plugin, file) = (dir.join("rules_tuner.c"), dir.join("libnccl-tuner-rules.so"), dir.join("rules.conf"));
        std::fs::write(&source, include_str!("../../../tuning/tests/plugin/rules_tuner.c")).unwrap();
        let status = std::process::Command::new("cc").args(["-shared", "-fPIC", "-O2", "-DTUNER_ABI=5", "-o"]).arg(&plugin).arg(&source).status().expect("a C compiler (cc) builds the rules tuner");
        assert!(status.success(), "cc failed on {}", source.display());
        std::fs::write(&file, rules).unwrap();
        // SAFETY: (test) the GPU tests run one at a time (--test-threads 1): no other thread reads the environment meanwhile.
        unsafe { std::env::set_var("NCCL_TUNER_CONFIG_FILE", &file) };
        RulesTuner { dir, plugin }
    }

    /// The tests' config with NCCL_TUNER_PLUGIN naming this plugin.
    fn config(&self) -> Config {
        config_with(&[("NCCL_TUNER_PLUGIN", self.plugin.to_str().unwrap())])
    }
}

impl Drop for RulesTuner {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { std::env::remove_var("NCCL_TUNER_CONFIG_FILE") };
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
