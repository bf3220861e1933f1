//! PXN: which NIC, and whose proxy, carries each network connection — the communicator's
//! map of NICs to ranks and the rule over it (this file: no I/O; the host backend asks
//! [`Rails::route`] when it connects a link) — and the relays that carry out its answer
//! ([`relay`]: requests over the bootstrap, a service thread, parting).
//!
//! Each rank's NICs are its Net's devices, named as the Net names them (the interface for
//! sockets: `rail0`, `ib1`; the device for plugins: `mlx5_0`), gathered from every rank
//! when the communicator spans hosts. Devices of one name on different hosts are taken to
//! be one rail (one network, a switch of its own), as rail-optimized clusters are cabled
//! and as NCCL assumes when it pairs a GPU with the peer's NIC of the same index.
//!
//! A rank's own NICs are those it sees; where NCCL_TOPO_FILE says which of them are near
//! the CPU (NUMA node) it runs on, only those (`oxccl_topology::layout::nets_near_cpus`;
//! the others are written `!name` in its record and used only where nothing nearer
//! serves). A receive on `channel` listens on the receiver's own device
//! `channel % its own devices` (channels are dealt over a rank's NICs). A send to it goes
//! out of a NIC on that device's rail:
//! 1. the sender's own NIC on that rail, if it has one;
//! 2. else, with PXN allowed, the own NIC on that rail of the lowest rank of its host that
//!    has one and is reached through shared memory: the sender writes into a FIFO that
//!    rank's proxy reads and sends from (NCCL's PXN: traffic stays on its rail instead of
//!    crossing between rails, a spine or a slower path);
//! 3. else a NIC of the sender's on that rail that is not near it, if any;
//! 4. else the sender's own NIC for the channel, across rails.

pub(crate) mod relay;

use crate::error::{Error, Result};

/// Whose NIC a send leaves by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Hop {
    /// The sender's own device `device`.
    Direct { device: usize },
    /// Rank `proxy` of the sender's host sends from its device `device`.
    Relay { proxy: usize, device: usize },
}

/// The communicator's NIC map and PXN settings: the same on every rank, so that a
/// receiver knows whose proxy its sender's data comes through.
#[derive(Clone, Debug, Default)]
pub(crate) struct Rails {
    /// Each rank's devices' names, in device order (on one host, this rank's for every
    /// rank: nothing is relayed then).
    names: Vec<Vec<String>>,
    /// Each rank's own devices (near it), in device order: every one without a map.
    own_devices: Vec<Vec<usize>>,
    /// Each rank's host, numbered in order of first appearance.
    hosts: Vec<usize>,
    /// [`Rails::ranks_per_host_block`], worked out once (a GPU call's route asks it).
    per_host_block: usize,
    /// Whether ranks of one host reach each other through shared memory (not
    /// NCCL_SHM_DISABLE): a relay needs it.
    shared_memory: bool,
    /// NCCL_PXN_DISABLE.
    pxn_disable: bool,
    /// NCCL_P2P_PXN_LEVEL.
    p2p_pxn_level: u8,
}

impl Rails {
    /// The map of every rank's device `names` (`!name`: a device not near the rank) and
    /// host identity (`hosts`: equal strings, one host).
    pub fn new(names: Vec<Vec<String>>, hosts: &[String], shared_memory: bool, pxn_disable: bool, p2p_pxn_level: u8) -> Rails {
        let own_devices = names
            .iter()
            .map(|all| {
                let near: Vec<usize> = (0..all.len()).filter(|&d| !all[d].starts_with(FAR)).collect();
                if near.is_empty() {
                    (0..all.len()).collect()
                } else {
                    near
                }
            })
            .collect();
        let names = names.into_iter().map(|all| all.into_iter().map(|n| n.strip_prefix(FAR).map_or(n.clone(), str::to_string)).collect()).collect();
        let mut seen: Vec<&String> = Vec::new();
        let hosts: Vec<usize> = hosts
            .iter()
            .map(|h| match seen.iter().position(|s| *s == h) {
                Some(i) => i,
                None => {
                    seen.push(h);
                    seen.len() - 1
                }
            })
            .collect();
        let per_host_block = per_host_block(&hosts);
        Rails { names, own_devices, hosts, per_host_block, shared_memory, pxn_disable, p2p_pxn_level }
    }

    /// How many ranks each host runs, where the ranks lie host by host in equal blocks
    /// (rank r on the (r / k)-th host); 1 where they do not. Every rank computes the same.
    pub fn ranks_per_host_block(&self) -> usize {
        self.per_host_block
    }

    /// Whether ranks `a` and `b` (not the same) reach each other through shared memory.
    fn local(&self, a: usize, b: usize) -> bool {
        a != b && self.shared_memory && self.hosts.get(a).is_some_and(|h| self.hosts.get(b) == Some(h))
    }

    fn own(&self, rank: usize) -> &[String] {
        self.names.get(rank).map_or(&[][..], |n| &n[..])
    }

    /// `rank`'s own devices (near it; all of them where none is marked near).
    fn near_devices(&self, rank: usize) -> &[usize] {
        self.own_devices.get(rank).map_or(&[][..], |d| &d[..])
    }

    /// `rank`'s device on `rail`: a near one, or (`near_only` false) any.
    fn device_on(&self, rank: usize, rail: &str, near_only: bool) -> Option<usize> {
        let all = self.own(rank);
        self.near_devices(rank).iter().copied().find(|&d| all[d] == rail).or_else(|| if near_only { None } else { all.iter().position(|n| n == rail) })
    }

    /// The device rank `rank` receives `channel`'s messages on: its own devices in turn.
    pub fn receive_device(&self, rank: usize, channel: usize) -> usize {
        let near = self.near_devices(rank);
        near.get(channel % near.len().max(1)).copied().unwrap_or(0)
    }

    /// The rail (device name) of `rank`'s device `device`.
    pub fn rail(&self, rank: usize, device: usize) -> Option<&str> {
        self.own(rank).get(device).map(String::as_str)
    }

    /// How a send from `from` to `to` on `channel` leaves `from`'s host; `point_to_point`
    /// for send/recv calls (NCCL_P2P_PXN_LEVEL applies to them).
    pub fn route(&self, from: usize, to: usize, channel: usize, point_to_point: bool) -> Hop {
        let direct = Hop::Direct { device: self.own_device(from, to, channel) };
        let Some(rail) = self.rail(to, self.receive_device(to, channel)) else { return direct };
        let allowed = !self.pxn_disable && !(point_to_point && self.p2p_pxn_level == 0);
        if allowed && self.device_on(from, rail, true).is_none() {
            let proxy = (0..self.names.len()).filter(|&r| self.local(from, r)).find_map(|r| self.device_on(r, rail, true).map(|device| (r, device)));
            if let Some((proxy, device)) = proxy {
                return Hop::Relay { proxy, device };
            }
        }
        direct
    }

    /// The rank whose proxy sends `from`'s messages to `to` on `channel`: `from`, or the
    /// rank relaying them (a receiver's connection ends when that rank goes).
    pub fn carrier(&self, from: usize, to: usize, channel: usize, point_to_point: bool) -> usize {
        match self.route(from, to, channel, point_to_point) {
            Hop::Direct { .. } => from,
            Hop::Relay { proxy, .. } => proxy,
        }
    }

    /// Which of `from`'s devices a send to `to` on `channel` leaves by, relays aside
    /// (rules 1, 3 and 4; for senders that cannot hand their data to another process: GPU
    /// kernels).
    pub fn own_device(&self, from: usize, to: usize, channel: usize) -> usize {
        let rail = self.rail(to, self.receive_device(to, channel));
        rail.and_then(|rail| self.device_on(from, rail, true).or_else(|| self.device_on(from, rail, false))).unwrap_or_else(|| self.receive_device(from, channel))
    }

    /// The ranks of `me`'s host whose proxies may relay `me`'s sends: for each rail of a rank
    /// elsewhere that `me` has no NIC on, the rank [`Rails::route`] would pick.
    pub fn relays_of(&self, me: usize) -> Vec<usize> {
        if self.pxn_disable {
            return Vec::new();
        }
        let mut relays: Vec<usize> = (0..self.names.len())
            .filter(|&r| r != me && self.hosts.get(r) != self.hosts.get(me))
            .flat_map(|r| self.near_devices(r).iter().map(move |&d| (r, d)))
            .filter_map(|(r, d)| self.rail(r, d))
            .filter(|rail| self.device_on(me, rail, true).is_none())
            .filter_map(|rail| (0..self.names.len()).find(|&p| self.local(me, p) && self.device_on(p, rail, true).is_some()))
            .collect();
        relays.sort_unstable();
        relays.dedup();
        relays
    }

    /// The ranks of `me`'s host whose sends `me` may relay.
    pub fn relayed_for(&self, me: usize) -> Vec<usize> {
        (0..self.names.len()).filter(|&r| self.local(me, r) && self.relays_of(r).contains(&me)).collect()
    }

    /// Whether some rank of this host may send through `me`'s NICs (so `me` must answer
    /// relay requests).
    pub fn may_relay_for_others(&self, me: usize) -> bool {
        !self.relayed_for(me).is_empty()
    }
}

/// The mark of a device not near its rank in a record (`!rail1`).
pub(crate) const FAR: &str = "!";

/// Bytes of each rank's record in the bootstrap's allgather (records have one size).
pub(crate) const RECORD_BYTES: usize = 1024;

/// This rank's record of the allgather: its host identity and device names, one per line
/// (neither holds a newline), zero-padded.
pub(crate) fn encode_record(host: &str, names: &[String]) -> Result<Vec<u8>> {
    let mut record = std::iter::once(host).chain(names.iter().map(String::as_str)).collect::<Vec<_>>().join("\n").into_bytes();
    if record.len() > RECORD_BYTES {
        return Err(Error::invalid(format!("the host identity and the net's device names take {} bytes (at most {RECORD_BYTES}): {host:?}, {names:?}", record.len())));
    }
    record.resize(RECORD_BYTES, 0);
    Ok(record)
}

/// The host identity and device names of a record.
pub(crate) fn decode_record(record: &[u8]) -> (String, Vec<String>) {
    let end = record.iter().position(|&b| b == 0).unwrap_or(record.len());
    let text = String::from_utf8_lossy(&record[..end]);
    let mut lines = text.split('\n');
    let host = lines.next().unwrap_or_default().to_string();
    (host, lines.filter(|n| !n.is_empty()).map(str::to_string).collect())
}

/// The ranks of each block of `hosts` (each rank's host number) when they lie host by host
/// in equal blocks, else 1 ([`Rails::ranks_per_host_block`]).
fn per_host_block(hosts: &[usize]) -> usize {
    let k = hosts.iter().take_while(|&&h| h == 0).count();
    if k == 0 || hosts.len() % k != 0 || hosts.iter().enumerate().any(|(r, &h)| h != r / k) {
        1
    } else {
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(rails: &[&str]) -> Vec<Vec<String>> {
        rails.iter().map(|r| r.split(',').map(str::to_string).collect()).collect()
    }

    fn hosts(of: &[usize]) -> Vec<String> {
        of.iter().map(|h| format!("host{h}")).collect()
    }

    /// 2 hosts × 2 ranks, each rank alone on its rail (rank 2h+i on `rail<i>`).
    fn rail_optimized(pxn_disable: bool, p2p_pxn_level: u8) -> Rails {
        Rails::new(names(&["rail0", "rail1", "rail0", "rail1"]), &hosts(&[0, 0, 1, 1]), true, pxn_disable, p2p_pxn_level)
    }

    #[test]
    fn a_send_to_another_rail_goes_through_the_host_rank_on_that_rail() {
        let rails = rail_optimized(false, 2);
        assert_eq!(rails.route(0, 2, 0, false), Hop::Direct { device: 0 }, "rank 2 is on rank 0's rail");
        assert_eq!(rails.route(0, 3, 0, false), Hop::Relay { proxy: 1, device: 0 }, "rank 3 is on rail1: rank 1's");
        assert_eq!(rails.route(0, 3, 5, true), Hop::Relay { proxy: 1, device: 0 }, "any channel, point-to-point too");
        assert_eq!(rails.route(3, 0, 0, false), Hop::Relay { proxy: 2, device: 0 }, "and back");
        assert_eq!((rails.carrier(0, 3, 0, false), rails.carrier(0, 2, 0, false)), (1, 0), "the receiver knows who connects");
        assert!(rails.may_relay_for_others(0), "rank 1 lacks rail0, which rank 2 is on");
        assert_eq!((rails.relays_of(0), rails.relayed_for(0)), (vec![1], vec![1]), "host mates relay for each other");
        assert_eq!(rails_without_pxn().relays_of(0), Vec::<usize>::new());
    }

    #[test]
    fn ranks_lie_host_by_host_only_in_equal_blocks() {
        let per_host = |layout: &[usize]| Rails::new(names(&vec!["lo"; layout.len()]), &hosts(layout), true, false, 2).ranks_per_host_block();
        assert_eq!(per_host(&[0, 0, 1, 1, 2, 2]), 2);
        assert_eq!(per_host(&[0, 0, 0]), 3, "one host: its ranks");
        assert_eq!(per_host(&[0, 1, 2]), 1, "a rank a host");
        assert_eq!(per_host(&[0, 1, 0, 1]), 1, "round robin: not blocks");
        assert_eq!(per_host(&[0, 0, 1]), 1, "uneven blocks");
        assert_eq!(per_host(&[0, 0, 1, 1, 0, 0]), 1, "a host's ranks apart");
    }

    fn rails_without_pxn() -> Rails {
        rail_optimized(true, 2)
    }

    #[test]
    fn pxn_settings_keep_sends_on_the_senders_nic() {
        let disabled = rail_optimized(true, 2);
        assert_eq!(disabled.route(0, 3, 0, false), Hop::Direct { device: 0 });
        assert!(!disabled.may_relay_for_others(0));
        let no_p2p = rail_optimized(false, 0);
        assert_eq!(no_p2p.route(0, 3, 0, true), Hop::Direct { device: 0 }, "NCCL_P2P_PXN_LEVEL=0: point-to-point direct");
        assert_eq!(no_p2p.route(0, 3, 0, false), Hop::Relay { proxy: 1, device: 0 }, "collectives still use PXN");
        let no_shm = Rails::new(names(&["rail0", "rail1", "rail0", "rail1"]), &hosts(&[0, 0, 1, 1]), false, false, 2);
        assert_eq!(no_shm.route(0, 3, 0, false), Hop::Direct { device: 0 }, "NCCL_SHM_DISABLE: no FIFO to relay through");
    }

    #[test]
    fn ranks_with_every_rail_send_from_their_own_nic_on_the_receivers_rail() {
        let rails = Rails::new(names(&["rail0,rail1"; 4]), &hosts(&[0, 0, 1, 1]), true, false, 2);
        for channel in 0..4 {
            assert_eq!(rails.route(0, 2, channel, false), Hop::Direct { device: channel % 2 }, "channel {channel}: dealt over the NICs as before");
        }
        assert!(!rails.may_relay_for_others(0));
    }

    #[test]
    fn without_a_host_rank_on_the_rail_a_send_crosses_rails_from_its_own_nic() {
        // Rank 1 (rail1) of host 0 is gone: rank 0 has no one to relay through.
        let rails = Rails::new(names(&["rail0", "rail0", "rail1"]), &hosts(&[0, 0, 1]), true, false, 2);
        assert_eq!(rails.route(0, 2, 3, false), Hop::Direct { device: 0 });
        assert!(!rails.may_relay_for_others(1));
        assert!(rails.relays_of(0).is_empty() && rails.relayed_for(1).is_empty());
    }

    #[test]
    fn one_host_or_one_rail_routes_nothing_anywhere_else() {
        let rails = Rails::new(names(&["lo"; 3]), &hosts(&[0, 1, 1]), true, false, 2);
        assert_eq!(rails.route(0, 1, 7, false), Hop::Direct { device: 0 });
        assert!(!rails.may_relay_for_others(1));
        let empty = Rails::default();
        assert_eq!(empty.route(0, 1, 3, false), Hop::Direct { device: 0 });
        assert_eq!(empty.receive_device(1, 3), 0);
    }

    /// Every rank sees both rails (`NCCL_SOCKET_IFNAME=rail0,rail1`) and a topology file
    /// says rank 2h+i runs next to rail i's NIC: the same routes as when each sees its own
    /// rail alone, but with PXN off a send leaves by the sender's far NIC on the receiver's
    /// rail rather than across rails.
    #[test]
    fn with_a_topology_each_rank_owns_its_near_nic() {
        let near = ["rail0,!rail1", "!rail0,rail1"];
        let map = |pxn_disable| Rails::new(names(&[near[0], near[1], near[0], near[1]]), &hosts(&[0, 0, 1, 1]), true, pxn_disable, 2);
        let rails = map(false);
        for channel in 0..3 {
            assert_eq!((rails.receive_device(2, channel), rails.receive_device(3, channel)), (0, 1), "channel {channel}: each listens on its own NIC");
        }
        assert_eq!(rails.route(0, 2, 0, false), Hop::Direct { device: 0 });
        assert_eq!(rails.route(0, 3, 1, false), Hop::Relay { proxy: 1, device: 1 }, "rank 1's own NIC on rail1 is its device 1");
        assert_eq!(rails.route(3, 0, 0, false), Hop::Relay { proxy: 2, device: 0 });
        assert_eq!((rails.relays_of(0), rails.relayed_for(1)), (vec![1], vec![0]));
        let off = map(true);
        assert_eq!(off.route(0, 3, 0, false), Hop::Direct { device: 1 }, "PXN off: rank 0's far NIC on rail1");
        assert_eq!(rails.own_device(0, 3, 0), 1, "kernels, which cannot relay: the far NIC on the rail");
        // Without marks every device is a rank's own: nothing to relay.
        let all = Rails::new(names(&["rail0,rail1"; 4]), &hosts(&[0, 0, 1, 1]), true, false, 2);
        assert_eq!(all.route(0, 3, 1, false), Hop::Direct { device: 1 });
        assert_eq!(decode_record(&encode_record("h", &["rail0".into(), "!rail1".into()]).unwrap()).1, vec!["rail0".to_string(), "!rail1".to_string()]);
    }

    #[test]
    fn records_round_trip_and_oversized_ones_are_refused() {
        let record = encode_record("host-a", &["rail0".into(), "rail1".into()]).unwrap();
        assert_eq!(record.len(), RECORD_BYTES);
        assert_eq!(decode_record(&record), ("host-a".to_string(), vec!["rail0".to_string(), "rail1".to_string()]));
        assert!(encode_record("h", &["x".repeat(2000)]).unwrap_err().to_string().contains("take 2002 bytes"));
    }
}
