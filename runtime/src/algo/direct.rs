//! Direct exchange: every pair talks on its own connection (channel 0), with one lane per
//! peer and direction, so that no exchange waits behind another (all_to_all, gather,
//! scatter). Any FIFO depth of at least one slot suffices. `shape.channels` is not used:
//! the lanes per peer already run side by side.
//!
//! all_reduce by direct exchange ("two shot"): block b of the vector belongs to rank b.
//! Each rank sends block p of its input to rank p (channel 0); each owner folds its block
//! from every peer as the chunks arrive, in rank order starting from its own input, and
//! sends each finished chunk to every peer (channel 1), which copies it into place. Two
//! message latencies instead of the ring's 2(n-1), the ring's traffic, and every block is
//! reduced by one rank only, so all ranks hold the same bits whatever the op. No message
//! waits for anything its receiver has received, so any FIFO depth of one suffices; in
//! place, a rank's chunk of block p is sent before p's reduced chunk can come back.

use super::{chunks, split, Collective, Lane, Link, Role, Shape, Slice, Step};

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
        Collective::AllReduce => two_shot_all_reduce(shape, rank),
        other => unreachable!("{other:?} is not planned by direct exchange"),
    }
}

fn two_shot_all_reduce(shape: &Shape, rank: usize) -> Vec<Lane> {
    let (n, chunk) = (shape.nranks, shape.chunk);
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

fn link(peer: usize) -> Link {
    Link { peer, channel: 0 }
}
