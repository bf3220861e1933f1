//! Setting up connections: for every link a plan uses and this rank lacks, the receiving
//! side creates its FIFO and sends the sender a handle through the bootstrap; the sending
//! side waits for that handle and opens it. Receivers never wait, so setup cannot deadlock.
//! Ranks on one host (same host id, shared memory allowed) get shared-memory FIFOs; others
//! get network connections progressed by the proxy engine.

use std::collections::BTreeSet;

use oxccl_bootstrap::Bootstrap;
use oxccl_transports::fifo::{Receiver, Region, Sender};

use crate::algo::Link;
use crate::error::{Error, Result};
use crate::exec::{Connections, Lane};
use crate::log_target;
use crate::proxy::NetLinks;

/// Bootstrap tags for connection handles: one per channel, above user tags' usual range.
const HANDLE_TAG: u64 = 1 << 62;
const KIND_SHM: u8 = 1;
const KIND_NET: u8 = 2;

/// FIFO geometry for every connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    pub slots: usize,
    pub slot_bytes: usize,
}

/// Which transport reaches each peer.
pub(crate) struct Transports {
    pub same_host: Vec<bool>,
    pub oversubscribed: bool,
    pub shm_allowed: bool,
    pub geometry: Geometry,
}

impl Transports {
    pub fn new(same_host: Vec<bool>, shm_allowed: bool, geometry: Geometry) -> Transports {
        let local = same_host.iter().filter(|&&same| same).count();
        // The host's cores, not this process's affinity: launchers bind each rank to its own.
        // SAFETY: sysconf has no preconditions.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        let oversubscribed = local > cores;
        Transports { same_host, oversubscribed, shm_allowed, geometry }
    }

    pub(crate) fn shared_memory(&self, peer: usize) -> bool {
        self.shm_allowed && self.same_host[peer]
    }


    /// Whether this host runs more of the communicator's ranks than it has cores online.
    pub fn oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    /// Whether some peer is reached through the network.
    pub fn any_net(&self) -> bool {
        (0..self.same_host.len()).any(|p| !self.shared_memory(p))
    }
}

/// Makes sure every link the lanes use is connected.
pub(crate) fn ensure(lanes: &[Lane], conns: &mut Connections, boot: &Bootstrap, transports: &Transports, net: &NetLinks) -> Result<()> {
    let mut receives = BTreeSet::new();
    let mut sends = BTreeSet::new();
    for (step, _) in lanes.iter().flat_map(|l| &l.steps) {
        if let Some(link) = step.receives().filter(|l| !conns.receivers.contains_key(l)) {
            receives.insert(link);
        }
        if let Some(link) = step.sends().filter(|l| !conns.senders.contains_key(l)) {
            sends.insert(link);
        }
    }
    for link in receives {
        let (receiver, handle) = if transports.shared_memory(link.peer) {
            let (region, handle) = Region::create_shared(transports.geometry.slots, transports.geometry.slot_bytes).map_err(transport)?;
            (Receiver::new(region), [vec![KIND_SHM], handle].concat())
        } else {
            let (receiver, handle, proxy) = net.listen(link, transports.geometry)?;
            conns.proxies.insert((link, false), proxy);
            (receiver, [vec![KIND_NET], handle].concat())
        };
        boot.send(link.peer as u32, HANDLE_TAG + link.channel as u64, &handle)?;
        conns.receivers.insert(link, receiver);
        tracing::debug!(target: log_target::P2P, "receiving from {link:?} over {}", if handle[0] == KIND_SHM { "shared memory" } else { "the network" });
    }
    for link in sends {
        let handle = boot.recv(link.peer as u32, HANDLE_TAG + link.channel as u64)?;
        let sender = match handle.split_first() {
            Some((&KIND_SHM, rest)) => Sender::new(Region::open_shared(rest).map_err(transport)?),
            Some((&KIND_NET, rest)) => {
                let (sender, proxy) = net.connect(link, rest, transports.geometry)?;
                conns.proxies.insert((link, true), proxy);
                sender
            }
            _ => return Err(Error::Transport(format!("rank {} sent a malformed connection handle", link.peer))),
        };
        conns.senders.insert(link, sender);
    }
    Ok(())
}

/// The link a point-to-point operation uses: its own channel, past any collective's.
pub(crate) fn p2p_link(peer: usize) -> Link {
    Link { peer, channel: P2P_CHANNEL }
}

/// Channel of point-to-point traffic.
pub(crate) const P2P_CHANNEL: usize = 1 << 16;

fn transport(e: oxccl_transports::Error) -> Error {
    Error::Transport(e.to_string())
}
