//! Algorithms and protocols, with NCCL's numbering (the tuner plugin ABI's indices).

/// How the data moves: NCCL's seven algorithms, in NCCL's order, and oxccl's own Direct
/// and Doubling.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// NCCL's double binary tree.
    Tree = 0,
    Ring = 1,
    CollNetDirect = 2,
    CollNetChain = 3,
    Nvls = 4,
    NvlsTree = 5,
    Pat = 6,
    /// oxccl's direct exchange (one- or two-shot); not in NCCL's tuner ABI.
    Direct = 7,
    /// oxccl's recursive doubling (all_reduce in log2 n hops of one message each, two more
    /// where n is not a power of two); not in NCCL's tuner ABI.
    Doubling = 8,
}

impl Algorithm {
    pub const ALL: [Algorithm; 9] = [
        Algorithm::Tree,
        Algorithm::Ring,
        Algorithm::CollNetDirect,
        Algorithm::CollNetChain,
        Algorithm::Nvls,
        Algorithm::NvlsTree,
        Algorithm::Pat,
        Algorithm::Direct,
        Algorithm::Doubling,
    ];
    /// The algorithms a tuner plugin's cost table holds (NCCL_NUM_ALGORITHMS).
    pub const NCCL: [Algorithm; 7] = [Algorithm::Tree, Algorithm::Ring, Algorithm::CollNetDirect, Algorithm::CollNetChain, Algorithm::Nvls, Algorithm::NvlsTree, Algorithm::Pat];

    /// The name `NCCL_ALGO` uses (lower case).
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Tree => "tree",
            Algorithm::Ring => "ring",
            Algorithm::CollNetDirect => "collnetdirect",
            Algorithm::CollNetChain => "collnetchain",
            Algorithm::Nvls => "nvls",
            Algorithm::NvlsTree => "nvlstree",
            Algorithm::Pat => "pat",
            Algorithm::Direct => "direct",
            Algorithm::Doubling => "doubling",
        }
    }

    /// NCCL's spelling (`Tree`, `CollNetDirect`...), as its logs print it.
    pub fn nccl_name(self) -> &'static str {
        match self {
            Algorithm::Tree => "Tree",
            Algorithm::Ring => "Ring",
            Algorithm::CollNetDirect => "CollNetDirect",
            Algorithm::CollNetChain => "CollNetChain",
            Algorithm::Nvls => "NVLS",
            Algorithm::NvlsTree => "NVLSTree",
            Algorithm::Pat => "PAT",
            Algorithm::Direct => "Direct",
            Algorithm::Doubling => "Doubling",
        }
    }

    /// The algorithm of NCCL's index (0..7), or Direct's 7 and Doubling's 8.
    pub fn from_index(index: usize) -> Option<Algorithm> {
        Algorithm::ALL.get(index).copied()
    }

    /// Parses a name, case-insensitive (`collnet_direct` and `nvls_tree` too, as NCCL's example tuner spells them).
    pub fn parse(name: &str) -> Option<Algorithm> {
        let n: String = name.trim().to_ascii_lowercase().chars().filter(|c| *c != '_').collect();
        Algorithm::ALL.into_iter().find(|a| a.name() == n)
    }
}

/// How each step's data is synchronised.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// 8 bytes of data per 16-byte line with flags: lowest latency.
    Ll = 0,
    /// 120 of 128 bytes per line: needs NVLink-class ordering.
    Ll128 = 1,
    /// Bulk copies with head/tail counters: highest bandwidth.
    Simple = 2,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::Ll, Protocol::Ll128, Protocol::Simple];

    /// The name `NCCL_PROTO` uses (lower case).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Ll => "ll",
            Protocol::Ll128 => "ll128",
            Protocol::Simple => "simple",
        }
    }

    /// NCCL's spelling (`LL`, `LL128`, `Simple`).
    pub fn nccl_name(self) -> &'static str {
        match self {
            Protocol::Ll => "LL",
            Protocol::Ll128 => "LL128",
            Protocol::Simple => "Simple",
        }
    }

    pub fn from_index(index: usize) -> Option<Protocol> {
        Protocol::ALL.get(index).copied()
    }

    /// Parses a name, case-insensitive.
    pub fn parse(name: &str) -> Option<Protocol> {
        let n = name.trim().to_ascii_lowercase();
        Protocol::ALL.into_iter().find(|p| p.name() == n)
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.nccl_name())
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.nccl_name())
    }
}
