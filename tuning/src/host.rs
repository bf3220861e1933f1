//! The host executor's cost model: measured on a 2-core VM (docs/PERFORMANCE.md), it prices
//! what the host data path runs — Ring, Tree, Direct and Doubling (all_reduce) over Simple
//! FIFOs.
//!
//! An algorithm costs its hops in sequence times a per-hop latency, plus its messages per
//! hop times an issue cost, plus the bytes each rank moves over a bandwidth, plus the
//! elements it reduces over a reduction rate: shared memory ~0.15 µs a hop and ~6 GB/s,
//! the socket Net ~15 µs a hop and ~0.8 GB/s per connection (no helper threads: its default
//! below 4 cores), reductions ~4 GB/s; a hop costs ~5 µs when a host runs more ranks than
//! it has cores (a message waits for its receiver to be scheduled), and so does every
//! message of a hop. For all_reduce: ring (2(n-1) hops, 2(n-1)/n of the data),
//! the double binary tree (2⌈log2 n⌉ hops, about twice the data) and the two-shot direct
//! exchange (2 hops of n-1 messages each, the ring's traffic; on the Net its n-1
//! connections stream in parallel, in shared memory its scattered copies run at about half
//! the ring's pipelined rate); with two ranks, direct is one shot (1 hop, the ring's
//! traffic, twice its reductions); recursive doubling (log2 n hops of one message, two
//! more where n is not a power of two, the whole vector moved and folded each hop). Where
//! the ranks lie host by host, the tree runs across hosts with a chain inside each: its
//! network hops are those of a tree over the hosts, the chain's in shared memory, and a
//! host's link carries each tree's half of the data once each way; and of the ring's hops
//! (all_reduce, all_gather, reduce_scatter), the share hosts/n crosses hosts (one link a
//! host of the ring in rank order), the rest are shared memory's. Recursive doubling's
//! rounds inside a host are still priced as the Net's.

use crate::collective::Collective;
use crate::names::{Algorithm, Protocol};
use crate::table::CostTable;

/// What the host model knows of a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostModel {
    pub nranks: usize,
    /// Some peer is reached through the network.
    pub net: bool,
    /// This host runs more ranks of the communicator than it has cores.
    pub oversubscribed: bool,
    /// Ranks a host, where the ranks lie host by host in equal blocks (the tree then runs
    /// across hosts with a chain inside each); 1 where they do not, or are all on one host
    /// with no network (the tree over all ranks).
    pub per_host: usize,
}

impl HostModel {
    /// Whether the host executor runs `algorithm` for `collective` (with Simple, its only protocol).
    pub fn runs(collective: Collective, algorithm: Algorithm, protocol: Protocol) -> bool {
        protocol == Protocol::Simple
            && match algorithm {
                Algorithm::Ring => true,
                Algorithm::Tree => collective == Collective::AllReduce,
                Algorithm::Direct => matches!(collective, Collective::AllReduce | Collective::AllToAll | Collective::Gather | Collective::Scatter),
                Algorithm::Doubling => collective == Collective::AllReduce,
                _ => false,
            }
    }

    /// Estimated seconds of `algorithm` for `collective` on `bytes` (the collective's `count` elements).
    pub fn estimate(&self, collective: Collective, algorithm: Algorithm, bytes: usize) -> f64 {
        let (mut hop, mut issue, bandwidth): (f64, f64, f64) = if self.net { (15e-6, 2e-6, 0.8e9) } else { (0.15e-6, 0.05e-6, 6e9) };
        if self.oversubscribed {
            // More ranks than cores: a message waits for its receiver to be scheduled, as a
            // hop does (2-core VM, 4 and 8 ranks over the socket Net, 2026-11-27: two-shot's
            // 6 and 14 messages a rank 126-1036 µs at 8 B-4 KiB, recursive doubling's 2 and 3
            // 78-289).
            hop = hop.max(5e-6);
            issue = hop;
        }
        let reduce_rate = 4e9;
        let n = self.nranks.max(1) as f64;
        let s = bytes as f64;
        let log2 = ceil_log2(self.nranks);
        // Two-shot's connections stream in parallel over the Net only where there are cores
        // to move them.
        let parallel = if !self.net {
            0.5
        } else if self.oversubscribed {
            1.0
        } else {
            (n - 1.0).clamp(1.0, 2.0)
        };
        if let (Collective::AllReduce, Algorithm::Tree, true, Some(hosts)) = (collective, algorithm, self.net, host_blocks(self.nranks, self.per_host)) {
            // Across hosts with a chain inside each: ⌈log2 hosts⌉ network hops up and down,
            // the chain's hops in shared memory; each tree's half of the data crosses a
            // host's link once up and once down, and each chain once each way (posing as 2
            // hosts on this VM, 8 ranks: 620 µs at 256 KiB and 2.2 ms at 1 MiB, the ring's
            // 1.5 and 3.7 ms; docs/results/2026-11-27-vm-hosts-tree).
            let net_hops = 2.0 * ceil_log2(hosts);
            let chain_hops = 2.0 * (self.per_host - 1) as f64;
            // The chain's hops and messages cost what shared memory's do (the
            // oversubscribed floor where the host runs more ranks than cores), not the
            // Net's: priced at the Net's 15 us, the tree lost 32 KiB to recursive doubling
            // on 8 ranks posing as 2 hosts although it ran 1.2x faster there
            // (docs/results/2026-11-27-vm-proxy-idle).
            let (shm_hop, shm_issue) = shm_costs(self.oversubscribed);
            // A message a chain hop, two a hop between hosts (a head's children).
            return net_hops * hop + chain_hops * shm_hop + chain_hops * shm_issue + 2.0 * net_hops * issue + s / bandwidth + 2.0 * s / 6e9 + s / reduce_rate;
        }
        let (hops, messages, moved, reduced) = match (collective, algorithm) {
            (Collective::AllReduce, Algorithm::Ring) => (2.0 * (n - 1.0), 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s, (n - 1.0) / n * s),
            (Collective::AllReduce, Algorithm::Tree) => (2.0 * log2, 4.0 * log2, 2.0 * s, s),
            // Two ranks: one shot (one hop, each rank reduces everything).
            (Collective::AllReduce, Algorithm::Direct) if self.nranks == 2 => (1.0, 1.0, s, s),
            (Collective::AllReduce, Algorithm::Direct) => (2.0, 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s / parallel, (n - 1.0) / n * s),
            (Collective::AllReduce, Algorithm::Doubling) => {
                let hops = crate::net_kernels::doubling_hops(self.nranks) as f64;
                (hops, hops, hops * s, hops * s)
            }
            (_, Algorithm::Direct) => (1.0, n - 1.0, (n - 1.0) / n * s, 0.0),
            _ => (n - 1.0, n - 1.0, s, 0.0),
        };
        // Where the ranks lie host by host, the ring's hops inside a host are shared
        // memory's.
        let local = if self.net { ring_hops_inside_hosts(collective, algorithm, hops, self.nranks, self.per_host) } else { 0.0 };
        let (shm_hop, shm_issue) = shm_costs(self.oversubscribed);
        (hops - local) * hop + local * shm_hop + (messages - local) * issue + local * shm_issue + moved / bandwidth + reduced / reduce_rate
    }

    /// The cost table (µs) of a call of NCCL's `bytes` ([`Collective::tuning_bytes`]): the
    /// pairs the host executor runs, priced on the bytes of the call's `count` elements (what
    /// the model was measured with); one rank runs Ring at no cost, as NCCL does.
    pub fn table(&self, collective: Collective, bytes: usize) -> CostTable {
        let bytes = match collective {
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => bytes / self.nranks.max(1),
            _ => bytes,
        };
        let mut table = CostTable::default();
        if self.nranks <= 1 {
            table.set(Algorithm::Ring, Protocol::Simple, Some(0.0));
            return table;
        }
        for a in Algorithm::ALL {
            if HostModel::runs(collective, a, Protocol::Simple) {
                table.set(a, Protocol::Simple, Some((self.estimate(collective, a, bytes) * 1e6) as f32));
            }
        }
        table
    }
}

/// Seconds of a hop and of a message in shared memory: ~0.15 and 0.05 µs, ~5 µs each where
/// the host runs more ranks than cores (a message waits for its receiver to be scheduled).
fn shm_costs(oversubscribed: bool) -> (f64, f64) {
    if oversubscribed {
        (5e-6, 5e-6)
    } else {
        (0.15e-6, 0.05e-6)
    }
}

/// How many hosts `nranks` ranks lie on, where they lie host by host in blocks of
/// `per_host` (two or more of them, two or more hosts): a tree across hosts then has a
/// chain inside each.
pub(crate) fn host_blocks(nranks: usize, per_host: usize) -> Option<usize> {
    (per_host > 1 && nranks % per_host == 0 && nranks / per_host > 1).then(|| nranks / per_host)
}

/// Of the `hops` hops of `algorithm` running `collective`, those inside a host: where the
/// ranks lie host by host in blocks of `per_host`, a ring in rank order crosses hosts on
/// one link a host of its n (hosts/n of its hops), the rest stay inside; none where they
/// do not lie so, and none for alltoall's, gather's and scatter's "ring" (the direct
/// exchange runs them).
pub(crate) fn ring_hops_inside_hosts(collective: Collective, algorithm: Algorithm, hops: f64, nranks: usize, per_host: usize) -> f64 {
    match (collective, algorithm, host_blocks(nranks, per_host)) {
        (Collective::AllReduce | Collective::AllGather | Collective::ReduceScatter, Algorithm::Ring, Some(hosts)) => hops * (1.0 - hosts as f64 / nranks as f64),
        _ => 0.0,
    }
}

/// ⌈log2 n⌉, at least 1, in integers (a float log2 per call showed in the small-call
/// profile).
pub(crate) fn ceil_log2(n: usize) -> f64 {
    (usize::BITS - n.saturating_sub(1).leading_zeros()).max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Ranks posing as 2 hosts of 4: 2 of the ring's 8 links cross hosts, so of the 14 hops
    /// a chunk takes round it (all_reduce) 3.5 are the socket Net's and 10.5 shared
    /// memory's, not 14 the Net's; alltoall's "ring" (the direct exchange runs it) is
    /// priced as before.
    #[test]
    fn a_rings_hops_inside_a_host_are_shared_memorys() {
        let posed = HostModel { nranks: 8, net: true, oversubscribed: false, per_host: 4 };
        let flat = HostModel { per_host: 1, ..posed };
        let ring = |m: HostModel, c| m.estimate(c, Algorithm::Ring, 8) * 1e6;
        // 3.5 hops x (15 + 2) µs and 10.5 x (0.15 + 0.05), against 14 x (15 + 2).
        assert!((ring(posed, Collective::AllReduce) - (3.5 * 17.0 + 10.5 * 0.2)).abs() < 0.5, "{}", ring(posed, Collective::AllReduce));
        assert!((ring(flat, Collective::AllReduce) - 14.0 * 17.0).abs() < 0.5, "{}", ring(flat, Collective::AllReduce));
        assert!(ring(posed, Collective::AllGather) < ring(flat, Collective::AllGather));
        assert_eq!(ring(posed, Collective::AllToAll), ring(flat, Collective::AllToAll));
        // More ranks than cores: a hop in shared memory costs ~5 µs too.
        let crowded = HostModel { oversubscribed: true, ..posed };
        assert!((ring(crowded, Collective::AllReduce) - (3.5 * 30.0 + 10.5 * 10.0)).abs() < 0.5, "{}", ring(crowded, Collective::AllReduce));
    }
}
