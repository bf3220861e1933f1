//! The cost model of GPU kernels across hosts over the network (the NET transport: kernels
//! over FIFOs in pinned host memory that the network proxy moves), measured on one H100
//! with 2 and 4 ranks posing as hosts over loopback TCP (docs/PERFORMANCE.md): a hop — a
//! message from one rank's kernel to its peer's — costs ~24 µs, a rank moves ~6 GB/s over
//! its connections (~1.8 GB/s over one), and the GPU's reductions cost nothing next to that. What it runs:
//! the ring, and the direct exchange for every collective (one hop where the ring takes
//! n-1; all_reduce two-shot in two, or one for two ranks), and for all_reduce recursive
//! doubling (log2 n hops of one message each, two more where n is not a power of two),
//! and for all_reduce NCCL's double binary tree over the hosts with a chain inside each
//! (⌈log2 hosts⌉ network hops up and as many down; the chain's hops between GPUs of a
//! host), each over Simple or LL. Where the ranks lie host by host, the ring's hops inside a
//! host cost the chain's NVLink step (hosts/n of its hops cross hosts). Calls
//! are priced as they are issued, back to back: a rooted ring's calls overlap along its
//! chain, so each costs about one hop. LL
//! saves a hop the kernels' fences and the receiver's wait for the tail before the data,
//! and moves twice the bytes, line by line: on one H100 with 2 ranks as hosts, LL took
//! 0.1-7.6 µs less than Simple per call from 128 B to 2 KiB and lost from ~8 KiB
//! (docs/PERFORMANCE.md), so the model gives it 3 µs less a hop and a tenth of Simple's
//! bandwidth: LL up to ~2 KiB a message.

use crate::collective::Collective;
use crate::names::{Algorithm, Protocol};
use crate::table::CostTable;

/// What the model knows of a communicator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NetKernelModel {
    pub nranks: usize,
    /// Ranks a host, where the ranks lie host by host in blocks of that many (1 otherwise):
    /// the tree's chain inside a host.
    pub per_host: usize,
    /// The most channels a call runs (OXCCL_GPU_NET_CHANNELS, 8, or fewer where the GPUs
    /// allow fewer); a call takes one per 64 KiB up to that.
    pub channels: usize,
}

/// Seconds of one hop.
const HOP: f64 = 24e-6;
/// Seconds of one hop between GPUs of a host (the tree's chain): the executor kernel's
/// step over NVLink, ~40 µs for the ring's six hops at 512 KiB-1 MiB on 4×H200
/// (docs/results/2026-11-27-h200x4).
const LOCAL_HOP: f64 = 7e-6;
/// Bytes of a call per channel (the runtime's `BYTES_PER_CHANNEL`).
const CHANNEL_BYTES: usize = 64 << 10;
/// Seconds of one hop over LL.
const HOP_LL: f64 = 21e-6;
/// Bytes per second a rank moves over LL (data, not lines).
const BANDWIDTH_LL: f64 = 0.6e9;
/// Seconds to issue one more message of a hop (the proxy handles them in turn). On 2×H200
/// with 4 and 8 ranks as hosts (2026-11-27), all_reduce at 8 B-2 KiB: two-shot (6 and 14
/// messages a rank) 58-94 and 206-310 µs, recursive doubling (2 and 3) 43-61 and 84-177:
/// 4-20 µs a message more; 5 µs keeps both rank counts' choices right.
const ISSUE: f64 = 5e-6;
/// Bytes per second a rank moves over its connections (several channels or peers).
const BANDWIDTH: f64 = 6e9;
/// Bytes per second over one connection (a TCP stream): two ranks' one-shot all_reduce
/// sends everything over one (1.8 GB/s at 2-128 MiB on one H100, where the ring's four
/// channels moved 5-7.5).
const CONNECTION: f64 = 1.8e9;

impl NetKernelModel {
    /// Whether the GPU kernels run `algorithm` over `protocol` for `collective` across hosts.
    pub fn runs(collective: Collective, algorithm: Algorithm, protocol: Protocol) -> bool {
        matches!(protocol, Protocol::Simple | Protocol::Ll)
            && match algorithm {
                Algorithm::Ring | Algorithm::Direct => true,
                Algorithm::Doubling | Algorithm::Tree => collective == Collective::AllReduce,
                _ => false,
            }
    }

    /// Estimated seconds of `algorithm` over `protocol` for `collective` on `bytes` (the
    /// call's `count` elements: a rank's block for all_gather, reduce_scatter and alltoall).
    pub fn estimate(&self, collective: Collective, algorithm: Algorithm, protocol: Protocol, bytes: usize) -> f64 {
        let n = self.nranks.max(1) as f64;
        let s = bytes as f64;
        if (collective, algorithm) == (Collective::AllReduce, Algorithm::Tree) {
            return self.tree(protocol, s);
        }
        let (hops, messages, moved) = match (collective, algorithm) {
            (Collective::AllReduce, Algorithm::Ring) => (2.0 * (n - 1.0), 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s),
            // One shot moves everything over one connection; two-shot, one channel a phase
            // over n-1 peers' connections at once (bytes scaled to BANDWIDTH's rate).
            (Collective::AllReduce, Algorithm::Direct) if self.nranks == 2 => (1.0, 1.0, s * BANDWIDTH / CONNECTION),
            (Collective::AllReduce, Algorithm::Direct) => (2.0, 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s * BANDWIDTH / (CONNECTION * (n - 1.0)).min(BANDWIDTH)),
            // Recursive doubling: a hop per round, each one message over one connection,
            // and two more hops for the ranks beyond a power of two (folded in before,
            // sent the result after). With two ranks it is the one shot, priced alike
            // (Direct, first in the table, keeps it).
            (Collective::AllReduce, Algorithm::Doubling) => {
                let hops = doubling_hops(self.nranks) as f64;
                (hops, hops, hops * s * BANDWIDTH / CONNECTION)
            }
            // The ring pipelines a rooted call through every rank: a call's data crosses n-1
            // hops, but no rank waits for more than its neighbour, so calls issued back to
            // back (nccl-tests, a training step's) overlap along the chain and each costs
            // about one hop; direct, the root moves the whole buffer to (or from) every peer
            // in every call. On one H100 with 4 ranks as hosts, broadcast per call over 50
            // back-to-back calls: ring 14-22 µs, direct 21-33 µs at 8 B-32 KiB.
            (Collective::Broadcast | Collective::Reduce, Algorithm::Ring) => (1.0, 1.0, s),
            (Collective::Broadcast | Collective::Reduce, Algorithm::Direct) => (1.0, n - 1.0, (n - 1.0) * s),
            (_, Algorithm::Ring) => (n - 1.0, n - 1.0, (n - 1.0) * s),
            (_, _) => (1.0, n - 1.0, (n - 1.0) * s),
        };
        // Where the ranks lie host by host, the ring's hops inside a host are NVLink's (the
        // chain's step, and no message of the proxy's): on 2×H200 with 4 ranks as 2 hosts of
        // 2 GPUs (docs/results/2026-11-27-h200x2-b), the forced ring took 86.8 µs at 32 KiB
        // and 171 at 512 KiB, which the model priced 182 and 305 with every hop the
        // network's, 116 and 239 with these. (Recursive doubling's rounds inside a host are
        // still priced as the network's: cheaper, they would move its choice against the
        // tree at 32-128 KiB, which no run measured.)
        let local_hops = crate::host::ring_hops_inside_hosts(collective, algorithm, hops, self.nranks, self.per_host);
        let (hops, messages) = (hops - local_hops, messages - local_hops);
        let local = local_hops * LOCAL_HOP;
        match protocol {
            // Twice the bytes on the wire, read and written line by line.
            Protocol::Ll => hops * HOP_LL + messages * ISSUE + local + moved / BANDWIDTH_LL,
            _ => hops * HOP + messages * ISSUE + local + moved / BANDWIDTH,
        }
    }

    /// The double binary tree's all_reduce of `s` bytes: ⌈log2 hosts⌉ network hops up and
    /// as many down, a message each, and the chain's hops inside a host at NVLink's price
    /// (Simple there, whatever the protocol over the network). Each tree carries half the
    /// vector, split over the call's channels, each of which has a connection of its own
    /// on every link of the tree. What a rank sends over the network in all bounds it too:
    /// a rank a host sends twice the vector (inside one tree: half up, half to each of two
    /// children; a leaf of the other: half up), a host's head half of it between two hosts,
    /// one and a half between more (a host's two trees leave by different ranks). On
    /// 4×H200 with ranks posing as two hosts of four ranks, all_reduce of 8 MiB
    /// (docs/results/2026-11-27-h200x4-tree, `5-tree-settings`): the tree on four channels
    /// 0.68-0.72 ms (the model: 0.80), on one 1.27-1.29, the ring 1.15-1.16. On four
    /// channels the ring was faster from ~512 KiB to ~4 MiB (2 MiB: 372-375 against 429-464
    /// µs); on eight (2×H200, two hosts of two GPUs, docs/results/2026-11-27-h200x2-b) the
    /// tree beat the forced ring at every size from 32 KiB to 8 MiB (512 KiB: 141 against
    /// 171 µs, four channels 214).
    fn tree(&self, protocol: Protocol, s: f64) -> f64 {
        let blocks = crate::host::host_blocks(self.nranks, self.per_host);
        let (hosts, chain) = blocks.map_or((self.nranks, 0), |hosts| (hosts, self.per_host - 1));
        let net_hops = 2.0 * crate::host::ceil_log2(hosts);
        let local = 2.0 * chain as f64 * LOCAL_HOP;
        let sent = match blocks {
            None => 2.0 * s,
            Some(2) => s / 2.0,
            Some(_) => 1.5 * s,
        };
        let channels = (s as usize).div_ceil(CHANNEL_BYTES).clamp(1, self.channels.max(1)) as f64;
        match protocol {
            Protocol::Ll => net_hops * (HOP_LL + ISSUE) + local + sent / BANDWIDTH_LL,
            _ => net_hops * (HOP + ISSUE) + local + (s / 2.0 / (channels * CONNECTION)).max(sent / BANDWIDTH),
        }
    }

    /// The cost table (µs) of a call of NCCL's `bytes` ([`Collective::tuning_bytes`]).
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
        for a in [Algorithm::Ring, Algorithm::Direct, Algorithm::Doubling, Algorithm::Tree] {
            for p in [Protocol::Simple, Protocol::Ll] {
                if NetKernelModel::runs(collective, a, p) {
                    table.set(a, p, Some((self.estimate(collective, a, p, bytes) * 1e6) as f32));
                }
            }
        }
        table
    }
}

/// Hops of recursive doubling among `nranks`: log2 of the largest power of two not above
/// it, and two more when it is not one.
pub fn doubling_hops(nranks: usize) -> usize {
    if nranks <= 1 {
        return 0;
    }
    let rounds = nranks.ilog2() as usize;
    rounds + if nranks.is_power_of_two() { 0 } else { 2 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn best(model: NetKernelModel, collective: Collective, bytes: usize) -> Algorithm {
        model.table(collective, bytes).best().unwrap().0
    }

    fn protocol(model: NetKernelModel, collective: Collective, bytes: usize) -> Protocol {
        model.table(collective, bytes).best().unwrap().1
    }

    #[test]
    fn ll_for_small_calls_simple_for_large_ones() {
        for n in [2, 4] {
            let model = NetKernelModel { nranks: n, per_host: 1, channels: 4 };
            for c in [Collective::AllGather, Collective::ReduceScatter, Collective::Broadcast, Collective::AllReduce] {
                assert_eq!(protocol(model, c, 8), Protocol::Ll, "{c:?}, {n} ranks, 8 B");
                // Per message: all_gather's and reduce_scatter's blocks are a rank's share.
                assert_eq!(protocol(model, c, 16 << 10), Protocol::Simple, "{c:?}, {n} ranks, 16 KiB");
            }
        }
    }

    #[test]
    fn one_hop_for_small_calls_the_ring_for_rooted_ones() {
        let four = NetKernelModel { nranks: 4, per_host: 1, channels: 4 };
        for c in [Collective::AllGather, Collective::ReduceScatter] {
            assert_eq!(best(four, c, 4096), Algorithm::Direct, "{c:?}, 4 KiB");
        }
        // The root of a direct broadcast sends 3 copies every call; the ring's calls overlap.
        for c in [Collective::Broadcast, Collective::Reduce] {
            for bytes in [8, 4096, 64 << 20] {
                assert_eq!(best(four, c, bytes), Algorithm::Ring, "{c:?}, {bytes} B");
            }
        }
        // Two ranks: one shot for small calls (one hop), the ring's channels for large ones
        // (one shot moves everything over one connection).
        let two = NetKernelModel { nranks: 2, per_host: 1, channels: 4 };
        assert_eq!(best(two, Collective::AllReduce, 8192), Algorithm::Direct);
        assert_eq!(best(two, Collective::AllReduce, 1 << 20), Algorithm::Ring);
    }

    #[test]
    fn recursive_doubling_for_small_all_reduces_of_a_power_of_two_ranks() {
        assert_eq!([1, 2, 3, 4, 5, 8, 12, 16].map(doubling_hops), [0, 1, 3, 2, 4, 3, 5, 4]);
        // Four ranks: two hops of one message each, where two-shot sends three a hop.
        let four = NetKernelModel { nranks: 4, per_host: 1, channels: 4 };
        for bytes in [8, 4096] {
            assert_eq!(best(four, Collective::AllReduce, bytes), Algorithm::Doubling, "{bytes} B");
        }
        // Each hop moves the whole vector over one connection: two-shot from ~10 KB.
        assert_eq!(best(four, Collective::AllReduce, 64 << 10), Algorithm::Direct);
        // Three ranks: three hops, one more than two-shot's.
        assert_eq!(best(NetKernelModel { nranks: 3, per_host: 1, channels: 4 }, Collective::AllReduce, 8), Algorithm::Direct);
        // Two ranks: the one shot under Direct's name, as before; other collectives never.
        assert_eq!(best(NetKernelModel { nranks: 2, per_host: 1, channels: 4 }, Collective::AllReduce, 8), Algorithm::Direct);
        assert!(four.table(Collective::AllGather, 64).get(Algorithm::Doubling, Protocol::Ll).is_none());
    }

    /// The ring's hops inside a host are NVLink's: 4 ranks as 2 hosts of 2 GPUs on 2×H200,
    /// eight channels (docs/results/2026-11-27-h200x2-b), the forced ring took 86.8 µs at
    /// 32 KiB and 171.4 at 512 KiB, which the model priced 182 and 305 with every hop the
    /// network's. The tree, 1.15-1.50x faster than that ring there, is still chosen.
    #[test]
    fn the_rings_hops_inside_a_host_are_nvlinks() {
        let hosts = NetKernelModel { nranks: 4, per_host: 2, channels: 8 };
        let flat = NetKernelModel { nranks: 4, per_host: 1, channels: 8 };
        let ring = |m: NetKernelModel, bytes| m.estimate(Collective::AllReduce, Algorithm::Ring, Protocol::Simple, bytes) * 1e6;
        for (bytes, measured) in [(32 << 10, 86.8), (512 << 10, 171.4)] {
            let (posed, everywhere) = (ring(hosts, bytes), ring(flat, bytes));
            assert!(posed < everywhere && posed < 1.5 * measured, "{bytes} B: {posed:.0} µs (every hop the network's: {everywhere:.0}), measured {measured}");
            assert_eq!(best(hosts, Collective::AllReduce, bytes), Algorithm::Tree, "{bytes} B");
        }
        // all_gather's ring has n-1 hops, one of them between hosts here.
        let gather = |m: NetKernelModel| m.estimate(Collective::AllGather, Algorithm::Ring, Protocol::Simple, 8 << 10);
        assert!(gather(hosts) < gather(flat));
    }

    #[test]
    fn the_tree_between_hosts_of_several_ranks_each() {
        // Two hosts of two ranks, or of four: one network hop up and one down, and the
        // chain's NVLink hops. Recursive doubling (two or three network-priced hops) for
        // small calls; from ~17 KB its hops' whole vectors cost more than the chain. The
        // ring and two-shot wait on the network at each of their steps, and send more over
        // it: a host's head sends half the vector, split over the call's channels.
        for (nranks, per_host) in [(4, 2), (8, 4)] {
            let model = NetKernelModel { nranks, per_host, channels: 4 };
            assert_eq!(best(model, Collective::AllReduce, 8), Algorithm::Doubling);
            for bytes in [64 << 10, 1 << 20, 64 << 20] {
                assert_eq!(best(model, Collective::AllReduce, bytes), Algorithm::Tree, "{nranks} ranks as {per_host} a host, {bytes} B");
            }
        }
        // A rank a host: the tree spans every rank, 2 ⌈log2 n⌉ network hops, more than
        // two-shot's two for the same bytes: never the tree.
        for n in [4, 8] {
            let flat = NetKernelModel { nranks: n, per_host: 1, channels: 4 };
            for bytes in [8, 64 << 10, 1 << 20, 64 << 20] {
                assert_ne!(best(flat, Collective::AllReduce, bytes), Algorithm::Tree, "{n} ranks, {bytes} B");
            }
        }
        // The tree serves all_reduce only.
        let two_by_two = NetKernelModel { nranks: 4, per_host: 2, channels: 4 };
        assert!(two_by_two.table(Collective::AllGather, 64 << 10).get(Algorithm::Tree, Protocol::Simple).is_none());
    }
}
