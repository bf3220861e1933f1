//! Direct exchange: every pair talks on its own connection (channel 0), with one lane per
//! peer and direction, so that no exchange waits behind another (all_to_all, gather,
//! scatter). Any FIFO depth of at least one slot suffices. `shape.channels` is not used:
//! the lanes per peer already run side by side.
//!
//! all_reduce by direct exchange ("one shot"): each rank sends its whole input to every
//! peer and folds what arrives, so a small all_reduce costs one message latency instead of
//! the ring's 2(n-1). One lane, chunk by chunk: send chunk k to every peer, then fold chunk
//! k from every peer in rank order (`acc = x_p ⊕ acc`, starting from this rank's input).
//! Every rank sends chunk k before it waits for anyone's, so a FIFO depth of one suffices;
//! in place, chunk k is sent before it is overwritten. The fold starts from each rank's own
//! input, so ranks combine in different orders: the tuner uses it only where that cannot
//! change a bit (two ranks, where each rank computes `x_peer ⊕ x_own` and the ops are
//! commutative; or integer and max/min reductions, which are exact in any order).
//!
//! In place (gather's root: `Send` is its own block of `Recv`; scatter's root: `Recv` is its
//! own block of `Send`), the root's own block is only copied onto itself, and every other
//! lane touches other blocks, so no two lanes meet in memory.

use super::{chunks, Collective, Lane, Link, Role, Shape, Slice, Step};

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Lane> {
    let (n, count, chunk, root) = (shape.nranks, shape.count, shape.chunk, shape.root);
    let peers = (0..n).filter(move |&p| p != rank);
    let sends = |peer: usize, offset: usize| Lane {
        role: Role::SendTo { peer, channel: 0 },
        steps: chunks(0, count, chunk).map(|(o, c)| Step::Send { to: link(peer), src: Slice::send(offset + o, c) }).collect(),
    };
    let receives = |peer: usize, offset: usize| Lane {
        role: Role::RecvFrom { peer, channel: 0 },
        steps: chunks(0, count, chunk).map(|(o, c)| Step::Recv { from: link(peer), dst: Slice::recv(offset + o, c) }).collect(),
    };
    let copy = |src: usize, dst: usize| Lane {
        role: Role::Local,
        steps: if count > 0 { vec![Step::Copy { src: Slice::send(src, count), dst: Slice::recv(dst, count) }] } else { vec![] },
    };
    match shape.collective {
        Collective::AllToAll => {
            let mut lanes = vec![copy(rank * count, rank * count)];
            for peer in peers {
                lanes.push(sends(peer, peer * count));
                lanes.push(receives(peer, peer * count));
            }
            lanes
        }
        Collective::Gather if rank == root => std::iter::once(copy(0, root * count)).chain(peers.map(|p| receives(p, p * count))).collect(),
        Collective::Gather => vec![sends(root, 0)],
        Collective::Scatter if rank == root => std::iter::once(copy(root * count, 0)).chain(peers.map(|p| sends(p, p * count))).collect(),
        Collective::Scatter => vec![receives(root, 0)],
        Collective::AllReduce => vec![one_shot_all_reduce(shape, rank)],
        other => unreachable!("{other:?} is not planned by direct exchange"),
    }
}

fn one_shot_all_reduce(shape: &Shape, rank: usize) -> Lane {
    let (n, count, chunk) = (shape.nranks, shape.count, shape.chunk);
    let mut steps = Vec::new();
    for (offset, c) in chunks(0, count, chunk) {
        if n == 1 {
            steps.push(Step::Copy { src: Slice::send(offset, c), dst: Slice::recv(offset, c) });
            continue;
        }
        steps.extend((0..n).filter(|&p| p != rank).map(|p| Step::Send { to: link(p), src: Slice::send(offset, c) }));
        for (i, p) in (0..n).filter(|&p| p != rank).enumerate() {
            let local = if i == 0 { Slice::send(offset, c) } else { Slice::recv(offset, c) };
            steps.push(Step::RecvReduceCopy { from: link(p), local, dst: Slice::recv(offset, c) });
        }
    }
    Lane { role: Role::Local, steps }
}

fn link(peer: usize) -> Link {
    Link { peer, channel: 0 }
}
