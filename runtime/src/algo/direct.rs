//! Direct exchange: every pair talks on its own connections, with one lane per peer,
//! direction and channel, so that no exchange waits behind another (all_to_all, gather,
//! scatter). Each block is split over `shape.channels` channels (channel c carries part c,
//! and the local copy is split alike), so that an executor with a worker per lane (a GPU
//! block per lane) moves one block with many. Any FIFO depth of at least one slot
//! suffices.
//!
//! all_reduce by direct exchange ("two shot"): block b of the vector belongs to rank b.
//! Each rank sends block p of its input to rank p (channel 0); each owner folds its block
//! from every peer as the chunks arrive, in rank order starting from its own input, and
//! sends each finished chunk to every peer (channel 1), which copies it into place. Two
//! message latencies instead of the ring's 2(n-1), the ring's traffic, and every block is
//! reduced by one rank only, so all ranks hold the same bits whatever the op. No message
//! waits for anything its receiver has received, so any FIFO depth of one suffices; in
//! place, a rank's chunk of block p is sent before p's reduced chunk can come back.
//!
//! With two ranks, all_reduce goes in one hop instead ("one shot"): each rank sends its
//! whole input to the other and folds the other's into its own, half the two-shot's
//! latency for the same traffic (each rank reduces every element). One lane per rank, per
//! chunk: copy the input chunk into the output (in place, nothing), send it from there,
//! then receive the peer's chunk and fold it in — each input element read once, a chunk
//! sent before it is overwritten, one FIFO slot enough. Both ranks compute x0 ⊕ x1, with
//! the operands in opposite order: the ops are commutative (sum and product exactly in
//! IEEE arithmetic, max and min order their zeros, oxccl-kernels' element.rs), so both
//! hold the same bits but for the payload of a NaN made of two NaNs.

use super::{chunks, split, Collective, Lane, Link, Role, Shape, Slice, Step};

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Lane> {
    if shape.collective == Collective::AllReduce {
        return two_shot_all_reduce(shape, rank);
    }
    let (n, count, chunk, root) = (shape.nranks, shape.count, shape.chunk, shape.root);
    let parts: Vec<(usize, usize, usize)> = split(count, shape.channels.max(1)).enumerate().filter(|(_, (_, c))| *c > 0).map(|(ch, (o, c))| (ch, o, c)).collect();
    let peers = || (0..n).filter(move |&p| p != rank);
    let sends = |peer: usize, offset: usize| {
        parts.iter().map(move |&(channel, o, c)| Lane {
            role: Role::SendTo { peer, channel },
            steps: chunks(o, c, chunk).map(|(o, c)| Step::Send { to: Link { peer, channel }, src: Slice::send(offset + o, c) }).collect(),
        })
    };
    let receives = |peer: usize, offset: usize| {
        parts.iter().map(move |&(channel, o, c)| Lane {
            role: Role::RecvFrom { peer, channel },
            steps: chunks(o, c, chunk).map(|(o, c)| Step::Recv { from: Link { peer, channel }, dst: Slice::recv(offset + o, c) }).collect(),
        })
    };
    let copy = |src: usize, dst: usize| parts.iter().map(move |&(_, o, c)| Lane { role: Role::Local, steps: vec![Step::Copy { src: Slice::send(src + o, c), dst: Slice::recv(dst + o, c) }] });
    let mut lanes: Vec<Lane> = Vec::new();
    match shape.collective {
        Collective::AllToAll => {
            lanes.extend(copy(rank * count, rank * count));
            for peer in peers() {
                lanes.extend(sends(peer, peer * count));
                lanes.extend(receives(peer, peer * count));
            }
        }
        Collective::Gather if rank == root => {
            lanes.extend(copy(0, root * count));
            for p in peers() {
                lanes.extend(receives(p, p * count));
            }
        }
        Collective::Gather => lanes.extend(sends(root, 0)),
        Collective::Scatter if rank == root => {
            lanes.extend(copy(root * count, 0));
            for p in peers() {
                lanes.extend(sends(p, p * count));
            }
        }
        Collective::Scatter => lanes.extend(receives(root, 0)),
        other => unreachable!("{other:?} is not planned by direct exchange"),
    }
    lanes
}

fn two_shot_all_reduce(shape: &Shape, rank: usize) -> Vec<Lane> {
    let (n, chunk) = (shape.nranks, shape.chunk);
    if n == 2 {
        return vec![one_shot_all_reduce(shape, rank)];
    }
    let blocks: Vec<(usize, usize)> = split(shape.count, n).collect();
    let (own_offset, own_count) = blocks[rank];
    let peers = || (0..n).filter(move |&p| p != rank);
    let ag = |peer: usize| Link { peer, channel: 1 };
    let mut lanes = Vec::new();
    for p in peers() {
        let (offset, count) = blocks[p];
        lanes.push(Lane {
            role: Role::SendTo { peer: p, channel: 0 },
            steps: chunks(offset, count, chunk).map(|(o, c)| Step::Send { to: link(p), src: Slice::send(o, c) }).collect(),
        });
        lanes.push(Lane {
            role: Role::RecvFrom { peer: p, channel: 1 },
            steps: chunks(offset, count, chunk).map(|(o, c)| Step::Recv { from: ag(p), dst: Slice::recv(o, c) }).collect(),
        });
    }
    let mut own = Vec::new();
    for (o, c) in chunks(own_offset, own_count, chunk) {
        if n == 1 {
            own.push(Step::Copy { src: Slice::send(o, c), dst: Slice::recv(o, c) });
            continue;
        }
        for (i, p) in peers().enumerate() {
            let local = if i == 0 { Slice::send(o, c) } else { Slice::recv(o, c) };
            own.push(Step::RecvReduceCopy { from: link(p), local, dst: Slice::recv(o, c) });
        }
        own.extend(peers().map(|p| Step::Send { to: ag(p), src: Slice::recv(o, c) }));
    }
    lanes.push(Lane { role: Role::Local, steps: own });
    lanes
}

/// Two ranks' all_reduce in one hop: see the module's doc.
fn one_shot_all_reduce(shape: &Shape, rank: usize) -> Lane {
    let peer = 1 - rank;
    let steps = chunks(0, shape.count, shape.chunk)
        .flat_map(|(o, c)| {
            let own = Slice::recv(o, c);
            [Step::Copy { src: Slice::send(o, c), dst: own }, Step::Send { to: link(peer), src: own }, Step::RecvReduceCopy { from: link(peer), local: own, dst: own }]
        })
        .collect();
    Lane { role: Role::Local, steps }
}

fn link(peer: usize) -> Link {
    Link { peer, channel: 0 }
}
