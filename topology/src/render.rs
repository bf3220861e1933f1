//! The topology for people: the machine as a tree, the path matrix (`nvidia-smi topo -m`'s
//! shape), the channels, and an SVG picture of the graph.

use std::fmt::Write;

use crate::paths::{PathKind, Topology};
use crate::search::Graph;
use crate::system::{bandwidth, int_to_bus_id, Detail, LinkKind, Node, NodeKind, NodeRef, System};

/// A node's label: `GPU0 (rank 0, sm90) 0000:19:00.0`, `NIC mlx5_0 400 Gb/s`, `CPU numa 0 (x86 Intel)`...
pub fn label(system: &System, r: NodeRef) -> String {
    let node = system.node(r);
    let local = node.id & 0x00ff_ffff_ffff_ffff;
    match &node.detail {
        Detail::Gpu { dev, rank, sm, .. } => format!("GPU{dev} (rank {rank}, sm{sm}) {}", int_to_bus_id(local)),
        Detail::Pci { device } => format!("PCI {} [{:04x}:{:04x}]", int_to_bus_id(local), device >> 48, (device >> 32) & 0xffff),
        Detail::NvSwitch => "NVSwitch".into(),
        Detail::Cpu { numa_id, arch, vendor, .. } => format!("CPU numa {numa_id} ({arch:?} {vendor:?})"),
        Detail::Nic => match local {
            0 => "NIC (virtual)".into(),
            l => format!("NIC {}", int_to_bus_id(l & 0x00ff_ffff_ffff_ffff)),
        },
        Detail::Net { name, dev, bandwidth, port, .. } => format!("NET{dev} {name} port {port} {:.0} Gb/s", bandwidth * 8.0),
    }
}

/// The machine as a tree from each CPU down the PCI links, with NVLink, C2C, SMP and network links listed where they start.
pub fn tree(system: &System) -> String {
    let mut out = String::new();
    for index in 0..system.of(NodeKind::Cpu).len() {
        tree_rec(system, NodeRef { kind: NodeKind::Cpu, index }, None, 0, &mut out);
    }
    for index in 0..system.of(NodeKind::NvSwitch).len() {
        tree_rec(system, NodeRef { kind: NodeKind::NvSwitch, index }, None, 0, &mut out);
    }
    out
}

fn tree_rec(system: &System, r: NodeRef, up: Option<NodeRef>, depth: usize, out: &mut String) {
    let _ = writeln!(out, "{}{}", "  ".repeat(depth), label(system, r));
    for link in &system.node(r).links {
        if Some(link.remote) == up {
            continue;
        }
        let down = matches!(link.kind, LinkKind::Pci | LinkKind::Net) && link.remote.kind != NodeKind::Cpu && r.kind != NodeKind::NvSwitch;
        if down {
            let _ = write!(out, "{}+ {} {:.1} GB/s ", "  ".repeat(depth + 1), link.kind.name(), link.bandwidth);
            let mut sub = String::new();
            tree_rec(system, link.remote, Some(r), depth + 1, &mut sub);
            out.push_str(sub.trim_start());
        } else {
            let _ = writeln!(out, "{}+ {} {:.1} GB/s -> {}", "  ".repeat(depth + 1), link.kind.name(), link.bandwidth, label(system, link.remote));
        }
    }
}

/// GPUs and NICs against each other, like `nvidia-smi topo -m`: `X` on the diagonal, `NV<n>`
/// for n NVLinks, else NCCL's path type; then each GPU's nearest CPU and its affinity.
pub fn matrix(topology: &Topology) -> String {
    let system = &topology.system;
    let gpus = system.of(NodeKind::Gpu).len();
    let nets = system.of(NodeKind::Net).len();
    let refs: Vec<NodeRef> = (0..gpus).map(|index| NodeRef { kind: NodeKind::Gpu, index }).chain((0..nets).map(|index| NodeRef { kind: NodeKind::Net, index })).collect();
    let name = |r: NodeRef| match &system.node(r).detail {
        Detail::Gpu { dev, .. } => format!("GPU{dev}"),
        Detail::Net { name, dev, .. } => if name.is_empty() { format!("NET{dev}") } else { name.clone() },
        _ => String::new(),
    };
    let width = refs.iter().map(|&r| name(r).len()).max().unwrap_or(4).max(5) + 2;
    let mut out = format!("{:width$}", "");
    for &r in &refs {
        let _ = write!(out, "{:>width$}", name(r));
    }
    if gpus > 0 {
        let _ = write!(out, "  CPU affinity / NUMA");
    }
    out.push('\n');
    for &row in &refs {
        let _ = write!(out, "{:width$}", name(row));
        for &col in &refs {
            let cell = if row == col {
                "X".to_string()
            } else {
                let path = topology.path(row, col);
                match path.kind {
                    PathKind::Nvl => {
                        let sm = match system.node(row).detail {
                            Detail::Gpu { sm, .. } => sm,
                            _ => 90,
                        };
                        format!("NV{}", (path.bandwidth / bandwidth::nvlink(sm)).round() as i64)
                    }
                    kind => kind.name().to_string(),
                }
            };
            let _ = write!(out, "{cell:>width$}");
        }
        if row.kind == NodeKind::Gpu {
            if let Ok(c) = topology.local_cpu(row.index) {
                if let Detail::Cpu { numa_id, affinity, .. } = &system.of(NodeKind::Cpu)[c].detail {
                    let _ = write!(out, "  {} / {numa_id}", affinity.as_deref().unwrap_or("-"));
                }
            }
        }
        out.push('\n');
    }
    out.push_str("\nX = self, NV# = # NVLinks, NVB = NVLink through a GPU, C2C, PIX = one PCIe switch, PXB = several, P2C = C2C + PCIe, PXN = through an NVLink peer, PHB = PCIe host bridge, SYS = across the SMP interconnect\n");
    out.push_str("\nBandwidth (GB/s)\n");
    let _ = write!(out, "{:width$}", "");
    for &r in &refs {
        let _ = write!(out, "{:>width$}", name(r));
    }
    out.push('\n');
    for &row in &refs {
        let _ = write!(out, "{:width$}", name(row));
        for &col in &refs {
            let cell = if row == col { "-".to_string() } else { format!("{:.1}", topology.path(row, col).bandwidth) };
            let _ = write!(out, "{cell:>width$}");
        }
        out.push('\n');
    }
    out
}

/// A searched graph: its speeds, path types and each channel's GPUs and NICs.
pub fn channels(topology: &Topology, name: &str, graph: &Graph) -> String {
    let mut out = format!(
        "{name}: pattern {}, {} channel(s), {:.1}/{:.1} GB/s per channel (intra/inter), type {}/{}, cross NIC {}, same channels {}\n",
        graph.pattern.name(),
        graph.channels.len(),
        graph.bw_intra,
        graph.bw_inter,
        graph.type_intra.name(),
        graph.type_inter.name(),
        graph.cross_nic,
        graph.same_channels
    );
    let net_name = |id: u64| {
        topology.system.find(NodeKind::Net, id).map(|r| match &topology.system.node(r).detail {
            Detail::Net { name, dev, .. } => format!("NET{dev}({name})"),
            _ => String::new(),
        })
    };
    for (c, ch) in graph.channels.iter().enumerate() {
        let _ = write!(out, "  {c:2} :");
        if let Some(n) = net_name(ch.nets.0) {
            let _ = write!(out, " {n} ->");
        }
        for r in &ch.ranks {
            let _ = write!(out, " {r}");
        }
        if let Some(n) = net_name(ch.nets.1) {
            let _ = write!(out, " -> {n}");
        }
        out.push('\n');
    }
    out
}

/// An SVG picture: CPUs on top, the PCI tree below them, GPUs and NICs at the leaves, the
/// NVSwitch at the bottom; PCI, SMP and network links as lines, NVLinks as curves, each
/// labelled with its bandwidth.
pub fn svg(system: &System) -> String {
    const W: f32 = 170.0;
    const H: f32 = 90.0;
    let mut position: std::collections::HashMap<NodeRef, (f32, f32)> = std::collections::HashMap::new();
    let mut column = 0.0f32;
    let mut depth_max = 0usize;
    for index in 0..system.of(NodeKind::Cpu).len() {
        place(system, NodeRef { kind: NodeKind::Cpu, index }, None, 0, &mut column, &mut position, &mut depth_max);
    }
    for (index, _) in system.of(NodeKind::NvSwitch).iter().enumerate() {
        position.insert(NodeRef { kind: NodeKind::NvSwitch, index }, ((column.max(1.0) - 1.0) / 2.0, depth_max as f32 + 1.5));
    }
    let width = column.max(1.0) * W + 40.0;
    let height = (depth_max as f32 + 3.0) * H + 20.0;
    let at = |r: &NodeRef| position.get(r).map(|&(x, y)| (20.0 + x * W + W / 2.0, 20.0 + y * H + 20.0));
    let mut out = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" font-family=\"sans-serif\" font-size=\"11\">\n");
    out.push_str("<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n");
    for kind in NodeKind::ALL {
        for (index, node) in system.of(kind).iter().enumerate() {
            let from = NodeRef { kind, index };
            let Some((x1, y1)) = at(&from) else { continue };
            for link in &node.links {
                // Each pair once; NVLinks towards a GPU may be one-way (GPU to GPU).
                if link.remote < from && system.node(link.remote).links.iter().any(|l| l.remote == from) {
                    continue;
                }
                let Some((x2, y2)) = at(&link.remote) else { continue };
                let (colour, dash) = match link.kind {
                    LinkKind::NvLink => ("#76b900", ""),
                    LinkKind::Sys => ("#888888", " stroke-dasharray=\"6 4\""),
                    LinkKind::Net => ("#1f77b4", ""),
                    LinkKind::C2c => ("#d62728", ""),
                    _ => ("#333333", ""),
                };
                if link.kind == LinkKind::NvLink && link.remote.kind == NodeKind::Gpu {
                    let (mx, my) = ((x1 + x2) / 2.0, y1.max(y2) + H * 0.6);
                    let _ = writeln!(out, "<path d=\"M{x1:.0},{y1:.0} Q{mx:.0},{my:.0} {x2:.0},{y2:.0}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>");
                    let _ = writeln!(out, "<text x=\"{mx:.0}\" y=\"{:.0}\" text-anchor=\"middle\" fill=\"{colour}\">{:.0} GB/s</text>", (y1.max(y2) + my) / 2.0, link.bandwidth);
                } else {
                    let _ = writeln!(out, "<line x1=\"{x1:.0}\" y1=\"{y1:.0}\" x2=\"{x2:.0}\" y2=\"{y2:.0}\" stroke=\"{colour}\" stroke-width=\"2\"{dash}/>");
                    let _ = writeln!(out, "<text x=\"{:.0}\" y=\"{:.0}\" fill=\"{colour}\">{} {:.1}</text>", (x1 + x2) / 2.0 + 4.0, (y1 + y2) / 2.0, link.kind.name(), link.bandwidth);
                }
            }
        }
    }
    for kind in NodeKind::ALL {
        for (index, node) in system.of(kind).iter().enumerate() {
            let r = NodeRef { kind, index };
            let Some((x, y)) = at(&r) else { continue };
            let fill = match kind {
                NodeKind::Gpu => "#d9f2b3",
                NodeKind::Cpu => "#cfe0f7",
                NodeKind::NvSwitch => "#b3e0a0",
                NodeKind::Nic | NodeKind::Net => "#fde0b8",
                NodeKind::Pci => "#eeeeee",
            };
            let text = escape(&short_label(system, node, r));
            let _ = writeln!(out, "<rect x=\"{:.0}\" y=\"{:.0}\" width=\"{:.0}\" height=\"26\" rx=\"5\" fill=\"{fill}\" stroke=\"#555\"/>", x - W / 2.0 + 8.0, y - 13.0, W - 16.0);
            let _ = writeln!(out, "<text x=\"{x:.0}\" y=\"{:.0}\" text-anchor=\"middle\">{text}</text>", y + 4.0);
        }
    }
    out.push_str("</svg>\n");
    out
}

fn short_label(system: &System, node: &Node, r: NodeRef) -> String {
    match &node.detail {
        Detail::Gpu { dev, rank, sm, .. } => format!("GPU{dev} rank {rank} sm{sm}"),
        Detail::Net { name, dev, bandwidth, .. } => format!("NET{dev} {name} {:.0}Gb", bandwidth * 8.0),
        Detail::Pci { .. } => format!("PCI {}", int_to_bus_id(node.id & 0x00ff_ffff_ffff_ffff)),
        _ => label(system, r),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Places a PCI subtree: leaves take a column each, parents sit over their children.
fn place(system: &System, r: NodeRef, up: Option<NodeRef>, depth: usize, column: &mut f32, position: &mut std::collections::HashMap<NodeRef, (f32, f32)>, depth_max: &mut usize) {
    *depth_max = (*depth_max).max(depth);
    let children: Vec<NodeRef> = system
        .node(r)
        .links
        .iter()
        .filter(|l| Some(l.remote) != up && matches!(l.kind, LinkKind::Pci | LinkKind::Net) && l.remote.kind != NodeKind::Cpu && !position.contains_key(&l.remote))
        .map(|l| l.remote)
        .collect();
    if children.is_empty() {
        position.insert(r, (*column, depth as f32));
        *column += 1.0;
        return;
    }
    let start = *column;
    position.insert(r, (0.0, depth as f32));
    for child in children {
        place(system, child, Some(r), depth + 1, column, position, depth_max);
    }
    position.insert(r, ((start + *column - 1.0) / 2.0, depth as f32));
}
