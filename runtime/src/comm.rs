//! [`Communicator`]: a set of ranks that run collectives together.
//!
//! Calls validate their arguments on the caller's thread (a caller error leaves the
//! communicator usable), then enqueue work on the communicator's host stream, which runs
//! it in order like a CUDA stream. The typed methods wait for their work; the `unsafe`
//! `enqueue_*` methods return a [`Work`] handle at once. Errors of the work surface on the
//! handle, in [`Communicator::synchronize`] and in [`Communicator::error`].

use std::collections::HashMap;

use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use oxccl_bootstrap::{Bootstrap, Config, UniqueId};
use oxccl_kernels::{DataType, ReduceOp};
use oxccl_transports::fifo;
use oxccl_transports::net::socket::SocketNet;
use parking_lot::Mutex;

use crate::algo::{self, Collective, Shape, Slice, Step};
use crate::conn::{self, Geometry, Transports};
use crate::error::{Error, Result};
use crate::exec::{self, Buffers, Connections, Lane};
use crate::log_target;
use crate::proxy::NetLinks;
use crate::stream::{HostStream, Work};
use crate::task::{CollectiveTask, PointToPoint, Task};
use crate::tune::{CostInput, Tuner};

mod suspend;
pub use suspend::MemoryStats;

/// Slots per connection (NCCL's NCCL_STEPS).
pub const SLOTS: usize = 8;

/// Most channels a host collective over the network uses (measured on 2xH200's 32 cores,
/// staged all_reduce: 1.6 GB/s on one channel, 2.5 on two, 2.8 on four, no more on eight).
const NET_CHANNELS: usize = 4;

/// A communicator. Dropping it waits for its queued work, then closes its connections.
pub struct Communicator {
    // Dropped first: waits for queued work, which holds `exec`.
    stream: HostStream<Task>,
    exec: Arc<Exec>,
}

/// What the stream's jobs work with (and background creations from this communicator).
pub(crate) struct Exec {
    boot: Bootstrap,
    rank: usize,
    nranks: usize,
    config: Config,
    abort: Arc<AtomicBool>,
    tuner: Tuner,
    transports: Transports,
    net: NetLinks,
    socket: Arc<SocketNet>,
    connections: Mutex<Connections>,
    /// Plans already made and connected, by shape: a repeated collective skips planning,
    /// connection setup and bounds checks.
    plans: Mutex<FxHashMap<PlanKey, Arc<Prepared>>>,
    /// Where Avg and PreMulSum put each rank's scaled input (reused: no allocation per call
    /// once it has grown to the largest input).
    scratch: Mutex<Vec<u8>>,
    /// The scratch buffer's size, readable while a task holds it.
    scratch_bytes: AtomicU64,
    /// Bytes of FIFO slots this rank holds for its connections (see [`MemoryStats`]).
    fifo_bytes: AtomicU64,
    /// Set by [`Communicator::suspend`]: tasks are refused until [`Communicator::resume`].
    suspended: AtomicBool,
    /// The scratch size a suspension released, allocated again on resumption.
    released_scratch: Mutex<usize>,
    /// Abort flags of the non-blocking splits, shrinks and grows running from this
    /// communicator: it reports `InProgress` while there are any, and aborts them when
    /// aborted.
    creating: Mutex<Vec<Arc<AtomicBool>>>,
    /// How the exchange of a non-blocking split that joined nothing (NOCOLOR) failed.
    background_error: Mutex<Option<Error>>,
}

/// What a plan depends on besides the communicator.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct PlanKey {
    collective: Collective,
    count: usize,
    esize: usize,
    root: usize,
}

/// A plan ready to run: lanes checked against buffers of its sizes, connections made.
struct Prepared {
    /// The tuner's choice for the key (fixed per communicator, so asked once).
    algorithm: algo::Algorithm,
    lanes: Vec<Lane>,
    /// Messages each network receive link carries per run.
    net_expected: Vec<(algo::Link, u64)>,
}

impl Prepared {
    /// Heap bytes the plan holds.
    fn bytes(&self) -> u64 {
        let steps: usize = self.lanes.iter().map(|l| l.steps.capacity() * std::mem::size_of::<(Step, usize)>()).sum();
        (steps + self.lanes.capacity() * std::mem::size_of::<Lane>() + self.net_expected.capacity() * std::mem::size_of::<(algo::Link, u64)>()) as u64
    }
}

/// Cached plans per communicator; the cache starts over when full.
const PLAN_CACHE: usize = 256;

impl Communicator {
    /// Joins the job named by `id` as `rank` of `nranks`.
    pub fn init(id: &UniqueId, rank: u32, nranks: u32, config: &Config) -> Result<Communicator> {
        join(id, rank, nranks, config, Arc::new(AtomicBool::new(false)), None)
    }

    /// Joins the job the environment describes (launcher, NCCL_COMM_ID, MPI; see
    /// `Bootstrap::from_env`).
    pub fn from_env(config: &Config) -> Result<Communicator> {
        Communicator::from_bootstrap(Bootstrap::from_env(config)?, config)
    }

    /// Rank 0 of the MPI communicator creates the id and broadcasts it over MPI.
    #[cfg(feature = "mpi")]
    pub fn from_mpi<C: mpi::topology::Communicator>(comm: &C, config: &Config) -> Result<Communicator> {
        Communicator::from_bootstrap(Bootstrap::from_mpi(comm, config)?, config)
    }

    /// `n` communicators of one job, one per rank, in this process (one thread each).
    pub fn init_all(n: u32, config: &Config) -> Result<Vec<Communicator>> {
        Communicator::init_all_with(&vec![config.clone(); n as usize])
    }

    /// As [`Communicator::init_all`], rank i with `configs[i]` (say, a host id of its own,
    /// to run the ranks as if on separate hosts); the job's id is made from `configs[0]`.
    pub fn init_all_with(configs: &[Config]) -> Result<Vec<Communicator>> {
        let first = configs.first().ok_or_else(|| Error::invalid("init_all_with: no ranks"))?;
        let (id, n) = (Bootstrap::create_local_id(first)?, configs.len() as u32);
        let handles: Vec<_> = configs
            .iter()
            .enumerate()
            .map(|(rank, config)| {
                let config = config.clone();
                std::thread::spawn(move || Communicator::init(&id, rank as u32, n, &config))
            })
            .collect();
        handles.into_iter().map(|h| h.join().map_err(|_| Error::Internal("init thread panicked".into()))?).collect()
    }

    /// Builds a communicator over a joined bootstrap.
    pub fn from_bootstrap(boot: Bootstrap, config: &Config) -> Result<Communicator> {
        let same_host = host_peers(&boot, config)?;
        Communicator::with_host_peers(boot, same_host, config)
    }

    /// The rest of [`Communicator::from_bootstrap`] once the ranks know who shares their
    /// host: nothing here waits on a peer.
    fn with_host_peers(boot: Bootstrap, same_host: Vec<bool>, config: &Config) -> Result<Communicator> {
        let (rank, nranks) = (boot.rank() as usize, boot.nranks() as usize);
        let span = tracing::info_span!(target: log_target::INIT, "comm_init", rank, nranks);
        let _enter = span.enter();
        let tuner = Tuner::new(config.algo.as_deref(), config.proto.as_deref())?;
        static CLEANED: std::sync::Once = std::sync::Once::new();
        CLEANED.call_once(|| {
            let removed = fifo::cleanup_stale();
            if removed > 0 {
                tracing::info!(target: log_target::SHM, "removed {removed} stale shared-memory segments");
            }
        });
        let slot_bytes = (config.buffsize / SLOTS).max(4096).next_multiple_of(64);
        let transports = Transports::new(same_host, !config.shm_disable, Geometry { slots: SLOTS, slot_bytes });
        static ROOMY: std::sync::Once = std::sync::Once::new();
        if let Some(warning) = transports.one_core_warning() {
            ROOMY.call_once(|| tracing::warn!(target: log_target::NET, "rank {rank}: {warning}"));
        }
        let socket = Arc::new(SocketNet::with_max_recvs(boot.listen_addr().ip(), config.socket_max_recvs));
        let abort = Arc::new(AtomicBool::new(false));
        let exec = Arc::new(Exec {
            net: NetLinks::new(socket.clone(), config.proxy_threads),
            socket,
            boot,
            rank,
            nranks,
            config: config.clone(),
            abort: abort.clone(),
            tuner,
            transports,
            connections: Mutex::new(Connections::default()),
            plans: Mutex::new(FxHashMap::default()),
            scratch: Mutex::new(Vec::new()),
            scratch_bytes: AtomicU64::new(0),
            fifo_bytes: AtomicU64::new(0),
            suspended: AtomicBool::new(false),
            released_scratch: Mutex::new(0),
            creating: Mutex::new(Vec::new()),
            background_error: Mutex::new(None),
        });
        let runner = exec.clone();
        let stream = HostStream::new(&rank.to_string(), abort, move |task| runner.run(task))?;
        // Ready: from now on only its own members' failures break it.
        exec.boot.created();
        tracing::info!(target: log_target::INIT, "rank {rank}/{nranks} ready");
        Ok(Communicator { stream, exec })
    }

    /// The bootstrap (for backends that set up their own connections).
    pub(crate) fn bootstrap(&self) -> &Bootstrap {
        &self.exec.boot
    }

    /// Which ranks share this rank's host (this one included).
    pub(crate) fn same_host(&self) -> &[bool] {
        &self.exec.transports.same_host
    }

    /// The shared part, for creations running in the background.
    pub(crate) fn parent(&self) -> Arc<Exec> {
        self.exec.clone()
    }

    /// The configuration the communicator was made with.
    pub fn config(&self) -> &Config {
        &self.exec.config
    }

    /// A check another thread can run: an error once the communicator is aborted or a
    /// peer has failed.
    pub(crate) fn health_probe(&self) -> impl Fn() -> Result<()> + Send + 'static {
        let exec = self.exec.clone();
        move || exec.health()
    }

    /// What another thread can call to tell every rank that a rank can no longer take
    /// part, and why: their waits fail naming it (this rank's too).
    pub(crate) fn failure_announcer(&self) -> impl Fn(u32, &str) + Send + 'static {
        let exec = self.exec.clone();
        move |rank, reason| exec.announce_failed(rank, reason)
    }

    pub fn rank(&self) -> usize {
        self.exec.rank
    }

    pub fn nranks(&self) -> usize {
        self.exec.nranks
    }

    /// Ranks passing the same `color` form a new communicator, ordered by `key` then rank;
    /// [`oxccl_bootstrap::NOCOLOR`] joins none. Collective; reuses the bootstrap connections.
    pub fn split(&self, color: i32, key: i32) -> Result<Option<Communicator>> {
        if self.revoked().is_none() {
            self.check_usable()?;
        }
        match self.exec.boot.split(color, key)? {
            Some(boot) => Ok(Some(Communicator::from_bootstrap(boot, &self.exec.config)?)),
            None => Ok(None),
        }
    }

    /// A communicator of this one's ranks minus `exclude` (this communicator's ranks,
    /// typically the failed ones named by an error), ordered as here; ncclCommShrink.
    /// Nothing is asked of the excluded ranks: a dead rank cannot answer. Every survivor
    /// must pass the same list. `abort_first` is NCCL_SHRINK_ABORT: this communicator's
    /// in-flight work is aborted first; without it no operation may be in flight.
    pub fn shrink(&self, exclude: &[usize], abort_first: bool) -> Result<Communicator> {
        if abort_first {
            self.abort();
        }
        let exclude: Vec<u32> = exclude.iter().map(|&r| u32::try_from(r).unwrap_or(u32::MAX)).collect();
        let boot = self.exec.boot.shrink(&exclude)?;
        self.exec.shrunk(boot, &exclude)
    }

    /// Agrees with the other live ranks on which ranks of this communicator failed
    /// (ULFM's `MPIX_Comm_agree` on the failed group): every rank that returns `Ok` returns
    /// the same sorted list, holding every rank any of them knew as failed, and never one
    /// that returned. Dead ranks are never waited for. Works on a communicator broken by a
    /// failure or aborted; a rank the others count as failed gets an error. Bounded by the
    /// bootstrap timeout. See docs/FAULTS.md for the protocol and its guarantees.
    pub fn agree_failed(&self) -> Result<Vec<usize>> {
        Ok(self.exec.boot.agree_failed()?.into_iter().map(|r| r as usize).collect())
    }

    /// [`Communicator::shrink`] without a list: the live ranks first agree on the failed
    /// ones ([`Communicator::agree_failed`]), then each builds the communicator of the
    /// rest, so that all of them get the same one without anyone naming the dead. The
    /// build is local (no rank waits for another), so every survivor that returns `Ok`
    /// returns the same communicator; a rank failing after the agreement is found by the
    /// new communicator's first collective, on every member. Collective over the live
    /// ranks. Returns the
    /// new communicator and the excluded ranks (ranks of this communicator). `abort_first`
    /// as in [`Communicator::shrink`].
    pub fn shrink_failed(&self, abort_first: bool) -> Result<(Communicator, Vec<usize>)> {
        if abort_first {
            self.abort();
        }
        shrink_agreed(&self.exec, &Arc::new(AtomicBool::new(false)))
    }

    /// A new unique id for [`Communicator::grow`], its root served by this process
    /// (ncclCommGetUniqueId): one existing rank makes it and hands it to the others and to
    /// the new processes out of band (a broadcast on this communicator, a file, ...). The id
    /// is marked for confirmation ([`UniqueId::with_confirmation`]): a grow through it
    /// succeeds on every surviving rank or on none.
    pub fn grow_id(&self) -> Result<UniqueId> {
        Ok(Bootstrap::create_id(&self.exec.config)?.with_confirmation())
    }

    /// A communicator of `nranks` ranks made of this one's ranks, which keep their ranks,
    /// and new processes, which call [`Communicator::init`] with the same `id` and ranks
    /// from `self.nranks()` up (ncclCommGrow). Collective over the existing and the new
    /// ranks, through a new rendezvous at `id`'s root; bounded by the bootstrap timeouts.
    /// A member of this communicator failing before the rendezvous is complete ends the
    /// grow on every rank as soon as it is noticed (OXCCL_HEARTBEAT_TIMEOUT_MS at most; a
    /// killed process at once), not at the timeout. With an id from
    /// [`Communicator::grow_id`], a rank dying during the grow makes it fail on every
    /// survivor (an error naming a failed rank), never on some only.
    pub fn grow(&self, nranks: usize, id: &UniqueId) -> Result<Communicator> {
        let n = self.check_grow(nranks)?;
        join(id, self.rank() as u32, n, &self.exec.config, Arc::new(AtomicBool::new(false)), Some(&self.exec.boot))
    }

    /// The new size of a grow to `nranks`, if it is one.
    pub(crate) fn check_grow(&self, nranks: usize) -> Result<u32> {
        if nranks <= self.nranks() {
            return Err(Error::invalid(format!("grow to {nranks} ranks: the communicator already has {}; growing needs more", self.nranks())));
        }
        u32::try_from(nranks).map_err(|_| Error::invalid(format!("grow to {nranks} ranks: too many")))
    }

    /// Revokes the communicator (ncclCommRevoke): in-flight work stops on every rank — a
    /// collective waiting here or on any other live rank returns an error promptly, also
    /// on ranks that did not call this (the notice goes through the bootstrap) — and the
    /// communicator is then usable only for destroy (drop), [`Communicator::split`],
    /// [`Communicator::shrink`] and [`Communicator::shrink_failed`]; other calls return
    /// `InvalidUsage`. Returns once this rank's in-flight work has ended. Callable from
    /// any thread, and by any number of ranks.
    pub fn revoke(&self) -> Result<()> {
        self.exec.boot.revoke();
        self.stream.wake();
        // In-flight work sees the revocation in its health checks and ends with an error,
        // which is the point.
        let _ = self.stream.synchronize();
        Ok(())
    }

    /// Why the communicator was revoked (here or by another rank), if it was.
    pub fn revoked(&self) -> Option<String> {
        self.exec.boot.revoked()
    }

    /// Waits for every operation enqueued so far.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()
    }

    /// The communicator's error, if an operation failed (never blocks).
    pub fn error(&self) -> Option<Error> {
        if self.exec.abort.load(Ordering::Acquire) {
            return Some(Error::Aborted { reason: String::new() });
        }
        if let Some(reason) = self.revoked() {
            return Some(Error::Aborted { reason });
        }
        let creating = self.exec.creating.lock().len();
        if creating > 0 {
            return Some(Error::InProgress { what: format!("{creating} non-blocking split, shrink or grow of this communicator still running") });
        }
        if let Some(e) = self.exec.background_error.lock().clone() {
            return Some(e);
        }
        self.stream.error()
    }

    /// Stops every operation and wait of this communicator, from any thread; they return
    /// `Aborted` in bounded time.
    pub fn abort(&self) {
        self.exec.abort.store(true, Ordering::Release);
        self.exec.boot.abort();
        for creation in self.exec.creating.lock().iter() {
            creation.store(true, Ordering::Release);
        }
        self.stream.wake();
    }

    /// Waits for queued work, then for every message this rank sent to be taken by its
    /// receiver's transport (the proxy's network sends included), so that the rank can exit
    /// without cutting off data its peers still read. Dropping a communicator does the same
    /// (logging instead of returning a failure). Bounded by OXCCL_COLL_TIMEOUT_MS; ends
    /// early on abort or a peer's failure.
    pub fn finalize(&self) -> Result<()> {
        if let Some(reason) = self.revoked() {
            return Err(Error::InvalidUsage { what: format!("finalize after revoke ({reason}): only destroy, split or shrink remain") });
        }
        self.synchronize()?;
        self.exec.flush()
    }

    /// The ranks that share this rank's host (NCCL_HOSTID, else host name and boot id),
    /// this one included, in rank order.
    pub fn local_ranks(&self) -> Vec<usize> {
        self.exec.transports.same_host.iter().enumerate().filter(|(_, &same)| same).map(|(r, _)| r).collect()
    }

    /// Counts of the socket net's receive calls: (calls, calls carrying several buffers).
    pub fn net_receive_stats(&self) -> (u64, u64) {
        let s = self.exec.socket.stats();
        (s.irecv_calls.load(Ordering::Relaxed), s.irecv_grouped.load(Ordering::Relaxed))
    }

    pub(crate) fn check_usable(&self) -> Result<()> {
        self.refuse_if_suspended()?;
        if let Some(reason) = self.revoked() {
            return Err(Error::InvalidUsage { what: format!("the communicator is revoked ({reason}): only destroy, split or shrink remain") });
        }
        match self.error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Enqueues one collective on raw buffers.
    ///
    /// # Safety
    /// `send` and `recv` must be valid for the byte sizes the collective needs on this rank
    /// (see [`Collective::buffer_counts`]), may alias only as NCCL's in-place conventions
    /// say, and must not be touched by anyone else until the returned work completes.
    pub unsafe fn enqueue_collective(&self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<Work> {
        self.check_usable()?;
        let task = self.collective_task(collective, send, recv, count, dtype, op, root)?;
        self.submit(Task::Collective(task))
    }

    /// Runs one collective on raw buffers and waits for it: on this thread when nothing
    /// else is queued (the blocking path of the typed methods, without a thread handoff).
    ///
    /// # Safety
    /// As [`Communicator::enqueue_collective`], until this returns.
    pub unsafe fn run_raw(&self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<()> {
        self.check_usable()?;
        let task = self.collective_task(collective, send, recv, count, dtype, op, root)?;
        self.run_now(Task::Collective(task))
    }

    fn collective_task(&self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<CollectiveTask> {
        let n = self.nranks();
        if collective.rooted() && root >= n {
            return Err(Error::invalid(format!("root {root} out of range for {n} ranks")));
        }
        if collective == Collective::AllToAll && std::ptr::eq(send, recv) && count > 0 {
            return Err(Error::invalid("all_to_all cannot run in place (send and recv are the same buffer)"));
        }
        let (send_count, recv_count) = collective.buffer_counts(count, n, self.rank(), root);
        let bytes = |elements: usize, what: &str| {
            elements.checked_mul(dtype.size()).filter(|&b| b <= isize::MAX as usize).ok_or_else(|| Error::invalid(format!("{what} count {elements} overflows")))
        };
        let (send_bytes, recv_bytes) = (bytes(send_count, "send")?, bytes(recv_count, "recv")?);
        if send_bytes > 0 && send.is_null() {
            return Err(Error::invalid("send buffer is null"));
        }
        if recv_bytes > 0 && recv.is_null() {
            return Err(Error::invalid("recv buffer is null"));
        }
        Ok(CollectiveTask { collective, count, dtype, op, root, buffers: Buffers { send, send_bytes, recv, recv_bytes } })
    }

    /// Runs `task` in stream order and waits for it (on this thread when the stream is idle).
    fn run_now(&self, task: Task) -> Result<()> {
        self.stream.run_inline(task)
    }

    fn submit(&self, task: Task) -> Result<Work> {
        self.stream.submit(task)
    }

    /// Starts a group: operations added to it are launched together by [`Group::end`].
    pub fn group(&self) -> Group<'_> {
        Group { comm: self, p2p: Vec::new(), collectives: Vec::new() }
    }
}

impl Drop for Communicator {
    fn drop(&mut self) {
        if self.error().is_some() {
            return;
        }
        if let Err(e) = self.finalize() {
            tracing::warn!(target: log_target::INIT, "rank {}: finalizing on drop: {e}", self.exec.rank);
        }
    }
}

/// Operations launched together: point-to-point operations all progress at once (matched
/// send/recv pairs never deadlock, whatever their order), collectives follow in call order.
pub struct Group<'a> {
    comm: &'a Communicator,
    p2p: Vec<PointToPoint>,
    collectives: Vec<CollectiveTask>,
}

impl<'a> Group<'a> {
    /// Adds a send of `data` to `peer`.
    pub fn send<T: crate::Element>(&mut self, data: &'a [T], peer: usize) -> Result<&mut Self> {
        self.point_to_point(peer, bytemuck::cast_slice(data).as_ptr(), std::ptr::null_mut(), std::mem::size_of_val(data), true)
    }

    /// Adds a receive from `peer` into `data` (the peer sends exactly as many elements).
    pub fn recv<T: crate::Element>(&mut self, data: &'a mut [T], peer: usize) -> Result<&mut Self> {
        let bytes = std::mem::size_of_val(data);
        self.point_to_point(peer, std::ptr::null(), bytemuck::cast_slice_mut(data).as_mut_ptr(), bytes, false)
    }

    /// Adds a send on raw memory.
    ///
    /// # Safety
    /// `data` is valid for `bytes` bytes until the group's work completes.
    pub unsafe fn send_raw(&mut self, data: *const u8, bytes: usize, peer: usize) -> Result<&mut Self> {
        self.point_to_point(peer, data, std::ptr::null_mut(), bytes, true)
    }

    /// Adds a receive on raw memory.
    ///
    /// # Safety
    /// `data` is valid for `bytes` bytes, untouched by others, until the work completes.
    pub unsafe fn recv_raw(&mut self, data: *mut u8, bytes: usize, peer: usize) -> Result<&mut Self> {
        self.point_to_point(peer, std::ptr::null(), data, bytes, false)
    }

    fn point_to_point(&mut self, peer: usize, send: *const u8, recv: *mut u8, bytes: usize, is_send: bool) -> Result<&mut Self> {
        if peer >= self.comm.nranks() {
            return Err(Error::invalid(format!("peer {peer} out of range for {} ranks", self.comm.nranks())));
        }
        if bytes > 0 && send.is_null() && recv.is_null() {
            return Err(Error::invalid("buffer is null"));
        }
        let buffers = Buffers { send, send_bytes: if is_send { bytes } else { 0 }, recv, recv_bytes: if is_send { 0 } else { bytes } };
        self.p2p.push(PointToPoint { peer, bytes, buffers, send: is_send });
        Ok(self)
    }

    /// Adds a collective on raw buffers.
    ///
    /// # Safety
    /// As [`Communicator::enqueue_collective`], until the group's work completes.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn collective_raw(&mut self, collective: Collective, send: *const u8, recv: *mut u8, count: usize, dtype: DataType, op: ReduceOp, root: usize) -> Result<&mut Self> {
        let task = self.comm.collective_task(collective, send, recv, count, dtype, op, root)?;
        self.collectives.push(task);
        Ok(self)
    }

    /// Adds a collective on typed buffers (`send` may be `None` for in-place, where `recv`
    /// holds the input as NCCL's in-place conventions say).
    pub fn collective<T: crate::Element>(&mut self, collective: Collective, send: Option<&'a [T]>, recv: &'a mut [T], count: usize, op: ReduceOp, root: usize) -> Result<&mut Self> {
        let task = typed_task(self.comm, collective, send, recv, count, op, root)?;
        self.collectives.push(task);
        Ok(self)
    }

    /// Launches the group and waits for it.
    pub fn end(self) -> Result<()> {
        self.comm.check_usable()?;
        self.comm.run_now(Task::Group { p2p: self.p2p, collectives: self.collectives })
    }

    /// Launches the group; the work's handle is returned at once.
    ///
    /// # Safety
    /// The buffers the group borrows must stay untouched until the work completes (the
    /// borrow ends when this returns, so the caller must wait on the handle before using
    /// them again).
    pub unsafe fn launch_async(self) -> Result<Work> {
        self.launch()
    }

    fn launch(self) -> Result<Work> {
        self.comm.check_usable()?;
        self.comm.submit(Task::Group { p2p: self.p2p, collectives: self.collectives })
    }
}

/// Checks typed buffers against the collective's needs and builds its task.
fn typed_task<T: crate::Element>(comm: &Communicator, collective: Collective, send: Option<&[T]>, recv: &mut [T], count: usize, op: ReduceOp, root: usize) -> Result<CollectiveTask> {
    let n = comm.nranks();
    let rank = comm.rank();
    if collective.rooted() && root >= n {
        return Err(Error::invalid(format!("root {root} out of range for {n} ranks")));
    }
    let (send_count, recv_count) = collective.buffer_counts(count, n, rank, root);
    if recv.len() < recv_count {
        return Err(Error::invalid(format!("{}: recv buffer holds {} elements, {recv_count} needed", collective.name(), recv.len())));
    }
    let recv_ptr = bytemuck::cast_slice_mut::<T, u8>(recv).as_mut_ptr();
    let send_ptr: *const u8 = match send {
        Some(send) if send.len() < send_count => {
            return Err(Error::invalid(format!("{}: send buffer holds {} elements, {send_count} needed", collective.name(), send.len())));
        }
        Some(send) => bytemuck::cast_slice::<T, u8>(send).as_ptr(),
        None => {
            if let Some(offset) = collective.in_place_recv_offset(count, rank, root) {
                return Err(Error::invalid(format!(
                    "{} in place reads its input from the send buffer (recv = send + {offset} elements): pass the send buffer",
                    collective.name()
                )));
            }
            let offset = collective.in_place_send_offset(count, rank, root).unwrap_or(0);
            recv_ptr.wrapping_add(offset * std::mem::size_of::<T>())
        }
    };
    comm.collective_task(collective, send_ptr, recv_ptr, count, T::DATATYPE, op, root)
}

impl Communicator {
    /// Runs one collective on typed buffers and waits for it. `send: None` runs in place.
    pub fn run<T: crate::Element>(&self, collective: Collective, send: Option<&[T]>, recv: &mut [T], count: usize, op: ReduceOp, root: usize) -> Result<()> {
        self.check_usable()?;
        let task = typed_task(self, collective, send, recv, count, op, root)?;
        self.run_now(Task::Collective(task))
    }

    /// `recv[i] = op over ranks of send[i]`, `count = recv.len()`.
    pub fn all_reduce<T: crate::Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        let count = recv.len();
        self.run(Collective::AllReduce, Some(send), recv, count, op, 0)
    }

    /// All-reduce in place.
    pub fn all_reduce_in_place<T: crate::Element>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let count = buf.len();
        self.run(Collective::AllReduce, None, buf, count, op, 0)
    }

    /// Every rank's `buf` becomes the root's.
    pub fn broadcast<T: crate::Element>(&self, buf: &mut [T], root: usize) -> Result<()> {
        let count = buf.len();
        self.run(Collective::Broadcast, None, buf, count, ReduceOp::Sum, root)
    }

    /// The root's `recv` becomes the reduction of every rank's `send` (`recv` is ignored
    /// elsewhere and may be empty).
    pub fn reduce<T: crate::Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp, root: usize) -> Result<()> {
        self.run(Collective::Reduce, Some(send), recv, send.len(), op, root)
    }

    /// `recv` (n × send.len()) holds every rank's `send`, in rank order.
    pub fn all_gather<T: crate::Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        self.run(Collective::AllGather, Some(send), recv, send.len(), ReduceOp::Sum, 0)
    }

    /// `recv` (count) is block `rank` of the reduction of every rank's `send` (n × count).
    pub fn reduce_scatter<T: crate::Element>(&self, send: &[T], recv: &mut [T], op: ReduceOp) -> Result<()> {
        let count = recv.len();
        self.run(Collective::ReduceScatter, Some(send), recv, count, op, 0)
    }

    /// Block p of `send` goes to rank p, arriving as block `rank` of its `recv`.
    pub fn all_to_all<T: crate::Element>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let count = send.len() / self.nranks();
        self.run(Collective::AllToAll, Some(send), recv, count, ReduceOp::Sum, 0)
    }

    /// The root's `recv` (n × send.len()) holds every rank's `send`.
    pub fn gather<T: crate::Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        self.run(Collective::Gather, Some(send), recv, send.len(), ReduceOp::Sum, root)
    }

    /// Block p of the root's `send` lands in rank p's `recv`.
    pub fn scatter<T: crate::Element>(&self, send: &[T], recv: &mut [T], root: usize) -> Result<()> {
        let count = recv.len();
        self.run(Collective::Scatter, Some(send), recv, count, ReduceOp::Sum, root)
    }

    /// Sends `data` to `peer` and waits (pair with the peer's `recv`; for exchanges, use a
    /// [`Group`] so both directions progress together).
    pub fn send<T: crate::Element>(&self, data: &[T], peer: usize) -> Result<()> {
        let mut g = self.group();
        g.send(data, peer)?;
        g.end()
    }

    /// Receives from `peer` into `data` and waits.
    pub fn recv<T: crate::Element>(&self, data: &mut [T], peer: usize) -> Result<()> {
        let mut g = self.group();
        g.recv(data, peer)?;
        g.end()
    }
}

impl Exec {
    pub(crate) fn bootstrap(&self) -> &Bootstrap {
        &self.boot
    }

    /// The communicator on `boot`, a shrink of this one without `exclude` (checked by the
    /// shrink): who shares this rank's host is known here, so no exchange is needed — the
    /// survivors' view is this one's without the excluded ranks.
    pub(crate) fn shrunk(&self, boot: Bootstrap, exclude: &[u32]) -> Result<Communicator> {
        let same_host = self.transports.same_host.iter().enumerate().filter(|(r, _)| !exclude.contains(&(*r as u32))).map(|(_, &same)| same).collect();
        Communicator::with_host_peers(boot, same_host, &self.config)
    }
}

impl crate::pending::Parent for Exec {
    fn start_creation(&self, abort: &Arc<AtomicBool>) {
        self.creating.lock().push(abort.clone());
    }

    fn end_creation(&self, abort: &Arc<AtomicBool>) {
        self.creating.lock().retain(|a| !Arc::ptr_eq(a, abort));
    }

    fn record_background_error(&self, error: Error) {
        *self.background_error.lock() = Some(error);
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
        let deadline = Instant::now() + self.config.coll_timeout;
        let mut connections = self.connections.lock();
        for (link, sender) in connections.senders.iter_mut() {
            let mut spins = 0u32;
            while !sender.drained() {
                self.health()?;
                if Instant::now() >= deadline {
                    return Err(Error::Timeout { phase: format!("flushing the messages to rank {} (channel {})", link.peer, link.channel), waited: self.config.coll_timeout });
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

    fn health(&self) -> Result<()> {
        if self.abort.load(Ordering::Acquire) {
            return Err(Error::Aborted { reason: String::new() });
        }
        self.boot.check("collective")?;
        if let Err(e) = self.net.check() {
            // The data path saw the peer go before the control plane did: tell the job, so
            // that every rank names the same failed rank.
            if let Error::PeerFailed { rank, reason } = &e {
                self.announce_failed(*rank, reason);
            }
            return Err(self.boot.check("collective").err().map(Error::from).unwrap_or(e));
        }
        Ok(())
    }

    /// Tells every rank that `rank` can no longer take part (`reason`): their waits fail
    /// naming it, this rank's too.
    fn announce_failed(&self, rank: u32, reason: &str) {
        let named = reason.starts_with(&format!("rank {rank} "));
        self.boot.announce_failure(&if named { reason.to_string() } else { format!("rank {rank}: {reason}") }, &[rank]);
    }

    /// Connects every link `lanes` use, and counts the FIFO bytes this rank then holds:
    /// every receiving end, and the sending ends over the network (a shared-memory sending
    /// end maps its peer's FIFO).
    fn connect(&self, lanes: &[Lane], connections: &mut Connections) -> Result<()> {
        let result = conn::ensure(lanes, connections, &self.boot, &self.transports, &self.net);
        let geometry = self.transports.geometry;
        let fifos = connections.receivers.len() + connections.senders.keys().filter(|l| !self.transports.shared_memory(l.peer)).count();
        self.fifo_bytes.store((fifos * geometry.slots * geometry.slot_bytes) as u64, Ordering::Release);
        result
    }

    /// Messages each network receive link of `lanes` carries.
    fn net_expected(&self, lanes: &[Lane]) -> Vec<(algo::Link, u64)> {
        let mut expected: FxHashMap<algo::Link, u64> = FxHashMap::default();
        for (step, _) in lanes.iter().flat_map(|l| &l.steps) {
            if let Some(link) = step.receives().filter(|l| self.net.is_net_receive(l)) {
                *expected.entry(link).or_default() += 1;
            }
        }
        expected.into_iter().collect()
    }

    /// Runs lanes whose connections exist; `independent`: every message is sent without
    /// waiting for its receiver (point-to-point, direct exchange), so the proxy may post
    /// receives together.
    #[allow(clippy::too_many_arguments)]
    fn execute(&self, lanes: &[Lane], net_expected: &[(algo::Link, u64)], buffers: &[Buffers], dtype: DataType, op: ReduceOp, independent: bool, checked: bool, connections: &mut Connections) -> Result<()> {
        for &(link, n) in net_expected {
            self.net.expect(link, n, independent);
        }
        let health = || self.health();
        let departed = || self.boot.departed().into_iter().map(|r| r as usize).map(|r| (r, if self.transports.shared_memory(r) { exec::LEFT_GRACE } else { exec::NET_LEFT_GRACE })).collect();
        let cx = exec::Context { dtype, combine: op.combine(), timeout: self.config.coll_timeout, health: &health, departed: &departed };
        let result = exec::run(lanes, buffers, connections, &cx, checked);
        if let Err(Error::PeerFailed { rank, reason }) = &result {
            // A peer that left while this rank waited for it: the others waiting (maybe
            // on this rank) learn it too, as of a death.
            if self.boot.departed().contains(rank) {
                self.announce_failed(*rank, reason);
            }
        }
        result
    }

    /// The plan for `key`, its algorithm chosen, made, connected and checked on first use.
    fn prepared(&self, key: PlanKey, connections: &mut Connections) -> Result<Arc<Prepared>> {
        if let Some(p) = self.plans.lock().get(&key) {
            return Ok(p.clone());
        }
        let cost = CostInput { bytes: key.count * key.esize, nranks: self.nranks, net: self.transports.any_net(), oversubscribed: self.transports.oversubscribed() };
        let algorithm = self.tuner.choose(key.collective, &cost)?;
        let shape = Shape {
            collective: key.collective,
            count: key.count,
            nranks: self.nranks,
            root: key.root,
            chunk: (self.transports.geometry.slot_bytes / key.esize).max(1),
            channels: self.channels(&key, algorithm),
        };
        let lanes = algo::plan_rank(shape, algorithm, self.rank).map_err(|e| Error::invalid(e.to_string()))?;
        let lanes: Vec<Lane> = lanes.into_iter().map(|steps| Lane { steps: steps.into_iter().map(|s| (s, 0)).collect() }).collect();
        self.connect(&lanes, connections)?;
        let (send_count, recv_count) = key.collective.buffer_counts(key.count, self.nranks, self.rank, key.root);
        let sizes = Buffers { send: std::ptr::null(), send_bytes: send_count * key.esize, recv: std::ptr::null_mut(), recv_bytes: recv_count * key.esize };
        exec::check_bounds(&lanes, &[sizes], connections, key.esize)?;
        let prepared = Arc::new(Prepared { algorithm, net_expected: self.net_expected(&lanes), lanes });
        let mut plans = self.plans.lock();
        if plans.len() >= PLAN_CACHE {
            plans.clear();
        }
        plans.insert(key, prepared.clone());
        Ok(prepared)
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
        (slots / 2).clamp(1, NET_CHANNELS).min(self.config.max_channels.max(1))
    }

    fn run_collective(&self, task: &CollectiveTask, connections: &mut Connections) -> Result<()> {
        if task.count == 0 {
            return Ok(());
        }
        let key = PlanKey { collective: task.collective, count: task.count, esize: task.dtype.size(), root: task.root };
        let prepared = self.prepared(key, connections)?;
        let mut buffers = task.buffers;
        // Avg of floats and PreMulSum scale each rank's input once, before the reduction.
        let mut scratch = self.scratch.lock();
        if let Some(factor) = task.collective.reduces().then(|| task.op.input_scale(task.dtype, self.nranks)).flatten() {
            if scratch.len() < buffers.send_bytes {
                scratch.resize(buffers.send_bytes, 0);
                self.scratch_bytes.store(scratch.len() as u64, Ordering::Release);
            }
            // SAFETY: the send buffer is valid for send_bytes (enqueue's contract).
            let input = unsafe { std::slice::from_raw_parts(buffers.send, buffers.send_bytes) };
            oxccl_kernels::scale(task.dtype, factor, &mut scratch[..buffers.send_bytes], input)?;
            buffers.send = scratch.as_ptr();
        }
        // Whether the proxy may post a link's receives together (the algorithm's doc).
        let independent = prepared.algorithm.sends_independently(task.collective, self.nranks);
        self.execute(&prepared.lanes, &prepared.net_expected, &[buffers], task.dtype, task.op, independent, true, connections)?;
        drop(scratch);
        if task.collective.reduces() && task.op.needs_final_division(task.dtype) && buffers.recv_bytes > 0 {
            // SAFETY: the recv buffer is valid for recv_bytes and the operation is done.
            let out = unsafe { std::slice::from_raw_parts_mut(buffers.recv, buffers.recv_bytes) };
            oxccl_kernels::divide(task.dtype, self.nranks as u64, out)?;
        }
        Ok(())
    }

    fn run_p2p(&self, ops: &[PointToPoint], connections: &mut Connections) -> Result<()> {
        // Sends to oneself pair with receives from oneself, in order.
        let own = |send: bool| ops.iter().filter(move |o| o.send == send && o.peer == self.rank);
        check_own_transfers(own(true).map(|o| o.bytes), own(false).map(|o| o.bytes))?;
        for (s, r) in own(true).zip(own(false)) {
            // SAFETY: both buffers are valid for `bytes` (enqueue's contract).
            unsafe { std::ptr::copy(s.buffers.send, r.buffers.recv, s.bytes) };
        }
        let chunk = self.transports.geometry.slot_bytes;
        let mut lanes: HashMap<(usize, bool), Lane> = HashMap::new();
        let mut buffers = Vec::new();
        for op in ops.iter().filter(|o| o.peer != self.rank) {
            let index = buffers.len();
            buffers.push(op.buffers);
            let link = conn::p2p_link(op.peer);
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

/// Joins the job of `id` as `rank` of `nranks`, every wait ending when `abort` is set; with
/// `growing`, as a member of that communicator growing to `nranks` (its failures end the
/// wait at the rendezvous: [`Bootstrap::grow_abortable`]). With a confirmed id
/// ([`UniqueId::confirmed`]: grows) the ranks then agree on the failed ones over the new
/// bootstrap, and only if none failed is the communicator built (the steps after the
/// agreement wait on no peer), so that the join succeeds on every surviving rank or on none.
pub(crate) fn join(id: &UniqueId, rank: u32, nranks: u32, config: &Config, abort: Arc<AtomicBool>, growing: Option<&Bootstrap>) -> Result<Communicator> {
    let boot = match growing {
        Some(parent) => parent.grow_abortable(id, nranks, config, abort.clone())?,
        None => Bootstrap::init_abortable(id, rank, nranks, config, abort.clone())?,
    };
    if !id.confirmed() {
        return Communicator::from_bootstrap(boot, config);
    }
    // A failure here (a rank died during the exchange) is decided on by the agreement.
    let same_host = host_peers(&boot, config);
    let failed = boot.agree_failed_abortable(&abort)?;
    if let Some(&first) = failed.first() {
        let cause = same_host.err().map_or(String::new(), |e| format!("; here: {e}"));
        return Err(Error::PeerFailed { rank: first, reason: format!("ranks {failed:?} of {nranks} failed while joining; the join is given up on every rank{cause}") });
    }
    Communicator::with_host_peers(boot, same_host?, config)
}

/// [`Communicator::shrink_failed`] of `parent`, every wait ending when `abort` is set.
///
/// One agreement, then a build that is local: the new communicator's members, ranks and
/// who shares whose host all come from the parent and the agreed set, its namespace from
/// the parent's shrink count, and nothing in the build waits for or talks to another rank
/// (its connections are made by its first collective). So a rank that fails after the
/// agreement cannot make the build fail on some survivors and succeed on others: every
/// survivor that returns `Ok` returns the same communicator, as after any failure just
/// after a shrink, and the next collective on it reports the failure to all. (A
/// confirming second agreement was needed while the build exchanged host ids; it cost a
/// whole agreement, 8–15 ms at 16 ranks on 2 cores, docs/PERFORMANCE.md.)
pub(crate) fn shrink_agreed(parent: &Exec, abort: &Arc<AtomicBool>) -> Result<(Communicator, Vec<usize>)> {
    let boot = &parent.boot;
    let failed = boot.agree_failed_abortable(abort)?;
    let built = parent.shrunk(boot.shrink_abortable(&failed, abort.clone())?, &failed)?;
    Ok((built, failed.into_iter().map(|r| r as usize).collect()))
}

/// A group's sends to the calling rank itself must meet as many receives from it, the k-th
/// send with the k-th receive, of equal size (NCCL's pairing): `sends` and `recvs` are
/// their sizes in call order.
pub(crate) fn check_own_transfers(sends: impl Iterator<Item = usize> + Clone, recvs: impl Iterator<Item = usize> + Clone) -> Result<()> {
    let (s, r) = (sends.clone().count(), recvs.clone().count());
    if s != r {
        return Err(Error::invalid(format!("{s} sends to this rank but {r} receives from it in one group")));
    }
    match sends.zip(recvs).find(|(s, r)| s != r) {
        Some((s, r)) => Err(Error::invalid(format!("a send of {s} bytes to this rank meets a receive of {r} bytes"))),
        None => Ok(()),
    }
}

/// This host's identity: NCCL_HOSTID, else host name and boot id.
pub(crate) fn host_id(config: &Config) -> String {
    config.host_id.clone().unwrap_or_else(|| {
        let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
        format!("{}:{}", oxccl_bootstrap::host_name(), boot_id.trim())
    })
}

/// Which ranks share this rank's host ([`host_id`]).
fn host_peers(boot: &Bootstrap, config: &Config) -> Result<Vec<bool>> {
    let id = host_id(config);
    let mut record = [0u8; 128];
    let bytes = id.as_bytes();
    let len = bytes.len().min(128);
    record[..len].copy_from_slice(&bytes[..len]);
    let all = boot.allgather(&record)?;
    Ok(all.chunks_exact(128).map(|r| r == record).collect())
}
