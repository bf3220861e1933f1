//! Setting up connections: for every link a plan uses and this rank lacks, the receiving
//! side creates its FIFO and sends the sender a handle through the bootstrap; the sending
//! side waits for that handle and opens it. Receivers never wait, so setup cannot deadlock.
//! Ranks on one host (same host id, shared memory allowed) get shared-memory FIFOs; others
//! get network connections progressed by the proxy engine.

use std::collections::BTreeSet;

use oxccl_bootstrap::Bootstrap;
use oxccl_transports::fifo::{Geometry, Receiver, Region, Sender};

use crate::algo::Link;
use crate::error::{Error, Result};
use super::exec::{Connections, Lane};
use crate::log_target;
use crate::proxy::{Driver, NetConnection, NetLinks};
use crate::pxn::relay;
use crate::pxn::{Hop, Rails};

/// Bootstrap tags for connection handles: one per channel, above user tags' usual range.
const HANDLE_TAG: u64 = 1 << 62;
const KIND_SHM: u8 = 1;
const KIND_NET: u8 = 2;
/// A network handle of a comm shared with other links the same rank sends
/// ([`NetLinks::listen_shared`]).
const KIND_NET_SHARED: u8 = 3;

/// Which transport reaches each peer.
pub(crate) struct Transports {
    pub same_host: Vec<bool>,
    /// This communicator's ranks on this machine (this one included): those sharing its
    /// cores, hosts posed with NCCL_HOSTID or not.
    local: usize,
    /// The host's cores online, not this process's affinity: launchers bind each rank to
    /// its own.
    cores: usize,
    pub shm_allowed: bool,
    pub geometry: Geometry,
}

impl Transports {
    /// Transports to the ranks of `same_host`, `local` of the communicator's ranks running
    /// on this machine.
    pub fn new(same_host: Vec<bool>, local: usize, shm_allowed: bool, geometry: Geometry) -> Transports {
        // SAFETY: sysconf has no preconditions.
        let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        Transports { same_host, local, cores, shm_allowed, geometry }
    }

    /// A warning for a rank that uses the network while it may run on one core of a host
    /// with room for more (see [`one_core_warning`]).
    pub fn one_core_warning(&self) -> Option<String> {
        let allowed = std::thread::available_parallelism().map_or(1, |n| n.get());
        self.any_net().then(|| one_core_warning(allowed, self.cores, self.local)).flatten()
    }

    pub(crate) fn shared_memory(&self, peer: usize) -> bool {
        self.shm_allowed && self.same_host[peer]
    }


    /// Whether this machine runs more of the communicator's ranks than it has cores online
    /// (ranks posing as hosts of one machine count together: they share its cores).
    pub fn oversubscribed(&self) -> bool {
        self.local > self.cores
    }

    /// Whether some peer is reached through the network.
    pub fn any_net(&self) -> bool {
        (0..self.same_host.len()).any(|p| !self.shared_memory(p))
    }
}

/// What to tell a rank that may run on `allowed` of the host's `cores` cores, `local` ranks
/// of its communicator on the host, when it uses the network: on one core, where the host
/// has two for each of its ranks, the rank's executor and network proxy thread share that
/// core. mpirun binds each rank to one core when it starts two or fewer; on 2xH200's host
/// two such ranks over the socket Net took 41 µs for a small all_reduce and moved 1.5 GB/s
/// at 16 MiB, unbound 21 µs and 3.6 GB/s (docs/PERFORMANCE.md). Where the ranks fill the
/// host (this 2-core VM) unbinding gains nothing, and nothing is said.
fn one_core_warning(allowed: usize, cores: usize, local: usize) -> Option<String> {
    (allowed == 1 && cores >= 2 * local.max(1)).then(|| {
        format!(
            "this rank may run on 1 of the host's {cores} cores (its CPU affinity or quota, e.g. mpirun's binding of 2 or fewer ranks to a core each): \
             its collective executor and network proxy thread share that core, which can halve network bandwidth; \
             give each rank more cores (mpirun --bind-to none or --map-by slot:PE=N, srun --cpus-per-task=N)"
        )
    })
}

/// Makes sure every link the lanes use is connected: network sends leave by the NIC, and
/// the proxy, that `rails` says (PXN).
pub(crate) fn ensure(lanes: &[Lane], conns: &mut Connections, boot: &Bootstrap, transports: &Transports, net: &NetLinks, rails: &Rails) -> Result<()> {
    let me = boot.rank() as usize;
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
            let (region, handle) = Region::create_shared(transports.geometry.slots, transports.geometry.slot_bytes).map_err(|e| Error::from_transport(format!("making the shared-memory FIFO from rank {}", link.peer), e))?;
            (Receiver::new(region), [vec![KIND_SHM], handle].concat())
        } else {
            let region = Region::heap(transports.geometry.slots, transports.geometry.slot_bytes).map_err(|e| Error::from_transport("making a network FIFO", e))?;
            let sender = rails.carrier(link.peer, me, link.channel, link.channel == P2P_CHANNEL);
            let device = rails.receive_device(me, link.channel);
            // PXN: every link whose messages one relaying rank sends here on this channel
            // shares a comm, when the Net takes several buffers a receive, so that their
            // receives are posted together (NCCL's shared comms).
            let shared = rails.may_relay_for_others(sender) && net.max_recvs(device) > 1;
            let (handle, proxy) = if shared { net.listen_shared(link, sender, region.clone(), device)? } else { net.listen(link, sender, region.clone(), Driver::Host, device, None)? };
            conns.proxies.insert((link, false), proxy);
            net.record(NetConnection { from: link.peer, to: me, channel: link.channel, proxy: sender, send: false, device, nic: net.device_name(device) });
            (Receiver::new(region), [vec![if shared { KIND_NET_SHARED } else { KIND_NET }], handle].concat())
        };
        boot.send(link.peer as u32, HANDLE_TAG + link.channel as u64, &handle)?;
        conns.receivers.insert(link, receiver);
        tracing::debug!(target: log_target::P2P, "receiving from {link:?} over {}", if handle[0] == KIND_SHM { "shared memory" } else { "the network" });
    }
    for link in sends {
        let handle = boot.recv(link.peer as u32, HANDLE_TAG + link.channel as u64)?;
        let sender = match handle.split_first() {
            Some((&KIND_SHM, rest)) => Sender::new(Region::open_shared(rest).map_err(|e| Error::from_transport(format!("opening rank {}'s shared-memory FIFO", link.peer), e))?),
            Some((&kind @ (KIND_NET | KIND_NET_SHARED), rest)) => match rails.route(me, link.peer, link.channel, link.channel == P2P_CHANNEL) {
                Hop::Direct { device } => {
                    let region = Region::heap(transports.geometry.slots, transports.geometry.slot_bytes).map_err(|e| Error::from_transport("making a network FIFO", e))?;
                    let proxy = net.connect(link, rest, region.clone(), Driver::Host, device, None, (kind == KIND_NET_SHARED).then_some(me))?;
                    conns.proxies.insert((link, true), proxy);
                    net.record(NetConnection { from: me, to: link.peer, channel: link.channel, proxy: me, send: true, device, nic: net.device_name(device) });
                    Sender::new(region)
                }
                Hop::Relay { proxy, device } => {
                    // The relaying rank's proxy drains the FIFO: nothing here to wake.
                    let region = relay::ask(boot, proxy, link, rest, device, transports.geometry, 0, kind == KIND_NET_SHARED)?;
                    let nic = rails.rail(proxy, device).unwrap_or("?").to_string();
                    net.record(NetConnection { from: me, to: link.peer, channel: link.channel, proxy, send: true, device, nic });
                    Sender::new(region)
                }
            },
            _ => return Err(Error::transport(format!("rank {} sent a malformed connection handle", link.peer))),
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


#[cfg(test)]
mod tests {
    use super::one_core_warning;

    #[test]
    fn a_rank_bound_to_one_core_of_a_roomy_host_is_warned() {
        let warning = one_core_warning(1, 32, 2).expect("one core of 32, two ranks");
        assert!(warning.contains("1 of the host's 32 cores") && warning.contains("--bind-to none"), "{warning}");
        assert_eq!(one_core_warning(1, 2, 2), None, "two ranks fill a 2-core host: nothing better to offer");
        assert_eq!(one_core_warning(1, 1, 1), None);
        assert_eq!(one_core_warning(4, 32, 2), None, "not bound to one core");
    }
}
