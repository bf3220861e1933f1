//! A communicator's view of its host's topology: NCCL_TOPO_FILE, else discovery
//! (oxccl-topology: hwloc, the CUDA driver, NVML; the NIC from the communicator's socket
//! Net), written to NCCL_TOPO_DUMP_FILE by NCCL_TOPO_DUMP_FILE_RANK at init as NCCL does.

use std::path::Path;

use oxccl_topology::discover::{self, NicDescription, Options};
use oxccl_topology::XmlNode;
use oxccl_transports::net::Net;

use crate::base::Core;
use crate::error::{Error, Result};
use crate::log_target;

/// The host's topology XML: NCCL_TOPO_FILE's, or discovered (every visible GPU, ranked by ordinal).
pub(crate) fn host_xml(core: &Core) -> Result<XmlNode> {
    let config = &core.config;
    if let Some(file) = &config.topo_file {
        return XmlNode::load(Path::new(file)).map_err(|e| Error::invalid(format!("NCCL_TOPO_FILE: {e}")));
    }
    let devices = core.socket.devices().map_err(|e| Error::from_transport("counting the socket Net's devices", e))?;
    let mut nics = Vec::with_capacity(devices);
    for device in 0..devices {
        let p = core.socket.properties(device).map_err(|e| Error::from_transport("asking the socket Net its devices' properties", e))?;
        nics.push(NicDescription { name: p.name, pci_path: p.pci_path, speed_mbps: p.speed_mbps, port: p.port, guid: p.guid, latency_us: p.latency_us, max_comms: p.max_comms, gdr: p.ptr_support.cuda });
    }
    let found = discover::discover(&Options { nics, gpu_ranks: Vec::new(), host_id: config.host_id.clone() }).map_err(|e| Error::Internal(e.to_string()))?;
    for note in &found.notes {
        tracing::info!(target: log_target::GRAPH, "topology: {note}");
    }
    Ok(found.xml)
}

/// Writes the topology to NCCL_TOPO_DUMP_FILE when set and this is the rank to write it.
pub(crate) fn dump_if_asked(core: &Core) -> Result<()> {
    let config = &core.config;
    let Some(path) = config.topo_dump_file.as_deref() else { return Ok(()) };
    if core.rank != config.topo_dump_rank {
        return Ok(());
    }
    host_xml(core)?.dump(Path::new(path)).map_err(|e| Error::invalid(format!("NCCL_TOPO_DUMP_FILE: {e}")))?;
    tracing::info!(target: log_target::GRAPH, "rank {}: topology written to {path}", core.rank);
    Ok(())
}
