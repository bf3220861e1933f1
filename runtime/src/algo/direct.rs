//! Direct exchange: every pair talks on its own connection (channel 0), with one lane per
//! peer and direction, so that no exchange waits behind another (all_to_all, gather,
//! scatter). Any FIFO depth of at least one slot suffices. `shape.channels` is not used:
//! the lanes per peer already run side by side.
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
        other => unreachable!("{other:?} is not planned by direct exchange"),
    }
}

fn link(peer: usize) -> Link {
    Link { peer, channel: 0 }
}
