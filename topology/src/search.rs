//! The search for channels (NCCL's `ncclTopoCompute`, 2.28): for a pattern (ring or tree),
//! the most channels × bandwidth it can lay over the links, each channel an order of this
//! host's GPUs, with the NIC it enters by and the NIC it leaves by when ranks live on other
//! hosts.
//!
//! How it searches, as NCCL does:
//! - it starts at the highest speed of a per-generation list (sm90: 60, 50, 40, ... GB/s
//!   within a host; 48, 45, ... across hosts) that the GPUs' links can carry, and at the best
//!   path types present; each channel reserves its speed on every link it crosses (PCIe
//!   links through an Intel host bridge pay 6/5 for P2P's small packets), so channels are
//!   added until a link is full;
//! - the order tried: the PCI order first, then GPUs sorted by bandwidth to the NIC, to
//!   each other, and hop count; on NVSwitch systems only the ring neighbours by index;
//!   later channels first replay the first channel's order ("same channels");
//! - when a search finds nothing, it relaxes in turn: different channel orders, (sm90) a
//!   plain tree instead of a balanced tree, worse path types within the host, then towards
//!   the NIC, then a ring may leave by another NIC than it entered by (NCCL_CROSS_NIC=2),
//!   then lower speeds; each search step is bounded (2^14, 2^8 for replays, 2^19 in all);
//! - a found solution is then pushed up: ring channels are tried at higher speeds; trees
//!   may raise their speed within the host up to twice their network speed; channels of
//!   25 GB/s or more are duplicated (halving their speed) up to the maximum;
//! - NICs: the rings and trees leave by the NIC each GPU is nearest (spread over GPUs that
//!   share NICs by mirrored device number); with NCCL_CROSS_NIC=0 a channel must leave by
//!   the NIC (same port) it entered by, with 2 (the default) odd channels reuse the even
//!   channel's NICs swapped, so rings cross rails only in pairs.
//!
//! NVLS and CollNet graphs are not searched: oxccl has no NVLink SHARP multicast and no
//! collective network, and reports those algorithms as unavailable.

use crate::paths::{Hop, PathKind, Topology};
use crate::system::{CpuArch, CpuVendor, Detail, LinkKind, NodeKind, NodeRef};

/// What a graph is searched for (NCCL's `NCCL_TOPO_PATTERN_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pattern {
    /// Tree parent and one child on the first GPU, the other child on the second (NIC traffic spread over two GPUs).
    BalancedTree = 1,
    /// Tree parent on the first GPU, children on the second.
    SplitTree = 2,
    /// All NIC traffic through one GPU.
    Tree = 3,
    Ring = 4,
}

impl Pattern {
    /// NCCL's name.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::BalancedTree => "balanced tree",
            Pattern::SplitTree => "split tree",
            Pattern::Tree => "tree",
            Pattern::Ring => "ring",
        }
    }
}

/// One channel: the GPUs' ranks in order, and the NETs (ids) it enters and leaves by.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    pub ranks: Vec<i32>,
    /// (in, out) NET node ids; (0, 0) within one host.
    pub nets: (u64, u64),
}

/// A searched graph (NCCL's `ncclTopoGraph`).
#[derive(Clone, Debug, PartialEq)]
pub struct Graph {
    /// The pattern asked for.
    pub pattern: Pattern,
    /// 0: a channel leaves by the NIC it came in by; 1: it may leave by any; 2: only in pairs (rings).
    pub cross_nic: u8,
    pub min_channels: usize,
    pub max_channels: usize,
    /// The channels found.
    pub channels: Vec<Channel>,
    /// GB/s per channel within the host and across hosts.
    pub bw_intra: f32,
    pub bw_inter: f32,
    /// The NIC's latency (µs) added to network steps.
    pub latency_inter: f32,
    pub type_intra: PathKind,
    pub type_inter: PathKind,
    pub same_channels: bool,
}

impl Graph {
    /// A graph that was not searched (NCCL zeroes such graphs): no channels, no bandwidth.
    pub fn empty(pattern: Pattern) -> Graph {
        Graph {
            pattern,
            cross_nic: 0,
            min_channels: 0,
            max_channels: 0,
            channels: Vec::new(),
            bw_intra: 0.0,
            bw_inter: 0.0,
            latency_inter: 0.0,
            type_intra: PathKind::Loc,
            type_inter: PathKind::Loc,
            same_channels: false,
        }
    }
}

/// The graph while searched: channel slots as NCCL keeps them (the one being built sits
/// past the `count` complete ones), the pattern tried, and the hop count that breaks ties.
#[derive(Clone, Debug)]
struct Work {
    pattern: Pattern,
    cross_nic: u8,
    min_channels: usize,
    max_channels: usize,
    slots: Vec<Channel>,
    count: usize,
    bw_intra: f32,
    bw_inter: f32,
    latency_inter: f32,
    type_intra: PathKind,
    type_inter: PathKind,
    same_channels: bool,
    hops: f32,
}

/// Knobs of the search, with NCCL's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct SearchSettings {
    /// NCCL_CROSS_NIC (0, 1, or 2: rings cross rails only in pairs).
    pub cross_nic: u8,
    /// NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS do not apply here: they clamp the result.
    pub max_channels: usize,
}

impl Default for SearchSettings {
    fn default() -> SearchSettings {
        SearchSettings { cross_nic: 2, max_channels: 64 }
    }
}

const GLOBAL_TIMEOUT: i64 = 1 << 19;
const TIMEOUT: i64 = 1 << 14;
const TIMEOUT_TREE: i64 = 1 << 14;
const TIMEOUT_SAME_CHANNELS: i64 = 1 << 8;

const SPEED_INTRA: &[f32] = &[40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0];
const SPEED_INTER: &[f32] = &[48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.4, 1.2, 0.24, 0.12];
const SM90_SPEED_INTRA: &[f32] = &[60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 11.0, 6.0, 3.0];
const SM90_SPEED_INTER: &[f32] = &[48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12];
const SM100_SPEED_INTRA: &[f32] = &[90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0];
const SM100_SPEED_INTER: &[f32] = &[96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5, 15.0, 12.0, 6.0, 3.0, 2.4, 1.2, 0.24, 0.12];

#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Free,
    /// The GPUs in PCI (index) order.
    Pci,
    /// The previous channel's order.
    Replay,
}

/// The mutable state of one search: link and NIC bandwidths left, GPUs used per channel.
struct Search<'t> {
    topology: Topology,
    original: &'t Topology,
    used: Vec<u64>,
    net_bandwidth: Vec<f32>,
    inter: bool,
    host_count: usize,
}

/// Searches `pattern` over `topology` for a communicator of `nranks` ranks (more ranks than
/// this host's GPUs: the channels go through the network), between `min_channels` and
/// `max_channels` channels.
pub fn compute(topology: &Topology, nranks: usize, pattern: Pattern, min_channels: usize, max_channels: usize, settings: &SearchSettings) -> Graph {
    let ngpus = topology.system.of(NodeKind::Gpu).len();
    let nnets = topology.system.of(NodeKind::Net).len();
    let inter = ngpus != nranks;
    let mut search = Search {
        topology: topology.clone(),
        original: topology,
        used: vec![0; ngpus],
        net_bandwidth: topology.system.of(NodeKind::Net).iter().map(|n| if let Detail::Net { bandwidth, .. } = n.detail { bandwidth } else { 0.0 }).collect(),
        inter,
        host_count: topology.system.host_hashes.len().max(1),
    };
    let (max_bw, total_bw) = search.bandwidth_bounds();
    let cross_nic = if nnets > 1 && matches!(pattern, Pattern::Ring | Pattern::BalancedTree | Pattern::SplitTree) { settings.cross_nic } else { 0 };
    let (mut min_intra, mut min_inter) = (PathKind::Loc, PathKind::Pix);
    let (mut max_intra, mut max_inter) = (PathKind::Sys, PathKind::Sys);
    if ngpus > 1 {
        (min_intra, max_intra) = topology.gpu_path_extremes(NodeKind::Gpu);
    }
    if inter {
        (min_inter, max_inter) = topology.gpu_path_extremes(NodeKind::Net);
        max_intra = max_inter;
    }
    let max_channels = max_channels.min(settings.max_channels).max(1);
    let mut graph = Work {
        pattern,
        cross_nic: u8::from(cross_nic == 1),
        min_channels: min_channels.max(1),
        max_channels,
        slots: vec![Channel { ranks: vec![-1; ngpus], nets: (0, 0) }; max_channels + 1],
        count: 0,
        bw_intra: 0.0,
        bw_inter: 0.0,
        latency_inter: 0.0,
        type_intra: min_intra,
        type_inter: min_inter,
        same_channels: true,
        hops: 0.0,
    };
    let (cc_min, _) = topology.system.compute_capability();
    if ngpus == 1 && pattern != Pattern::Ring {
        graph.pattern = Pattern::Tree;
    }
    if graph.pattern == Pattern::Ring && topology.split_nvlink() && graph.max_channels >= 2 && graph.min_channels == 1 {
        graph.min_channels = 2;
    }
    let speeds = match (inter, cc_min) {
        (false, c) if c >= 100 => SM100_SPEED_INTRA,
        (false, c) if c >= 90 => SM90_SPEED_INTRA,
        (false, _) => SPEED_INTRA,
        (true, c) if c >= 100 => SM100_SPEED_INTER,
        (true, c) if c >= 90 => SM90_SPEED_INTER,
        (true, _) => SPEED_INTER,
    };
    let mut tmp = graph.clone();
    let mut pass = 1;
    let mut speed = 0;
    let total = if ngpus > 1 && graph.pattern != Pattern::Ring { total_bw * ngpus as f32 / (ngpus as f32 - 1.0) } else { total_bw };
    while (speeds[speed] > max_bw || speeds[speed] * graph.min_channels as f32 > total) && speed < speeds.len() - 1 {
        speed += 1;
    }
    tmp.bw_intra = speeds[speed];
    tmp.bw_inter = speeds[speed];
    let mut global_timeout = GLOBAL_TIMEOUT;
    let (arch, vendor, _) = topology.system.cpu_type();
    // NCCL's `goto search` / `goto done` loop: `continue` searches again with `tmp` changed.
    loop {
        let mut time = if tmp.same_channels { TIMEOUT_SAME_CHANNELS } else if tmp.pattern == Pattern::Tree { TIMEOUT_TREE } else { TIMEOUT };
        tmp.count = 0;
        global_timeout -= time;
        search.rec(&mut tmp, &mut graph, &mut time);
        let done = time == -1 || graph.count as f32 * graph.bw_inter >= total_bw;
        if !done && pass == 1 {
            if tmp.same_channels && !(arch == CpuArch::X86 && vendor == CpuVendor::Amd && tmp.type_intra == PathKind::Sys) {
                tmp.same_channels = false;
                continue;
            }
            tmp.same_channels = true;
            if time != -1 {
                global_timeout += time;
            } else {
                global_timeout = GLOBAL_TIMEOUT;
            }
            if !(global_timeout < 0 && graph.count > 0) {
                if cc_min >= 90 && tmp.pattern == Pattern::BalancedTree {
                    tmp.pattern = Pattern::Tree;
                    continue;
                }
                tmp.pattern = graph.pattern;
                let max_type = if inter { tmp.type_inter } else { max_intra };
                if tmp.type_intra < max_type && (graph.count == 0 || tmp.type_intra < graph.type_intra) {
                    tmp.type_intra = next_kind(tmp.type_intra);
                    if tmp.type_intra < PathKind::Dis {
                        continue;
                    }
                }
                tmp.type_intra = min_intra;
                if inter && tmp.type_inter < max_inter && (graph.count == 0 || tmp.type_inter < graph.type_inter || tmp.type_inter < PathKind::Pxn) {
                    tmp.type_inter = next_kind(tmp.type_inter);
                    if tmp.type_inter < PathKind::Dis {
                        continue;
                    }
                }
                tmp.type_inter = min_inter;
                if cross_nic == 2 && tmp.cross_nic == 0 && matches!(graph.pattern, Pattern::Ring | Pattern::BalancedTree) {
                    tmp.cross_nic = 2;
                    continue;
                }
                tmp.cross_nic = u8::from(cross_nic == 1);
                if speed < speeds.len() - 1 && (graph.count == 0 || speeds[speed + 1] / graph.bw_inter > 0.49) {
                    speed += 1;
                    tmp.bw_intra = speeds[speed];
                    tmp.bw_inter = speeds[speed];
                    continue;
                }
                speed = 0;
                while speeds[speed] > max_bw && speed < speeds.len() - 1 {
                    speed += 1;
                }
                tmp.bw_intra = speeds[speed];
                tmp.bw_inter = speeds[speed];
            }
        }
        // done:
        if pass == 1 {
            time = -1;
            duplicate_channels(&mut graph, cc_min);
            tmp = graph.clone();
            speed = 0;
            while speeds[speed] > graph.bw_inter && speed < speeds.len() - 1 {
                speed += 1;
            }
            tmp.bw_intra = speeds[speed];
            tmp.bw_inter = speeds[speed];
            tmp.min_channels = graph.count;
            pass = 2;
        }
        if time != 0 && speed > 0 {
            if graph.pattern == Pattern::Ring {
                speed -= 1;
                tmp.bw_intra = speeds[speed];
                tmp.bw_inter = speeds[speed];
                continue;
            } else if tmp.bw_intra == graph.bw_intra && tmp.bw_intra < tmp.bw_inter * 2.0 {
                speed -= 1;
                tmp.bw_intra = speeds[speed];
                continue;
            }
        }
        break;
    }
    if graph.count == 0 {
        tracing::info!(target: "oxccl::graph", "could not find a path for pattern {}, falling back to the simple order", graph.pattern.name());
        graph.slots[0] = Channel { ranks: topology.system.of(NodeKind::Gpu).iter().map(|n| n.gpu_rank().unwrap_or(-1)).collect(), nets: (0, 0) };
        graph.count = 1;
        graph.bw_intra = 0.1;
        graph.bw_inter = 0.1;
        graph.type_intra = PathKind::Sys;
        graph.type_inter = PathKind::Sys;
    }
    Graph {
        pattern: graph.pattern,
        cross_nic: graph.cross_nic,
        min_channels: graph.min_channels,
        max_channels: graph.max_channels,
        channels: graph.slots[..graph.count].to_vec(),
        bw_intra: graph.bw_intra,
        bw_inter: graph.bw_inter,
        latency_inter: graph.latency_inter,
        type_intra: graph.type_intra,
        type_inter: graph.type_inter,
        same_channels: graph.same_channels,
    }
}

fn next_kind(kind: PathKind) -> PathKind {
    PathKind::ALL[(kind as usize + 1).min(PathKind::Dis as usize)]
}

/// Channels of 25 GB/s or more are doubled (halving their speed), within the maximum.
fn duplicate_channels(graph: &mut Work, cc_min: i32) {
    let n = graph.count;
    if n == 0 || graph.bw_intra < 25.0 || (cc_min > 80 && graph.bw_intra < 50.0 && n > 4) {
        return;
    }
    let dup = (n * 2).min(graph.max_channels);
    for c in n..dup {
        graph.slots[c] = graph.slots[c - n].clone();
    }
    let factor = dup.div_ceil(n) as f32;
    graph.bw_intra /= factor;
    graph.bw_inter /= factor;
    graph.count = dup;
}

/// Whether `graph` beats `reference`: more channels × bandwidth, or as much in fewer hops.
fn better(graph: &Work, reference: &Work) -> bool {
    if graph.count < graph.min_channels {
        return false;
    }
    let (n, r) = (graph.count as f32 * graph.bw_intra, reference.count as f32 * reference.bw_intra);
    if n != r {
        return n > r;
    }
    graph.pattern == reference.pattern && graph.cross_nic == reference.cross_nic && graph.hops < reference.hops
}

fn round_sub(a: f32, b: f32) -> f32 {
    ((a - b) * 1000.0).round() / 1000.0
}

impl Search<'_> {
    fn gpus(&self) -> usize {
        self.topology.system.of(NodeKind::Gpu).len()
    }

    fn rank(&self, g: usize) -> i32 {
        self.topology.system.of(NodeKind::Gpu)[g].gpu_rank().unwrap_or(-1)
    }

    fn gpu_of(&self, rank: i32) -> usize {
        self.topology.system.gpu_of_rank(rank).expect("channel ranks are GPUs of the system")
    }

    /// (max bandwidth from a GPU to its targets, max total bandwidth of a GPU's links).
    fn bandwidth_bounds(&self) -> (f32, f32) {
        let ngpus = self.gpus();
        if !self.inter && ngpus == 1 {
            return (crate::system::bandwidth::LOCAL, crate::system::bandwidth::LOCAL);
        }
        let (mut max_bw, mut total_bw) = (0.0f32, 0.0f32);
        for g in 0..ngpus {
            let from = NodeRef { kind: NodeKind::Gpu, index: g };
            let target = if self.inter { NodeKind::Net } else { NodeKind::Gpu };
            for p in self.topology.paths.from_to(from, target) {
                if !p.hops.is_empty() {
                    max_bw = max_bw.max(p.bandwidth);
                }
            }
            let (mut nvlink, mut pci) = (0.0f32, 0.0f32);
            for l in &self.topology.system.node(from).links {
                match l.kind {
                    LinkKind::NvLink => nvlink += l.bandwidth,
                    LinkKind::Pci => pci = l.bandwidth,
                    _ => {}
                }
            }
            total_bw = total_bw.max(nvlink.max(pci));
        }
        (max_bw, total_bw)
    }

    /// Reserves `bw` on the first `max_steps` links of `hops` (negative: releases); how many it could reserve.
    fn follow(&mut self, hops: &[Hop], kind: PathKind, start: NodeRef, max_steps: usize, bw: f32) -> usize {
        let system = &mut self.topology.system;
        let mut pci_bw = bw;
        for hop in hops {
            let node = system.node(hop.from).links[hop.link].remote;
            let intel = matches!(system.node(node).detail, Detail::Cpu { arch: CpuArch::X86, vendor: CpuVendor::Intel, .. });
            if intel && kind == PathKind::Phb && start.kind == NodeKind::Gpu {
                // Intel turns GPU P2P traffic into 64-byte TLPs: it costs more PCI bandwidth.
                pci_bw = bw * 6.0 / 5.0;
            }
        }
        for (step, hop) in hops.iter().take(max_steps).enumerate() {
            let link = system.node(hop.from).links[hop.link];
            let fw_bw = if link.kind == LinkKind::Pci { pci_bw } else { bw };
            let mut rev_bw = 0.0;
            let remote = system.node(link.remote);
            if matches!(remote.detail, Detail::Gpu { sm, .. } if sm < 80) && start.kind != NodeKind::Gpu {
                rev_bw += fw_bw / 8.0;
            }
            if matches!(remote.detail, Detail::Cpu { arch: CpuArch::Power, .. }) && link.kind == LinkKind::NvLink {
                rev_bw += fw_bw;
            }
            let reverse = if rev_bw != 0.0 { remote.links.iter().position(|l| l.remote == hop.from && l.kind == link.kind) } else { None };
            let rev_short = reverse.is_some_and(|r| remote.links[r].bandwidth < rev_bw);
            if link.bandwidth < fw_bw || rev_short {
                return step;
            }
            let l = &mut system.node_mut(hop.from).links[hop.link];
            l.bandwidth = round_sub(l.bandwidth, fw_bw);
            if let Some(r) = reverse {
                let l = &mut system.node_mut(link.remote).links[r];
                l.bandwidth = round_sub(l.bandwidth, rev_bw);
            }
        }
        max_steps
    }

    /// Reserves the path `from` → `to` at `mult` times the graph's speed (negative: releases); `to` if it fit.
    fn follow_path(&mut self, graph: &mut Work, from: Option<NodeRef>, to: NodeRef, mult: f32) -> Option<NodeRef> {
        let Some(from) = from else { return Some(to) };
        let path = self.original.path(from, to);
        let reverse_kind = self.original.path(to, from).kind;
        let intra = matches!(from.kind, NodeKind::Gpu | NodeKind::NvSwitch) && matches!(to.kind, NodeKind::Gpu | NodeKind::NvSwitch);
        let (bw, kind) = if intra { (graph.bw_intra, graph.type_intra) } else { (graph.bw_inter, graph.type_inter) };
        if path.kind >= PathKind::Dis {
            return None;
        }
        if mult == 1.0 && path.kind > kind {
            return None;
        }
        if mult == 1.0 && matches!(graph.pattern, Pattern::BalancedTree | Pattern::Tree | Pattern::SplitTree) && reverse_kind > kind {
            return None;
        }
        let bw = bw * mult;
        let (hops, path_kind) = (path.hops.clone(), path.kind);
        let steps = self.follow(&hops, path_kind, from, hops.len(), bw);
        if steps < hops.len() {
            self.follow(&hops, path_kind, from, steps, -bw);
            return None;
        }
        graph.hops += mult * hops.len() as f32;
        Some(to)
    }

    fn rec(&mut self, graph: &mut Work, saved: &mut Work, time: &mut i64) {
        let ngpus = self.gpus() as i64;
        let (back_to_net, back_to_first) = match (self.inter, graph.pattern) {
            (true, Pattern::Ring) => (ngpus - 1, -1),
            (true, Pattern::SplitTree) => (1, -1),
            (true, _) => (0, -1),
            (false, Pattern::Ring) => (-1, ngpus - 1),
            (false, _) => (-1, -1),
        };
        if self.inter {
            self.rec_net(graph, saved, back_to_net, back_to_first, time);
            return;
        }
        if graph.count == 0 {
            self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Pci, time, None, 0);
        } else {
            let g = self.replay(graph, -1);
            self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Replay, time, None, g);
        }
        if !graph.same_channels || graph.count == 0 {
            for g in 0..self.gpus() {
                self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Free, time, None, g);
            }
        }
    }

    /// The GPU after position `step` in the last complete channel.
    fn replay(&self, graph: &Work, step: i64) -> usize {
        self.gpu_of(graph.slots[graph.count - 1].ranks[(step + 1) as usize])
    }

    #[allow(clippy::too_many_arguments)]
    fn try_gpu(&mut self, graph: &mut Work, saved: &mut Work, step: usize, back_to_net: i64, back_to_first: i64, order: Order, time: &mut i64, from: Option<NodeRef>, g: usize) {
        let flag = 1u64 << graph.count.min(63);
        let target = NodeRef { kind: NodeKind::Gpu, index: g };
        if self.follow_path(graph, from, target, 1.0).is_some() {
            self.used[g] ^= flag;
            self.rec_gpu(graph, saved, g, step, back_to_net, back_to_first, order, time);
            self.used[g] ^= flag;
            self.follow_path(graph, from, target, -1.0);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn rec_gpu(&mut self, graph: &mut Work, saved: &mut Work, g: usize, step: usize, back_to_net: i64, back_to_first: i64, order: Order, time: &mut i64) {
        if *time <= 0 {
            return;
        }
        *time -= 1;
        let ngpus = self.gpus();
        if step == ngpus {
            // A channel is complete: keep the graph if it beats the best so far, then look for one more.
            graph.count += 1;
            if better(graph, saved) {
                *saved = graph.clone();
                if graph.count == graph.max_channels {
                    *time = -1;
                }
            }
            if graph.count < graph.max_channels {
                self.rec(graph, saved, time);
            }
            graph.count -= 1;
            return;
        }
        let current = graph.count;
        graph.slots[current].ranks[step] = self.rank(g);
        if step as i64 == back_to_net {
            if !self.inter {
                return;
            }
            let start = graph.slots[current].nets.0;
            for n in self.select_nets(graph.type_inter, Some(g)) {
                if !self.check_net(graph, start, n, step) {
                    continue;
                }
                let mut next_back = -1;
                let saved_bw = graph.bw_inter;
                if graph.pattern == Pattern::BalancedTree {
                    if step == 0 {
                        next_back = 1;
                    }
                    graph.bw_inter /= 2.0;
                }
                let gpu = NodeRef { kind: NodeKind::Gpu, index: g };
                let net = NodeRef { kind: NodeKind::Net, index: n };
                let reached = self.follow_path(graph, Some(gpu), net, 1.0);
                graph.bw_inter = saved_bw;
                if reached.is_some() {
                    graph.slots[current].nets.1 = self.topology.system.node(net).id;
                    self.rec_gpu(graph, saved, g, step, next_back, back_to_first, order, time);
                    if graph.pattern == Pattern::BalancedTree {
                        graph.bw_inter /= 2.0;
                    }
                    self.follow_path(graph, Some(gpu), net, -1.0);
                    graph.bw_inter = saved_bw;
                }
            }
        } else if step < ngpus - 1 {
            let next: Vec<usize> = match order {
                Order::Pci => vec![step + 1],
                Order::Replay => vec![self.replay(graph, step as i64)],
                Order::Free => {
                    let sort_net = if back_to_net == -1 {
                        0
                    } else if back_to_net == step as i64 + 1 {
                        1
                    } else {
                        -1
                    };
                    self.next_gpus(graph, g, sort_net)
                }
            };
            let from = NodeRef { kind: NodeKind::Gpu, index: g };
            for n in next {
                self.try_gpu(graph, saved, step + 1, back_to_net, back_to_first, order, time, Some(from), n);
            }
        } else if step as i64 == back_to_first {
            let p = self.gpu_of(graph.slots[current].ranks[0]);
            let from = NodeRef { kind: NodeKind::Gpu, index: g };
            let first = NodeRef { kind: NodeKind::Gpu, index: p };
            if self.follow_path(graph, Some(from), first, 1.0).is_some() {
                self.rec_gpu(graph, saved, p, step + 1, back_to_net, -1, order, time);
                self.follow_path(graph, Some(from), first, -1.0);
            }
        } else {
            self.rec_gpu(graph, saved, g, ngpus, -1, -1, order, time);
        }
    }

    /// The GPUs to try after GPU `g`, best first (NCCL's `ncclTopoSearchNextGpuSort`).
    fn next_gpus(&self, graph: &Work, g: usize, sort_net: i32) -> Vec<usize> {
        let ngpus = self.gpus();
        let flag = 1u64 << graph.count.min(63);
        let from = NodeRef { kind: NodeKind::Gpu, index: g };
        let paths = self.original.paths.from_to(from, NodeKind::Gpu);
        let net_paths = if sort_net != 0 {
            let id = graph.slots[graph.count].nets.0;
            self.topology.system.find(NodeKind::Net, id).map(|n| self.original.paths.from_to(n, NodeKind::Gpu))
        } else {
            None
        };
        // [g, start index, intra hops, intra bw, inter hops, inter PCI bw, inter bw]: integers, as NCCL truncates them.
        let mut scores: Vec<[i64; 7]> = Vec::new();
        for i in 1..ngpus {
            let h = (g + i) % ngpus;
            if paths[h].hops.is_empty() || self.used[h] & flag != 0 {
                continue;
            }
            let (mut inter_hops, mut inter_pci, mut inter_bw) = (0, 0, 0);
            if let Some(np) = net_paths {
                inter_hops = np[h].hops.len() as i64;
                inter_pci = self.gpu_pci_bandwidth(h);
                inter_bw = np[h].bandwidth as i64;
            }
            scores.push([h as i64, i as i64, paths[h].hops.len() as i64, paths[h].bandwidth as i64, inter_hops, inter_pci, inter_bw]);
        }
        scores.sort_by(|a, b| b[6].cmp(&a[6]).then(b[5].cmp(&a[5])).then(a[4].cmp(&b[4])).then(b[3].cmp(&a[3])).then(a[2].cmp(&b[2])).then(a[1].cmp(&b[1])));
        let same_intra = scores.iter().all(|s| s[3] == scores[0][3] && s[2] == scores[0][2]);
        let mut next: Vec<usize> = scores.iter().map(|s| s[0] as usize).collect();
        if sort_net == -1 && same_intra {
            next.reverse();
        }
        if !self.topology.system.of(NodeKind::NvSwitch).is_empty() {
            // Behind NVSwitches every GPU is as near as any other: only the neighbours by index are tried.
            let prev = (g + ngpus - 1) % ngpus;
            let nxt = (g + 1) % ngpus;
            let mut first: Vec<usize> = match graph.pattern {
                Pattern::Ring => vec![nxt, prev],
                Pattern::SplitTree | Pattern::BalancedTree => vec![prev, nxt],
                Pattern::Tree => vec![nxt],
            };
            if nxt == prev {
                first.truncate(1);
            }
            let mut real = 0;
            for f in first {
                if let Some(i) = next.iter().position(|&x| x == f) {
                    let v = next.remove(i);
                    next.insert(0, v);
                    real += 1;
                }
            }
            next.truncate(real);
        }
        next
    }

    fn gpu_pci_bandwidth(&self, g: usize) -> i64 {
        let gpu = NodeRef { kind: NodeKind::Gpu, index: g };
        for link in self.topology.system.node(gpu).links.iter().filter(|l| l.kind == LinkKind::Pci) {
            if let Some(back) = self.topology.system.node(link.remote).links.iter().find(|l| l.remote == gpu) {
                return link.bandwidth.min(back.bandwidth) as i64;
            }
        }
        -1
    }

    /// The NETs a channel may use, preferred first (NCCL's `ncclTopoSelectNets`).
    fn select_nets(&self, type_inter: PathKind, gpu: Option<usize>) -> Vec<usize> {
        let mut nets: Vec<usize> = Vec::new();
        let add = |n: usize, nets: &mut Vec<usize>| {
            if !nets.contains(&n) {
                nets.push(n);
            }
        };
        let gpus: Vec<usize> = gpu.map_or_else(|| (0..self.gpus()).collect(), |g| vec![g]);
        if self.host_count > 1 {
            // GPU first: every GPU's first NIC, then every GPU's second, ...
            let mut first = vec![usize::MAX; gpus.len()];
            let mut active = vec![true; gpus.len()];
            for c in 0..64 {
                for (i, &g) in gpus.iter().enumerate() {
                    if !active[i] {
                        continue;
                    }
                    let Ok(n) = self.original.local_net(g, c) else {
                        active[i] = false;
                        continue;
                    };
                    if c == 0 {
                        first[i] = n;
                    } else if first[i] == n {
                        active[i] = false;
                        continue;
                    }
                    add(n, &mut nets);
                }
                if !active.iter().any(|a| *a) {
                    break;
                }
            }
        } else {
            for &g in &gpus {
                let mut local = Vec::new();
                for c in 0..64 {
                    let Ok(n) = self.original.local_net(g, c) else { break };
                    if local.first() == Some(&n) {
                        break;
                    }
                    local.push(n);
                }
                for n in local {
                    add(n, &mut nets);
                }
            }
        }
        for t in 0..=(type_inter as usize) {
            for &g in &gpus {
                let from = NodeRef { kind: NodeKind::Gpu, index: g };
                for (n, p) in self.original.paths.from_to(from, NodeKind::Net).iter().enumerate().take(64) {
                    if p.kind as usize == t {
                        add(n, &mut nets);
                    }
                }
            }
        }
        nets
    }

    /// (id, guid, port) of NET `n`.
    fn net_detail(&self, n: usize) -> (u64, u64, i32) {
        let node = &self.topology.system.of(NodeKind::Net)[n];
        match node.detail {
            Detail::Net { guid, port, .. } => (node.id, guid, port),
            _ => (node.id, 0, 0),
        }
    }

    /// Whether a channel that came in by NET `start` may leave by NET `n` (NCCL's cross-NIC rules).
    fn check_net(&self, graph: &Work, start: u64, n: usize, step: usize) -> bool {
        let (id, guid, port) = self.net_detail(n);
        let start_index = self.topology.system.find(NodeKind::Net, start).map_or(n, |r| r.index);
        let (_, start_guid, start_port) = self.net_detail(start_index);
        if graph.pattern == Pattern::Tree && id != start {
            return false;
        }
        let count = graph.count;
        if graph.pattern == Pattern::Ring && graph.cross_nic == 2 {
            if count & 1 == 1 && id != graph.slots[count - 1].nets.0 {
                return false;
            }
        } else if graph.cross_nic == 0 && (guid != start_guid || port != start_port) {
            return false;
        }
        if graph.pattern == Pattern::BalancedTree && step != 0 && id != graph.slots[count].nets.1 {
            return false;
        }
        true
    }

    fn rec_net(&mut self, graph: &mut Work, saved: &mut Work, back_to_net: i64, back_to_first: i64, time: &mut i64) {
        // NCCL reserves the speed truncated to an integer on the NIC itself.
        let bw = graph.bw_inter.trunc();
        let nets = self.select_nets(graph.type_inter, None);
        let count = nets.len();
        for i in 0..count {
            let n = nets[(graph.count + i) % count];
            if self.net_bandwidth[n] < bw {
                continue;
            }
            let (id, guid, port) = self.net_detail(n);
            let current = graph.count;
            if graph.pattern == Pattern::Ring && graph.cross_nic == 2 && current & 1 == 1 && id != graph.slots[current - 1].nets.1 {
                continue;
            }
            graph.slots[current].nets.0 = id;
            graph.latency_inter = match self.topology.system.of(NodeKind::Net)[n].detail {
                Detail::Net { latency, .. } => latency,
                _ => 0.0,
            };
            let same_port: Vec<usize> = (0..self.net_bandwidth.len()).filter(|&m| self.net_detail(m).1 == guid && self.net_detail(m).2 == port).collect();
            for &m in &same_port {
                self.net_bandwidth[m] -= bw;
            }
            let from = Some(NodeRef { kind: NodeKind::Net, index: n });
            if current > 0 && graph.same_channels {
                let g = self.replay(graph, -1);
                self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Replay, time, from, g);
            } else {
                if current == 0 && self.topology.system.of(NodeKind::NvSwitch).is_empty() {
                    let mut t = 1 << 10;
                    self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Pci, &mut t, from, 0);
                    if t == -1 {
                        *time = -1;
                    }
                }
                let local_gpu = self.original.net_local_gpu.get(n).copied().flatten();
                if let Some(lg) = local_gpu {
                    self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Free, time, from, lg);
                }
                let (locals, kind) = self.original.local(NodeRef { kind: NodeKind::Net, index: n }, NodeKind::Gpu);
                if kind == PathKind::Dis || locals.is_empty() {
                    // NCCL moves on to the next NIC here without giving this one's bandwidth back.
                    continue;
                }
                for g in locals {
                    if Some(g) != local_gpu {
                        self.try_gpu(graph, saved, 0, back_to_net, back_to_first, Order::Free, time, from, g);
                    }
                }
            }
            for &m in &same_port {
                self.net_bandwidth[m] += bw;
            }
        }
    }
}
