//! NCCL's tuning model (`ncclTopoTuneModel` and `ncclTopoGetAlgoTime`, NCCL 2.28), for the
//! GPU paths: for every collective × algorithm × protocol, a latency (µs) and a bandwidth
//! (GB/s) from the searched graphs and per-architecture constants; a call of `n` bytes
//! costs `latency × ops + n / (1000 × bandwidth)`.
//!
//! - bandwidth: the graph's channels × per-channel speed (within the host for up to 2
//!   hosts, across hosts beyond), then refinements per algorithm and protocol (LL at half
//!   the bus and at most `llMaxBws`; LL128 at 92% and a per-channel cap; trees at 92% and a
//!   per-channel cap, 85% when the tree graph fell back to the plain tree pattern; PAT at
//!   75%), converted from bus to algorithm bandwidth (`nranks / steps` for rings, half for
//!   trees);
//! - latency: a base per algorithm and protocol, plus per step the NVLink/PCI latency
//!   within a host and the network's (its latency counted twice for Simple's flush) across
//!   hosts, with at least NCCL_NET_OVERHEAD per ring step across hosts;
//! - protocols: LL128 only where NCCL enables it (sm70+, one GPU generation, NVLink-class
//!   paths within the host, PXN or better to the NIC on sm90+); NVLS and CollNet need
//!   hardware oxccl does not drive, so their bandwidth is 0 (their latencies are still
//!   computed, as NCCL prints them);
//! - corrections: the tree's measured factor per size (64 B .. 256 MiB), the ring's
//!   plateau across hosts, FP8 rings over more than 8 ranks priced ×1024.

use std::fmt::Write;

use oxccl_topology::search::{Graph, Pattern};
use oxccl_topology::{CpuArch, CpuVendor, PathKind};

use crate::collective::Collective;
use crate::names::{Algorithm, Protocol};
use crate::table::CostTable;

/// NCCL's tuner constants (`ncclTunerConstants_v5_t`, the layout tuner plugins v5 and v6
/// may edit in `init`). Index order: algorithms as [`Algorithm`], protocols as
/// [`Protocol`], links NVLink/PCI/NET, generations Volta/Ampere/Hopper/Blackwell, scales
/// 1 node/2 nodes/4+ nodes.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct Constants {
    pub base_latencies: [[f64; 3]; 7],
    pub hw_latencies: [[[f64; 3]; 7]; 3],
    pub ll_max_bws: [[f64; 3]; 4],
    pub per_channel_max_ring_ll128_bws: [[f64; 3]; 4],
    pub per_channel_max_tree_ll128_bws: [[f64; 3]; 4],
    pub per_channel_max_tree_bws: [[f64; 3]; 4],
    pub per_channel_max_nvls_tree_bws: [[f64; 3]; 4],
}
const _: () = assert!(std::mem::size_of::<Constants>() == (21 + 63 + 60) * 8);

const NVLINK: usize = 0;
const PCI: usize = 1;
const NET: usize = 2;

impl Default for Constants {
    /// NCCL 2.28's defaults.
    fn default() -> Constants {
        Constants {
            base_latencies: [[6.8, 14.0, 8.4], [6.6, 14.0, 8.4], [0.0; 3], [0.0; 3], [0.0; 3], [0.0; 3], [8.0, 8.0, 8.0]],
            hw_latencies: [
                [[0.6, 1.25, 4.0], [0.6, 1.9, 3.4], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8], [0.0, 0.0, 25.0], [0.0, 0.0, 25.0], [0.0, 0.0, 4.0]],
                [[1.0, 1.9, 4.0], [1.0, 2.5, 5.7], [0.0, 0.0, 3.7], [0.0, 0.0, 2.8], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 4.0]],
                [[5.0, 8.5, 14.0], [2.7, 4.0, 14.0], [0.0, 0.0, 31.0], [0.0, 0.0, 30.0], [0.0, 0.0, 18.0], [0.0, 0.0, 20.9], [0.0, 0.0, 14.0]],
            ],
            ll_max_bws: [[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [282.0, 90.0, 70.0]],
            per_channel_max_ring_ll128_bws: [[20.0; 3], [20.0; 3], [36.7; 3], [73.4, 34.6, 73.4]],
            per_channel_max_tree_ll128_bws: [[20.0; 3], [20.0; 3], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]],
            per_channel_max_tree_bws: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0]],
            per_channel_max_nvls_tree_bws: [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 43.8]],
        }
    }
}

/// NVLS efficiency per generation.
const NVLS_EFFICIENCY: [f64; 4] = [0.0, 0.0, 0.85, 0.74];

/// The tree's correction per protocol and log2(bytes / 64), 64 B .. 256 MiB.
const TREE_CORRECTION: [[f32; 23]; 3] = [
    [1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0],
    [1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0],
    [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9],
];

/// The communicator as the model sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelInput {
    pub nranks: usize,
    pub nnodes: usize,
    /// Lowest and highest compute capability (90 for sm90).
    pub cc_min: i32,
    pub cc_max: i32,
    pub cpu_arch: CpuArch,
    pub cpu_vendor: CpuVendor,
    /// The searched ring and tree graphs (PAT runs on the tree's).
    pub ring: Graph,
    pub tree: Graph,
    /// The communicator's channel count (after the layout).
    pub channels: usize,
    /// NCCL_NET_OVERHEAD in ns, when set.
    pub net_overhead_ns: Option<f64>,
    /// NCCL_PAT_ENABLE (None: automatic, PAT with one GPU per host).
    pub pat_enable: Option<bool>,
}

/// NCCL's `maxThreads` and thresholds, and its per-collective latency and bandwidth tables.
#[derive(Clone, Debug, PartialEq)]
pub struct NcclModel {
    pub input: ModelInput,
    /// `[function 0..5][algorithm][protocol]`, µs.
    pub latency: [[[f32; 3]; 7]; 5],
    /// `[function 0..5][algorithm][protocol]`, GB/s (0: not available).
    pub bandwidth: [[[f32; 3]; 7]; 5],
    pub max_threads: [[i32; 3]; 7],
    pub thread_thresholds: [[i64; 3]; 7],
}

const FUNCTIONS: [Collective; 5] = [Collective::Broadcast, Collective::Reduce, Collective::AllGather, Collective::ReduceScatter, Collective::AllReduce];

fn log2i(n: usize) -> i32 {
    if n == 0 {
        -1
    } else {
        (usize::BITS - 1 - n.leading_zeros()) as i32
    }
}

impl NcclModel {
    /// NCCL's `ncclTopoTuneModel` with `constants` (defaults, or as a tuner plugin left them).
    pub fn new(input: ModelInput, constants: &Constants) -> NcclModel {
        let mut model = NcclModel { latency: [[[0.0; 3]; 7]; 5], bandwidth: [[[0.0; 3]; 7]; 5], max_threads: [[0; 3]; 7], thread_thresholds: [[0; 3]; 7], input };
        let input = &model.input;
        // CollNet and NVLS graphs are not searched: NCCL's zeroed graphs.
        let unsearched = Graph::empty(Pattern::Tree);
        let graphs = |a: Algorithm| -> &Graph {
            match a {
                Algorithm::Tree | Algorithm::Pat => &input.tree,
                Algorithm::Ring => &input.ring,
                _ => &unsearched,
            }
        };
        let ring = &input.ring;
        let simple_default = if ring.bw_intra * ring.channels.len() as f32 <= 12.0 { 256 } else { 512 };
        let t = &mut model.max_threads;
        t[Algorithm::Ring as usize] = [512, 640, simple_default];
        t[Algorithm::Tree as usize] = [512, 640, 512];
        for a in [Algorithm::CollNetDirect, Algorithm::CollNetChain, Algorithm::Nvls, Algorithm::NvlsTree] {
            t[a as usize][Protocol::Simple as usize] = 640;
        }
        let (nranks, nnodes) = (input.nranks, input.nnodes.max(1));
        for a in 0..7 {
            model.thread_thresholds[a] = [8, 8, 64];
        }
        model.thread_thresholds[Algorithm::Ring as usize][Protocol::Ll as usize] *= nranks as i64;
        model.thread_thresholds[Algorithm::CollNetDirect as usize][Protocol::Simple as usize] = 512;
        model.thread_thresholds[Algorithm::CollNetChain as usize][Protocol::Simple as usize] = 512;
        if nranks <= 1 {
            return model;
        }
        let cc = |c: i32| if c >= 100 { 3 } else if c >= 90 { 2 } else if c >= 80 { 1 } else { 0 };
        let cc_index = cc(input.cc_min);
        let scale = if nnodes <= 2 { nnodes - 1 } else { 2 };
        let ll_index = if nnodes == 1 { cc_index } else if input.cpu_vendor == CpuVendor::Amd { 1 } else { 0 };
        let ll_max = constants.ll_max_bws[ll_index][scale];
        let per_ch_tree = constants.per_channel_max_tree_bws[cc_index][scale];
        let per_ch_ring_ll128 = constants.per_channel_max_ring_ll128_bws[cc_index][scale];
        let per_ch_tree_ll128 = constants.per_channel_max_tree_ll128_bws[cc_index][scale];
        let per_ch_nvls_tree = constants.per_channel_max_nvls_tree_bws[cc_index][scale];
        let mut hw_lat = constants.hw_latencies;
        if input.cpu_arch == CpuArch::Power {
            hw_lat[PCI][Algorithm::Tree as usize][Protocol::Simple as usize] = hw_lat[PCI][Algorithm::Ring as usize][Protocol::Simple as usize];
        }
        let ppn = nranks as f32 / nnodes as f32;
        let pat_enabled = input.cc_min >= 60 && input.pat_enable.unwrap_or(nnodes == nranks);
        let net_overhead = input.net_overhead_ns.map(|ns| ns * 0.001).unwrap_or(if input.cpu_arch == CpuArch::X86 && input.cpu_vendor == CpuVendor::Amd { 2.0 } else { 1.0 });
        for (f, &coll) in FUNCTIONS.iter().enumerate() {
            let nsteps = match coll {
                Collective::AllReduce => 2 * (nranks - 1),
                Collective::AllGather | Collective::ReduceScatter => nranks - 1,
                _ => nranks,
            };
            for a in Algorithm::NCCL {
                let ring_like_only = matches!(coll, Collective::Broadcast | Collective::Reduce) && a != Algorithm::Ring;
                let gather_like = matches!(coll, Collective::AllGather | Collective::ReduceScatter);
                if ring_like_only || (gather_like && !matches!(a, Algorithm::Pat | Algorithm::Ring | Algorithm::Nvls | Algorithm::CollNetDirect)) || (coll == Collective::AllReduce && a == Algorithm::Pat) {
                    continue;
                }
                let g = graphs(a);
                let intra_hw = if g.type_intra == PathKind::Nvl { NVLINK } else { PCI };
                let hw = if nnodes == 1 { intra_hw } else { NET };
                for p in Protocol::ALL {
                    let (ai, pi) = (a as usize, p as usize);
                    if matches!(a, Algorithm::Nvls | Algorithm::NvlsTree) && p != Protocol::Simple {
                        continue;
                    }
                    if gather_like && a == Algorithm::Pat && (p != Protocol::Simple || !pat_enabled) {
                        continue;
                    }
                    let collnet = matches!(a, Algorithm::CollNetDirect | Algorithm::CollNetChain);
                    let mut bw = if nnodes <= 2 || collnet { g.bw_intra } else { g.bw_inter } as f64;
                    if matches!(a, Algorithm::Nvls | Algorithm::NvlsTree) {
                        if g.channels.len() < 2 {
                            continue;
                        }
                        let n = g.channels.len() as f64;
                        let mut intra = g.bw_intra as f64 * NVLS_EFFICIENCY[cc_index] * (n - 1.0) / n;
                        intra *= if coll == Collective::AllReduce { 2.0 } else { (ppn as f64 - 1.0) / ppn as f64 };
                        let inter = g.bw_inter as f64 * if nnodes <= 2 && a == Algorithm::NvlsTree { 2.0 } else { 1.0 };
                        bw = intra.min(inter).min(if a == Algorithm::NvlsTree { per_ch_nvls_tree } else { f64::MAX });
                    }
                    let channels = g.channels.len() as f64;
                    let mut bus = channels * bw;
                    if a == Algorithm::Ring && p == Protocol::Ll {
                        bus = ll_max.min(bus * 0.5);
                    }
                    if a == Algorithm::Ring && p == Protocol::Ll128 {
                        bus = (bus * 0.92).min(channels * per_ch_ring_ll128);
                    }
                    if a == Algorithm::Tree && coll == Collective::AllReduce {
                        bus = (bus * 0.92).min(channels * per_ch_tree);
                    }
                    if a == Algorithm::Tree && p == Protocol::Ll {
                        bus = (bus / 3.8).min(ll_max);
                    }
                    if a == Algorithm::Tree && p == Protocol::Ll128 {
                        bus = (bus * if nnodes == 1 { 7.0 / 9.0 } else { 120.0 / 128.0 }).min(channels * per_ch_tree_ll128);
                    }
                    if a == Algorithm::Tree && input.tree.pattern == Pattern::Tree {
                        bus *= 0.85;
                    }
                    if a == Algorithm::Pat {
                        bus *= 0.75;
                    }
                    if collnet && p != Protocol::Simple {
                        bus = 0.0;
                    }
                    // CollNet and NVLS need a collective network and NVLink SHARP: not available.
                    if collnet || matches!(a, Algorithm::Nvls | Algorithm::NvlsTree) {
                        bus = 0.0;
                    }
                    if !(a != Algorithm::Ring && gather_like) {
                        bus *= if matches!(a, Algorithm::Ring | Algorithm::Nvls | Algorithm::NvlsTree) { nranks as f64 / nsteps as f64 } else { 0.5 };
                    }
                    model.bandwidth[f][ai][pi] = bus as f32;
                    let mut latency = constants.base_latencies[ai][pi];
                    let intra_lat = hw_lat[intra_hw][ai][pi];
                    let mut inter_lat = if ppn == 1.0 { hw_lat[NET][Algorithm::Tree as usize][pi] } else { hw_lat[NET][ai][pi] };
                    inter_lat += g.latency_inter as f64;
                    if p == Protocol::Simple {
                        inter_lat += g.latency_inter as f64;
                    }
                    let local = (nranks / nnodes) as f64 - 1.0;
                    match a {
                        Algorithm::Ring => {
                            let mut lat = hw_lat[hw][ai][pi];
                            if matches!(coll, Collective::Reduce | Collective::Broadcast) {
                                if g.same_channels {
                                    latency += lat;
                                } else {
                                    if p == Protocol::Simple {
                                        lat = hw_lat[hw][Algorithm::Tree as usize][pi];
                                    }
                                    latency += nsteps as f64 * lat;
                                }
                            } else {
                                let mut overhead = 0.0;
                                if nnodes > 1 {
                                    overhead = net_overhead * if p == Protocol::Simple { 3.0 } else { 1.0 };
                                }
                                let intra = intra_lat.max(overhead);
                                let inter_steps = if nnodes == 1 { 0 } else if coll == Collective::AllReduce { 2 * (nnodes - 1) } else { nnodes - 1 };
                                latency += (nsteps - inter_steps) as f64 * intra + inter_steps as f64 * inter_lat;
                            }
                        }
                        Algorithm::Tree => {
                            if coll == Collective::AllReduce {
                                latency += 2.0 * (local * intra_lat + log2i(nnodes) as f64 * inter_lat);
                            }
                        }
                        Algorithm::CollNetDirect => latency += 2.0 * (local.min(1.0) * intra_lat + local * 0.4) + inter_lat,
                        Algorithm::CollNetChain => latency += 2.0 * local * intra_lat + inter_lat,
                        Algorithm::Nvls => {
                            latency = intra_lat;
                            if nnodes > 1 {
                                latency += inter_lat;
                            }
                        }
                        Algorithm::NvlsTree => latency += intra_lat + 2.0 * log2i(nnodes) as f64 * inter_lat,
                        Algorithm::Pat => {
                            if gather_like {
                                latency += log2i(nnodes) as f64 * (inter_lat / 3.5) + nranks as f64 * 2.8;
                            }
                        }
                        Algorithm::Direct | Algorithm::Doubling => {}
                    }
                    model.latency[f][ai][pi] = latency as f32;
                }
            }
        }
        // LL128 only where NCCL enables it by default.
        for (f, _) in FUNCTIONS.iter().enumerate() {
            for a in Algorithm::NCCL {
                let g = graphs(a);
                let inter_ok = if input.cc_min >= 90 { g.type_inter <= PathKind::Pxn } else { g.type_inter <= PathKind::Pxb };
                let enabled = inter_ok && g.type_intra <= PathKind::Nvb && input.cc_min == input.cc_max && input.cc_min >= 70;
                if !enabled {
                    model.bandwidth[f][a as usize][Protocol::Ll128 as usize] = 0.0;
                }
                if nnodes == 1 && a == Algorithm::NvlsTree {
                    model.bandwidth[f][a as usize] = [0.0; 3];
                }
            }
        }
        model
    }

    fn function_index(collective: Collective) -> Option<usize> {
        FUNCTIONS.iter().position(|&c| c == collective)
    }

    /// NCCL's `ncclTopoGetAlgoTime`: µs for `bytes`, or None where the pair has no bandwidth.
    pub fn time(&self, collective: Collective, algorithm: Algorithm, protocol: Protocol, bytes: usize, pipe_ops: usize) -> Option<f32> {
        let f = Self::function_index(collective)?;
        if algorithm == Algorithm::Direct {
            return None;
        }
        let (a, p) = (algorithm as usize, protocol as usize);
        let mut bw = self.bandwidth[f][a][p];
        let mut lat = self.latency[f][a][p];
        if bw == 0.0 {
            return None;
        }
        let log = log2i(bytes >> 6);
        if algorithm == Algorithm::Tree && collective == Collective::AllReduce && (0..23).contains(&log) {
            bw *= TREE_CORRECTION[p][log as usize];
        }
        let channels = self.input.channels.max(1);
        if algorithm == Algorithm::Ring && protocol == Protocol::Simple && self.input.nnodes > 1 && collective == Collective::AllReduce && bytes / (channels * self.input.nranks) >= 64 {
            lat *= if self.input.cc_min < 80 { 1.9 } else { 1.4 };
        }
        let ops = if algorithm == Algorithm::Ring { pipe_ops } else { pipe_ops.div_ceil(32) } as f32;
        Some(lat * ops + bytes as f32 / (1000.0 * bw))
    }

    /// NCCL's cost table for a call (`updateCollCostTable`): one rank runs Ring/Simple at no
    /// cost; CollNet and NVLS are left out (no collective network, no NVLink SHARP); FP8
    /// rings over more than 8 ranks cost ×1024 (their reductions lose precision).
    pub fn table(&self, collective: Collective, bytes: usize, pipe_ops: usize, fp8: bool) -> CostTable {
        let mut table = CostTable::default();
        if self.input.nranks <= 1 {
            table.set(Algorithm::Ring, Protocol::Simple, Some(0.0));
            return table;
        }
        for a in [Algorithm::Tree, Algorithm::Ring, Algorithm::Pat] {
            for p in Protocol::ALL {
                let mut t = self.time(collective, a, p, bytes, pipe_ops);
                if fp8 && a == Algorithm::Ring && self.input.nranks > 8 {
                    t = t.map(|t| t * 1024.0);
                }
                table.set(a, p, t);
            }
        }
        table
    }

    /// The channels and threads NCCL runs a choice with (`topoGetAlgoInfo`): fewer channels,
    /// then fewer threads, while each thread would get less than its threshold of bytes.
    pub fn channels_and_threads(&self, algorithm: Algorithm, protocol: Protocol, bytes: usize) -> (usize, usize) {
        let (a, p) = (algorithm as usize % 7, protocol as usize);
        let mut nc = self.input.channels.max(1);
        let mut nt = self.max_threads[a][p].max(32) as usize;
        let threshold = self.thread_thresholds[a][p].max(1) as usize;
        while bytes < nc * nt * threshold && nc >= 2 {
            nc -= 1;
        }
        while bytes < nc * nt * threshold && nt % 128 == 0 {
            nt /= 2;
        }
        if protocol == Protocol::Simple {
            nt += match algorithm {
                Algorithm::Ring => 32,
                Algorithm::Tree => 128,
                _ => 0,
            };
        }
        nt = nt.max(96);
        if matches!(algorithm, Algorithm::Tree | Algorithm::Pat) {
            nt = 640;
        }
        (nc, nt)
    }

    /// The tables as NCCL's TUNING lines print them (`latency/bandwidth` per function and pair).
    pub fn print(&self) -> String {
        let mut out = String::new();
        for block in 0..3 {
            let algos: Vec<Algorithm> = (0..3).filter_map(|i| Algorithm::NCCL.get(block * 3 + i).copied()).collect();
            let mut line = "  Algorithm   |".to_string();
            for a in &algos {
                let _ = write!(line, " {:>14}   {:>14}   {:>14} |", "", a.nccl_name(), "");
            }
            out.push_str(&line);
            out.push('\n');
            let mut line = "  Protocol    |".to_string();
            for _ in 0..3 {
                for p in Protocol::ALL {
                    let _ = write!(line, " {:>14} |", p.nccl_name());
                }
            }
            out.push_str(&line);
            out.push('\n');
            let mut line = " Max NThreads |".to_string();
            for a in &algos {
                for p in Protocol::ALL {
                    let _ = write!(line, " {:>14} |", self.max_threads[*a as usize][p as usize]);
                }
            }
            out.push_str(&line);
            out.push('\n');
            for (f, c) in FUNCTIONS.iter().enumerate() {
                let mut line = format!("{:>13} |", c.nccl_name());
                for a in &algos {
                    for p in Protocol::ALL {
                        let _ = write!(line, "{:>8.1}/{:>6.1} |", self.latency[f][*a as usize][p as usize], self.bandwidth[f][*a as usize][p as usize]);
                    }
                }
                out.push_str(&line);
                out.push('\n');
            }
        }
        out
    }
}
