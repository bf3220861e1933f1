//! Direct exchange: every pair talks on its own connection (channel 0), one lane per peer
//! and direction, so that no exchange waits for another (all_to_all, gather, scatter).

use super::{Collective, Link, Shape, Slice, Step};

fn chunked(count: usize, chunk: usize, step: impl Fn(usize, usize) -> Step) -> Vec<Step> {
    (0..count.div_ceil(chunk)).map(|i| step(i * chunk, chunk.min(count - i * chunk))).collect()
}

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Vec<Step>> {
    let (n, count, chunk, root) = (shape.nranks, shape.count, shape.chunk, shape.root);
    let link = |peer| Link { peer, channel: 0 };
    let copy = |src: usize, dst: usize| if count > 0 { vec![Step::Copy { src: Slice::send(src, count), dst: Slice::recv(dst, count) }] } else { vec![] };
    let mut lanes = Vec::new();
    match shape.collective {
        Collective::AllToAll => {
            lanes.push(copy(rank * count, rank * count));
            for peer in (0..n).filter(|&p| p != rank) {
                lanes.push(chunked(count, chunk, |o, c| Step::Send { to: link(peer), src: Slice::send(peer * count + o, c) }));
                lanes.push(chunked(count, chunk, |o, c| Step::Recv { from: link(peer), dst: Slice::recv(peer * count + o, c) }));
            }
        }
        Collective::Gather if rank == root => {
            lanes.push(copy(0, root * count));
            for peer in (0..n).filter(|&p| p != rank) {
                lanes.push(chunked(count, chunk, |o, c| Step::Recv { from: link(peer), dst: Slice::recv(peer * count + o, c) }));
            }
        }
        Collective::Gather => lanes.push(chunked(count, chunk, |o, c| Step::Send { to: link(root), src: Slice::send(o, c) })),
        Collective::Scatter if rank == root => {
            lanes.push(copy(root * count, 0));
            for peer in (0..n).filter(|&p| p != rank) {
                lanes.push(chunked(count, chunk, |o, c| Step::Send { to: link(peer), src: Slice::send(peer * count + o, c) }));
            }
        }
        Collective::Scatter => lanes.push(chunked(count, chunk, |o, c| Step::Recv { from: link(root), dst: Slice::recv(o, c) })),
        other => unreachable!("{other:?} is not planned by direct exchange"),
    }
    lanes.retain(|l| !l.is_empty());
    lanes
}
