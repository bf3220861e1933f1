//! The full matrix: every collective × algorithm, 1..=16 ranks, counts 0, 1, 7, n-1, n+1,
//! 1000, 4099, three roots, three (chunk, channels) settings, sum and max, separate and
//! aliased buffers. One test per collective so they run in parallel.

use super::*;

fn counts(nranks: usize) -> Vec<usize> {
    let mut counts = vec![0, 1, 7, nranks.saturating_sub(1), nranks + 1, 1000, 4099];
    counts.sort_unstable();
    counts.dedup();
    counts
}

fn roots(collective: Collective, nranks: usize) -> Vec<usize> {
    let mut roots = if collective.rooted() { vec![0, nranks / 2, nranks - 1] } else { vec![0] };
    roots.dedup();
    roots
}

/// Small chunks stress pipelining and tails; big ones are one message per piece. Large
/// counts skip the smallest chunk, whose message counts only slow the test down.
fn chunkings(count: usize) -> Vec<(usize, usize)> {
    let mut chunkings = vec![(64, 3), (1 << 20, 2)];
    if count <= 1000 {
        chunkings.push((5, 1));
    } else {
        chunkings.push((300, 1));
    }
    chunkings
}

fn every(collective: Collective) {
    for nranks in 1..=16 {
        for count in counts(nranks) {
            for root in roots(collective, nranks) {
                for (chunk, channels) in chunkings(count) {
                    for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(collective)) {
                        check(Shape { collective, count, nranks, root, chunk, channels, per_host: 1 }, algorithm, 2);
                    }
                }
            }
        }
    }
}

#[test]
fn all_reduce() {
    every(Collective::AllReduce);
}

/// The trees across hosts with a chain inside each, hosts of 2 to 4 ranks.
#[test]
fn all_reduce_by_trees_across_hosts() {
    for (hosts, per_host) in [(2, 2), (2, 3), (3, 2), (2, 4), (4, 2), (3, 3), (5, 3), (4, 4)] {
        let nranks = hosts * per_host;
        for count in counts(nranks) {
            for (chunk, channels) in chunkings(count) {
                check(Shape { collective: Collective::AllReduce, count, nranks, root: 0, chunk, channels, per_host }, Algorithm::Tree, 2);
            }
        }
    }
}

#[test]
fn broadcast() {
    every(Collective::Broadcast);
}

#[test]
fn reduce() {
    every(Collective::Reduce);
}

#[test]
fn all_gather() {
    every(Collective::AllGather);
}

#[test]
fn reduce_scatter() {
    every(Collective::ReduceScatter);
}

#[test]
fn all_to_all() {
    every(Collective::AllToAll);
}

#[test]
fn gather() {
    every(Collective::Gather);
}

#[test]
fn scatter() {
    every(Collective::Scatter);
}

/// Exact provenance: each element carries the list of (rank, index) inputs folded into it,
/// so a contribution counted twice, missing, or taken from the wrong index fails, whatever
/// the values would have summed to.
#[test]
fn every_reduction_folds_each_input_exactly_once() {
    type Origins = Vec<(usize, usize)>;
    let merge = |a: &Origins, b: &Origins| {
        let mut m: Origins = a.iter().chain(b).copied().collect();
        m.sort_unstable();
        m
    };
    for nranks in 1..=9 {
        for collective in [Collective::AllReduce, Collective::Reduce, Collective::ReduceScatter] {
            for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(collective)) {
                for (count, chunk, channels) in [(1, 1, 1), (13, 2, 2), (nranks * 3 + 1, 4, 1)] {
                    let shape = Shape { collective, count, nranks, root: nranks / 2, chunk, channels, per_host: 1 };
                    let schedule = plan(shape, algorithm).unwrap();
                    let data = inputs(&shape, |r, i| vec![(r, i)]);
                    let want = expected(&shape, &data, &merge);
                    for &in_place in placements(collective) {
                        let got = simulate(&schedule, &data, merge, &Options { slots: 2, in_place, check_races: true, grouped_receives: 1 }).unwrap();
                        compare(&got, &want, &format!("{algorithm:?} {shape} in_place={in_place}"), &schedule);
                    }
                }
            }
        }
    }
}

/// Larger rank counts than the matrix, fewer shapes.
#[test]
fn many_ranks() {
    for nranks in [24, 31, 32, 33] {
        for collective in Collective::ALL {
            for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(collective)) {
                check(Shape { collective, count: 2 * nranks + 3, nranks, root: nranks - 2, chunk: 4, channels: 2, per_host: 1 }, algorithm, 2);
            }
        }
    }
}
