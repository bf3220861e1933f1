//! The shape of what the algorithms build: trees, traffic, message sizes, FIFO depth,
//! the executor's view, printing.

use super::*;

/// The tree drawn in NCCL's `trees.cc` for 14 ranks.
#[test]
fn binary_tree_matches_nccl_for_14_ranks() {
    let children = |r| binary_tree(14, r).children;
    let parent = |r| binary_tree(14, r).parent;
    assert_eq!((parent(0), children(0)), (None, vec![8]));
    assert_eq!((parent(8), children(8)), (Some(0), vec![4, 12]));
    assert_eq!(children(4), vec![2, 6]);
    assert_eq!(children(12), vec![10, 13]);
    assert_eq!((parent(13), children(13)), (Some(12), vec![]));
    assert_eq!(children(10), vec![9, 11]);
    assert_eq!((parent(1), children(1)), (Some(2), vec![]));
}

#[test]
fn double_trees_are_spanning_trees() {
    for n in 1..=70 {
        let trees: [Vec<TreeNode>; 2] = [0, 1].map(|t| (0..n).map(|r| double_tree(n, r)[t].clone()).collect());
        for (tree, nodes) in trees.iter().enumerate() {
            let roots: Vec<usize> = (0..n).filter(|&r| nodes[r].parent.is_none()).collect();
            assert_eq!(roots.len(), 1, "n={n} tree {tree}");
            for (r, node) in nodes.iter().enumerate() {
                assert!(node.children.len() <= 2 && !node.children.contains(&r), "n={n} tree {tree} rank {r}: {node:?}");
                if let Some(p) = node.parent {
                    assert!(nodes[p].children.contains(&r), "n={n} tree {tree}: {p} does not list child {r}");
                }
                for &c in &node.children {
                    assert_eq!(nodes[c].parent, Some(r), "n={n} tree {tree}");
                }
                // Every rank reaches the root in at most log2(n)+1 hops (no cycles).
                let (mut at, mut hops) = (r, 0);
                while let Some(p) = nodes[at].parent {
                    at = p;
                    hops += 1;
                    assert!(hops <= usize::BITS as usize - n.leading_zeros() as usize + 1, "n={n} tree {tree} rank {r}");
                }
            }
        }
        // The point of two trees: with an even count, each rank is a leaf in one of them.
        if n % 2 == 0 {
            for (r, (first, second)) in trees[0].iter().zip(&trees[1]).enumerate() {
                assert!(first.children.is_empty() || second.children.is_empty(), "n={n}: rank {r} is inner in both trees");
            }
        }
    }
}

/// Ring and tree all_reduce both send 2(n-1)·count elements in all; the ring spreads them
/// evenly, 2(n-1)/n of the data per rank — the bandwidth-optimal amount.
#[test]
fn all_reduce_traffic_is_bandwidth_optimal() {
    for n in 2..=16 {
        for (count, chunk) in [(n * 1000, 100), (n * 1600, 100), (4099, 64), (7, 2)] {
            let shape = Shape { collective: Collective::AllReduce, count, nranks: n, root: 0, chunk, channels: 2, per_host: 1 };
            for algorithm in [Algorithm::Ring, Algorithm::Tree] {
                let sent = plan(shape, algorithm).unwrap().elements_sent();
                assert_eq!(sent.iter().sum::<usize>(), 2 * (n - 1) * count, "{algorithm:?} {shape}");
            }
            let sent = plan(shape, Algorithm::Ring).unwrap().elements_sent();
            // Every rank sends alike where each channel's part is whole rounds of n chunks.
            if split_channels(count, shape.channels, CHANNEL_GRANULE).all(|(_, len)| len % (n * chunk) == 0) {
                assert!(sent.iter().all(|&s| s == 2 * (n - 1) * count / n), "{shape}: {sent:?}");
            }
        }
    }
}

/// Ring steps that receive and send hold every rank's net in-flight messages to one, so two
/// slots per connection always leave room; with one slot a full ring jams and the validator
/// says who is stuck. Trees and direct exchange never wait in a cycle, so one slot does.
#[test]
fn fifo_depth() {
    for collective in Collective::ALL {
        for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(collective)) {
            let shape = Shape { collective, count: 100, nranks: 5, root: 2, chunk: 3, channels: 2, per_host: 1 };
            let schedule = plan(shape, algorithm).unwrap();
            validate(&schedule, 2).unwrap();
            if algorithm != Algorithm::Ring || matches!(collective, Collective::AllToAll | Collective::Gather | Collective::Scatter) {
                validate(&schedule, 1).unwrap_or_else(|e| panic!("{algorithm:?} {shape}: {e}"));
            }
        }
    }
    let shape = Shape { collective: Collective::AllReduce, count: 100, nranks: 5, root: 0, chunk: 3, channels: 1, per_host: 1 };
    match validate(&plan(shape, Algorithm::Ring).unwrap(), 1) {
        Err(e @ ScheduleError::Deadlock { .. }) => {
            let ScheduleError::Deadlock { slots, ref stuck } = e else { unreachable!() };
            assert_eq!(slots, 1);
            assert_eq!(stuck.len(), 5, "{e}");
            assert!(stuck.iter().all(|s| s.waiting_for.starts_with("a free slot")), "{e}");
            assert!(e.to_string().contains("rank 4 lane 0 (ring, channel 0) step"), "{e}");
        }
        other => panic!("expected a deadlock, got {other:?}"),
    }
}

/// Kernels may fold PreMulSum's scaling into the read of the input (every read of it, none
/// of the output): every reducing schedule reads each input element, once, but for the
/// two ranks' one-shot all_reduce, which sends its input and folds it in (twice).
#[test]
fn reducing_schedules_read_each_input_once() {
    for nranks in 1..=9 {
        for collective in Collective::ALL.into_iter().filter(|c| c.reduces()) {
            for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(collective)) {
                for (count, chunk, channels) in [(1, 1, 1), (29, 3, 2), (100, 100, 3)] {
                    let shape = Shape { collective, count, nranks, root: nranks / 2, chunk, channels, per_host: 1 };
                    let schedule = plan(shape, algorithm).unwrap();
                    for (rank, lanes) in schedule.ranks.iter().enumerate() {
                        let mut reads = vec![0; shape.buffer_counts(rank).0];
                        for s in lanes.iter().flat_map(|l| &l.steps).filter_map(Step::reads).filter(|s| s.buffer == Buffer::Send) {
                            reads[s.offset..s.end()].iter_mut().for_each(|n| *n += 1);
                        }
                        let once = !(algorithm == Algorithm::Direct && collective == Collective::AllReduce && nranks == 2);
                        assert!(reads.iter().all(|&n| n == if once { 1 } else { 2 }), "{algorithm:?} {shape} rank {rank}: {reads:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn messages_are_bounded_by_the_chunk_in_bytes() {
    let shape = Shape::new(Collective::AllReduce, 1 << 20, 4, 4).with_chunk_bytes(4096, 4).with_channels(2);
    assert_eq!(shape.chunk, 1024);
    for algorithm in [Algorithm::Ring, Algorithm::Tree] {
        let schedule = plan(shape, algorithm).unwrap();
        assert!(schedule.steps().filter(|(.., s)| s.sends().is_some()).all(|(.., s)| s.count() <= 1024));
        validate(&schedule, 2).unwrap();
    }
    assert_eq!(Shape::new(Collective::AllGather, 1, 2, 8).chunk, DEFAULT_CHUNK_BYTES / 8);
    assert_eq!(Shape::new(Collective::AllGather, 1, 2, 8).with_chunk_bytes(3, 8).chunk, 1, "at least one element");
}

/// Steps are coarse: one step per chunk-sized message, no more.
#[test]
fn one_step_per_message() {
    let shape = Shape { collective: Collective::AllReduce, count: 8 * 1000, nranks: 8, root: 0, chunk: 100, channels: 1, per_host: 1 };
    let schedule = plan(shape, Algorithm::Ring).unwrap();
    // 10 rounds of 8 segments of 100 elements; per round and rank 2(n-1) = 14 messages
    // out and 14 in, in 2n-1 = 15 steps (the first only sends, the last only receives).
    assert!(schedule.ranks.iter().all(|lanes| lanes.len() == 1 && lanes[0].steps.len() == 10 * 15));
    assert_eq!(schedule.messages(), 8 * 10 * 14);
}

#[test]
fn plan_rank_is_the_executors_view_of_plan() {
    let shape = Shape { collective: Collective::AllReduce, count: 50, nranks: 6, root: 0, chunk: 4, channels: 2, per_host: 1 };
    for algorithm in [Algorithm::Ring, Algorithm::Tree] {
        let schedule = plan(shape, algorithm).unwrap();
        for rank in 0..6 {
            let lanes: Vec<Vec<Step>> = schedule.ranks[rank].iter().map(|l| l.steps.clone()).collect();
            assert_eq!(plan_rank(shape, algorithm, rank).unwrap(), lanes);
            assert!(lanes.iter().all(|l| !l.is_empty()));
        }
    }
}

#[test]
fn tree_lanes_use_separate_channels_per_tree() {
    let shape = Shape { collective: Collective::AllReduce, count: 64, nranks: 4, root: 0, chunk: 8, channels: 2, per_host: 1 };
    let schedule = plan(shape, Algorithm::Tree).unwrap();
    for (rank, lane, _, step) in schedule.steps() {
        let role = schedule.ranks[rank][lane].role;
        let (Role::TreeUp { channel, tree } | Role::TreeDown { channel, tree }) = role else { panic!("{role:?}") };
        for link in step.sends().into_iter().chain(step.receives()) {
            assert_eq!(link.channel, 2 * channel + tree);
        }
    }
}

#[test]
fn unsupported_choices_are_errors() {
    let shape = Shape { collective: Collective::AllReduce, count: 8, nranks: 2, root: 0, chunk: 4, channels: 1, per_host: 1 };
    assert!(plan(Shape { collective: Collective::Broadcast, ..shape }, Algorithm::Tree).unwrap_err().to_string().contains("all_reduce only"));
    assert!(plan(Shape { root: 2, ..shape }, Algorithm::Ring).is_err());
    assert!(plan(Shape { chunk: 0, ..shape }, Algorithm::Ring).is_err());
    let a2a = Shape { collective: Collective::AllToAll, ..shape };
    let schedule = plan(a2a, Algorithm::Direct).unwrap();
    let err = simulate(&schedule, &inputs(&a2a, value), |a, b| a + b, &Options { in_place: true, ..Options::default() }).unwrap_err();
    assert!(matches!(err, ScheduleError::NoInPlace { .. }), "{err}");
    for collective in Collective::ALL {
        for algorithm in Algorithm::ALL {
            assert_eq!(plan(Shape { collective, ..shape }, algorithm).is_ok(), algorithm.supports(collective), "{algorithm:?} {collective:?}");
        }
    }
}

#[test]
fn schedules_print_readably() {
    let shape = Shape { collective: Collective::AllReduce, count: 6, nranks: 3, root: 0, chunk: 2, channels: 1, per_host: 1 };
    let text = plan(shape, Algorithm::Ring).unwrap().to_string();
    assert!(text.starts_with("ring: all_reduce of 6 elements over 3 ranks, chunks of at most 2 elements, 1 channel(s)\n"), "{text}");
    assert!(text.contains("rank 1:\n  lane 0 (ring, channel 0), 5 steps:\n"), "{text}");
    assert!(text.contains("recv_reduce_copy_send from rank 0 ch 0 to rank 2 ch 0 local send["), "{text}");
    let tree = plan(Shape { nranks: 4, ..shape }, Algorithm::Tree).unwrap().to_string();
    assert!(tree.contains("(tree 1 down, channel 0)") && tree.contains("-> recv["), "{tree}");
}

/// The network proxy posts a connection's receives together (up to `max_recvs`) and
/// completes them as one only for plans whose sends never wait on their receiver
/// ([`Algorithm::sends_independently`]): those finish with receives grouped by 8 (and 3,
/// which ends groups mid-run), while two ranks' one-shot all_reduce, whose next send waits
/// for its last receive, jams — as it did over the socket Net before it was excluded.
#[test]
fn grouped_receives_only_where_sends_are_independent() {
    let grouped = |shape: Shape, algorithm: Algorithm, group: usize| {
        let schedule = plan(shape, algorithm).unwrap();
        simulate(&schedule, &inputs(&shape, value), |a, b| a.wrapping_add(*b), &Options { grouped_receives: group, ..Options::default() })
    };
    let mut checked = 0;
    for collective in Collective::ALL {
        for algorithm in Algorithm::ALL.into_iter().filter(|a| a.supports(collective)) {
            for nranks in 2..=6 {
                if !algorithm.sends_independently(collective, nranks, false) {
                    continue;
                }
                for (count, chunk) in [(100, 3), (1000, 7), (5, 8)] {
                    for group in [3, 8] {
                        let shape = Shape { collective, count, nranks, root: nranks / 2, chunk, channels: 2, per_host: 1 };
                        grouped(shape, algorithm, group).unwrap_or_else(|e| panic!("{algorithm:?} {shape}, receives grouped by {group}: {e}"));
                        checked += 1;
                    }
                }
            }
        }
    }
    assert!(checked > 100, "{checked} cases");
    let one_shot = Shape { collective: Collective::AllReduce, count: 100, nranks: 2, root: 0, chunk: 3, channels: 1, per_host: 1 };
    assert!(!Algorithm::Direct.sends_independently(Collective::AllReduce, 2, false));
    match grouped(one_shot, Algorithm::Direct, 8) {
        Err(ScheduleError::Deadlock { .. }) => {}
        other => panic!("expected the one-shot all_reduce to jam with grouped receives, got {:?}", other.map(|_| ())),
    }
    grouped(one_shot, Algorithm::Direct, 1).unwrap();
}

/// Channel splits cover the range once, in order, and start every part but the last on a
/// granule (16 channels per peer or 21: the kernels' vector path needs 16-byte offsets).
#[test]
fn channel_splits_cover_the_range_and_start_on_granules() {
    for total in [0usize, 1, 15, 16, 17, 100, 4096, 2 << 20, (2 << 20) + 3, 1_000_003] {
        for parts in [1usize, 2, 3, 7, 16, 21, 64] {
            let split: Vec<(usize, usize)> = split_channels(total, parts, CHANNEL_GRANULE).collect();
            assert_eq!(split.len(), parts);
            let mut at = 0;
            for (i, &(offset, len)) in split.iter().enumerate() {
                assert_eq!(offset, at, "{total} over {parts}: part {i} starts at {offset}, expected {at}");
                assert_eq!(offset % CHANNEL_GRANULE, 0, "{total} over {parts}: part {i} at {offset}");
                at += len;
            }
            assert_eq!(at, total, "{total} over {parts}");
            // Near-equal: parts but the last differ by at most a granule.
            let lens: Vec<usize> = split[..parts - 1].iter().map(|p| p.1).collect();
            if let (Some(lo), Some(hi)) = (lens.iter().min(), lens.iter().max()) {
                assert!(hi - lo <= CHANNEL_GRANULE, "{total} over {parts}: {lens:?}");
            }
        }
    }
}

/// Every all_reduce schedule leaves the same bits on every rank whatever the op's rounding,
/// given only that the op is commutative (as sum, prod, max and min are in IEEE arithmetic):
/// simulated with a combine that is commutative but not associative — the expression
/// itself, operands in a canonical order — every rank's output is one expression. Recursive
/// doubling's is the balanced tree over ranks in order, folded extras first.
#[test]
fn all_reduce_leaves_the_same_expression_on_every_rank() {
    let combine = |a: &String, b: &String| if a <= b { format!("({a}+{b})") } else { format!("({b}+{a})") };
    for nranks in 1..=9 {
        for (algorithm, per_host) in Algorithm::ALL.into_iter().filter(|a| a.supports(Collective::AllReduce)).map(|a| (a, 1)).chain([(Algorithm::Tree, 2), (Algorithm::Tree, 3)]) {
            for (count, chunk, channels) in [(1, 1, 1), (29, 3, 2), (40, 40, 1)] {
                let shape = Shape { collective: Collective::AllReduce, count, nranks, root: 0, chunk, channels, per_host };
                let schedule = plan(shape, algorithm).unwrap();
                let data = inputs(&shape, |rank, i| format!("x{rank}.{i}"));
                for in_place in [false, true] {
                    let options = Options { slots: 2, in_place, check_races: true, grouped_receives: 1 };
                    let got = simulate(&schedule, &data, combine, &options).unwrap_or_else(|e| panic!("{algorithm:?} {shape}: {e}"));
                    for rank in 1..nranks {
                        assert_eq!(got[rank], got[0], "{algorithm:?} {shape} in_place={in_place}: rank {rank} against rank 0");
                    }
                }
            }
        }
    }
    // Four ranks by recursive doubling: the balanced tree; three: rank 2 folded into rank 0.
    let expression = |nranks: usize| {
        let shape = Shape { collective: Collective::AllReduce, count: 1, nranks, root: 0, chunk: 1, channels: 1, per_host: 1 };
        let data = inputs(&shape, |rank, _| format!("x{rank}"));
        let options = Options { slots: 1, in_place: false, check_races: true, grouped_receives: 1 };
        simulate(&plan(shape, Algorithm::Doubling).unwrap(), &data, combine, &options).unwrap()[0][0].clone().unwrap()
    };
    assert_eq!(expression(4), "((x0+x1)+(x2+x3))");
    assert_eq!(expression(3), "((x0+x2)+x1)");
}

/// NCCL's trees across hosts with a chain inside each: in each tree every rank but one has
/// a parent and reaches the root, parents and children agree, a host's ranks form a chain
/// below its head (its first rank in tree 0, its last in tree 1), only heads link hosts,
/// by as many links as a tree over the hosts has, and no rank has more than three children.
#[test]
fn trees_across_hosts_link_hosts_only_through_their_heads() {
    for (hosts, per_host) in [(2, 2), (2, 4), (3, 2), (4, 3), (5, 2), (8, 8)] {
        let n = hosts * per_host;
        let all: Vec<[TreeNode; 2]> = (0..n).map(|r| trees(n, per_host, r)).collect();
        for tree in 0..2 {
            let head = |h: usize| h * per_host + if tree == 0 { 0 } else { per_host - 1 };
            let roots: Vec<usize> = (0..n).filter(|&r| all[r][tree].parent.is_none()).collect();
            assert_eq!(roots.len(), 1, "{hosts}x{per_host} tree {tree}: roots {roots:?}");
            let mut across = 0;
            for (r, nodes) in all.iter().enumerate() {
                let node = &nodes[tree];
                assert!(node.children.len() <= 3, "{hosts}x{per_host} tree {tree}: rank {r} has {:?}", node.children);
                for &c in &node.children {
                    assert_eq!(all[c][tree].parent, Some(r), "{hosts}x{per_host} tree {tree}: {c} is {r}'s child");
                    if c / per_host != r / per_host {
                        assert!(r == head(r / per_host) && c == head(c / per_host), "{hosts}x{per_host} tree {tree}: {r}->{c} links hosts but not through heads");
                        across += 1;
                    } else {
                        assert_eq!(c.abs_diff(r), 1, "{hosts}x{per_host} tree {tree}: {r}->{c} is not a chain step");
                    }
                }
                let mut at = r;
                for _ in 0..n {
                    match all[at][tree].parent {
                        Some(p) => at = p,
                        None => break,
                    }
                }
                assert_eq!(at, roots[0], "{hosts}x{per_host} tree {tree}: rank {r} does not reach the root");
            }
            assert_eq!(across, hosts - 1, "{hosts}x{per_host} tree {tree}");
        }
    }
    // One rank a host, or one host: the flat double tree.
    assert_eq!(trees(6, 1, 3), double_tree(6, 3));
    assert_eq!(trees(6, 6, 3), double_tree(6, 3));
}

/// A ring all_gather of one chunk per lane copies its own block right after sending it,
/// while the first hop is in flight (not after the last receive, where a small call that
/// waits on its peers would wait for it too); with several chunks, the copy comes last.
#[test]
fn ring_all_gather_copies_its_own_block_after_the_first_send() {
    let kinds = |count: usize, chunk: usize, n: usize| -> Vec<&'static str> {
        let shape = Shape { collective: Collective::AllGather, count, nranks: n, root: 0, chunk, channels: 1, per_host: 1 };
        let schedule = plan(shape, Algorithm::Ring).unwrap();
        schedule.ranks[1][0]
            .steps
            .iter()
            .map(|s| match s {
                Step::Send { .. } => "send",
                Step::Copy { .. } => "copy",
                Step::Recv { .. } => "recv",
                Step::RecvCopySend { .. } => "recv-copy-send",
                other => panic!("{other:?} in a ring all_gather"),
            })
            .collect()
    };
    assert_eq!(kinds(4, 64, 2), ["send", "copy", "recv"]);
    assert_eq!(kinds(4, 64, 4), ["send", "copy", "recv-copy-send", "recv-copy-send", "recv"]);
    assert_eq!(kinds(100, 64, 2), ["send", "recv", "send", "recv", "copy"]);
}

/// The ring's and two-shot's all_reduce segments start on granules wherever the chunk is a
/// whole number of them, whatever the number of ranks (a ring of 3 GPUs split its rounds
/// element by element, so that two of its three segments took the kernels' byte-by-byte
/// path), and every rank's slices are inside the buffer.
#[test]
fn all_reduce_segments_start_on_granules() {
    for (algorithm, nranks) in [(Algorithm::Ring, 3), (Algorithm::Ring, 5), (Algorithm::Ring, 7), (Algorithm::Direct, 3), (Algorithm::Direct, 6)] {
        for count in [16384, 65536 * 3 + 48, 1_000_003] {
            for channels in [1, 16] {
                let shape = Shape { collective: Collective::AllReduce, count, nranks, root: 0, chunk: 65536, channels, per_host: 1 };
                let schedule = plan(shape, algorithm).unwrap();
                for (rank, lane, i, step) in schedule.steps() {
                    for slice in [step.reads(), step.writes()].into_iter().flatten() {
                        assert_eq!(slice.offset % CHANNEL_GRANULE, 0, "{algorithm:?} {shape}: rank {rank} lane {lane} step {i} at element {}", slice.offset);
                        assert!(slice.end() <= count, "{algorithm:?} {shape}: rank {rank} lane {lane} step {i} past the end");
                    }
                }
            }
        }
    }
}
