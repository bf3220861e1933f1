//! The validator and the simulator reject each kind of broken schedule, saying where.

use super::*;

fn good() -> Schedule {
    let shape = Shape { collective: Collective::AllReduce, count: 12, nranks: 3, root: 0, chunk: 4, channels: 1, per_host: 1 };
    plan(shape, Algorithm::Ring).unwrap()
}

/// A schedule of two ranks with the given lanes, for hand-made cases.
fn handmade(count: usize, ranks: Vec<Vec<Vec<Step>>>) -> Schedule {
    let shape = Shape { collective: Collective::AllReduce, count, nranks: ranks.len(), root: 0, chunk: 4, channels: 1, per_host: 1 };
    let lanes = |steps: Vec<Vec<Step>>| steps.into_iter().map(|steps| Lane { role: Role::Local, steps }).collect();
    Schedule { shape, algorithm: Algorithm::Ring, ranks: ranks.into_iter().map(lanes).collect() }
}

fn link(peer: usize) -> Link {
    Link { peer, channel: 0 }
}

#[test]
fn a_send_without_its_receive() {
    let mut s = good();
    s.ranks[1][0].steps.remove(0);
    // Rank 1's messages to rank 2 now number three, rank 2 still expects four.
    let err = validate(&s, 2).unwrap_err();
    assert_eq!(err, ScheduleError::Unmatched { from: 1, to: 2, channel: 0, index: 3, sent: None, received: Some(4) });
}

#[test]
fn messages_of_different_sizes() {
    let s = handmade(4, vec![vec![vec![Step::Send { to: link(1), src: Slice::send(0, 4) }]], vec![vec![Step::Recv { from: link(0), dst: Slice::recv(0, 3) }]]]);
    let err = validate(&s, 2).unwrap_err();
    assert!(matches!(err, ScheduleError::Unmatched { sent: Some(4), received: Some(3), .. }), "{err}");
}

#[test]
fn out_of_range_slices() {
    let mut s = good();
    s.ranks[0][0].steps.push(Step::Copy { src: Slice::send(10, 4), dst: Slice::recv(0, 4) });
    let err = validate(&s, 2).unwrap_err();
    assert!(matches!(err, ScheduleError::OutOfRange { buffer: Buffer::Send, len: 12, .. }), "{err}");
    assert!(err.to_string().contains("send[10..14] is outside the send buffer of 12 elements"), "{err}");
}

#[test]
fn wait_cycles_name_the_stuck_ranks() {
    // Two ranks that each receive before sending.
    let lane = |peer| vec![vec![Step::Recv { from: link(peer), dst: Slice::recv(0, 1) }, Step::Send { to: link(peer), src: Slice::send(0, 1) }]];
    let err = validate(&handmade(1, vec![lane(1), lane(0)]), 8).unwrap_err();
    let ScheduleError::Deadlock { slots: 8, ref stuck } = err else { panic!("{err}") };
    assert_eq!(stuck.iter().map(|s| (s.at.rank, s.at.index)).collect::<Vec<_>>(), vec![(0, 0), (1, 0)]);
    assert!(err.to_string().contains("rank 1 lane 0 (local) step 0: recv"), "{err}");
    assert!(err.to_string().contains("waits for a message from rank 0 on channel 0"), "{err}");
}

#[test]
fn a_connection_shared_by_two_lanes() {
    let mut s = good();
    let stolen = s.ranks[0][0].steps.remove(0);
    s.ranks[0].push(Lane { role: Role::Local, steps: vec![stolen] });
    let err = validate(&s, 2).unwrap_err();
    assert!(matches!(err, ScheduleError::SharedConnection { rank: 0, end: "sending", .. }), "{err}");
}

#[test]
fn bad_peers_big_messages_and_empty_steps() {
    let to_self = handmade(1, vec![vec![vec![Step::Send { to: link(0), src: Slice::send(0, 1) }]], vec![]]);
    assert!(matches!(validate(&to_self, 2).unwrap_err(), ScheduleError::BadPeer { peer: 0, .. }));
    let too_big =
        handmade(8, vec![vec![vec![Step::Send { to: link(1), src: Slice::send(0, 8) }]], vec![vec![Step::Recv { from: link(0), dst: Slice::recv(0, 8) }]]]);
    assert!(matches!(validate(&too_big, 2).unwrap_err(), ScheduleError::Oversized { chunk: 4, .. }));
    let empty = handmade(1, vec![vec![vec![Step::Copy { src: Slice::send(0, 0), dst: Slice::recv(0, 0) }]], vec![]]);
    assert!(matches!(validate(&empty, 2).unwrap_err(), ScheduleError::Empty { .. }));
    let mut wrong_count = good();
    wrong_count.ranks.pop();
    assert!(matches!(validate(&wrong_count, 2).unwrap_err(), ScheduleError::RankCount { planned: 2, nranks: 3 }));
}

#[test]
fn reading_what_nobody_wrote() {
    let s = handmade(2, vec![vec![vec![Step::Copy { src: Slice::recv(0, 1), dst: Slice::recv(1, 1) }]]]);
    let err = validate(&s, 2).unwrap_err();
    assert!(matches!(err, ScheduleError::Uninitialized { .. }), "{err}");
}

#[test]
fn reduces_into_a_partly_overlapping_slice() {
    let s = handmade(
        4,
        vec![
            vec![vec![Step::Send { to: link(1), src: Slice::send(0, 2) }]],
            vec![vec![
                Step::Copy { src: Slice::send(0, 4), dst: Slice::recv(0, 4) },
                Step::RecvReduceCopy { from: link(0), local: Slice::recv(0, 2), dst: Slice::recv(1, 2) },
            ]],
        ],
    );
    assert!(matches!(validate(&s, 2).unwrap_err(), ScheduleError::PartialOverlap { .. }));
}

/// Two lanes of a rank writing the same output with nothing ordering them: whichever order
/// the simulator picks, it is a race.
#[test]
fn unordered_lanes_race() {
    let copy = || vec![Step::Copy { src: Slice::send(0, 2), dst: Slice::recv(0, 2) }];
    let s = handmade(2, vec![vec![copy(), copy()]]);
    let err = validate(&s, 2).unwrap_err();
    assert!(matches!(err, ScheduleError::Race { rank: 0, other_lane: 0, other_index: 0, .. }), "{err}");
    // Ordered by a message through another rank, the same two writes are fine.
    let s = handmade(
        2,
        vec![
            vec![
                vec![Step::Copy { src: Slice::send(0, 2), dst: Slice::recv(0, 2) }, Step::Send { to: link(1), src: Slice::send(0, 1) }],
                vec![Step::Recv { from: link(1), dst: Slice::recv(0, 1) }, Step::Copy { src: Slice::send(0, 2), dst: Slice::recv(0, 2) }],
            ],
            vec![vec![
                Step::RecvCopySend { from: link(0), to: link(0), dst: Slice::recv(0, 1) },
                Step::Copy { src: Slice::send(0, 2), dst: Slice::recv(0, 2) },
            ]],
        ],
    );
    validate(&s, 2).unwrap();
}

/// In place, all_reduce's send and recv are one buffer: a schedule that writes its output
/// over input it still needs gives a wrong result only when aliased, and the aliased run
/// is what catches it.
#[test]
fn aliasing_mistakes_show_in_place() {
    // One rank's all_reduce of 2 elements done as: write element 1 from element 0, then
    // element 0 from element 1 — right with separate buffers, wrong when they alias.
    let s = handmade(
        2,
        vec![vec![vec![Step::Copy { src: Slice::send(0, 1), dst: Slice::recv(1, 1) }, Step::Copy { src: Slice::send(1, 1), dst: Slice::recv(0, 1) }]]],
    );
    let data = vec![vec![10_i64, 20]];
    let out_of_place = simulate(&s, &data, |a, b| a + b, &Options::default()).unwrap();
    assert_eq!(out_of_place, vec![vec![Some(20), Some(10)]]);
    let in_place = simulate(&s, &data, |a, b| a + b, &Options { in_place: true, ..Options::default() }).unwrap();
    assert_eq!(in_place, vec![vec![Some(10), Some(10)]]);
}
