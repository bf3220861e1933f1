//! Ring algorithms: rank r sends to r+1 and receives from r-1 on every channel. Data is
//! split over channels (one lane each), then into chunks of at most `shape.chunk`
//! elements, so that chunks pipeline around the ring: while rank r works on one chunk, its
//! neighbours work on the ones before and after it.
//!
//! all_reduce is NCCL's `runRing`: reduce-scatter then all-gather over n segments of a
//! round of n chunks, 2(n-1) messages per rank per round, each rank sending 2(n-1)/n of
//! the data — the bandwidth-optimal amount. reduce_scatter and all_gather are the two
//! halves of it over the user's blocks; broadcast and reduce are chains through every rank,
//! pipelined per chunk.

use super::{chunks, split, split_channels, Collective, CHANNEL_GRANULE, Lane, Link, Role, Shape, Slice, Step};

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Lane> {
    (0..shape.channels).map(|channel| Lane { role: Role::Ring { channel }, steps: lane(shape, rank, channel) }).collect()
}

fn lane(shape: &Shape, rank: usize, channel: usize) -> Vec<Step> {
    let n = shape.nranks;
    let ring = Ring { rank, n, next: Link { peer: (rank + 1) % n, channel }, prev: Link { peer: (rank + n - 1) % n, channel } };
    // Channels split the data (for all_gather and reduce_scatter: every rank's block alike).
    let (offset, len) = split_channels(shape.count, shape.channels, CHANNEL_GRANULE).nth(channel).expect("channel below channels");
    let mut steps = Vec::new();
    match shape.collective {
        Collective::AllReduce => ring.all_reduce(offset, len, shape.chunk, &mut steps),
        Collective::Broadcast => ring.broadcast(shape.root, offset, len, shape.chunk, &mut steps),
        Collective::Reduce => ring.reduce(shape.root, offset, len, shape.chunk, &mut steps),
        Collective::AllGather => ring.all_gather(shape.count, offset, len, shape.chunk, &mut steps),
        Collective::ReduceScatter => ring.reduce_scatter(shape.count, offset, len, shape.chunk, &mut steps),
        Collective::AllToAll | Collective::Gather | Collective::Scatter => unreachable!("planned by direct"),
    }
    steps
}

struct Ring {
    rank: usize,
    n: usize,
    next: Link,
    prev: Link,
}

impl Ring {
    /// Segment `i` (0..n) modulo n.
    fn at(&self, i: isize) -> usize {
        i.rem_euclid(self.n as isize) as usize
    }

    /// Reduce-scatter then all-gather, in rounds of n chunks: segment s of a round ends up
    /// fully reduced on rank s-1, which then starts it around the ring. Every step reads
    /// `Send` only for segments this rank has not yet written through `Recv`, so in place is
    /// safe; segments of 0 elements (rounds shorter than n) are skipped by every rank alike.
    fn all_reduce(&self, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let (n, r) = (self.n, self.rank as isize);
        if n == 1 {
            if len > 0 {
                steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(offset, len) });
            }
            return;
        }
        for (round, round_len) in chunks(offset, len, n * chunk) {
            // In whole granules where chunks are (the last segment takes the rest, and none
            // outgrows a chunk), so that a GPU kernel's segments start on 16 bytes: a round
            // of 16384 floats over 3 ranks split element by element put them at 21848 and
            // 43692 bytes, on the byte-by-byte path.
            let segs: Vec<(usize, usize)> = if chunk % CHANNEL_GRANULE == 0 {
                split_channels(round_len, n, CHANNEL_GRANULE).map(|(o, c)| (round + o, c)).collect()
            } else {
                split(round_len, n).map(|(o, c)| (round + o, c)).collect()
            };
            let seg = |i: isize| segs[self.at(i)];
            let mut push = |(o, c): (usize, usize), step: &dyn Fn(usize, usize) -> Step| {
                if c > 0 {
                    steps.push(step(o, c));
                }
            };
            push(seg(r), &|o, c| Step::Send { to: self.next, src: Slice::send(o, c) });
            for j in 1..n as isize - 1 {
                push(seg(r - j), &|o, c| Step::RecvReduceSend { from: self.prev, to: self.next, local: Slice::send(o, c) });
            }
            push(seg(r + 1), &|o, c| Step::RecvReduceCopySend { from: self.prev, to: self.next, local: Slice::send(o, c), dst: Slice::recv(o, c) });
            for j in 1..n as isize - 1 {
                push(seg(r + 1 - j), &|o, c| Step::RecvCopySend { from: self.prev, to: self.next, dst: Slice::recv(o, c) });
            }
            push(seg(r + 2), &|o, c| Step::Recv { from: self.prev, dst: Slice::recv(o, c) });
        }
    }

    /// A chain from the root around the ring. The root copies its own output last, so
    /// that the first chunk leaves at once.
    fn broadcast(&self, root: usize, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let position = (self.rank + self.n - root) % self.n;
        if self.n > 1 {
            for (o, c) in chunks(offset, len, chunk) {
                steps.push(match position {
                    0 => Step::Send { to: self.next, src: Slice::send(o, c) },
                    p if p == self.n - 1 => Step::Recv { from: self.prev, dst: Slice::recv(o, c) },
                    _ => Step::RecvCopySend { from: self.prev, to: self.next, dst: Slice::recv(o, c) },
                });
            }
        }
        if position == 0 && len > 0 {
            steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(offset, len) });
        }
    }

    /// A chain that starts after the root and ends at it, reducing on the way.
    fn reduce(&self, root: usize, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        if self.n == 1 {
            if len > 0 {
                steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(offset, len) });
            }
            return;
        }
        let position = (self.rank + self.n - root - 1) % self.n;
        for (o, c) in chunks(offset, len, chunk) {
            steps.push(match position {
                0 => Step::Send { to: self.next, src: Slice::send(o, c) },
                p if p == self.n - 1 => Step::RecvReduceCopy { from: self.prev, local: Slice::send(o, c), dst: Slice::recv(o, c) },
                _ => Step::RecvReduceSend { from: self.prev, to: self.next, local: Slice::send(o, c) },
            });
        }
    }

    /// Each rank's block travels n-1 hops; `offset`/`len` select this channel's part of
    /// every block. The own block is copied after the first chunk left (a no-op in place,
    /// where `Send` is that block): last where there are several chunks, so that the
    /// receives keep pace with the peers' sends; right after the send where there is one,
    /// so that the copy runs while the first hop is in flight rather than after the last
    /// receive, on the critical path of a small call that waits on its peers (2 ranks as
    /// hosts on one H200: the copy step took 1.8-2.0 µs of a ~21 µs call; moved, the calls
    /// took 0-1 µs less, docs/results/2026-11-27-h200x1-caller-limit).
    fn all_gather(&self, count: usize, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let r = self.rank as isize;
        let copy = Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(self.rank * count + offset, len) };
        let copy_early = self.n > 1 && len <= chunk;
        if self.n > 1 {
            for (o, c) in chunks(offset, len, chunk) {
                steps.push(Step::Send { to: self.next, src: Slice::send(o, c) });
                if copy_early {
                    steps.push(copy.clone());
                }
                for j in 1..self.n as isize - 1 {
                    let block = self.at(r - j);
                    steps.push(Step::RecvCopySend { from: self.prev, to: self.next, dst: Slice::recv(block * count + o, c) });
                }
                steps.push(Step::Recv { from: self.prev, dst: Slice::recv(self.at(r + 1) * count + o, c) });
            }
        }
        if len > 0 && !copy_early {
            steps.push(copy);
        }
    }

    /// Block s is reduced around the ring, starting at rank s+1, and ends on rank s. In
    /// place, rank r's output is its own block r of `Send`, which only the last step reads.
    fn reduce_scatter(&self, count: usize, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let r = self.rank as isize;
        if self.n == 1 {
            if len > 0 {
                steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(offset, len) });
            }
            return;
        }
        for (o, c) in chunks(offset, len, chunk) {
            steps.push(Step::Send { to: self.next, src: Slice::send(self.at(r - 1) * count + o, c) });
            for j in 1..self.n as isize - 1 {
                let block = self.at(r - 1 - j);
                steps.push(Step::RecvReduceSend { from: self.prev, to: self.next, local: Slice::send(block * count + o, c) });
            }
            steps.push(Step::RecvReduceCopy { from: self.prev, local: Slice::send(self.rank * count + o, c), dst: Slice::recv(o, c) });
        }
    }
}
