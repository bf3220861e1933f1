//! Runs every rank's lanes together on in-memory buffers: the reference check of every
//! schedule, with FIFOs of bounded depth so that a wait cycle shows up as a deadlock.

use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;

use super::{Buffer, Schedule, Slice, Step};

/// An element the simulator can reduce.
pub trait Element: Clone + Debug + PartialEq {
    fn combine(&self, other: &Self) -> Self;
}

impl Element for i64 {
    fn combine(&self, other: &Self) -> Self {
        self.wrapping_add(*other)
    }
}

/// One rank's memory: one arena holding both buffers (overlapping when in place).
struct Memory<T> {
    arena: Vec<Option<T>>,
    send: (usize, usize),
    recv: (usize, usize),
}

impl<T: Element> Memory<T> {
    fn new(schedule: &Schedule, rank: usize, input: &[T], in_place: bool) -> Result<Memory<T>, String> {
        let shape = &schedule.shape;
        let (send_len, recv_len) = shape.collective.buffer_counts(shape.count, shape.nranks, rank, shape.root);
        if input.len() != send_len {
            return Err(format!("rank {rank}: input has {} elements, the send buffer {send_len}", input.len()));
        }
        let c = shape.collective;
        let (arena_len, send_base, recv_base) = if !in_place {
            (send_len + recv_len, 0, send_len)
        } else if let Some(off) = c.in_place_recv_offset(shape.count, rank, shape.root) {
            (send_len, 0, off)
        } else if let Some(off) = c.in_place_send_offset(shape.count, rank, shape.root) {
            (recv_len, off, 0)
        } else {
            (send_len.max(recv_len), 0, 0)
        };
        let mut arena = vec![None; arena_len];
        for (i, x) in input.iter().enumerate() {
            arena[send_base + i] = Some(x.clone());
        }
        Ok(Memory { arena, send: (send_base, send_len), recv: (recv_base, recv_len) })
    }

    fn range(&self, s: &Slice) -> Result<std::ops::Range<usize>, String> {
        let (base, len) = match s.buffer {
            Buffer::Send => self.send,
            Buffer::Recv => self.recv,
        };
        if s.offset + s.count > len {
            return Err(format!("{s:?} is outside the {:?} buffer of {len} elements", s.buffer));
        }
        Ok(base + s.offset..base + s.offset + s.count)
    }

    fn read(&self, s: &Slice) -> Result<Vec<T>, String> {
        self.arena[self.range(s)?].iter().cloned().collect::<Option<Vec<T>>>().ok_or_else(|| format!("reads uninitialized elements in {s:?}"))
    }

    fn write(&mut self, s: &Slice, data: &[T]) -> Result<(), String> {
        let range = self.range(s)?;
        for (slot, x) in self.arena[range].iter_mut().zip(data) {
            *slot = Some(x.clone());
        }
        Ok(())
    }
}

/// Runs `schedule` with `inputs[r]` as rank r's send buffer and returns every rank's recv
/// buffer (`None` for elements nothing wrote). `in_place` overlaps the buffers by NCCL's
/// conventions. `slots` is the FIFO depth per connection.
pub fn simulate<T: Element>(schedule: &Schedule, inputs: &[Vec<T>], in_place: bool, slots: usize) -> Result<Vec<Vec<Option<T>>>, String> {
    let n = schedule.shape.nranks;
    let mut memory: Vec<Memory<T>> = (0..n).map(|r| Memory::new(schedule, r, &inputs[r], in_place)).collect::<Result<_, _>>()?;
    let mut fifos: HashMap<(usize, usize, usize), VecDeque<Vec<T>>> = HashMap::new();
    let mut cursor: Vec<Vec<usize>> = schedule.ranks.iter().map(|lanes| vec![0; lanes.len()]).collect();
    loop {
        let mut progressed = false;
        let mut unfinished = false;
        for rank in 0..n {
            for (lane, steps) in schedule.ranks[rank].iter().enumerate() {
                while let Some(step) = steps.get(cursor[rank][lane]) {
                    let context = |e: String| format!("rank {rank} lane {lane} step {} {step:?}: {e}", cursor[rank][lane]);
                    if !ready(step, rank, &fifos, slots) {
                        unfinished = true;
                        break;
                    }
                    execute(step, rank, &mut memory[rank], &mut fifos).map_err(context)?;
                    cursor[rank][lane] += 1;
                    progressed = true;
                }
            }
        }
        if !unfinished {
            break;
        }
        if !progressed {
            let stuck: Vec<String> = (0..n)
                .flat_map(|r| {
                    let cursor = &cursor;
                    schedule.ranks[r].iter().enumerate().filter_map(move |(l, steps)| steps.get(cursor[r][l]).map(|s| format!("rank {r} lane {l}: {s:?}")))
                })
                .collect();
            return Err(format!("deadlock with {slots} slots per connection; stuck:\n  {}", stuck.join("\n  ")));
        }
    }
    if let Some(((from, to, channel), left)) = fifos.iter().find(|(_, q)| !q.is_empty()) {
        return Err(format!("{} message(s) from rank {from} to rank {to} on channel {channel} never received", left.len()));
    }
    Ok(memory.into_iter().map(|m| m.arena[m.recv.0..m.recv.0 + m.recv.1].to_vec()).collect())
}

fn ready<T>(step: &Step, rank: usize, fifos: &HashMap<(usize, usize, usize), VecDeque<Vec<T>>>, slots: usize) -> bool {
    let incoming = step.receives().is_none_or(|l| fifos.get(&(l.peer, rank, l.channel)).is_some_and(|q| !q.is_empty()));
    let outgoing = step.sends().is_none_or(|l| fifos.get(&(rank, l.peer, l.channel)).is_none_or(|q| q.len() < slots));
    incoming && outgoing
}

fn execute<T: Element>(step: &Step, rank: usize, mem: &mut Memory<T>, fifos: &mut HashMap<(usize, usize, usize), VecDeque<Vec<T>>>) -> Result<(), String> {
    let count = step.count();
    let received = match step.receives() {
        Some(l) => {
            let message = fifos.get_mut(&(l.peer, rank, l.channel)).and_then(VecDeque::pop_front).ok_or("no message")?;
            if message.len() != count {
                return Err(format!("received {} elements, expected {count}", message.len()));
            }
            Some(message)
        }
        None => None,
    };
    let reduce = |local: &Slice, mem: &Memory<T>| -> Result<Vec<T>, String> {
        let local = mem.read(local)?;
        Ok(received.as_ref().expect("a receiving step").iter().zip(&local).map(|(a, b)| a.combine(b)).collect())
    };
    let outgoing = match *step {
        Step::Send { src, .. } => Some(mem.read(&src)?),
        Step::Recv { dst, .. } => {
            mem.write(&dst, received.as_ref().expect("receives"))?;
            None
        }
        Step::RecvReduceSend { local, .. } => Some(reduce(&local, mem)?),
        Step::RecvReduceCopy { local, dst, .. } => {
            let out = reduce(&local, mem)?;
            mem.write(&dst, &out)?;
            None
        }
        Step::RecvReduceCopySend { local, dst, .. } => {
            let out = reduce(&local, mem)?;
            mem.write(&dst, &out)?;
            Some(out)
        }
        Step::RecvCopySend { dst, .. } => {
            let data = received.clone().expect("receives");
            mem.write(&dst, &data)?;
            Some(data)
        }
        Step::Copy { src, dst } => {
            let data = mem.read(&src)?;
            mem.write(&dst, &data)?;
            None
        }
    };
    if let (Some(l), Some(data)) = (step.sends(), outgoing) {
        fifos.entry((rank, l.peer, l.channel)).or_default().push_back(data);
    }
    Ok(())
}
