//! The choice, as NCCL makes it (`getAlgoInfo`): the model fills the cost table; pairs that
//! NCCL_ALGO/NCCL_PROTO exclude or the executor cannot run are left out; a tuner plugin may
//! then edit the table and set the channel count; the cheapest entry left wins. Nothing
//! left is an error naming what emptied the table; a plugin that picks a pair the executor
//! cannot run is an error naming the plugin, never silently replaced.

use crate::collective::Collective;
use crate::error::{Error, Result};
use crate::host::HostModel;
use crate::names::{Algorithm, Protocol};
use crate::nccl::NcclModel;
use crate::plugin::TunerPlugin;
use crate::selection::Selection;
use crate::table::CostTable;

/// Where the costs come from.
#[derive(Clone, Debug)]
pub enum Model {
    /// NCCL's model from the searched topology (GPU paths).
    Nccl(Box<NcclModel>),
    /// The host executor's measured model.
    Host(HostModel),
    /// GPU kernels across hosts over the network, measured.
    NetKernels(crate::net_kernels::NetKernelModel),
    /// GPU kernels between the GPUs of one host, measured (what a tuner plugin sees there).
    OneHost(crate::one_host::OneHostModel),
}

/// Which pairs the executor can run, per collective.
pub type Runnable = fn(Collective, Algorithm, Protocol) -> bool;

/// One call to choose for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub collective: Collective,
    /// NCCL's bytes for the call ([`Collective::tuning_bytes`]).
    pub bytes: usize,
    /// Operations launched together (a group): latency counts once per batch for trees.
    pub pipe_ops: usize,
    /// The user's buffers are registered.
    pub registered: bool,
    /// FP8 data (rings over more than 8 ranks are priced ×1024).
    pub fp8: bool,
}

impl Request {
    pub fn new(collective: Collective, bytes: usize) -> Request {
        Request { collective, bytes, pipe_ops: 1, registered: false, fp8: false }
    }
}

/// The decision.
#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub algorithm: Algorithm,
    pub protocol: Protocol,
    /// Predicted µs (what the table held; a plugin's edit included).
    pub time_us: f32,
    /// Channels a plugin asked for (None: the executor decides).
    pub channels: Option<usize>,
    /// Whether a plugin changed the table (where it did not, the choice is the model's, and
    /// where the runtime has rules of its own, theirs; its channel count may still stand).
    pub table_edited: bool,
    /// The table the choice was made from.
    pub table: CostTable,
}

/// Chooses the algorithm and protocol of every call of a communicator.
pub struct Tuner {
    pub selection: Selection,
    pub model: Model,
    runnable: Runnable,
    plugin: Option<Box<dyn TunerPlugin>>,
}

impl std::fmt::Debug for Tuner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tuner").field("selection", &self.selection).field("model", &self.model).field("plugin", &self.plugin.as_ref().map(|p| p.name().to_string())).finish()
    }
}

impl Tuner {
    pub fn new(selection: Selection, model: Model, runnable: Runnable, plugin: Option<Box<dyn TunerPlugin>>) -> Tuner {
        Tuner { selection, model, runnable, plugin }
    }

    /// The plugin's name, if one is loaded.
    pub fn plugin_name(&self) -> Option<&str> {
        self.plugin.as_deref().map(|p| p.name())
    }

    /// The table the model gives, before settings and plugin.
    pub fn model_table(&self, request: &Request) -> CostTable {
        match &self.model {
            Model::Nccl(m) => m.table(request.collective, request.bytes, request.pipe_ops, request.fp8),
            Model::Host(m) => m.table(request.collective, request.bytes),
            Model::NetKernels(m) => m.table(request.collective, request.bytes),
            Model::OneHost(m) => m.table(request.collective, request.bytes),
        }
    }

    /// Chooses for `request` (see the module doc).
    pub fn choose(&self, request: &Request) -> Result<Choice> {
        let collective = request.collective;
        let mut table = self.model_table(request);
        let mut runnable = CostTable::default();
        for a in Algorithm::ALL {
            for p in Protocol::ALL {
                let can = (self.runnable)(collective, a, p);
                runnable.set(a, p, can.then_some(0.0));
                if !can || !self.selection.allows(collective, a, p) {
                    table.set(a, p, None);
                }
            }
        }
        let mut channels = 0usize;
        let before = table;
        if let (Some(plugin), true) = (&self.plugin, collective.is_tuned()) {
            plugin.get_coll_info(collective, request.bytes, request.pipe_ops, &mut table, request.registered, &mut channels)?;
        }
        let table_edited = table != before;
        let Some((algorithm, protocol, time_us)) = table.best() else {
            return Err(self.nothing_left(collective, &runnable));
        };
        if runnable.get(algorithm, protocol).is_none() {
            let plugin = self.plugin_name().unwrap_or("?");
            return Err(Error::Plugin {
                plugin: plugin.into(),
                reason: format!("chose {algorithm}/{protocol} for {} ({} bytes), which oxccl cannot run here (runnable: {})", collective.name(), request.bytes, list(&runnable)),
            });
        }
        Ok(Choice { algorithm, protocol, time_us, channels: (channels > 0).then_some(channels), table_edited, table })
    }

    fn nothing_left(&self, collective: Collective, runnable: &CostTable) -> Error {
        let reason = if self.selection.is_set() {
            format!("{} leaves no algorithm/protocol oxccl can run for {}", self.selection.describe(), collective.name())
        } else if self.plugin.is_some() {
            format!("tuner plugin {} left no algorithm/protocol for {}", self.plugin_name().unwrap_or("?"), collective.name())
        } else {
            format!("no algorithm/protocol available for {}", collective.name())
        };
        Error::NoChoice(format!("{reason} (runnable: {})", list(runnable)))
    }
}

fn list(runnable: &CostTable) -> String {
    let pairs: Vec<String> = runnable.runnable().map(|(a, p, _)| format!("{}/{}", a.name(), p.name())).collect();
    if pairs.is_empty() {
        "none".into()
    } else {
        pairs.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(nranks: usize, net: bool, algo: Option<&str>, proto: Option<&str>) -> Tuner {
        Tuner::new(Selection::parse(algo, proto).unwrap(), Model::Host(HostModel { nranks, net, oversubscribed: false, per_host: 1 }), HostModel::runs, None)
    }

    fn pick(t: &Tuner, c: Collective, bytes: usize) -> Algorithm {
        t.choose(&Request::new(c, bytes)).unwrap().algorithm
    }

    const BIG: usize = 64 << 20;

    #[test]
    fn the_host_model_picks_by_size_ranks_and_transport() {
        // Shared memory: the ring's pipeline for large data, recursive doubling's three hops
        // of one message for small (two-shot's two hops send seven messages each).
        assert_eq!(pick(&host(4, false, None, None), Collective::AllReduce, BIG), Algorithm::Ring);
        assert_eq!(pick(&host(8, false, None, None), Collective::AllReduce, 64), Algorithm::Doubling);
        assert_eq!(pick(&host(6, false, None, None), Collective::AllReduce, 64), Algorithm::Direct);
        // The Net: parallel connections for large data; the tree when direct's messages per
        // hop outnumber the tree's hops, recursive doubling (6 hops) below where its whole
        // vector per hop costs more than the tree's 12.
        assert_eq!(pick(&host(4, true, None, None), Collective::AllReduce, BIG), Algorithm::Direct);
        assert_eq!(pick(&host(64, true, None, None), Collective::AllReduce, 32 << 10), Algorithm::Tree);
        assert_eq!(pick(&host(64, true, None, None), Collective::AllReduce, 64), Algorithm::Doubling);
        assert_eq!(pick(&host(4, false, None, None), Collective::AllToAll, BIG), Algorithm::Direct);
        assert_eq!(pick(&host(4, false, None, None), Collective::Broadcast, 64), Algorithm::Ring);
        // Two ranks: one shot's single hop for small data, the ring's halved reductions for large.
        for net in [false, true] {
            assert_eq!(pick(&host(2, net, None, None), Collective::AllReduce, 64), Algorithm::Direct, "net {net}");
            assert_eq!(pick(&host(2, net, None, None), Collective::AllReduce, BIG), Algorithm::Ring, "net {net}");
        }
        // One rank: Ring at no cost, as NCCL.
        assert_eq!(pick(&host(1, false, None, None), Collective::AllToAll, 64), Algorithm::Ring);
    }

    /// More ranks than cores (the 2-core VM, docs/PERFORMANCE.md): a message costs a hop,
    /// so the algorithm with the fewest messages wins small all_reduces — recursive
    /// doubling, measured fastest there to 32 KiB over the Net with 4 ranks and to 4 KiB in
    /// shared memory with 8.
    #[test]
    fn oversubscribed_hosts_pick_by_messages() {
        let crowded = |nranks, net| Tuner::new(Selection::default(), Model::Host(HostModel { nranks, net, oversubscribed: true, per_host: 1 }), HostModel::runs, None);
        for bytes in [8, 4096, 32 << 10] {
            assert_eq!(pick(&crowded(4, true), Collective::AllReduce, bytes), Algorithm::Doubling, "4 ranks over the Net, {bytes} B");
        }
        assert_eq!(pick(&crowded(4, true), Collective::AllReduce, 1 << 20), Algorithm::Direct);
        assert_eq!(pick(&crowded(8, false), Collective::AllReduce, 4096), Algorithm::Doubling);
        assert_eq!(pick(&crowded(2, false), Collective::AllReduce, 64), Algorithm::Direct, "two ranks: one shot");
    }

    /// Ranks posing as 2 hosts on the VM (docs/results/2026-11-27-vm-hosts-tree): the tree
    /// across hosts with a chain inside each was fastest at 256 KiB-1 MiB with 4 and 8
    /// ranks; over all ranks it was never priced to win.
    #[test]
    fn the_tree_across_hosts_wins_mid_sizes_where_ranks_lie_host_by_host() {
        let posed = |nranks, per_host| Tuner::new(Selection::default(), Model::Host(HostModel { nranks, net: true, oversubscribed: true, per_host }), HostModel::runs, None);
        for bytes in [256 << 10, 1 << 20] {
            assert_eq!(pick(&posed(8, 4), Collective::AllReduce, bytes), Algorithm::Tree, "8 ranks as 2 hosts, {bytes} B");
            assert_ne!(pick(&posed(8, 1), Collective::AllReduce, bytes), Algorithm::Tree, "8 ranks, layout unknown, {bytes} B");
        }
        for bytes in [256 << 10, 1 << 20] {
            assert_eq!(pick(&posed(4, 2), Collective::AllReduce, bytes), Algorithm::Tree, "4 ranks as 2 hosts, {bytes} B");
        }
        assert_eq!(pick(&posed(4, 2), Collective::AllReduce, 8), Algorithm::Doubling, "small: fewest hops");
        // The chain's hops in shared memory: 8 ranks as 2 hosts, the tree from 32 KiB
        // (measured 1.2x recursive doubling's speed there), doubling at 4 KiB.
        assert_eq!(pick(&posed(8, 4), Collective::AllReduce, 32 << 10), Algorithm::Tree, "8 ranks as 2 hosts, 32 KiB");
        assert_eq!(pick(&posed(8, 4), Collective::AllReduce, 4 << 10), Algorithm::Doubling, "8 ranks as 2 hosts, 4 KiB");
    }

    #[test]
    fn forcing_and_excluding() {
        assert_eq!(pick(&host(4, false, Some("ring"), None), Collective::AllToAll, BIG), Algorithm::Ring);
        assert_eq!(pick(&host(8, false, Some("ring"), None), Collective::AllReduce, 64), Algorithm::Ring);
        assert_eq!(pick(&host(4, false, Some("alltoall:^direct;allreduce:ring"), None), Collective::AllToAll, BIG), Algorithm::Ring);
        assert_eq!(pick(&host(4, false, Some("tree"), None), Collective::AllReduce, BIG), Algorithm::Tree);
        let err = host(4, false, Some("tree"), None).choose(&Request::new(Collective::Broadcast, BIG)).unwrap_err().to_string();
        assert!(err.contains("NCCL_ALGO") && err.contains("broadcast") && err.contains("ring/simple"), "{err}");
        let err = host(4, false, Some("^ring"), None).choose(&Request::new(Collective::Broadcast, BIG)).unwrap_err().to_string();
        assert!(err.contains("broadcast"), "{err}");
    }

    #[test]
    fn protocols() {
        assert!(host(2, false, None, Some("simple")).choose(&Request::new(Collective::AllReduce, BIG)).is_ok());
        let err = host(2, false, None, Some("LL")).choose(&Request::new(Collective::AllReduce, BIG)).unwrap_err().to_string();
        assert!(err.contains("NCCL_PROTO") && err.contains("all_reduce"), "{err}");
        // An algorithm the host cannot run at all, forced: an error, not another algorithm.
        let err = host(4, false, Some("nvls"), None).choose(&Request::new(Collective::AllReduce, BIG)).unwrap_err().to_string();
        assert!(err.contains("NCCL_ALGO=\"nvls\""), "{err}");
    }
}
