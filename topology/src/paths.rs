//! Paths between every GPU, NIC port (NET), CPU and NVSwitch and every node, with their
//! bandwidth (the narrowest link) and NCCL's path type (`ncclTopoComputePaths`, NCCL 2.28):
//!
//! - a breadth-first search from each target keeps, for every node, the path with the
//!   fewest hops among those of highest bandwidth; a path may pass through a GPU only as one
//!   NVLink hop between two GPUs (NVB);
//! - the type is the worst link on the way: NVL for NVLink, PIX for one PCI switch, PXB for
//!   several, PHB through a CPU's host bridge, SYS across the SMP interconnect;
//! - GPUs that may not talk peer to peer (a path worse than PXB; SYS allowed between two
//!   GPUs of an AMD host) go through their CPU instead;
//! - a GPU whose CPU has a C2C link to it and a NIC on that CPU: P2C;
//! - PXN: a GPU reaches a NIC through an NVLink peer that sits next to it (PXB or P2C),
//!   when the peer is closer to that NIC or its own path is worse than PXN;
//! - without GPUDirect RDMA (the NIC or the GPU lacks `gdr`, or the NIC is further than
//!   PXB), NIC traffic goes through the GPU's CPU.

use crate::error::{Error, Result};
use crate::system::{bandwidth, Detail, LinkKind, NodeKind, NodeRef, System};

/// NCCL's path types, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathKind {
    /// The node itself.
    Loc = 0,
    /// NVLink.
    Nvl = 1,
    /// NVLink through an intermediate GPU.
    Nvb = 2,
    /// The C2C link between a GPU and its CPU.
    C2c = 3,
    /// At most one PCIe switch.
    Pix = 4,
    /// Several PCIe switches, not through the host bridge.
    Pxb = 5,
    /// A GPU to a NIC through C2C to the CPU and PCIe to the NIC.
    P2c = 6,
    /// A GPU to a NIC through an intermediate GPU (rail-local network traffic).
    Pxn = 7,
    /// Through a PCIe host bridge (the CPU).
    Phb = 8,
    /// Across the SMP interconnect between NUMA nodes (QPI/UPI).
    Sys = 9,
    /// Through the network.
    Net = 10,
    /// Disconnected.
    Dis = 11,
}

impl PathKind {
    pub const ALL: [PathKind; 12] = [
        PathKind::Loc,
        PathKind::Nvl,
        PathKind::Nvb,
        PathKind::C2c,
        PathKind::Pix,
        PathKind::Pxb,
        PathKind::P2c,
        PathKind::Pxn,
        PathKind::Phb,
        PathKind::Sys,
        PathKind::Net,
        PathKind::Dis,
    ];

    /// NCCL's name (`LOC`, `NVL`, ... `DIS`), as `nvidia-smi topo -m` and `NCCL_P2P_LEVEL` spell them.
    pub fn name(self) -> &'static str {
        ["LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS", "NET", "DIS"][self as usize]
    }

    /// Parses a name (case-insensitive), or NCCL's old numeric levels (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4+ SYS).
    pub fn parse(text: &str) -> Option<PathKind> {
        let t = text.trim();
        if let Some(k) = PathKind::ALL.iter().find(|k| k.name().eq_ignore_ascii_case(t)) {
            return Some(*k);
        }
        let old: usize = t.parse().ok()?;
        Some([PathKind::Loc, PathKind::Pix, PathKind::Pxb, PathKind::Phb, PathKind::Sys][old.min(4)])
    }

    fn from_link(kind: LinkKind) -> PathKind {
        match kind {
            LinkKind::Local | LinkKind::Net => PathKind::Loc,
            LinkKind::NvLink => PathKind::Nvl,
            LinkKind::C2c => PathKind::C2c,
            LinkKind::Pci => PathKind::Pix,
            LinkKind::Sys => PathKind::Sys,
        }
    }
}

/// One step of a path: the link `link` (an index into `from`'s links).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hop {
    pub from: NodeRef,
    pub link: usize,
}

/// A path from one node to another.
#[derive(Clone, Debug, PartialEq)]
pub struct Path {
    pub hops: Vec<Hop>,
    /// GB/s: the narrowest link.
    pub bandwidth: f32,
    pub kind: PathKind,
}

impl Path {
    fn disconnected() -> Path {
        Path { hops: Vec::new(), bandwidth: 0.0, kind: PathKind::Dis }
    }
}

/// The knobs NCCL reads for paths, with NCCL's defaults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PathSettings {
    /// NCCL_P2P_LEVEL (or NCCL_P2P_DISABLE=1 as LOC): the worst path GPUs use peer to peer.
    pub p2p_level: Option<PathKind>,
    /// NCCL_NET_GDR_LEVEL: the worst GPU-NIC path GPUDirect RDMA is used over (default PXB).
    pub net_gdr_level: Option<PathKind>,
    /// NCCL_PXN_DISABLE.
    pub pxn_disable: bool,
    /// NCCL_NVB_DISABLE.
    pub nvb_disable: bool,
}

/// Paths from every node to every GPU, PCI... node of the kinds searched from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Paths {
    /// `table[from kind][from index][to kind][to index]`; empty where not computed.
    table: [Vec<[Vec<Path>; 6]>; 6],
}

impl Paths {
    /// The path from `from` to `to`.
    pub fn get(&self, from: NodeRef, to: NodeRef) -> Option<&Path> {
        self.table[from.kind as usize].get(from.index)?[to.kind as usize].get(to.index)
    }

    pub(crate) fn get_mut(&mut self, from: NodeRef, to: NodeRef) -> &mut Path {
        &mut self.table[from.kind as usize][from.index][to.kind as usize][to.index]
    }

    /// The paths from `from` to every node of `kind` (empty if not computed).
    pub fn from_to(&self, from: NodeRef, kind: NodeKind) -> &[Path] {
        self.table[from.kind as usize].get(from.index).map_or(&[], |t| &t[kind as usize])
    }

    fn ensure(&mut self, system: &System, node: NodeRef, kind: NodeKind) {
        let count = system.of(kind).len();
        let row = &mut self.table[node.kind as usize][node.index][kind as usize];
        if row.len() != count {
            *row = vec![Path::disconnected(); count];
        }
    }
}

fn gpu(index: usize) -> NodeRef {
    NodeRef { kind: NodeKind::Gpu, index }
}
fn net(index: usize) -> NodeRef {
    NodeRef { kind: NodeKind::Net, index }
}
fn cpu(index: usize) -> NodeRef {
    NodeRef { kind: NodeKind::Cpu, index }
}

/// The topology with its paths computed: what the search and the tuning model read.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub system: System,
    pub paths: Paths,
    pub settings: PathSettings,
    /// For each NET, the GPU that uses it first ([`Topology::local_gpu`]), or None.
    pub net_local_gpu: Vec<Option<usize>>,
}

/// How GPUDirect RDMA may be used between a GPU and a NIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GdrMode {
    Disabled,
    Enabled,
    /// Through PCIe although the GPU has C2C to its CPU.
    Pci,
}

impl Topology {
    /// Computes every path of `system` (see the module doc).
    pub fn new(system: System, settings: PathSettings) -> Result<Topology> {
        let mut paths = Paths::default();
        for kind in NodeKind::ALL {
            paths.table[kind as usize] = (0..system.of(kind).len()).map(|_| Default::default()).collect();
        }
        let mut topology = Topology { system, paths, settings, net_local_gpu: Vec::new() };
        for kind in [NodeKind::Cpu, NodeKind::Gpu, NodeKind::Net, NodeKind::NvSwitch] {
            for index in 0..topology.system.of(kind).len() {
                topology.set_paths(NodeRef { kind, index })?;
            }
        }
        let ngpus = topology.system.of(NodeKind::Gpu).len();
        for g in 0..ngpus {
            for p in 0..ngpus {
                if !topology.p2p(p, g) {
                    let c = topology.local_cpu(g)?;
                    topology.add_inter_step(cpu(c), gpu(p), gpu(g));
                }
            }
        }
        let nnets = topology.system.of(NodeKind::Net).len();
        for n in 0..nnets {
            for g in 0..ngpus {
                let c = topology.local_cpu(g)?;
                let gpu_cpu = topology.path(gpu(g), cpu(c)).kind;
                let net_cpu = topology.path(net(n), cpu(c)).kind;
                if merge(gpu_cpu, net_cpu) == PathKind::P2c {
                    let p = topology.paths.get_mut(gpu(g), net(n));
                    p.kind = p.kind.min(PathKind::P2c);
                    let p = topology.paths.get_mut(net(n), gpu(g));
                    p.kind = p.kind.min(PathKind::P2c);
                }
            }
        }
        for n in 0..nnets {
            for g in 0..ngpus {
                if !topology.settings.pxn_disable {
                    if let Some(peer) = topology.local_gpu(n)? {
                        if peer != g {
                            let peer_net = topology.path(gpu(peer), net(n)).clone();
                            let own = topology.path(gpu(g), net(n)).clone();
                            let same_host = topology.system.node(gpu(peer)).host() == topology.system.node(gpu(g)).host();
                            if peer_net.kind <= PathKind::P2c
                                && topology.path(gpu(peer), gpu(g)).kind <= PathKind::Nvl
                                && same_host
                                && (peer_net.bandwidth > own.bandwidth || own.kind > PathKind::Pxn)
                            {
                                topology.add_inter_step(gpu(peer), gpu(g), net(n));
                            }
                        }
                    }
                }
                if topology.path(gpu(g), net(n)).kind < PathKind::Phb && topology.gdr(g, n, false) == GdrMode::Disabled {
                    let c = topology.local_cpu(g)?;
                    topology.add_inter_step(cpu(c), net(n), gpu(g));
                    topology.add_inter_step(cpu(c), gpu(g), net(n));
                }
            }
        }
        topology.net_local_gpu = (0..nnets).map(|n| topology.local_gpu(n)).collect::<Result<_>>()?;
        Ok(topology)
    }

    /// The path `from` → `to` (a disconnected one if none was computed).
    pub fn path(&self, from: NodeRef, to: NodeRef) -> &Path {
        static NONE: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        self.paths.get(from, to).unwrap_or_else(|| NONE.get_or_init(Path::disconnected))
    }

    /// Breadth-first search setting every node's path to `base`.
    fn set_paths(&mut self, base: NodeRef) -> Result<()> {
        let system = &self.system;
        self.paths.ensure(system, base, base.kind);
        *self.paths.get_mut(base, base) = Path { hops: Vec::new(), bandwidth: bandwidth::LOCAL, kind: PathKind::Loc };
        let mut frontier = vec![base];
        while !frontier.is_empty() {
            let mut next = Vec::new();
            for &node in &frontier {
                let path = self.paths.get(node, base).expect("nodes in the frontier have a path").clone();
                for link in &system.node(node).links {
                    let remote = link.remote;
                    self.paths.ensure(system, remote, base.kind);
                    let bw = path.bandwidth.min(link.bandwidth);
                    // Through a GPU only as one NVLink hop to another GPU.
                    if node != base && node.kind == NodeKind::Gpu && (self.settings.nvb_disable || link.kind != LinkKind::NvLink || remote.kind != NodeKind::Gpu || path.hops.len() > 1) {
                        continue;
                    }
                    let remote_path = self.paths.get(remote, base).expect("ensured above");
                    if (remote_path.bandwidth == 0.0 || remote_path.hops.len() > path.hops.len()) && remote_path.bandwidth < bw {
                        let reverse = system.node(remote).links.iter().position(|l| l.remote == node && l.kind == link.kind).ok_or_else(|| {
                            Error::Graph(format!("no link back from {}/{:x} to {}/{:x}", remote.kind.name(), system.node(remote).id, node.kind.name(), system.node(node).id))
                        })?;
                        let mut hops = Vec::with_capacity(path.hops.len() + 1);
                        hops.push(Hop { from: remote, link: reverse });
                        hops.extend_from_slice(&path.hops);
                        let mut kind = PathKind::from_link(link.kind);
                        if node.kind == NodeKind::Pci && remote.kind == NodeKind::Pci {
                            kind = PathKind::Pxb;
                        }
                        if link.kind == LinkKind::Pci && (node.kind == NodeKind::Cpu || remote.kind == NodeKind::Cpu) {
                            kind = PathKind::Phb;
                        }
                        if node.kind == NodeKind::Gpu && path.kind == PathKind::Nvl && kind == PathKind::Nvl && hops.len() > 1 {
                            kind = PathKind::Nvb;
                        }
                        let kind = path.kind.max(kind);
                        *self.paths.get_mut(remote, base) = Path { hops, bandwidth: bw, kind };
                        if !next.contains(&remote) {
                            next.push(remote);
                        }
                    }
                }
            }
            frontier = next;
        }
        Ok(())
    }

    /// Replaces the path `from` → `to` by `from` → `via` → `to`.
    fn add_inter_step(&mut self, via: NodeRef, from: NodeRef, to: NodeRef) {
        let first = self.path(from, via).clone();
        let second = self.path(via, to).clone();
        let mut hops = first.hops.clone();
        hops.extend_from_slice(&second.hops);
        let kind = if via.kind == NodeKind::Gpu { PathKind::Pxn } else { merge(first.kind, second.kind) };
        *self.paths.get_mut(from, to) = Path { hops, bandwidth: first.bandwidth.min(second.bandwidth), kind };
    }

    /// Whether GPUs `a` and `b` may use peer-to-peer (NCCL's distance rule; NVML's p2p status is not consulted).
    pub fn p2p(&self, a: usize, b: usize) -> bool {
        let (arch, vendor, _) = self.system.cpu_type();
        let mut level = PathKind::Pxb;
        if arch == crate::system::CpuArch::X86 && vendor == crate::system::CpuVendor::Amd && self.system.of(NodeKind::Gpu).len() <= 2 {
            level = PathKind::Sys;
        }
        if let Some(user) = self.settings.p2p_level {
            level = user;
        }
        self.path(gpu(a), gpu(b)).kind <= level
    }

    /// The CPU nearest GPU `g` (fewest hops).
    pub fn local_cpu(&self, g: usize) -> Result<usize> {
        let paths = self.paths.from_to(gpu(g), NodeKind::Cpu);
        let best = paths.iter().enumerate().filter(|(_, p)| !p.hops.is_empty()).min_by_key(|(_, p)| p.hops.len());
        best.map(|(c, _)| c).ok_or_else(|| Error::Graph(format!("no CPU reachable from GPU {g}")))
    }

    /// Whether GPUDirect RDMA may be used between GPU `g` and NET `n` (`read`: for sends).
    pub fn gdr(&self, g: usize, n: usize, read: bool) -> GdrMode {
        let (Detail::Net { gdr: net_gdr, .. }, Detail::Gpu { gdr: gpu_gdr, sm, .. }) = (&self.system.node(net(n)).detail, &self.system.node(gpu(g)).detail) else {
            return GdrMode::Disabled;
        };
        if !net_gdr || !gpu_gdr {
            return GdrMode::Disabled;
        }
        if read && *sm < 80 {
            let ngpus = self.system.of(NodeKind::Gpu).len();
            let nvlink = ngpus == 1 || (0..ngpus).any(|i| i != g && self.path(gpu(g), gpu(i)).kind == PathKind::Nvl);
            if !nvlink {
                return GdrMode::Disabled;
            }
        }
        let level = self.settings.net_gdr_level.unwrap_or(PathKind::Pxb);
        let mut via = g;
        let mut distance = self.path(gpu(g), net(n)).kind;
        if distance == PathKind::Pxn {
            if let Some(proxy) = self.intermediate_gpu(g, n) {
                via = proxy;
                distance = self.path(gpu(proxy), net(n)).kind;
            }
        }
        if distance == PathKind::P2c {
            distance = PathKind::C2c;
        }
        if distance > level {
            return GdrMode::Disabled;
        }
        match self.local_cpu(via) {
            Ok(c) if self.path(gpu(via), cpu(c)).kind == PathKind::C2c && distance != PathKind::C2c => GdrMode::Pci,
            _ => GdrMode::Enabled,
        }
    }

    /// The GPU a PXN path from GPU `g` to NET `n` goes through.
    pub fn intermediate_gpu(&self, g: usize, n: usize) -> Option<usize> {
        let path = self.path(gpu(g), net(n));
        if path.kind != PathKind::Pxn {
            return Some(g);
        }
        path.hops.iter().map(|h| self.system.node(h.from).links[h.link].remote).find(|r| r.kind != NodeKind::NvSwitch).filter(|r| r.kind == NodeKind::Gpu).map(|r| r.index)
    }

    /// The nodes of `kind` nearest `from`: highest bandwidth, then best path type.
    pub fn local(&self, from: NodeRef, kind: NodeKind) -> (Vec<usize>, PathKind) {
        let mut best: Vec<usize> = Vec::new();
        let (mut max_bw, mut min_kind) = (0.0f32, PathKind::Dis);
        for (i, p) in self.paths.from_to(from, kind).iter().enumerate() {
            if p.bandwidth > max_bw || (p.bandwidth == max_bw && p.kind < min_kind) {
                max_bw = p.bandwidth;
                min_kind = p.kind;
                best.clear();
            }
            if p.bandwidth == max_bw && p.kind == min_kind {
                best.push(i);
            }
        }
        (best, min_kind)
    }

    /// The NET GPU `g` uses on `channel` (NCCL's `ncclTopoGetLocalNet`, the AUTO policy): its
    /// nearest NICs, spread over the GPUs that share them by mirrored device number.
    pub fn local_net(&self, g: usize, channel: usize) -> Result<usize> {
        let (nets, _) = self.local(gpu(g), NodeKind::Net);
        if nets.is_empty() {
            return Err(Error::Graph(format!("GPU {g} reaches no network device")));
        }
        let (gpus, _) = self.local(net(nets[0]), NodeKind::Gpu);
        let per_gpu = nets.len().div_ceil(gpus.len().max(1));
        let Detail::Gpu { dev, .. } = self.system.node(gpu(g)).detail else { unreachable!("GPU nodes carry GPU details") };
        let mut index = dev.max(0) as usize;
        if nets.len().is_power_of_two() {
            index = mirror_bits(index, nets.len());
        }
        index += channel % per_gpu.max(1);
        Ok(nets[index % nets.len()])
    }

    /// The GPU that uses NET `n` first (on the lowest channel), if any.
    pub fn local_gpu(&self, n: usize) -> Result<Option<usize>> {
        let (gpus, _) = self.local(net(n), NodeKind::Gpu);
        for channel in 0..64 {
            for &g in &gpus {
                if self.local_net(g, channel)? == n {
                    return Ok(Some(g));
                }
            }
        }
        Ok(None)
    }

    /// The worst (max) or best (min) path type from any GPU to a node of `kind` (GPU pairs exclude a GPU to itself).
    pub fn gpu_path_extremes(&self, kind: NodeKind) -> (PathKind, PathKind) {
        let (mut min, mut max) = (PathKind::Sys, PathKind::Loc);
        for g in 0..self.system.of(NodeKind::Gpu).len() {
            for (j, p) in self.paths.from_to(gpu(g), kind).iter().enumerate() {
                if kind == NodeKind::Gpu && j == g {
                    continue;
                }
                min = min.min(p.kind);
                max = max.max(p.kind);
            }
        }
        (min, max)
    }

    /// Whether the GPUs form exactly two NVLink islands (GPUs split across two sockets with NVLink only inside each).
    pub fn split_nvlink(&self) -> bool {
        let n = self.system.of(NodeKind::Gpu).len();
        let mut domain: Vec<usize> = (0..n).collect();
        for g in 0..n {
            for p in g + 1..n {
                if self.path(gpu(g), gpu(p)).kind == PathKind::Nvl {
                    domain[p] = domain[g];
                }
            }
        }
        let mut count = vec![0; n];
        for d in &domain {
            count[*d] += 1;
        }
        count.iter().filter(|&&c| c > 1).count() == 2
    }
}

/// The type of a path made of two: their worse, except that PHB after C2C is P2C.
fn merge(a: PathKind, b: PathKind) -> PathKind {
    let (min, max) = (a.min(b), a.max(b));
    if max == PathKind::Phb && min == PathKind::C2c {
        PathKind::P2c
    } else {
        max
    }
}

/// `value`'s low bits reversed within `pow2` (NCCL spreads GPUs over NICs this way).
pub fn mirror_bits(value: usize, pow2: usize) -> usize {
    let mut mirror = 0;
    let (mut b, mut mb) = (1, pow2 >> 1);
    while b < pow2 {
        if value & b != 0 {
            mirror |= mb;
        }
        b <<= 1;
        mb >>= 1;
    }
    mirror
}
