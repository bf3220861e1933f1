//! From each host's searched graphs to the communicator's channels (NCCL's
//! `ncclTopoPreset`/`ncclTopoPostset`, `ncclGetDtree`), and the NIC each channel and each
//! point-to-point peer uses (`ncclTopoGetNetDev`):
//!
//! - rings: a channel's ring runs through every host's GPUs in that host's channel order,
//!   hosts in order; with NCCL_CROSS_NIC=2 odd hosts swap each pair of channels, so that a
//!   ring that left host n by NIC b enters host n+1 by NIC b;
//! - trees: within a host a chain in the tree graph's order; across hosts NCCL's double
//!   binary tree, the first half of the channels on one tree, the second half on the other
//!   (mirrored for an even number of hosts, shifted by one for an odd);
//! - channels: the fewer of the ring's and the tree's, doubled (each tree channel gets its
//!   twin on the other tree), doubled again on sm90+ across hosts when the ring runs above
//!   45 GB/s with fewer than 16, then clamped to NCCL_MIN_NCHANNELS..NCCL_MAX_NCHANNELS;
//! - a ring channel's NIC: the one it entered the host by for the host's first GPU, the one
//!   it leaves by for the others;
//! - a point-to-point peer's NIC (the map PXN uses): the NIC nearest the local GPU with the
//!   peer's device number (rail-aligned), reached through that GPU as proxy when it is an
//!   NVLink peer next to the NIC (NCCL_P2P_PXN_LEVEL=2).

use crate::error::{Error, Result};
use crate::paths::{PathKind, Topology};
use crate::search::{Graph, Pattern};
use crate::system::{Detail, NodeKind, NodeRef};

/// A rank's neighbours on one tree channel.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TreeLinks {
    pub up: Option<i32>,
    pub down: Vec<i32>,
}

/// One host's graphs, as the search left them.
#[derive(Clone, Debug)]
pub struct HostGraphs {
    pub ring: Graph,
    pub tree: Graph,
}

/// The communicator's channels.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    /// Per channel, the ring starting at rank 0 (following `next`).
    pub rings: Vec<Vec<i32>>,
    /// Per channel, per rank: tree neighbours.
    pub trees: Vec<Vec<TreeLinks>>,
}

/// Channel count bounds (NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS, config min/maxCTAs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelBounds {
    pub min: usize,
    pub max: usize,
}

impl Default for ChannelBounds {
    fn default() -> ChannelBounds {
        ChannelBounds { min: 1, max: 64 }
    }
}

/// A rank's place in a binary tree: (parent, child 0, child 1, whether it is its parent's second child).
pub type TreePlace = (Option<usize>, Option<usize>, Option<usize>, bool);

/// NCCL's binary tree over `n` ranks.
pub fn binary_tree(n: usize, rank: usize) -> TreePlace {
    let (n, rank) = (n as i64, rank as i64);
    let mut bit = 1;
    while bit < n {
        if bit & rank != 0 {
            break;
        }
        bit <<= 1;
    }
    let some = |v: i64| (v >= 0).then_some(v as usize);
    if rank == 0 {
        return (None, None, some(if n > 1 { bit >> 1 } else { -1 }), false);
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= n {
        up = rank ^ bit;
    }
    let second = rank >= up;
    let mut low = bit >> 1;
    let down0 = if low == 0 { -1 } else { rank - low };
    let mut down1 = if low == 0 { -1 } else { rank + low };
    while down1 >= n {
        down1 = if low == 0 { -1 } else { rank + low };
        low >>= 1;
    }
    (some(up), some(down0), some(down1), second)
}

/// NCCL's double binary tree: the binary tree, and its mirror (even `n`) or its shift by one (odd `n`).
pub fn double_tree(n: usize, rank: usize) -> [TreePlace; 2] {
    let first = binary_tree(n, rank);
    let second = if n % 2 == 1 {
        let shifted = (rank + n - 1) % n;
        let (u, d0, d1, t) = binary_tree(n, shifted);
        let f = |x: Option<usize>| x.map(|v| (v + 1) % n);
        (f(u), f(d0), f(d1), t)
    } else {
        let (u, d0, d1, t) = binary_tree(n, n - 1 - rank);
        let f = |x: Option<usize>| x.map(|v| n - 1 - v);
        (f(u), f(d0), f(d1), t)
    };
    [first, second]
}

/// Lays the hosts' graphs (in host order; each host's GPUs carry their communicator ranks)
/// out as the communicator's rings and trees.
pub fn layout(hosts: &[HostGraphs], nranks: usize, cc_min: i32, bounds: ChannelBounds) -> Result<Layout> {
    if hosts.is_empty() {
        return Err(Error::Graph("no hosts to lay channels over".into()));
    }
    let nodes = hosts.len();
    let channels = hosts.iter().map(|h| h.ring.channels.len().min(h.tree.channels.len())).min().unwrap_or(1).max(1);
    // Per channel, per host: the ring's order (odd hosts swap channel pairs when rings cross NICs in pairs).
    let ring_of = |host: usize, c: usize| -> &Vec<i32> {
        let g = &hosts[host].ring;
        let swap = g.cross_nic == 2 && channels % 2 == 0 && host % 2 == 1;
        let c = if swap { c ^ 1 } else { c };
        &g.channels[c % g.channels.len()].ranks
    };
    let mut next = vec![vec![-1i32; nranks]; channels];
    for (c, next) in next.iter_mut().enumerate() {
        for host in 0..nodes {
            let order = ring_of(host, c);
            for w in order.windows(2) {
                next[w[0] as usize] = w[1];
            }
            let following = ring_of((host + 1) % nodes, c);
            next[*order.last().expect("a channel has a GPU") as usize] = following[0];
        }
    }
    let mut trees = vec![vec![TreeLinks::default(); nranks]; 2 * channels];
    for c in 0..channels {
        let mut to_parent = Vec::with_capacity(nodes);
        let mut to_child = Vec::with_capacity(nodes);
        for host in hosts {
            let g = &host.tree;
            let order = &g.channels[c % g.channels.len()].ranks;
            for (i, &r) in order.iter().enumerate() {
                let up = (i > 0).then(|| order[i - 1]);
                let down: Vec<i32> = order.get(i + 1).copied().into_iter().collect();
                for t in [c, c + channels] {
                    trees[t][r as usize] = TreeLinks { up, down: down.clone() };
                }
            }
            let child0 = if g.pattern == Pattern::Tree { 0 } else { 1.min(order.len() - 1) };
            let child1 = if g.pattern == Pattern::SplitTree { 1.min(order.len() - 1) } else { 0 };
            to_parent.push(order[0]);
            to_child.push((order[child0], order[child1]));
        }
        for node in 0..nodes {
            let dt = double_tree(nodes, node);
            for (half, &(u, d0, d1, second)) in dt.iter().enumerate() {
                let t = c + half * channels;
                if let Some(u) = u {
                    let parent_side = if second { to_child[u].1 } else { to_child[u].0 };
                    trees[t][to_parent[node] as usize].up = Some(parent_side);
                }
                if let Some(d0) = d0 {
                    trees[t][to_child[node].0 as usize].down.push(to_parent[d0]);
                }
                if let Some(d1) = d1 {
                    trees[t][to_child[node].1 as usize].down.push(to_parent[d1]);
                }
            }
        }
    }
    let mut count = (channels * 2).min(64);
    let ring_bw = hosts.iter().map(|h| h.ring.bw_intra).fold(f32::MAX, f32::min);
    if cc_min >= 90 && nodes > 1 && ring_bw > 45.0 && count < 16 {
        count *= 2;
    }
    count = count.min(bounds.max.max(1)).max(bounds.min.min(64)).min(64);
    let rings = (0..count)
        .map(|c| {
            let next = &next[c % channels];
            let mut ring = vec![0];
            while ring.len() < nranks {
                let n = next[*ring.last().expect("starts with rank 0") as usize];
                if n < 0 || ring.contains(&n) {
                    return Err(Error::Graph(format!("channel {c}: the rings of the hosts do not join into one ring over {nranks} ranks")));
                }
                ring.push(n);
            }
            Ok(ring)
        })
        .collect::<Result<Vec<_>>>()?;
    let trees = (0..count).map(|c| trees[c % (2 * channels)].clone()).collect();
    Ok(Layout { rings, trees })
}

/// The NET (index) a ring or tree channel uses at the GPU of `rank`: the one the channel
/// came in by at the host's first GPU, the one it leaves by elsewhere.
pub fn channel_net(topology: &Topology, graph: &Graph, rank: i32, channel: usize) -> Option<usize> {
    let ch = graph.channels.get(channel % graph.channels.len().max(1))?;
    let id = if ch.ranks.first() == Some(&rank) { ch.nets.0 } else { ch.nets.1 };
    topology.system.find(NodeKind::Net, id).map(|r| r.index)
}

/// Knobs of the point-to-point NIC choice, with NCCL's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pSettings {
    /// NCCL_CROSS_NIC.
    pub cross_nic: u8,
    /// NCCL_P2P_PXN_LEVEL: 0 never, 1 only when the GPU's own path is PXN, 2 as much as possible.
    pub pxn_level: u8,
    /// NCCL_PXN_DISABLE.
    pub pxn_disable: bool,
}

impl Default for P2pSettings {
    fn default() -> P2pSettings {
        P2pSettings { cross_nic: 2, pxn_level: 2, pxn_disable: false }
    }
}

/// Where a point-to-point send to a peer on another host goes out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct P2pNet {
    /// The NET node index.
    pub net: usize,
    /// The Net's device number.
    pub dev: i32,
    /// The rank whose proxy drives the NIC (the sender itself unless PXN routes through a peer GPU).
    pub proxy_rank: i32,
}

/// The NIC and proxy rank for a send from `rank` on `channel` to a peer whose GPU has device
/// number `peer_dev` on its host.
pub fn p2p_net(topology: &Topology, rank: i32, peer_dev: i32, channel: usize, settings: P2pSettings) -> Result<P2pNet> {
    let g1 = topology.system.gpu_of_rank(rank).ok_or_else(|| Error::Graph(format!("rank {rank} has no GPU in this topology")))?;
    let net_dev = |n: usize| match topology.system.of(NodeKind::Net)[n].detail {
        Detail::Net { dev, .. } => dev,
        _ => -1,
    };
    let own = topology.local_net(g1, channel)?;
    let mut choice = P2pNet { net: own, dev: net_dev(own), proxy_rank: rank };
    let pxn_level = if settings.pxn_disable { 0 } else { settings.pxn_level };
    if settings.cross_nic != 0 && pxn_level == 0 {
        return Ok(choice);
    }
    // The local GPU with the peer's device number: the peer's rail.
    let Some(rail_gpu) = topology.system.of(NodeKind::Gpu).iter().position(|n| matches!(n.detail, Detail::Gpu { dev, .. } if dev == peer_dev)) else {
        return Ok(choice);
    };
    let rail_net = topology.local_net(rail_gpu, channel)?;
    if settings.cross_nic == 0 {
        choice.net = rail_net;
        choice.dev = net_dev(rail_net);
    }
    let gpu = |i| NodeRef { kind: NodeKind::Gpu, index: i };
    let net = |i| NodeRef { kind: NodeKind::Net, index: i };
    match pxn_level {
        1 if topology.path(gpu(g1), net(rail_net)).kind <= PathKind::Pxn => {
            choice.net = rail_net;
            choice.dev = net_dev(rail_net);
            if let Some(proxy) = topology.intermediate_gpu(g1, rail_net) {
                choice.proxy_rank = topology.system.of(NodeKind::Gpu)[proxy].gpu_rank().unwrap_or(rank);
            }
        }
        2 => {
            if let Some(g2) = topology.local_gpu(rail_net)? {
                if topology.path(gpu(g2), gpu(g1)).kind <= PathKind::Nvl && topology.path(gpu(g2), net(rail_net)).kind <= PathKind::P2c {
                    choice = P2pNet { net: rail_net, dev: net_dev(rail_net), proxy_rank: topology.system.of(NodeKind::Gpu)[g2].gpu_rank().unwrap_or(rank) };
                }
            }
        }
        _ => {}
    }
    Ok(choice)
}

/// The NIC map PXN uses: for each local GPU rank and each peer device number, the NIC and
/// proxy rank of a send on `channel`.
pub fn nic_map(topology: &Topology, channel: usize, settings: P2pSettings) -> Result<Vec<(i32, i32, P2pNet)>> {
    let mut map = Vec::new();
    let devs: Vec<i32> = topology.system.of(NodeKind::Gpu).iter().filter_map(|n| if let Detail::Gpu { dev, .. } = n.detail { Some(dev) } else { None }).collect();
    for node in topology.system.of(NodeKind::Gpu) {
        let Some(rank) = node.gpu_rank() else { continue };
        for &dev in &devs {
            map.push((rank, dev, p2p_net(topology, rank, dev, channel, settings)?));
        }
    }
    Ok(map)
}

/// The CPUs of an affinity mask as NCCL and sysfs write it (`cpumap`: 32-bit groups in hex,
/// most significant first, separated by commas: `00000000,0000ffff`); None if it is not one.
pub fn cpumask(text: &str) -> Option<Vec<usize>> {
    let groups: Vec<&str> = text.trim().split(',').collect();
    let mut cpus = Vec::new();
    for (i, group) in groups.iter().rev().enumerate() {
        let bits = u32::from_str_radix(group.trim(), 16).ok()?;
        cpus.extend((0..32).filter(|b| bits >> b & 1 == 1).map(|b| i * 32 + b));
    }
    Some(cpus)
}

/// CPUs and ranges as Linux lists them (`0-3,8`: sysfs `cpulist`, `Cpus_allowed_list`);
/// None if the text is not such a list.
pub fn cpu_list(text: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.trim().is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => cpus.extend(a.trim().parse::<usize>().ok()?..=b.trim().parse::<usize>().ok()?),
            None => cpus.push(part.trim().parse().ok()?),
        }
    }
    Some(cpus)
}

/// The CPUs the calling thread may run on (`Cpus_allowed_list` of
/// /proc/thread-self/status, else of /proc/self/status: the affinity a launcher bound the
/// process to, or the thread to), or none where that cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    ["/proc/thread-self/status", "/proc/self/status"]
        .iter()
        .find_map(|path| std::fs::read_to_string(path).ok())
        .and_then(|status| status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).and_then(cpu_list))
        .unwrap_or_default()
}

/// The names of the NICs nearest a process that runs on `cpus` (of the first host the
/// topology describes): the NETs nearest the CPU (NUMA node) whose affinity holds every one
/// of `cpus`, by bandwidth and then path type (NCCL's rule for a GPU's NIC, from the CPU
/// instead). None when no CPU's affinity holds them all (the process spans NUMA nodes, or
/// the file gives no affinities) or that CPU reaches no NET: every NIC is then as near as
/// any other.
pub fn nets_near_cpus(topology: &Topology, cpus: &[usize]) -> Option<Vec<String>> {
    if cpus.is_empty() {
        return None;
    }
    let system = &topology.system;
    let holds = |node: &crate::system::Node| match &node.detail {
        Detail::Cpu { affinity: Some(mask), .. } => cpumask(mask).is_some_and(|set| cpus.iter().all(|c| set.contains(c))),
        _ => false,
    };
    let cpu = system.of(NodeKind::Cpu).iter().position(|node| node.host() == 0 && holds(node))?;
    let (nets, _) = topology.local(NodeRef { kind: NodeKind::Cpu, index: cpu }, NodeKind::Net);
    let names: Vec<String> = nets
        .into_iter()
        .filter_map(|n| match &system.of(NodeKind::Net)[n].detail {
            Detail::Net { name, .. } => Some(name.clone()),
            _ => None,
        })
        .collect();
    (!names.is_empty()).then_some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_trees_match_nccls_picture() {
        // NCCL's trees.cc: 0-8, 8-4/12, 4-2/6, 12-10 (and 13), 2-1/3 ...
        assert_eq!(binary_tree(14, 0), (None, None, Some(8), false));
        assert_eq!(binary_tree(14, 8), (Some(0), Some(4), Some(12), true));
        assert_eq!(binary_tree(14, 12), (Some(8), Some(10), Some(13), true));
        assert_eq!(binary_tree(14, 13), (Some(12), None, None, true));
        assert_eq!(binary_tree(14, 1), (Some(2), None, None, false));
        // Mirror for even counts: 11 is the second tree's root with child 3.
        let [_, second] = double_tree(12, 11);
        assert_eq!(second.0, None);
        assert_eq!(second.2, Some(3));
        // Shift for odd counts: rank 1 is the second tree's root.
        let [_, second] = double_tree(13, 1);
        assert_eq!(second.0, None);
    }

    #[test]
    fn every_rank_but_the_root_has_a_parent_in_both_trees() {
        for n in 1..40 {
            for t in 0..2 {
                let roots = (0..n).filter(|&r| double_tree(n, r)[t].0.is_none()).count();
                assert_eq!(roots, 1, "n {n} tree {t}");
                for r in 0..n {
                    let [a, b] = double_tree(n, r);
                    let (u, ..) = if t == 0 { a } else { b };
                    if let Some(u) = u {
                        let [pa, pb] = double_tree(n, u);
                        let p = if t == 0 { pa } else { pb };
                        assert!(p.1 == Some(r) || p.2 == Some(r), "n {n} tree {t}: {r}'s parent {u} lacks it");
                    }
                }
            }
        }
    }
}
