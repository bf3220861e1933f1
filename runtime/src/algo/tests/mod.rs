//! Simulator tests: every algorithm × collective for 1..=16 ranks, many counts, roots,
//! chunkings and channel counts, with separate and with aliased buffers, compared with
//! results computed directly from the inputs (never from a schedule); plus the validator,
//! the trees, point-to-point groups and printing.

mod in_place;
mod matrix;
mod p2p;
mod structure;
mod validator;

use super::*;

/// Rank r's element i: a hash of (r, i), so that values are distinct, a misrouted chunk
/// changes a sum, and the largest value of an index comes from different ranks at different
/// indices (so max misses a missing contribution nowhere). Values keep clear of overflow.
fn value(rank: usize, index: usize) -> i64 {
    let mut x = (rank as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (index as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f);
    x ^= x >> 29;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 32;
    (x >> 24) as i64
}

fn inputs<T>(shape: &Shape, element: impl Fn(usize, usize) -> T) -> Vec<Vec<T>> {
    (0..shape.nranks).map(|r| (0..shape.buffer_counts(r).0).map(|i| element(r, i)).collect()).collect()
}

/// Every rank's expected recv buffer, computed from the inputs alone with `reduce` folding
/// the ranks' values of one element in rank order.
fn expected<T: Clone>(shape: &Shape, inputs: &[Vec<T>], reduce: &dyn Fn(&T, &T) -> T) -> Vec<Vec<T>> {
    let (n, count, root) = (shape.nranks, shape.count, shape.root);
    let reduced =
        |offset: usize| -> Vec<T> { (0..count).map(|i| (1..n).fold(inputs[0][offset + i].clone(), |acc, q| reduce(&acc, &inputs[q][offset + i]))).collect() };
    let blocks = |from: &dyn Fn(usize) -> Vec<T>| -> Vec<T> { (0..n).flat_map(from).collect() };
    (0..n)
        .map(|r| match shape.collective {
            Collective::AllReduce => reduced(0),
            Collective::Broadcast => inputs[root].clone(),
            Collective::Reduce if r == root => reduced(0),
            Collective::ReduceScatter => reduced(r * count),
            Collective::AllGather => blocks(&|q| inputs[q].clone()),
            Collective::AllToAll => blocks(&|q| inputs[q][r * count..(r + 1) * count].to_vec()),
            Collective::Gather if r == root => blocks(&|q| inputs[q].clone()),
            Collective::Scatter => inputs[root][r * count..(r + 1) * count].to_vec(),
            Collective::Reduce | Collective::Gather => vec![],
        })
        .collect()
}

/// Which placements a collective is checked in.
fn placements(collective: Collective) -> &'static [bool] {
    if collective.has_in_place() {
        &[false, true]
    } else {
        &[false]
    }
}

type Reduction = dyn Fn(&i64, &i64) -> i64;

/// Plans, validates and simulates `shape` (sum and max, each placement) against the
/// reference; panics with the schedule printed when anything differs.
fn check(shape: Shape, algorithm: Algorithm, slots: usize) {
    let schedule = plan(shape, algorithm).unwrap_or_else(|e| panic!("{shape}: {e}"));
    let small = |text: String| if text.len() > 20_000 { format!("{}...", &text[..20_000]) } else { text };
    validate(&schedule, slots).unwrap_or_else(|e| panic!("{algorithm:?} {shape}: {e}\n{}", small(schedule.to_string())));
    let data = inputs(&shape, value);
    let sum = |a: &i64, b: &i64| a.wrapping_add(*b);
    let max = |a: &i64, b: &i64| *a.max(b);
    let ops: [(&str, &Reduction); 2] = [("sum", &sum), ("max", &max)];
    for (name, op) in ops {
        let want = expected(&shape, &data, op);
        for &in_place in placements(shape.collective) {
            let options = Options { slots, in_place, check_races: true, grouped_receives: 1 };
            let got = simulate(&schedule, &data, op, &options).unwrap_or_else(|e| panic!("{algorithm:?} {shape} {name} in_place={in_place}: {e}"));
            compare(&got, &want, &format!("{algorithm:?} {shape} {name} in_place={in_place}"), &schedule);
        }
    }
}

fn compare<T: PartialEq + std::fmt::Debug>(got: &[Vec<Option<T>>], want: &[Vec<T>], what: &str, schedule: &Schedule) {
    for (rank, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: rank {rank} output length");
        if let Some(i) = (0..g.len()).find(|&i| g[i].as_ref() != Some(&w[i])) {
            let text = schedule.to_string();
            let text = if text.len() > 20_000 { &text[..20_000] } else { &text };
            panic!("{what}: rank {rank} element {i} is {:?}, expected {:?}\n{text}", g[i], w[i]);
        }
    }
}
