//! Choosing how a collective runs: the algorithm, honouring `NCCL_ALGO` and `NCCL_PROTO`.
//!
//! Syntax as NCCL's: a comma list of names (`ring,tree`), a leading `^` to exclude
//! (`^tree`), and per-collective parts separated by `;` (`allreduce:tree;broadcast:^ring`).
//! Algorithms: `ring`, `tree`, `direct` (NCCL's `nvls`, `nvlstree`, `collnetdirect`,
//! `collnetchain` and `pat` are recognised and never available here). Protocols: `simple`,
//! `ll`, `ll128`; the host executor runs Simple. A forced choice that cannot run is an
//! error naming the variable, never a silent fallback.
//!
//! Among the allowed algorithms a simple cost model picks the fastest (the full tuning
//! model and the tuner plugin come later): an algorithm costs its hops in sequence times a
//! per-hop latency, plus its messages per hop times an issue cost, plus the bytes each rank
//! moves over a bandwidth, plus the elements it reduces over a reduction rate. The
//! constants are this host executor's as measured on a 2-core VM (docs/PERFORMANCE.md):
//! shared memory ~0.15 µs a hop and ~6 GB/s, the socket Net ~15 µs a hop and ~0.8 GB/s per
//! connection, reductions ~4 GB/s; a hop costs ~5 µs when a host runs more ranks than it
//! has cores (a message waits for its receiver to be scheduled). For all_reduce: ring
//! (2(n-1) hops, 2(n-1)/n of the data), the double binary tree (2⌈log2 n⌉ hops, about twice
//! the data) and the two-shot direct exchange (2 hops of n-1 messages each, the ring's
//! traffic; on the Net its n-1 connections stream in parallel, in shared memory its
//! scattered copies run at about half the ring's pipelined rate); with two ranks, direct
//! is one shot (1 hop, the ring's traffic, twice its reductions).
use std::collections::HashMap;

use crate::algo::{Algorithm, Collective};
use crate::error::{Error, Result};

const KNOWN_ALGORITHMS: &[&str] = &["ring", "tree", "direct", "nvls", "nvlstree", "collnetdirect", "collnetchain", "pat"];
const KNOWN_PROTOCOLS: &[&str] = &["simple", "ll", "ll128"];

/// An allow list parsed from NCCL's syntax, per collective.
#[derive(Clone, Debug, Default)]
struct Selection {
    /// None: every name allowed.
    all: Option<Vec<String>>,
    per_collective: HashMap<Collective, Vec<String>>,
}

impl Selection {
    fn parse(variable: &str, value: &str, known: &[&str]) -> Result<Selection> {
        let mut selection = Selection::default();
        for part in value.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (target, list) = match part.split_once(':') {
                Some((c, list)) => (Some(parse_collective(c).ok_or_else(|| bad(variable, value, &format!("unknown collective {c:?}")))?), list),
                None => (None, part),
            };
            let (exclude, list) = list.trim().strip_prefix('^').map_or((false, list.trim()), |l| (true, l));
            let mut names = Vec::new();
            for name in list.split(',').map(|n| n.trim().to_ascii_lowercase()).filter(|n| !n.is_empty()) {
                if !known.contains(&name.as_str()) {
                    return Err(bad(variable, value, &format!("unknown name {name:?} (known: {})", known.join(", "))));
                }
                names.push(name);
            }
            let allowed: Vec<String> = if exclude { known.iter().map(|k| k.to_string()).filter(|k| !names.contains(k)).collect() } else { names };
            match target {
                Some(c) => {
                    selection.per_collective.insert(c, allowed);
                }
                None => selection.all = Some(allowed),
            }
        }
        Ok(selection)
    }

    fn allows(&self, collective: Collective, name: &str) -> bool {
        match self.per_collective.get(&collective).or(self.all.as_ref()) {
            Some(list) => list.iter().any(|n| n == name),
            None => true,
        }
    }
}

/// The tuner: validated overrides and the choice they leave.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tuner {
    algo: Selection,
    proto: Selection,
    algo_text: String,
    proto_text: String,
}

impl Tuner {
    pub fn new(algo: Option<&str>, proto: Option<&str>) -> Result<Tuner> {
        Ok(Tuner {
            algo: Selection::parse("NCCL_ALGO", algo.unwrap_or(""), KNOWN_ALGORITHMS)?,
            proto: Selection::parse("NCCL_PROTO", proto.unwrap_or(""), KNOWN_PROTOCOLS)?,
            algo_text: algo.unwrap_or("").into(),
            proto_text: proto.unwrap_or("").into(),
        })
    }

    /// Whether `NCCL_PROTO` allows `protocol` ("simple", "ll", "ll128") for `collective`.
    pub fn allows_protocol(&self, collective: Collective, protocol: &str) -> bool {
        self.proto.allows(collective, protocol)
    }

    /// The algorithm for `collective` on the host executor.
    pub fn choose(&self, collective: Collective, cost: &CostInput) -> Result<Algorithm> {
        if !self.proto.allows(collective, "simple") {
            return Err(Error::invalid(format!(
                "NCCL_PROTO={:?} excludes Simple for {}, the only protocol of the host executor",
                self.proto_text,
                collective.name()
            )));
        }
        let preference: &[Algorithm] = match collective {
            Collective::AllToAll | Collective::Gather | Collective::Scatter => &[Algorithm::Direct, Algorithm::Ring],
            Collective::AllReduce => &[Algorithm::Ring, Algorithm::Tree, Algorithm::Direct],
            _ => &[Algorithm::Ring],
        };
        let allowed = || preference.iter().copied().filter(|a| self.algo.allows(collective, a.name()));
        let best = allowed().min_by(|a, b| cost.estimate(collective, *a).total_cmp(&cost.estimate(collective, *b)));
        best.ok_or_else(|| {
            Error::invalid(format!(
                "NCCL_ALGO={:?} leaves no algorithm oxccl can run for {} (available: {})",
                self.algo_text,
                collective.name(),
                preference.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
            ))
        })
    }
}

/// What the cost model knows of one call.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CostInput {
    /// Bytes of the collective's `count` elements.
    pub bytes: usize,
    pub nranks: usize,
    /// Some peer is reached through the network.
    pub net: bool,
    /// This host runs more ranks of the communicator than it has cores.
    pub oversubscribed: bool,
}

impl CostInput {
    /// Estimated seconds of `algorithm` for `collective`.
    fn estimate(&self, collective: Collective, algorithm: Algorithm) -> f64 {
        let (mut hop, issue, bandwidth): (f64, f64, f64) = if self.net { (15e-6, 2e-6, 0.8e9) } else { (0.15e-6, 0.05e-6, 6e9) };
        if self.oversubscribed {
            hop = hop.max(5e-6);
        }
        let reduce_rate = 4e9;
        let n = self.nranks.max(1) as f64;
        let s = self.bytes as f64;
        // ⌈log2 n⌉, at least 1, in integers (a float log2 per call showed in the small-call
        // profile).
        let log2 = (usize::BITS - self.nranks.saturating_sub(1).leading_zeros()).max(1) as f64;
        let parallel = if self.net { (n - 1.0).clamp(1.0, 2.0) } else { 0.5 };
        let (hops, messages, moved, reduced) = match (collective, algorithm) {
            (Collective::AllReduce, Algorithm::Ring) => (2.0 * (n - 1.0), 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s, (n - 1.0) / n * s),
            (Collective::AllReduce, Algorithm::Tree) => (2.0 * log2, 4.0 * log2, 2.0 * s, s),
            // Two ranks: one shot (one hop, each rank reduces everything).
            (Collective::AllReduce, Algorithm::Direct) if self.nranks == 2 => (1.0, 1.0, s, s),
            (Collective::AllReduce, Algorithm::Direct) => (2.0, 2.0 * (n - 1.0), 2.0 * (n - 1.0) / n * s / parallel, (n - 1.0) / n * s),
            (_, Algorithm::Direct) => (1.0, n - 1.0, (n - 1.0) / n * s, 0.0),
            _ => (n - 1.0, n - 1.0, s, 0.0),
        };
        hops * hop + messages * issue + moved / bandwidth + reduced / reduce_rate
    }
}

fn parse_collective(name: &str) -> Option<Collective> {
    let n: String = name.trim().to_ascii_lowercase().chars().filter(|c| *c != '_').collect();
    Collective::ALL.iter().copied().find(|c| c.name().replace('_', "") == n)
}

fn bad(variable: &str, value: &str, reason: &str) -> Error {
    Error::invalid(format!("{variable}={value:?}: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn big(nranks: usize) -> CostInput {
        CostInput { bytes: 64 << 20, nranks, net: false, oversubscribed: false }
    }

    fn small(nranks: usize) -> CostInput {
        CostInput { bytes: 64, nranks, net: false, oversubscribed: false }
    }

    #[test]
    fn the_model_picks_by_size_ranks_and_transport() {
        let t = Tuner::new(None, None).unwrap();
        // Shared memory: the ring's pipeline for large data, two hops for small.
        assert_eq!(t.choose(Collective::AllReduce, &big(4)).unwrap(), Algorithm::Ring);
        assert_eq!(t.choose(Collective::AllReduce, &small(8)).unwrap(), Algorithm::Direct);
        // The Net: parallel connections for large data; the tree when direct's messages
        // per hop outnumber the tree's hops.
        assert_eq!(t.choose(Collective::AllReduce, &CostInput { net: true, ..big(4) }).unwrap(), Algorithm::Direct);
        assert_eq!(t.choose(Collective::AllReduce, &CostInput { net: true, ..small(64) }).unwrap(), Algorithm::Tree);
        assert_eq!(t.choose(Collective::AllToAll, &big(4)).unwrap(), Algorithm::Direct);
        assert_eq!(t.choose(Collective::Broadcast, &small(4)).unwrap(), Algorithm::Ring);
        // Two ranks: one shot's single hop for small data, the ring's halved reductions for
        // large.
        for net in [false, true] {
            assert_eq!(t.choose(Collective::AllReduce, &CostInput { net, ..small(2) }).unwrap(), Algorithm::Direct, "net {net}");
            assert_eq!(t.choose(Collective::AllReduce, &CostInput { net, ..big(2) }).unwrap(), Algorithm::Ring, "net {net}");
        }
    }

    #[test]
    fn forcing_and_excluding() {
        let t = Tuner::new(Some("ring"), None).unwrap();
        assert_eq!(t.choose(Collective::AllToAll, &big(4)).unwrap(), Algorithm::Ring);
        assert_eq!(t.choose(Collective::AllReduce, &small(8)).unwrap(), Algorithm::Ring);
        let t = Tuner::new(Some("alltoall:^direct;allreduce:ring"), None).unwrap();
        assert_eq!(t.choose(Collective::AllToAll, &big(4)).unwrap(), Algorithm::Ring);
        assert_eq!(Tuner::new(Some("tree"), None).unwrap().choose(Collective::AllReduce, &big(4)).unwrap(), Algorithm::Tree);
        let err = Tuner::new(Some("tree"), None).unwrap().choose(Collective::Broadcast, &big(4)).unwrap_err().to_string();
        assert!(err.contains("NCCL_ALGO") && err.contains("broadcast"), "{err}");
        let err = Tuner::new(Some("^ring"), None).unwrap().choose(Collective::Broadcast, &big(4)).unwrap_err().to_string();
        assert!(err.contains("broadcast"), "{err}");
    }

    #[test]
    fn protocols() {
        assert!(Tuner::new(None, Some("simple")).unwrap().choose(Collective::AllReduce, &big(2)).is_ok());
        let err = Tuner::new(None, Some("LL")).unwrap().choose(Collective::AllReduce, &big(2)).unwrap_err().to_string();
        assert!(err.contains("NCCL_PROTO"), "{err}");
    }

    #[test]
    fn malformed_values_are_errors() {
        assert!(Tuner::new(Some("rign"), None).unwrap_err().to_string().contains("NCCL_ALGO"));
        assert!(Tuner::new(Some("allredux:ring"), None).is_err());
        assert!(Tuner::new(None, Some("fast")).unwrap_err().to_string().contains("NCCL_PROTO"));
    }
}
