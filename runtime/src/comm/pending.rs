//! Communicators created on a background thread: non-blocking init, split, shrink and grow
//! (`Config::blocking == false`, NCCL_COMM_BLOCKING=0, `config.blocking = 0` from C).
//!
//! Each `*_nonblocking` method returns at once with a [`PendingCommunicator`]; the creation
//! runs on a thread of its own. [`PendingCommunicator::async_error`] says `InProgress`
//! until it is done (as `ncclCommGetAsyncError` does), then nothing or the creation's
//! error. Every wait of a creation is bounded by the bootstrap timeouts and ends within
//! about 100 ms of [`PendingCommunicator::abort`] (dropping the pending communicator
//! aborts it too). While a split, shrink or grow of a communicator runs, that communicator
//! (the parent) reports `InProgress` from [`Communicator::error`] and refuses collectives,
//! as NCCL's parent does; aborting the parent aborts them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use oxccl_bootstrap::{AbortFlag, Config, UniqueId, NOCOLOR};
use parking_lot::{Condvar, Mutex};

use crate::base::Core;
use super::create::{join, shrink_agreed, shrunk};
use super::Communicator;
use crate::error::{Error, Result};

/// A communicator being created on a background thread. Poll
/// [`PendingCommunicator::async_error`] or [`PendingCommunicator::try_take`], or
/// [`PendingCommunicator::wait`]. Dropping it before it is taken aborts the creation.
pub struct PendingCommunicator {
    shared: Arc<Shared>,
    rank: usize,
    nranks: usize,
    what: &'static str,
}

struct Shared {
    state: Mutex<State>,
    done: Condvar,
    /// The abort flag of every wait of the creation (and of the new communicator's
    /// bootstrap).
    abort: AbortFlag,
}

enum State {
    Running,
    Done(Result<Communicator>, Vec<usize>),
    Taken,
}

/// A creation running from a parent communicator: the parent reports `InProgress` while
/// this lives, and aborts the creation when aborted.
pub(crate) struct Busy {
    parent: Arc<Core>,
    abort: AbortFlag,
}

impl Busy {
    pub(crate) fn new(parent: Arc<Core>, abort: AbortFlag) -> Busy {
        parent.start_creation(&abort);
        Busy { parent, abort }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.parent.end_creation(&self.abort);
    }
}

impl PendingCommunicator {
    /// Runs `create` on a thread of its own; `create` sees `abort` (set by
    /// [`PendingCommunicator::abort`]) and returns the communicator and, for a shrink by
    /// agreement, the excluded ranks.
    pub(crate) fn spawn(
        what: &'static str,
        rank: usize,
        nranks: usize,
        busy: Option<Busy>,
        abort: AbortFlag,
        create: impl FnOnce(AbortFlag) -> Result<(Communicator, Vec<usize>)> + Send + 'static,
    ) -> PendingCommunicator {
        let shared = Arc::new(Shared { state: Mutex::new(State::Running), done: Condvar::new(), abort });
        let worker = shared.clone();
        let spawned = std::thread::Builder::new().name(format!("oxccl-{what}")).spawn(move || {
            let abort = worker.abort.clone();
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| create(abort)))
                .unwrap_or_else(|_| Err(Error::Internal(format!("{what} panicked"))));
            // The parent is free again before anyone can see the creation done (a caller that
            // saw it done may use the parent at once).
            drop(busy);
            let mut state = worker.state.lock();
            // An abort that came while the creation was finishing wins: the new
            // communicator's bootstrap shares the flag, so it could not be used anyway.
            let result = match result {
                Ok((comm, _)) if worker.abort.is_raised() => {
                    comm.abort();
                    (Err(Error::Aborted { reason: format!("{what} aborted while in progress") }), Vec::new())
                }
                Ok((comm, excluded)) => (Ok(comm), excluded),
                Err(e) => (Err(e), Vec::new()),
            };
            *state = State::Done(result.0, result.1);
            worker.done.notify_all();
        });
        if let Err(e) = spawned {
            *shared.state.lock() = State::Done(Err(Error::Internal(format!("cannot start the {what} thread: {e}"))), Vec::new());
        }
        PendingCommunicator { shared, rank, nranks, what }
    }

    /// The rank the communicator will have. A split or a shrink by agreement learns it
    /// only when done: until then this is the parent's.
    pub fn rank(&self) -> usize {
        match &*self.shared.state.lock() {
            State::Done(Ok(comm), _) => comm.rank(),
            _ => self.rank,
        }
    }

    /// The number of ranks it will have (as [`PendingCommunicator::rank`]: the parent's
    /// until a split or a shrink by agreement is done).
    pub fn nranks(&self) -> usize {
        match &*self.shared.state.lock() {
            State::Done(Ok(comm), _) => comm.nranks(),
            _ => self.nranks,
        }
    }

    /// `Some(InProgress)` while creating, `None` once ready, the error if creation failed.
    /// Never blocks.
    pub fn async_error(&self) -> Option<Error> {
        match &*self.shared.state.lock() {
            State::Running => Some(self.in_progress("")),
            State::Done(Ok(_), _) | State::Taken => None,
            State::Done(Err(e), _) => Some(e.clone()),
        }
    }

    /// Waits at most `timeout` for the creation and takes the communicator out;
    /// `InProgress` if it is still running (it goes on).
    pub fn wait(&self, timeout: Duration) -> Result<Communicator> {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        while matches!(*state, State::Running) {
            if self.shared.done.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        drop(state);
        self.try_take().unwrap_or_else(|| Err(self.in_progress(&format!(" after {timeout:?}"))))
    }

    /// The communicator if creation has finished (it is then taken out), else `None`.
    pub fn try_take(&self) -> Option<Result<Communicator>> {
        let mut state = self.shared.state.lock();
        match std::mem::replace(&mut *state, State::Taken) {
            State::Running => {
                *state = State::Running;
                None
            }
            State::Done(result, excluded) => {
                if let Err(e) = &result {
                    // Keep the error for later questions.
                    *state = State::Done(Err(e.clone()), excluded);
                }
                Some(result)
            }
            State::Taken => Some(Err(Error::InvalidUsage { what: format!("the communicator of this {} was already taken", self.what) })),
        }
    }

    /// For a shrink by agreement ([`Communicator::shrink_failed_nonblocking`]): the ranks
    /// of the parent it excluded, once done (empty for other creations); `None` while it
    /// runs or if it failed.
    pub fn excluded(&self) -> Option<Vec<usize>> {
        match &*self.shared.state.lock() {
            State::Done(Ok(_), excluded) => Some(excluded.clone()),
            _ => None,
        }
    }

    /// Stops the creation from any thread: its waits end with `Aborted` within about
    /// 100 ms. A communicator already created and not yet taken is aborted too; one taken
    /// out is not touched.
    pub fn abort(&self) {
        match &*self.shared.state.lock() {
            State::Running => self.shared.abort.raise(),
            State::Done(Ok(comm), _) => comm.abort(),
            // A communicator taken out is the caller's: abort it directly.
            State::Done(Err(_), _) | State::Taken => {}
        }
    }

    fn in_progress(&self, suffix: &str) -> Error {
        Error::InProgress { what: format!("{}: rank {} of {} is still being created{suffix}", self.what, self.rank, self.nranks) }
    }
}

impl Drop for PendingCommunicator {
    fn drop(&mut self) {
        // Abandoned while running: nobody will take the result, so stop waiting for peers.
        let state = self.shared.state.lock();
        if matches!(*state, State::Running) {
            self.shared.abort.raise();
        }
    }
}

impl Communicator {
    /// Joins as [`Communicator::init`] does, on a background thread: returns at once.
    pub fn init_nonblocking(id: &UniqueId, rank: u32, nranks: u32, config: &Config) -> PendingCommunicator {
        let (id, config) = (*id, config.clone());
        let abort = AbortFlag::new();
        PendingCommunicator::spawn("init", rank as usize, nranks as usize, None, abort, move |abort| Ok((join(&id, rank, nranks, &config, abort, None)?, Vec::new())))
    }

    /// [`Communicator::split`] on a background thread: returns at once. `Ok(None)` for
    /// [`NOCOLOR`]: this rank joins nothing but still takes part in the exchange, in the
    /// background; this communicator reports `InProgress` until it is done (then any
    /// failure of the exchange), as NCCL's parent does. Errors at once if this
    /// communicator cannot split now (aborted, broken, or busy with another creation).
    pub fn split_nonblocking(&self, color: i32, key: i32) -> Result<Option<PendingCommunicator>> {
        if self.revoked().is_none() {
            self.check_usable()?;
        }
        let abort = AbortFlag::new();
        let busy = Busy::new(self.core.clone(), abort.clone());
        let parent = self.core.clone();
        if color == NOCOLOR {
            let spawned = std::thread::Builder::new().name("oxccl-split".into()).spawn(move || {
                if let Err(e) = parent.boot.split(color, key, abort) {
                    busy.parent.record_background_error(e.into());
                }
                drop(busy);
            });
            return match spawned {
                Ok(_) => Ok(None),
                Err(e) => Err(Error::Internal(format!("cannot start the split thread: {e}"))),
            };
        }
        let (config, memory) = (self.config().clone(), self.memory());
        // The rank and size are known only after the exchange.
        Ok(Some(PendingCommunicator::spawn("split", self.rank(), self.nranks(), Some(busy), abort, move |abort| {
            let boot = parent.boot.split(color, key, abort)?.ok_or_else(|| Error::Internal("a split with a color joined nothing".into()))?;
            Ok((Communicator::from_bootstrap(boot, &config)?.with_memory(memory)?, Vec::new()))
        })))
    }

    /// [`Communicator::shrink`] on a background thread: returns at once. Arguments are
    /// checked here (an error names what was wrong).
    pub fn shrink_nonblocking(&self, exclude: &[usize], abort_first: bool) -> Result<PendingCommunicator> {
        if abort_first {
            self.abort();
        }
        let abort = AbortFlag::new();
        let exclude: Vec<u32> = exclude.iter().map(|&r| u32::try_from(r).unwrap_or(u32::MAX)).collect();
        // No message is exchanged: the new bootstrap is made here, in call order.
        let boot = self.core.boot.shrink(&exclude, abort.clone())?;
        let (rank, nranks) = (boot.rank() as usize, boot.nranks() as usize);
        let busy = Busy::new(self.core.clone(), abort.clone());
        let (parent, memory) = (self.core.clone(), self.memory());
        Ok(PendingCommunicator::spawn("shrink", rank, nranks, Some(busy), abort, move |_| Ok((shrunk(&parent, boot, &exclude, memory)?, Vec::new()))))
    }

    /// [`Communicator::shrink_failed`] on a background thread: returns at once; the
    /// excluded ranks are in [`PendingCommunicator::excluded`] once done. The new rank and
    /// size are not known before the agreement: the pending communicator reports this
    /// communicator's.
    pub fn shrink_failed_nonblocking(&self, abort_first: bool) -> PendingCommunicator {
        if abort_first {
            self.abort();
        }
        let abort = AbortFlag::new();
        let busy = Busy::new(self.core.clone(), abort.clone());
        let (parent, memory) = (self.core.clone(), self.memory());
        PendingCommunicator::spawn("shrink", self.rank(), self.nranks(), Some(busy), abort, move |abort| shrink_agreed(&parent, memory, &abort))
    }

    /// [`Communicator::grow`] on a background thread: returns at once. Arguments are
    /// checked here. New ranks join with [`Communicator::init_nonblocking`] (or `init`).
    pub fn grow_nonblocking(&self, nranks: usize, id: &UniqueId) -> Result<PendingCommunicator> {
        let n = self.check_grow(nranks)?;
        let abort = AbortFlag::new();
        let busy = Busy::new(self.core.clone(), abort.clone());
        let (id, rank, config, parent, memory) = (*id, self.rank() as u32, self.config().clone(), self.core.clone(), self.memory());
        Ok(PendingCommunicator::spawn("grow", self.rank(), nranks, Some(busy), abort, move |abort| {
            Ok((join(&id, rank, n, &config, abort, Some(&parent.boot))?.with_memory(memory)?, Vec::new()))
        }))
    }
}
