//! CPU packages, NUMA nodes and the PCI bridges above a device, through hwloc (the
//! `hwlocality` crate, feature `hwloc`, on by default). When hwloc cannot load the topology,
//! or the crate is built without it, NUMA nodes and PCI chains come from sysfs and a note
//! says so.

#[cfg(feature = "hwloc")]
use hwlocality::object::attributes::{ObjectAttributes, UpstreamAttributes};
#[cfg(feature = "hwloc")]
use hwlocality::object::types::ObjectType;
#[cfg(feature = "hwloc")]
use hwlocality::object::TopologyObject;
#[cfg(feature = "hwloc")]
use hwlocality::topology::builder::TypeFilter;
#[cfg(feature = "hwloc")]
use hwlocality::Topology;
#[cfg(not(feature = "hwloc"))]
type Topology = ();

use super::sysfs;

/// The x86 CPU identification NCCL records on each `<cpu>`.
#[derive(Clone, Debug)]
pub(crate) struct CpuInfo {
    pub vendor: String,
    pub family: u32,
    pub model: u32,
}

/// What hwloc told about the CPUs, and the topology kept for PCI lookups.
pub(crate) struct Cpus {
    pub numa_nodes: Vec<i32>,
    pub packages: Vec<Vec<i32>>,
    pub info: Option<CpuInfo>,
    topology: Option<Topology>,
}

impl Cpus {
    #[cfg(not(feature = "hwloc"))]
    pub fn read(notes: &mut Vec<String>) -> Cpus {
        notes.push("built without hwloc: NUMA nodes and PCI chains from sysfs".into());
        Cpus { numa_nodes: sysfs_numa_nodes(), packages: Vec::new(), info: proc_cpuinfo(), topology: None }
    }

    #[cfg(not(feature = "hwloc"))]
    pub fn pci_chain(&self, bdf: &str) -> (Vec<String>, i32) {
        let _ = &self.topology;
        sysfs::pci_chain(bdf).unwrap_or((Vec::new(), -1))
    }

    #[cfg(feature = "hwloc")]
    pub fn read(notes: &mut Vec<String>) -> Cpus {
        let topology = Topology::builder().with_io_type_filter(TypeFilter::KeepAll).map_err(|e| e.to_string()).and_then(|b| b.build().map_err(|e| e.to_string()));
        let topology = match topology {
            Ok(t) => Some(t),
            Err(e) => {
                notes.push(format!("hwloc could not load the topology ({e}): NUMA nodes and PCI chains from sysfs"));
                None
            }
        };
        let (numa_nodes, packages) = match &topology {
            Some(t) => {
                let numa: Vec<i32> = t.objects_with_type(ObjectType::NUMANode).filter_map(|o| o.os_index()).map(|i| i as i32).collect();
                let packages = t
                    .objects_with_type(ObjectType::Package)
                    .map(|p| p.nodeset().map(|set| set.iter_set().map(|i| usize::from(i) as i32).collect()).unwrap_or_default())
                    .collect();
                (numa, packages)
            }
            None => (sysfs_numa_nodes(), Vec::new()),
        };
        let info = topology.as_ref().and_then(|t| t.objects_with_type(ObjectType::Package).find_map(package_info)).or_else(proc_cpuinfo);
        Cpus { numa_nodes, packages, info, topology }
    }

    /// The PCI bridges above `bdf` (top first) and the NUMA node its tree hangs from (-1: unknown).
    #[cfg(feature = "hwloc")]
    pub fn pci_chain(&self, bdf: &str) -> (Vec<String>, i32) {
        let sysfs = sysfs::pci_chain(bdf);
        let sysfs_numa = sysfs.as_ref().map_or(-1, |s| s.1);
        if let Some(device) = self.topology.as_ref().and_then(|t| t.pci_device_by_bus_id_string(bdf).ok().flatten()) {
            let mut chain = Vec::new();
            let mut current: &TopologyObject = device;
            while let Some(parent) = current.parent() {
                match parent.attributes() {
                    Some(ObjectAttributes::Bridge(bridge)) => match bridge.upstream_attributes() {
                        Some(UpstreamAttributes::PCI(pci)) => chain.push(format!("{:04x}:{:02x}:{:02x}.{:x}", pci.domain(), pci.bus_id(), pci.bus_device(), pci.function())),
                        _ => break,
                    },
                    _ => break,
                }
                current = parent;
            }
            chain.reverse();
            // The NUMA node as NCCL reads it (sysfs `numa_node` of the top bridge, -1 in
            // many VMs); hwloc's attachment when sysfs has no answer.
            let hwloc_numa = device.first_non_io_ancestor().and_then(|a| a.nodeset()).filter(|set| set.weight() == Some(1)).and_then(|set| set.first_set()).map(|i| usize::from(i) as i32);
            let numa = if sysfs.is_some() { sysfs_numa } else { hwloc_numa.unwrap_or(-1) };
            return (chain, numa);
        }
        sysfs.unwrap_or((Vec::new(), -1))
    }
}

#[cfg(feature = "hwloc")]
fn package_info(package: &TopologyObject) -> Option<CpuInfo> {
    let text = |key: &str| package.info(key).map(|v| v.to_string_lossy().into_owned());
    Some(CpuInfo { vendor: text("CPUVendor")?, family: text("CPUFamilyNumber")?.parse().ok()?, model: text("CPUModelNumber")?.parse().ok()? })
}

fn proc_cpuinfo() -> Option<CpuInfo> {
    let text = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let field = |key: &str| text.lines().find(|l| l.starts_with(key)).and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_string());
    Some(CpuInfo { vendor: field("vendor_id")?, family: field("cpu family")?.parse().ok()?, model: field("model\t")?.parse().ok()? })
}

fn sysfs_numa_nodes() -> Vec<i32> {
    let mut nodes: Vec<i32> = std::fs::read_dir("/sys/devices/system/node")
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str()?.strip_prefix("node")?.parse().ok()).collect())
        .unwrap_or_default();
    nodes.sort();
    nodes
}
