//! Checks a schedule without running data: slices in range, every connection used by one
//! lane on each side with matching message sizes in order, and no wait cycle at a given
//! FIFO depth.

use std::collections::HashMap;

use super::{simulate, Element, Schedule};

/// A token standing for any element: validation moves messages, not values.
#[derive(Clone, Debug, PartialEq)]
struct Token;

impl Element for Token {
    fn combine(&self, _: &Self) -> Self {
        Token
    }
}

/// Rejects schedules with out-of-range slices, unmatched or mis-sized messages, connections
/// shared by several lanes of a rank, or wait cycles with `slots` FIFO slots per connection.
pub fn validate(schedule: &Schedule, slots: usize) -> Result<(), String> {
    let shape = &schedule.shape;
    if schedule.ranks.len() != shape.nranks {
        return Err(format!("{} ranks planned for {}", schedule.ranks.len(), shape.nranks));
    }
    // Message sizes per connection, in order, from each side; and the lane that owns it.
    let mut sent: HashMap<(usize, usize, usize), Vec<usize>> = HashMap::new();
    let mut received: HashMap<(usize, usize, usize), Vec<usize>> = HashMap::new();
    let mut owner: HashMap<(usize, usize, usize, bool), usize> = HashMap::new();
    for (rank, lanes) in schedule.ranks.iter().enumerate() {
        for (lane, steps) in lanes.iter().enumerate() {
            for step in steps {
                if step.count() > shape.chunk && (step.sends().is_some() || step.receives().is_some()) {
                    return Err(format!("rank {rank} lane {lane}: {step:?} moves more than a chunk ({})", shape.chunk));
                }
                for (link, outgoing) in step.sends().map(|l| (l, true)).into_iter().chain(step.receives().map(|l| (l, false))) {
                    if link.peer >= shape.nranks || link.peer == rank {
                        return Err(format!("rank {rank} lane {lane}: {step:?} names peer {}", link.peer));
                    }
                    let key = if outgoing { (rank, link.peer, link.channel) } else { (link.peer, rank, link.channel) };
                    if *owner.entry((key.0, key.1, key.2, outgoing)).or_insert(lane) != lane {
                        return Err(format!("rank {rank}: connection {key:?} is used by two lanes"));
                    }
                    let list = if outgoing { &mut sent } else { &mut received };
                    list.entry(key).or_default().push(step.count());
                }
            }
        }
    }
    for (key, sizes) in &sent {
        let got = received.get(key).cloned().unwrap_or_default();
        if &got != sizes {
            return Err(format!("connection {key:?} (from, to, channel): sends {sizes:?} but receives {got:?}"));
        }
    }
    if let Some(key) = received.keys().find(|k| !sent.contains_key(k)) {
        return Err(format!("connection {key:?} receives messages nobody sends"));
    }
    let inputs: Vec<Vec<Token>> = (0..shape.nranks)
        .map(|r| vec![Token; shape.collective.buffer_counts(shape.count, shape.nranks, r, shape.root).0])
        .collect();
    simulate(schedule, &inputs, false, slots).map(drop)
}
