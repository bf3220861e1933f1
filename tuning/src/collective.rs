//! The collectives, with the facts about their buffers that every layer shares.

/// Which collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Collective {
    AllReduce,
    Broadcast,
    Reduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    Gather,
    Scatter,
}

impl Collective {
    pub const ALL: [Collective; 8] = [
        Collective::AllReduce,
        Collective::Broadcast,
        Collective::Reduce,
        Collective::AllGather,
        Collective::ReduceScatter,
        Collective::AllToAll,
        Collective::Gather,
        Collective::Scatter,
    ];

    /// The name nccl-tests gives its binary for this collective.
    pub fn name(self) -> &'static str {
        match self {
            Collective::AllReduce => "all_reduce",
            Collective::Broadcast => "broadcast",
            Collective::Reduce => "reduce",
            Collective::AllGather => "all_gather",
            Collective::ReduceScatter => "reduce_scatter",
            Collective::AllToAll => "alltoall",
            Collective::Gather => "gather",
            Collective::Scatter => "scatter",
        }
    }

    /// NCCL's `ncclFunc_t` value (what tuner plugins receive): Broadcast 0, Reduce 1,
    /// AllGather 2, ReduceScatter 3, AllReduce 4, AlltoAll 8, Scatter 9, Gather 10.
    pub fn nccl_func(self) -> i32 {
        match self {
            Collective::Broadcast => 0,
            Collective::Reduce => 1,
            Collective::AllGather => 2,
            Collective::ReduceScatter => 3,
            Collective::AllReduce => 4,
            Collective::AllToAll => 8,
            Collective::Scatter => 9,
            Collective::Gather => 10,
        }
    }

    /// The collective of an `ncclFunc_t` value.
    pub fn from_nccl_func(func: i32) -> Option<Collective> {
        Collective::ALL.into_iter().find(|c| c.nccl_func() == func)
    }

    /// NCCL's name of the function (`AllReduce`, ...), as its TUNING lines print it.
    pub fn nccl_name(self) -> &'static str {
        match self {
            Collective::AllReduce => "AllReduce",
            Collective::Broadcast => "Broadcast",
            Collective::Reduce => "Reduce",
            Collective::AllGather => "AllGather",
            Collective::ReduceScatter => "ReduceScatter",
            Collective::AllToAll => "AlltoAll",
            Collective::Gather => "Gather",
            Collective::Scatter => "Scatter",
        }
    }

    /// Whether NCCL's tuning model (and a tuner plugin) decides it: the five ring/tree
    /// collectives; all_to_all, gather and scatter are grouped sends and receives.
    pub fn is_tuned(self) -> bool {
        self.nccl_func() <= 4
    }

    /// Whether the collective reduces (needs an op).
    pub fn reduces(self) -> bool {
        matches!(self, Collective::AllReduce | Collective::Reduce | Collective::ReduceScatter)
    }

    /// Whether a root matters.
    pub fn rooted(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Reduce | Collective::Gather | Collective::Scatter)
    }

    /// Whether NCCL defines an in-place form (every collective but all_to_all).
    pub fn has_in_place(self) -> bool {
        self != Collective::AllToAll
    }

    /// Elements of (send, recv) buffers on `rank` for `count`.
    pub fn buffer_counts(self, count: usize, nranks: usize, rank: usize, root: usize) -> (usize, usize) {
        let n = nranks;
        let is_root = rank == root;
        match self {
            Collective::AllReduce => (count, count),
            Collective::Broadcast => (if is_root { count } else { 0 }, count),
            Collective::Reduce => (count, if is_root { count } else { 0 }),
            Collective::AllGather => (count, n * count),
            Collective::ReduceScatter => (n * count, count),
            Collective::AllToAll => (n * count, n * count),
            Collective::Gather => (count, if is_root { n * count } else { 0 }),
            Collective::Scatter => (if is_root { n * count } else { 0 }, count),
        }
    }

    /// The bytes NCCL's tuning prices a call by (`ncclFuncMaxSendRecvCount`): the larger
    /// buffer, so `nranks × count` for all_gather and reduce_scatter.
    pub fn tuning_bytes(self, count: usize, element_size: usize, nranks: usize) -> usize {
        match self {
            Collective::AllGather | Collective::ReduceScatter | Collective::AllToAll => count * nranks * element_size,
            _ => count * element_size,
        }
    }

    /// Where, in elements of `Recv`, the in-place `Send` of `rank` starts (NCCL's convention),
    /// when in-place means an offset rather than the same pointer.
    pub fn in_place_send_offset(self, count: usize, rank: usize, root: usize) -> Option<usize> {
        match self {
            Collective::AllGather => Some(rank * count),
            Collective::Gather if rank == root => Some(root * count),
            _ => None,
        }
    }

    /// Where, in elements of `Send`, the in-place `Recv` of `rank` starts.
    pub fn in_place_recv_offset(self, count: usize, rank: usize, root: usize) -> Option<usize> {
        match self {
            Collective::ReduceScatter => Some(rank * count),
            Collective::Scatter if rank == root => Some(root * count),
            _ => None,
        }
    }

    /// Parses a collective name as NCCL_ALGO/NCCL_PROTO prefixes spell it: NCCL's function
    /// names (`allreduce`, `AllGather`...) or oxccl's (`all_reduce`...), case-insensitive.
    pub fn parse(name: &str) -> Option<Collective> {
        let n: String = name.trim().to_ascii_lowercase().chars().filter(|c| *c != '_').collect();
        Collective::ALL.into_iter().find(|c| c.name().replace('_', "") == n || c.nccl_name().to_ascii_lowercase() == n)
    }
}
