//! Checks a schedule before anything runs it: every peer exists, every message fits a
//! chunk, each connection end belongs to one lane, the receiver of every connection expects
//! the sender's message sizes in the sender's order, and — by running all ranks together on
//! placeholder data at the given FIFO depth — every slice lies in its buffer, nothing reads
//! memory nobody wrote, no two lanes of a rank touch the same memory unordered, and no wait
//! cycle stops the ranks (see the module docs of `algo` for why one run order decides this).

use std::collections::BTreeMap;
use std::fmt;

use super::simulate::{self, Memory, Program};
use super::{Buffer, Collective, Direction, Link, Options, PointToPointPlan, Role, Schedule, SelfCopy, Slice, Step, Transfer};

/// Where in a schedule something happened: rank, lane, step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct At {
    pub rank: usize,
    pub lane: usize,
    pub role: Role,
    pub index: usize,
    pub step: Step,
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank {} lane {} ({}) step {}: {}", self.rank, self.lane, self.role, self.index, self.step)
    }
}

/// A lane that cannot go on, and what it waits for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stuck {
    pub at: At,
    /// "a message from rank 2 on channel 0", "a free slot to rank 3 on channel 1".
    pub waiting_for: String,
}

/// Why a schedule is wrong.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScheduleError {
    #[error("the schedule plans {planned} ranks for a shape of {nranks}")]
    RankCount { planned: usize, nranks: usize },
    #[error("inputs for {got} ranks, plans for {nranks}")]
    Inputs { got: usize, nranks: usize },
    #[error("rank {rank}: {copy:?} names transfers it does not have, or copies more than they hold")]
    BadSelfCopy { rank: usize, copy: SelfCopy },
    #[error("rank {rank} has {got} input elements for a send buffer of {expected}")]
    Input { rank: usize, got: usize, expected: usize },
    #[error("{collective:?} has no in-place form")]
    NoInPlace { collective: Collective },
    #[error("{at}: names peer {peer}, which is itself or not a rank")]
    BadPeer { at: Box<At>, peer: usize },
    #[error("{at}: moves nothing")]
    Empty { at: Box<At> },
    #[error("{at}: moves more than a chunk ({chunk} elements)")]
    Oversized { at: Box<At>, chunk: usize },
    #[error("{at}: {slice} is outside the {buffer} buffer of {len} elements")]
    OutOfRange { at: Box<At>, slice: Slice, buffer: Buffer, len: usize },
    #[error("{at}: names buffer set {set}, which the rank does not have")]
    NoBuffer { at: Box<At>, set: usize },
    #[error("rank {rank}: the {end} end of the connection {from} -> {to} on channel {channel} belongs to lanes {first} and {second}")]
    SharedConnection { rank: usize, end: &'static str, from: usize, to: usize, channel: usize, first: usize, second: usize },
    #[error("connection {from} -> {to} on channel {channel}: message {index} is sent with {sent:?} elements but received as {received:?}")]
    Unmatched { from: usize, to: usize, channel: usize, index: usize, sent: Option<usize>, received: Option<usize> },
    #[error("{at}: received {got} elements")]
    MessageSize { at: Box<At>, got: usize },
    #[error("{at}: reads {slice}, which nothing wrote")]
    Uninitialized { at: Box<At>, slice: Slice },
    #[error("{at}: its local and destination slices overlap without being the same memory")]
    PartialOverlap { at: Box<At> },
    #[error("{at}: touches memory that rank {rank} lane {other_lane} step {other_index} also touched, with nothing ordering the two (a data race)")]
    Race { at: Box<At>, rank: usize, other_lane: usize, other_index: usize },
    #[error("deadlock with {slots} FIFO slot(s) per connection; stuck:{}", list(stuck))]
    Deadlock { slots: usize, stuck: Vec<Stuck> },
    #[error("{count} message(s) from rank {from} to rank {to} on channel {channel} were never received")]
    Unreceived { from: usize, to: usize, channel: usize, count: usize },
}

fn list(stuck: &[Stuck]) -> String {
    stuck.iter().map(|s| format!("\n  {} — waits for {}", s.at, s.waiting_for)).collect()
}

/// Rejects a wrong schedule (see the module docs), simulating with `slots` FIFO slots per
/// connection, with separate buffers and, where the collective has one, in place.
pub fn validate(schedule: &Schedule, slots: usize) -> Result<(), ScheduleError> {
    let shape = &schedule.shape;
    if schedule.ranks.len() != shape.nranks {
        return Err(ScheduleError::RankCount { planned: schedule.ranks.len(), nranks: shape.nranks });
    }
    let program = Program::from_schedule(schedule);
    check_connections(&program, shape.nranks, shape.chunk)?;
    for in_place in [false, true] {
        if in_place && !shape.collective.has_in_place() {
            continue;
        }
        let memory = (0..shape.nranks).map(|r| Memory::for_collective(shape, r, in_place, vec![(); shape.buffer_counts(r).0])).collect::<Result<_, _>>()?;
        simulate::run(&program, memory, &|_: &(), _: &()| (), &Options { slots, in_place, check_races: true, grouped_receives: 1 })?;
    }
    Ok(())
}

/// As [`validate`], for every rank's plan of one group of point-to-point transfers.
pub fn validate_point_to_point(plans: &[PointToPointPlan], transfers: &[Vec<Transfer>], chunk: usize, slots: usize) -> Result<(), ScheduleError> {
    let program = Program::from_point_to_point(plans);
    check_connections(&program, plans.len(), chunk)?;
    let sent = |t: &Transfer| if t.direction == Direction::Send { t.count } else { 0 };
    let inputs: Vec<Vec<Vec<()>>> = transfers.iter().map(|ts| ts.iter().map(|t| vec![(); sent(t)]).collect()).collect();
    let memory = Memory::for_point_to_point(transfers, inputs)?;
    simulate::run(&program, memory, &|_: &(), _: &()| (), &Options { slots, in_place: false, check_races: true, grouped_receives: 1 })?;
    Ok(())
}

/// Static checks: peers, message sizes, one lane per connection end, and matching message
/// sequences on every connection.
fn check_connections(program: &Program, nranks: usize, chunk: usize) -> Result<(), ScheduleError> {
    type Key = (usize, usize, usize);
    let mut sizes: BTreeMap<(Key, bool), Vec<usize>> = BTreeMap::new();
    let mut owner: BTreeMap<(Key, bool), usize> = BTreeMap::new();
    for (rank, lanes) in program.ranks.iter().enumerate() {
        for (lane, l) in lanes.iter().enumerate() {
            for (index, &(_, step)) in l.steps.iter().enumerate() {
                let at = || Box::new(At { rank, lane, role: l.role, index, step });
                if step.count() == 0 {
                    return Err(ScheduleError::Empty { at: at() });
                }
                let ends = step.sends().map(|l| (l, true)).into_iter().chain(step.receives().map(|l| (l, false)));
                for (Link { peer, channel }, sending) in ends {
                    if peer >= nranks || peer == rank {
                        return Err(ScheduleError::BadPeer { at: at(), peer });
                    }
                    if step.count() > chunk {
                        return Err(ScheduleError::Oversized { at: at(), chunk });
                    }
                    let key = if sending { (rank, peer, channel) } else { (peer, rank, channel) };
                    let first = *owner.entry((key, sending)).or_insert(lane);
                    if first != lane {
                        let end = if sending { "sending" } else { "receiving" };
                        return Err(ScheduleError::SharedConnection { rank, end, from: key.0, to: key.1, channel, first, second: lane });
                    }
                    sizes.entry((key, sending)).or_default().push(step.count());
                }
            }
        }
    }
    let none = Vec::new();
    for (&(key, sending), list) in &sizes {
        let other = sizes.get(&(key, !sending)).unwrap_or(&none);
        let (sent, received) = if sending { (list, other) } else { (other, list) };
        if let Some(index) = (0..sent.len().max(received.len())).find(|&i| sent.get(i) != received.get(i)) {
            let (from, to, channel) = key;
            return Err(ScheduleError::Unmatched { from, to, channel, index, sent: sent.get(index).copied(), received: received.get(index).copied() });
        }
    }
    Ok(())
}
