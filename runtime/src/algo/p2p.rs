//! Point-to-point transfers: the `ncclSend`s and `ncclRecv`s of one group on one rank,
//! planned as lanes, so that a group fuses into one schedule the executor walks like a
//! collective's.
//!
//! Transfers between two ranks pair up in the order each rank lists them (NCCL's rule): the
//! k-th send from a to b meets the k-th receive on b from a, and must have its count. Each
//! transfer is cut into messages of at most `chunk` elements; the messages to (or from) one
//! peer go round-robin over the channels given, with one lane per (peer, direction,
//! channel), so a large transfer uses several connections at once and a send never waits
//! behind a receive. Transfers of 0 elements move nothing and get no steps.
//!
//! Each transfer has its own buffer, so steps here are tagged with the index of the
//! transfer whose buffer they name: a send's steps read `Send` slices of it, a receive's
//! write `Recv` slices of it. A rank sending to itself is matched with its receives from
//! itself, in order, and planned as [`SelfCopy`]s, since a step names one transfer's buffer.

use super::{chunks, Role, Step, Unsupported};
use super::{Link, Slice};

/// Which way a transfer goes, seen from the rank that calls it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Send,
    Recv,
}

/// One `ncclSend` or `ncclRecv` of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub direction: Direction,
    pub peer: usize,
    pub count: usize,
}

/// A lane whose steps are each tagged with the transfer whose buffer they name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferLane {
    pub role: Role,
    pub steps: Vec<(usize, Step)>,
}

/// A send to oneself met by a receive from oneself: `count` elements copied from transfer
/// `send`'s buffer to transfer `recv`'s, by the executor, before or beside the lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelfCopy {
    pub send: usize,
    pub recv: usize,
    pub count: usize,
}

/// One rank's plan for a group of transfers.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct PointToPointPlan {
    pub lanes: Vec<TransferLane>,
    pub self_copies: Vec<SelfCopy>,
}

/// Plans `transfers`, the group of `rank` (of `nranks`), with messages of at most `chunk`
/// elements over connection channels `first_channel..first_channel + channels`.
pub fn point_to_point(
    nranks: usize,
    rank: usize,
    transfers: &[Transfer],
    chunk: usize,
    first_channel: usize,
    channels: usize,
) -> Result<PointToPointPlan, Unsupported> {
    let unsupported = |reason: String| Unsupported { algorithm: "direct", collective: "send/recv", reason };
    if chunk == 0 || channels == 0 || rank >= nranks {
        return Err(unsupported("chunk and channels must be positive, rank below nranks".into()));
    }
    if let Some(t) = transfers.iter().find(|t| t.peer >= nranks) {
        return Err(unsupported(format!("{t:?} names a peer outside {nranks} ranks")));
    }
    let mut plan = PointToPointPlan { self_copies: self_copies(rank, transfers).map_err(unsupported)?, lanes: Vec::new() };
    // Lanes by (peer, direction, channel index), in order of first use; and the number of
    // messages so far to or from each (peer, direction), which picks the next channel.
    let mut lane_of: Vec<((usize, Direction, usize), usize)> = Vec::new();
    let mut messages: Vec<((usize, Direction), usize)> = Vec::new();
    for (index, t) in transfers.iter().enumerate().filter(|(_, t)| t.peer != rank) {
        for (offset, count) in chunks(0, t.count, chunk) {
            let sent = counter(&mut messages, (t.peer, t.direction));
            let channel = first_channel + *sent % channels;
            *sent += 1;
            let link = Link { peer: t.peer, channel };
            let (role, step) = match t.direction {
                Direction::Send => (Role::SendTo { peer: t.peer, channel }, Step::Send { to: link, src: Slice::send(offset, count) }),
                Direction::Recv => (Role::RecvFrom { peer: t.peer, channel }, Step::Recv { from: link, dst: Slice::recv(offset, count) }),
            };
            let key = (t.peer, t.direction, channel);
            let lane = match lane_of.iter().find(|(k, _)| *k == key) {
                Some(&(_, lane)) => lane,
                None => {
                    plan.lanes.push(TransferLane { role, steps: Vec::new() });
                    lane_of.push((key, plan.lanes.len() - 1));
                    plan.lanes.len() - 1
                }
            };
            plan.lanes[lane].steps.push((index, step));
        }
    }
    Ok(plan)
}

fn counter<K: PartialEq>(counters: &mut Vec<(K, usize)>, key: K) -> &mut usize {
    let at = match counters.iter().position(|(k, _)| *k == key) {
        Some(at) => at,
        None => {
            counters.push((key, 0));
            counters.len() - 1
        }
    };
    &mut counters[at].1
}

/// Pairs the sends to `rank` itself with the receives from it, in order.
fn self_copies(rank: usize, transfers: &[Transfer]) -> Result<Vec<SelfCopy>, String> {
    let own = |direction| transfers.iter().enumerate().filter(move |(_, t)| t.peer == rank && t.direction == direction);
    let (sends, receives): (Vec<_>, Vec<_>) = (own(Direction::Send).collect(), own(Direction::Recv).collect());
    if sends.len() != receives.len() {
        return Err(format!("{} sends to rank {rank} itself but {} receives from it", sends.len(), receives.len()));
    }
    sends
        .into_iter()
        .zip(receives)
        .map(|((send, s), (recv, r))| {
            if s.count != r.count {
                return Err(format!("a send of {} elements to rank {rank} itself meets a receive of {}", s.count, r.count));
            }
            Ok(SelfCopy { send, recv, count: s.count })
        })
        .collect()
}
