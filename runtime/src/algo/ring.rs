//! Ring algorithms: rank r sends to r+1 and receives from r-1 on every channel. Data is
//! split over channels, then into chunks of at most `shape.chunk` elements, so that chunks
//! pipeline around the ring.

use super::{split, Collective, Link, Shape, Slice, Step};

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Vec<Step>> {
    (0..shape.channels).map(|channel| lane(shape, rank, channel)).collect()
}

fn lane(shape: &Shape, rank: usize, channel: usize) -> Vec<Step> {
    let n = shape.nranks;
    let ring = Ring { rank, n, next: Link { peer: (rank + 1) % n, channel }, prev: Link { peer: (rank + n - 1) % n, channel } };
    // Channels split the data (for all_gather and reduce_scatter: every rank's block alike).
    let (offset, len) = split(shape.count, shape.channels).nth(channel).expect("channel below channels");
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

/// Chunks of [offset, offset+len): (offset, count).
fn chunks(offset: usize, len: usize, chunk: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(chunk)).map(move |i| (offset + i * chunk, chunk.min(len - i * chunk)))
}

impl Ring {
    /// Segment `i` (0..n) modulo n.
    fn at(&self, i: isize) -> usize {
        i.rem_euclid(self.n as isize) as usize
    }

    /// Reduce-scatter then all-gather, in rounds of n chunks: segment s of a round ends up
    /// fully reduced on rank s-1, which then starts it around the ring.
    fn all_reduce(&self, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let (n, r) = (self.n, self.rank as isize);
        if n == 1 {
            if len > 0 {
                steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(offset, len) });
            }
            return;
        }
        for (round, round_len) in chunks(offset, len, n * chunk) {
            let segs: Vec<(usize, usize)> = split(round_len, n).map(|(o, c)| (round + o, c)).collect();
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

    /// A chain from the root around the ring.
    fn broadcast(&self, root: usize, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let position = (self.rank + self.n - root) % self.n;
        if position == 0 && len > 0 {
            steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(offset, len) });
        }
        if self.n == 1 {
            return;
        }
        for (o, c) in chunks(offset, len, chunk) {
            steps.push(match position {
                0 => Step::Send { to: self.next, src: Slice::send(o, c) },
                p if p == self.n - 1 => Step::Recv { from: self.prev, dst: Slice::recv(o, c) },
                _ => Step::RecvCopySend { from: self.prev, to: self.next, dst: Slice::recv(o, c) },
            });
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
    /// every block.
    fn all_gather(&self, count: usize, offset: usize, len: usize, chunk: usize, steps: &mut Vec<Step>) {
        let r = self.rank as isize;
        if len > 0 {
            steps.push(Step::Copy { src: Slice::send(offset, len), dst: Slice::recv(self.rank * count + offset, len) });
        }
        if self.n == 1 {
            return;
        }
        for (o, c) in chunks(offset, len, chunk) {
            steps.push(Step::Send { to: self.next, src: Slice::send(o, c) });
            for j in 1..self.n as isize - 1 {
                let block = self.at(r - j);
                steps.push(Step::RecvCopySend { from: self.prev, to: self.next, dst: Slice::recv(block * count + o, c) });
            }
            steps.push(Step::Recv { from: self.prev, dst: Slice::recv(self.at(r + 1) * count + o, c) });
        }
    }

    /// Block s is reduced around the ring and ends on rank s.
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
