//! The data sockets of a socket comm and their helper threads: the pieces of its large
//! messages move over the data sockets, by the comm's helper threads or, while those sleep,
//! by the caller's own calls.
//!
//! A comm with `sockets` data sockets and `threads` threads gives socket i to thread
//! i mod threads (as NCCL's socket transport does). Both ends cut a message into the same
//! pieces ([`piece_bytes`]) and deal them to the sockets in turn, carrying the turn over
//! from one message to the next; since both ends see the messages in the same order (the
//! control socket's), each data socket carries its pieces back to back and the receiver
//! knows where every byte goes without a header on the data sockets.
//!
//! Each socket's pieces are moved by whoever holds its lock: its helper thread, or the
//! caller while that thread sleeps — once when it deals them (a send only when no earlier
//! send of the comm is unfinished) and again on each later progress of the comm, one read
//! or write a socket each time, never waiting for the lock, and only pieces of at most
//! [`CALLER_PIECE_MAX`]. A lone message whose pieces the sockets take at once (one over
//! CALLER_PIECE_MAX cut in pieces of at most that over several sockets: shorter messages do
//! not come here, [`WHOLE_BYTES_MAX`](super::stream::WHOLE_BYTES_MAX)) is so done without
//! waking a thread: waking one cost 22-32 µs a message (median) on a 64-core GPU machine and
//! 2 ms on a 2-core VM whose cores the callers' polling held (docs/NET.md). Messages that
//! follow each other, longer pieces, or pieces the socket does not take at once, are moved
//! by the threads, several sockets at once, beside the caller.
//!
//! A thread starts when the first piece is dealt to it (a comm that never carries a large
//! message starts none), waits in poll(2) on its sockets that would block and on a wake-up
//! socket that the dealer writes when it leaves a sleeping thread work, and is stopped and
//! joined when the comm closes: it looks at its stop flag between every two reads or
//! writes, and is woken from poll(2) to do so.
//!
//! Failure: the first error a thread or the caller meets (the peer closed or reset a
//! socket) becomes the comm's failure, naming the socket and the peer. From then on nobody
//! reads or writes lent memory: [`DataPath::failure`] and [`DataPath::fail`] return only
//! once no thread is inside such a read or write (each holds the comm's gate for reading
//! around one), so a caller told of the error may reuse its buffers at once.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use socket2::Socket;

use super::Stats;
use crate::net::lent::{LentBuffer, LentBytes};
use crate::{Error, Result};

/// The smallest piece a message is cut into (NCCL's NCCL_SOCKET_MIN_TASKSIZE default,
/// 64 KiB). Only messages longer than [`WHOLE_BYTES_MAX`](super::stream::WHOLE_BYTES_MAX)
/// are cut: shorter ones go whole over the control socket.
pub(super) const MIN_PIECE_BYTES: usize = 64 << 10;
/// The longest piece the caller moves itself. Longer ones (a GPU network FIFO's 256 KiB
/// slots, streamed) go faster on the helper threads, which copy while the caller (a proxy
/// thread serving several links) goes on: with 4 ranks posing as hosts on one H200, busbw
/// at 32 MiB was 1.26-1.30x that of the caller moving every piece, in three runs of six
/// collectives (docs/results/2026-11-27-h200x1-caller-limit).
pub(super) const CALLER_PIECE_MAX: usize = 128 << 10;
/// How long a helper thread with nothing to do keeps looking for work (yielding the core
/// between looks) before it sleeps in poll(2).
const SPIN: Duration = Duration::from_micros(50);
/// The longest a helper thread waits in poll(2) before looking at its flags again (a stop
/// or new work wakes it at once through its wake-up socket: this only bounds a wait that
/// would otherwise have none).
const POLL_TIMEOUT_MS: u16 = 500;

/// The bytes of each piece of a `len`-byte message over `sockets` data sockets: an equal
/// share of each socket, at least [`MIN_PIECE_BYTES`].
pub(super) fn piece_bytes(len: usize, sockets: usize) -> usize {
    len.div_ceil(sockets.max(1)).max(MIN_PIECE_BYTES)
}

/// Which way a comm's data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Direction {
    Send,
    Recv,
}

/// A comm's data sockets and their helper threads.
pub(super) struct DataPath {
    sockets: Vec<Arc<DataSocket>>,
    threads: Vec<Helper>,
    /// The data socket that gets the next piece.
    next_socket: usize,
    shared: Arc<Shared>,
}

/// One data socket and the pieces dealt to it, in order; whoever holds the lock moves them.
struct DataSocket {
    socket: Socket,
    /// Its number among the comm's, for messages.
    number: usize,
    pieces: Mutex<VecDeque<Piece>>,
}

/// One helper thread: not started yet, or its inbox and handle.
enum Helper {
    NotStarted,
    Running { inbox: Arc<Inbox>, thread: JoinHandle<()> },
    Stopped,
}

/// What the comm shares with its helper threads.
struct Shared {
    direction: Direction,
    peer: SocketAddr,
    /// The comm's data sockets.
    of: usize,
    /// Set once, by the first failure; the reason is in `reason`.
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Held for reading around each read or write into lent memory, for writing by
    /// whoever needs them all to have stopped touching it (see the module's comment).
    gate: RwLock<()>,
    stats: Arc<Stats>,
}

/// How the comm wakes a helper thread.
struct Inbox {
    /// The thread is (about to be) asleep in poll(2): wake it when it has work. SeqCst
    /// against the pieces' locks: the thread marks itself, then looks at its sockets'
    /// pieces; a dealer adds pieces, then reads (and clears) the mark, so one of the two
    /// sees the other.
    asleep: AtomicBool,
    stop: AtomicBool,
    /// Written when the thread sleeps and gets work or is stopped; its other end is in
    /// the thread's poll set.
    wake: UnixStream,
}

/// A message's share of one data socket.
struct Piece {
    memory: Memory,
    moved: usize,
    /// The message's request's count of unfinished parts: one less when this piece is done.
    left: Arc<AtomicUsize>,
}

enum Memory {
    Send(LentBytes),
    Recv(LentBuffer),
}

impl Piece {
    fn len(&self) -> usize {
        match &self.memory {
            Memory::Send(data) => data.len(),
            Memory::Recv(buffer) => buffer.len(),
        }
    }
}

/// Who moves a socket's pieces.
#[derive(Clone, Copy)]
enum Mover<'a> {
    /// The comm's caller, one read or write at a time.
    Caller,
    /// Its helper thread, until this flag stops it.
    Helper(&'a AtomicBool),
}

/// What one pass over a socket did.
enum Pass {
    /// Moved bytes; the socket may take more.
    Moved,
    /// The socket would block with pieces left: wait for it.
    Blocked,
    /// Nothing to do.
    Idle,
}

impl DataPath {
    /// The data path over `sockets` (each non-blocking, in the order both ends agreed on),
    /// served by `threads` threads (at least 1, dividing the sockets evenly).
    pub(super) fn new(direction: Direction, peer: SocketAddr, sockets: Vec<Socket>, threads: usize, stats: Arc<Stats>) -> DataPath {
        debug_assert!(threads > 0 && sockets.len() % threads == 0, "{} sockets over {threads} threads", sockets.len());
        let shared = Arc::new(Shared { direction, peer, of: sockets.len(), failed: AtomicBool::new(false), reason: Mutex::new(None), gate: RwLock::new(()), stats });
        let sockets = sockets.into_iter().enumerate().map(|(number, socket)| Arc::new(DataSocket { socket, number, pieces: Mutex::new(VecDeque::new()) })).collect();
        DataPath { sockets, threads: (0..threads).map(|_| Helper::NotStarted).collect(), next_socket: 0, shared }
    }

    /// Sends `data` in pieces over the data sockets, adding one to `left` per piece (each
    /// takes one off when done); `alone` when no earlier send of the comm is unfinished
    /// (only then may the caller move its pieces at once).
    pub(super) fn send(&mut self, data: LentBytes, left: &Arc<AtomicUsize>, alone: bool) -> Result<()> {
        let piece = piece_bytes(data.len(), self.sockets.len());
        let pieces = data.split(piece);
        self.deal(pieces.into_iter().map(Memory::Send).collect(), left, alone)
    }

    /// Receives the first `len` bytes of `buffer` in pieces from the data sockets, adding
    /// one to `left` per piece.
    pub(super) fn recv(&mut self, buffer: LentBuffer, len: usize, left: &Arc<AtomicUsize>) -> Result<()> {
        let pieces = buffer.split(len, piece_bytes(len, self.sockets.len()));
        self.deal(pieces.into_iter().map(Memory::Recv).collect(), left, true)
    }

    /// Moves what the sockets whose helper thread sleeps take now of their pieces: one read
    /// or write each, on the calling thread (a failure is the comm's, reported by
    /// [`DataPath::failure`]).
    pub(super) fn progress(&self) {
        for (index, socket) in self.sockets.iter().enumerate() {
            let asleep = match &self.threads[index % self.threads.len()] {
                Helper::Running { inbox, .. } => inbox.asleep.load(Ordering::SeqCst),
                _ => true,
            };
            if asleep && self.move_now(socket).is_err() {
                return;
            }
        }
    }

    /// The comm's failure, once no helper thread touches lent memory any more.
    pub(super) fn failure(&self) -> Option<String> {
        if !self.shared.failed.load(Ordering::Acquire) {
            return None;
        }
        self.shared.quiesce();
        lock(&self.shared.reason).clone()
    }

    /// Fails the comm for `reason` (unless it failed already); returns once no helper
    /// thread touches lent memory any more.
    pub(super) fn fail(&self, reason: &str) {
        self.shared.fail(reason);
        self.shared.quiesce();
    }

    /// Stops and joins the helper threads, drops the pieces and shuts the data sockets
    /// (the peer hears of it now, not when the data path goes).
    pub(super) fn stop(&mut self) {
        for helper in &self.threads {
            if let Helper::Running { inbox, .. } = helper {
                inbox.stop.store(true, Ordering::Release);
                inbox.wake();
            }
        }
        for helper in &mut self.threads {
            if let Helper::Running { thread, .. } = std::mem::replace(helper, Helper::Stopped) {
                if thread.join().is_err() {
                    tracing::warn!(target: "oxccl::net", "a socket helper thread panicked");
                }
            }
        }
        for socket in &self.sockets {
            lock(&socket.pieces).clear();
            let _ = socket.socket.shutdown(std::net::Shutdown::Both);
        }
    }

    /// Deals pieces to the sockets in turn (starting the threads that get their first),
    /// moves what a socket takes at once where its thread sleeps (a send only when
    /// `alone`), and wakes the threads left with pieces.
    fn deal(&mut self, pieces: Vec<Memory>, left: &Arc<AtomicUsize>, alone: bool) -> Result<()> {
        if let Some(reason) = self.failure() {
            return Err(Error::Closed(reason));
        }
        left.fetch_add(pieces.len(), Ordering::Relaxed);
        let count = self.sockets.len();
        let mut dealt = vec![false; count];
        for memory in pieces {
            let socket = self.next_socket;
            self.next_socket = (socket + 1) % count;
            lock(&self.sockets[socket].pieces).push_back(Piece { memory, moved: 0, left: left.clone() });
            dealt[socket] = true;
        }
        for socket in (0..count).filter(|&s| dealt[s]) {
            let inbox = match self.start(socket % self.threads.len()) {
                Ok(inbox) => inbox.clone(),
                Err(e) => {
                    // Other threads may hold pieces of this message already: the comm
                    // fails, and they let go of the caller's memory before it hears so.
                    self.fail(&e.to_string());
                    return Err(e);
                }
            };
            if alone && inbox.asleep.load(Ordering::SeqCst) {
                self.move_now(&self.sockets[socket])?;
            }
            if !lock(&self.sockets[socket].pieces).is_empty() {
                inbox.give(&self.shared.stats);
            }
        }
        Ok(())
    }

    /// One read or write of `socket`'s pieces on the calling thread, unless another thread
    /// holds them; an error (the comm then failed) if the socket failed.
    fn move_now(&self, socket: &DataSocket) -> Result<()> {
        let mut pieces = match socket.pieces.try_lock() {
            Ok(pieces) => pieces,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(()),
        };
        if pieces.is_empty() || pieces.front().is_some_and(|p| p.len() > CALLER_PIECE_MAX) {
            return Ok(());
        }
        if let Err(reason) = self.shared.pass(socket, &mut pieces, Mover::Caller) {
            drop(pieces);
            self.fail(&reason);
            return Err(Error::Closed(reason));
        }
        Ok(())
    }

    /// Helper thread `thread`'s inbox, starting the thread if it has not started.
    fn start(&mut self, thread: usize) -> Result<&Arc<Inbox>> {
        if let Helper::NotStarted = &self.threads[thread] {
            let (wake, woken) = UnixStream::pair().map_err(|e| Error::io("making a helper thread's wake-up socket", e))?;
            wake.set_nonblocking(true).map_err(|e| Error::io("making a wake-up socket non-blocking", e))?;
            woken.set_nonblocking(true).map_err(|e| Error::io("making a wake-up socket non-blocking", e))?;
            // Asleep until it first looks for work: a caller may move pieces meanwhile.
            let inbox = Arc::new(Inbox { asleep: AtomicBool::new(true), stop: AtomicBool::new(false), wake });
            let stride = self.threads.len();
            let worker = Worker { sockets: self.sockets.iter().skip(thread).step_by(stride).cloned().collect(), inbox: inbox.clone(), woken, shared: self.shared.clone() };
            let letter = match self.shared.direction {
                Direction::Send => 'S',
                Direction::Recv => 'R',
            };
            let shared = self.shared.clone();
            let spawned = std::thread::Builder::new().name(format!("oxccl-sock{letter}{thread}")).spawn(move || {
                if catch_unwind(AssertUnwindSafe(|| worker.run())).is_err() {
                    shared.fail("a socket helper thread panicked");
                }
            });
            let thread_handle = spawned.map_err(|e| Error::io("starting a socket helper thread", e))?;
            self.shared.stats.helper_threads.fetch_add(1, Ordering::Relaxed);
            self.threads[thread] = Helper::Running { inbox, thread: thread_handle };
        }
        match &self.threads[thread] {
            Helper::Running { inbox, .. } => Ok(inbox),
            _ => Err(Error::Closed("the comm's helper threads were stopped".into())),
        }
    }
}

impl Drop for DataPath {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn fail(&self, reason: &str) {
        let mut first = lock(&self.reason);
        if first.is_none() {
            *first = Some(reason.to_string());
            self.failed.store(true, Ordering::Release);
        }
    }

    /// Waits for every helper thread to be out of its read or write into lent memory; with
    /// `failed` set before, none starts another.
    fn quiesce(&self) {
        drop(self.gate.write().unwrap_or_else(PoisonError::into_inner));
    }

    /// Moves `socket`'s `pieces` until it would block or they are done — a helper thread
    /// until its stop flag is raised, a caller for one read or write; the error names the
    /// socket.
    fn pass(&self, socket: &DataSocket, pieces: &mut VecDeque<Piece>, mover: Mover<'_>) -> std::result::Result<Pass, String> {
        let mut pass = Pass::Idle;
        let mut calls = 0;
        while let Some(piece) = pieces.front_mut() {
            let done = match mover {
                Mover::Caller => calls == 1,
                Mover::Helper(stop) => stop.load(Ordering::Relaxed),
            };
            if done {
                return Ok(pass);
            }
            calls += 1;
            let gate = self.gate.read().unwrap_or_else(PoisonError::into_inner);
            if self.failed.load(Ordering::Acquire) {
                return Ok(pass);
            }
            let result = match &mut piece.memory {
                Memory::Send(data) => socket.socket.send_with_flags(&data.as_slice()[piece.moved..], libc::MSG_NOSIGNAL),
                Memory::Recv(buffer) => {
                    let moved = piece.moved;
                    (&socket.socket).read(&mut buffer.as_mut_slice()[moved..])
                }
            };
            drop(gate);
            match result {
                Ok(0) => {
                    let what = format!("the peer closed it with {} bytes of a {}-byte piece still to move", piece.len() - piece.moved, piece.len());
                    return Err(self.describe(socket, &what));
                }
                Ok(n) => {
                    piece.moved += n;
                    let counter = match self.direction {
                        Direction::Send => &self.stats.bytes_sent,
                        Direction::Recv => &self.stats.bytes_received,
                    };
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                    if let Mover::Caller = mover {
                        self.stats.bytes_moved_by_caller.fetch_add(n as u64, Ordering::Relaxed);
                    }
                    pass = Pass::Moved;
                    if piece.moved == piece.len() {
                        // Release: the piece's bytes are in place before its request reads done.
                        piece.left.fetch_sub(1, Ordering::Release);
                        pieces.pop_front();
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Pass::Blocked),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let verb = match self.direction {
                        Direction::Send => "send",
                        Direction::Recv => "receive",
                    };
                    return Err(self.describe(socket, &format!("{verb} failed: {e}")));
                }
            }
        }
        Ok(pass)
    }

    /// "data socket 3 of 4 to 10.0.0.2:5000: <what>".
    fn describe(&self, socket: &DataSocket, what: &str) -> String {
        let way = match self.direction {
            Direction::Send => "to",
            Direction::Recv => "from",
        };
        format!("data socket {} of {} {way} {}: {what}", socket.number, self.of, self.peer)
    }
}

impl Inbox {
    /// The thread has work: wakes it if it sleeps (counted in `stats`).
    fn give(&self, stats: &Stats) {
        if self.asleep.swap(false, Ordering::SeqCst) {
            stats.helper_wakeups.fetch_add(1, Ordering::Relaxed);
            self.wake();
        }
    }

    fn wake(&self) {
        // A full wake-up socket already has a wake-up in it.
        let _ = (&self.wake).write(&[1]);
    }
}

/// What a helper thread owns.
struct Worker {
    /// Its share of the comm's data sockets.
    sockets: Vec<Arc<DataSocket>>,
    inbox: Arc<Inbox>,
    woken: UnixStream,
    shared: Arc<Shared>,
}

impl Worker {
    fn run(self) {
        let mut blocked: Vec<usize> = Vec::new();
        let mut last_moved = Instant::now();
        while !self.inbox.stop.load(Ordering::Acquire) {
            let failed = self.shared.failed.load(Ordering::Acquire);
            blocked.clear();
            let mut moved = false;
            for (index, socket) in self.sockets.iter().enumerate() {
                let mut pieces = lock(&socket.pieces);
                if failed {
                    // The comm failed: the pieces are dropped, lent memory no longer touched.
                    pieces.clear();
                    continue;
                }
                match self.shared.pass(socket, &mut pieces, Mover::Helper(&self.inbox.stop)) {
                    Ok(Pass::Moved) => moved = true,
                    Ok(Pass::Blocked) => blocked.push(index),
                    Ok(Pass::Idle) => {}
                    Err(reason) => {
                        drop(pieces);
                        self.shared.fail(&reason);
                        break;
                    }
                }
            }
            if moved {
                last_moved = Instant::now();
            } else if blocked.is_empty() && last_moved.elapsed() < SPIN {
                // Just done with a piece: the next usually follows at once, and a thread
                // woken from poll(2) starts later than one that looks again.
                std::thread::yield_now();
            } else {
                self.sleep(&blocked);
            }
        }
    }

    /// Waits until a blocked socket is ready, work comes, the thread is stopped, or the
    /// poll timeout passes.
    fn sleep(&self, blocked: &[usize]) {
        self.inbox.asleep.store(true, Ordering::SeqCst);
        // Marked asleep before looking: a dealer that adds a piece after this look sees
        // the mark and wakes the thread.
        let work = self.sockets.iter().enumerate().any(|(index, socket)| !blocked.contains(&index) && !lock(&socket.pieces).is_empty());
        if work || self.inbox.stop.load(Ordering::Acquire) {
            self.inbox.asleep.store(false, Ordering::SeqCst);
            return;
        }
        let ready = match self.shared.direction {
            Direction::Send => PollFlags::POLLOUT,
            Direction::Recv => PollFlags::POLLIN,
        };
        let mut fds = Vec::with_capacity(blocked.len() + 1);
        fds.push(PollFd::new(self.woken.as_fd(), PollFlags::POLLIN));
        fds.extend(blocked.iter().map(|&index| PollFd::new(self.sockets[index].socket.as_fd(), ready)));
        // An error (EINTR) or a timeout both mean: look again.
        let _ = poll(&mut fds, POLL_TIMEOUT_MS);
        let woken = fds[0].any().unwrap_or(false);
        drop(fds);
        if woken {
            let mut drain = [0u8; 64];
            while matches!((&self.woken).read(&mut drain), Ok(n) if n > 0) {}
        }
        self.inbox.asleep.store(false, Ordering::SeqCst);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing is left half-done under these locks: a panic elsewhere does not matter here.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
