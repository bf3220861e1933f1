//! `NCCL_ALGO` and `NCCL_PROTO`, parsed as NCCL parses them (`parseList` in NCCL's tuning):
//! `[prefix:]name,name;prefix:name,...` — entries separated by `;`, a comma list of names,
//! a leading `^` for "every one but these", a collective prefix (`allreduce:`, also
//! `all_reduce:` and oxccl's `alltoall:`, `gather:`, `scatter:`) that only the first entry
//! may omit (it then applies to every collective), later entries overriding earlier ones
//! for their collective. Unknown names or prefixes are errors naming the variable.

use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::names::{Algorithm, Protocol};

/// Which algorithms and protocols the user allows, per collective.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    algorithms: [[bool; Algorithm::ALL.len()]; Collective::ALL.len()],
    protocols: [[bool; Protocol::ALL.len()]; Collective::ALL.len()],
    /// The variables as given, for error messages (None: unset).
    pub algo_text: Option<String>,
    pub proto_text: Option<String>,
}

impl Default for Selection {
    fn default() -> Selection {
        Selection { algorithms: [[true; Algorithm::ALL.len()]; Collective::ALL.len()], protocols: [[true; Protocol::ALL.len()]; Collective::ALL.len()], algo_text: None, proto_text: None }
    }
}

fn index(collective: Collective) -> usize {
    Collective::ALL.iter().position(|&c| c == collective).expect("every collective is in ALL")
}

impl Selection {
    /// Parses NCCL_ALGO and NCCL_PROTO (None or empty: everything allowed).
    pub fn parse(algo: Option<&str>, proto: Option<&str>) -> Result<Selection> {
        let mut selection = Selection::default();
        if let Some(text) = algo.filter(|t| !t.trim().is_empty()) {
            parse_list("NCCL_ALGO", text, &mut selection.algorithms, |n| Algorithm::parse(n).map(|a| a as usize), &Algorithm::ALL.map(|a| a.name()))?;
            selection.algo_text = Some(text.into());
        }
        if let Some(text) = proto.filter(|t| !t.trim().is_empty()) {
            parse_list("NCCL_PROTO", text, &mut selection.protocols, |n| Protocol::parse(n).map(|p| p as usize), &Protocol::ALL.map(|p| p.name()))?;
            selection.proto_text = Some(text.into());
        }
        Ok(selection)
    }

    pub fn allows_algorithm(&self, collective: Collective, algorithm: Algorithm) -> bool {
        self.algorithms[index(collective)][algorithm as usize]
    }

    pub fn allows_protocol(&self, collective: Collective, protocol: Protocol) -> bool {
        self.protocols[index(collective)][protocol as usize]
    }

    /// Whether both variables allow the pair.
    pub fn allows(&self, collective: Collective, algorithm: Algorithm, protocol: Protocol) -> bool {
        self.allows_algorithm(collective, algorithm) && self.allows_protocol(collective, protocol)
    }

    /// Whether the user set either variable.
    pub fn is_set(&self) -> bool {
        self.algo_text.is_some() || self.proto_text.is_some()
    }

    /// `NCCL_ALGO="..." NCCL_PROTO="..."`, naming what the user set (for errors).
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(a) = &self.algo_text {
            parts.push(format!("NCCL_ALGO={a:?}"));
        }
        if let Some(p) = &self.proto_text {
            parts.push(format!("NCCL_PROTO={p:?}"));
        }
        parts.join(" ")
    }
}

fn parse_list<const N: usize>(variable: &str, text: &str, table: &mut [[bool; N]; Collective::ALL.len()], parse: impl Fn(&str) -> Option<usize>, known: &[&str]) -> Result<()> {
    let bad = |reason: String| Error::Selection { variable: variable.into(), value: text.into(), reason };
    for (i, entry) in text.split(';').map(str::trim).filter(|e| !e.is_empty()).enumerate() {
        let (prefix, list) = match entry.split_once(':') {
            Some((p, l)) => (Some(p.trim()), l.trim()),
            None => (None, entry),
        };
        let targets: Vec<usize> = match prefix {
            Some(p) => vec![index(Collective::parse(p).ok_or_else(|| bad(format!("unknown collective {p:?}")))?)],
            None if i == 0 => (0..8).collect(),
            None => return Err(bad(format!("every entry but the first needs a collective prefix (\"{entry}\")"))),
        };
        let (exclude, list) = match list.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, list),
        };
        let mut named = [false; N];
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let i = parse(name).ok_or_else(|| bad(format!("unknown name {name:?} (known: {})", known.join(", "))))?;
            named[i] = true;
        }
        for t in targets {
            for (e, allowed) in table[t].iter_mut().enumerate() {
                *allowed = named[e] != exclude;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccls_examples() {
        let s = Selection::parse(Some("ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring"), Some("^LL128;allreduce:LL128")).unwrap();
        assert!(s.allows_algorithm(Collective::Reduce, Algorithm::Ring) && s.allows_algorithm(Collective::Reduce, Algorithm::CollNetDirect));
        assert!(!s.allows_algorithm(Collective::Reduce, Algorithm::Tree));
        assert!(s.allows_algorithm(Collective::AllReduce, Algorithm::Tree) && !s.allows_algorithm(Collective::AllReduce, Algorithm::Ring));
        assert!(s.allows_algorithm(Collective::Broadcast, Algorithm::Ring) && !s.allows_algorithm(Collective::Broadcast, Algorithm::CollNetDirect));
        assert!(s.allows_protocol(Collective::Broadcast, Protocol::Ll) && !s.allows_protocol(Collective::Broadcast, Protocol::Ll128));
        assert!(s.allows_protocol(Collective::AllReduce, Protocol::Ll128) && !s.allows_protocol(Collective::AllReduce, Protocol::Simple));
        let s = Selection::parse(Some("LL,Simple;allreduce:^LL"), None);
        assert!(s.unwrap_err().to_string().contains("NCCL_ALGO"), "protocol names are not algorithms");
        let s = Selection::parse(None, Some("LL,Simple;allreduce:^LL")).unwrap();
        assert!(s.allows_protocol(Collective::AllReduce, Protocol::Ll128) && !s.allows_protocol(Collective::AllReduce, Protocol::Ll));
    }

    #[test]
    fn oxccl_names_and_prefixes() {
        let s = Selection::parse(Some("alltoall:^direct;all_reduce:ring"), None).unwrap();
        assert!(!s.allows_algorithm(Collective::AllToAll, Algorithm::Direct) && s.allows_algorithm(Collective::AllToAll, Algorithm::Ring));
        assert!(s.allows_algorithm(Collective::AllReduce, Algorithm::Ring) && !s.allows_algorithm(Collective::AllReduce, Algorithm::Direct));
        assert!(s.allows_algorithm(Collective::Broadcast, Algorithm::Tree), "untouched collectives allow everything");
        assert!(Selection::parse(Some("NVLSTree"), None).unwrap().allows_algorithm(Collective::AllReduce, Algorithm::NvlsTree));
    }

    #[test]
    fn malformed_values_name_the_variable() {
        for (algo, proto, var) in [(Some("rign"), None, "NCCL_ALGO"), (Some("allredux:ring"), None, "NCCL_ALGO"), (None, Some("fast"), "NCCL_PROTO"), (Some("ring;tree"), None, "NCCL_ALGO")] {
            let err = Selection::parse(algo, proto).unwrap_err().to_string();
            assert!(err.contains(var), "{err}");
        }
    }
}
