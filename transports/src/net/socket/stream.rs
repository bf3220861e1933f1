//! The data path of one socket comm: queued requests progressed over a non-blocking TCP
//! socket whenever a request of the comm is tested.
//!
//! Wire format: each message is a 12-byte header (tag: u32 LE, length: u64 LE) followed by
//! the bytes. The sender writes header and bytes with one `sendmsg` (MSG_NOSIGNAL, so a
//! peer that went away is an error, not a SIGPIPE in a C host program). The receiver reads
//! the header, picks the buffer of the oldest posted receive with that tag, and reads the
//! bytes straight into it: no copy in between.

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
    /// Sizes of completed requests that `test` has not collected yet.
    completed: HashMap<u64, Vec<usize>>,
    failed: Option<String>,
    stats: Arc<Stats>,
}

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
            let at = self.header_read;
            match (&self.socket).read(&mut self.header[at..]) {
                Ok(0) => return fail(&mut self.failed, "the sender closed the connection".into()),
                Ok(n) => self.header_read += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("receive failed: {e}")),
            }
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
        let front = self.queue.front_mut().expect("called with a posted receive");
        let target = &mut front.buffers[body.buffer].0.as_mut_slice()[..body.len];
        while body.read < body.len {
            match (&self.socket).read(&mut target[body.read..]) {
                Ok(0) => return fail(&mut self.failed, "the sender closed the connection".into()),
                Ok(n) => {
                    body.read += n;
                    self.stats.bytes_received.fetch_add(n as u64, Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    self.body = Some(body);
                    return Ok(None);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut self.failed, format!("receive failed: {e}")),
            }
        }
        Ok(Some(body))
    }
}

/// Records the comm's failure (every later call reports it) and returns it.
fn fail<T>(failed: &mut Option<String>, reason: String) -> Result<T> {
    *failed = Some(reason.clone());
    Err(Error::Closed(reason))
}
