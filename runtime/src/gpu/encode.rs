//! A rank's lanes of schedule steps, encoded as the CUDA executor reads them: one
//! [`DevStep`] per step, lane after lane, the lanes' bounds, and the connection ends the
//! steps name, numbered in order of first use (the launch's `DevConn` table is built in that
//! order). [`decode`] inverts it; the tests check that every plan survives the round trip.

use oxccl_kernels::device::{kind, DevStep, NO_CONN, RECV_BUFFER};

use crate::algo::{Buffer, Link, Slice, Step};
use crate::error::{Error, Result};

/// Which end of a connection a rank holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum End {
    Recv(Link),
    Send(Link),
}

impl End {
    pub fn link(&self) -> Link {
        match *self {
            End::Recv(l) | End::Send(l) => l,
        }
    }

    pub fn direction(&self) -> crate::proxy::Direction {
        match self {
            End::Recv(_) => crate::proxy::Direction::Recv,
            End::Send(_) => crate::proxy::Direction::Send,
        }
    }
}

/// Lanes ready to upload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Encoded {
    pub steps: Vec<DevStep>,
    /// Lane i runs `steps[bounds[i]..bounds[i + 1]]`.
    pub bounds: Vec<u32>,
    /// The connection ends, in the order of the table the steps index.
    pub ends: Vec<End>,
}

impl Encoded {
    /// Each lane's number of steps.
    pub fn lane_steps(&self) -> Vec<u32> {
        self.bounds.windows(2).map(|b| b[1] - b[0]).collect()
    }
}

/// Encodes `lanes` of a datatype of `esize` bytes; `slot_bytes` bounds every message. Each
/// connection end must belong to one lane: the kernel's block counts an end's messages
/// itself (it reads the end's count once a window), so two blocks on one end would
/// reuse a slot; a plan that breaks the rule is an internal error, never a launch.
pub(crate) fn encode(lanes: &[Vec<Step>], esize: usize, slot_bytes: usize) -> Result<Encoded> {
    let mut out = Encoded { steps: Vec::new(), bounds: vec![0], ends: Vec::new() };
    // The lane of each end in `out.ends`.
    let mut owners: Vec<usize> = Vec::new();
    let mut index = |end: End, lane: usize, ends: &mut Vec<End>| -> Result<i32> {
        match ends.iter().position(|e| *e == end) {
            Some(i) if owners[i] == lane => Ok(i as i32),
            Some(i) => Err(Error::Internal(format!("connection end {end:?} is used by lanes {} and {lane}: the GPU kernel needs each end in one lane", owners[i]))),
            None => {
                ends.push(end);
                owners.push(lane);
                Ok((ends.len() - 1) as i32)
            }
        }
    };
    for (lane_index, lane) in lanes.iter().enumerate() {
        for (step, copy) in fused(lane) {
            let bytes = step.count() * esize;
            let messages = step.receives().is_some() || step.sends().is_some();
            if messages && bytes > slot_bytes {
                return Err(Error::Internal(format!("{step:?} moves {bytes} bytes, more than a slot ({slot_bytes})")));
            }
            if bytes > u32::MAX as usize {
                return Err(Error::invalid(format!("a local copy of {bytes} bytes: the GPU backend copies at most 4 GiB per rank in one step")));
            }
            let recv = step.receives().map_or(Ok(NO_CONN), |l| index(End::Recv(l), lane_index, &mut out.ends))?;
            let send = step.sends().map_or(Ok(NO_CONN), |l| index(End::Send(l), lane_index, &mut out.ends))?;
            let (kind, dst) = match copy {
                Some(dst) => (kind::COPY_SEND, Some(dst)),
                None => (kind_of(step), step.writes()),
            };
            out.steps.push(DevStep { kind, recv, send, bytes: bytes as u32, src: step.reads().map_or(0, |s| slice(s, esize)), dst: dst.map_or(0, |s| slice(s, esize)) });
        }
        out.bounds.push(out.steps.len() as u32);
    }
    Ok(out)
}

/// A lane's steps as the kernel runs them: a `Send` followed by a `Copy` of the very slice
/// it sent (the own block of an all_gather or a broadcast's root) becomes one step that
/// reads each line once and writes it to both (`Some(dst)`: the copy's destination); the
/// other steps come as they are. One step fewer saves its block-wide barriers and the
/// second read (2 ranks as hosts on one H200, the copy step took ~0.8 µs of a small
/// all_gather's kernel).
pub(super) fn fused(lane: &[Step]) -> impl Iterator<Item = (&Step, Option<Slice>)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        let step = lane.get(i)?;
        i += 1;
        match (step, lane.get(i)) {
            (Step::Send { src, .. }, Some(Step::Copy { src: copied, dst })) if copied == src => {
                i += 1;
                Some((step, Some(*dst)))
            }
            _ => Some((step, None)),
        }
    })
}

fn kind_of(step: &Step) -> u32 {
    match step {
        Step::Send { .. } => kind::SEND,
        Step::Recv { .. } => kind::RECV,
        Step::RecvReduceSend { .. } => kind::RECV_REDUCE_SEND,
        Step::RecvReduceCopy { .. } => kind::RECV_REDUCE_COPY,
        Step::RecvReduceCopySend { .. } => kind::RECV_REDUCE_COPY_SEND,
        Step::RecvCopySend { .. } => kind::RECV_COPY_SEND,
        Step::Copy { .. } => kind::COPY,
    }
}

fn slice(s: Slice, esize: usize) -> u64 {
    let offset = (s.offset * esize) as u64;
    match s.buffer {
        Buffer::Send => offset,
        Buffer::Recv => offset | RECV_BUFFER,
    }
}

/// The steps back from an encoding (for tests and debugging).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn decode(encoded: &Encoded, esize: usize) -> Vec<Vec<Step>> {
    let link = |i: i32| match encoded.ends[i as usize] {
        End::Recv(l) | End::Send(l) => l,
    };
    let slice = |word: u64, bytes: u32| {
        let buffer = if word & RECV_BUFFER != 0 { Buffer::Recv } else { Buffer::Send };
        Slice { buffer, offset: (word & !RECV_BUFFER) as usize / esize, count: bytes as usize / esize }
    };
    encoded
        .bounds
        .windows(2)
        .map(|w| {
            encoded.steps[w[0] as usize..w[1] as usize]
                .iter()
                .flat_map(|s| {
                    let (src, dst) = (slice(s.src, s.bytes), slice(s.dst, s.bytes));
                    match s.kind {
                        kind::SEND => vec![Step::Send { to: link(s.send), src }],
                        kind::RECV => vec![Step::Recv { from: link(s.recv), dst }],
                        kind::RECV_REDUCE_SEND => vec![Step::RecvReduceSend { from: link(s.recv), to: link(s.send), local: src }],
                        kind::RECV_REDUCE_COPY => vec![Step::RecvReduceCopy { from: link(s.recv), local: src, dst }],
                        kind::RECV_REDUCE_COPY_SEND => vec![Step::RecvReduceCopySend { from: link(s.recv), to: link(s.send), local: src, dst }],
                        kind::RECV_COPY_SEND => vec![Step::RecvCopySend { from: link(s.recv), to: link(s.send), dst }],
                        kind::COPY => vec![Step::Copy { src, dst }],
                        kind::COPY_SEND => vec![Step::Send { to: link(s.send), src }, Step::Copy { src, dst }],
                        other => panic!("unknown step kind {other}"),
                    }
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::{plan_rank, Algorithm, Collective, Shape};

    /// Every algorithm the planner has for each collective (those it refuses left out), with
    /// ranks 1 and 2 a host.
    fn shapes() -> Vec<(Shape, Algorithm)> {
        let mut all = Vec::new();
        for nranks in [1, 2, 3, 4, 8] {
            for collective in Collective::ALL {
                for algorithm in [Algorithm::Ring, Algorithm::Direct, Algorithm::Doubling, Algorithm::Tree] {
                    for per_host in [1, 2] {
                        for (count, chunk, channels) in [(1, 16, 1), (1000, 64, 2), (4099, 256, 4), (0, 16, 1), (77, 8, 1)] {
                            let shape = Shape { collective, count, nranks, root: nranks - 1, chunk, channels, per_host };
                            if (0..nranks).all(|rank| plan_rank(shape, algorithm, rank).is_ok()) {
                                all.push((shape, algorithm));
                            }
                        }
                    }
                }
            }
        }
        all
    }

    #[test]
    fn every_plan_survives_the_round_trip() {
        for (shape, algorithm) in shapes() {
            for rank in 0..shape.nranks {
                let lanes = plan_rank(shape, algorithm, rank).unwrap();
                for esize in [1, 2, 4, 8] {
                    let encoded = encode(&lanes, esize, shape.chunk * esize).unwrap();
                    assert_eq!(encoded.lane_steps().len(), lanes.len());
                    let fusions = lanes.iter().map(|l| fused(l).filter(|(_, c)| c.is_some()).count()).sum::<usize>();
                    assert_eq!(encoded.steps.len() + fusions, lanes.iter().map(Vec::len).sum::<usize>());
                    assert_eq!(decode(&encoded, esize), lanes, "{shape} rank {rank} esize {esize}");
                }
            }
        }
    }

    #[test]
    fn each_connection_end_belongs_to_one_lane() {
        let shapes = shapes();
        for algorithm in [Algorithm::Ring, Algorithm::Direct, Algorithm::Doubling, Algorithm::Tree] {
            assert!(shapes.iter().any(|(s, a)| *a == algorithm && s.nranks > 2), "no plan of {algorithm:?}");
        }
        for (shape, algorithm) in shapes {
            for rank in 0..shape.nranks {
                let encoded = encode(&plan_rank(shape, algorithm, rank).unwrap(), 4, shape.chunk * 4).unwrap();
                let mut owner = vec![None; encoded.ends.len()];
                for (lane, w) in encoded.bounds.windows(2).enumerate() {
                    for s in &encoded.steps[w[0] as usize..w[1] as usize] {
                        for c in [s.recv, s.send].into_iter().filter(|&c| c != NO_CONN) {
                            assert!((c as usize) < encoded.ends.len());
                            assert!(*owner[c as usize].get_or_insert(lane) == lane, "{shape}: end {:?} used by two lanes", encoded.ends[c as usize]);
                        }
                    }
                }
                assert!(owner.iter().all(Option::is_some), "an end no step uses");
            }
        }
    }

    /// Two lanes on one end would make two kernel blocks count its messages apart.
    #[test]
    fn two_lanes_on_one_end_are_refused() {
        let link = Link { peer: 1, channel: 0 };
        let send = |offset| Step::Send { to: link, src: Slice { buffer: Buffer::Send, offset, count: 4 } };
        assert!(encode(&[vec![send(0), send(4)]], 4, 64).is_ok());
        let e = encode(&[vec![send(0)], vec![send(4)]], 4, 64).unwrap_err().to_string();
        assert!(e.contains("used by lanes 0 and 1"), "{e}");
    }

    #[test]
    fn a_send_and_a_copy_of_what_it_sent_become_one_step() {
        let link = Link { peer: 1, channel: 0 };
        let own = Slice { buffer: Buffer::Send, offset: 0, count: 4 };
        let out = Slice { buffer: Buffer::Recv, offset: 8, count: 4 };
        let other = Slice { buffer: Buffer::Send, offset: 4, count: 4 };
        let lane = vec![
            Step::Send { to: link, src: own },
            Step::Copy { src: own, dst: out },
            Step::Send { to: link, src: other },
            Step::Copy { src: own, dst: out },
            Step::Recv { from: link, dst: out },
        ];
        let encoded = encode(std::slice::from_ref(&lane), 4, 64).unwrap();
        let kinds: Vec<u32> = encoded.steps.iter().map(|s| s.kind).collect();
        // Only a copy of the slice just sent joins its send.
        assert_eq!(kinds, [kind::COPY_SEND, kind::SEND, kind::COPY, kind::RECV]);
        assert_eq!(encoded.steps[0].dst, 32 | RECV_BUFFER);
        assert_eq!(decode(&encoded, 4), vec![lane]);
        // The small ring all_gather's own block goes out and into the output in one step.
        let shape = Shape { collective: Collective::AllGather, count: 4, nranks: 2, root: 0, chunk: 16, channels: 1, per_host: 1 };
        let encoded = encode(&plan_rank(shape, Algorithm::Ring, 0).unwrap(), 4, 64).unwrap();
        assert_eq!(encoded.steps.iter().map(|s| s.kind).collect::<Vec<_>>(), [kind::COPY_SEND, kind::RECV]);
    }

    #[test]
    fn a_message_larger_than_a_slot_is_refused() {
        let shape = Shape { collective: Collective::AllReduce, count: 128, nranks: 2, root: 0, chunk: 64, channels: 1, per_host: 1 };
        let lanes = plan_rank(shape, Algorithm::Ring, 0).unwrap();
        assert!(encode(&lanes, 4, 64 * 4).is_ok());
        assert!(encode(&lanes, 4, 64 * 4 - 1).is_err());
    }
}
