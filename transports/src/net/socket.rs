//! A [`Net`] over TCP: non-blocking sockets progressed inside `test`, messages framed as
//! (tag, length, bytes). One TCP connection per comm; requests complete in order.
//!
//! `max_recvs` is configurable ([`SocketNet::with_max_recvs`]); the counters in
//! [`SocketNet::stats`] show how many receives were posted together.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{ListenComm, MemoryHandle, MemoryKind, Net, Opaque, PointerSupport, Properties, RecvBuffer, RecvComm, Request, SendComm};
use crate::{Error, Result};

/// Most requests in flight per comm (NCCL_NET_MAX_REQUESTS).
pub const MAX_REQUESTS: usize = 32;
const HEADER: usize = 12;

/// TCP on one interface address.
pub struct SocketNet {
    ip: IpAddr,
    max_recvs: usize,
    stats: Arc<Stats>,
}

/// Counts of receive calls, for checking that receives were posted together.
#[derive(Debug, Default)]
pub struct Stats {
    pub irecv_calls: AtomicU64,
    pub irecv_buffers: AtomicU64,
    /// `irecv` calls that carried more than one buffer.
    pub irecv_grouped: AtomicU64,
}

impl SocketNet {
    /// A net listening on `ip`, one receive per `irecv` (as NCCL's socket transport).
    pub fn new(ip: IpAddr) -> SocketNet {
        SocketNet::with_max_recvs(ip, 1)
    }

    /// A net that accepts up to `max_recvs` buffers per `irecv`.
    pub fn with_max_recvs(ip: IpAddr, max_recvs: usize) -> SocketNet {
        SocketNet { ip, max_recvs: max_recvs.max(1), stats: Arc::default() }
    }

    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

struct Listening {
    listener: TcpListener,
    magic: u64,
}

struct SendState {
    stream: TcpStream,
    queue: VecDeque<Outgoing>,
    next_id: u64,
    done: u64,
    failed: Option<String>,
}

struct Outgoing {
    id: u64,
    header: [u8; HEADER],
    data: *const u8,
    len: usize,
    written: usize,
}

// SAFETY: `data` points at a buffer the caller keeps valid until the request completes
// (the isend contract); nothing else is thread-bound.
unsafe impl Send for Outgoing {}

struct RecvState {
    stream: TcpStream,
    queue: VecDeque<Incoming>,
    next_id: u64,
    done: u64,
    /// The message being read: header bytes so far, then (buffer index, length, read).
    header: [u8; HEADER],
    header_read: usize,
    body: Option<(usize, usize, usize)>,
    /// Sizes of completed requests not yet collected by `test`.
    completed: std::collections::HashMap<u64, Vec<usize>>,
    failed: Option<String>,
}

struct Incoming {
    id: u64,
    buffers: Vec<RecvBuffer>,
    sizes: Vec<Option<usize>>,
}

// SAFETY: the buffers are the caller's to keep valid until completion (the irecv contract).
unsafe impl Send for Incoming {}

enum Pending {
    Send(Arc<Mutex<SendState>>, u64),
    Recv(Arc<Mutex<RecvState>>, u64, usize),
}

impl Net for SocketNet {
    fn name(&self) -> &str {
        "Socket"
    }

    fn devices(&self) -> Result<usize> {
        Ok(1)
    }

    fn properties(&self, device: usize) -> Result<Properties> {
        if device != 0 {
            return Err(Error::InvalidArgument(format!("socket device {device} (there is 1)")));
        }
        Ok(Properties {
            name: format!("socket:{}", self.ip),
            pci_path: None,
            guid: 0,
            ptr_support: PointerSupport { host: true, cuda: false, dmabuf: false },
            speed_mbps: 10_000,
            latency_us: 0.0,
            port: 0,
            max_comms: 65536,
            max_recvs: self.max_recvs,
            reg_is_global: false,
        })
    }

    fn listen(&self, device: usize) -> Result<(Vec<u8>, ListenComm)> {
        self.properties(device)?;
        let listener = TcpListener::bind(SocketAddr::new(self.ip, 0)).map_err(|e| Error::io(format!("listening on {}", self.ip), e))?;
        listener.set_nonblocking(true).map_err(|e| Error::io("non-blocking listener", e))?;
        let addr = listener.local_addr().map_err(|e| Error::io("listener address", e))?;
        let mut magic = [0u8; 8];
        getrandom::fill(&mut magic).map_err(|e| Error::io("random", std::io::Error::other(e.to_string())))?;
        let magic = u64::from_le_bytes(magic);
        let mut handle = magic.to_le_bytes().to_vec();
        handle.extend_from_slice(addr.to_string().as_bytes());
        Ok((handle, Opaque::new(Listening { listener, magic })))
    }

    fn connect(&self, _device: usize, handle: &[u8]) -> Result<Option<SendComm>> {
        let bad = |reason: &str| Error::Malformed { what: "socket handle", reason: reason.into() };
        if handle.len() < 9 {
            return Err(bad("too short"));
        }
        let magic = &handle[..8];
        let addr: SocketAddr = std::str::from_utf8(&handle[8..]).ok().and_then(|s| s.parse().ok()).ok_or_else(|| bad("no address"))?;
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).map_err(|e| Error::io(format!("connecting to {addr}"), e))?;
        stream.set_nodelay(true).map_err(|e| Error::io("TCP_NODELAY", e))?;
        stream.write_all(magic).map_err(|e| Error::io(format!("greeting {addr}"), e))?;
        stream.set_nonblocking(true).map_err(|e| Error::io("non-blocking socket", e))?;
        Ok(Some(Opaque::new(Arc::new(Mutex::new(SendState { stream, queue: VecDeque::new(), next_id: 0, done: 0, failed: None })))))
    }

    fn accept(&self, listen: &mut ListenComm) -> Result<Option<RecvComm>> {
        let listening = listen.get::<Listening>("listen comm")?;
        let mut stream = match listening.listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(Error::io("accepting", e)),
        };
        stream.set_nonblocking(false).and_then(|()| stream.set_read_timeout(Some(Duration::from_secs(10)))).map_err(|e| Error::io("socket options", e))?;
        let mut magic = [0u8; 8];
        stream.read_exact(&mut magic).map_err(|e| Error::io("reading the greeting", e))?;
        if u64::from_le_bytes(magic) != listening.magic {
            return Err(Error::Malformed { what: "socket greeting", reason: "wrong magic (a stranger connected)".into() });
        }
        stream.set_nodelay(true).and_then(|()| stream.set_nonblocking(true)).map_err(|e| Error::io("socket options", e))?;
        let state = RecvState { stream, queue: VecDeque::new(), next_id: 0, done: 0, header: [0; HEADER], header_read: 0, body: None, completed: Default::default(), failed: None };
        Ok(Some(Opaque::new(Arc::new(Mutex::new(state)))))
    }

    fn register(&self, _comm: &mut Opaque, _data: *mut u8, _len: usize, kind: MemoryKind) -> Result<MemoryHandle> {
        match kind {
            MemoryKind::Host => Ok(Opaque::new(())),
            MemoryKind::Cuda => Err(Error::Unsupported("the socket net moves host memory only".into())),
        }
    }

    fn deregister(&self, _comm: &mut Opaque, _handle: MemoryHandle) -> Result<()> {
        Ok(())
    }

    unsafe fn isend(&self, comm: &mut SendComm, data: *const u8, len: usize, tag: u32, _handle: &MemoryHandle) -> Result<Option<Request>> {
        let state = comm.get::<Arc<Mutex<SendState>>>("send comm")?.clone();
        let mut s = state.lock().map_err(|_| Error::Closed("send comm poisoned".into()))?;
        if s.queue.len() >= MAX_REQUESTS {
            return Ok(None);
        }
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&tag.to_le_bytes());
        header[4..].copy_from_slice(&(len as u64).to_le_bytes());
        let id = s.next_id;
        s.next_id += 1;
        s.queue.push_back(Outgoing { id, header, data, len, written: 0 });
        drop(s);
        Ok(Some(Opaque::new(Pending::Send(state, id))))
    }

    unsafe fn irecv(&self, comm: &mut RecvComm, buffers: &[RecvBuffer], _handles: &[&MemoryHandle]) -> Result<Option<Request>> {
        if buffers.is_empty() || buffers.len() > self.max_recvs {
            return Err(Error::InvalidArgument(format!("irecv of {} buffers (1..={})", buffers.len(), self.max_recvs)));
        }
        let state = comm.get::<Arc<Mutex<RecvState>>>("recv comm")?.clone();
        let mut s = state.lock().map_err(|_| Error::Closed("recv comm poisoned".into()))?;
        if s.queue.len() >= MAX_REQUESTS {
            return Ok(None);
        }
        let id = s.next_id;
        s.next_id += 1;
        s.queue.push_back(Incoming { id, buffers: buffers.to_vec(), sizes: vec![None; buffers.len()] });
        drop(s);
        self.stats.irecv_calls.fetch_add(1, Ordering::Relaxed);
        self.stats.irecv_buffers.fetch_add(buffers.len() as u64, Ordering::Relaxed);
        if buffers.len() > 1 {
            self.stats.irecv_grouped.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Opaque::new(Pending::Recv(state, id, buffers.len()))))
    }

    fn test(&self, request: &mut Request) -> Result<Option<Vec<usize>>> {
        match request.get::<Pending>("request")? {
            Pending::Send(state, id) => {
                let mut s = state.lock().map_err(|_| Error::Closed("send comm poisoned".into()))?;
                progress_send(&mut s)?;
                Ok((*id < s.done).then(|| vec![0]))
            }
            Pending::Recv(state, id, n) => {
                let mut s = state.lock().map_err(|_| Error::Closed("recv comm poisoned".into()))?;
                progress_recv(&mut s)?;
                debug_assert!(*n > 0);
                Ok(s.completed.remove(id))
            }
        }
    }

    fn close_send(&self, comm: SendComm) -> Result<()> {
        drop(comm);
        Ok(())
    }

    fn close_recv(&self, comm: RecvComm) -> Result<()> {
        drop(comm);
        Ok(())
    }

    fn close_listen(&self, comm: ListenComm) -> Result<()> {
        drop(comm);
        Ok(())
    }
}

fn progress_send(s: &mut SendState) -> Result<()> {
    if let Some(reason) = &s.failed {
        return Err(Error::Closed(reason.clone()));
    }
    while let Some(front) = s.queue.front_mut() {
        let total = HEADER + front.len;
        while front.written < total {
            let result = if front.written < HEADER {
                s.stream.write(&front.header[front.written..])
            } else {
                let at = front.written - HEADER;
                // SAFETY: the isend contract keeps data..data+len valid until completion.
                let body = unsafe { std::slice::from_raw_parts(front.data, front.len) };
                s.stream.write(&body[at..])
            };
            match result {
                Ok(0) => return fail(&mut s.failed, "connection closed while sending".into()),
                Ok(n) => front.written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut s.failed, format!("send failed: {e}")),
            }
        }
        s.done = front.id + 1;
        s.queue.pop_front();
    }
    Ok(())
}

/// Progresses receives, filing the sizes of completed requests.
fn progress_recv(s: &mut RecvState) -> Result<()> {
    if let Some(reason) = &s.failed {
        return Err(Error::Closed(reason.clone()));
    }
    loop {
        if s.queue.is_empty() {
            return Ok(());
        }
        if s.body.is_none() {
            while s.header_read < HEADER {
                let at = s.header_read;
                match s.stream.read(&mut s.header[at..]) {
                    Ok(0) => return fail(&mut s.failed, "connection closed by the sender".into()),
                    Ok(n) => s.header_read += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return fail(&mut s.failed, format!("receive failed: {e}")),
                }
            }
            let tag = u32::from_le_bytes(s.header[..4].try_into().expect("4 bytes"));
            let len = u64::from_le_bytes(s.header[4..].try_into().expect("8 bytes")) as usize;
            let front = s.queue.front().expect("checked non-empty");
            let Some(index) = (0..front.buffers.len()).find(|&i| front.sizes[i].is_none() && front.buffers[i].tag == tag) else {
                return fail(&mut s.failed, format!("message with tag {tag} matches no posted receive"));
            };
            if len > front.buffers[index].len {
                return fail(&mut s.failed, format!("message of {len} bytes for a {}-byte receive buffer", front.buffers[index].len));
            }
            s.body = Some((index, len, 0));
        }
        let (index, len, mut read) = s.body.expect("set above");
        let buffer = s.queue.front().expect("non-empty").buffers[index];
        while read < len {
            // SAFETY: the irecv contract keeps the buffer valid; len <= buffer.len (checked).
            let target = unsafe { std::slice::from_raw_parts_mut(buffer.data, len) };
            match s.stream.read(&mut target[read..]) {
                Ok(0) => return fail(&mut s.failed, "connection closed by the sender".into()),
                Ok(n) => read += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    s.body = Some((index, len, read));
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return fail(&mut s.failed, format!("receive failed: {e}")),
            }
        }
        s.body = None;
        s.header_read = 0;
        let front = s.queue.front_mut().expect("non-empty");
        front.sizes[index] = Some(len);
        if front.sizes.iter().all(Option::is_some) {
            let done = s.queue.pop_front().expect("non-empty");
            s.done = done.id + 1;
            s.completed.insert(done.id, done.sizes.into_iter().map(|x| x.expect("all set")).collect());
        }
    }
}

fn fail<T>(slot: &mut Option<String>, reason: String) -> Result<T> {
    *slot = Some(reason.clone());
    Err(Error::Closed(reason))
}

#[cfg(test)]
mod tests;
