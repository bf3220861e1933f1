//! oxccl-perf: nccl-tests' performance tables for oxccl's collectives on CPU memory, with
//! Open MPI's same collective measured in the same run as the baseline, or on GPUs
//! (`--gpus N`, one rank per GPU as threads, like nccl-tests' `-g N`) with NCCL's (the
//! machine's libnccl.so.2, loaded with dlopen) as the baseline.
//!
//! ```text
//! oxccl-perf all_reduce -b 8 -e 64M -f 4 --nranks 4            # starts its own 4 ranks
//! mpirun -np 4 oxccl-perf all_reduce -b 256K -e 64M --baseline mpi
//! oxccl-perf all_reduce -b 8 -e 1G -f 2 --gpus 2 --baseline nccl --svg all_reduce.svg
//! ```
//!
//! Sizes, counts, columns and bus-bandwidth factors are nccl-tests': `size` is the largest
//! of one rank's send and receive buffers, `count` its elements, `time` the mean of `-n`
//! iterations launched back to back and then waited for (the slowest rank's), `algbw` =
//! size / time, `busbw` = algbw × the collective's factor (all_reduce 2(n-1)/n; all_gather,
//! reduce_scatter, alltoall, gather, scatter (n-1)/n; broadcast, reduce, sendrecv 1).
//! `alltoall_grouped` is alltoall as a group of a send to and a receive from every rank
//! (nccl-tests' alltoall before NCCL 2.28, and a program's all-to-all by hand); on GPUs
//! the NCCL baseline calls the same group.
//! `#wrong` counts wrong elements of a separate checked call (`-c 1`) against
//! `oxccl_testkit::check`'s reference. `--svg FILE` also draws the table as a picture:
//! busbw and time per call against size, oxccl beside its baseline.

mod gpu;
mod picture;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use oxccl_bootstrap::{config::process_env, log, spawn, Config};
use oxccl_runtime::{Collective, Communicator, DataType, ReduceOp};
use oxccl_testkit::check::{self, Case};

#[derive(Parser, Debug, Clone)]
#[command(name = "oxccl-perf", about = "nccl-tests-style benchmark of oxccl's collectives on CPU memory")]
struct Args {
    /// all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv, alltoall, gather
    /// or scatter (nccl-tests' binary names, without _perf), or alltoall_grouped (alltoall
    /// as a group of sends and receives).
    collective: String,
    /// Smallest size (bytes; K, M, G suffixes).
    #[arg(short = 'b', long = "minbytes", default_value = "32M", value_parser = parse_size)]
    min_bytes: usize,
    /// Largest size.
    #[arg(short = 'e', long = "maxbytes", default_value = "32M", value_parser = parse_size)]
    max_bytes: usize,
    /// Multiply the size by this between rows.
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2)]
    factor: usize,
    /// Timed iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    iters: usize,
    /// Untimed iterations first.
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    warmup: usize,
    /// 1: check each size's result (#wrong column); 0: don't.
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    check: u32,
    /// With --gpus and -c 1: the largest size checked (larger rows are timed only and say
    /// "-": the host reference is slow on large rows).
    #[arg(long = "check-max", default_value = "16M", value_parser = parse_size)]
    check_max: usize,
    /// Datatype, as nccl-tests names it (float, half, bfloat16, int32, f8e4m3, ...).
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    dtype: String,
    /// Reduction: sum, prod, max, min, avg, premulsum.
    #[arg(short = 'o', long = "op", default_value = "sum")]
    op: String,
    /// Root of broadcast, reduce, gather and scatter.
    #[arg(short = 'r', long = "root", default_value_t = 0)]
    root: usize,
    /// Ranks to start when no launcher started this process.
    #[arg(long, default_value_t = 4)]
    nranks: u32,
    /// Measure the same collective through MPI in the same run (`mpi`; needs mpirun).
    #[arg(long)]
    baseline: Option<String>,
    /// 1: wait for each call before the next (the blocking API's path, as MPI's blocking
    /// calls are timed); 0: launch all iterations, then wait (nccl-tests' way).
    #[arg(long, default_value_t = 0)]
    blocking: u32,
    /// Run on this many GPUs (one rank per GPU, threads of this process; GPU buffers);
    /// 0: CPU memory. With --gpus the baseline is `nccl`.
    #[arg(long, default_value_t = 0)]
    gpus: usize,
    /// With --gpus: after each row, a comment line with oxccl's slowest enqueue call in the
    /// timed loop (host time in the call) and the distribution of single calls each waited
    /// for (launch to completion, rank 0) — to find where outlier calls come from.
    #[arg(long)]
    call_stats: bool,
    /// With --gpus: every rank claims a host of its own (NCCL_HOSTID), as across nodes, so
    /// oxccl stages each call through host memory and its host path's Net (sockets); the
    /// NCCL baseline then runs with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket
    /// (its network transport over sockets), the path NCCL takes between nodes without
    /// RDMA.
    #[arg(long)]
    separate_hosts: bool,
    /// Also draw the table as an SVG picture in this file: busbw and time per call against
    /// size, oxccl's out-of-place rows beside the baseline's (with --baseline).
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// What is measured.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Collective(Collective),
    /// A group of sends and receives every rank calls (ncclSend and ncclRecv between
    /// ncclGroupStart and ncclGroupEnd).
    Group(Group),
}

/// The groups of sends and receives measured.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Group {
    /// nccl-tests' sendrecv: to the next rank, from the one before.
    Ring,
    /// alltoall as a group of a send to and a receive from every rank, itself included.
    AllPeers,
}

impl Group {
    /// This rank's transfers for blocks of `bytes`, in call order: (send, peer, the
    /// block of its send or receive buffer).
    fn transfers(self, rank: usize, n: usize) -> Vec<(bool, usize, usize)> {
        match self {
            Group::Ring => vec![(true, (rank + 1) % n, 0), (false, (rank + n - 1) % n, 0)],
            Group::AllPeers => (0..n).flat_map(|p| [(true, p, p), (false, p, p)]).collect(),
        }
    }

    /// Its table's name, as given on the command line.
    fn name(self) -> &'static str {
        match self {
            Group::Ring => "sendrecv",
            Group::AllPeers => "alltoall_grouped",
        }
    }

    /// Blocks in a rank's send buffer, and in its receive buffer.
    fn blocks(self, n: usize) -> usize {
        match self {
            Group::Ring => 1,
            Group::AllPeers => n,
        }
    }

    /// `rank`'s send buffer for a checked group of blocks of `bytes`: each block sent
    /// holds [`group_pattern`] of `rank` and its receiver.
    fn send_image(self, rank: usize, n: usize, bytes: usize) -> Vec<u8> {
        let mut out = vec![0u8; bytes * self.blocks(n)];
        for (_, peer, block) in self.transfers(rank, n).into_iter().filter(|t| t.0) {
            out[block * bytes..(block + 1) * bytes].copy_from_slice(&group_pattern(rank, peer, bytes));
        }
        out
    }

    /// Elements of `es` bytes of `rank`'s receive buffer `got` that differ from what each
    /// sender's [`Group::send_image`] put in its block.
    fn wrong_elements(self, rank: usize, n: usize, bytes: usize, es: usize, got: &[u8]) -> usize {
        let receives = self.transfers(rank, n).into_iter().filter(|t| !t.0);
        receives
            .map(|(_, peer, block)| {
                let expected = group_pattern(peer, rank, bytes);
                got[block * bytes..(block + 1) * bytes].chunks(es).zip(expected.chunks(es)).filter(|(a, b)| a != b).count()
            })
            .sum()
    }
}

/// The bytes rank `from` sends rank `to` in a checked group: a pattern of both.
fn group_pattern(from: usize, to: usize, bytes: usize) -> Vec<u8> {
    (0..bytes).map(|i| ((from * 131 + to * 37 + i * 7 + i / 251 + 13) % 251) as u8).collect()
}

impl Kind {
    fn parse(name: &str) -> Result<Kind, String> {
        let name = name.trim_end_matches("_perf");
        if let Some(g) = [Group::Ring, Group::AllPeers].into_iter().find(|g| g.name() == name) {
            return Ok(Kind::Group(g));
        }
        Collective::ALL.into_iter().find(|c| c.name() == name).map(Kind::Collective).ok_or_else(|| {
            format!("unknown collective {name:?}: expected all_reduce, all_gather, reduce_scatter, broadcast, reduce, sendrecv, alltoall, gather, scatter or alltoall_grouped")
        })
    }

    fn busbw_factor(self, n: usize) -> f64 {
        let n = n as f64;
        match self {
            Kind::Collective(Collective::AllReduce) => 2.0 * (n - 1.0) / n,
            Kind::Collective(Collective::Broadcast | Collective::Reduce) | Kind::Group(Group::Ring) => 1.0,
            Kind::Collective(_) | Kind::Group(Group::AllPeers) => (n - 1.0) / n,
        }
    }

    /// nccl-tests' per-rank element count for a row of `bytes`: the blocked collectives
    /// divide the size among the ranks.
    fn count(self, bytes: usize, es: usize, n: usize) -> usize {
        match self {
            Kind::Collective(Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll | Collective::Gather | Collective::Scatter) | Kind::Group(Group::AllPeers) => bytes / es / n,
            _ => bytes / es,
        }
    }

    fn rooted(self) -> bool {
        matches!(self, Kind::Collective(c) if c.rooted())
    }

    fn reduces(self) -> bool {
        matches!(self, Kind::Collective(c) if c.reduces())
    }
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim();
    let (digits, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let value: usize = digits.parse().map_err(|_| format!("{s:?} is not a size (e.g. 8, 256K, 64M, 1G)"))?;
    let scale = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 1,
        "K" | "KB" => 1 << 10,
        "M" | "MB" => 1 << 20,
        "G" | "GB" => 1 << 30,
        _ => return Err(format!("{s:?}: unknown size suffix {unit:?} (K, M or G)")),
    };
    value.checked_mul(scale).ok_or_else(|| format!("{s:?} is too large"))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxccl-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The parsed, checked options.
struct Plan {
    args: Args,
    kind: Kind,
    dtype: DataType,
    op: ReduceOp,
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let kind = Kind::parse(&args.collective)?;
    let dtype = DataType::parse(&args.dtype).ok_or_else(|| format!("unknown datatype {:?} (int8, uint8, int32, uint32, int64, uint64, half, float, double, bfloat16, f8e4m3, f8e5m2)", args.dtype))?;
    let op = ReduceOp::parse(&args.op).ok_or_else(|| format!("unknown op {:?} (sum, prod, max, min, avg, premulsum)", args.op))?;
    if args.min_bytes > args.max_bytes {
        return Err(format!("-b {} is larger than -e {}", args.min_bytes, args.max_bytes).into());
    }
    if args.factor < 2 && args.min_bytes != args.max_bytes {
        return Err("-f must be at least 2".into());
    }
    if args.iters == 0 {
        return Err("-n must be at least 1".into());
    }
    if let Some(path) = &args.svg {
        picture::check(path)?;
    }
    if args.gpus > 0 {
        if let Some(b) = args.baseline.as_deref().filter(|b| *b != "nccl") {
            return Err(format!("unknown baseline {b:?} on GPUs: the only one is nccl").into());
        }
        let config = Config::from_env()?;
        log::init(&config);
        return gpu::run(&Plan { args, kind, dtype, op }, &config);
    }
    if let Some(b) = args.baseline.as_deref().filter(|b| *b != "mpi") {
        return Err(format!("unknown baseline {b:?}: the only one on CPU memory is mpi (nccl needs --gpus)").into());
    }
    let config = Config::from_env()?;
    log::init(&config);
    let env = process_env();
    if !spawn::launched(&env) {
        if args.baseline.is_some() {
            return Err(format!("--baseline mpi needs MPI's own ranks: run it under mpirun, e.g. mpirun -np {} oxccl-perf {} ... --baseline mpi", args.nranks, args.collective).into());
        }
        let argv: Vec<String> = std::env::args().skip(1).collect();
        spawn::spawn_self(args.nranks, &config, &argv)?.wait(Duration::from_secs(3600), Duration::from_secs(30))?;
        return Ok(());
    }
    let plan = Plan { args, kind, dtype, op };
    if plan.args.baseline.is_some() {
        baseline::run(&plan, &config)
    } else {
        let comm = Communicator::from_env(&config)?;
        table(&plan, &comm, None)
    }
}

/// One row's measurement: seconds per call and wrong elements.
#[derive(Clone, Copy)]
struct Measured {
    seconds: f64,
    wrong: usize,
}

/// Prints the table on rank 0; `mpi` measures the baseline of a row, in seconds.
fn table(plan: &Plan, comm: &Communicator, mut mpi: Option<&mut dyn FnMut(usize) -> Result<f64, String>>) -> Result<(), Box<dyn std::error::Error>> {
    let (n, rank) = (comm.nranks(), comm.rank());
    if plan.kind.rooted() && plan.args.root >= n {
        return Err(format!("root {} out of range for {n} ranks", plan.args.root).into());
    }
    let es = plan.dtype.size();
    let header = rank == 0;
    let mut picture = if header { picture::Picture::new(plan) } else { None };
    if header {
        println!(
            "# oxccl-perf {}: nranks {n} minBytes {} maxBytes {} step: {}(factor) warmup iters: {} iters: {} validation: {} blocking: {} baseline: {}",
            plan.kind_name(),
            plan.args.min_bytes,
            plan.args.max_bytes,
            plan.args.factor,
            plan.args.warmup,
            plan.args.iters,
            plan.args.check,
            plan.args.blocking,
            plan.args.baseline.as_deref().unwrap_or("none")
        );
        println!("#");
        println!("# {} on {}, {} ranks, CPU memory, time = slowest rank's mean", oxccl_bootstrap::host_name(), std::env::consts::ARCH, n);
        println!("#");
        print_columns(mpi.is_some().then_some(["   MPI baseline", "     mpi   mpi ratio", "    time busbw   x"]));
    }
    let mut bytes = plan.args.min_bytes;
    let mut wrong_total = 0;
    let mut busbw_sum = 0.0;
    let mut rows = 0;
    loop {
        let count = plan.kind.count(bytes, es, n);
        let size = match plan.kind {
            Kind::Collective(c) => {
                let (s, r) = c.buffer_counts(count, n, plan.args.root, plan.args.root);
                s.max(r) * es
            }
            Kind::Group(g) => count * g.blocks(n) * es,
        };
        let out_of_place = measure(plan, comm, count, false)?;
        let in_place = match plan.kind {
            Kind::Collective(c) if !measured_in_place(c) => None,
            Kind::Group(_) => None,
            _ => Some(measure(plan, comm, count, true)?),
        };
        let mpi_seconds = match mpi.as_mut() {
            Some(f) => Some(slowest(comm, f(count)?)?),
            None => None,
        };
        let factor = plan.kind.busbw_factor(n);
        let cols = |m: Option<Measured>| columns(size, factor, m.map(|m| (m.seconds, if plan.args.check == 1 { m.wrong.to_string() } else { "N/A".into() })));
        if header {
            let root = if plan.kind.rooted() { plan.args.root as i64 } else { -1 };
            let op = if plan.kind.reduces() { plan.op.name() } else { "none" };
            let baseline = mpi_seconds
                .map(|t| {
                    let mpi_busbw = size as f64 / t / 1e9 * factor;
                    format!(" {:>8} {:>5.2} {:>4.2}", format_time(t), mpi_busbw, busbw_ratio(out_of_place.seconds, t))
                })
                .unwrap_or_default();
            println!("{size:>12} {:>13} {:>9} {op:>7} {root:>7} {} {}{baseline}", count * if size > count * es { n } else { 1 }, plan.dtype.name(), cols(Some(out_of_place)), cols(in_place));
        }
        if let Some(picture) = picture.as_mut() {
            picture.add(size, out_of_place.seconds, mpi_seconds, factor);
        }
        wrong_total += out_of_place.wrong + in_place.map_or(0, |m| m.wrong);
        busbw_sum += size as f64 / out_of_place.seconds / 1e9 * factor;
        rows += 1;
        if bytes >= plan.args.max_bytes {
            break;
        }
        bytes = next_size(bytes, plan.args.factor, plan.args.max_bytes);
    }
    comm.finalize()?;
    if header {
        println!("# Out of bounds values : {wrong_total} {}", if wrong_total == 0 { "OK" } else { "FAILED" });
        println!("# Avg bus bandwidth    : {:.4}", busbw_sum / rows as f64);
        println!("#");
    }
    if wrong_total > 0 {
        return Err(format!("rank {rank}: {wrong_total} wrong elements").into());
    }
    if let Some(picture) = picture {
        picture.write(plan, n, &format!("CPU memory on {}", oxccl_bootstrap::host_name()), mpi.is_some().then_some("MPI"))?;
    }
    Ok(())
}

impl Plan {
    fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Collective(c) => c.name(),
            Kind::Group(g) => g.name(),
        }
    }
}

/// nccl-tests' column heads: out-of-place and in-place, then a baseline's (its title and
/// two head lines) if there is one.
fn print_columns(baseline: Option<[&str; 3]>) {
    let [title, head, units] = baseline.unwrap_or(["", "", ""]);
    println!("#                                                              out-of-place                       in-place          {title}");
    println!("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong {head}");
    println!("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)        {units}");
}

/// One placement's columns of a row of `size` bytes: time, algbw, busbw (× `factor`) and
/// the wrong-elements text, or N/A throughout.
fn columns(size: usize, factor: f64, measured: Option<(f64, String)>) -> String {
    match measured {
        Some((seconds, wrong)) => {
            let algbw = size as f64 / seconds / 1e9;
            format!("{:>8} {:>7.2} {:>7.2} {:>6}", format_time(seconds), algbw, algbw * factor, wrong)
        }
        None => format!("{:>8} {:>7} {:>7} {:>6}", "N/A", "N/A", "N/A", "N/A"),
    }
}

/// Whether a collective gets an in-place column: those NCCL defines in place, and
/// all_to_all on one buffer, as nccl-tests times it.
fn measured_in_place(c: Collective) -> bool {
    c.has_in_place() || c == Collective::AllToAll
}

/// The ratio column: oxccl's busbw over the baseline's for a row timed at `ours` and
/// `theirs` seconds, which is their times' inverse ratio (the same bytes and factor), and
/// defined for a row of 0 bytes too, where both bandwidths are 0.
fn busbw_ratio(ours: f64, theirs: f64) -> f64 {
    theirs / ours
}

/// The row after one of `bytes`: `factor` times as large, at most `max`; after a row of 0
/// bytes, 1 (multiplying 0 would repeat it forever).
fn next_size(bytes: usize, factor: usize, max: usize) -> usize {
    bytes.saturating_mul(factor).max(1).min(max)
}

/// nccl-tests prints times in microseconds with 2 decimals, fewer when large.
fn format_time(seconds: f64) -> String {
    let us = seconds * 1e6;
    if us >= 1e5 {
        format!("{us:.0}")
    } else if us >= 1e4 {
        format!("{us:.1}")
    } else {
        format!("{us:.2}")
    }
}

/// The largest of every rank's `seconds` (an all_reduce max on the communicator itself).
fn slowest(comm: &Communicator, seconds: f64) -> Result<f64, String> {
    let mut t = [seconds];
    comm.all_reduce_in_place(&mut t, ReduceOp::Max).map_err(|e| e.to_string())?;
    Ok(t[0])
}

/// Times `warmup` + `iters` calls of one row, then (with -c 1) checks a separate call.
fn measure(plan: &Plan, comm: &Communicator, count: usize, in_place: bool) -> Result<Measured, Box<dyn std::error::Error>> {
    let (n, rank) = (comm.nranks(), comm.rank());
    let es = plan.dtype.size();
    let root = plan.args.root;
    // Buffers as large as any rank's need, holding arbitrary (finite) values.
    let elements = match plan.kind {
        Kind::Collective(c) => {
            let (s, r) = c.buffer_counts(count, n, root, root);
            s.max(r).max(count * n)
        }
        Kind::Group(g) => count * g.blocks(n),
    };
    let fill = check::encode(plan.dtype, 1.0);
    let mut send: Vec<u8> = fill.iter().copied().cycle().take(elements * es).collect();
    let mut recv = send.clone();
    let blocking = plan.args.blocking == 1;
    let launch = |send: &mut Vec<u8>, recv: &mut Vec<u8>| -> oxccl_runtime::Result<Option<oxccl_runtime::Work>> {
        match plan.kind {
            Kind::Collective(c) => {
                let (send_ptr, recv_ptr): (*const u8, *mut u8) = if in_place {
                    let base = recv.as_mut_ptr();
                    let (s_off, r_off) = (c.in_place_send_offset(count, rank, root).unwrap_or(0), c.in_place_recv_offset(count, rank, root).unwrap_or(0));
                    // SAFETY: offsets are within the buffers, sized for every rank's need.
                    unsafe { (base.add(s_off * es), base.add(r_off * es)) }
                } else {
                    (send.as_ptr(), recv.as_mut_ptr())
                };
                // SAFETY: the buffers outlive the work (waited for before they are touched).
                unsafe {
                    if blocking {
                        comm.run_raw(c, send_ptr, recv_ptr, count, plan.dtype, plan.op, root).map(|()| None)
                    } else {
                        comm.enqueue_collective(c, send_ptr, recv_ptr, count, plan.dtype, plan.op, root).map(Some)
                    }
                }
            }
            Kind::Group(group) => {
                let mut g = comm.group();
                let bytes = count * es;
                // SAFETY: as above; every block lies in the buffers (sized for the group).
                unsafe {
                    for (sends, peer, block) in group.transfers(rank, n) {
                        if sends {
                            g.send_raw(send.as_ptr().add(block * bytes), bytes, peer)?;
                        } else {
                            g.recv_raw(recv.as_mut_ptr().add(block * bytes), bytes, peer)?;
                        }
                    }
                    if blocking {
                        g.end().map(|()| None)
                    } else {
                        g.launch_async().map(Some)
                    }
                }
            }
        }
    };
    for _ in 0..plan.args.warmup {
        if let Some(work) = launch(&mut send, &mut recv)? {
            work.wait()?;
        }
    }
    slowest(comm, 0.0)?; // line the ranks up
    let start = Instant::now();
    for _ in 0..plan.args.iters {
        launch(&mut send, &mut recv)?;
    }
    comm.synchronize()?;
    let seconds = slowest(comm, start.elapsed().as_secs_f64() / plan.args.iters as f64)?;
    let wrong = if plan.args.check == 1 { check_row(plan, comm, count, in_place)? } else { 0 };
    Ok(Measured { seconds, wrong })
}

/// Wrong elements of one checked call on fresh buffers.
fn check_row(plan: &Plan, comm: &Communicator, count: usize, in_place: bool) -> Result<usize, Box<dyn std::error::Error>> {
    let (n, rank) = (comm.nranks(), comm.rank());
    match plan.kind {
        Kind::Collective(collective) => {
            let case = Case { collective, dtype: plan.dtype, op: plan.op, count, root: plan.args.root, in_place };
            Ok(check::run_case(comm, &case)?.map_or(0, |m| {
                eprintln!("rank {rank}: {case}: {m}");
                m.wrong
            }))
        }
        Kind::Group(group) => {
            let (es, bytes) = (plan.dtype.size(), count * plan.dtype.size());
            if bytes == 0 {
                return Ok(0);
            }
            let out = group.send_image(rank, n, bytes);
            let mut got = vec![0xA5u8; out.len()];
            let mut g = comm.group();
            let mut receives: Vec<Option<&mut [u8]>> = got.chunks_mut(bytes).map(Some).collect();
            for (sends, peer, block) in group.transfers(rank, n) {
                if sends {
                    g.send(&out[block * bytes..(block + 1) * bytes], peer)?;
                } else {
                    g.recv(receives[block].take().expect("one receive a block"), peer)?;
                }
            }
            g.end()?;
            Ok(group.wrong_elements(rank, n, bytes, es, &got))
        }
    }
}

#[cfg(feature = "mpi")]
mod baseline {
    //! The same collectives through MPI (rsmpi), out of place, on typed buffers.
    use mpi::collective::{CommunicatorCollectives, Root, SystemOperation};
    use mpi::datatype::Equivalence;
    use mpi::point_to_point as p2p;
    use mpi::topology::{Communicator as _, SimpleCommunicator};

    use super::*;

    pub fn run(plan: &Plan, config: &Config) -> Result<(), Box<dyn std::error::Error>> {
        let universe = mpi::initialize().ok_or("MPI is initialised already")?;
        let world = universe.world();
        let comm = oxccl_runtime::Communicator::from_mpi(&world, config)?;
        let mut mpi_row = |count: usize| -> Result<f64, String> {
            match plan.dtype {
                DataType::Int8 => time::<i8>(plan, &world, count),
                DataType::Uint8 => time::<u8>(plan, &world, count),
                DataType::Int32 => time::<i32>(plan, &world, count),
                DataType::Uint32 => time::<u32>(plan, &world, count),
                DataType::Int64 => time::<i64>(plan, &world, count),
                DataType::Uint64 => time::<u64>(plan, &world, count),
                DataType::Float32 => time::<f32>(plan, &world, count),
                DataType::Float64 => time::<f64>(plan, &world, count),
                other => Err(format!("MPI has no {} datatype: use another -d with --baseline mpi", other.name())),
            }
        };
        table(plan, &comm, Some(&mut mpi_row))
    }

    fn system_op(op: ReduceOp) -> Result<SystemOperation, String> {
        Ok(match op {
            ReduceOp::Sum => SystemOperation::sum(),
            ReduceOp::Prod => SystemOperation::product(),
            ReduceOp::Max => SystemOperation::max(),
            ReduceOp::Min => SystemOperation::min(),
            other => return Err(format!("MPI has no {} reduction: use sum, prod, max or min with --baseline mpi", other.name())),
        })
    }

    /// Seconds per call of the collective through MPI (this rank's mean).
    fn time<T: Equivalence + Copy + Default>(plan: &Plan, world: &SimpleCommunicator, count: usize) -> Result<f64, String> {
        let n = world.size() as usize;
        let rank = world.rank() as usize;
        let root_rank = plan.args.root;
        let root = world.process_at_rank(root_rank as i32);
        let op = if plan.kind.reduces() { Some(system_op(plan.op)?) } else { None };
        let send = vec![T::default(); count * n];
        let mut recv = vec![T::default(); count * n];
        let mut call = || match plan.kind {
            Kind::Collective(Collective::AllReduce) => world.all_reduce_into(&send[..count], &mut recv[..count], op.unwrap()),
            Kind::Collective(Collective::Broadcast) => root.broadcast_into(&mut recv[..count]),
            Kind::Collective(Collective::Reduce) if rank == root_rank => root.reduce_into_root(&send[..count], &mut recv[..count], op.unwrap()),
            Kind::Collective(Collective::Reduce) => root.reduce_into(&send[..count], op.unwrap()),
            Kind::Collective(Collective::AllGather) => world.all_gather_into(&send[..count], &mut recv[..count * n]),
            Kind::Collective(Collective::ReduceScatter) => world.reduce_scatter_block_into(&send[..count * n], &mut recv[..count], op.unwrap()),
            Kind::Collective(Collective::AllToAll) => world.all_to_all_into(&send[..count * n], &mut recv[..count * n]),
            Kind::Collective(Collective::Gather) if rank == root_rank => root.gather_into_root(&send[..count], &mut recv[..count * n]),
            Kind::Collective(Collective::Gather) => root.gather_into(&send[..count]),
            Kind::Collective(Collective::Scatter) if rank == root_rank => root.scatter_into_root(&send[..count * n], &mut recv[..count]),
            Kind::Collective(Collective::Scatter) => root.scatter_into(&mut recv[..count]),
            Kind::Group(Group::Ring) => {
                let next = world.process_at_rank(((rank + 1) % n) as i32);
                let prev = world.process_at_rank(((rank + n - 1) % n) as i32);
                p2p::send_receive_into(&send[..count], &next, &mut recv[..count], &prev);
            }
            Kind::Group(Group::AllPeers) => world.all_to_all_into(&send[..count * n], &mut recv[..count * n]),
        };
        for _ in 0..plan.args.warmup {
            call();
        }
        world.barrier();
        let start = Instant::now();
        for _ in 0..plan.args.iters {
            call();
        }
        Ok(start.elapsed().as_secs_f64() / plan.args.iters as f64)
    }
}

#[cfg(not(feature = "mpi"))]
mod baseline {
    use super::*;

    pub fn run(_plan: &Plan, _config: &Config) -> Result<(), Box<dyn std::error::Error>> {
        Err("this build has no MPI support (the bench crate's `mpi` feature is off)".into())
    }
}
