//! The cost model of GPU kernels between the GPUs of one host (NVLink or PCIe peer access):
//! the ring over Simple or LL (the rows a tuner plugin sees), and for NCCL_ALGO the direct
//! exchange and recursive doubling (rows 8 and 9, which no plugin sees). The runtime
//! routes calls on one host by its own rules (the one-hop kernel for small calls, LL up to
//! its limits, docs/GPU.md); this model prices the table a tuner plugin sees and edits, and
//! what the plugin then picks is what runs (the rules stand where it changes nothing).
//! Measured on 4×H200 (docs/PERFORMANCE.md, "Acquire loads, and LL for the 4-GPU
//! all_reduce"): a ring step costs ~4.5 µs over Simple (a wait, the move, the release fence
//! before the tail) and ~2.7 µs over LL (no fence, the neighbour's lines' latency); the
//! ring moves ~330 GB/s of bus bytes over Simple from 64 MiB and ~125 GB/s over LL (8 MiB:
//! 101 µs against Simple's 61). So 1 MiB all_reduce on 4 GPUs prices Simple 31.8 µs
//! (measured 29.2–31.4) and LL 28.8 (22.2–23.2 with 32 lanes): LL to ~2 MiB.

use crate::collective::Collective;
use crate::names::{Algorithm, Protocol};
use crate::table::CostTable;

/// What the model knows of a communicator: its ranks, all on one host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OneHostModel {
    pub nranks: usize,
}

/// Seconds of one ring step over Simple.
const STEP: f64 = 4.5e-6;
/// Seconds of one ring step over LL.
const STEP_LL: f64 = 2.7e-6;
/// Bus bytes per second of the ring over Simple.
const BANDWIDTH: f64 = 330e9;
/// Bus bytes per second of the ring over LL (data, not lines).
const BANDWIDTH_LL: f64 = 125e9;

impl OneHostModel {
    /// The pairs GPU kernels run on one host: the ring, the direct exchange and, for
    /// all_reduce, recursive doubling, over Simple or LL. Of these a plugin sees the ring's
    /// (NCCL's rows); the others are rows 8 and 9 of the table, there for NCCL_ALGO. That is
    /// what the network kernels run but the tree, which spans hosts.
    pub fn runs(collective: Collective, algorithm: Algorithm, protocol: Protocol) -> bool {
        algorithm != Algorithm::Tree && crate::net_kernels::NetKernelModel::runs(collective, algorithm, protocol)
    }

    /// Estimated seconds of `algorithm` over `protocol` for `collective` on NCCL's `bytes`
    /// ([`Collective::tuning_bytes`]: the whole gathered or scattered buffer for all_gather
    /// and reduce_scatter). The direct exchange and recursive doubling are priced by their
    /// dependent steps (two-shot's two, one for the others' exchange, doubling's rounds) at
    /// the ring's step and bandwidth: not measured as such, they run where NCCL_ALGO asks.
    pub fn estimate(&self, collective: Collective, algorithm: Algorithm, protocol: Protocol, bytes: usize) -> f64 {
        let n = self.nranks.max(1) as f64;
        let s = bytes as f64;
        let (ring_steps, bus) = match collective {
            Collective::AllReduce => (2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s),
            Collective::Broadcast | Collective::Reduce => (n - 1.0, s),
            _ => (n - 1.0, (n - 1.0) / n * s),
        };
        let steps = match (algorithm, collective) {
            (Algorithm::Direct, Collective::AllReduce) => 2.0,
            (Algorithm::Direct, _) => 1.0,
            (Algorithm::Doubling, _) => crate::host::ceil_log2(self.nranks),
            _ => ring_steps,
        };
        match protocol {
            Protocol::Ll => steps * STEP_LL + bus / BANDWIDTH_LL,
            _ => steps * STEP + bus / BANDWIDTH,
        }
    }

    /// The cost table (µs) of a call of NCCL's `bytes`.
    pub fn table(&self, collective: Collective, bytes: usize) -> CostTable {
        let mut table = CostTable::default();
        if self.nranks <= 1 {
            table.set(Algorithm::Ring, Protocol::Simple, Some(0.0));
            return table;
        }
        for algorithm in [Algorithm::Ring, Algorithm::Direct, Algorithm::Doubling] {
            for protocol in [Protocol::Simple, Protocol::Ll] {
                if OneHostModel::runs(collective, algorithm, protocol) {
                    table.set(algorithm, protocol, Some((self.estimate(collective, algorithm, protocol, bytes) * 1e6) as f32));
                }
            }
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring over LL where its steps' latency counts most, Simple where bytes do; the
    /// 1 MiB all_reduce of 4 GPUs within the measured band of Simple; every pair the
    /// kernels run priced, no other.
    #[test]
    fn ll_for_small_rings_simple_for_large() {
        let four = OneHostModel { nranks: 4 };
        let ring = |c, p, bytes| four.table(c, bytes).get(Algorithm::Ring, p).unwrap();
        assert!(ring(Collective::AllReduce, Protocol::Ll, 64 << 10) < ring(Collective::AllReduce, Protocol::Simple, 64 << 10));
        assert!(ring(Collective::AllReduce, Protocol::Simple, 64 << 20) < ring(Collective::AllReduce, Protocol::Ll, 64 << 20));
        assert!(ring(Collective::AllGather, Protocol::Simple, 1 << 30) < ring(Collective::AllGather, Protocol::Ll, 1 << 30));
        let simple = four.estimate(Collective::AllReduce, Algorithm::Ring, Protocol::Simple, 1 << 20) * 1e6;
        assert!((29.0..33.0).contains(&simple), "Simple 1 MiB: {simple} µs");
        for a in Algorithm::ALL {
            for p in Protocol::ALL {
                for c in [Collective::Broadcast, Collective::AllReduce] {
                    assert_eq!(four.table(c, 4096).get(a, p).is_some(), OneHostModel::runs(c, a, p), "{c:?} {a}/{p}");
                }
            }
        }
        assert_eq!(OneHostModel { nranks: 1 }.table(Collective::AllReduce, 4096).best(), Some((Algorithm::Ring, Protocol::Simple, 0.0)));
    }
}
