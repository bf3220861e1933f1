//! The helper threads of a socket comm: they move the pieces of its large messages over
//! its data sockets, so that the caller's calls only read and write the control socket.
//!
//! A comm with `sockets` data sockets and `threads` threads gives socket i to thread
//! i mod threads (as NCCL's socket transport does). Both ends cut a message into the same
//! pieces ([`piece_bytes`]) and deal them to the sockets in turn, carrying the turn over
//! from one message to the next; since both ends see the messages in the same order (the
//! control socket's), each data socket carries its pieces back to back and the receiver
//! knows where every byte goes without a header on the data sockets.
//!
//! A thread starts when the first piece is dealt to it (a comm that never carries a large
//! message starts none), waits in poll(2) on its sockets that would block and on a wake-up
//! socket that the dealer writes when it gives a sleeping thread work, and is stopped and
//! joined when the comm closes: it looks at its stop flag between every two reads or
//! writes, and is woken from poll(2) to do so.
//!
//! Failure: the first error a thread meets (the peer closed or reset a socket) becomes the
//! comm's failure, naming the socket and the peer. From then on no thread reads or writes
//! lent memory: [`DataPath::failure`] and [`DataPath::fail`] return only once no thread is
//! inside such a read or write (each holds the comm's gate for reading around one), so a
//! caller told of the error may reuse its buffers at once.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::poll::{poll, PollFd, PollFlags};
use socket2::Socket;

use super::Stats;
use crate::net::lent::{LentBuffer, LentBytes};
use crate::{Error, Result};

/// The smallest piece a message is cut into: smaller messages go whole over the control
/// socket (NCCL's NCCL_SOCKET_MIN_TASKSIZE default, 64 KiB).
pub(super) const MIN_PIECE_BYTES: usize = 64 << 10;
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
    direction: Direction,
    peer: SocketAddr,
    sockets: usize,
    threads: Vec<Helper>,
    /// The data socket that gets the next piece.
    next_socket: usize,
    shared: Arc<Shared>,
}

/// One helper thread: its sockets until it starts, then its inbox and handle.
enum Helper {
    NotStarted(Vec<Socket>),
    Running { inbox: Arc<Inbox>, thread: JoinHandle<()> },
    Stopped,
}

/// What the comm shares with its helper threads.
struct Shared {
    /// Set once, by the first failure; the reason is in `reason`.
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
    /// Held for reading around each read or write into lent memory, for writing by
    /// whoever needs them all to have stopped touching it (see the module's comment).
    gate: RwLock<()>,
    stats: Arc<Stats>,
}

/// How the comm gives a helper thread work.
struct Inbox {
    state: Mutex<InboxState>,
    stop: AtomicBool,
    /// Written when the thread sleeps and gets work or is stopped; its other end is in
    /// the thread's poll set.
    wake: UnixStream,
}

#[derive(Default)]
struct InboxState {
    /// Pieces dealt to the thread, with the number of their socket among the thread's.
    pieces: Vec<(usize, Piece)>,
    /// The thread is (about to be) asleep in poll(2): wake it.
    asleep: bool,
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

impl DataPath {
    /// The data path over `sockets` (each non-blocking, in the order both ends agreed on),
    /// served by `threads` threads (at least 1, dividing the sockets evenly).
    pub(super) fn new(direction: Direction, peer: SocketAddr, sockets: Vec<Socket>, threads: usize, stats: Arc<Stats>) -> DataPath {
        debug_assert!(threads > 0 && sockets.len() % threads == 0, "{} sockets over {threads} threads", sockets.len());
        let count = sockets.len();
        let mut shares: Vec<Vec<Socket>> = (0..threads).map(|_| Vec::new()).collect();
        for (index, socket) in sockets.into_iter().enumerate() {
            shares[index % threads].push(socket);
        }
        let shared = Arc::new(Shared { failed: AtomicBool::new(false), reason: Mutex::new(None), gate: RwLock::new(()), stats });
        DataPath { direction, peer, sockets: count, threads: shares.into_iter().map(Helper::NotStarted).collect(), next_socket: 0, shared }
    }

    /// Sends `data` in pieces over the data sockets, adding one to `left` per piece (each
    /// takes one off when done).
    pub(super) fn send(&mut self, data: LentBytes, left: &Arc<AtomicUsize>) -> Result<()> {
        let piece = piece_bytes(data.len(), self.sockets);
        let pieces = data.split(piece);
        self.deal(pieces.into_iter().map(Memory::Send).collect(), left)
    }

    /// Receives the first `len` bytes of `buffer` in pieces from the data sockets, adding
    /// one to `left` per piece.
    pub(super) fn recv(&mut self, buffer: LentBuffer, len: usize, left: &Arc<AtomicUsize>) -> Result<()> {
        let pieces = buffer.split(len, piece_bytes(len, self.sockets));
        self.deal(pieces.into_iter().map(Memory::Recv).collect(), left)
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

    /// Stops and joins the helper threads and closes the data sockets; the pieces the
    /// threads held are dropped.
    pub(super) fn stop(&mut self) {
        for helper in &self.threads {
            if let Helper::Running { inbox, .. } = helper {
                inbox.stop.store(true, Ordering::Release);
                inbox.wake();
            }
        }
        for helper in &mut self.threads {
            // Sockets of threads not started are closed here, those of the others as
            // their threads end.
            if let Helper::Running { thread, .. } = std::mem::replace(helper, Helper::Stopped) {
                if thread.join().is_err() {
                    tracing::warn!(target: "oxccl::net", "a socket helper thread panicked");
                }
            }
        }
    }

    /// Deals pieces to the sockets in turn, starting the threads that get their first.
    fn deal(&mut self, pieces: Vec<Memory>, left: &Arc<AtomicUsize>) -> Result<()> {
        if let Some(reason) = self.failure() {
            return Err(Error::Closed(reason));
        }
        left.fetch_add(pieces.len(), Ordering::Relaxed);
        let threads = self.threads.len();
        let mut dealt: Vec<Vec<(usize, Piece)>> = (0..threads).map(|_| Vec::new()).collect();
        for memory in pieces {
            let socket = self.next_socket;
            self.next_socket = (socket + 1) % self.sockets;
            dealt[socket % threads].push((socket / threads, Piece { memory, moved: 0, left: left.clone() }));
        }
        for (thread, pieces) in dealt.into_iter().enumerate() {
            if pieces.is_empty() {
                continue;
            }
            match self.start(thread) {
                Ok(inbox) => inbox.give(pieces),
                Err(e) => {
                    // Other threads may hold pieces of this message already: the comm
                    // fails, and they let go of the caller's memory before it hears so.
                    self.fail(&e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Helper thread `thread`'s inbox, starting the thread if it has not started.
    fn start(&mut self, thread: usize) -> Result<&Inbox> {
        if let Helper::NotStarted(_) = &self.threads[thread] {
            let Helper::NotStarted(sockets) = std::mem::replace(&mut self.threads[thread], Helper::Stopped) else { unreachable!("matched above") };
            let (wake, woken) = UnixStream::pair().map_err(|e| Error::io("making a helper thread's wake-up socket", e))?;
            wake.set_nonblocking(true).map_err(|e| Error::io("making a wake-up socket non-blocking", e))?;
            woken.set_nonblocking(true).map_err(|e| Error::io("making a wake-up socket non-blocking", e))?;
            let inbox = Arc::new(Inbox { state: Mutex::new(InboxState::default()), stop: AtomicBool::new(false), wake });
            let worker = Worker {
                direction: self.direction,
                peer: self.peer,
                first_socket: thread,
                stride: self.threads.len(),
                of: self.sockets,
                queues: sockets.iter().map(|_| VecDeque::new()).collect(),
                sockets,
                inbox: inbox.clone(),
                woken,
                shared: self.shared.clone(),
            };
            let letter = match self.direction {
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
}

impl Inbox {
    fn give(&self, pieces: Vec<(usize, Piece)>) {
        let mut state = lock(&self.state);
        state.pieces.extend(pieces);
        let asleep = std::mem::replace(&mut state.asleep, false);
        drop(state);
        if asleep {
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
    direction: Direction,
    peer: SocketAddr,
    /// Its sockets are numbers first_socket, first_socket + stride, ... of `of`.
    first_socket: usize,
    stride: usize,
    of: usize,
    sockets: Vec<Socket>,
    /// Each socket's pieces, in the order dealt.
    queues: Vec<VecDeque<Piece>>,
    inbox: Arc<Inbox>,
    woken: UnixStream,
    shared: Arc<Shared>,
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

impl Worker {
    fn run(mut self) {
        let mut blocked: Vec<usize> = Vec::new();
        let mut last_moved = Instant::now();
        while !self.inbox.stop.load(Ordering::Acquire) {
            for (index, piece) in lock(&self.inbox.state).pieces.drain(..) {
                self.queues[index].push_back(piece);
            }
            if self.shared.failed.load(Ordering::Acquire) {
                // The comm failed: the pieces are dropped, lent memory no longer touched.
                self.queues.iter_mut().for_each(VecDeque::clear);
            }
            blocked.clear();
            let mut moved = false;
            for index in 0..self.sockets.len() {
                match self.pass(index) {
                    Ok(Pass::Moved) => moved = true,
                    Ok(Pass::Blocked) => blocked.push(index),
                    Ok(Pass::Idle) => {}
                    Err(reason) => {
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

    /// Moves the pieces of socket `index` until it would block or they are done.
    fn pass(&mut self, index: usize) -> std::result::Result<Pass, String> {
        let mut pass = Pass::Idle;
        let socket = &self.sockets[index];
        while let Some(piece) = self.queues[index].front_mut() {
            if self.inbox.stop.load(Ordering::Relaxed) {
                return Ok(pass);
            }
            let gate = self.shared.gate.read().unwrap_or_else(PoisonError::into_inner);
            if self.shared.failed.load(Ordering::Acquire) {
                return Ok(pass);
            }
            let result = match &mut piece.memory {
                Memory::Send(data) => socket.send_with_flags(&data.as_slice()[piece.moved..], libc::MSG_NOSIGNAL),
                Memory::Recv(buffer) => {
                    let moved = piece.moved;
                    (&*socket).read(&mut buffer.as_mut_slice()[moved..])
                }
            };
            drop(gate);
            match result {
                Ok(0) => {
                    let what = format!("the peer closed it with {} bytes of a {}-byte piece still to move", piece.len() - piece.moved, piece.len());
                    return Err(self.describe(index, &what));
                }
                Ok(n) => {
                    piece.moved += n;
                    let counter = match self.direction {
                        Direction::Send => &self.shared.stats.bytes_sent,
                        Direction::Recv => &self.shared.stats.bytes_received,
                    };
                    counter.fetch_add(n as u64, Ordering::Relaxed);
                    pass = Pass::Moved;
                    if piece.moved == piece.len() {
                        // Release: the piece's bytes are in place before its request reads done.
                        piece.left.fetch_sub(1, Ordering::Release);
                        self.queues[index].pop_front();
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(Pass::Blocked),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    let verb = match self.direction {
                        Direction::Send => "send",
                        Direction::Recv => "receive",
                    };
                    return Err(self.describe(index, &format!("{verb} failed: {e}")));
                }
            }
        }
        Ok(pass)
    }

    /// "data socket 3 of 4 to 10.0.0.2:5000: <what>".
    fn describe(&self, index: usize, what: &str) -> String {
        let number = self.first_socket + index * self.stride;
        let way = match self.direction {
            Direction::Send => "to",
            Direction::Recv => "from",
        };
        format!("data socket {number} of {} {way} {}: {what}", self.of, self.peer)
    }

    /// Waits until a blocked socket is ready, work comes, the thread is stopped, or the
    /// poll timeout passes.
    fn sleep(&mut self, blocked: &[usize]) {
        {
            let mut state = lock(&self.inbox.state);
            if !state.pieces.is_empty() || self.inbox.stop.load(Ordering::Acquire) {
                return;
            }
            state.asleep = true;
        }
        let ready = match self.direction {
            Direction::Send => PollFlags::POLLOUT,
            Direction::Recv => PollFlags::POLLIN,
        };
        let mut fds = Vec::with_capacity(blocked.len() + 1);
        fds.push(PollFd::new(self.woken.as_fd(), PollFlags::POLLIN));
        fds.extend(blocked.iter().map(|&index| PollFd::new(self.sockets[index].as_fd(), ready)));
        // An error (EINTR) or a timeout both mean: look again.
        let _ = poll(&mut fds, POLL_TIMEOUT_MS);
        let woken = fds[0].any().unwrap_or(false);
        drop(fds);
        if woken {
            let mut drain = [0u8; 64];
            while matches!((&self.woken).read(&mut drain), Ok(n) if n > 0) {}
        }
        lock(&self.inbox.state).asleep = false;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing is left half-done under these locks: a panic elsewhere does not matter here.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
