//! The machine as a graph: GPUs, PCI switches, NVSwitches, CPUs (NUMA domains), NICs and
//! their network ports, joined by links with a kind and a bandwidth, built from the
//! topology XML by NCCL's rules (`ncclTopoGetSystemFromXml`, NCCL 2.28):
//!
//! - a `<pci>` becomes a PCI switch, unless it holds a `<gpu>` (a GPU) or a `<nic>` (a NIC,
//!   one per PCI device and NUMA node: the ports of a multi-port card are merged); class
//!   0x068000 is an NVSwitch, 0x068001 a CPU. Its link to the parent has
//!   `link_width × lane rate / 8` GB/s (Gen3 ×16 is 12 GB/s; a width of 0 counts as 16);
//! - `<nvlink count=N>` adds N × the NVLink bandwidth of the GPU's generation (20.6 GB/s on
//!   sm90) towards a GPU, the local CPU, or the one NVSwitch node all switches become;
//! - `<c2c bw count>` links a GPU and its CPU; `<pcilink>` joins two PCI switches at local bandwidth;
//! - CPUs of one host are joined by the SMP interconnect at the bandwidth of their kind
//!   (QPI/UPI by Intel generation, AMD's, POWER9's, ARM's);
//! - each `<net>` is a NET node behind its NIC, at `speed` Mb/s / 8000 GB/s.
//!
//! Links are kept sorted by bandwidth, highest first, and the PCI tree with links going
//! down before the link going up, as NCCL orders them: the search's choices follow from it.

use crate::error::{Error, Result};
use crate::xml::XmlNode;

/// Bandwidths in GB/s (NCCL's `topo.h`).
pub mod bandwidth {
    /// A node to itself, or links that never limit (a CPU to its virtual NIC).
    pub const LOCAL: f32 = 5000.0;
    /// PCIe Gen3 ×16.
    pub const PCI: f32 = 12.0;
    /// A 100 Gb/s NIC.
    pub const NET: f32 = 12.0;
    pub const AMD: f32 = 16.0;
    pub const BDW_QPI: f32 = 6.0;
    pub const SKL_QPI: f32 = 10.0;
    pub const SRP_QPI: f32 = 22.0;
    pub const ERP_QPI: f32 = 40.0;
    pub const ZPI: f32 = 6.0;
    pub const YONGFENG_ZPI: f32 = 9.0;
    pub const P9: f32 = 32.0;
    pub const ARM: f32 = 6.0;

    /// One NVLink's bandwidth for a GPU of compute capability `sm` (e.g. 90).
    pub fn nvlink(sm: i32) -> f32 {
        match sm {
            s if s >= 100 => 40.1,
            s if s >= 90 => 20.6,
            86 => 12.0,
            s if s >= 80 => 20.0,
            s if s >= 70 => 20.0,
            s if s >= 60 => 18.0,
            _ => 20.0,
        }
    }
}

/// What a node is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKind {
    Gpu = 0,
    Pci = 1,
    NvSwitch = 2,
    /// A NUMA domain.
    Cpu = 3,
    Nic = 4,
    Net = 5,
}

impl NodeKind {
    pub const ALL: [NodeKind; 6] = [NodeKind::Gpu, NodeKind::Pci, NodeKind::NvSwitch, NodeKind::Cpu, NodeKind::Nic, NodeKind::Net];

    /// NCCL's name for the kind (`GPU`, `PCI`, `NVS`, `CPU`, `NIC`, `NET`).
    pub fn name(self) -> &'static str {
        ["GPU", "PCI", "NVS", "CPU", "NIC", "NET"][self as usize]
    }
}

/// What a link is (NCCL's link types; they share numbers with [`crate::PathKind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkKind {
    Local = 0,
    NvLink = 1,
    C2c = 3,
    Pci = 4,
    /// The SMP interconnect between NUMA domains (QPI, UPI, Infinity Fabric...).
    Sys = 9,
    Net = 10,
}

impl LinkKind {
    /// NCCL's name (`LOC`, `NVL`, `C2C`, `PCI`, `SYS`, `NET`).
    pub fn name(self) -> &'static str {
        match self {
            LinkKind::Local => "LOC",
            LinkKind::NvLink => "NVL",
            LinkKind::C2c => "C2C",
            LinkKind::Pci => "PCI",
            LinkKind::Sys => "SYS",
            LinkKind::Net => "NET",
        }
    }
}

/// A node of a kind, by its index among the nodes of that kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeRef {
    pub kind: NodeKind,
    pub index: usize,
}

/// A one-way link; its reverse is a separate link of the remote node.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    pub kind: LinkKind,
    /// GB/s.
    pub bandwidth: f32,
    pub remote: NodeRef,
}

/// CPU architectures NCCL tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuArch {
    X86,
    Power,
    Arm,
    Unknown,
}

/// CPU vendors NCCL tells apart (x86 only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuVendor {
    Intel,
    Amd,
    Zhaoxin,
    Unknown,
}

/// Intel generations and Zhaoxin models that set the inter-socket bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuModel {
    IntelBroadwell,
    IntelSkylake,
    IntelSapphireRapids,
    IntelEmeraldRapids,
    Yongfeng,
    Unknown,
}

/// What each kind of node carries.
#[derive(Clone, Debug, PartialEq)]
pub enum Detail {
    Gpu { dev: i32, rank: i32, sm: i32, gdr: bool },
    Pci { device: u64 },
    NvSwitch,
    Cpu { arch: CpuArch, vendor: CpuVendor, model: CpuModel, numa_id: i32, affinity: Option<String> },
    Nic,
    Net { name: String, dev: i32, guid: u64, port: i32, bandwidth: f32, latency: f32, gdr: bool, coll: bool, max_channels: i32, pci_id: u64 },
}

/// A node: its kind, id (host index << 56 | local id: bus id for PCI devices, NUMA id for CPUs, device number for NETs), and links.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub kind: NodeKind,
    pub id: u64,
    pub detail: Detail,
    pub links: Vec<Link>,
}

impl Node {
    /// The host index part of the id.
    pub fn host(&self) -> usize {
        (self.id >> 56) as usize
    }

    /// The GPU's rank (-1 where the XML gives none), or None for other kinds.
    pub fn gpu_rank(&self) -> Option<i32> {
        match self.detail {
            Detail::Gpu { rank, .. } => Some(rank),
            _ => None,
        }
    }
}

/// The graph of one or more hosts' nodes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct System {
    /// Nodes by kind, in [`NodeKind`] order.
    pub nodes: [Vec<Node>; 6],
    /// The host hashes (`<cpu host_hash>`) in order of first appearance: the host index of an id.
    pub host_hashes: Vec<u64>,
}

/// The id of a local object on host `host`.
pub fn topo_id(host: usize, local: u64) -> u64 {
    ((host as u64) << 56) + (local & 0x00ff_ffff_ffff_ffff)
}

/// A PCI bus id (`0000:19:00.0`) as a number (`0x19000`... NCCL's `busIdToInt64`: the hex digits, punctuation dropped).
pub fn bus_id_to_int(bus_id: &str) -> Option<u64> {
    let digits: String = bus_id.chars().filter(|c| c.is_ascii_hexdigit()).collect();
    if digits.is_empty() || digits.len() > 16 {
        return None;
    }
    u64::from_str_radix(&digits, 16).ok()
}

/// The bus id string of a number from [`bus_id_to_int`].
pub fn int_to_bus_id(id: u64) -> String {
    format!("{:04x}:{:02x}:{:02x}.{:01x}", (id >> 20) & 0xffff, (id >> 12) & 0xff, (id >> 4) & 0xff, id & 0xf)
}

impl System {
    /// The nodes of `kind`.
    pub fn of(&self, kind: NodeKind) -> &[Node] {
        &self.nodes[kind as usize]
    }

    /// The node `r` names.
    pub fn node(&self, r: NodeRef) -> &Node {
        &self.nodes[r.kind as usize][r.index]
    }

    pub(crate) fn node_mut(&mut self, r: NodeRef) -> &mut Node {
        &mut self.nodes[r.kind as usize][r.index]
    }

    /// The node of `kind` with `id`.
    pub fn find(&self, kind: NodeKind, id: u64) -> Option<NodeRef> {
        self.of(kind).iter().position(|n| n.id == id).map(|index| NodeRef { kind, index })
    }

    /// The GPU of `rank`.
    pub fn gpu_of_rank(&self, rank: i32) -> Option<usize> {
        self.of(NodeKind::Gpu).iter().position(|n| n.gpu_rank() == Some(rank))
    }

    /// Compute capabilities of the GPUs (min, max); (0, 0) without GPUs.
    pub fn compute_capability(&self) -> (i32, i32) {
        let sms = self.of(NodeKind::Gpu).iter().filter_map(|n| match n.detail {
            Detail::Gpu { sm, .. } => Some(sm),
            _ => None,
        });
        sms.fold(None, |acc: Option<(i32, i32)>, sm| Some(acc.map_or((sm, sm), |(lo, hi)| (lo.min(sm), hi.max(sm))))).unwrap_or((0, 0))
    }

    /// The first CPU's (arch, vendor, model): what NCCL's tuning reads.
    pub fn cpu_type(&self) -> (CpuArch, CpuVendor, CpuModel) {
        match self.of(NodeKind::Cpu).first().map(|n| &n.detail) {
            Some(Detail::Cpu { arch, vendor, model, .. }) => (*arch, *vendor, *model),
            _ => (CpuArch::Unknown, CpuVendor::Unknown, CpuModel::Unknown),
        }
    }

    fn add(&mut self, kind: NodeKind, id: u64, detail: Detail) -> NodeRef {
        let list = &mut self.nodes[kind as usize];
        list.push(Node { kind, id, detail, links: Vec::new() });
        NodeRef { kind, index: list.len() - 1 }
    }

    /// Adds `bandwidth` to the link `from` → `to` of `kind` (creating it), keeping links sorted by bandwidth.
    pub(crate) fn connect(&mut self, from: NodeRef, to: NodeRef, kind: LinkKind, bandwidth: f32) {
        let links = &mut self.node_mut(from).links;
        let i = match links.iter().position(|l| l.remote == to && l.kind == kind) {
            Some(i) => {
                links[i].bandwidth += bandwidth;
                i
            }
            None => {
                links.push(Link { kind, bandwidth, remote: to });
                links.len() - 1
            }
        };
        // Bubble the changed link up past lower-bandwidth links (NCCL keeps equal ones in insertion order).
        let mut i = i;
        while i > 0 && links[i - 1].bandwidth < links[i].bandwidth {
            links.swap(i - 1, i);
            i -= 1;
        }
    }

    /// Builds the graph from the XML (see the module doc).
    pub fn from_xml(xml: &XmlNode) -> Result<System> {
        if xml.name != "system" {
            return Err(Error::Xml { origin: None, reason: format!("expected <system>, got <{}>", xml.name) });
        }
        let mut system = System::default();
        for cpu in xml.children.iter().filter(|c| c.name == "cpu") {
            system.add_cpu(cpu)?;
        }
        for cpu in xml.children.iter().filter(|c| c.name == "cpu") {
            let host = system.host_index(cpu);
            for child in &cpu.children {
                system.add_nvlinks(child, None, host)?;
            }
        }
        for cpu in xml.children.iter().filter(|c| c.name == "cpu") {
            let host = system.host_index(cpu);
            for child in &cpu.children {
                system.add_c2c_and_pcilinks(child, None, host)?;
            }
        }
        system.connect_cpus();
        system.sort_pci_trees();
        Ok(system)
    }

    fn host_index(&mut self, cpu: &XmlNode) -> usize {
        let hash = cpu.attr("host_hash").and_then(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).ok()).unwrap_or(0);
        match self.host_hashes.iter().position(|&h| h == hash) {
            Some(i) => i,
            None => {
                self.host_hashes.push(hash);
                self.host_hashes.len() - 1
            }
        }
    }

    fn add_cpu(&mut self, xml: &XmlNode) -> Result<()> {
        let numa_id = xml.int_or("numaid", -1)? as i32;
        let host = self.host_index(xml);
        let arch = match xml.attr("arch") {
            Some("x86_64") => CpuArch::X86,
            Some("arm64") => CpuArch::Arm,
            Some("ppc64") => CpuArch::Power,
            _ => CpuArch::Unknown,
        };
        let (mut vendor, mut model) = (CpuVendor::Unknown, CpuModel::Unknown);
        if arch == CpuArch::X86 {
            vendor = match xml.attr("vendor") {
                Some("GenuineIntel") => CpuVendor::Intel,
                Some("AuthenticAMD") => CpuVendor::Amd,
                Some("CentaurHauls") | Some("  Shanghai  ") => CpuVendor::Zhaoxin,
                _ => CpuVendor::Unknown,
            };
            let (family, id) = (xml.int_or("familyid", 0)?, xml.int_or("modelid", 0)?);
            model = match vendor {
                CpuVendor::Intel if family == 6 && id >= 0xcf => CpuModel::IntelEmeraldRapids,
                CpuVendor::Intel if family == 6 && id >= 0x8f => CpuModel::IntelSapphireRapids,
                CpuVendor::Intel if family == 6 && id >= 0x55 => CpuModel::IntelSkylake,
                CpuVendor::Intel => CpuModel::IntelBroadwell,
                CpuVendor::Zhaoxin if family == 7 && id == 0x5b => CpuModel::Yongfeng,
                _ => CpuModel::Unknown,
            };
        }
        let cpu = self.add(NodeKind::Cpu, topo_id(host, numa_id as i64 as u64), Detail::Cpu { arch, vendor, model, numa_id, affinity: xml.attr("affinity").map(str::to_string) });
        for child in &xml.children {
            match child.name.as_str() {
                "pci" => self.add_pci(child, cpu, host, numa_id)?,
                "nic" => {
                    let id = topo_id(host, nic_local_id(numa_id, 0));
                    let nic = match self.find(NodeKind::Nic, id) {
                        Some(nic) => nic,
                        None => {
                            let nic = self.add(NodeKind::Nic, id, Detail::Nic);
                            self.connect(cpu, nic, LinkKind::Pci, bandwidth::LOCAL);
                            self.connect(nic, cpu, LinkKind::Pci, bandwidth::LOCAL);
                            nic
                        }
                    };
                    self.add_nets(child, nic, host, None)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn add_pci(&mut self, xml: &XmlNode, parent: NodeRef, host: usize, numa_id: i32) -> Result<()> {
        let bus = xml.attr("busid").ok_or_else(|| Error::attribute("pci", "busid", "missing"))?;
        let bus_id = bus_id_to_int(bus).ok_or_else(|| Error::attribute("pci", "busid", format!("{bus:?} is not a PCI bus id")))?;
        let class = xml.attr("class").ok_or_else(|| Error::attribute("pci", "class", format!("missing (busid {bus})")))?;
        let mut kind = pci_class_kind(class);
        let mut node = None;
        if let Some(gpu) = xml.child("gpu") {
            if gpu.attr("rank").is_none() {
                // NCCL skips GPUs that no rank of this communicator drives.
                return Ok(());
            }
            kind = NodeKind::Gpu;
            let detail = Detail::Gpu { dev: gpu.int("dev")? as i32, rank: gpu.int("rank")? as i32, sm: gpu.int("sm")? as i32, gdr: gpu.int_or("gdr", 0)? != 0 };
            node = Some(self.add(NodeKind::Gpu, topo_id(host, bus_id), detail));
        }
        if let Some(nic_xml) = xml.child("nic") {
            // One NIC per PCI device and NUMA node: multi-port cards share it.
            let id = topo_id(host, nic_local_id(numa_id, bus_id));
            let nic = match self.find(NodeKind::Nic, id) {
                Some(nic) => nic,
                None => {
                    let nic = self.add(NodeKind::Nic, id, Detail::Nic);
                    node = Some(nic);
                    nic
                }
            };
            self.add_nets(nic_xml, nic, host, Some(bus))?;
        } else if kind == NodeKind::Pci {
            let hex = |key: &str| xml.attr(key).and_then(crate::xml::parse_int).unwrap_or(0) as u64;
            let device = (hex("vendor") << 48) + (hex("device") << 32) + (hex("subsystem_vendor") << 16) + hex("subsystem_device");
            let pci = self.add(NodeKind::Pci, topo_id(host, bus_id), Detail::Pci { device });
            node = Some(pci);
            for child in xml.children.iter().filter(|c| c.name == "pci") {
                self.add_pci(child, pci, host, numa_id)?;
            }
        }
        if let Some(node) = node {
            let width = match xml.int_or("link_width", 16)? {
                0 => 16,
                w => w,
            };
            let speed = lane_rate(xml.attr("link_speed").unwrap_or(""));
            let bw = (width as f32) * (speed as f32) / 80.0;
            self.connect(node, parent, LinkKind::Pci, bw);
            self.connect(parent, node, LinkKind::Pci, bw);
        }
        Ok(())
    }

    fn add_nets(&mut self, nic_xml: &XmlNode, nic: NodeRef, host: usize, bus: Option<&str>) -> Result<()> {
        for net in nic_xml.children.iter().filter(|c| c.name == "net") {
            if net.attr("dev").is_none() {
                continue;
            }
            let dev = net.int("dev")? as i32;
            let id = topo_id(host, dev as u64);
            let guid = match net.attr("guid") {
                Some(g) => crate::xml::parse_int(g).ok_or_else(|| Error::attribute("net", "guid", format!("{g:?} is not a number")))? as u64,
                None => id,
            };
            let mbps = match net.int_or("speed", 0)? {
                m if m <= 0 => 10000,
                m => m,
            };
            let bandwidth = mbps as f32 / 8000.0;
            let pci_id = {
                // Only equality matters: nets on one PCI device share it.
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                match bus {
                    Some(b) => b.hash(&mut h),
                    None => guid.hash(&mut h),
                }
                h.finish()
            };
            let detail = Detail::Net {
                name: net.attr("name").unwrap_or("").to_string(),
                dev,
                guid,
                port: net.int_or("port", 0)? as i32,
                bandwidth,
                latency: net.float_or("latency", 0.0)? as f32,
                gdr: net.int_or("gdr", 0)? != 0,
                coll: net.int_or("coll", 0)? != 0,
                max_channels: net.int_or("maxconn", 64)? as i32,
                pci_id,
            };
            let node = self.add(NodeKind::Net, id, detail);
            self.connect(nic, node, LinkKind::Net, bandwidth);
            self.connect(node, nic, LinkKind::Net, bandwidth);
        }
        Ok(())
    }

    /// Second pass over a subtree: NVLinks of its GPUs (the targets exist by now).
    fn add_nvlinks(&mut self, xml: &XmlNode, parent_bus: Option<&str>, host: usize) -> Result<()> {
        if xml.name == "nvlink" {
            let bus = parent_bus.ok_or_else(|| Error::attribute("nvlink", "target", "an <nvlink> outside a GPU's <pci>"))?;
            let Some(gpu) = bus_id_to_int(bus).and_then(|b| self.find(NodeKind::Gpu, topo_id(host, b))) else {
                // The GPU was skipped (no rank): so are its links.
                return Ok(());
            };
            let count = xml.int("count")? as f32;
            let class = xml.attr("tclass").ok_or_else(|| Error::attribute("nvlink", "tclass", "missing"))?;
            let remote = match pci_class_kind(class) {
                NodeKind::Gpu => {
                    let target = xml.attr("target").ok_or_else(|| Error::attribute("nvlink", "target", "missing"))?;
                    let t = bus_id_to_int(target).ok_or_else(|| Error::attribute("nvlink", "target", format!("{target:?} is not a PCI bus id")))?;
                    self.find(NodeKind::Gpu, topo_id(host, t))
                }
                NodeKind::Cpu => self.local_cpu_by_pci(gpu),
                _ => Some(match self.of(NodeKind::NvSwitch).first() {
                    Some(_) => NodeRef { kind: NodeKind::NvSwitch, index: 0 },
                    None => self.add(NodeKind::NvSwitch, 0, Detail::NvSwitch),
                }),
            };
            if let Some(remote) = remote {
                let sm = match self.node(gpu).detail {
                    Detail::Gpu { sm, .. } => sm,
                    _ => 0,
                };
                let bw = count * bandwidth::nvlink(sm);
                self.connect(gpu, remote, LinkKind::NvLink, bw);
                if remote.kind != NodeKind::Gpu {
                    self.connect(remote, gpu, LinkKind::NvLink, bw);
                }
            }
            return Ok(());
        }
        let bus = xml.attr("busid").or(parent_bus);
        for child in &xml.children {
            self.add_nvlinks(child, bus, host)?;
        }
        Ok(())
    }

    fn add_c2c_and_pcilinks(&mut self, xml: &XmlNode, parent_bus: Option<&str>, host: usize) -> Result<()> {
        let parent = parent_bus.and_then(bus_id_to_int);
        match xml.name.as_str() {
            "c2c" => {
                let Some(gpu) = parent.and_then(|b| self.find(NodeKind::Gpu, topo_id(host, b))) else { return Ok(()) };
                let bw = (xml.int("bw")? * xml.int("count")?) as f32 / 1000.0;
                if let Some(cpu) = self.local_cpu_by_pci(gpu) {
                    self.connect(gpu, cpu, LinkKind::C2c, bw);
                    self.connect(cpu, gpu, LinkKind::C2c, bw);
                }
            }
            "pcilink" => {
                let Some(pci) = parent.and_then(|b| self.find(NodeKind::Pci, topo_id(host, b))) else { return Ok(()) };
                let target = xml.attr("target").ok_or_else(|| Error::attribute("pcilink", "target", "missing"))?;
                if let Some(remote) = bus_id_to_int(target).and_then(|t| self.find(NodeKind::Pci, topo_id(host, t))) {
                    self.connect(pci, remote, LinkKind::Local, bandwidth::LOCAL);
                }
            }
            _ => {
                let bus = xml.attr("busid").or(parent_bus);
                for child in &xml.children {
                    self.add_c2c_and_pcilinks(child, bus, host)?;
                }
            }
        }
        Ok(())
    }

    /// The CPU above `node` in the PCI tree.
    fn local_cpu_by_pci(&self, node: NodeRef) -> Option<NodeRef> {
        let mut seen = vec![node];
        let mut current = node;
        loop {
            if current.kind == NodeKind::Cpu {
                return Some(current);
            }
            let up = self.node(current).links.iter().find(|l| l.kind == LinkKind::Pci && !seen.contains(&l.remote) && matches!(l.remote.kind, NodeKind::Pci | NodeKind::Cpu))?;
            current = up.remote;
            seen.push(current);
        }
    }

    fn connect_cpus(&mut self) {
        let cpus: Vec<(NodeRef, usize, f32)> = (0..self.of(NodeKind::Cpu).len())
            .map(|index| {
                let r = NodeRef { kind: NodeKind::Cpu, index };
                (r, self.node(r).host(), inter_cpu_bandwidth(&self.node(r).detail))
            })
            .collect();
        for &(a, host_a, bw) in &cpus {
            for &(b, host_b, _) in &cpus {
                if a != b && host_a == host_b {
                    self.connect(a, b, LinkKind::Sys, bw);
                }
            }
        }
    }

    /// Orders each PCI node's links: the link up (towards the CPU) last.
    fn sort_pci_trees(&mut self) {
        for index in 0..self.of(NodeKind::Cpu).len() {
            self.sort_below(NodeRef { kind: NodeKind::Cpu, index }, None);
        }
    }

    fn sort_below(&mut self, node: NodeRef, up: Option<NodeRef>) {
        if let Some(up) = up {
            let links = &mut self.node_mut(node).links;
            if let Some(i) = links.iter().position(|l| l.remote == up) {
                let link = links.remove(i);
                links.push(link);
            }
        }
        let down: Vec<NodeRef> = self.node(node).links.iter().filter(|l| l.kind == LinkKind::Pci && Some(l.remote) != up).map(|l| l.remote).collect();
        for child in down {
            self.sort_below(child, Some(node));
        }
    }
}

/// A NIC's local id: NUMA node in the top byte, bus id below (NCCL's `NCCL_TOPO_LOCAL_NIC_ID`).
fn nic_local_id(numa_id: i32, bus_id: u64) -> u64 {
    ((numa_id as i64 as u64) << 56).wrapping_add(bus_id)
}

/// The node kind a PCI class stands for (NCCL's table; unknown classes are PCI switches).
fn pci_class_kind(class: &str) -> NodeKind {
    match class {
        "0x060400" | "0x080100" => NodeKind::Pci,
        "0x068000" => NodeKind::NvSwitch,
        "0x068001" => NodeKind::Cpu,
        c if c.starts_with("0x03") => NodeKind::Gpu,
        c if c.starts_with("0x02") => NodeKind::Nic,
        _ => NodeKind::Pci,
    }
}

/// Per-lane rate in 100 Mb/s units for a sysfs `max_link_speed` (Gen3 when unknown).
fn lane_rate(speed: &str) -> u32 {
    match speed {
        "2.5 GT/s" | "2.5 GT/s PCIe" => 15,
        "5 GT/s" | "5.0 GT/s PCIe" => 30,
        "8 GT/s" | "8.0 GT/s PCIe" => 60,
        "16 GT/s" | "16.0 GT/s PCIe" => 120,
        "32 GT/s" | "32.0 GT/s PCIe" => 240,
        "64.0 GT/s PCIe" => 480,
        _ => 60,
    }
}

fn inter_cpu_bandwidth(cpu: &Detail) -> f32 {
    let Detail::Cpu { arch, vendor, model, .. } = cpu else { return bandwidth::LOCAL };
    match (arch, vendor) {
        (CpuArch::Power, _) => bandwidth::P9,
        (CpuArch::Arm, _) => bandwidth::ARM,
        (CpuArch::X86, CpuVendor::Intel) => match model {
            CpuModel::IntelEmeraldRapids => bandwidth::ERP_QPI,
            CpuModel::IntelSapphireRapids => bandwidth::SRP_QPI,
            CpuModel::IntelSkylake => bandwidth::SKL_QPI,
            _ => bandwidth::BDW_QPI,
        },
        (CpuArch::X86, CpuVendor::Amd) => bandwidth::AMD,
        (CpuArch::X86, CpuVendor::Zhaoxin) => {
            if *model == CpuModel::Yongfeng {
                bandwidth::YONGFENG_ZPI
            } else {
                bandwidth::ZPI
            }
        }
        _ => bandwidth::LOCAL,
    }
}
