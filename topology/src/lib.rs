//! oxccl-topology: the machine as data.
//!
//! - [`discover`]: what this host has — CPU sockets and NUMA nodes and the PCI tree through
//!   hwloc, GPUs through the CUDA driver, NVLinks through NVML, NICs as the caller
//!   describes them from its Net's properties — as NCCL's topology XML ([`XmlNode`]).
//! - [`XmlNode`]: NCCL's XML, loaded (`NCCL_TOPO_FILE`, NCCL's own dumps included) and
//!   dumped (`NCCL_TOPO_DUMP_FILE`) unchanged.
//! - [`System`]: the graph of GPUs, PCI switches, NVSwitches, CPUs, NICs and their links.
//! - [`Topology`]: paths and bandwidths between every GPU, NIC and CPU, with NCCL's path types.
//! - [`search`]: rings and trees laid over the links, channel by channel, and the NIC each channel uses.
//! - [`layout`]: rings and double binary trees across hosts, the NIC per channel and peer, the PXN NIC map.
//! - [`render`]: the machine as a tree, the path matrix, the channels, an SVG picture.
//!
//! Nothing here depends on the runtime: the runtime hands in rank numbers and NIC
//! descriptions and reads the results.

pub mod discover;
mod error;
pub mod layout;
mod paths;
pub mod render;
pub mod search;
mod system;
mod xml;

pub use error::{Error, Result};
pub use paths::{GdrMode, Hop, Path, PathKind, PathSettings, Paths, Topology};
pub use system::{bandwidth, bus_id_to_int, int_to_bus_id, topo_id, CpuArch, CpuModel, CpuVendor, Detail, Link, LinkKind, Node, NodeKind, NodeRef, System};
pub use xml::{parse_int, XmlNode, VERSION as XML_VERSION};
