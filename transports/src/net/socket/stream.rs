//! The data path of one socket comm: queued requests progressed over a non-blocking TCP
//! socket whenever a request of the comm is tested.
//!
//! Wire format: each message is a 12-byte header (tag: u32 LE, length: u64 LE) followed by
//! the bytes. The sender writes header and bytes with one `sendmsg` (MSG_NOSIGNAL, so a
//! peer that went away is an error, not a SIGPIPE in a C host program). The receiver reads
//! what has arrived into a staging buffer of [`STAGE_BYTES`] (so that a small message's
//! header and bytes, and the next messages', come in one read), picks the buffer of the
//! oldest posted receive with the header's tag, and copies the bytes there; what is left
//! of a large message is read straight into its buffer.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, IoSlice, Read};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use socket2::Socket;

use super::Stats;
use crate::net::lent::{LentBuffer, LentBytes};
use crate::{Error, Result};

const HEADER_BYTES: usize = 12;

/// What a send comm holds.
pub(super) struct SendState {
    socket: Socket,
    queue: VecDeque<Outgoing>,
    next_id: u64,
    /// Requests with an id below this are done.
    done: u64,
    failed: Option<String>,
    stats: Arc<Stats>,
}

struct Outgoing {
    id: u64,
    header: [u8; HEADER_BYTES],
    data: LentBytes,
    written: usize,
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
    /// Sizes of completed requests that `test` has not collected yet.
    completed: HashMap<u64, Vec<usize>>,
    failed: Option<String>,
    stats: Arc<Stats>,
}

/// The receiver's staging buffer: a small message and its header arrive in one read.
const STAGE_BYTES: usize = 64 << 10;

struct Incoming {
    id: u64,
    buffers: Vec<(LentBuffer, u32)>,
    sizes: Vec<Option<usize>>,
}

#[derive(Clone, Copy)]
struct Body {
    buffer: usize,
    len: usize,
    read: usize,
}

impl SendState {
    pub(super) fn new(socket: Socket, stats: Arc<Stats>) -> SendState {
        SendState { socket, queue: VecDeque::new(), next_id: 0, done: 0, failed: None, stats }
    }

    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queues a message; returns its request id.
    pub(super) fn push(&mut self, data: LentBytes, tag: u32) -> u64 {
        let mut header = [0u8; HEADER_BYTES];
        header[..4].copy_from_slice(&tag.to_le_bytes());
        header[4..].copy_from_slice(&(data.len() as u64).to_le_bytes());
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back(Outgoing { id, header, data, written: 0 });
        id
    }

    pub(super) fn is_done(&self, id: u64) -> bool {
        id < self.done
    }

    /// Writes as much of the queue as the socket takes.
    pub(super) fn progress(&mut self) -> Result<()> {
        if let Some(reason) = &self.failed {
            return Err(Error::Closed(reason.clone()));
        }
        while let Some(front) = self.queue.front_mut() {
            let total = HEADER_BYTES + front.data.len();
            while front.written < total {
                let body = front.data.as_slice();
                let result = if front.written < HEADER_BYTES {
                    let parts = [IoSlice::new(&front.header[front.written..]), IoSlice::new(body)];
                    self.socket.send_vectored_with_flags(&parts, libc::MSG_NOSIGNAL)
                } else {
                    self.socket.send_with_flags(&body[front.written - HEADER_BYTES..], libc::MSG_NOSIGNAL)
                };
                match result {
                    Ok(0) => return fail(&mut self.failed, "the connection closed while sending".into()),
                    Ok(n) => {
                        let body_bytes = (front.written + n).saturating_sub(HEADER_BYTES.max(front.written));
                        self.stats.bytes_sent.fetch_add(body_bytes as u64, Ordering::Relaxed);
                        front.written += n;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return fail(&mut self.failed, format!("send failed: {e}")),
                }
            }
            self.done = front.id + 1;
            self.queue.pop_front();
        }
        Ok(())
    }
}

impl RecvState {
    pub(super) fn new(socket: Socket, stats: Arc<Stats>) -> RecvState {
        RecvState {
            socket,
            queue: VecDeque::new(),
            next_id: 0,
            header: [0; HEADER_BYTES],
            header_read: 0,
            body: None,
            stage: vec![0; STAGE_BYTES].into_boxed_slice(),
            staged: (0, 0),
            completed: HashMap::new(),
            failed: None,
            stats,
        }
    }

    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    /// Queues a receive of one message per buffer; returns its request id.
    pub(super) fn push(&mut self, buffers: Vec<(LentBuffer, u32)>) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let sizes = vec![None; buffers.len()];
        self.queue.push_back(Incoming { id, buffers, sizes });
        id
    }

    /// The sizes of request `id` if it is done (once; the caller keeps them).
    pub(super) fn take_completed(&mut self, id: u64) -> Option<Vec<usize>> {
        self.completed.remove(&id)
    }

    /// Reads as much as has arrived into the posted buffers, completing requests.
    pub(super) fn progress(&mut self) -> Result<()> {
        if let Some(reason) = &self.failed {
            return Err(Error::Closed(reason.clone()));
        }
        while !self.queue.is_empty() {
            let body = match self.body {
                Some(body) => body,
                None => match self.read_header()? {
                    Some(body) => body,
                    None => return Ok(()),
                },
            };
            let Some(body) = self.read_body(body)? else { return Ok(()) };
            self.body = None;
            self.header_read = 0;
            let front = self.queue.front_mut().expect("the loop checked the queue");
            front.sizes[body.buffer] = Some(body.len);
            if front.sizes.iter().all(Option::is_some) {
                let done = self.queue.pop_front().expect("the loop checked the queue");
                self.completed.insert(done.id, done.sizes.into_iter().map(|size| size.expect("all set")).collect());
            }
        }
        Ok(())
    }

    /// Reads the next message's header and picks its buffer; `None` if not all here yet.
    fn read_header(&mut self) -> Result<Option<Body>> {
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
        let front = self.queue.front().expect("called with a posted receive");
        let free = |i: &usize| front.sizes[*i].is_none() && front.buffers[*i].1 == tag;
        let Some(buffer) = (0..front.buffers.len()).find(free) else {
            let tags: Vec<u32> = front.buffers.iter().map(|(_, tag)| *tag).collect();
            return fail(&mut self.failed, format!("message with tag {tag} matches no free buffer of the oldest posted receive (tags {tags:?})"));
        };
        let capacity = front.buffers[buffer].0.len();
        if len > capacity as u64 {
            let error = Error::MessageTooLarge { message: usize::try_from(len).unwrap_or(usize::MAX), buffer: capacity, tag };
            // The message's bytes are still in the stream: nothing after them can be read.
            self.failed = Some(error.to_string());
            return Err(error);
        }
        Ok(Some(Body { buffer, len: len as usize, read: 0 }))
    }

    /// Reads the message's bytes into its buffer; `None` (and progress kept) if not all here.
    fn read_body(&mut self, mut body: Body) -> Result<Option<Body>> {
        while body.read < body.len {
            let left = body.len - body.read;
            if self.staged.0 < self.staged.1 {
                let (start, n) = (self.staged.0, left.min(self.staged.1 - self.staged.0));
                let front = self.queue.front_mut().expect("called with a posted receive");
                front.buffers[body.buffer].0.as_mut_slice()[body.read..body.read + n].copy_from_slice(&self.stage[start..start + n]);
                self.staged.0 += n;
                body.read += n;
                self.stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                continue;
            }
            // Large rests go straight into the buffer; small ones through the stage (with
            // whatever follows them).
            let read = if left >= STAGE_BYTES {
                let front = self.queue.front_mut().expect("called with a posted receive");
                let target = &mut front.buffers[body.buffer].0.as_mut_slice()[body.read..body.len];
                match (&self.socket).read(target) {
                    Ok(0) => return fail(&mut self.failed, "the sender closed the connection".into()),
                    Ok(n) => {
                        body.read += n;
                        self.stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                        true
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => true,
                    Err(e) => return fail(&mut self.failed, format!("receive failed: {e}")),
                }
            } else {
                self.fill()?
            };
            if !read {
                self.body = Some(body);
                return Ok(None);
            }
        }
        Ok(Some(body))
    }

    /// Reads what has arrived into the empty stage; whether anything came.
    fn fill(&mut self) -> Result<bool> {
        debug_assert_eq!(self.staged.0, self.staged.1, "the stage is refilled only once empty");
        loop {
            match (&self.socket).read(&mut self.stage) {
                Ok(0) => return fail(&mut self.failed, "the sender closed the connection".into()),
                Ok(n) => {
                    self.staged = (0, n);
                    return Ok(true);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("receive failed: {e}")),
            }
        }
    }
}

/// Records the comm's failure (every later call reports it) and returns it.
fn fail<T>(failed: &mut Option<String>, reason: String) -> Result<T> {
    *failed = Some(reason.clone());
    Err(Error::Closed(reason))
}
