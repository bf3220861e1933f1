//! The executor kernel's timeline (`OXCCL_KERNEL_TRACE`), for finding where a GPU call's
//! time goes inside the kernel: each executor launch gets a record in mapped host memory
//! (`DevArgs::stamps`) where thread 0 of its first lanes writes `%globaltimer` at the lane's
//! start and end and at four moments of each of its first steps
//! (`oxccl_kernels::device::timeline`). This module owns those records — the last
//! [`LAUNCHES`] launches' in a ring, with what each launch was — and writes them as text
//! when the communicator goes: `<path>.pid<pid>.gpu<n>.rank<r>.txt`, every launch's stamps
//! in ns from its first, then per kind of launch the median of each step's wait, move and
//! publish. A launch still running when its record is reused (more than [`LAUNCHES`] in
//! flight) can leave a mix of two launches' stamps; stamps of moments never reached are 0
//! and print as `-`.
//!
//! To line the kernel's clock up with the proxy's timeline (`proxy::trace`, the host's clock),
//! a thread of the timeline's own (`oxccl-clock`, spinning on a core while the timeline
//! lives) keeps a mapped host word at the host's clock, ns since the Unix epoch on the
//! proxy trace's scale; lane 0 of each launch reads it once after its end, between two
//! readings of `%globaltimer`, and the file prints the three. The host's clock minus the
//! middle of the two readings is the offset between the clocks, to within half their
//! difference (one read across PCIe, about a microsecond).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use oxccl_kernels::device::timeline::{CLOCK, CLOCK_WORDS, LANES, LANE_WORDS, RECORD_WORDS, STAMPS, STEPS};
use parking_lot::Mutex;

use super::driver::MappedHost;
use super::encode::End;
use crate::algo::Step;
use crate::error::{Error, Result};

/// Launches whose records are kept (the ring's length).
pub(super) const LAUNCHES: usize = 64;

/// GPU communicators of this process so far, for the files' names.
static COMMUNICATORS: AtomicU64 = AtomicU64::new(0);

/// One communicator's kernel timeline on one rank.
pub(super) struct KernelTimeline {
    file: PathBuf,
    rank: usize,
    records: MappedHost,
    launches: Mutex<Launches>,
    clock: HostClock,
}

/// A mapped host word kept at the host's clock by a thread of its own, until dropped.
struct HostClock {
    word: MappedHost,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HostClock {
    fn start() -> Result<HostClock> {
        let word = MappedHost::zeroed(2)?;
        let stop = Arc::new(AtomicBool::new(false));
        let at = word.host() as usize;
        let thread = std::thread::Builder::new()
            .name("oxccl-clock".into())
            .spawn({
                let stop = stop.clone();
                move || {
                    while !stop.load(Ordering::Relaxed) {
                        for _ in 0..256 {
                            // SAFETY: the word outlives the thread (joined on drop, before the
                            // memory goes); the GPU only reads it.
                            unsafe { std::ptr::write_volatile(at as *mut u64, crate::proxy::trace::epoch_nanos(Instant::now())) };
                        }
                    }
                }
            })
            .map_err(|e| Error::Internal(format!("starting the kernel timeline's clock thread: {e}")))?;
        Ok(HostClock { word, stop, thread: Some(thread) })
    }
}

impl Drop for HostClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Default)]
struct Launches {
    /// Launches so far.
    count: u64,
    /// The last ones (at most LAUNCHES), oldest first.
    kept: VecDeque<Launch>,
}

/// What one launch was.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Launch {
    /// Its number among the communicator's executor launches.
    pub seq: u64,
    /// The call, e.g. "all_reduce 1048576 B".
    pub what: String,
    /// Its lanes.
    pub lanes: usize,
    /// Steps of each traced lane (the first [`LANES`]).
    pub lane_steps: Vec<u32>,
    /// What the traced lanes' first steps do ([`labels`]; none where not known).
    pub labels: Labels,
}

/// Per traced lane, its first steps' labels: made once per plan, shared by its launches.
pub(super) type Labels = Arc<[Vec<String>]>;

/// What each of the first [`STEPS`] steps of the first [`LANES`] lanes does, e.g.
/// `recv_reduce_send <1 >1 net`: the step's kind, the peer it receives from (`<`) and
/// sends to (`>`), `net` where either end crosses the network (`is_net`); a step the
/// encoder fused with the copy that followed it (`encode::fused`) ends in ` +copy`.
pub(super) fn labels(lanes: &[Vec<Step>], is_net: impl Fn(&End) -> bool) -> Labels {
    let one = |(step, copy): (&Step, Option<crate::algo::Slice>)| {
        let label = label(step, &is_net);
        if copy.is_some() { label + " +copy" } else { label }
    };
    lanes.iter().take(LANES).map(|lane| super::encode::fused(lane).take(STEPS).map(one).collect()).collect()
}

/// One step's label (see [`labels`]).
fn label(step: &Step, is_net: impl Fn(&End) -> bool) -> String {
    let mut label = step.name().to_string();
    let mut net = false;
    for end in step.receives().map(End::Recv).into_iter().chain(step.sends().map(End::Send)) {
        let _ = write!(label, " {}{}", if matches!(end, End::Recv(_)) { '<' } else { '>' }, end.link().peer);
        net |= is_net(&end);
    }
    if net {
        label.push_str(" net");
    }
    label
}

impl KernelTimeline {
    /// The timeline of a communicator of `rank`, written under `path` when dropped; an
    /// error naming the file if it cannot be written.
    pub fn new(path: &str, rank: usize) -> Result<KernelTimeline> {
        let n = COMMUNICATORS.fetch_add(1, Ordering::Relaxed);
        let file = PathBuf::from(format!("{path}.pid{}.gpu{n}.rank{rank}.txt", std::process::id()));
        // Created now, so that a bad path is an error at init rather than at the end.
        std::fs::write(&file, "").map_err(|e| Error::invalid(format!("OXCCL_KERNEL_TRACE={path}: cannot write {}: {e}", file.display())))?;
        let records = MappedHost::zeroed(LAUNCHES * RECORD_WORDS * 2)?;
        Ok(KernelTimeline { file, rank, records, launches: Mutex::default(), clock: HostClock::start()? })
    }

    /// The device address of the host clock word, for the launches' arguments (`DevArgs::clock`).
    pub fn clock(&self) -> u64 {
        self.clock.word.device
    }

    /// The device address of the next launch's record (cleared), and that launch noted as
    /// `what` with `lane_steps` steps per lane, its steps' `labels`.
    pub fn record(&self, what: String, lane_steps: &[u32], labels: &Labels) -> u64 {
        let mut launches = self.launches.lock();
        let slot = (launches.count % LAUNCHES as u64) as usize;
        // SAFETY: the record lies inside the mapped allocation; the launch that used it last
        // has ended unless LAUNCHES launches are in flight (then its stamps mix: said above).
        unsafe { std::ptr::write_bytes(self.words().add(slot * RECORD_WORDS), 0, RECORD_WORDS) };
        if launches.kept.len() == LAUNCHES {
            launches.kept.pop_front();
        }
        let seq = launches.count;
        launches.kept.push_back(Launch { seq, what, lanes: lane_steps.len(), lane_steps: lane_steps.iter().take(LANES).copied().collect(), labels: labels.clone() });
        launches.count += 1;
        self.records.device + (slot * RECORD_WORDS * 8) as u64
    }

    fn words(&self) -> *mut u64 {
        self.records.host().cast::<u64>()
    }

    /// Writes the file (once every launch has ended).
    pub fn write(&self) {
        let launches = self.launches.lock();
        let mut stamps = vec![0u64; LAUNCHES * RECORD_WORDS];
        for (i, word) in stamps.iter_mut().enumerate() {
            // SAFETY: inside the mapped allocation; the GPU wrote it with plain stores.
            *word = unsafe { std::ptr::read_volatile(self.words().add(i)) };
        }
        let kept: Vec<Launch> = launches.kept.iter().cloned().collect();
        let text = format(self.rank, launches.count, &kept, |launch| {
            let slot = (launch.seq % LAUNCHES as u64) as usize;
            &stamps[slot * RECORD_WORDS..(slot + 1) * RECORD_WORDS]
        });
        if let Err(e) = std::fs::write(&self.file, text) {
            tracing::warn!(target: crate::log_target::INIT, "rank {}: could not write the kernel timeline {}: {e}", self.rank, self.file.display());
        }
    }
}

/// The file's text: `launches` (the last `kept` of `count`), each with its record.
pub(super) fn format<'a>(rank: usize, count: u64, kept: &[Launch], record: impl Fn(&Launch) -> &'a [u64]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# oxccl kernel timeline, rank {rank}: the last {} of {count} executor launches; lanes 0-{} and their first {STEPS} steps; ns from the launch's first stamp (%globaltimer; '-': not reached)",
        kept.len(),
        LANES - 1
    );
    let _ = writeln!(out, "# per step: start, waits over (slots full / free), data moved, published");
    let _ = writeln!(out, "# clock: the host's clock (ns since the Unix epoch, the proxy trace's) as lane 0 read it after its end, between two of its own stamps");
    // Per kind of launch: lane 0's waits, moves and publishes (ns) by step, and the steps' labels.
    type Phases<'l> = Vec<(String, Vec<[Vec<u64>; 3]>, &'l [String])>;
    let mut phases: Phases = Vec::new();
    for launch in kept {
        let words = record(launch);
        let origin = (0..LANES).filter_map(|lane| Some(words[lane * LANE_WORDS]).filter(|&t| t > 0)).min().unwrap_or(0);
        let at = |t: u64| if t == 0 { "-".to_string() } else { format!("+{}", t.saturating_sub(origin)) };
        let _ = writeln!(out, "launch {} {}: {} lane(s), started at {origin} ns", launch.seq, launch.what, launch.lanes);
        let clock = &words[CLOCK..CLOCK + CLOCK_WORDS];
        if clock.iter().all(|&t| t > 0) {
            let _ = writeln!(out, "  clock: host {} ns read between {} and {}", clock[1], at(clock[0]), at(clock[2]));
        }
        for (lane, &steps) in launch.lane_steps.iter().enumerate() {
            let lane_words = &words[lane * LANE_WORDS..(lane + 1) * LANE_WORDS];
            let _ = writeln!(out, "  lane {lane}: {steps} step(s), start {}, end {}", at(lane_words[0]), at(lane_words[1]));
            for step in 0..(steps as usize).min(STEPS) {
                let s = &lane_words[2 + step * STAMPS..2 + (step + 1) * STAMPS];
                let label = launch.labels.get(lane).and_then(|l| l.get(step)).map_or(String::new(), |l| format!(" ({l})"));
                let _ = writeln!(out, "    step {step}{label}: {} {} {} {}", at(s[0]), at(s[1]), at(s[2]), at(s[3]));
                if lane == 0 && s.iter().all(|&t| t > 0) {
                    let index = match phases.iter().position(|(what, _, _)| *what == launch.what) {
                        Some(index) => index,
                        None => {
                            phases.push((launch.what.clone(), Vec::new(), launch.labels.first().map_or(&[][..], |l| &l[..])));
                            phases.len() - 1
                        }
                    };
                    let per_step = &mut phases[index].1;
                    if per_step.len() <= step {
                        per_step.resize_with(step + 1, Default::default);
                    }
                    for (phase, (from, to)) in [(s[0], s[1]), (s[1], s[2]), (s[2], s[3])].into_iter().enumerate() {
                        per_step[step][phase].push(to.saturating_sub(from));
                    }
                }
            }
        }
    }
    for (what, per_step, labels) in &mut phases {
        let _ = writeln!(out, "# {what}, lane 0, median ns per step: wait, move, publish (launches)");
        for (step, [wait, moved, publish]) in per_step.iter_mut().enumerate() {
            let label = labels.get(step).map_or(String::new(), |l| format!(" ({l})"));
            let _ = writeln!(out, "#   step {step}{label}: {} {} {} ({})", median(wait), median(moved), median(publish), wait.len());
        }
    }
    out
}

fn median(values: &mut [u64]) -> u64 {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as the kernel writes it: lane 0 with two steps, lane 1 with one (its
    /// publish never reached), the second launch of the same kind a little slower.
    fn record(base: u64, slow: u64) -> Vec<u64> {
        let mut words = vec![0u64; RECORD_WORDS];
        words[0] = base;
        words[1] = base + 900 + slow;
        words[2..6].copy_from_slice(&[base + 10, base + 110, base + 160, base + 170 + slow]);
        words[6..10].copy_from_slice(&[base + 200, base + 500, base + 550, base + 560]);
        words[LANE_WORDS] = base + 5;
        words[LANE_WORDS + 2..LANE_WORDS + 6].copy_from_slice(&[base + 15, base + 115, base + 165, 0]);
        words
    }

    #[test]
    fn launches_print_from_their_first_stamp_and_medians_come_per_kind() {
        let launches = vec![
            Launch { seq: 7, what: "all_reduce 1048576 B".into(), lanes: 3, lane_steps: vec![2, 1], labels: Arc::from(vec![vec!["send >1 net".into(), "recv <1 net".into()]]) },
            Launch { seq: 8, what: "all_reduce 1048576 B".into(), lanes: 3, lane_steps: vec![2, 1], labels: Arc::from(vec![vec!["send >1 net".into(), "recv <1 net".into()]]) },
        ];
        let records = [record(1_000_000, 0), record(2_000_000, 20)];
        let text = format(3, 9, &launches, |launch| &records[(launch.seq - 7) as usize]);
        assert!(text.starts_with("# oxccl kernel timeline, rank 3: the last 2 of 9 executor launches"), "{text}");
        assert!(text.contains("launch 7 all_reduce 1048576 B: 3 lane(s), started at 1000000 ns\n  lane 0: 2 step(s), start +0, end +900\n    step 0 (send >1 net): +10 +110 +160 +170\n    step 1 (recv <1 net): +200 +500 +550 +560\n  lane 1: 1 step(s), start +5, end -\n    step 0: +15 +115 +165 -\n"), "{text}");
        // Lane 2 is past the traced lanes: counted, not printed.
        assert!(!text.contains("lane 2"), "{text}");
        // Medians over the two launches (the upper of two): step 0's publish 10 and 30.
        assert!(text.contains("# all_reduce 1048576 B, lane 0, median ns per step: wait, move, publish (launches)\n#   step 0 (send >1 net): 100 50 30 (2)\n#   step 1 (recv <1 net): 300 50 10 (2)\n"), "{text}");
    }

    #[test]
    fn steps_past_the_traced_ones_are_not_printed() {
        let launch = Launch { seq: 0, what: "all_gather 64 B".into(), lanes: 1, lane_steps: vec![STEPS as u32 + 5], labels: Arc::from(Vec::new()) };
        let words = vec![0u64; RECORD_WORDS];
        let text = format(0, 1, std::slice::from_ref(&launch), |_| &words);
        assert!(text.contains(&format!("    step {}: - - - -\n", STEPS - 1)), "{text}");
        assert!(!text.contains(&format!("step {STEPS}:")), "{text}");
    }

    /// Each step's label names its kind and peers, `net` where an end crosses the network;
    /// only the traced lanes and steps get one.
    #[test]
    fn labels_name_each_steps_kind_peers_and_network() {
        use crate::algo::{Buffer, Link, Slice};
        let slice = Slice { buffer: Buffer::Recv, offset: 0, count: 4 };
        let (from, to) = (Link { peer: 1, channel: 0 }, Link { peer: 2, channel: 0 });
        let lane = vec![Step::Send { to, src: slice }, Step::RecvReduceSend { from, to, local: slice }, Step::Copy { src: slice, dst: slice }];
        let lanes = vec![lane.clone(); LANES + 1];
        // Only the receive end from rank 1 crosses the network.
        let labels = labels(&lanes, |end| *end == End::Recv(from));
        assert_eq!(labels.len(), LANES);
        assert_eq!(labels[0], ["send >2", "recv_reduce_send <1 >2 net", "copy"]);
        let fused = super::labels(&[vec![Step::Send { to, src: slice }, Step::Copy { src: slice, dst: slice }]], |_| true);
        assert_eq!(fused[0], ["send >2 net +copy"]);
        let long = vec![vec![Step::Copy { src: slice, dst: slice }; STEPS + 3]];
        assert_eq!(super::labels(&long, |_| false)[0].len(), STEPS);
    }

    /// scripts/kernel-hops.py over two ranks' kernel timelines (this module's format) and
    /// proxy traces (`proxy::trace`'s) of one message each way a launch: the offset-free sum
    /// of both notices, the Net's part and the kernel's start to its send come out as the
    /// stamps and spans put them, whatever the two clocks' offset; with the launches' clock
    /// readings, each notice apart and the launch's issue to its start too.
    #[test]
    fn kernel_hops_joins_timelines_with_proxy_traces() {
        use crate::proxy::trace::{epoch_nanos, Recorder};
        use std::time::{Duration, Instant};
        let dir = std::env::temp_dir().join(format!("oxccl-kernel-hops-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let launches = 4u64;
        let base = 1_000_000_000u64;
        // The proxies: launch k issued at T_k (the announcement's start), its message seen
        // 4 us after T_k, sent by 5 us, received at the peer by 8 us.
        let t = Instant::now();
        let mut trace_files = Vec::new();
        for rank in 0..2usize {
            let peer = 1 - rank;
            let prefix = dir.join(format!("proxy{rank}"));
            let recorder = Recorder::new(prefix.to_str().unwrap(), 0, rank).unwrap();
            let send = recorder.track(format!("send to rank {peer} channel 0"));
            let recv = recorder.track(format!("receive from rank {peer} channel 0"));
            for k in 0..launches {
                let at = |us: u64| t + Duration::from_micros(k * 100 + us);
                recorder.span(send, "announced", at(0), at(1), k, 1, 0);
                recorder.span(send, "wait for data", at(1), at(4), k, 1, 64);
                recorder.span(send, "isend", at(4), at(4) + Duration::from_nanos(600), k, 1, 64);
                recorder.span(send, "send", at(4), at(5), k, 1, 64);
                recorder.span(recv, "receive", at(0), at(8), k, 1, 64);
            }
            recorder.write().unwrap();
            trace_files.push(dir.join(format!("proxy{rank}.pid{}.comm0.rank{rank}.json", std::process::id())));
        }
        // The kernels: both ranks' launch k start together 3 us after T_k (host clock =
        // kernel clock + `offset`), the send published 400 ns in, the peer's data there
        // 12.4 us in, the end 12.5 us in; lane 0 reads the host's clock 1 us after its end
        // in a read of 1 us.
        let offset = epoch_nanos(t) + 3_000 - base;
        let run = |clock: bool| -> String {
            let mut kernel_files = Vec::new();
            for rank in 0..2usize {
                let peer = 1 - rank;
                let labels: Labels = Arc::from(vec![vec![format!("send >{peer} net"), format!("recv <{peer} net")]]);
                let kept: Vec<Launch> = (0..launches).map(|seq| Launch { seq, what: "all_gather 64 B".into(), lanes: 1, lane_steps: vec![2], labels: labels.clone() }).collect();
                let records: Vec<Vec<u64>> = (0..launches)
                    .map(|k| {
                        let t0 = base + k * 100_000;
                        let mut words = vec![0u64; RECORD_WORDS];
                        words[0] = t0;
                        words[1] = t0 + 12_500;
                        words[2..6].copy_from_slice(&[t0 + 100, t0 + 200, t0 + 300, t0 + 400]);
                        words[6..10].copy_from_slice(&[t0 + 500, t0 + 600, t0 + 12_400, t0 + 12_450]);
                        if clock {
                            words[CLOCK..CLOCK + CLOCK_WORDS].copy_from_slice(&[t0 + 13_500, t0 + 14_000 + offset, t0 + 14_500]);
                        }
                        words
                    })
                    .collect();
                let text = format(rank, launches, &kept, |launch| &records[launch.seq as usize]);
                assert_eq!(text.contains("  clock: host "), clock, "{text}");
                let file = dir.join(format!("kernel{}.rank{rank}.txt", clock as u8));
                std::fs::write(&file, text).unwrap();
                kernel_files.push(file);
            }
            let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/kernel-hops.py");
            let output = std::process::Command::new("python3").arg(&script).args(&kernel_files).args(&trace_files).output().expect("python3 runs");
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            assert!(output.status.success(), "{text}{}", String::from_utf8_lossy(&output.stderr));
            text
        };
        let median = |text: &str, hop: &str| -> f64 {
            let line = text.lines().find(|l| l.starts_with(hop)).unwrap_or_else(|| panic!("no {hop:?} in {text}"));
            let after = line.split("median").nth(1).expect("a median");
            after.split_whitespace().next().unwrap().parse().unwrap()
        };
        for clock in [false, true] {
            let text = run(clock);
            // Both notices = (seen - published) + (peer's data - received) = 0.6 + 7.4 us.
            assert!((median(&text, "both notices") - 8.0).abs() < 0.01, "{text}");
            assert!((median(&text, "Net send done") - 3.0).abs() < 0.01, "{text}");
            assert!((median(&text, "  of which the isend") - 0.6).abs() < 0.01, "{text}");
            assert!((median(&text, "isend returned") - 3.4).abs() < 0.01, "{text}");
            assert!((median(&text, "kernel start -> send published") - 0.4).abs() < 0.01, "{text}");
            assert!((median(&text, "kernel end -> next launch start") - 87.5).abs() < 0.01, "{text}");
            // Every launch of both ranks counted (launch k's message is message k).
            assert!(text.lines().any(|l| l.starts_with("both notices") && l.contains(&format!(" {} ", 2 * launches))), "{text}");
            if clock {
                assert!((median(&text, "published -> proxy saw it ") - 0.6).abs() < 0.01, "{text}");
                assert!((median(&text, "peer's receive done -> peer kernel has it ") - 7.4).abs() < 0.01, "{text}");
                assert!((median(&text, "launch issued -> kernel start") - 3.0).abs() < 0.01, "{text}");
                assert!((median(&text, "clock read across PCIe") - 1.0).abs() < 0.01, "{text}");
            } else {
                assert!(text.contains("published -> proxy saw it (+offset)") && !text.contains("launch issued"), "{text}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
