//! Runs every rank's lanes together on in-memory buffers: the reference check of every
//! schedule. Connections are FIFOs of bounded depth, so a wait cycle shows up as a
//! deadlock; each rank's buffers live in one arena, laid out as the in-place conventions
//! say when asked, so aliasing mistakes change results; and vector clocks carried by the
//! messages order every pair of memory accesses made by different lanes of a rank, so an
//! access that only works because of the order the simulator happened to pick is reported
//! as a race instead of passing by luck.

use std::collections::{HashMap, VecDeque};
use std::ops::Range;

use super::validate::{At, ScheduleError, Stuck};
use super::{Buffer, Link, PointToPointPlan, Role, Schedule, SelfCopy, Shape, Slice, Step, Transfer};

/// How to simulate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// FIFO slots per connection; at least 1.
    pub slots: usize,
    /// Overlap the send and recv buffers by NCCL's in-place conventions.
    pub in_place: bool,
    /// Track vector clocks and reject unordered conflicting accesses by two lanes of a rank.
    pub check_races: bool,
    /// Receives a connection completes only together, as a network proxy that posts them
    /// as one (the Net's `max_recvs`, for plans whose sends never wait on their receiver):
    /// a message can be taken once the rest of its group — aligned runs of this many on the
    /// connection, the last one shorter — has been sent too. 1: each on its own.
    pub grouped_receives: usize,
}

impl Default for Options {
    /// NCCL's 8 slots (`NCCL_STEPS`), separate buffers, races checked.
    fn default() -> Options {
        Options { slots: 8, in_place: false, check_races: true, grouped_receives: 1 }
    }
}

/// Runs `schedule` with `inputs[r]` as rank r's send buffer and `combine(received, local)`
/// as the reduction, and returns every rank's recv buffer (`None` where nothing wrote).
pub fn simulate<T: Clone, F: Fn(&T, &T) -> T>(
    schedule: &Schedule,
    inputs: &[Vec<T>],
    combine: F,
    options: &Options,
) -> Result<Vec<Vec<Option<T>>>, ScheduleError> {
    let shape = &schedule.shape;
    if schedule.ranks.len() != shape.nranks {
        return Err(ScheduleError::RankCount { planned: schedule.ranks.len(), nranks: shape.nranks });
    }
    if inputs.len() != shape.nranks {
        return Err(ScheduleError::Inputs { got: inputs.len(), nranks: shape.nranks });
    }
    if options.in_place && !shape.collective.has_in_place() {
        return Err(ScheduleError::NoInPlace { collective: shape.collective });
    }
    let memory = (0..shape.nranks).map(|r| Memory::for_collective(shape, r, options.in_place, inputs[r].clone())).collect::<Result<_, _>>()?;
    let memory = run(&Program::from_schedule(schedule), memory, &combine, options)?;
    Ok(memory.into_iter().map(|m| m.output(0)).collect())
}

/// Runs every rank's plan of one group of transfers: `inputs[r][t]` is the data of rank r's
/// transfer t if it is a send (empty for a receive). Returns, per rank and transfer, what a
/// receive got (empty for a send).
pub fn simulate_point_to_point<T: Clone>(
    plans: &[PointToPointPlan],
    transfers: &[Vec<Transfer>],
    inputs: &[Vec<Vec<T>>],
    options: &Options,
) -> Result<Vec<Vec<Vec<Option<T>>>>, ScheduleError> {
    if inputs.len() != plans.len() {
        return Err(ScheduleError::Inputs { got: inputs.len(), nranks: plans.len() });
    }
    let memory = Memory::for_point_to_point(transfers, inputs.to_vec())?;
    let no_reduction = |_: &T, _: &T| unreachable!("point-to-point steps do not reduce");
    let memory = run(&Program::from_point_to_point(plans), memory, &no_reduction, &Options { in_place: false, ..*options })?;
    Ok(memory.into_iter().map(|m| (0..m.windows.len()).map(|t| m.output(t)).collect()).collect())
}

/// Lanes of every rank, each step tagged with the buffer set it names (always 0 for a
/// collective, the transfer for point-to-point).
pub(super) struct Program {
    pub ranks: Vec<Vec<ProgramLane>>,
    pub self_copies: Vec<Vec<SelfCopy>>,
}

pub(super) struct ProgramLane {
    pub role: Role,
    pub steps: Vec<(usize, Step)>,
}

impl Program {
    pub fn from_schedule(schedule: &Schedule) -> Program {
        let lane = |l: &super::Lane| ProgramLane { role: l.role, steps: l.steps.iter().map(|&s| (0, s)).collect() };
        Program { ranks: schedule.ranks.iter().map(|lanes| lanes.iter().map(lane).collect()).collect(), self_copies: vec![Vec::new(); schedule.ranks.len()] }
    }

    pub fn from_point_to_point(plans: &[PointToPointPlan]) -> Program {
        let lane = |l: &super::TransferLane| ProgramLane { role: l.role, steps: l.steps.clone() };
        Program {
            ranks: plans.iter().map(|p| p.lanes.iter().map(lane).collect()).collect(),
            self_copies: plans.iter().map(|p| p.self_copies.clone()).collect(),
        }
    }
}

/// Where one buffer set's `Send` and `Recv` buffers lie in the arena: (start, length).
#[derive(Clone, Copy, Debug)]
struct Window {
    send: (usize, usize),
    recv: (usize, usize),
}

/// A lane's step number: lane `lane` (global) had run `time` steps when it made the access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Epoch {
    lane: u32,
    time: u32,
}

/// One rank's memory: an arena of elements, with per-element access history for races.
pub(super) struct Memory<T> {
    values: Vec<Option<T>>,
    windows: Vec<Window>,
    writes: Vec<Option<Epoch>>,
    reads: Vec<Vec<Epoch>>,
}

/// What went wrong with a memory access; `run` adds where.
enum Fault {
    OutOfRange { buffer: Buffer, len: usize },
    NoBuffer(usize),
    Uninitialized,
    Race(Epoch),
}

impl<T: Clone> Memory<T> {
    /// The buffers of `rank` for `shape`, overlapping by NCCL's in-place convention if
    /// `in_place`, with `input` in `Send`.
    pub fn for_collective(shape: &Shape, rank: usize, in_place: bool, input: Vec<T>) -> Result<Memory<T>, ScheduleError> {
        let (send_len, recv_len) = shape.buffer_counts(rank);
        if input.len() != send_len {
            return Err(ScheduleError::Input { rank, got: input.len(), expected: send_len });
        }
        let c = shape.collective;
        let (arena, send, recv) = if !in_place {
            (send_len + recv_len, 0, send_len)
        } else if let Some(offset) = c.in_place_recv_offset(shape.count, rank, shape.root) {
            (send_len.max(offset + recv_len), 0, offset)
        } else if let Some(offset) = c.in_place_send_offset(shape.count, rank, shape.root) {
            (recv_len.max(offset + send_len), offset, 0)
        } else {
            (send_len.max(recv_len), 0, 0)
        };
        let mut values = vec![None; arena];
        for (slot, x) in values[send..send + send_len].iter_mut().zip(input) {
            *slot = Some(x);
        }
        Ok(Memory { values, windows: vec![Window { send: (send, send_len), recv: (recv, recv_len) }], writes: Vec::new(), reads: Vec::new() })
    }

    /// Every rank's buffers for a group of transfers: one separate buffer per transfer.
    pub fn for_point_to_point(transfers: &[Vec<Transfer>], inputs: Vec<Vec<Vec<T>>>) -> Result<Vec<Memory<T>>, ScheduleError> {
        if inputs.len() != transfers.len() {
            return Err(ScheduleError::Inputs { got: inputs.len(), nranks: transfers.len() });
        }
        let mut memories = Vec::new();
        for (rank, (transfers, inputs)) in transfers.iter().zip(inputs).enumerate() {
            let mut memory = Memory { values: Vec::new(), windows: Vec::new(), writes: Vec::new(), reads: Vec::new() };
            for (t, input) in transfers.iter().zip(inputs.into_iter().chain(std::iter::repeat(Vec::new()))) {
                let start = memory.values.len();
                let sending = t.direction == super::Direction::Send;
                let expected = if sending { t.count } else { 0 };
                if input.len() != expected {
                    return Err(ScheduleError::Input { rank, got: input.len(), expected });
                }
                memory.values.extend(input.into_iter().map(Some));
                if !sending {
                    memory.values.resize(start + t.count, None);
                }
                let (send, recv) = if sending { ((start, t.count), (start, 0)) } else { ((start, 0), (start, t.count)) };
                memory.windows.push(Window { send, recv });
            }
            memories.push(memory);
        }
        Ok(memories)
    }

    pub(super) fn output(&self, set: usize) -> Vec<Option<T>> {
        let (start, len) = self.windows[set].recv;
        self.values[start..start + len].to_vec()
    }

    fn track_races(&mut self) {
        self.writes = vec![None; self.values.len()];
        self.reads = vec![Vec::new(); self.values.len()];
    }

    fn range(&self, set: usize, s: &Slice) -> Result<Range<usize>, Fault> {
        let window = self.windows.get(set).ok_or(Fault::NoBuffer(set))?;
        let (start, len) = match s.buffer {
            Buffer::Send => window.send,
            Buffer::Recv => window.recv,
        };
        if s.end() > len {
            return Err(Fault::OutOfRange { buffer: s.buffer, len });
        }
        Ok(start + s.offset..start + s.end())
    }

    /// Reads `range`; `who` is the reading lane's epoch and vector clock when tracking races.
    fn read(&mut self, range: Range<usize>, who: Option<(Epoch, &[u32])>) -> Result<Vec<T>, Fault> {
        if let Some((me, clock)) = who {
            for i in range.clone() {
                check(self.writes[i], me, clock)?;
                let reads = &mut self.reads[i];
                match reads.iter_mut().find(|e| e.lane == me.lane) {
                    Some(e) => *e = me,
                    None => reads.push(me),
                }
            }
        }
        self.values[range].iter().cloned().collect::<Option<Vec<T>>>().ok_or(Fault::Uninitialized)
    }

    fn write(&mut self, range: Range<usize>, data: Vec<T>, who: Option<(Epoch, &[u32])>) -> Result<(), Fault> {
        if let Some((me, clock)) = who {
            for i in range.clone() {
                check(self.writes[i], me, clock)?;
                for &read in &self.reads[i] {
                    check(Some(read), me, clock)?;
                }
                self.writes[i] = Some(me);
                self.reads[i].clear();
            }
        }
        for (slot, x) in self.values[range].iter_mut().zip(data) {
            *slot = Some(x);
        }
        Ok(())
    }
}

/// An earlier access conflicts with `me` unless the same lane made it or it happened before.
fn check(earlier: Option<Epoch>, me: Epoch, clock: &[u32]) -> Result<(), Fault> {
    match earlier {
        Some(e) if e.lane != me.lane && clock[e.lane as usize] < e.time => Err(Fault::Race(e)),
        _ => Ok(()),
    }
}

struct Message<T> {
    data: Vec<T>,
    /// The sender's vector clock when it sent (empty unless tracking races).
    clock: Vec<u32>,
}

/// The connection (from, to, channel).
type Key = (usize, usize, usize);

struct Engine<'a, T, F> {
    program: &'a Program,
    memory: Vec<Memory<T>>,
    combine: &'a F,
    options: &'a Options,
    fifos: HashMap<Key, VecDeque<Message<T>>>,
    /// Per connection: messages received so far, and in all (receive steps).
    taken: HashMap<Key, usize>,
    expected: HashMap<Key, usize>,
    /// (rank, lane) of every global lane.
    lanes: Vec<(usize, usize)>,
    /// Per global lane: its next step, and its vector clock when tracking races.
    cursor: Vec<usize>,
    clocks: Vec<Vec<u32>>,
}

/// Runs `program` on `memory` to completion, or to the first error.
pub(super) fn run<T: Clone, F: Fn(&T, &T) -> T>(
    program: &Program,
    mut memory: Vec<Memory<T>>,
    combine: &F,
    options: &Options,
) -> Result<Vec<Memory<T>>, ScheduleError> {
    if options.check_races {
        memory.iter_mut().for_each(Memory::track_races);
    }
    if memory.len() != program.ranks.len() {
        return Err(ScheduleError::Inputs { got: memory.len(), nranks: program.ranks.len() });
    }
    for (rank, (m, copies)) in memory.iter_mut().zip(&program.self_copies).enumerate() {
        for &copy in copies {
            let (src, dst) = match (m.windows.get(copy.send), m.windows.get(copy.recv)) {
                (Some(s), Some(r)) if copy.count <= s.send.1 && copy.count <= r.recv.1 => (s.send.0, r.recv.0),
                _ => return Err(ScheduleError::BadSelfCopy { rank, copy }),
            };
            let data = m.values[src..src + copy.count].to_vec();
            m.values[dst..dst + copy.count].clone_from_slice(&data);
        }
    }
    let lanes: Vec<(usize, usize)> = program.ranks.iter().enumerate().flat_map(|(r, ls)| (0..ls.len()).map(move |l| (r, l))).collect();
    let clocks = if options.check_races { vec![vec![0; lanes.len()]; lanes.len()] } else { Vec::new() };
    let cursor = vec![0; lanes.len()];
    let mut expected: HashMap<Key, usize> = HashMap::new();
    for (rank, lanes) in program.ranks.iter().enumerate() {
        for l in lanes.iter().flat_map(|l| &l.steps).filter_map(|(_, s)| s.receives()) {
            *expected.entry((l.peer, rank, l.channel)).or_default() += 1;
        }
    }
    let mut engine = Engine { program, memory, combine, options, fifos: HashMap::new(), taken: HashMap::new(), expected, lanes, cursor, clocks };
    engine.run()?;
    Ok(engine.memory)
}

impl<T: Clone, F: Fn(&T, &T) -> T> Engine<'_, T, F> {
    fn run(&mut self) -> Result<(), ScheduleError> {
        loop {
            let (mut progressed, mut unfinished) = (false, false);
            for g in 0..self.lanes.len() {
                let (rank, lane) = self.lanes[g];
                let steps = &self.program.ranks[rank][lane].steps;
                while let Some(&(set, step)) = steps.get(self.cursor[g]) {
                    if self.blocked(rank, &step).is_some() {
                        unfinished = true;
                        break;
                    }
                    self.execute(g, set, step)?;
                    self.cursor[g] += 1;
                    progressed = true;
                }
            }
            if !unfinished {
                break;
            }
            if !progressed {
                return Err(self.deadlock());
            }
        }
        match self.fifos.iter().filter(|(_, q)| !q.is_empty()).min_by_key(|(k, _)| **k) {
            Some((&(from, to, channel), left)) => Err(ScheduleError::Unreceived { from, to, channel, count: left.len() }),
            None => Ok(()),
        }
    }

    /// What keeps `step` of `rank` from running now, if anything: the link it receives
    /// from with nothing there (`true`), or the link it sends to with no free slot (`false`).
    fn blocked(&self, rank: usize, step: &Step) -> Option<(Link, bool)> {
        if let Some(l) = step.receives() {
            let key = (l.peer, rank, l.channel);
            let waiting = self.fifos.get(&key).map_or(0, VecDeque::len);
            let taken = self.taken.get(&key).copied().unwrap_or(0);
            let group = self.options.grouped_receives.max(1);
            let group_end = (taken - taken % group + group).min(self.expected.get(&key).copied().unwrap_or(0));
            if waiting == 0 || taken + waiting < group_end {
                return Some((l, true));
            }
        }
        match step.sends() {
            Some(l) if self.fifos.get(&(rank, l.peer, l.channel)).is_some_and(|q| q.len() >= self.options.slots) => Some((l, false)),
            _ => None,
        }
    }

    fn at(&self, g: usize, step: Step) -> Box<At> {
        let (rank, lane) = self.lanes[g];
        Box::new(At { rank, lane, role: self.program.ranks[rank][lane].role, index: self.cursor[g], step })
    }

    fn deadlock(&self) -> ScheduleError {
        let stuck = (0..self.lanes.len())
            .filter_map(|g| {
                let (rank, lane) = self.lanes[g];
                let &(_, step) = self.program.ranks[rank][lane].steps.get(self.cursor[g])?;
                let waiting_for = match self.blocked(rank, &step) {
                    Some((l, true)) => format!("a message from rank {} on channel {}", l.peer, l.channel),
                    Some((l, false)) => format!("a free slot to rank {} on channel {}", l.peer, l.channel),
                    None => "nothing (it could run)".into(),
                };
                Some(Stuck { at: *self.at(g, step), waiting_for })
            })
            .collect();
        ScheduleError::Deadlock { slots: self.options.slots, stuck }
    }

    fn fault(&self, g: usize, step: Step, slice: Slice, fault: Fault) -> ScheduleError {
        let at = self.at(g, step);
        match fault {
            Fault::OutOfRange { buffer, len } => ScheduleError::OutOfRange { at, slice, buffer, len },
            Fault::NoBuffer(set) => ScheduleError::NoBuffer { at, set },
            Fault::Uninitialized => ScheduleError::Uninitialized { at, slice },
            Fault::Race(e) => {
                let (rank, other_lane) = self.lanes[e.lane as usize];
                ScheduleError::Race { at, rank, other_lane, other_index: e.time as usize - 1 }
            }
        }
    }

    /// Runs one step that `waiting_for` found ready: receive, read, reduce, write, send.
    fn execute(&mut self, g: usize, set: usize, step: Step) -> Result<(), ScheduleError> {
        let (rank, _) = self.lanes[g];
        let received = self.receive(g, step)?;
        let me = self.options.check_races.then(|| {
            self.clocks[g][g] += 1;
            Epoch { lane: g as u32, time: self.clocks[g][g] }
        });
        let fault = |engine: &Self, slice: Slice, f: Fault| engine.fault(g, step, slice, f);
        let locate = |engine: &Self, slice: Option<Slice>| match slice {
            Some(s) => engine.memory[rank].range(set, &s).map(|range| Some((s, range))).map_err(|f| fault(engine, s, f)),
            None => Ok(None),
        };
        let (read, write) = (locate(self, step.reads())?, locate(self, step.writes())?);
        if let (true, Some((_, r)), Some((_, w))) = (step.reduces(), &read, &write) {
            if r != w && r.start < w.end && w.start < r.end {
                return Err(ScheduleError::PartialOverlap { at: self.at(g, step) });
            }
        }
        let clock: &[u32] = self.clocks.get(g).map_or(&[], Vec::as_slice);
        let who = me.map(|e| (e, clock));
        let local = match read {
            Some((s, range)) => Some(self.memory[rank].read(range, who).map_err(|f| fault(self, s, f))?),
            None => None,
        };
        let result = match (received, local) {
            (Some(r), Some(l)) => r.iter().zip(&l).map(|(a, b)| (self.combine)(a, b)).collect(),
            (Some(data), None) | (None, Some(data)) => data,
            (None, None) => unreachable!("every step receives or reads"),
        };
        let outgoing = step.sends().map(|l| (l, result.clone()));
        if let Some((s, range)) = write {
            self.memory[rank].write(range, result, who).map_err(|f| fault(self, s, f))?;
        }
        if let Some((l, data)) = outgoing {
            let message = Message { data, clock: clock.to_vec() };
            self.fifos.entry((rank, l.peer, l.channel)).or_default().push_back(message);
        }
        Ok(())
    }

    /// Takes the message `step` receives, if any, and joins its sender's clock into ours.
    fn receive(&mut self, g: usize, step: Step) -> Result<Option<Vec<T>>, ScheduleError> {
        let Some(l) = step.receives() else { return Ok(None) };
        let (rank, _) = self.lanes[g];
        let message = self.fifos.get_mut(&(l.peer, rank, l.channel)).and_then(VecDeque::pop_front).expect("blocked() saw a message");
        *self.taken.entry((l.peer, rank, l.channel)).or_default() += 1;
        if message.data.len() != step.count() {
            return Err(ScheduleError::MessageSize { at: self.at(g, step), got: message.data.len() });
        }
        if self.options.check_races {
            self.clocks[g].iter_mut().zip(&message.clock).for_each(|(mine, theirs)| *mine = (*mine).max(*theirs));
        }
        Ok(Some(message.data))
    }
}
