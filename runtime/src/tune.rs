//! Choosing how a collective runs: the algorithm, honouring `NCCL_ALGO` and `NCCL_PROTO`.
//!
//! Syntax as NCCL's: a comma list of names (`ring,tree`), a leading `^` to exclude
//! (`^tree`), and per-collective parts separated by `;` (`allreduce:tree;broadcast:^ring`).
//! Algorithms: `ring`, `tree`, `direct` (NCCL's `nvls`, `nvlstree`, `collnetdirect`,
//! `collnetchain` and `pat` are recognised and never available here). Protocols: `simple`,
//! `ll`, `ll128`; the host executor runs Simple. A forced choice that cannot run is an
//! error naming the variable, never a silent fallback. Among the allowed algorithms the
//! cost model is simple for now: the first available in the preference order below.

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

    /// The algorithm for `collective` on the host executor.
    pub fn choose(&self, collective: Collective) -> Result<Algorithm> {
        if !self.proto.allows(collective, "simple") {
            return Err(Error::invalid(format!(
                "NCCL_PROTO={:?} excludes Simple for {}, the only protocol of the host executor",
                self.proto_text,
                collective.name()
            )));
        }
        let preference: &[Algorithm] = match collective {
            Collective::AllToAll | Collective::Gather | Collective::Scatter => &[Algorithm::Direct, Algorithm::Ring],
            _ => &[Algorithm::Ring],
        };
        preference.iter().copied().find(|a| self.algo.allows(collective, a.name())).ok_or_else(|| {
            Error::invalid(format!(
                "NCCL_ALGO={:?} leaves no algorithm oxccl can run for {} (available: {})",
                self.algo_text,
                collective.name(),
                preference.iter().map(|a| a.name()).collect::<Vec<_>>().join(", ")
            ))
        })
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

    #[test]
    fn defaults_choose_ring_and_direct() {
        let t = Tuner::new(None, None).unwrap();
        assert_eq!(t.choose(Collective::AllReduce).unwrap(), Algorithm::Ring);
        assert_eq!(t.choose(Collective::AllToAll).unwrap(), Algorithm::Direct);
    }

    #[test]
    fn forcing_and_excluding() {
        let t = Tuner::new(Some("ring"), None).unwrap();
        assert_eq!(t.choose(Collective::AllToAll).unwrap(), Algorithm::Ring);
        let t = Tuner::new(Some("alltoall:^direct;allreduce:ring"), None).unwrap();
        assert_eq!(t.choose(Collective::AllToAll).unwrap(), Algorithm::Ring);
        let err = Tuner::new(Some("tree"), None).unwrap().choose(Collective::AllReduce).unwrap_err().to_string();
        assert!(err.contains("NCCL_ALGO") && err.contains("all_reduce"), "{err}");
        let err = Tuner::new(Some("^ring"), None).unwrap().choose(Collective::Broadcast).unwrap_err().to_string();
        assert!(err.contains("broadcast"), "{err}");
    }

    #[test]
    fn protocols() {
        assert!(Tuner::new(None, Some("simple")).unwrap().choose(Collective::AllReduce).is_ok());
        let err = Tuner::new(None, Some("LL")).unwrap().choose(Collective::AllReduce).unwrap_err().to_string();
        assert!(err.contains("NCCL_PROTO"), "{err}");
    }

    #[test]
    fn malformed_values_are_errors() {
        assert!(Tuner::new(Some("rign"), None).unwrap_err().to_string().contains("NCCL_ALGO"));
        assert!(Tuner::new(Some("allredux:ring"), None).is_err());
        assert!(Tuner::new(None, Some("fast")).unwrap_err().to_string().contains("NCCL_PROTO"));
    }
}
