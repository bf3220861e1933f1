//! Every algorithm × collective, for 1..=16 ranks, many counts, roots, chunkings and
//! channel counts, in and out of place: validated, simulated, and compared with results
//! computed directly from the inputs (not from any schedule).

use super::*;

fn input(rank: usize, len: usize) -> Vec<i64> {
    // Distinct per rank and element: a misrouted or double-counted chunk changes the sum.
    (0..len).map(|i| (rank as i64 + 1) * 1_000_003 + i as i64 * 7 + 1).collect()
}

/// The expected recv buffer of every rank, computed from the inputs alone.
fn expected(shape: &Shape, inputs: &[Vec<i64>]) -> Vec<Vec<i64>> {
    let (n, count, root) = (shape.nranks, shape.count, shape.root);
    let sum = |f: &dyn Fn(usize) -> i64| (0..n).map(f).sum::<i64>();
    (0..n)
        .map(|r| match shape.collective {
            Collective::AllReduce => (0..count).map(|i| sum(&|q| inputs[q][i])).collect(),
            Collective::Broadcast => inputs[root].clone(),
            Collective::Reduce if r == root => (0..count).map(|i| sum(&|q| inputs[q][i])).collect(),
            Collective::Reduce => vec![],
            Collective::AllGather => (0..n * count).map(|j| inputs[j / count.max(1)][j % count.max(1)]).collect(),
            Collective::ReduceScatter => (0..count).map(|i| sum(&|q| inputs[q][r * count + i])).collect(),
            Collective::AllToAll => (0..n * count).map(|j| inputs[j / count.max(1)][r * count + j % count.max(1)]).collect(),
            Collective::Gather if r == root => (0..n * count).map(|j| inputs[j / count.max(1)][j % count.max(1)]).collect(),
            Collective::Gather => vec![],
            Collective::Scatter => (0..count).map(|i| inputs[root][r * count + i]).collect(),
        })
        .collect()
}

fn check(shape: Shape, algorithm: Algorithm) {
    let schedule = plan(shape, algorithm).unwrap();
    validate(&schedule, 2).unwrap_or_else(|e| panic!("{shape:?} {algorithm:?}: {e}\n{schedule}"));
    let inputs: Vec<Vec<i64>> = (0..shape.nranks)
        .map(|r| input(r, shape.collective.buffer_counts(shape.count, shape.nranks, r, shape.root).0))
        .collect();
    let want = expected(&shape, &inputs);
    for in_place in [false, true] {
        let got = simulate(&schedule, &inputs, in_place, 2).unwrap_or_else(|e| panic!("{shape:?} {algorithm:?} in_place={in_place}: {e}"));
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            let g: Vec<i64> = g.iter().map(|x| x.unwrap_or_else(|| panic!("{shape:?} in_place={in_place}: rank {r} has unwritten output"))).collect();
            assert_eq!(&g, w, "{shape:?} {algorithm:?} in_place={in_place} rank {r}");
        }
    }
}

fn algorithms(c: Collective) -> Vec<Algorithm> {
    match c {
        Collective::AllToAll | Collective::Gather | Collective::Scatter => vec![Algorithm::Ring, Algorithm::Direct],
        _ => vec![Algorithm::Ring],
    }
}

#[test]
fn every_collective_for_1_to_16_ranks() {
    for nranks in 1usize..=16 {
        for collective in Collective::ALL {
            for count in [0, 1, 7, nranks.saturating_sub(1), nranks + 1, 1000] {
                let roots = if collective.rooted() { vec![0, nranks / 2, nranks - 1] } else { vec![0] };
                for root in roots {
                    for (chunk, channels) in [(5, 1), (64, 3), (1 << 20, 2)] {
                        for algorithm in algorithms(collective) {
                            check(Shape { collective, count, nranks, root, chunk, channels }, algorithm);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn large_odd_counts() {
    for nranks in [2, 3, 4, 8] {
        for collective in Collective::ALL {
            check(Shape { collective, count: 4099, nranks, root: nranks - 1, chunk: 256, channels: 2 }, algorithms(collective)[0]);
        }
    }
}

/// Ring steps that receive and send at once hold at most one extra message per rank, so two
/// slots per connection always leave room; with one slot a full ring can jam, and the
/// validator must say so. The executors' FIFOs have NSTEPS (8) slots.
#[test]
fn two_slots_suffice_and_one_can_jam() {
    for collective in Collective::ALL {
        let shape = Shape { collective, count: 100, nranks: 5, root: 2, chunk: 3, channels: 2 };
        validate(&plan(shape, algorithms(collective)[0]).unwrap(), 2).unwrap();
    }
    let shape = Shape { collective: Collective::AllReduce, count: 100, nranks: 5, root: 0, chunk: 3, channels: 1 };
    assert!(validate(&plan(shape, Algorithm::Ring).unwrap(), 1).unwrap_err().contains("deadlock"));
    let shape = Shape { collective: Collective::AllToAll, count: 100, nranks: 5, root: 0, chunk: 3, channels: 1 };
    validate(&plan(shape, Algorithm::Direct).unwrap(), 1).unwrap();
}

#[test]
fn validator_rejects_broken_schedules() {
    let shape = Shape { collective: Collective::AllReduce, count: 12, nranks: 3, root: 0, chunk: 4, channels: 1 };
    let good = plan(shape, Algorithm::Ring).unwrap();

    let mut unmatched = good.clone();
    unmatched.ranks[1][0].remove(0);
    assert!(validate(&unmatched, 2).is_err());

    let mut out_of_range = good.clone();
    out_of_range.ranks[0][0].push(Step::Copy { src: Slice::send(10, 5), dst: Slice::recv(0, 5) });
    assert!(validate(&out_of_range, 2).unwrap_err().contains("outside"));

    // Two ranks that each receive before sending: a wait cycle.
    let cycle = Schedule {
        shape: Shape { collective: Collective::AllReduce, count: 1, nranks: 2, root: 0, chunk: 1, channels: 1 },
        algorithm: Algorithm::Ring,
        ranks: (0..2)
            .map(|r| {
                let peer = Link { peer: 1 - r, channel: 0 };
                vec![vec![Step::Recv { from: peer, dst: Slice::recv(0, 1) }, Step::Send { to: peer, src: Slice::send(0, 1) }]]
            })
            .collect(),
    };
    assert!(validate(&cycle, 4).unwrap_err().contains("deadlock"));

    let mut shared = good.clone();
    let stolen = shared.ranks[0][0].remove(0);
    shared.ranks[0].push(vec![stolen]);
    assert!(validate(&shared, 2).unwrap_err().contains("two lanes"));
}

#[test]
fn unsupported_choices_are_errors() {
    let shape = Shape { collective: Collective::AllReduce, count: 8, nranks: 2, root: 0, chunk: 4, channels: 1 };
    assert!(plan(shape, Algorithm::Direct).is_err());
    assert!(plan(Shape { root: 2, ..shape }, Algorithm::Ring).is_err());
}

#[test]
fn schedules_print() {
    let shape = Shape { collective: Collective::Broadcast, count: 4, nranks: 2, root: 0, chunk: 4, channels: 1 };
    let text = plan(shape, Algorithm::Ring).unwrap().to_string();
    assert!(text.contains("ring broadcast") && text.contains("Send"), "{text}");
}
