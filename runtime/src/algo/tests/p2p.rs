//! Point-to-point groups: every rank's transfers planned, validated and simulated
//! together, each receive compared with the send it pairs with.

use super::*;

fn send(peer: usize, count: usize) -> Transfer {
    Transfer { direction: Direction::Send, peer, count }
}

fn recv(peer: usize, count: usize) -> Transfer {
    Transfer { direction: Direction::Recv, peer, count }
}

/// Plans, validates and simulates `groups` (rank r's transfers in `groups[r]`), and checks
/// that the k-th receive of r from p got the k-th send of p to r.
fn check_group(groups: &[Vec<Transfer>], chunk: usize, channels: usize, slots: usize) {
    let n = groups.len();
    let plans: Vec<PointToPointPlan> = (0..n).map(|r| point_to_point(n, r, &groups[r], chunk, 7, channels).unwrap()).collect();
    validate_point_to_point(&plans, groups, chunk, slots).unwrap_or_else(|e| panic!("{groups:?}: {e}\n{plans:?}"));
    // Element = (sending rank, transfer index, element index).
    let inputs: Vec<Vec<Vec<(usize, usize, usize)>>> = groups
        .iter()
        .enumerate()
        .map(|(r, ts)| {
            ts.iter().enumerate().map(|(t, x)| if x.direction == Direction::Send { (0..x.count).map(|i| (r, t, i)).collect() } else { vec![] }).collect()
        })
        .collect();
    let got = simulate_point_to_point(&plans, groups, &inputs, &Options { slots, ..Options::default() }).unwrap();
    for (r, ts) in groups.iter().enumerate() {
        for (t, x) in ts.iter().enumerate().filter(|(_, x)| x.direction == Direction::Recv) {
            // The k-th receive from p meets p's k-th send to r.
            let k = ts[..t].iter().filter(|y| y.direction == Direction::Recv && y.peer == x.peer).count();
            let (s, _) = groups[x.peer].iter().enumerate().filter(|(_, y)| y.direction == Direction::Send && y.peer == r).nth(k).unwrap();
            let want: Vec<Option<_>> = (0..x.count).map(|i| Some((x.peer, s, i))).collect();
            assert_eq!(got[r][t], want, "rank {r} transfer {t} {x:?}");
        }
    }
}

#[test]
fn pairs_rings_and_everyone_to_everyone() {
    for n in 1..=6 {
        for (chunk, channels) in [(3, 1), (4, 2), (1000, 3)] {
            // A ring shift, sends listed before receives on half the ranks and after on the others.
            let ring: Vec<Vec<Transfer>> = (0..n)
                .map(|r| {
                    let (s, v) = (send((r + 1) % n, 10 + r), recv((r + n - 1) % n, 10 + (r + n - 1) % n));
                    if r % 2 == 0 {
                        vec![s, v]
                    } else {
                        vec![v, s]
                    }
                })
                .collect();
            check_group(&ring, chunk, channels, 1);
            // Everyone to everyone, itself included, with two transfers per pair and a 0.
            let all: Vec<Vec<Transfer>> = (0..n)
                .map(|r| {
                    let mut ts = Vec::new();
                    for p in 0..n {
                        ts.push(send(p, r + p + 1));
                        ts.push(send(p, if p == r { 0 } else { 2 * r + 3 }));
                    }
                    for p in (0..n).rev() {
                        ts.push(recv(p, p + r + 1));
                        ts.push(recv(p, if p == r { 0 } else { 2 * p + 3 }));
                    }
                    ts
                })
                .collect();
            check_group(&all, chunk, channels, 2);
        }
    }
}

#[test]
fn chunks_spread_over_channels() {
    let plan = point_to_point(2, 0, &[send(1, 10)], 2, 4, 3).unwrap();
    assert_eq!(plan.lanes.len(), 3);
    let channels: Vec<usize> = plan
        .lanes
        .iter()
        .map(|l| match l.role {
            Role::SendTo { peer: 1, channel } => channel,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(channels, vec![4, 5, 6]);
    assert_eq!(plan.lanes[0].steps.iter().map(|(_, s)| s.count()).collect::<Vec<_>>(), vec![2, 2]);
}

#[test]
fn mismatches_are_errors() {
    // Counts that differ between a send and its receive.
    let groups = vec![vec![send(1, 5)], vec![recv(0, 4)]];
    let plans: Vec<_> = (0..2).map(|r| point_to_point(2, r, &groups[r], 8, 0, 1).unwrap()).collect();
    assert!(matches!(validate_point_to_point(&plans, &groups, 8, 2).unwrap_err(), ScheduleError::Unmatched { .. }));
    // A send to oneself without a receive, a peer that does not exist.
    assert!(point_to_point(2, 0, &[send(0, 1)], 8, 0, 1).unwrap_err().to_string().contains("itself"));
    assert!(point_to_point(2, 0, &[send(0, 1), recv(0, 2)], 8, 0, 1).is_err());
    assert!(point_to_point(2, 0, &[recv(2, 1)], 8, 0, 1).is_err());
}
