//! Direct exchange: every pair talks on its own connections, with one lane per peer,
//! direction and channel, so that no exchange waits behind another (all_to_all, gather,
//! scatter; and all_gather, broadcast, reduce and reduce_scatter in one hop where hops cost
//! more than bytes: across hosts, for small calls). Each block is split over `shape.channels` channels (channel c carries part c,
//! and the local copy is split alike), so that an executor with a worker per lane (a GPU
//! block per lane) moves one block with many. Any FIFO depth of at least one slot
//! suffices.
//!
//! all_reduce by direct exchange ("two shot"): block b of the vector belongs to rank b.
//! Each rank sends block p of its input to rank p; each owner folds its block from every
//! peer as the chunks arrive, in rank order starting from its own input, and sends each
//! finished chunk to every peer, which copies it into place. Each block is split over
//! `shape.channels` parts as the other collectives' blocks are: part c goes to its owner
//! on channel 2c and comes back on channel 2c + 1, with a lane per peer and part each way
//! and a folding lane per part, so that a GPU moves one block with many thread blocks. Two
//! message latencies instead of the ring's 2(n-1), the ring's traffic, and every block is
//! reduced by one rank only, so all ranks hold the same bits whatever the op. No message
//! waits for anything its receiver has received, so any FIFO depth of one suffices; in
//! place, a rank's chunk of block p is sent before p's reduced chunk can come back.
//!
//! all_gather: every rank sends its block to every peer and copies its own into place;
//! broadcast: the root sends its buffer to every peer; reduce: every rank sends its input
//! to the root; reduce_scatter: every rank sends block p of its input to rank p. A
//! reduction's owner folds its part from every peer in one lane per channel, chunk by
//! chunk, in rank order after its own input (as two-shot all_reduce's first phase), so
//! that no two lanes write one element. One hop instead of the ring's n-1; the same bytes
//! per rank but for broadcast and reduce, whose root moves n-1 times its buffer.
//!
//! With two ranks, all_reduce goes in one hop instead ("one shot"): each rank sends its
//! whole input to the other and folds the other's into its own, half the two-shot's
//! latency for the same traffic (each rank reduces every element). One lane per rank, per
//! chunk: send the input chunk, then receive the peer's chunk and fold it into the input's
//! into the output — two steps, the send first (a copy of the input into the output first
//! put a kernel's step before the message its peer waits for), each input element read
//! twice (a kernel scaling as it reads scales both reads alike), a chunk sent before it is
//! overwritten in place, one FIFO slot enough. Both ranks compute x0 ⊕ x1, with
//! the operands in opposite order: the ops are commutative (sum and product exactly in
//! IEEE arithmetic, max and min order their zeros, oxccl-kernels' element.rs), so both
//! hold the same bits but for the payload of a NaN made of two NaNs.

use super::{chunks, split_channels, Collective, CHANNEL_GRANULE, Lane, Link, Role, Shape, Slice, Step};

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Lane> {
    if shape.collective == Collective::AllReduce {
        return two_shot_all_reduce(shape, rank);
    }
    let (n, count, chunk, root) = (shape.nranks, shape.count, shape.chunk, shape.root);
    let parts = channel_parts(shape);
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
        Collective::AllGather => {
            lanes.extend(send_then_copy(&parts, peers().collect(), rank * count, chunk));
            for p in peers() {
                lanes.extend(receives(p, p * count));
            }
        }
        Collective::Broadcast if rank == root => lanes.extend(send_then_copy(&parts, peers().collect(), 0, chunk)),
        Collective::Broadcast => lanes.extend(receives(root, 0)),
        Collective::Reduce if rank == root => lanes.extend(folds(&parts, peers().collect(), 0, chunk)),
        Collective::Reduce => lanes.extend(sends(root, 0)),
        Collective::ReduceScatter => {
            for p in peers() {
                lanes.extend(sends(p, p * count));
            }
            lanes.extend(folds(&parts, peers().collect(), rank * count, chunk));
        }
        other => unreachable!("{other:?} is not planned by direct exchange"),
    }
    lanes
}

/// all_to_all in place (send and recv one buffer, as nccl-tests runs it and MPI_IN_PLACE
/// asks), on `rank`: one lane per peer and channel part, both ways, which sends each chunk
/// of the peer's block and then receives the peer's chunk over it. `lanes`' plan reads
/// a block in one lane while another writes it, which aliased buffers cannot bear; this
/// one moves the same messages on the same connections (a peer running either plan pairs
/// with it) and leaves the rank's own block where it is. Each send after a lane's first
/// waits for the receive before it, so a receiving proxy must not hold a link's messages
/// back to complete them as a group ([`Planned::sends_independently`] says so for it).
/// Every rank sends chunk k before it waits for the peer's chunk k, so a FIFO of one slot
/// suffices.
///
/// [`Planned::sends_independently`]: super::Planned::sends_independently
pub fn all_to_all_in_place(shape: &Shape, rank: usize) -> Vec<Lane> {
    let (count, chunk) = (shape.count, shape.chunk);
    let parts = channel_parts(shape);
    let mut lanes = Vec::new();
    for peer in (0..shape.nranks).filter(|&p| p != rank) {
        for &(channel, o, c) in &parts {
            let link = Link { peer, channel };
            let steps = chunks(peer * count + o, c, chunk).flat_map(|(at, c)| [Step::Send { to: link, src: Slice::send(at, c) }, Step::Recv { from: link, dst: Slice::recv(at, c) }]).collect();
            lanes.push(Lane { role: Role::Exchange { peer, channel }, steps });
        }
    }
    lanes
}

/// A block's parts over `shape.channels` channels: (channel, offset, count), empty parts
/// left out.
fn channel_parts(shape: &Shape) -> Vec<(usize, usize, usize)> {
    split_channels(shape.count, shape.channels.max(1), CHANNEL_GRANULE).enumerate().filter(|(_, (_, c))| *c > 0).map(|(ch, (o, c))| (ch, o, c)).collect()
}

/// A rank's lanes that send its own data to every peer and put it in its output: per
/// channel part, one lane that sends each chunk of the input to every peer of `peers`, then
/// copies it into the output at `output` + the chunk's offset (in place, no copy). The sends
/// come first: a GPU kernel's copy step ahead of them held back the messages the peers wait
/// for.
fn send_then_copy(parts: &[(usize, usize, usize)], peers: Vec<usize>, output: usize, chunk: usize) -> impl Iterator<Item = Lane> + '_ {
    parts.iter().map(move |&(channel, o, c)| {
        let mut steps = Vec::new();
        for (o, c) in chunks(o, c, chunk) {
            let input = Slice::send(o, c);
            steps.extend(peers.iter().map(|&p| Step::Send { to: Link { peer: p, channel }, src: input }));
            steps.push(Step::Copy { src: input, dst: Slice::recv(output + o, c) });
        }
        Lane { role: Role::Local, steps }
    })
}

/// The owner's lanes of a direct reduction: per channel part (channel, offset, count), one
/// lane that folds each chunk from every peer of `peers` (on that channel), in rank order,
/// into the output, starting from its own input at `input` + the chunk's offset.
fn folds(parts: &[(usize, usize, usize)], peers: Vec<usize>, input: usize, chunk: usize) -> impl Iterator<Item = Lane> + '_ {
    parts.iter().map(move |&(channel, o, c)| {
        let mut steps = Vec::new();
        for (o, c) in chunks(o, c, chunk) {
            if peers.is_empty() {
                steps.push(Step::Copy { src: Slice::send(input + o, c), dst: Slice::recv(o, c) });
            }
            for (i, &p) in peers.iter().enumerate() {
                let local = if i == 0 { Slice::send(input + o, c) } else { Slice::recv(o, c) };
                steps.push(Step::RecvReduceCopy { from: Link { peer: p, channel }, local, dst: Slice::recv(o, c) });
            }
        }
        Lane { role: Role::Local, steps }
    })
}

fn two_shot_all_reduce(shape: &Shape, rank: usize) -> Vec<Lane> {
    let (n, chunk) = (shape.nranks, shape.chunk);
    if n == 2 {
        return vec![one_shot_all_reduce(shape, rank)];
    }
    // Blocks in whole granules, as the ring's segments (ring.rs).
    let blocks: Vec<(usize, usize)> = split_channels(shape.count, n, CHANNEL_GRANULE).collect();
    // Block b's parts (offset, count, part): part c's chunks go to their owner on channel
    // 2c and come back reduced on channel 2c + 1.
    let parts = |b: usize| {
        let (offset, count) = blocks[b];
        split_channels(count, shape.channels.max(1), CHANNEL_GRANULE).enumerate().filter(|(_, (_, c))| *c > 0).map(move |(part, (o, c))| (offset + o, c, part))
    };
    let rs = |peer: usize, part: usize| Link { peer, channel: 2 * part };
    let ag = |peer: usize, part: usize| Link { peer, channel: 2 * part + 1 };
    let peers = || (0..n).filter(move |&p| p != rank);
    let mut lanes = Vec::new();
    for p in peers() {
        for (offset, count, part) in parts(p) {
            lanes.push(Lane {
                role: Role::SendTo { peer: p, channel: 2 * part },
                steps: chunks(offset, count, chunk).map(|(o, c)| Step::Send { to: rs(p, part), src: Slice::send(o, c) }).collect(),
            });
            lanes.push(Lane {
                role: Role::RecvFrom { peer: p, channel: 2 * part + 1 },
                steps: chunks(offset, count, chunk).map(|(o, c)| Step::Recv { from: ag(p, part), dst: Slice::recv(o, c) }).collect(),
            });
        }
    }
    let others: Vec<usize> = peers().collect();
    for (offset, count, part) in parts(rank) {
        let mut own = Vec::new();
        for (o, c) in chunks(offset, count, chunk) {
            let dst = Slice::recv(o, c);
            let Some((&first, rest)) = others.split_first() else {
                own.push(Step::Copy { src: Slice::send(o, c), dst });
                continue;
            };
            // The last fold sends the finished chunk to the first peer as it writes it: one
            // dependent step fewer in this lane, which every chunk's round trip waits on.
            for (i, &p) in others.iter().enumerate() {
                let local = if i == 0 { Slice::send(o, c) } else { dst };
                own.push(match i + 1 == others.len() {
                    true => Step::RecvReduceCopySend { from: rs(p, part), to: ag(first, part), local, dst },
                    false => Step::RecvReduceCopy { from: rs(p, part), local, dst },
                });
            }
            own.extend(rest.iter().map(|&p| Step::Send { to: ag(p, part), src: dst }));
        }
        lanes.push(Lane { role: Role::Local, steps: own });
    }
    lanes
}

/// Two ranks' all_reduce in one hop: see the module's doc.
fn one_shot_all_reduce(shape: &Shape, rank: usize) -> Lane {
    let peer = 1 - rank;
    let steps = chunks(0, shape.count, shape.chunk)
        .flat_map(|(o, c)| {
            let input = Slice::send(o, c);
            [Step::Send { to: link(peer), src: input }, Step::RecvReduceCopy { from: link(peer), local: input, dst: Slice::recv(o, c) }]
        })
        .collect();
    Lane { role: Role::Local, steps }
}

fn link(peer: usize) -> Link {
    Link { peer, channel: 0 }
}
