//! all_reduce by recursive doubling: for n a power of two, log2 n rounds; in round k each
//! rank sends its partial result to the rank whose number differs in bit k and folds the
//! partner's partial into its own. One message per rank per round (two-shot sends n-1 a
//! phase), the whole vector each time: for small vectors between hosts, where what a hop
//! costs does not depend on its bytes but on its messages.
//!
//! Every rank ends with the same bits: in each round the two partners combine the same two
//! partials in opposite order, and the ops are commutative (as for two ranks' one shot,
//! which this is with n = 2; direct.rs). The association is the balanced tree over ranks
//! in order: ((x0 ⊕ x1) ⊕ (x2 ⊕ x3)) for four.
//!
//! n not a power of two: with p the largest power of two not above n, rank p + i (i < n - p)
//! first sends its input to rank i, which folds it into its own, and at the end receives
//! rank i's result: two hops more.
//!
//! Per channel part, one lane: each chunk goes through every round before the next chunk
//! starts (recursive doubling is for vectors of one chunk or a few). The input is read
//! once: copied into the output first (in place, no copy), and every round sends from the
//! output and folds into it — a send copies its slice into the FIFO slot before the fold
//! that follows it overwrites the slice. Every message waits for its sender's last receive,
//! so none is independent; one slot per connection suffices.

use super::{chunks, split_channels, Lane, Link, Role, Shape, Slice, Step, CHANNEL_GRANULE};

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Lane> {
    // plan_lanes refuses 0 ranks.
    let n = shape.nranks;
    let p = 1 << n.ilog2();
    let extra = n - p;
    split_channels(shape.count, shape.channels.max(1), CHANNEL_GRANULE)
        .enumerate()
        .filter(|(_, (_, c))| *c > 0)
        .map(|(channel, (o, c))| {
            let link = |peer: usize| Link { peer, channel };
            let mut steps = Vec::new();
            for (o, c) in chunks(o, c, shape.chunk) {
                let (input, out) = (Slice::send(o, c), Slice::recv(o, c));
                if rank >= p {
                    // Folded into rank - p's partial; its result comes back.
                    steps.push(Step::Send { to: link(rank - p), src: input });
                    steps.push(Step::Recv { from: link(rank - p), dst: out });
                    continue;
                }
                if rank < extra {
                    steps.push(Step::RecvReduceCopy { from: link(rank + p), local: input, dst: out });
                } else {
                    steps.push(Step::Copy { src: input, dst: out });
                }
                let mut bit = 1;
                while bit < p {
                    let partner = rank ^ bit;
                    steps.push(Step::Send { to: link(partner), src: out });
                    steps.push(Step::RecvReduceCopy { from: link(partner), local: out, dst: out });
                    bit <<= 1;
                }
                if rank < extra {
                    steps.push(Step::Send { to: link(rank + p), src: out });
                }
            }
            Lane { role: Role::Local, steps }
        })
        .collect()
}
