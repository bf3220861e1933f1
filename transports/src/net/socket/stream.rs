//! The control socket of one socket comm: queued requests progressed over a non-blocking
//! TCP socket whenever a request of the comm is tested, handing large messages' bytes to the
//! comm's data path ([`DataPath`]) where it has one.
//!
//! Wire format: each message is a 12-byte header (tag: u32 LE, length: u64 LE) on the
//! control socket, followed there by the bytes unless the comm has data sockets and the
//! message is longer than [`WHOLE_BYTES_MAX`]: those go in pieces over the data sockets.
//! The sender writes header and bytes with one `sendmsg` (MSG_NOSIGNAL, so a peer that went
//! away is an error, not a SIGPIPE in a C host program). The receiver reads what has
//! arrived into a staging buffer of [`STAGE_BYTES`] (so that a small message's header and
//! bytes, and the next messages', come in one read; after a message of [`STAGE_BYTES`] or
//! more, only the next header, so that a stream of large messages is never copied out of
//! the stage; after one of at most [`PEEK_BYTES`], a peek, so that Linux acknowledges the
//! bytes with the next read, not the one that takes them: [`RecvState::small`]), picks the
//! buffer of the oldest posted receive with the header's tag, and copies the bytes there,
//! or deals the buffer's pieces to the data path; what is left of a message on the control
//! socket once the stage is empty is read straight into its buffer, with what follows it
//! into the stage in the same call (`readv`).
//!
//! A comm is eager or receiver-driven (the listener's choice, in its handle). Eager, the
//! sender writes each message at once and the receiver matches it to the oldest posted
//! receive, which must have a buffer with its tag (messages and receives in the same
//! order). Receiver-driven, as NCCL's IB transport with its clear-to-send FIFO, the receiver
//! writes a notice on the control socket for each receive it posts (the buffers' tags:
//! u32 LE count, then each tag as u32 LE), and the sender sends a message only once a
//! notice cleared its tag (`isend` answers "later" until then): several independent
//! senders' messages may then share the comm in any order (PXN's relays of several ranks'
//! sends to one receiver), none waiting in the stream for a receive not yet posted; a
//! message goes to the oldest posted receive with a free buffer of its tag. Messages of at
//! most [`EAGER_BYTES`] need no clearance on such a comm: they go ahead of their notices
//! while the room ahead lasts ([`AHEAD_BYTES`] and [`AHEAD_MESSAGES`] for the messages not
//! yet paid off; each later notice of their tag pays one off before it clears another
//! message), and the receiver keeps one that arrives before a receive with a free buffer of
//! its tag in a stage of its own until one is posted — a message in pieces too, whose pieces
//! the data path writes into that stage (a receive posted while they arrive takes its
//! buffer for it, filled once they are in).
//! The sender reads notices only when neither one already read nor room ahead lets a
//! message go, so a small message's send costs no read of the socket while there is room.
//! The receiver holds back the notices of buffers whose messages may go ahead of them
//! ([`Notices`]): they are written together once [`HELD_NOTICES`] or buffers of
//! [`HELD_NOTICE_BYTES`] are held, with the first notice a message needs (a buffer over
//! [`EAGER_BYTES`]), or once the sender asks: a sender whose room ahead is used up writes
//! a header of length [`ASK`] on the control socket (once until notices come), and the
//! receiver that reads it writes what it holds, and the next notices at once. Each write of
//! a small segment costs the receiver a pass through the TCP stack; no notice waits on a
//! clock.
//! A message so never waits for the receiver to post (a small broadcast's receive is often
//! posted after its send is ready: NCCL's proxy, told "later", yields its core).
//!
//! Each request has a count of its unfinished parts, shared with the data path: a send
//! starts at 1 (its control bytes), a receive at its number of buffers (their headers and
//! control bytes); each piece dealt adds one, and each part done takes one off. The request
//! is done at 0, whichever thread got there.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, IoSlice, IoSliceMut, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use socket2::Socket;

use super::helpers::{DataPath, CALLER_PIECE_MAX};
use super::Stats;
use crate::net::lent::{LentBuffer, LentBytes};
use crate::{Error, Result};

const HEADER_BYTES: usize = 12;

/// What a send comm holds.
pub(super) struct SendState {
    socket: Socket,
    /// Messages whose control bytes are not all written yet, oldest first.
    queue: VecDeque<Outgoing>,
    /// The unfinished-part counts of the requests not yet known to be done.
    requests: Vec<Arc<AtomicUsize>>,
    data: Option<DataPath>,
    failed: Option<String>,
    stats: Arc<Stats>,
    /// A receiver-driven comm's clearances (`None`: eager).
    clearance: Option<Clearance>,
}

/// What the receiver of a receiver-driven comm cleared: how many messages of each tag may
/// go, and the start of a notice not read whole yet.
#[derive(Default)]
struct Clearance {
    tags: HashMap<u32, u32>,
    partial: Vec<u8>,
    /// The lengths of the messages of each tag sent ahead of their notices, oldest first
    /// (a notice of the tag pays off the oldest).
    ahead: HashMap<u32, VecDeque<usize>>,
    /// Their count and bytes, all tags together.
    ahead_messages: usize,
    ahead_bytes: usize,
    /// The room ran out and the sender asked for the notices held back; none read since.
    asked: bool,
}

/// The room ahead of a receiver-driven comm: the bytes of the messages its sender may have
/// sent ahead of their notices, and so the most its receiver keeps as early messages (8 of
/// the longest that go ahead, [`EAGER_BYTES`]; 16 of NCCL's largest network message,
/// 512 KiB, twice its pipeline depth NCCL_STEPS). Counted in bytes, not messages, so that
/// small messages, whose time is latency, run far ahead: a small broadcast's root, faster
/// than its receiver for the whole run, then never waits for a notice while the receiver
/// has its messages to take.
pub(super) const AHEAD_BYTES: usize = 8 << 20;
/// The most messages ahead of their notices, whatever their size: the receiver keeps each
/// early one in a stage of its own.
pub(super) const AHEAD_MESSAGES: usize = 1024;
/// The longest message that goes ahead of its notice.
pub(super) const EAGER_BYTES: usize = 1 << 20;

/// Tags in one notice at most (a receive's buffers: the Net's `max_recvs` is far below).
const MAX_NOTICE_TAGS: usize = 4096;

/// Notices of buffers whose messages may go ahead of them that the receiver holds back at
/// most, to write in one call: a quarter of the messages the room ahead holds.
pub(super) const HELD_NOTICES: usize = AHEAD_MESSAGES / 4;
/// The most bytes of buffers whose notices the receiver holds back: a quarter of the room
/// ahead, so that the messages it holds notices of, with as many again in flight, leave the
/// sender room; where they do not, the sender asks for them ([`ASK`]).
pub(super) const HELD_NOTICE_BYTES: usize = AHEAD_BYTES / 4;
/// The length in a header that is no message: the sender's room ahead is used up, and it
/// asks the receiver for the notices it holds back.
const ASK: u64 = u64::MAX;

struct Outgoing {
    header: [u8; HEADER_BYTES],
    /// The bytes that follow the header on the control socket (none for a message that
    /// goes over the data sockets, or an ask for notices).
    data: Option<LentBytes>,
    written: usize,
    left: Arc<AtomicUsize>,
}

/// What a receive comm holds.
pub(super) struct RecvState {
    socket: Socket,
    queue: VecDeque<Incoming>,
    next_id: u64,
    header: [u8; HEADER_BYTES],
    header_read: usize,
    /// The message whose bytes are being read.
    body: Option<Body>,
    /// Bytes read from the socket and not yet consumed: `stage[staged.0..staged.1]`.
    stage: Box<[u8]>,
    staged: (usize, usize),
    /// A read of this progress call got less than it asked for: the socket had nothing
    /// more then, so the call does not read again just to hear "would block" (a receive
    /// completes while another is posted behind it, as a proxy posts them).
    drained: bool,
    /// The last message was at least [`STAGE_BYTES`] long: a stream of large messages. Its
    /// reads then ask the stage for no more than the next header, so that the next body
    /// goes straight into its buffer too, never through the stage (a copy of up to
    /// [`STAGE_BYTES`] a message; NCCL's socket transport reads its size word alone too).
    bulk: bool,
    /// The last message was at most [`PEEK_BYTES`] long: the next read of the empty stage
    /// peeks (`MSG_PEEK`), leaving the bytes in the socket; the read after it, once the
    /// stage is used up, takes them out again ([`RecvState::fill`]). Linux sends the
    /// acknowledgement of a small pushed segment from the read that empties the socket; a
    /// peek does not, so the receive completes without it and the ACK goes out with the
    /// next look for a message, after the caller took this one (over loopback it cost the
    /// read 2 µs: its transmission and the sender's processing of it, docs/NET.md).
    small: bool,
    /// Bytes at the head of the socket that the stage held as a peek, all used: the next
    /// read of the stage skips them, a read into a buffer discards them first
    /// ([`RecvState::settle`]).
    peeked: usize,
    /// Reads of the control socket so far ("would block" included): the comm's own count,
    /// not the net's shared [`Stats`], whose atomics every poll of every proxy thread would
    /// otherwise hit.
    pub(super) control_reads: u64,
    /// Sizes of requests whose headers all arrived that `test` has not collected yet.
    completed: HashMap<u64, Vec<usize>>,
    /// Declared before `early`: dropped first, so that its threads are joined before the
    /// stages of early messages in pieces, which they may be writing, go.
    data: Option<DataPath>,
    failed: Option<String>,
    stats: Arc<Stats>,
    /// Receiver-driven: notices of posted receives not yet written (`None`: eager).
    notices: Option<Notices>,
    /// Receiver-driven: messages that arrived ahead of a receive with a free buffer of
    /// their tag, oldest first, and their bytes.
    early: VecDeque<Early>,
    early_bytes: usize,
    /// Early messages that took a buffer while they were still arriving.
    awaited: usize,
    /// Stages of early messages handed over, kept for the next ones (at most
    /// [`SPARE_STAGES`], of [`AHEAD_BYTES`] together), and their bytes: a new one would be
    /// zeroed and faulted in at every use.
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
}

/// The notices a receiver-driven comm's receiver has not written yet.
#[derive(Default)]
struct Notices {
    bytes: Vec<u8>,
    /// Buffers noticed in `bytes` that are held back, and their bytes.
    held: usize,
    held_bytes: usize,
    /// `bytes` go out with the next write, however many: a buffer needs its notice before
    /// its message goes, or enough were held, or the sender asked (then also the next
    /// notice, if none is held).
    due: bool,
}

impl Notices {
    /// Adds the notice of a receive's buffers (their tags and lengths); `needed`: one of its
    /// messages may not go ahead of it.
    fn add(&mut self, buffers: &[(LentBuffer, u32)], needed: bool) {
        self.bytes.extend_from_slice(&(buffers.len() as u32).to_le_bytes());
        for (buffer, tag) in buffers {
            self.bytes.extend_from_slice(&tag.to_le_bytes());
            self.held_bytes += buffer.len();
        }
        self.held += buffers.len();
        self.due |= needed || self.held >= HELD_NOTICES || self.held_bytes >= HELD_NOTICE_BYTES;
    }

    /// `n` more bytes written.
    fn written(&mut self, n: usize) {
        self.bytes.drain(..n);
        if self.bytes.is_empty() {
            (self.held, self.held_bytes, self.due) = (0, 0, false);
        }
    }
}

/// A message kept by the receiver until a receive with a free buffer of its tag is posted.
struct Early {
    tag: u32,
    /// Its bytes, at the start of a stage that may be longer (a reused one).
    stage: Vec<u8>,
    len: usize,
    /// A message in pieces: its pieces not yet in the stage (the data path writes them
    /// there, and nobody else touches the stage until this is 0).
    pieces: Option<Arc<AtomicUsize>>,
    /// The buffer (receive id, index) taken for it while it was still arriving.
    receive: Option<(u64, usize)>,
}

impl Early {
    /// Its bytes (once whole: [`RecvState::early_whole`]).
    fn bytes(&self) -> &[u8] {
        &self.stage[..self.len]
    }
}

/// Stages of early messages a receiver-driven comm keeps for the next ones at most.
const SPARE_STAGES: usize = 64;

/// The receiver's staging buffer: a small message and its header arrive in one read.
const STAGE_BYTES: usize = 64 << 10;

/// After a message of at most this many bytes the receiver peeks ([`RecvState::small`]):
/// small calls' messages, whose time is latency; a stream of larger ones is read without
/// the extra call a peek costs.
const PEEK_BYTES: usize = 32 << 10;

/// The most peeked bytes the next read of the stage takes again (a copy) rather than
/// discarding them first (a call).
const MERGE_BYTES: usize = 4 << 10;

struct Incoming {
    id: u64,
    buffers: Vec<(LentBuffer, u32)>,
    slots: Vec<Slot>,
    left: Arc<AtomicUsize>,
}

/// What a posted buffer holds.
#[derive(Clone, Copy)]
enum Slot {
    Free,
    /// Taken by an early message still arriving.
    Taken,
    /// A message of this many bytes.
    Filled(usize),
}

/// The sizes of a receive's messages once every buffer holds one (nothing allocated before).
fn filled(slots: &[Slot]) -> Option<Vec<usize>> {
    let len = |slot: &Slot| match *slot {
        Slot::Filled(len) => Some(len),
        Slot::Free | Slot::Taken => None,
    };
    slots.iter().all(|slot| len(slot).is_some()).then(|| slots.iter().filter_map(len).collect())
}

#[derive(Clone, Copy)]
struct Body {
    /// The receive (its id) and its buffer the message goes to, unless `early`: then the
    /// newest of the comm's early messages.
    request: u64,
    buffer: usize,
    early: bool,
    len: usize,
    read: usize,
}

/// The longest message that goes whole over the control socket of a comm that has data
/// sockets too: the longest piece the caller would move itself ([`CALLER_PIECE_MAX`]). In
/// one piece over a data socket such a message costs the receiver a header read on the
/// control socket before its piece is dealt, and each end a helper thread's wake-up where
/// the socket does not take the piece at once; whole, the callers move it in their own
/// calls, as NCCL's socket transport moves every message by default. NCCL over the plugin
/// with `mpirun --bind-to none` (a data socket per comm), on one H200 with two ranks posing
/// as hosts, six rounds each: all_reduce, all_gather and reduce_scatter at 512 KiB (128 KiB
/// messages) took 0.82-0.83x the time they took with messages in pieces from 64 KiB, at
/// 1 MiB 0.85-0.94x, alltoall 0.78-0.92x at every size of 256 KiB-16 MiB; from 4 MiB (512
/// KiB messages, in pieces either way) the three alike (docs/NET.md).
pub(super) const WHOLE_BYTES_MAX: usize = CALLER_PIECE_MAX;

/// A message's header on the control socket: its tag and length (or [`ASK`]).
fn header(tag: u32, len: u64) -> [u8; HEADER_BYTES] {
    let mut header = [0u8; HEADER_BYTES];
    header[..4].copy_from_slice(&tag.to_le_bytes());
    header[4..].copy_from_slice(&len.to_le_bytes());
    header
}

/// Whether a message of `len` bytes goes over the data sockets of a comm with `data`.
fn in_pieces(data: &Option<DataPath>, len: usize) -> bool {
    data.is_some() && len > WHOLE_BYTES_MAX
}

/// Whether a message of `len` bytes may go ahead of its notice on a receiver-driven comm:
/// at most [`EAGER_BYTES`] (over the control socket or in pieces).
fn goes_ahead(len: usize) -> bool {
    len <= EAGER_BYTES
}

impl SendState {
    /// A send comm over its sockets; receiver-driven when `cleared`.
    pub(super) fn new(socket: Socket, data: Option<DataPath>, stats: Arc<Stats>, cleared: bool) -> SendState {
        SendState { socket, queue: VecDeque::new(), requests: Vec::new(), data, failed: None, stats, clearance: cleared.then(Clearance::default) }
    }

    /// Whether a message of `len` bytes with `tag` may go now (always, on an eager comm),
    /// counting it against its clearance, or among those ahead of their notices, if so.
    pub(super) fn clear(&mut self, tag: u32, len: usize) -> Result<bool> {
        if let Some(reason) = &self.failed {
            return Err(Error::Closed(reason.clone()));
        }
        let ahead_allowed = goes_ahead(len);
        let Some(clearance) = &mut self.clearance else { return Ok(true) };
        // Notices already read first, then room to go ahead: the socket is read only when
        // neither lets the message go, so a small message's send is not held up by a
        // read (or two) of the control socket every time. Notices left unread pay off the
        // messages sent ahead once they are read, as they would have cleared them: the
        // receiver sees the same messages either way.
        if take_clearance(&mut clearance.tags, tag) || clearance.go_ahead(tag, len, ahead_allowed) {
            return Ok(true);
        }
        self.read_notices()?;
        let clearance = self.clearance.as_mut().expect("receiver-driven");
        if take_clearance(&mut clearance.tags, tag) || clearance.go_ahead(tag, len, ahead_allowed) {
            return Ok(true);
        }
        // No notice clears it and no room is left ahead: the receiver may hold notices back.
        if ahead_allowed && !clearance.asked {
            clearance.asked = true;
            self.queue.push_back(Outgoing { header: header(0, ASK), data: None, written: 0, left: Arc::new(AtomicUsize::new(1)) });
            self.stats.asks.fetch_add(1, Ordering::Relaxed);
            self.write_control()?;
        }
        Ok(false)
    }

    /// Reads the notices that have arrived.
    fn read_notices(&mut self) -> Result<()> {
        let clearance = self.clearance.as_mut().expect("receiver-driven");
        let mut bytes = [0u8; 4096];
        loop {
            self.stats.notice_reads.fetch_add(1, Ordering::Relaxed);
            match (&self.socket).read(&mut bytes) {
                Ok(0) => return fail(&mut self.failed, "the receiver closed the control connection".into()),
                Ok(n) => {
                    clearance.partial.extend_from_slice(&bytes[..n]);
                    // A short read took all there was: no second call to hear "would block".
                    if n < bytes.len() {
                        break;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("receive failed on the control connection: {e}")),
            }
        }
        let word = |bytes: &[u8], i: usize| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4 bytes"));
        let mut at = 0;
        while clearance.partial.len() - at >= 4 {
            let count = word(&clearance.partial[at..], 0) as usize;
            if count == 0 || count > MAX_NOTICE_TAGS {
                return fail(&mut self.failed, format!("the receiver sent a notice of {count} receives (1..={MAX_NOTICE_TAGS})"));
            }
            if clearance.partial.len() - at < 4 * (1 + count) {
                break;
            }
            for i in 1..=count {
                let tag = word(&clearance.partial[at..], i);
                // A notice pays off a message of its tag sent ahead of it first.
                if !clearance.pay_off(tag) {
                    *clearance.tags.entry(tag).or_default() += 1;
                }
            }
            at += 4 * (1 + count);
            clearance.asked = false;
        }
        clearance.partial.drain(..at);
        Ok(())
    }

    /// Requests in flight.
    pub(super) fn queued(&mut self) -> usize {
        self.requests.retain(|left| left.load(Ordering::Acquire) != 0);
        self.requests.len()
    }

    /// Queues a message (its pieces start moving at once); returns its request's count of
    /// unfinished parts.
    pub(super) fn push(&mut self, data: LentBytes, tag: u32) -> Result<Arc<AtomicUsize>> {
        if let Some(reason) = &self.failed {
            return Err(Error::Closed(reason.clone()));
        }
        let header = header(tag, data.len() as u64);
        let left = Arc::new(AtomicUsize::new(1));
        let alone = self.queued() == 0;
        let data = match (in_pieces(&self.data, data.len()), &mut self.data) {
            (true, Some(path)) => {
                path.send(data, &left, alone)?;
                None
            }
            _ => Some(data),
        };
        self.queue.push_back(Outgoing { header, data, written: 0, left: left.clone() });
        self.requests.push(left.clone());
        Ok(left)
    }

    /// Writes as much of the queue as the control socket takes; an error if the comm
    /// failed (here or in its data path).
    pub(super) fn progress(&mut self) -> Result<()> {
        let result = self.write_control();
        check_data(result, &mut self.failed, self.data.as_ref())
    }

    fn write_control(&mut self) -> Result<()> {
        if let Some(reason) = &self.failed {
            return Err(Error::Closed(reason.clone()));
        }
        while let Some(front) = self.queue.front_mut() {
            let body = front.data.as_ref().map_or(&[][..], LentBytes::as_slice);
            let total = HEADER_BYTES + body.len();
            while front.written < total {
                let result = if front.written < HEADER_BYTES {
                    let parts = [IoSlice::new(&front.header[front.written..]), IoSlice::new(body)];
                    self.socket.send_vectored_with_flags(&parts, libc::MSG_NOSIGNAL)
                } else {
                    self.socket.send_with_flags(&body[front.written - HEADER_BYTES..], libc::MSG_NOSIGNAL)
                };
                match result {
                    Ok(0) => return fail(&mut self.failed, "the control connection closed while sending".into()),
                    Ok(n) => {
                        let body_bytes = (front.written + n).saturating_sub(HEADER_BYTES.max(front.written));
                        self.stats.bytes_sent.fetch_add(body_bytes as u64, Ordering::Relaxed);
                        front.written += n;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return fail(&mut self.failed, format!("send failed on the control connection: {e}")),
                }
            }
            let done = self.queue.pop_front().expect("the loop looked at the front");
            done.left.fetch_sub(1, Ordering::Release);
        }
        Ok(())
    }

    /// Ends the comm: its helper threads stopped and joined, its sockets shut, its messages
    /// dropped; later calls on its requests fail.
    pub(super) fn close(&mut self) {
        close(&mut self.failed, self.data.as_mut(), &self.socket, "send");
        self.queue.clear();
    }
}

impl Clearance {
    /// Sends a message of `tag` and `len` bytes ahead of its notice, where it may go ahead
    /// (`allowed`) and the room ahead holds it; whether it went.
    fn go_ahead(&mut self, tag: u32, len: usize, allowed: bool) -> bool {
        if !allowed || self.ahead_messages >= AHEAD_MESSAGES || self.ahead_bytes + len > AHEAD_BYTES {
            return false;
        }
        self.ahead.entry(tag).or_default().push_back(len);
        self.ahead_messages += 1;
        self.ahead_bytes += len;
        true
    }

    /// Pays off the oldest message of `tag` sent ahead of its notice; whether there was one.
    /// (The receiver keeps the newest of them at most, as its buffers of the tag take the
    /// messages in order: what it keeps never exceeds what is counted here.)
    fn pay_off(&mut self, tag: u32) -> bool {
        let Some(lengths) = self.ahead.get_mut(&tag) else { return false };
        let len = lengths.pop_front().expect("a tag's entry goes with its last message");
        if lengths.is_empty() {
            self.ahead.remove(&tag);
        }
        self.ahead_messages -= 1;
        self.ahead_bytes -= len;
        true
    }
}

/// Counts one message of `tag` against `tags`' clearances; whether there was one.
fn take_clearance(tags: &mut HashMap<u32, u32>, tag: u32) -> bool {
    let Some(count) = tags.get_mut(&tag) else { return false };
    *count -= 1;
    if *count == 0 {
        tags.remove(&tag);
    }
    true
}

/// Copies a kept early message of `tag` into `buffer`; its length, or an error naming both
/// sizes where it does not fit.
fn hand_over(bytes: &[u8], buffer: &mut LentBuffer, tag: u32) -> Result<usize> {
    if bytes.len() > buffer.len() {
        return Err(Error::MessageTooLarge { message: bytes.len(), buffer: buffer.len(), tag });
    }
    buffer.as_mut_slice()[..bytes.len()].copy_from_slice(bytes);
    Ok(bytes.len())
}

/// The first free buffer of `tag` in `receive`: (its request id, index, capacity).
fn free_buffer(receive: &Incoming, tag: u32) -> Option<(u64, usize, usize)> {
    (0..receive.buffers.len()).find(|&i| matches!(receive.slots[i], Slot::Free) && receive.buffers[i].1 == tag).map(|i| (receive.id, i, receive.buffers[i].0.len()))
}

/// The posted receive numbered `id` (a receive stays queued until every message of it is in).
fn posted(queue: &mut VecDeque<Incoming>, id: u64) -> &mut Incoming {
    queue.iter_mut().find(|r| r.id == id).expect("a message's receive stays queued until its message is in")
}

impl RecvState {
    /// A receive comm over its sockets; receiver-driven when `cleared`.
    pub(super) fn new(socket: Socket, data: Option<DataPath>, stats: Arc<Stats>, cleared: bool) -> RecvState {
        RecvState {
            socket,
            queue: VecDeque::new(),
            next_id: 0,
            header: [0; HEADER_BYTES],
            header_read: 0,
            body: None,
            stage: vec![0; STAGE_BYTES].into_boxed_slice(),
            staged: (0, 0),
            drained: false,
            bulk: false,
            small: true,
            peeked: 0,
            control_reads: 0,
            completed: HashMap::new(),
            data,
            failed: None,
            stats,
            notices: cleared.then(Notices::default),
            early: VecDeque::new(),
            early_bytes: 0,
            awaited: 0,
            spare: Vec::new(),
            spare_bytes: 0,
        }
    }

    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queues a receive of one message per buffer; returns its request id and its count
    /// of unfinished parts.
    pub(super) fn push(&mut self, mut buffers: Vec<(LentBuffer, u32)>) -> (u64, Arc<AtomicUsize>) {
        let id = self.next_id;
        self.next_id += 1;
        let mut slots = vec![Slot::Free; buffers.len()];
        let left = Arc::new(AtomicUsize::new(buffers.len()));
        // Every buffer gets a notice, also one an early message fills now: the sender
        // counts that notice against the message it sent ahead.
        if let Some(notices) = &mut self.notices {
            let needed = buffers.iter().any(|(buffer, _)| !goes_ahead(buffer.len()));
            notices.add(&buffers, needed);
        }
        // An early message still arriving (its body read in part from the control socket,
        // or its pieces) takes its buffer now, so that the messages of a tag fill its
        // buffers in order, and fills it once whole (`hand_over_taken`).
        for (i, (buffer, tag)) in buffers.iter_mut().enumerate() {
            let Some(at) = self.early.iter().position(|early| early.tag == *tag && early.receive.is_none()) else { continue };
            if !self.early_whole(at) {
                self.early[at].receive = Some((id, i));
                self.awaited += 1;
                slots[i] = Slot::Taken;
                continue;
            }
            let early = self.take_early(at);
            let handed = hand_over(early.bytes(), buffer, *tag);
            self.recycle(early);
            match handed {
                Ok(len) => {
                    slots[i] = Slot::Filled(len);
                    left.fetch_sub(1, Ordering::Release);
                }
                // The receive's test reports it (the comm failed).
                Err(e) => {
                    self.failed.get_or_insert_with(|| e.to_string());
                }
            }
        }
        match filled(&slots) {
            Some(sizes) => {
                self.completed.insert(id, sizes);
            }
            None => self.queue.push_back(Incoming { id, buffers, slots, left: left.clone() }),
        }
        (id, left)
    }

    /// Writes what the control socket takes of the notices not yet written, where they are
    /// due; a failure is the comm's, reported by its next progress.
    pub(super) fn send_notices(&mut self) {
        if self.failed.is_none() {
            let _ = self.write_notices();
        }
    }

    /// Writes what the control socket takes of the notices not yet written, where they are
    /// due.
    fn write_notices(&mut self) -> Result<()> {
        let Some(notices) = &mut self.notices else { return Ok(()) };
        if !notices.due {
            return Ok(());
        }
        while !notices.bytes.is_empty() {
            self.stats.notice_writes.fetch_add(1, Ordering::Relaxed);
            match self.socket.send_with_flags(&notices.bytes, libc::MSG_NOSIGNAL) {
                Ok(0) => return fail(&mut self.failed, "the control connection closed while sending a notice".into()),
                Ok(n) => notices.written(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("sending a notice on the control connection failed: {e}")),
            }
        }
        Ok(())
    }

    /// The sizes of request `id` once its headers all arrived (once; the caller keeps
    /// them and reports them when its count of unfinished parts is 0).
    pub(super) fn take_completed(&mut self, id: u64) -> Option<Vec<usize>> {
        self.completed.remove(&id)
    }

    /// Reads as much as has arrived into the posted buffers, completing requests; an error
    /// if the comm failed (here or in its data path).
    pub(super) fn progress(&mut self) -> Result<()> {
        // Notices due are written before the read and again after it (the sender may have
        // asked for them).
        let result = self.write_notices().and_then(|()| self.read_control()).and_then(|()| self.write_notices());
        check_data(result, &mut self.failed, self.data.as_ref())
    }

    fn read_control(&mut self) -> Result<()> {
        if let Some(reason) = &self.failed {
            return Err(Error::Closed(reason.clone()));
        }
        self.drained = false;
        self.hand_over_taken()?;
        while !self.queue.is_empty() {
            let body = match self.body {
                Some(body) => body,
                None => match self.read_header()? {
                    Some(body) => body,
                    None => return Ok(()),
                },
            };
            if body.early {
                // (A message in pieces has no bytes on the control socket: `read` is `len`.)
                if self.read_body(body)?.is_none() {
                    return Ok(());
                }
                self.body = None;
                self.header_read = 0;
                self.after(body.len);
                // A receive posted while it arrived took a buffer for it.
                self.hand_over_taken()?;
                continue;
            }
            if in_pieces(&self.data, body.len) {
                let request = posted(&mut self.queue, body.request);
                let buffer = std::mem::replace(&mut request.buffers[body.buffer].0, LentBuffer::empty());
                self.data.as_mut().expect("in pieces").recv(buffer, body.len, &request.left)?;
            } else if self.read_body(body)?.is_none() {
                return Ok(());
            }
            self.body = None;
            self.header_read = 0;
            self.after(body.len);
            self.delivered(body.request, body.buffer, body.len);
        }
        Ok(())
    }

    /// Bytes the control socket holds unread (peeked ones included).
    #[cfg(test)]
    pub(super) fn unread(&self) -> usize {
        let mut bytes: libc::c_int = 0;
        // SAFETY: FIONREAD writes one int.
        let r = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&self.socket), libc::FIONREAD, &mut bytes) };
        assert_eq!(r, 0, "FIONREAD: {}", std::io::Error::last_os_error());
        bytes as usize
    }

    /// Notes what the message just read (of `len` bytes) says of the next reads.
    fn after(&mut self, len: usize) {
        self.bulk = len >= STAGE_BYTES;
        self.small = len <= PEEK_BYTES;
    }

    /// Discards the peeked bytes the stage was filled with (used up: the stage is empty)
    /// from the socket, so that a read may follow.
    fn settle(&mut self) -> Result<()> {
        debug_assert_eq!(self.staged.0, self.staged.1, "a peek is discarded once used up");
        while self.peeked > 0 {
            self.control_reads += 1;
            // MSG_TRUNC: a TCP socket drops the bytes without copying them.
            match recv_into(&self.socket, &mut self.stage[..self.peeked], libc::MSG_TRUNC) {
                Ok(0) => return fail(&mut self.failed, "the sender closed the control connection".into()),
                Ok(n) => self.peeked -= n.min(self.peeked),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // The peeked bytes are in the socket: it cannot have nothing to give.
                Err(e) => return fail(&mut self.failed, format!("discarding {} peeked bytes of the control connection failed: {e}", self.peeked)),
            }
        }
        Ok(())
    }

    /// Records that buffer `buffer` of receive `request` holds its message of `len` bytes
    /// (not counting a piece still on a data socket), completing the receive with its last.
    fn delivered(&mut self, request: u64, buffer: usize, len: usize) {
        let position = self.queue.iter().position(|r| r.id == request).expect("queued until its message is in");
        let receive = &mut self.queue[position];
        receive.slots[buffer] = Slot::Filled(len);
        receive.left.fetch_sub(1, Ordering::Release);
        if let Some(sizes) = filled(&receive.slots) {
            self.queue.remove(position);
            self.completed.insert(request, sizes);
        }
    }

    /// Ends the comm: its helper threads stopped and joined, its sockets shut, its receives
    /// dropped; later calls on its requests fail.
    pub(super) fn close(&mut self) {
        close(&mut self.failed, self.data.as_mut(), &self.socket, "receive");
        self.queue.clear();
    }

    /// Reads the next message's header and picks its buffer; `None` if not all here yet.
    fn read_header(&mut self) -> Result<Option<Body>> {
        let (tag, len) = loop {
            while self.header_read < HEADER_BYTES {
                if self.staged.0 == self.staged.1 && !self.fill()? {
                    return Ok(None);
                }
                let at = self.header_read;
                let (start, n) = (self.staged.0, (HEADER_BYTES - at).min(self.staged.1 - self.staged.0));
                self.header[at..at + n].copy_from_slice(&self.stage[start..start + n]);
                self.staged.0 += n;
                self.header_read += n;
            }
            let tag = u32::from_le_bytes(self.header[..4].try_into().expect("4 bytes"));
            let len = u64::from_le_bytes(self.header[4..].try_into().expect("8 bytes"));
            if len != ASK {
                break (tag, len);
            }
            // The sender asks for the notices held back: they go with this call's next write.
            self.header_read = 0;
            match &mut self.notices {
                Some(notices) => notices.due = true,
                None => return fail(&mut self.failed, "the sender of an eager comm asked for notices".into()),
            }
        };
        // The oldest posted receive with a free buffer of this tag (eager: the oldest receive
        // of all, as messages and receives go in the same order).
        let searched = if self.notices.is_some() { self.queue.len() } else { 1 };
        let Some((request, buffer, capacity)) = self.queue.iter().take(searched).find_map(|r| free_buffer(r, tag)) else {
            // Receiver-driven, a message sent ahead of its notice waits here for its receive.
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if self.notices.is_some() && goes_ahead(len) && self.early.len() < AHEAD_MESSAGES && self.early_bytes + len <= AHEAD_BYTES {
                let mut stage = self.spare.pop().unwrap_or_default();
                self.spare_bytes -= stage.len();
                if stage.len() < len {
                    stage.resize(len, 0);
                }
                // A message in pieces: they go into the stage as into a posted buffer.
                let pieces = match in_pieces(&self.data, len) {
                    true => {
                        let left = Arc::new(AtomicUsize::new(0));
                        // SAFETY: the stage's first `len` bytes are lent to the data path
                        // alone: nothing reads, moves or frees the stage's memory until its
                        // pieces are in (`RecvState::early_whole`), or the data path stopped (`data`
                        // is dropped before `early`).
                        let lent = unsafe { LentBuffer::new(stage.as_mut_ptr(), len) }?;
                        self.data.as_mut().expect("in pieces").recv(lent, len, &left)?;
                        Some(left)
                    }
                    false => None,
                };
                let read = if pieces.is_some() { len } else { 0 };
                self.early.push_back(Early { tag, stage, len, pieces, receive: None });
                self.early_bytes += len;
                self.stats.early_messages.fetch_add(1, Ordering::Relaxed);
                self.stats.early_bytes.fetch_add(len as u64, Ordering::Relaxed);
                return Ok(Some(Body { request: 0, buffer: 0, early: true, len, read }));
            }
            let tags: Vec<u32> = self.queue.iter().take(searched).flat_map(|r| (0..r.buffers.len()).filter(|&i| matches!(r.slots[i], Slot::Free)).map(|i| r.buffers[i].1)).take(32).collect();
            return fail(&mut self.failed, format!("message with tag {tag} matches no free buffer of a posted receive (free tags {tags:?})"));
        };
        if len > capacity as u64 {
            let error = Error::MessageTooLarge { message: usize::try_from(len).unwrap_or(usize::MAX), buffer: capacity, tag };
            // The message's bytes are still in the stream: nothing after them can be read.
            self.failed = Some(error.to_string());
            return Err(error);
        }
        Ok(Some(Body { request, buffer, early: false, len: len as usize, read: 0 }))
    }

    /// Reads the message's bytes into its buffer; `None` (and progress kept) if not all here.
    fn read_body(&mut self, mut body: Body) -> Result<Option<Body>> {
        while body.read < body.len {
            let left = body.len - body.read;
            // With the stage empty the rest is read from the socket: not in this call if a
            // read came back short, and only once a used-up peek is discarded.
            if self.staged.0 == self.staged.1 {
                if self.drained {
                    self.body = Some(body);
                    return Ok(None);
                }
                self.settle()?;
            }
            let target = match body.early {
                true => &mut self.early.back_mut().expect("the early message being read").stage[..],
                false => posted(&mut self.queue, body.request).buffers[body.buffer].0.as_mut_slice(),
            };
            if self.staged.0 < self.staged.1 {
                let (start, n) = (self.staged.0, left.min(self.staged.1 - self.staged.0));
                target[body.read..body.read + n].copy_from_slice(&self.stage[start..start + n]);
                self.staged.0 += n;
                body.read += n;
                self.stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                self.stats.staged_body_bytes.fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            // The stage is empty: the rest goes straight into the buffer and whatever follows
            // it (the next headers, small messages) into the stage, in one call, so that no
            // byte of the body is copied twice.
            // After a large body, only the next header: its body goes straight in too.
            let stage = if body.len >= STAGE_BYTES { HEADER_BYTES } else { self.stage.len() };
            let mut into = [IoSliceMut::new(&mut target[body.read..body.len]), IoSliceMut::new(&mut self.stage[..stage])];
            self.control_reads += 1;
            match (&self.socket).read_vectored(&mut into) {
                Ok(0) => return fail(&mut self.failed, "the sender closed the control connection".into()),
                Ok(n) => {
                    self.drained = n < left + stage;
                    let rest = n.min(left);
                    body.read += rest;
                    self.staged = (0, n - rest);
                    self.stats.bytes_received.fetch_add(rest as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.body = Some(body);
                    return Ok(None);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("receive failed on the control connection: {e}")),
            }
        }
        Ok(Some(body))
    }

    /// Whether the early message at `at` is all in its stage: not the one whose body is
    /// being read from the control socket (the newest), and its pieces, if any, all in.
    fn early_whole(&self, at: usize) -> bool {
        let reading = matches!(self.body, Some(Body { early: true, .. })) && at + 1 == self.early.len();
        !reading && self.early[at].pieces.as_ref().is_none_or(|left| left.load(Ordering::Acquire) == 0)
    }

    /// Fills the buffers taken by early messages that are whole now.
    fn hand_over_taken(&mut self) -> Result<()> {
        let mut at = 0;
        while self.awaited > 0 && at < self.early.len() {
            let (Some((request, buffer)), true) = (self.early[at].receive, self.early_whole(at)) else {
                at += 1;
                continue;
            };
            let early = self.take_early(at);
            self.awaited -= 1;
            let handed = hand_over(early.bytes(), &mut posted(&mut self.queue, request).buffers[buffer].0, early.tag);
            self.recycle(early);
            match handed {
                Ok(len) => self.delivered(request, buffer, len),
                Err(e) => {
                    self.failed = Some(e.to_string());
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Takes the early message at `at` out of the comm's list.
    fn take_early(&mut self, at: usize) -> Early {
        let early = self.early.remove(at).expect("an early message");
        self.early_bytes -= early.len;
        early
    }

    /// Keeps a handed-over early message's stage for the next one, where the spare stages
    /// have room for it.
    fn recycle(&mut self, early: Early) {
        if self.spare.len() < SPARE_STAGES && self.spare_bytes + early.stage.len() <= AHEAD_BYTES {
            self.spare_bytes += early.stage.len();
            self.spare.push(early.stage);
        }
    }

    /// Reads what has arrived into the empty stage (in a stream of large messages, at most
    /// the rest of the header being read); whether anything came. After a peek of at most
    /// [`MERGE_BYTES`] the read takes the peeked bytes out of the socket again, with what
    /// follows them: the one call that looks for the next message also discards them and
    /// sends their ACK (by now the caller took them), and a message that arrived behind
    /// them costs no call more than without the peek. A longer peek (several messages that
    /// followed each other) is discarded first, not copied again.
    fn fill(&mut self) -> Result<bool> {
        debug_assert_eq!(self.staged.0, self.staged.1, "the stage is refilled only once empty");
        if self.drained {
            return Ok(false);
        }
        if self.bulk || self.peeked > MERGE_BYTES {
            self.settle()?;
        }
        let skip = self.peeked;
        let want = if self.bulk { HEADER_BYTES - self.header_read } else { self.stage.len() };
        let peek = self.small && !self.bulk && skip == 0;
        loop {
            self.control_reads += 1;
            match recv_into(&self.socket, &mut self.stage[..want], if peek { libc::MSG_PEEK } else { 0 }) {
                Ok(0) => return fail(&mut self.failed, "the sender closed the control connection".into()),
                Ok(n) if n < skip => {
                    // Not all the peeked bytes again (a read never gives fewer than are
                    // there, but it is told nothing of it): the rest is discarded next time.
                    self.peeked -= n;
                    self.drained = true;
                    return Ok(false);
                }
                Ok(n) => {
                    self.staged = (skip, n);
                    self.drained = n < want;
                    self.peeked = if peek { n } else { 0 };
                    return Ok(n > skip);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("receive failed on the control connection: {e}")),
            }
        }
    }
}

/// `recv(2)` into `buf` with `flags` on the (non-blocking) socket, through socket2.
fn recv_into(socket: &Socket, buf: &mut [u8], flags: libc::c_int) -> std::io::Result<usize> {
    // SAFETY: `u8` and `MaybeUninit<u8>` have one layout, and `recv` writes only bytes,
    // so the slice stays initialised.
    let buf = unsafe { &mut *(buf as *mut [u8] as *mut [std::mem::MaybeUninit<u8>]) };
    socket.recv_with_flags(buf, flags)
}

/// Marks a comm closed (its requests fail from now on), stops its helper threads and shuts
/// its control socket: the peer hears of it now, not when the last request goes.
fn close(failed: &mut Option<String>, data: Option<&mut DataPath>, socket: &Socket, what: &str) {
    failed.get_or_insert_with(|| format!("the {what} comm was closed"));
    if let Some(data) = data {
        data.stop();
    }
    let _ = socket.shutdown(std::net::Shutdown::Both);
}

/// `result` of a control socket's progress; then, if it had no failure, the data path's
/// progress (what its sockets take now) and failure; else the control socket's failure,
/// told to the data path, so that its threads stop touching lent memory before the caller
/// hears of it.
fn check_data(result: Result<()>, failed: &mut Option<String>, data: Option<&DataPath>) -> Result<()> {
    let Some(data) = data else { return result };
    match result {
        Ok(()) => {
            data.progress();
            match data.failure() {
                Some(reason) => fail(failed, reason),
                None => Ok(()),
            }
        }
        Err(e) => {
            data.fail(failed.as_deref().unwrap_or("the comm failed"));
            Err(e)
        }
    }
}

/// Records the comm's failure (every later call reports it) and returns it.
fn fail<T>(failed: &mut Option<String>, reason: String) -> Result<T> {
    *failed = Some(reason.clone());
    Err(Error::Closed(reason))
}
