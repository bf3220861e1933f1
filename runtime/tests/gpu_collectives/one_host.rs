//! Ranks as threads on the GPUs of this machine: the matrix, five ranks on two GPUs, every route bit for bit against the CPU, LL between GPUs, the one-hop kernel over LL128, a tuner plugin's choices, the kernel timeline and the largest messages.

use super::*;

#[test]
fn ranks_as_threads() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    threads(2, g, cases);
    threads(4, g, cases);
    if g > 2 {
        threads(g, g, cases);
    }
    threads_with(2, g, simple_cases, Inputs::Exact, &simple_config());
    threads_with(3, g, simple_cases, Inputs::Exact, &simple_config());
}

/// GPUs shared unevenly: five ranks on two GPUs (three on the first, two on the second),
/// so that one call has ranks reaching each other through shared memory on one GPU and
/// through peer-to-peer across the two, with the GPUs' ranks out of step.
#[test]
fn five_ranks_shared_unevenly_across_two_gpus() {
    let Some(g) = gpus() else { return };
    if g < 2 {
        eprintln!("one GPU: nothing uneven to share");
        return;
    }
    warm_kernel_cache();
    threads(5, 2, cases);
    threads_with(5, 2, simple_cases, Inputs::Exact, &simple_config());
}

/// Random inputs (every bit pattern of every datatype: NaN, infinities, subnormals, sums
/// and products that round) through every route a call takes — the direct kernel, the LL
/// exchanges, the ring and direct-exchange schedules on one and on many channels — each
/// output bit for bit what the CPU computes running the same route
/// (`check::gpu_reference`: the schedule the kernel ran, interpreted step by step with the
/// host executor's arithmetic, or the direct kernel's rank-order fold). Then the small
/// sizes with LL excluded, so that the ring runs every datatype and op, and the matrix on
/// lanes of hundreds of steps.
#[test]
fn every_route_matches_the_cpu_bit_for_bit() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let mut ranks = vec![2, 4];
    if g > 2 {
        ranks.push(g);
    }
    for n in ranks {
        threads_with(n, g, random_cases, Inputs::Random, &config());
    }
    threads_with(3, g, simple_cases, Inputs::Random, &simple_config());
    // Lanes of hundreds of steps (one channel, 16 KiB slots): the kernel keeps a window of
    // a lane's steps in shared memory and loads the next as it goes.
    let long = config_with(&[("NCCL_MAX_NCHANNELS", "1"), ("OXCCL_GPU_SLOT_BYTES", "16K")]);
    threads_with(4, g, random_cases, Inputs::Random, &long);
}

/// A tuner plugin (NCCL_TUNER_PLUGIN: the project's rules tuner, built here from
/// tuning/tests/plugin/rules_tuner.c with cc, ABI v5 as NCCL 2.28 reads) chooses what the
/// kernels run on one host: its rule for all_reduce (the ring over Simple on 2 channels)
/// takes a 64 KiB all_reduce off the one-hop kernel the rules pick; its rule for broadcast
/// names the tree, which the kernels do not run on one host, so the rules' route stands,
/// on the rule's 3 channels where that route is a schedule. Then the matrix with the
/// plugin loaded, every call checked.
#[test]
fn a_tuner_plugin_chooses_the_kernels_on_one_host() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let tuner = RulesTuner::new("allreduce,0,1099511627776,ring,simple,2,-1\nbroadcast,0,1099511627776,tree,simple,3,-1\n");
    let devices = [0, 1 % g];
    let comms = init_all(&devices, &tuner.config());
    assert_eq!(schedule_of(&comms[0], Collective::AllReduce, 16 << 10), (Algorithm::Ring, false, 2), "64 KiB all_reduce under the rule ring/simple on 2 channels");
    assert_eq!(comms[0].route(Collective::Broadcast, 16, DataType::Float32, 0).unwrap(), Route::Direct { ll128: false }, "broadcast's rule names the tree: the rules' one-hop kernel");
    let (algorithm, _, channels) = schedule_of(&comms[0], Collective::Broadcast, 4 << 20);
    assert_eq!((algorithm, channels), (Algorithm::Ring, 3), "16 MiB broadcast: the rules' ring on the rule's channels");
    run_matrix(comms, &devices, cases, Inputs::Exact, "threads, a tuner plugin");
}

/// The one-hop kernel over LL128 lines for every call (OXCCL_GPU_DIRECT_LL128_BYTES=0:
/// 128-byte lines of 15 data words and a flag, stored by 8 threads at once): the
/// random-input matrix on 2, 3 and 4 ranks (and one per GPU), every call bit for bit what
/// the CPU computes (the one-hop calls fold in rank order, as over LL), then the exact
/// matrix on 5 ranks sharing two GPUs.
#[test]
fn the_one_hop_kernel_over_ll128_matches_the_cpu_bit_for_bit() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let ll128 = config_with(&[("OXCCL_GPU_DIRECT_LL128_BYTES", "0")]);
    let mut ranks = vec![2, 3, 4];
    if g > 4 {
        ranks.push(g);
    }
    for n in ranks {
        threads_with(n, g, random_cases, Inputs::Random, &ll128);
    }
    threads_with(5, g.min(2), cases, Inputs::Exact, &ll128);
}

/// all_reduce in two shots (one launch: reduce_scatter in one hop, each folded line sent on
/// to every other rank; OXCCL_GPU_TWO_SHOT_BYTES=4M, so below 4 ranks too): the smallest
/// count past one hop that the ranks divide, and the largest up to 4 MiB, in every datatype
/// and op, in and out of place, random inputs, each bit for bit what the CPU computes (each
/// block folded in rank order), on 2, 3 and 4 ranks: every call in two shots
/// (OXCCL_GPU_DIRECT_LL128_BYTES=0), then at the default 512 KiB, where the calls whose
/// shots carry less take the ring over LL. The routes, worked out from the same settings,
/// say so.
#[test]
fn the_two_shot_all_reduce_matches_the_cpu_bit_for_bit() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    for (ll128_bytes, every) in [("0", true), ("512K", false)] {
        let settings = config_with(&[("OXCCL_GPU_TWO_SHOT_BYTES", "4M"), ("OXCCL_GPU_DIRECT_LL128_BYTES", ll128_bytes)]);
        for n in [2, 3, 4] {
            let routes = gpu::KernelRoutes::new(&settings, n, 1, false, None).unwrap();
            let shots = two_shot_cases(n).iter().filter(|case| routes.route(case.collective, case.count, case.dtype, 0).unwrap() == Route::TwoShot).count();
            assert!(shots > 0 && (!every || shots == two_shot_cases(n).len()), "{n} ranks, OXCCL_GPU_DIRECT_LL128_BYTES={ll128_bytes}: {shots} calls in two shots");
            threads_with(n, g, two_shot_cases, Inputs::Random, &settings);
        }
    }
}

/// all_reduce cases of [`the_two_shot_all_reduce_matches_the_cpu_bit_for_bit`]: per
/// datatype, the smallest count past one hop that `n` divides, and the largest up to 4 MiB.
fn two_shot_cases(n: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    for dtype in DataType::ALL {
        let row = Config::defaults().gpu_direct_limit(n) / (n - 1) / dtype.size();
        let (first, last) = ((row + 1).next_multiple_of(n), (4 << 20) / dtype.size() / n * n);
        cases.extend(check::full_matrix(n, &[first, last]).into_iter().filter(|c| c.collective == Collective::AllReduce && c.dtype == dtype));
    }
    cases
}

/// Between the GPUs of a host over LL: with the direct kernel off and OXCCL_GPU_LL_BYTES
/// past every size, the executor runs every call of the random-input matrix over its LL
/// slots (the ring and the direct exchange on one and on many channels, a rank's lines
/// written straight into its peer's slots), each output bit for bit what the CPU computes
/// running the same schedule, on 2, 3 and 4 ranks (and one per GPU); then NCCL_PROTO=LL
/// alone, which takes LL at every size (the exact matrix at 1 MiB per rank).
#[test]
fn the_executor_over_ll_between_gpus_matches_the_cpu_bit_for_bit() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let ll = config_with(&[("OXCCL_GPU_DIRECT_BYTES", "0"), ("OXCCL_GPU_LL_BYTES", "1G")]);
    let mut ranks = vec![2, 3, 4];
    if g > 4 {
        ranks.push(g);
    }
    for n in ranks {
        threads_with(n, g, random_cases, Inputs::Random, &ll);
    }
    threads_with(3, g, ll_alone_cases, Inputs::Exact, &config_with(&[("NCCL_PROTO", "LL")]));
}

/// OXCCL_KERNEL_TRACE: each rank writes its communicator's executor kernel timeline when
/// the communicator goes: every launch of the ring's all_reduce with its lanes, every step
/// of lane 0 stamped at its four moments in order, and the per-step medians.
#[test]
fn the_kernel_timeline_stamps_every_step_in_order() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    let (dir, traced) = kernel_traced("kernel-trace");
    threads_with(2, g, |n| check::large_cases(n, 4 << 20).into_iter().filter(|c| c.collective == Collective::AllReduce && c.dtype == DataType::Float32).collect(), Inputs::Exact, &traced);
    settle();
    let files: Vec<std::path::PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(files.len(), 2, "one timeline per rank: {files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        assert!(text.starts_with("# oxccl kernel timeline, rank "), "{}: {text}", file.display());
        // The cases' all_reduce: 4 MiB and 3 floats a rank.
        assert!(text.contains("all_reduce 4194316 B") && text.contains("median ns per step"), "{}: {text}", file.display());
        // Lane 0's steps: four stamps each, none missing, in order, each step after the last.
        let mut last = 0u64;
        let mut steps = 0;
        let mut in_lane0 = false;
        for line in text.lines() {
            if line.starts_with("launch ") {
                last = 0;
            } else if let Some(rest) = line.strip_prefix("  lane ") {
                in_lane0 = rest.starts_with("0:");
            } else if let Some(rest) = line.strip_prefix("    step ").filter(|_| in_lane0) {
                let stamps: Vec<u64> = rest.split_once(": ").unwrap().1.split(' ').map(|t| t.strip_prefix('+').unwrap_or_else(|| panic!("{}: a stamp missing in {line}", file.display())).parse().unwrap()).collect();
                assert_eq!(stamps.len(), 4, "{line}");
                assert!(stamps.windows(2).all(|w| w[0] <= w[1]) && stamps[0] >= last, "{}: out of order: {line}", file.display());
                last = stamps[3];
                steps += 1;
            }
        }
        assert!(steps > 0, "{}: no step of lane 0\n{text}", file.display());
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every collective but the exchanges (whose large blocks need Simple) at 1 MiB per rank.
fn ll_alone_cases(n: usize) -> Vec<Case> {
    check::large_cases(n, 1 << 20).into_iter().filter(|c| !matches!(c.collective, Collective::AllToAll | Collective::Gather | Collective::Scatter)).collect()
}

/// Every collective at 256 MiB + 3 elements per rank (in and out of place), and all_reduce
/// at 1 GiB + 12 bytes: 2 ranks on 2 GPUs, checked like the matrix.
fn large(n: usize) -> Vec<Case> {
    let mut cases: Vec<Case> = check::large_cases(n, 256 << 20).into_iter().filter(|c| c.dtype == DataType::Float32).collect();
    cases.push(Case { collective: Collective::AllReduce, dtype: DataType::Float32, op: ReduceOp::Sum, count: (1 << 28) + 3, root: 0, in_place: false });
    cases
}

#[test]
fn large_messages() {
    let Some(g) = gpus() else { return };
    warm_kernel_cache();
    threads(2, g, large);
}

/// alltoall with one rank in place and the other out of place (each decides alone; their
/// plans pair: in place a lane a channel sends and receives, out of place two channels a
/// lane on 2 ranks' 128): 2 ranks, blocks from 64 KiB and 4 bytes (the Simple exchange) to
/// 16 MiB and 4 bytes (128 channels), each element checked; a wrong pairing deadlocks (the
/// collective timeout ends it) or corrupts.
#[test]
fn alltoall_in_place_on_one_rank_only() {
    let Some(g) = gpus() else { return };
    let comms = init_all(&[0, 1 % g], &config_with(&[("OXCCL_COLL_TIMEOUT_MS", "20000")]));
    let value = |from: usize, to: usize, i: usize| (from * 1_000_000 + to * 100_000 + i % 99_991) as f32;
    std::thread::scope(|s| {
        for c in &comms {
            s.spawn(move || {
                let (rank, n) = (c.rank(), c.nranks());
                let stream = c.stream().unwrap();
                // Allocated once: freeing GPU memory mid-run would wait for a kernel of a
                // rank sharing the GPU (see Buffers).
                let counts = [(64 << 10) / 4 + 1, (1 << 20) + 1, (4 << 20) + 1];
                let most = n * counts[2] * 4;
                let send = c.alloc(most).unwrap();
                let recv = if rank == 0 { None } else { Some(c.alloc(most).unwrap()) };
                let out = recv.as_ref().unwrap_or(&send);
                for count in counts {
                    let input: Vec<f32> = (0..n).flat_map(|to| (0..count).map(move |i| value(rank, to, i))).collect();
                    let bytes: Vec<u8> = bytemuck::cast_slice(&input).to_vec();
                    send.upload(&bytes).unwrap();
                    // SAFETY: buffers of n * count floats, synchronized before they are read or freed.
                    unsafe { c.launch_collective(Collective::AllToAll, send.ptr(), out.ptr(), count, DataType::Float32, ReduceOp::Sum, 0, stream.raw()).unwrap() };
                    c.wait(&stream).unwrap();
                    let mut got = vec![0u8; bytes.len()];
                    out.download(&mut got).unwrap();
                    let got: &[f32] = bytemuck::cast_slice(&got);
                    for from in 0..n {
                        let wrong = (0..count).filter(|&i| got[from * count + i] != value(from, rank, i)).count();
                        assert_eq!(wrong, 0, "rank {rank} ({}): {wrong} wrong of {count} from rank {from}", if rank == 0 { "in place" } else { "out of place" });
                    }
                }
            });
        }
    });
    destroy_all(comms);
}
