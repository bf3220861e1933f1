//! What this host has, as NCCL's topology XML (what NCCL 2.28 detects, built the same way):
//!
//! - CPUs: every NUMA node hwloc reports becomes a `<cpu>` with its `affinity` (sysfs
//!   `cpumap`), `arch`, and the package's `vendor`, `familyid` and `modelid`; a device whose
//!   NUMA node is unknown (`numa_node` -1, as in many VMs) hangs under `<cpu numaid="-1">`.
//! - The PCI tree: for each GPU and NIC, the chain of PCI bridges hwloc puts above it (sysfs
//!   when hwloc does not see the device), one `<pci>` per bridge with the attributes NCCL
//!   reads from sysfs (`class`, `vendor`, `device`, `subsystem_*`, the slower of the two
//!   ends' `max_link_speed` and the narrower `max_link_width`).
//! - GPUs: through the CUDA driver when it can be loaded (PCI bus id, compute capability,
//!   multiprocessor count, GPUDirect RDMA/dma-buf support, peer access and its performance
//!   rank between every pair); NVLinks through NVML when `libnvidia-ml.so.1` opens. Without
//!   NVML, GPU pairs with native peer atomics (NVLink; PCIe peers have none) are linked
//!   with the generation's NVLink count: directly for two GPUs, through an NVSwitch for more.
//! - NICs: described by the caller from its Net's properties (name, sysfs path, speed,
//!   port, guid, latency, max connections), placed under their PCI device, or under the
//!   first CPU when they have no PCI device (a socket Net on `lo`).
//!
//! Without a CUDA driver there are no GPUs and discovery still succeeds: the machine is its
//! CPUs and NICs.

mod cuda;
mod hwloc;
mod nvml;
pub(crate) mod sysfs;

use crate::error::Result;
use crate::xml::XmlNode;

pub use cuda::{GpuInfo, PeerInfo};

/// A network device as the caller's Net reports it (its `NetProperties`).
#[derive(Clone, Debug, PartialEq)]
pub struct NicDescription {
    pub name: String,
    /// The device's sysfs path; None for a virtual device.
    pub pci_path: Option<String>,
    pub speed_mbps: u32,
    pub port: u32,
    pub guid: u64,
    /// µs; 0 lets the tuning model use its default.
    pub latency_us: f32,
    pub max_comms: u32,
    /// The Net can read and write GPU memory (GPUDirect RDMA).
    pub gdr: bool,
}

/// What to discover.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// NICs, in the Net's device order (`dev` is the index).
    pub nics: Vec<NicDescription>,
    /// The GPUs to include and the rank each carries, by CUDA device ordinal; empty: every
    /// visible GPU, ranked by ordinal.
    pub gpu_ranks: Vec<(usize, i32)>,
    /// NCCL_HOSTID, when set: the host identity hashed into `host_hash`.
    pub host_id: Option<String>,
}

/// The result: the XML, and what was learnt on the way.
#[derive(Clone, Debug)]
pub struct Discovery {
    pub xml: XmlNode,
    /// The GPUs the CUDA driver reported (all of them, included or not).
    pub gpus: Vec<GpuInfo>,
    /// CPU packages (sockets) and the NUMA nodes in each, from hwloc.
    pub packages: Vec<Vec<i32>>,
    /// What could not be read and what was assumed instead.
    pub notes: Vec<String>,
}

/// Discovers this host (see the module doc).
pub fn discover(options: &Options) -> Result<Discovery> {
    let mut notes = Vec::new();
    let host_hash = host_hash(options.host_id.as_deref());
    let cpus = hwloc::Cpus::read(&mut notes);
    let mut builder = Builder { system: XmlNode::new("system"), host_hash, cpus: &cpus };
    builder.system.set("version", crate::xml::VERSION);

    let gpus = cuda::gpus(&mut notes);
    let included: Vec<(usize, i32)> = if options.gpu_ranks.is_empty() { (0..gpus.len()).map(|i| (i, i as i32)).collect() } else { options.gpu_ranks.clone() };
    let nvml = if included.is_empty() { None } else { nvml::Nvml::open(&mut notes) };
    for &(ordinal, rank) in &included {
        let Some(info) = gpus.get(ordinal) else {
            notes.push(format!("GPU {ordinal} asked for but the driver reports {} GPU(s)", gpus.len()));
            continue;
        };
        let pci = builder.pci_node(&info.bus_id, "0x03")?;
        let gpu = pci.child_mut_or_add("gpu");
        gpu.set("dev", ordinal.to_string());
        gpu.set("sm", info.sm.to_string());
        gpu.set("rank", rank.to_string());
        gpu.set("gdr", if info.gdr { "1" } else { "0" });
        let links = match &nvml {
            Some(nvml) => nvml.links(&info.bus_id, info.sm),
            None => cuda::inferred_nvlinks(info, &gpus, &included),
        };
        for link in links {
            let mut node = XmlNode::new("nvlink");
            node.set("target", link.target).set("count", link.count.to_string()).set("tclass", link.class);
            gpu.children.push(node);
        }
    }
    if nvml.is_none() && included.len() > 1 {
        notes.push("NVML not available: NVLinks inferred from CUDA peer atomics, with the generation's link count".into());
    }
    for (dev, nic) in options.nics.iter().enumerate() {
        builder.add_nic(dev, nic)?;
    }
    // Every NUMA node, devices or not: the machine as it is.
    for numa in &cpus.numa_nodes {
        builder.cpu_node(*numa);
    }
    builder.system.children.sort_by_key(|c| c.attr("numaid").and_then(crate::xml::parse_int).unwrap_or(-1));
    Ok(Discovery { xml: builder.system, gpus, packages: cpus.packages.clone(), notes })
}

/// NCCL's host identity: NCCL_HOSTID, else the host name and boot id, hashed (FNV-1a).
pub fn host_hash(host_id: Option<&str>) -> u64 {
    let text = match host_id {
        Some(id) => id.to_string(),
        None => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
            format!("{}{}", host.trim(), boot.trim())
        }
    };
    text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

struct Builder<'c> {
    system: XmlNode,
    host_hash: u64,
    cpus: &'c hwloc::Cpus,
}

impl Builder<'_> {
    /// The `<cpu>` of NUMA node `numa` (created with NCCL's attributes if new).
    fn cpu_node(&mut self, numa: i32) -> &mut XmlNode {
        let id = numa.to_string();
        if let Some(i) = self.system.children.iter().position(|c| c.attr("numaid") == Some(id.as_str())) {
            return &mut self.system.children[i];
        }
        let mut cpu = XmlNode::new("cpu");
        cpu.set("host_hash", format!("{:#x}", self.host_hash));
        cpu.set("numaid", id);
        if let Some(mask) = sysfs::read(&format!("/sys/devices/system/node/node{numa}"), "cpumap") {
            cpu.set("affinity", mask);
        }
        cpu.set("arch", std::env::consts::ARCH.replace("aarch64", "arm64").replace("powerpc64", "ppc64"));
        if let Some(info) = &self.cpus.info {
            cpu.set("vendor", info.vendor.clone());
            cpu.set("familyid", info.family.to_string());
            cpu.set("modelid", info.model.to_string());
        }
        self.system.children.push(cpu);
        self.system.children.last_mut().expect("just pushed")
    }

    /// The `<pci>` of `bus_id` with its chain of bridges up to its CPU (created as needed);
    /// `class` is the class to assume when sysfs has none.
    fn pci_node(&mut self, bus_id: &str, class: &str) -> Result<&mut XmlNode> {
        let bus_id = bus_id.to_ascii_lowercase();
        let (chain, numa) = self.cpus.pci_chain(&bus_id);
        let mut node = self.cpu_node(numa);
        for bdf in chain.iter().chain(std::iter::once(&bus_id)) {
            let position = node.children.iter().position(|c| c.name == "pci" && c.attr("busid") == Some(bdf.as_str()));
            let i = match position {
                Some(i) => i,
                None => {
                    let mut pci = XmlNode::new("pci");
                    pci.set("busid", bdf.clone());
                    sysfs::fill_pci(&mut pci, bdf, if *bdf == bus_id { class } else { "0x060400" });
                    // Children stay in bus id order (NCCL issue #820).
                    let at = node.children.iter().position(|c| c.attr("busid").is_some_and(|b| b > bdf.as_str())).unwrap_or(node.children.len());
                    node.children.insert(at, pci);
                    at
                }
            };
            node = &mut node.children[i];
        }
        Ok(node)
    }

    fn add_nic(&mut self, dev: usize, nic: &NicDescription) -> Result<()> {
        let bus_id = nic.pci_path.as_deref().and_then(sysfs::pci_device_of_path);
        let parent = match bus_id {
            Some(bus) => self.pci_node(&bus, "0x02")?,
            None => {
                // A virtual NIC: under the first CPU, as NCCL does.
                if self.system.children.is_empty() {
                    let numa = self.cpus.numa_nodes.first().copied().unwrap_or(-1);
                    self.cpu_node(numa);
                }
                &mut self.system.children[0]
            }
        };
        let nic_node = parent.child_mut_or_add("nic");
        let mut net = XmlNode::new("net");
        net.set("name", nic.name.clone());
        net.set("dev", dev.to_string());
        net.set("latency", format!("{}", nic.latency_us as i32));
        net.set("speed", nic.speed_mbps.to_string());
        net.set("port", nic.port.to_string());
        net.set("guid", format!("{:#x}", nic.guid));
        net.set("maxconn", nic.max_comms.to_string());
        net.set("gdr", if nic.gdr { "1" } else { "0" });
        nic_node.children.push(net);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_is_discovered_with_or_without_gpus() {
        let options = Options {
            nics: vec![NicDescription { name: "lo".into(), pci_path: None, speed_mbps: 10000, port: 0, guid: 0, latency_us: 0.0, max_comms: 65536, gdr: false }],
            ..Options::default()
        };
        let found = discover(&options).unwrap();
        let cpus: Vec<&XmlNode> = found.xml.children.iter().filter(|c| c.name == "cpu").collect();
        assert!(!cpus.is_empty(), "{}", found.xml.to_xml());
        assert!(cpus.iter().all(|c| c.attr("arch").is_some() && c.attr("host_hash").is_some()));
        let nets: Vec<&XmlNode> = found.xml.descendants().into_iter().filter(|n| n.name == "net").collect();
        assert_eq!(nets.len(), 1);
        assert_eq!(nets[0].attr("name"), Some("lo"));
        let gpus = found.xml.descendants().into_iter().filter(|n| n.name == "gpu").count();
        assert_eq!(gpus, found.gpus.len(), "every GPU the driver reports is in the XML");
        // The XML builds a graph, and dumps back to what loads again.
        let system = crate::System::from_xml(&found.xml).unwrap();
        assert_eq!(system.of(crate::NodeKind::Net).len(), 1);
        let again = XmlNode::parse(&found.xml.to_xml(), None).unwrap();
        assert_eq!(again, found.xml);
    }

    #[test]
    fn host_ids_hash_apart() {
        assert_eq!(host_hash(Some("a")), host_hash(Some("a")));
        assert_ne!(host_hash(Some("a")), host_hash(Some("b")));
    }
}
