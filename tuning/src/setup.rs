//! From a host's topology to NCCL's model: the ring and tree searches, their layout over
//! the communicator's hosts, and the model's input. Hosts are taken to be alike (the same
//! machine, as NCCL assumes when it duplicates a host's channels across hosts): host `h`'s
//! GPUs carry ranks `h × ranks_per_host + local rank`.

use oxccl_topology::layout::{self, ChannelBounds, HostGraphs, Layout};
use oxccl_topology::search::{compute, Graph, Pattern, SearchSettings};
use oxccl_topology::{Detail, NodeKind, Topology};

use crate::error::{Error, Result};
use crate::nccl::ModelInput;

/// The searched graphs, their layout and the model's input.
#[derive(Clone, Debug)]
pub struct GpuSetup {
    pub ring: Graph,
    pub tree: Graph,
    pub layout: Layout,
    pub input: ModelInput,
}

/// Searches `topology` (one host, its GPUs ranked 0..k in the XML) for a communicator of
/// `nranks` ranks over `nnodes` such hosts.
pub fn gpu_setup(topology: &Topology, nranks: usize, nnodes: usize, search: &SearchSettings, bounds: ChannelBounds) -> Result<GpuSetup> {
    let gpus = topology.system.of(NodeKind::Gpu).len();
    if gpus == 0 {
        return Err(Error::NoChoice("the topology has no GPU: NCCL's model prices GPU paths only".into()));
    }
    if nnodes == 0 || nranks != gpus * nnodes {
        return Err(Error::NoChoice(format!("{nranks} ranks over {nnodes} host(s) of {gpus} GPU(s) each: the ranks must be the hosts' GPUs, one each")));
    }
    let ring = compute(topology, nranks, Pattern::Ring, 1, 32, search);
    let n = ring.channels.len();
    let tree = compute(topology, nranks, Pattern::BalancedTree, n, n, search);
    let hosts: Vec<HostGraphs> = (0..nnodes)
        .map(|h| {
            let shift = |g: &Graph| {
                let mut g = g.clone();
                for ch in &mut g.channels {
                    for r in &mut ch.ranks {
                        *r += (h * gpus) as i32;
                    }
                }
                g
            };
            HostGraphs { ring: shift(&ring), tree: shift(&tree) }
        })
        .collect();
    let (cc_min, cc_max) = topology.system.compute_capability();
    let layout = layout::layout(&hosts, nranks, cc_min, bounds)?;
    let (cpu_arch, cpu_vendor, _) = topology.system.cpu_type();
    let input = ModelInput {
        nranks,
        nnodes,
        cc_min,
        cc_max,
        cpu_arch,
        cpu_vendor,
        ring: ring.clone(),
        tree: tree.clone(),
        channels: layout.rings.len(),
        net_overhead_ns: None,
        pat_enable: None,
    };
    Ok(GpuSetup { ring, tree, layout, input })
}

/// Renumbers the GPUs' ranks 0..k in the XML's order (a discovered or loaded host, whatever ranks it carried).
pub fn rank_locally(topology: &mut Topology) {
    for (i, node) in topology.system.nodes[NodeKind::Gpu as usize].iter_mut().enumerate() {
        if let Detail::Gpu { rank, .. } = &mut node.detail {
            *rank = i as i32;
        }
    }
}
