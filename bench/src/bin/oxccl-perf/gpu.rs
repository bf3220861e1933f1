//! `--gpus N`: the table on GPU buffers, one rank per GPU as threads of this process (like
//! nccl-tests' `-g N`), each rank launching on its own stream. sendrecv is nccl-tests':
//! each rank sends to the next and receives from the one before, in one group;
//! alltoall_grouped a group of a send to and a receive from every rank. Without a
//! baseline, more ranks than GPUs share them (rank r on GPU r mod GPUs; the header says
//! so: those times are not NVLink's). With `--baseline nccl` the
//! machine's libnccl.so.2 (dlopen) runs the same collective on the same buffers and
//! streams in the same run, through communicators from ncclCommInitAll.
//!
//! Time is as nccl-tests takes it: the ranks line up, each launches `-n` calls back to
//! back on its stream and waits for it; the slowest rank's mean per call is reported.
//! `-c 1` checks one separate call per row against `oxccl_testkit::check` for rows up to
//! `--check-max` (16 MiB unless raised: the host reference is slow on large rows; larger
//! rows say "-").

use std::ffi::c_void;
use std::sync::Barrier;

use oxccl_runtime::gpu::{self, DeviceBuffer, Stream};
use oxccl_runtime::Communicator;

use super::*;

pub fn run(plan: &Plan, config: &Config) -> Result<(), Box<dyn std::error::Error>> {
    let n = plan.args.gpus;
    let visible = gpu::device_count();
    if visible == 0 || (n > visible && plan.args.baseline.is_some()) {
        return Err(format!("--gpus {n}: this machine shows {visible} GPU(s) (ranks may share GPUs only without a baseline: NCCL refuses it)").into());
    }
    if plan.kind.rooted() && plan.args.root >= n {
        return Err(format!("root {} out of range for {n} ranks", plan.args.root).into());
    }
    let mut picture = picture::Picture::new(plan);
    let devices: Vec<usize> = (0..n).map(|r| r % visible).collect();
    let comms = if plan.args.separate_hosts {
        let mut configs = vec![config.clone(); n];
        for (rank, c) in configs.iter_mut().enumerate() {
            c.set("NCCL_HOSTID", &format!("oxccl-perf-host-{rank}"))?;
        }
        Communicator::init_all_gpus_with(&devices, &configs)?
    } else {
        Communicator::init_all_gpus(&devices, config)?
    };
    let nccl = match plan.args.baseline.as_deref() {
        Some(_) => {
            if plan.args.separate_hosts {
                // NCCL's path between nodes without RDMA: its network transport, sockets.
                for (var, value) in [("NCCL_P2P_DISABLE", "1"), ("NCCL_SHM_DISABLE", "1"), ("NCCL_NET", "Socket")] {
                    std::env::set_var(var, value);
                }
            }
            Some(nccl::Nccl::open(&devices)?)
        }
        None => None,
    };
    let es = plan.dtype.size();
    // Buffers for the largest row, made once (allocating during a run would synchronize).
    let bytes_max = plan.args.max_bytes.max(es) + 64;
    let ranks: Vec<Rank> = comms
        .iter()
        .map(|c| Ok::<_, oxccl_runtime::Error>(Rank { comm: c, stream: c.stream()?, send: c.alloc(bytes_max)?, recv: c.alloc(bytes_max)? }))
        .collect::<Result<_, _>>()?;
    for r in &ranks {
        // Finite values everywhere (an all-ones pattern of the datatype).
        let one = check::encode(plan.dtype, 1.0);
        let fill: Vec<u8> = one.iter().copied().cycle().take(bytes_max / es * es).collect();
        r.send.upload(&fill)?;
        r.recv.upload(&fill)?;
    }
    println!(
        "# oxccl-perf {} on GPUs: nranks {n} minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {} baseline: {}",
        plan.kind_name(),
        plan.args.min_bytes,
        plan.args.max_bytes,
        plan.args.factor,
        plan.args.warmup,
        plan.args.iters,
        plan.args.check,
        nccl.as_ref().map_or("none".to_string(), |b| format!("NCCL {}", b.version))
    );
    println!("#");
    for r in &ranks {
        println!("#  rank {} on GPU {}", r.comm.rank(), r.comm.device().unwrap_or_default());
    }
    if n > visible {
        println!("#  {n} ranks share {visible} GPU(s): these times are not NVLink's");
    }
    if plan.args.separate_hosts {
        println!("#  every rank claims a host of its own: oxccl stages through host memory and its socket Net; NCCL runs its socket network transport (P2P and SHM disabled)");
    }
    println!("#");
    print_columns(nccl.is_some().then_some(["  NCCL baseline", "    nccl   nccl  ratio", "    time  busbw   x"]));
    let factor = plan.kind.busbw_factor(n);
    let (mut wrong_total, mut busbw_sum, mut rows) = (0, 0.0, 0);
    let mut bytes = plan.args.min_bytes;
    loop {
        let count = plan.kind.count(bytes, es, n);
        let (size, has_in_place) = match plan.kind {
            Kind::Collective(c) => {
                let (s, r) = c.buffer_counts(count, n, plan.args.root, plan.args.root);
                (s.max(r) * es, measured_in_place(c))
            }
            Kind::Group(g) => (count * g.blocks(n) * es, false),
        };
        let throttled_before = cpu_throttled();
        let (out_of_place, slowest_enqueue) = time(plan, &ranks, count, false, Launcher::Oxccl)?;
        let (in_place, slowest_in_place) = if has_in_place { time(plan, &ranks, count, true, Launcher::Oxccl).map(|(t, s)| (Some(t), s))? } else { (None, 0.0) };
        let throttled = cpu_throttled().zip(throttled_before).map(|(after, before)| (after.0 - before.0, after.1 - before.1)).filter(|&(periods, _)| periods > 0);
        let baseline = match &nccl {
            Some(b) => Some(time(plan, &ranks, count, false, Launcher::Nccl(b))?.0),
            None => None,
        };
        let checked = plan.args.check == 1 && size <= plan.args.check_max;
        let wrong_out = if checked { check_row(plan, &ranks, count, false)? } else { 0 };
        let wrong_in = if checked && in_place.is_some() { check_row(plan, &ranks, count, true)? } else { 0 };
        let wrong_text = |w: usize| if checked { w.to_string() } else { "-".into() };
        let cols = |t: Option<f64>, w: usize| columns(size, factor, t.map(|t| (t, wrong_text(w))));
        let base = baseline
            .map(|t| {
                let theirs = size as f64 / t / 1e9 * factor;
                format!(" {:>8} {:>6.2} {:>5.2}", format_time(t), theirs, busbw_ratio(out_of_place, t))
            })
            .unwrap_or_default();
        let root = if plan.kind.rooted() { plan.args.root as i64 } else { -1 };
        let op = if plan.kind.reduces() { plan.op.name() } else { "none" };
        println!("{size:>12} {:>13} {:>9} {op:>7} {root:>7} {} {}{base}", count * if size > count * es { n } else { 1 }, plan.dtype.name(), cols(Some(out_of_place), wrong_out), cols(in_place, wrong_in));
        // What stalls a row (its mean far above its neighbours'): a rank thread held up in
        // an enqueue, or the container's CPU quota throttling the process while oxccl's
        // timed loops ran.
        if slowest_enqueue.max(slowest_in_place) > 1e-3 {
            println!("#  {size} B: an enqueue took {:.1} ms (out of place {:.1}, in place {:.1})", slowest_enqueue.max(slowest_in_place) * 1e3, slowest_enqueue * 1e3, slowest_in_place * 1e3);
        }
        if let Some((periods, usec)) = throttled {
            println!("#  {size} B: the cgroup throttled this process's CPUs for {:.1} ms in {periods} period(s) while oxccl's calls were timed", usec as f64 / 1e3);
        }
        if plan.args.call_stats {
            let mut calls = single_calls(plan, &ranks, count)?;
            calls.sort_by(f64::total_cmp);
            let at = |q: f64| calls[((calls.len() - 1) as f64 * q) as usize] * 1e6;
            println!(
                "#  {size} B: slowest enqueue in the timed loop {:.1} us; single calls (launch to completion, rank 0) min {:.2} median {:.2} p99 {:.2} max {:.2} us",
                slowest_enqueue * 1e6,
                at(0.0),
                at(0.5),
                at(0.99),
                at(1.0)
            );
        }
        if let Some(picture) = picture.as_mut() {
            picture.add(size, out_of_place, baseline, factor);
        }
        wrong_total += wrong_out + wrong_in;
        busbw_sum += size as f64 / out_of_place / 1e9 * factor;
        rows += 1;
        if bytes >= plan.args.max_bytes {
            break;
        }
        bytes = next_size(bytes, plan.args.factor, plan.args.max_bytes);
    }
    println!("# Out of bounds values : {wrong_total} {}", if wrong_total == 0 { "OK" } else { "FAILED" });
    println!("# Avg bus bandwidth    : {:.4}", busbw_sum / rows as f64);
    if let Some(r) = ranks.first() {
        // What oxccl holds on the GPU, for the tables that compare settings (channels,
        // slots): the connections' FIFOs and inboxes, and the plans and scratch.
        let m = r.comm.memory_stats();
        println!("# GPU memory of rank 0 : persistent {:.1} MiB, releasable {:.1} MiB", m.persistent as f64 / (1 << 20) as f64, m.releasable as f64 / (1 << 20) as f64);
    }
    println!("#");
    let baseline_name = nccl.as_ref().map(|b| format!("NCCL {}", b.version));
    drop(ranks);
    drop(nccl);
    std::thread::scope(|s| {
        for c in comms {
            s.spawn(move || drop(c));
        }
    });
    if wrong_total > 0 {
        return Err(format!("{wrong_total} wrong elements").into());
    }
    if let Some(picture) = picture {
        let gpus = devices.iter().collect::<std::collections::BTreeSet<_>>().len();
        let hosts = if plan.args.separate_hosts { ", each rank posing as a host" } else { "" };
        let machine = format!("{gpus} GPU{} on {}{hosts}", if gpus == 1 { "" } else { "s" }, oxccl_bootstrap::host_name());
        picture.write(plan, n, &machine, baseline_name.as_deref())?;
    }
    Ok(())
}

/// The container's CPU throttling so far (cgroup v2 `cpu.stat`, else v1's): periods
/// throttled and microseconds; None where neither file reads.
fn cpu_throttled() -> Option<(u64, u64)> {
    let field = |text: &str, name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok());
    if let Ok(text) = std::fs::read_to_string("/sys/fs/cgroup/cpu.stat") {
        return field(&text, "nr_throttled ").zip(field(&text, "throttled_usec "));
    }
    let text = std::fs::read_to_string("/sys/fs/cgroup/cpu/cpu.stat").ok()?;
    field(&text, "nr_throttled ").zip(field(&text, "throttled_time ").map(|ns| ns / 1000))
}

/// One rank's communicator, stream and buffers.
struct Rank<'a> {
    comm: &'a Communicator,
    stream: Stream,
    send: DeviceBuffer,
    recv: DeviceBuffer,
}

#[derive(Clone, Copy)]
enum Launcher<'a> {
    Oxccl,
    Nccl(&'a nccl::Nccl),
}

/// The slowest rank's mean seconds per call, and the longest any rank spent in one
/// enqueue call of the timed loop.
fn time(plan: &Plan, ranks: &[Rank], count: usize, in_place: bool, launcher: Launcher) -> Result<(f64, f64), String> {
    let n = ranks.len();
    let root = plan.args.root;
    let es = plan.dtype.size() as u64;
    let barrier = Barrier::new(n);
    let times: Vec<Result<(f64, f64), String>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| {
                let barrier = &barrier;
                s.spawn(move || -> Result<(f64, f64), String> {
                    r.comm.bind().map_err(|e| e.to_string())?;
                    let (send, recv) = match plan.kind {
                        Kind::Collective(c) if in_place => {
                            let base = r.recv.ptr();
                            (base + c.in_place_send_offset(count, rank, root).unwrap_or(0) as u64 * es, base + c.in_place_recv_offset(count, rank, root).unwrap_or(0) as u64 * es)
                        }
                        _ => (r.send.ptr(), r.recv.ptr()),
                    };
                    let launch = || -> Result<(), String> {
                        // SAFETY: the buffers hold the largest row; nothing else uses them
                        // until the stream is synchronized (NCCL: on its communicator of the
                        // same GPU).
                        unsafe {
                            match (launcher, plan.kind) {
                                (Launcher::Oxccl, _) => enqueue(plan, r, rank, n, send, recv, count),
                                (Launcher::Nccl(b), Kind::Collective(c)) => b.launch(rank, c, send, recv, count, plan.dtype, plan.op, root, r.stream.raw().cast()),
                                (Launcher::Nccl(b), Kind::Group(g)) => b.group(rank, &group_ops(g, rank, n, send, recv, count * plan.dtype.size()), count, plan.dtype, r.stream.raw().cast()),
                            }
                        }
                    };
                    let warm = (0..plan.args.warmup).try_for_each(|_| launch()).and_then(|()| r.comm.wait(&r.stream).map_err(|e| e.to_string()));
                    // Every rank reaches the barrier, a failed one too (then leaves).
                    barrier.wait();
                    warm?;
                    let start = Instant::now();
                    let mut slowest = 0.0f64;
                    for _ in 0..plan.args.iters {
                        let call = Instant::now();
                        launch()?;
                        slowest = slowest.max(call.elapsed().as_secs_f64());
                    }
                    r.comm.wait(&r.stream).map_err(|e| e.to_string())?;
                    Ok((start.elapsed().as_secs_f64() / plan.args.iters as f64, slowest))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
    });
    times.into_iter().try_fold((0.0f64, 0.0f64), |(mean, slowest), t| {
        let (m, s) = t?;
        Ok((mean.max(m), slowest.max(s)))
    })
}

/// `-n` single calls of oxccl's collective, each waited for before the next (ranks lined
/// up before each): rank 0's seconds from its launch to its completion, per call.
fn single_calls(plan: &Plan, ranks: &[Rank], count: usize) -> Result<Vec<f64>, String> {
    let n = ranks.len();
    let barrier = Barrier::new(n);
    let all: Vec<Result<Vec<f64>, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| {
                let barrier = &barrier;
                s.spawn(move || -> Result<Vec<f64>, String> {
                    r.comm.bind().map_err(|e| e.to_string())?;
                    let mut calls = Vec::with_capacity(plan.args.iters);
                    let mut failure = None;
                    for _ in 0..plan.args.iters {
                        // Every rank reaches every barrier, a failed one too.
                        barrier.wait();
                        if failure.is_some() {
                            continue;
                        }
                        let start = Instant::now();
                        // SAFETY: as in `time`.
                        match unsafe { enqueue(plan, r, rank, n, r.send.ptr(), r.recv.ptr(), count) }.and_then(|()| r.comm.wait(&r.stream).map_err(|e| e.to_string())) {
                            Ok(()) => calls.push(start.elapsed().as_secs_f64()),
                            Err(e) => failure = Some(e),
                        }
                    }
                    failure.map_or(Ok(calls), Err)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
    });
    all.into_iter().next().unwrap_or_else(|| Ok(Vec::new()))
}

/// Enqueues oxccl's call of the row on rank `rank` (of `n`), from `send` into `recv`.
///
/// # Safety
/// The buffers hold the row; nothing else uses them until the stream is synchronized.
#[allow(clippy::too_many_arguments)]
unsafe fn enqueue(plan: &Plan, r: &Rank, rank: usize, n: usize, send: u64, recv: u64, count: usize) -> Result<(), String> {
    let stream = r.stream.raw();
    // SAFETY: the buffers hold the row and nothing else uses them until the stream is
    // synchronized (this function's contract); `stream` is this rank's own, on its GPU.
    unsafe {
        match plan.kind {
            Kind::Collective(c) => r.comm.launch_collective(c, send, recv, count, plan.dtype, plan.op, plan.args.root, stream),
            Kind::Group(g) => r.comm.launch_p2p(&group_ops(g, rank, n, send, recv, count * plan.dtype.size()), stream),
        }
    }
    .map_err(|e| e.to_string())
}

/// The group `group` on `rank` as oxccl's transfers: blocks of `bytes` of `send` and `recv`.
fn group_ops(group: Group, rank: usize, n: usize, send: u64, recv: u64, bytes: usize) -> Vec<gpu::P2p> {
    let at = |base: u64, block: usize| base + (block * bytes) as u64;
    group.transfers(rank, n).into_iter().map(|(sends, peer, block)| gpu::P2p { send: sends, peer, addr: at(if sends { send } else { recv }, block), bytes }).collect()
}

/// Wrong elements of one checked group per rank: a pattern per sender and receiver in
/// each block sent, the receive buffer poisoned.
fn check_group(group: Group, ranks: &[Rank], bytes: usize, es: usize) -> Result<usize, String> {
    let (n, name) = (ranks.len(), group.name());
    let wrong: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| {
                s.spawn(move || -> Result<usize, String> {
                    let fail = |e: oxccl_runtime::Error| format!("rank {rank}: {name} of {bytes} bytes: {e}");
                    let out = group.send_image(rank, n, bytes);
                    r.send.upload(&out).map_err(fail)?;
                    r.recv.upload(&vec![0xA5; out.len()]).map_err(fail)?;
                    // SAFETY: both buffers hold every block; synchronized before they are read.
                    unsafe { r.comm.launch_p2p(&group_ops(group, rank, n, r.send.ptr(), r.recv.ptr(), bytes), r.stream.raw()) }.map_err(fail)?;
                    r.comm.wait(&r.stream).map_err(fail)?;
                    let mut got = vec![0u8; out.len()];
                    r.recv.download(&mut got).map_err(fail)?;
                    let wrong = group.wrong_elements(rank, n, bytes, es, &got);
                    if wrong > 0 {
                        eprintln!("rank {rank}: {name} of {bytes} bytes: {wrong} wrong elements");
                    }
                    Ok(wrong)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
    });
    wrong.into_iter().sum()
}

/// Wrong elements of one checked call per rank.
fn check_row(plan: &Plan, ranks: &[Rank], count: usize, in_place: bool) -> Result<usize, String> {
    let collective = match plan.kind {
        Kind::Collective(c) => c,
        Kind::Group(g) => return check_group(g, ranks, count * plan.dtype.size(), plan.dtype.size()),
    };
    let case = Case { collective, dtype: plan.dtype, op: plan.op, count, root: plan.args.root, in_place };
    let wrong: Vec<Result<usize, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .map(|r| {
                s.spawn(move || match check::run_case_on_gpu(r.comm, &r.stream, &r.send, &r.recv, &case) {
                    Ok(None) => Ok(0),
                    Ok(Some(m)) => {
                        eprintln!("rank {}: {case}: {m}", r.comm.rank());
                        Ok(m.wrong)
                    }
                    Err(e) => Err(format!("rank {}: {case}: {e}", r.comm.rank())),
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
    });
    wrong.into_iter().sum()
}

mod nccl {
    //! NCCL through dlopen: only what the baseline calls, with NCCL's C signatures.
    use super::*;
    use libloading::{Library, Symbol};

    type Comm = *mut c_void;
    type Status = i32;

    pub struct Nccl {
        lib: Library,
        comms: Vec<Comm>,
        pub version: String,
    }

    // SAFETY: NCCL communicators may be used from any thread, one thread per communicator
    // at a time (each rank thread uses its own).
    unsafe impl Send for Nccl {}
    // SAFETY: as for Send: a shared `Nccl` hands each rank thread only its own communicator
    // (`comms[rank]`), and the library handle itself is thread-safe.
    unsafe impl Sync for Nccl {}

    impl Nccl {
        /// Loads libnccl.so.2 and makes one communicator per GPU with ncclCommInitAll.
        pub fn open(devices: &[usize]) -> Result<Nccl, String> {
            if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
                // Never NVLink multicast objects on the shared machines.
                std::env::set_var("NCCL_NVLS_ENABLE", "0");
            }
            // SAFETY: loading NCCL runs its initialisers, which have no preconditions.
            let lib = unsafe { Library::new("libnccl.so.2") }.map_err(|e| format!("--baseline nccl: cannot load libnccl.so.2 ({e}); install NCCL or put it on LD_LIBRARY_PATH"))?;
            let mut nccl = Nccl { lib, comms: vec![std::ptr::null_mut(); devices.len()], version: String::new() };
            let mut v = 0i32;
            // SAFETY: the signatures are NCCL's (nccl.h); pointers are valid for the calls.
            unsafe {
                let get_version: Symbol<unsafe extern "C" fn(*mut i32) -> Status> = nccl.symbol("ncclGetVersion")?;
                nccl.status(get_version(&mut v), "ncclGetVersion")?;
                let devlist: Vec<i32> = devices.iter().map(|&d| d as i32).collect();
                let mut comms = vec![std::ptr::null_mut(); devices.len()];
                let status = {
                    let init_all: Symbol<unsafe extern "C" fn(*mut Comm, i32, *const i32) -> Status> = nccl.symbol("ncclCommInitAll")?;
                    init_all(comms.as_mut_ptr(), devlist.len() as i32, devlist.as_ptr())
                };
                nccl.status(status, "ncclCommInitAll")?;
                nccl.comms = comms;
            }
            nccl.version = format!("{}.{}.{}", v / 10000, v / 100 % 100, v % 100);
            Ok(nccl)
        }

        /// NCCL's function `name`, typed as `T`.
        ///
        /// # Safety
        /// `T` must be the function's signature in nccl.h.
        unsafe fn symbol<T>(&self, name: &str) -> Result<Symbol<'_, T>, String> {
            // SAFETY: the caller vouches that `T` is the symbol's type.
            unsafe { self.lib.get(name.as_bytes()) }.map_err(|e| format!("libnccl.so.2 lacks {name}: {e}"))
        }

        fn status(&self, s: Status, call: &str) -> Result<(), String> {
            if s == 0 {
                return Ok(());
            }
            // SAFETY: ncclGetErrorString returns a static string for any status.
            let text = unsafe {
                self.symbol::<unsafe extern "C" fn(Status) -> *const std::ffi::c_char>("ncclGetErrorString").ok().map(|f| std::ffi::CStr::from_ptr(f(s)).to_string_lossy().into_owned())
            };
            Err(format!("{call} returned {s} ({})", text.unwrap_or_default()))
        }

        /// Enqueues the collective on `stream` through rank `rank`'s communicator.
        ///
        /// # Safety
        /// Buffers and stream as for `Communicator::launch_collective`, on the rank's GPU.
        #[allow(clippy::too_many_arguments)]
        pub unsafe fn launch(&self, rank: usize, collective: Collective, send: u64, recv: u64, count: usize, dtype: DataType, op: ReduceOp, root: usize, stream: *mut c_void) -> Result<(), String> {
            let comm = self.comms[rank];
            let (s, r, t, root) = (send as *const c_void, recv as *mut c_void, dtype.to_nccl(), root as i32);
            let op = match op {
                ReduceOp::Sum => 0,
                ReduceOp::Prod => 1,
                ReduceOp::Max => 2,
                ReduceOp::Min => 3,
                ReduceOp::Avg => 4,
                ReduceOp::PreMulSum(_) => return Err("the NCCL baseline runs sum, prod, max, min and avg".into()),
            };
            type Reducing = unsafe extern "C" fn(*const c_void, *mut c_void, usize, i32, i32, Comm, *mut c_void) -> Status;
            type Rooted = unsafe extern "C" fn(*const c_void, *mut c_void, usize, i32, i32, Comm, *mut c_void) -> Status;
            type Plain = unsafe extern "C" fn(*const c_void, *mut c_void, usize, i32, Comm, *mut c_void) -> Status;
            type ReduceFn = unsafe extern "C" fn(*const c_void, *mut c_void, usize, i32, i32, i32, Comm, *mut c_void) -> Status;
            // SAFETY: each type above is the function's signature in nccl.h; the buffers,
            // count and stream are valid as this function's caller guarantees, and `comm` is
            // this rank's live communicator.
            let status = unsafe { match collective {
                Collective::AllReduce => self.symbol::<Reducing>("ncclAllReduce")?(s, r, count, t, op, comm, stream),
                Collective::ReduceScatter => self.symbol::<Reducing>("ncclReduceScatter")?(s, r, count, t, op, comm, stream),
                Collective::Reduce => self.symbol::<ReduceFn>("ncclReduce")?(s, r, count, t, op, root, comm, stream),
                Collective::Broadcast => self.symbol::<Rooted>("ncclBroadcast")?(s, r, count, t, root, comm, stream),
                Collective::Gather => self.symbol::<Rooted>("ncclGather")?(s, r, count, t, root, comm, stream),
                Collective::Scatter => self.symbol::<Rooted>("ncclScatter")?(s, r, count, t, root, comm, stream),
                Collective::AllGather => self.symbol::<Plain>("ncclAllGather")?(s, r, count, t, comm, stream),
                Collective::AllToAll => self.symbol::<Plain>("ncclAlltoAll")?(s, r, count, t, comm, stream),
            } };
            self.status(status, collective.name())
        }

        /// Enqueues the sends and receives `ops` (oxccl's transfers, each of `count`
        /// elements) on `stream` in one NCCL group, in their order.
        ///
        /// # Safety
        /// As for [`Nccl::launch`].
        pub unsafe fn group(&self, rank: usize, ops: &[gpu::P2p], count: usize, dtype: DataType, stream: *mut c_void) -> Result<(), String> {
            type Group = unsafe extern "C" fn() -> Status;
            type P2p = unsafe extern "C" fn(*const c_void, usize, i32, i32, Comm, *mut c_void) -> Status;
            let comm = self.comms[rank];
            // SAFETY: the types are the functions' signatures in nccl.h; the buffers, count
            // and stream are valid as this function's caller guarantees, and `comm` is this
            // rank's live communicator.
            unsafe {
                let (send, recv) = (self.symbol::<P2p>("ncclSend")?, self.symbol::<P2p>("ncclRecv")?);
                self.status(self.symbol::<Group>("ncclGroupStart")?(), "ncclGroupStart")?;
                let called = ops.iter().try_for_each(|op| {
                    let (call, name) = if op.send { (&send, "ncclSend") } else { (&recv, "ncclRecv") };
                    self.status(call(op.addr as *const c_void, count, dtype.to_nccl(), op.peer as i32, comm, stream), name)
                });
                let ended = self.symbol::<Group>("ncclGroupEnd")?();
                called?;
                self.status(ended, "ncclGroupEnd")
            }
        }
    }

    impl Drop for Nccl {
        fn drop(&mut self) {
            // SAFETY: destroys the communicators ncclCommInitAll made, once.
            unsafe {
                if let Ok(destroy) = self.symbol::<unsafe extern "C" fn(Comm) -> Status>("ncclCommDestroy") {
                    for &c in self.comms.iter().filter(|c| !c.is_null()) {
                        destroy(c);
                    }
                }
            }
        }
    }
}
