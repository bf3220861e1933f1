//! `--gpus N`: the table on GPU buffers, one rank per GPU as threads of this process (like
//! nccl-tests' `-g N`), each rank launching on its own stream. With `--baseline nccl` the
//! machine's libnccl.so.2 (dlopen) runs the same collective on the same buffers and
//! streams in the same run, through communicators from ncclCommInitAll.
//!
//! Time is as nccl-tests takes it: the ranks line up, each launches `-n` calls back to
//! back on its stream and waits for it; the slowest rank's mean per call is reported.
//! `-c 1` checks one separate call per row against `oxccl_runtime::check` for rows up to
//! 16 MiB (the host reference is too slow beyond; larger rows say "-").

use std::ffi::c_void;
use std::sync::Barrier;

use oxccl_runtime::gpu::{self, DeviceBuffer, DeviceComm, Stream};

use super::*;

/// Rows above this are timed but not checked.
const CHECK_LIMIT: usize = 16 << 20;

pub fn run(plan: &Plan, config: &Config) -> Result<(), Box<dyn std::error::Error>> {
    let n = plan.args.gpus;
    let visible = gpu::device_count();
    if n > visible {
        return Err(format!("--gpus {n}: this machine shows {visible} GPU(s)").into());
    }
    let Kind::Collective(collective) = plan.kind else {
        return Err("sendrecv on GPUs is not implemented yet (the GPU backend runs collectives)".into());
    };
    if collective.rooted() && plan.args.root >= n {
        return Err(format!("root {} out of range for {n} ranks", plan.args.root).into());
    }
    let devices: Vec<usize> = (0..n).collect();
    let comms = DeviceComm::init_all(&devices, config)?;
    let nccl = match plan.args.baseline.as_deref() {
        Some(_) => Some(nccl::Nccl::open(&devices)?),
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
        collective.name(),
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
        println!("#  rank {} on GPU {}", r.comm.rank(), r.comm.device());
    }
    println!("#");
    print_columns(nccl.is_some().then_some(["  NCCL baseline", "    nccl   nccl  ratio", "    time  busbw   x"]));
    let factor = plan.kind.busbw_factor(n);
    let (mut wrong_total, mut busbw_sum, mut rows) = (0, 0.0, 0);
    let mut bytes = plan.args.min_bytes;
    loop {
        let count = plan.kind.count(bytes, es, n);
        let (s, r) = collective.buffer_counts(count, n, plan.args.root, plan.args.root);
        let size = s.max(r) * es;
        let out_of_place = time(plan, &ranks, count, false, Launcher::Oxccl)?;
        let in_place = if collective.has_in_place() { Some(time(plan, &ranks, count, true, Launcher::Oxccl)?) } else { None };
        let baseline = match &nccl {
            Some(b) => Some(time(plan, &ranks, count, false, Launcher::Nccl(b))?),
            None => None,
        };
        let checked = plan.args.check == 1 && size <= CHECK_LIMIT;
        let wrong_out = if checked { check_row(plan, &ranks, collective, count, false)? } else { 0 };
        let wrong_in = if checked && in_place.is_some() { check_row(plan, &ranks, collective, count, true)? } else { 0 };
        let wrong_text = |w: usize| if checked { w.to_string() } else { "-".into() };
        let cols = |t: Option<f64>, w: usize| columns(size, factor, t.map(|t| (t, wrong_text(w))));
        let base = baseline
            .map(|t| {
                let theirs = size as f64 / t / 1e9 * factor;
                let ours = size as f64 / out_of_place / 1e9 * factor;
                format!(" {:>8} {:>6.2} {:>5.2}", format_time(t), theirs, ours / theirs)
            })
            .unwrap_or_default();
        let root = if collective.rooted() { plan.args.root as i64 } else { -1 };
        let op = if collective.reduces() { plan.op.name() } else { "none" };
        println!("{size:>12} {:>13} {:>9} {op:>7} {root:>7} {} {}{base}", count * if size > count * es { n } else { 1 }, plan.dtype.name(), cols(Some(out_of_place), wrong_out), cols(in_place, wrong_in));
        wrong_total += wrong_out + wrong_in;
        busbw_sum += size as f64 / out_of_place / 1e9 * factor;
        rows += 1;
        if bytes >= plan.args.max_bytes {
            break;
        }
        bytes = bytes.saturating_mul(plan.args.factor).min(plan.args.max_bytes);
    }
    println!("# Out of bounds values : {wrong_total} {}", if wrong_total == 0 { "OK" } else { "FAILED" });
    println!("# Avg bus bandwidth    : {:.4}", busbw_sum / rows as f64);
    println!("#");
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
    Ok(())
}

/// One rank's communicator, stream and buffers.
struct Rank<'a> {
    comm: &'a DeviceComm,
    stream: Stream,
    send: DeviceBuffer,
    recv: DeviceBuffer,
}

#[derive(Clone, Copy)]
enum Launcher<'a> {
    Oxccl,
    Nccl(&'a nccl::Nccl),
}

/// The slowest rank's mean seconds per call.
fn time(plan: &Plan, ranks: &[Rank], count: usize, in_place: bool, launcher: Launcher) -> Result<f64, String> {
    let Kind::Collective(collective) = plan.kind else { unreachable!("checked in run") };
    let n = ranks.len();
    let root = plan.args.root;
    let es = plan.dtype.size() as u64;
    let barrier = Barrier::new(n);
    let times: Vec<Result<f64, String>> = std::thread::scope(|s| {
        let handles: Vec<_> = ranks
            .iter()
            .enumerate()
            .map(|(rank, r)| {
                let barrier = &barrier;
                s.spawn(move || -> Result<f64, String> {
                    r.comm.bind().map_err(|e| e.to_string())?;
                    let (send, recv) = if in_place {
                        let base = r.recv.ptr();
                        (base + collective.in_place_send_offset(count, rank, root).unwrap_or(0) as u64 * es, base + collective.in_place_recv_offset(count, rank, root).unwrap_or(0) as u64 * es)
                    } else {
                        (r.send.ptr(), r.recv.ptr())
                    };
                    let launch = || -> Result<(), String> {
                        match launcher {
                            // SAFETY: the buffers hold the largest row; nothing else uses them
                            // until the stream is synchronized.
                            Launcher::Oxccl => unsafe { r.comm.enqueue(collective, send, recv, count, plan.dtype, plan.op, root, r.stream.raw()) }.map_err(|e| e.to_string()),
                            // SAFETY: as above, on NCCL's communicator of the same GPU.
                            Launcher::Nccl(b) => unsafe { b.launch(rank, collective, send, recv, count, plan.dtype, plan.op, root, r.stream.raw().cast()) },
                        }
                    };
                    for _ in 0..plan.args.warmup {
                        launch()?;
                    }
                    r.comm.wait(&r.stream).map_err(|e| e.to_string())?;
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..plan.args.iters {
                        launch()?;
                    }
                    r.comm.wait(&r.stream).map_err(|e| e.to_string())?;
                    Ok(start.elapsed().as_secs_f64() / plan.args.iters as f64)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("a rank thread panicked".into()))).collect()
    });
    times.into_iter().try_fold(0.0f64, |max, t| Ok(max.max(t?)))
}

/// Wrong elements of one checked call per rank.
fn check_row(plan: &Plan, ranks: &[Rank], collective: Collective, count: usize, in_place: bool) -> Result<usize, String> {
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

        unsafe fn symbol<T>(&self, name: &str) -> Result<Symbol<'_, T>, String> {
            self.lib.get(name.as_bytes()).map_err(|e| format!("libnccl.so.2 lacks {name}: {e}"))
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
        /// Buffers and stream as for `DeviceComm::enqueue`, on the rank's GPU.
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
            let status = match collective {
                Collective::AllReduce => self.symbol::<Reducing>("ncclAllReduce")?(s, r, count, t, op, comm, stream),
                Collective::ReduceScatter => self.symbol::<Reducing>("ncclReduceScatter")?(s, r, count, t, op, comm, stream),
                Collective::Reduce => self.symbol::<ReduceFn>("ncclReduce")?(s, r, count, t, op, root, comm, stream),
                Collective::Broadcast => self.symbol::<Rooted>("ncclBroadcast")?(s, r, count, t, root, comm, stream),
                Collective::Gather => self.symbol::<Rooted>("ncclGather")?(s, r, count, t, root, comm, stream),
                Collective::Scatter => self.symbol::<Rooted>("ncclScatter")?(s, r, count, t, root, comm, stream),
                Collective::AllGather => self.symbol::<Plain>("ncclAllGather")?(s, r, count, t, comm, stream),
                Collective::AllToAll => self.symbol::<Plain>("ncclAlltoAll")?(s, r, count, t, comm, stream),
            };
            self.status(status, collective.name())
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
