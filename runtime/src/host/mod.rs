//! The host backend: collectives and send/recv on host memory. A validated call becomes a
//! [`Task`] on the communicator's host stream ([`stream`]), which plans it (the schedule
//! for its shape, cached with its connections), connects what the plan uses ([`conns`]:
//! shared memory within a host, the network through the proxy engine across hosts) and
//! walks its steps with CPU copies and reductions ([`exec`]).

pub(crate) mod conns;
pub(crate) mod exec;
pub(crate) mod stream;
pub(crate) mod task;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use oxccl_kernels::{DataType, ReduceOp};
use oxccl_transports::fifo::{self, Geometry};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use crate::algo::{self, Planned, Shape, Slice, Step};
use crate::call::PlanKey;
use crate::base::Core;
use crate::base::MemoryStats;
use crate::error::{Error, Result};
use crate::log_target;
use crate::proxy::Direction;
use conns::Transports;
use exec::{Buffers, Connections, Lane};
use stream::{HostStream, Work};
use task::{CollectiveTask, PointToPoint, Task};
use oxccl_tuning::plugin::{self, InitInfo, NvlDomains};
use oxccl_tuning::{Constants, HostModel, Model, Request, Selection, Tuner};

/// Slots per connection (NCCL's NCCL_STEPS), for both backends.
pub const SLOTS: usize = 8;

/// Most channels a host collective over the network uses (measured on 2xH200's 32 cores,
/// staged all_reduce: 1.6 GB/s on one channel, 2.5 on two, 2.8 on four, no more on eight).
const NET_CHANNELS: usize = 4;

/// Cached plans per communicator; the cache starts over when full.
const PLAN_CACHE: usize = 256;

/// The host backend of a communicator: its stream, and what the stream's tasks work with.
pub(crate) struct HostBackend {
    // Dropped first: waits for queued work, which holds `exec`.
    stream: HostStream<Task>,
    exec: Arc<Exec>,
}

/// What the stream's tasks work with.
pub(crate) struct Exec {
    core: Arc<Core>,
    tuner: Tuner,
    transports: Transports,
    connections: Mutex<Connections>,
    /// Plans already made and connected, by shape and whether the call is an in-place
    /// all_to_all ([`algo::all_to_all_in_place`]): a repeated collective skips planning,
    /// connection setup and bounds checks.
    plans: Mutex<FxHashMap<(PlanKey, bool), Arc<Prepared>>>,
    /// Where Avg and PreMulSum put each rank's scaled input (reused: no allocation per call
    /// once it has grown to the largest input).
    scratch: Mutex<Vec<u8>>,
    /// The scratch buffer's size, readable while a task holds it.
    scratch_bytes: AtomicU64,
    /// Bytes of FIFO slots this rank holds for its connections (see [`MemoryStats`]).
    fifo_bytes: AtomicU64,
    /// The scratch size a suspension released, allocated again on resumption.
    released_scratch: Mutex<usize>,
}

/// A plan ready to run: lanes checked against buffers of its sizes, connections made.
struct Prepared {
    /// Whether the proxy may post a link's receives together
    /// ([`algo::Planned::sends_independently`] of the tuner's choice for the key).
    independent: bool,
    lanes: Vec<Lane>,
    /// Messages each network link carries per run.
    net_expected: Vec<(algo::Link, Direction, u64)>,
}

impl Prepared {
    /// Heap bytes the plan holds.
    fn bytes(&self) -> u64 {
        let steps: usize = self.lanes.iter().map(|l| l.steps.capacity() * std::mem::size_of::<(Step, usize)>()).sum();
        (steps + self.lanes.capacity() * std::mem::size_of::<Lane>() + self.net_expected.capacity() * std::mem::size_of::<(algo::Link, Direction, u64)>()) as u64
    }
}

impl HostBackend {
    /// The host backend of `core`'s communicator: its stream thread starts here; nothing
    /// waits on a peer.
    pub fn new(core: Arc<Core>) -> Result<HostBackend> {
        let config = &core.config;
        static CLEANED: std::sync::Once = std::sync::Once::new();
        CLEANED.call_once(|| {
            let removed = fifo::cleanup_stale();
            if removed > 0 {
                tracing::info!(target: log_target::SHM, "removed {removed} stale shared-memory segments");
            }
        });
        let slot_bytes = (config.buffsize / SLOTS).max(4096).next_multiple_of(64);
        let machine = core.same_machine.iter().filter(|&&same| same).count();
        let transports = Transports::new(core.same_host.clone(), machine, !config.shm_disable, Geometry { slots: SLOTS, slot_bytes });
        static ROOMY: std::sync::Once = std::sync::Once::new();
        if let Some(warning) = transports.one_core_warning() {
            ROOMY.call_once(|| tracing::warn!(target: log_target::NET, "rank {}: {warning}", core.rank));
        }
        let tuner = host_tuner(&core, &transports)?;
        let exec = Arc::new(Exec {
            core: core.clone(),
            tuner,
            transports,
            connections: Mutex::new(Connections::default()),
            plans: Mutex::new(FxHashMap::default()),
            scratch: Mutex::new(Vec::new()),
            scratch_bytes: AtomicU64::new(0),
            fifo_bytes: AtomicU64::new(0),
            released_scratch: Mutex::new(0),
        });
        let runner = exec.clone();
        let stream = HostStream::new(&core.rank.to_string(), core.abort.clone(), move |task| runner.run(task))?;
        Ok(HostBackend { stream, exec })
    }

    /// The tuner's choice for a call (what [`Exec::prepared`] plans with).
    pub fn choice(&self, collective: algo::Collective, count: usize, esize: usize) -> Result<oxccl_tuning::Choice> {
        self.exec.choose(&PlanKey { collective, count, esize, root: 0 })
    }

    /// Queues `task`; its handle is returned at once.
    pub fn submit(&self, task: Task) -> Result<Work> {
        self.stream.submit(task)
    }

    /// Runs `task` in stream order and waits for it (on this thread when the stream is idle).
    pub fn run_now(&self, task: Task) -> Result<()> {
        self.stream.run_inline(task)
    }

    /// Waits for every task queued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()
    }

    /// The stream's sticky error, if a task failed.
    pub fn error(&self) -> Option<Error> {
        self.stream.error()
    }

    /// Wakes waiters on the stream so that they see the abort flag.
    pub fn wake(&self) {
        self.stream.wake()
    }

    /// Tells the ranks of this host relaying this rank's sends that it is going, without
    /// waiting for anyone (a communicator dropped in error).
    pub fn part_in_error(&self) {
        let _ = crate::pxn::relay::part(&self.exec.core, false);
    }

    /// Waits for queued work (a timeout once none of it completes for the collective
    /// timeout), then for every message this rank sent to be taken by its receiver's
    /// transport (see [`Communicator::finalize`](crate::Communicator::finalize)).
    pub fn finalize(&self) -> Result<()> {
        self.stream.synchronize_within(self.exec.core.config.coll_timeout)?;
        self.exec.flush()?;
        // PXN: relayed sends are flushed into the relaying rank's proxy, which must not go
        // before they are sent.
        crate::pxn::relay::part(&self.exec.core, true)
    }

    /// Waits for queued work; with `release_memory`, frees what is made again on demand
    /// (the scratch buffer, remembering its size, and the plans).
    pub fn suspend(&self, release_memory: bool) {
        // Work queued before runs to its end (its failure stays its own), and the release
        // waits for the task running (which holds the connections). A call racing the
        // suspension on another thread may run and re-create what it needs: memory
        // re-created on demand, never a wrong result.
        let _ = self.stream.synchronize();
        if release_memory {
            self.exec.release_memory();
        }
    }

    /// Allocates again the scratch a suspension released, at its former size.
    pub fn resume(&self) -> Result<()> {
        let exec = &self.exec;
        let _connections = exec.connections.lock();
        let released = std::mem::take(&mut *exec.released_scratch.lock());
        if released > 0 {
            let mut scratch = exec.scratch.lock();
            scratch.try_reserve_exact(released).map_err(|e| Error::Internal(format!("re-allocating {released} bytes of scratch on resume: {e}")))?;
            scratch.resize(released, 0);
            exec.scratch_bytes.store(released as u64, Ordering::Release);
        }
        Ok(())
    }

    /// What the backend's memory holds now (never waits on running work).
    pub fn memory_stats(&self) -> MemoryStats {
        let exec = &self.exec;
        let plans: u64 = exec.plans.lock().values().map(|p| p.bytes()).sum();
        MemoryStats {
            releasable: exec.scratch_bytes.load(Ordering::Acquire) + plans,
            persistent: exec.fifo_bytes.load(Ordering::Acquire),
            suspended: exec.core.suspended.load(Ordering::Acquire),
        }
    }
}

impl Exec {
    fn run(&self, task: Task) -> Result<()> {
        let mut connections = self.connections.lock();
        match task {
            Task::Collective(c) => self.run_collective(&c, &mut connections),
            Task::Group { p2p, collectives } => {
                if !p2p.is_empty() {
                    self.run_p2p(&p2p, &mut connections)?;
                }
                for c in &collectives {
                    self.run_collective(c, &mut connections)?;
                }
                Ok(())
            }
        }
    }

    /// Waits until every sending FIFO is empty: all posted slots taken by the receiver
    /// (shared memory) or sent by the proxy (network).
    fn flush(&self) -> Result<()> {
        let timeout = self.core.config.coll_timeout;
        let deadline = Instant::now() + timeout;
        let mut connections = self.connections.lock();
        for (link, sender) in connections.senders.iter_mut() {
            let mut spins = 0u32;
            while !sender.drained() {
                self.core.health()?;
                if Instant::now() >= deadline {
                    return Err(Error::Timeout { phase: format!("flushing the messages to rank {} (channel {})", link.peer, link.channel), waited: timeout });
                }
                spins += 1;
                if spins < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
        }
        Ok(())
    }

    /// Frees the scratch buffer (remembering its size for the resumption) and the plans,
    /// once no task runs (a task holds the connections throughout).
    fn release_memory(&self) {
        let _connections = self.connections.lock();
        let mut scratch = self.scratch.lock();
        *self.released_scratch.lock() += scratch.len();
        *scratch = Vec::new();
        self.scratch_bytes.store(0, Ordering::Release);
        self.plans.lock().clear();
    }

    /// Connects every link `lanes` use, and counts the FIFO bytes this rank then holds:
    /// every receiving end, and the sending ends over the network (a shared-memory sending
    /// end maps its peer's FIFO).
    fn connect(&self, lanes: &[Lane], connections: &mut Connections) -> Result<()> {
        let result = conns::ensure(lanes, connections, &self.core.boot, &self.transports, &self.core.net, &self.core.rails);
        let geometry = self.transports.geometry;
        let fifos = connections.receivers.len() + connections.senders.keys().filter(|l| !self.transports.shared_memory(l.peer)).count();
        self.fifo_bytes.store((fifos * geometry.slots * geometry.slot_bytes) as u64, Ordering::Release);
        result
    }

    /// Messages each network link of `lanes` carries.
    fn net_expected(&self, lanes: &[Lane]) -> Vec<(algo::Link, Direction, u64)> {
        let net = &self.core.net;
        let mut expected: FxHashMap<(algo::Link, Direction), u64> = FxHashMap::default();
        for (step, _) in lanes.iter().flat_map(|l| &l.steps) {
            let ends = [(step.receives(), Direction::Recv), (step.sends(), Direction::Send)];
            for (link, direction) in ends.into_iter().filter_map(|(l, d)| l.filter(|l| net.is_net(l, d)).map(|l| (l, d))) {
                *expected.entry((link, direction)).or_default() += 1;
            }
        }
        expected.into_iter().map(|((link, direction), n)| (link, direction, n)).collect()
    }

    /// Runs lanes whose connections exist; `independent`: every message is sent without
    /// waiting for its receiver (point-to-point, direct exchange), so the proxy may post
    /// receives together.
    #[allow(clippy::too_many_arguments)]
    fn execute(&self, lanes: &[Lane], net_expected: &[(algo::Link, Direction, u64)], buffers: &[Buffers], dtype: DataType, op: ReduceOp, independent: bool, checked: bool, connections: &mut Connections) -> Result<()> {
        let core = &self.core;
        for &(link, direction, n) in net_expected {
            core.net.announce(link, direction, n, independent, false);
        }
        let health = || core.health();
        let departed = || core.boot.departed().into_iter().map(|r| r as usize).map(|r| (r, if self.transports.shared_memory(r) { exec::LEFT_GRACE } else { exec::NET_LEFT_GRACE })).collect();
        let help_proxy = !net_expected.is_empty() && !self.transports.oversubscribed();
        let cx = exec::Context { dtype, combine: op.combine(), timeout: core.config.coll_timeout, health: &health, departed: &departed, help_proxy };
        let result = exec::run(lanes, buffers, connections, &cx, checked);
        if let Err(Error::PeerFailed { rank, reason }) = &result {
            // A peer that left while this rank waited for it: the others waiting (maybe
            // on this rank) learn it too, as of a death.
            if core.boot.departed().contains(rank) {
                core.announce_failed(*rank, reason);
            }
        }
        result
    }

    /// The plan for `key`, its algorithm chosen, made, connected and checked on first use;
    /// with `all_to_all_in_place` (send and recv one buffer), lanes that send each chunk
    /// before they receive over it.
    fn prepared(&self, key: PlanKey, all_to_all_in_place: bool, connections: &mut Connections) -> Result<Arc<Prepared>> {
        if let Some(p) = self.plans.lock().get(&(key, all_to_all_in_place)) {
            return Ok(p.clone());
        }
        let nranks = self.core.nranks;
        let choice = self.choose(&key)?;
        let algorithm = choice.algorithm;
        // A tuner plugin's channel count stands, within NCCL_MAX_NCHANNELS.
        let channels = choice.channels.map_or_else(|| self.channels(&key, algorithm), |n| n.clamp(1, self.core.config.max_channels().max(1)));
        if self.core.rank == 0 {
            // NCCL's line, so that a run's choices can be compared with NCCL's.
            tracing::info!(target: log_target::TUNING, "{}: {} Bytes -> Algo {} proto {} channel{{Lo..Hi}}={{0..{}}}", key.collective.nccl_name(), key.count * key.esize, algorithm.nccl_name(), choice.protocol.nccl_name(), channels - 1);
        }
        let shape = Shape { collective: key.collective, count: key.count, nranks, root: key.root, chunk: (self.transports.geometry.slot_bytes / key.esize).max(1), channels, per_host: self.core.rails.ranks_per_host_block() };
        let lanes = algo::plan_call(shape, algorithm, self.core.rank, all_to_all_in_place).map_err(|e| Error::invalid(e.to_string()))?;
        let lanes: Vec<Lane> = lanes.into_iter().map(|steps| Lane { steps: steps.into_iter().map(|s| (s, 0)).collect() }).collect();
        self.connect(&lanes, connections)?;
        let (send_count, recv_count) = key.collective.buffer_counts(key.count, nranks, self.core.rank, key.root);
        let sizes = Buffers { send: std::ptr::null(), send_bytes: send_count * key.esize, recv: std::ptr::null_mut(), recv_bytes: recv_count * key.esize };
        exec::check_bounds(&lanes, &[sizes], connections, key.esize)?;
        let independent = algorithm.sends_independently(key.collective, nranks, all_to_all_in_place);
        let prepared = Arc::new(Prepared { independent, net_expected: self.net_expected(&lanes), lanes });
        let mut plans = self.plans.lock();
        if plans.len() >= PLAN_CACHE {
            plans.clear();
        }
        plans.insert((key, all_to_all_in_place), prepared.clone());
        Ok(prepared)
    }

    /// The tuner's choice for `key` (NCCL's bytes for the call: the larger buffer).
    fn choose(&self, key: &PlanKey) -> Result<oxccl_tuning::Choice> {
        let request = Request::new(key.collective, key.collective.tuning_bytes(key.count, key.esize, self.core.nranks));
        self.tuner.choose(&request).map_err(|e| Error::invalid(e.to_string()))
    }

    /// Channels a ring or tree splits its data over. With network links, one per two FIFO
    /// slots of data up to [`NET_CHANNELS`] (at most NCCL_MAX_NCHANNELS): each channel has
    /// its own connections, dealt to the proxy threads in turn, so several sockets move
    /// data at once (one loopback TCP stream is what held the staged GPU path to half of
    /// NCCL's socket transport, docs/PERFORMANCE.md). Otherwise one: this rank's one
    /// executor thread copies every byte in shared memory however the data is split.
    fn channels(&self, key: &PlanKey, algorithm: algo::Algorithm) -> usize {
        if !self.transports.any_net() || !matches!(algorithm, algo::Algorithm::Ring | algo::Algorithm::Tree) {
            return 1;
        }
        let slots = key.count * key.esize / self.transports.geometry.slot_bytes;
        (slots / 2).clamp(1, NET_CHANNELS).min(self.core.config.max_channels().max(1))
    }

    fn run_collective(&self, task: &CollectiveTask, connections: &mut Connections) -> Result<()> {
        if task.count == 0 {
            return Ok(());
        }
        let nranks = self.core.nranks;
        let key = PlanKey { collective: task.collective, count: task.count, esize: task.dtype.size(), root: task.root };
        let in_place = task.collective == algo::Collective::AllToAll && std::ptr::eq(task.buffers.send, task.buffers.recv);
        let prepared = self.prepared(key, in_place, connections)?;
        let mut buffers = task.buffers;
        // Avg of floats and PreMulSum scale each rank's input once, before the reduction.
        let mut scratch = self.scratch.lock();
        if let Some(factor) = task.collective.reduces().then(|| task.op.input_scale(task.dtype, nranks)).flatten() {
            if scratch.len() < buffers.send_bytes {
                scratch.resize(buffers.send_bytes, 0);
                self.scratch_bytes.store(scratch.len() as u64, Ordering::Release);
            }
            // SAFETY: the send buffer is valid for send_bytes (enqueue's contract).
            let input = unsafe { std::slice::from_raw_parts(buffers.send, buffers.send_bytes) };
            oxccl_kernels::premultiply(task.dtype, oxccl_kernels::Scalar::F64(factor), &mut scratch[..buffers.send_bytes], input)?;
            buffers.send = scratch.as_ptr();
        }
        self.execute(&prepared.lanes, &prepared.net_expected, &[buffers], task.dtype, task.op, prepared.independent, true, connections)?;
        drop(scratch);
        if task.collective.reduces() && task.op.needs_final_division(task.dtype) && buffers.recv_bytes > 0 {
            // SAFETY: the recv buffer is valid for recv_bytes and the operation is done.
            let out = unsafe { std::slice::from_raw_parts_mut(buffers.recv, buffers.recv_bytes) };
            oxccl_kernels::finalize_avg(task.dtype, nranks, out)?;
        }
        Ok(())
    }

    fn run_p2p(&self, ops: &[PointToPoint], connections: &mut Connections) -> Result<()> {
        let rank = self.core.rank;
        // Sends to oneself pair with receives from oneself, in order.
        let own = |send: bool| ops.iter().filter(move |o| o.send == send && o.peer == rank);
        crate::call::check_own_transfers(own(true).map(|o| o.bytes), own(false).map(|o| o.bytes))?;
        for (s, r) in own(true).zip(own(false)) {
            // SAFETY: both buffers are valid for `bytes` (enqueue's contract).
            unsafe { std::ptr::copy(s.buffers.send, r.buffers.recv, s.bytes) };
        }
        let chunk = self.transports.geometry.slot_bytes;
        let mut lanes: HashMap<(usize, bool), Lane> = HashMap::new();
        let mut buffers = Vec::new();
        for op in ops.iter().filter(|o| o.peer != rank) {
            let index = buffers.len();
            buffers.push(op.buffers);
            let link = conns::p2p_link(op.peer);
            let lane = lanes.entry((op.peer, op.send)).or_insert_with(|| Lane { steps: Vec::new() });
            for offset in (0..op.bytes).step_by(chunk) {
                let count = chunk.min(op.bytes - offset);
                let step = if op.send { Step::Send { to: link, src: Slice::send(offset, count) } } else { Step::Recv { from: link, dst: Slice::recv(offset, count) } };
                lane.steps.push((step, index));
            }
        }
        let lanes: Vec<Lane> = lanes.into_values().filter(|l| !l.steps.is_empty()).collect();
        self.connect(&lanes, connections)?;
        let net_expected = self.net_expected(&lanes);
        self.execute(&lanes, &net_expected, &buffers, DataType::Uint8, ReduceOp::Sum, true, false, connections)
    }
}

/// The host path's tuner: NCCL_ALGO/NCCL_PROTO, the host executor's measured model, and the
/// tuner plugin NCCL_TUNER_PLUGIN names.
fn host_tuner(core: &Core, transports: &Transports) -> Result<Tuner> {
    let config = &core.config;
    let selection = Selection::parse(config.algo.as_deref(), config.proto.as_deref()).map_err(|e| Error::invalid(e.to_string()))?;
    let model = HostModel { nranks: core.nranks, net: transports.any_net(), oversubscribed: transports.oversubscribed(), per_host: core.rails.ranks_per_host_block() };
    Ok(Tuner::new(selection, Model::Host(model), HostModel::runs, load_tuner_plugin(core)?))
}

/// The tuner plugin NCCL_TUNER_PLUGIN names (unset: `libnccl-tuner.so` if there is one),
/// its `init` run for this communicator: it sees the ranks and hosts, hosts counted as the
/// ranks over those sharing this rank's host.
pub(crate) fn load_tuner_plugin(core: &Core) -> Result<Option<Box<dyn oxccl_tuning::TunerPlugin>>> {
    let local = core.same_host.iter().filter(|&&s| s).count().max(1);
    let nnodes = core.nranks.div_ceil(local);
    let info = InitInfo { comm_id: 0, nranks: core.nranks, nnodes, nvl_domains: NvlDomains { count: nnodes as i32, min_ranks: local as i32, max_ranks: local as i32 } };
    plugin::load(core.config.tuner_plugin.as_deref(), &info, &mut Constants::default()).map_err(|e| Error::invalid(e.to_string()))
}
