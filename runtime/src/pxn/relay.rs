//! The relays of PXN between ranks of one host: a rank whose send must leave by another
//! local rank's NIC ([`super::Rails`]) asks that rank, over the bootstrap, to relay it; the
//! relaying rank makes a shared-memory FIFO, starts a proxy link that sends what the
//! asking rank writes there to the destination's listen handle from its NIC, and answers
//! with the FIFO's handle. Requests are answered by a service thread of each communicator
//! whose rank may relay for others, so that a rank relays whatever the others connect
//! (collectives' links, and point-to-point links made lazily by calls this rank is not
//! part of) without taking part in their calls.
//!
//! The relayed link belongs to the relaying rank's communicator: its failure (the
//! destination gone) is that communicator's, naming the destination; the asking rank
//! writes into the FIFO as into any shared-memory FIFO, whose reader is the relaying
//! process (its exit ends the asking rank's waits).
//!
//! A GPU kernel's sends are relayed alike: the asking rank asks for LL slots after the
//! FIFO's (the segment's tail), maps the segment into its GPU, and its kernel writes there
//! as into a FIFO of its own process's pinned memory; its host leaves each operation's
//! announcement in the FIFO's notes, which the relaying proxy reads.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use oxccl_bootstrap::{AbortFlag, Bootstrap};
use oxccl_transports::fifo::{Geometry, Region};

use crate::algo::Link;
use crate::base::Core;
use crate::error::{Error, Result};
use crate::log_target;
use crate::proxy::ll::LlSlots;

/// Bootstrap tags of requests (to the relaying rank) and replies (to the asking one), below
/// the connection handles' (`1 << 62` and up).
const REQUEST_TAG: u64 = (1 << 62) - 2;
const REPLY_TAG: u64 = (1 << 62) - 1;
/// Tag of the notice that a rank has flushed its relayed sends (see [`part`]).
const DONE_TAG: u64 = (1 << 62) - 3;
/// First byte of a request: the format's version.
const VERSION: u8 = 3;
/// Bytes of a request's fixed part, after the version: seven u64 words.
const FIXED: usize = 56;
/// How long the service waits for a request before it looks at its communicator again.
const POLL: Duration = Duration::from_millis(50);

/// What the asking rank sends: the link (its peer is the destination), the relaying rank's
/// device to send from, the FIFO's geometry, the bytes of each LL slot after the FIFO's
/// slots (a GPU kernel's FIFO; 0 for a host executor's), the destination's listen handle
/// and whether it is a shared comm's (the relay then sends on the comm of its other links
/// to that destination's channel, `NetLinks::listen_shared`).
#[derive(Debug, PartialEq, Eq)]
struct Request {
    link: Link,
    device: usize,
    geometry: Geometry,
    ll_slot_bytes: usize,
    handle: Vec<u8>,
    shared: bool,
}

impl Request {
    fn encode(&self) -> Vec<u8> {
        let mut bytes = vec![VERSION];
        for value in [self.link.peer as u64, self.link.channel as u64, self.device as u64, self.geometry.slots as u64, self.geometry.slot_bytes as u64, u64::from(self.shared), self.ll_slot_bytes as u64] {
            bytes.extend_from_slice(&value.to_le_bytes());
        }
        bytes.extend_from_slice(&self.handle);
        bytes
    }

    fn decode(bytes: &[u8]) -> Result<Request> {
        let malformed = |why: &str| Error::transport(format!("malformed PXN relay request ({} bytes): {why}", bytes.len()));
        let (&version, rest) = bytes.split_first().ok_or_else(|| malformed("empty"))?;
        if version != VERSION {
            return Err(malformed(&format!("version {version}, this rank reads {VERSION}")));
        }
        if rest.len() < FIXED {
            return Err(malformed("shorter than its fixed part"));
        }
        let word = |i: usize| -> Result<usize> { usize::try_from(u64::from_le_bytes(rest[i * 8..i * 8 + 8].try_into().expect("8 bytes"))).map_err(|_| malformed("a field beyond usize")) };
        Ok(Request {
            link: Link { peer: word(0)?, channel: word(1)? },
            device: word(2)?,
            geometry: Geometry { slots: word(3)?, slot_bytes: word(4)? },
            shared: match word(5)? {
                0 => false,
                1 => true,
                other => return Err(malformed(&format!("sharing flag {other}"))),
            },
            ll_slot_bytes: word(6)?,
            handle: rest[FIXED..].to_vec(),
        })
    }
}

/// Asks rank `proxy` of this host to relay `link` (to its peer, whose listen `handle` this
/// rank got) from its `device`; the FIFO to write the link's messages into, with LL slots
/// of `ll_slot_bytes` each after its slots when that is not 0 (a GPU kernel's FIFO).
/// Bounded by the bootstrap's timeout; ends on abort or the proxy rank's failure.
#[allow(clippy::too_many_arguments)]
pub(crate) fn ask(boot: &Bootstrap, proxy: usize, link: Link, handle: &[u8], device: usize, geometry: Geometry, ll_slot_bytes: usize, shared: bool) -> Result<Arc<Region>> {
    let request = Request { link, device, geometry, ll_slot_bytes, handle: handle.to_vec(), shared };
    boot.send(proxy as u32, REQUEST_TAG, &request.encode())?;
    let reply = boot.recv(proxy as u32, REPLY_TAG)?;
    match reply.split_first() {
        Some((0, fifo)) => Region::open_shared(fifo).map_err(|e| Error::from_transport(format!("opening rank {proxy}'s PXN relay FIFO"), e)),
        Some((1, why)) => Err(Error::transport(format!("rank {proxy} cannot relay the send to rank {} channel {}: {}", link.peer, link.channel, String::from_utf8_lossy(why)))),
        _ => Err(Error::transport(format!("rank {proxy} answered the PXN relay request with {} malformed bytes", reply.len()))),
    }
}

/// Before a communicator goes (finalize, destroy): a rank whose sends other ranks of its
/// host relay tells them its relayed sends are flushed (the caller flushed them first),
/// and a rank that relays for others waits for that notice from each, since its links
/// end with its communicator and its process may exit right after. Once per
/// communicator; bounded by the bootstrap's timeout, ended by a failure or an abort. A
/// communicator going in error only sends its notices (`wait` false): the ranks relaying
/// for it must not wait for it.
pub(crate) fn part(core: &Core, wait: bool) -> Result<()> {
    if core.relays_parted.swap(true, std::sync::atomic::Ordering::AcqRel) {
        return Ok(());
    }
    let parted = (|| {
        for proxy in core.rails.relays_of(core.rank) {
            core.boot.send(proxy as u32, DONE_TAG, &[])?;
        }
        for origin in core.rails.relayed_for(core.rank).into_iter().filter(|_| wait) {
            core.boot.recv(origin as u32, DONE_TAG)?;
        }
        Ok(())
    })();
    stop_service(core);
    parted
}

/// The relay service of a communicator's rank.
pub(crate) enum Service {
    NotStarted,
    Running { stop: AbortFlag, thread: JoinHandle<()> },
    Stopped,
}

/// Starts the relay service of `core`'s rank if ranks of its host may relay through it,
/// answering their requests until the communicator goes.
pub(crate) fn serve_if_needed(core: &Arc<Core>) {
    // A communicator moved onto GPU memory keeps its core: one service per core.
    let mut service = core.relay_service.lock();
    if !core.rails.may_relay_for_others(core.rank) || !matches!(*service, Service::NotStarted) {
        return;
    }
    let locals = (0..core.nranks).filter(|&r| r != core.rank && core.same_host[r]).collect();
    let (weak, rank, stop) = (Arc::downgrade(core), core.rank, AbortFlag::new());
    let flag = stop.clone();
    match std::thread::Builder::new().name(format!("oxccl-pxn-{rank}")).spawn(move || run(weak, locals, &flag)) {
        Ok(thread) => *service = Service::Running { stop, thread },
        Err(e) => {
            *service = Service::Stopped;
            tracing::warn!(target: log_target::NET, "rank {rank}: starting the PXN relay service: {e}; ranks of this host that would relay through it will time out");
        }
    }
}

/// Stops the relay service of `core`'s rank and waits for its thread (at most one poll):
/// the thread holds the communicator's core while it waits for a request, and a core that
/// goes with it, after the process's last call, would never say goodbye to the job's
/// other ranks (whose waits on this rank would then fail as on a death). Called when the
/// ranks relayed for have parted, and by a GPU teardown.
pub(crate) fn stop_service(core: &Core) {
    let service = std::mem::replace(&mut *core.relay_service.lock(), Service::Stopped);
    if let Service::Running { stop, thread } = service {
        stop.raise();
        // Never this thread: parting and GPU teardowns call this, the service never does.
        if thread.join().is_err() {
            tracing::warn!(target: log_target::NET, "rank {}: the PXN relay service panicked", core.rank);
        }
    }
}

fn run(core: Weak<Core>, locals: Vec<usize>, stop: &AbortFlag) {
    let peers: Vec<u32> = locals.iter().map(|&r| r as u32).collect();
    loop {
        let Some(core) = core.upgrade() else { return };
        if stop.is_raised() || core.net.is_closed() || core.abort.is_raised() {
            return;
        }
        match core.boot.recv_any(REQUEST_TAG, &peers, POLL) {
            Ok(Some((from, bytes))) => {
                let reply = match relay(&core, from as usize, &bytes) {
                    Ok(fifo) => [vec![0], fifo].concat(),
                    Err(e) => {
                        tracing::warn!(target: log_target::NET, "rank {}: PXN relay for rank {from}: {e}", core.rank);
                        [vec![1], e.to_string().into_bytes()].concat()
                    }
                };
                if let Err(e) = core.boot.send(from, REPLY_TAG, &reply) {
                    tracing::warn!(target: log_target::NET, "rank {}: answering rank {from}'s PXN relay request: {e}", core.rank);
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(target: log_target::NET, "rank {}: the PXN relay service stops: {e}", core.rank);
                return;
            }
        }
    }
}

/// Starts relaying what `origin` asks for; the handle of the FIFO it is to write into.
fn relay(core: &Core, origin: usize, bytes: &[u8]) -> Result<Vec<u8>> {
    let request = Request::decode(bytes)?;
    if request.link.peer >= core.nranks {
        return Err(Error::invalid(format!("relay to rank {} of a communicator of {}", request.link.peer, core.nranks)));
    }
    let tail = request.ll_slot_bytes.checked_mul(request.geometry.slots).ok_or_else(|| Error::invalid(format!("LL slots of {} bytes", request.ll_slot_bytes)))?;
    let (region, handle) = Region::create_shared_with_tail(request.geometry, tail).map_err(|e| Error::from_transport("making the PXN relay FIFO", e))?;
    // The origin, in another process, rings it after each post (a host executor) or note
    // (a GPU kernel's host) while the relaying proxy thread sleeps: nothing else could wake
    // that thread.
    region.enable_doorbell();
    let ll = (request.ll_slot_bytes > 0).then(|| LlSlots { base: region.tail_memory().0 as usize, slot_bytes: request.ll_slot_bytes });
    core.net.relay(origin, request.link, &request.handle, region, request.device, request.shared, ll)?;
    tracing::debug!(target: log_target::NET, "rank {}: relaying rank {origin}'s sends to rank {} channel {} from device {}", core.rank, request.link.peer, request.link.channel, request.device);
    Ok(handle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_and_bad_ones_are_named() {
        let request = Request { link: Link { peer: 5, channel: 1 << 16 }, device: 1, geometry: Geometry { slots: 8, slot_bytes: 1 << 17 }, ll_slot_bytes: 4096, handle: vec![7; 30], shared: true };
        assert_eq!(Request::decode(&request.encode()).unwrap(), request);
        assert!(Request::decode(&[]).unwrap_err().to_string().contains("empty"));
        assert!(Request::decode(&[9, 0]).unwrap_err().to_string().contains("version 9"));
        assert!(Request::decode(&[VERSION, 0, 0]).unwrap_err().to_string().contains("shorter than its fixed part"));
    }
}
