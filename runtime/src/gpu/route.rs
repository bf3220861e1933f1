//! Which path a collective call takes on a GPU communicator, decided in one place:
//! [`GpuBackend::enqueue`] follows it, and the checks ask it what the CPU must compute to
//! hold the same bits (`oxccl_testkit::check::gpu_reference`).

use oxccl_kernels::device::{direct, ll};

use super::{GpuBackend, Protocols};
use crate::algo::{Algorithm, Collective, Shape, CHANNEL_GRANULE};
use crate::error::{Error, Result};
use crate::DataType;

/// The path one collective call takes on a [`GpuBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Through host memory and the host data path: some ranks are on other hosts.
    Staged,
    /// The direct kernel, one hop over LL (all_reduce, reduce, reduce_scatter, all_gather,
    /// broadcast of small messages). Reductions fold the ranks' contributions, each scaled
    /// by its rank's factor, in rank order: `((x0 op x1) op x2) ...` on every rank.
    Direct,
    /// The group of sends and receives the collective is (alltoall, gather and scatter of
    /// blocks up to NCCL_P2P_LL_THRESHOLD), over LL: copies only.
    Exchange,
    /// The executor kernel running `algorithm`'s schedule for `shape` (`algo::plan`) on the
    /// FIFOs, each rank's input scaled as it is read: Simple, or with `ll` LL
    /// (`oxccl_kernels::device::ll`): across hosts on the network connections (those
    /// between GPUs of a host stay Simple), on one host between the GPUs.
    Schedule { shape: Shape, algorithm: Algorithm, ll: bool },
}

impl GpuBackend {
    /// The path a call of `collective` on `count` elements of `dtype` (root `root`) takes
    /// on this rank; the same on every rank of the communicator (it depends on the call and
    /// the communicator's settings alone). An error where NCCL_PROTO leaves no path.
    pub fn route(&self, collective: Collective, count: usize, dtype: DataType, root: usize) -> Result<Route> {
        if self.staged.is_some() {
            return Ok(Route::Staged);
        }
        let inner = &self.inner;
        let (n, bytes) = (self.nranks(), count * dtype.size());
        let across_hosts = inner.departures.get().is_some();
        let request = oxccl_tuning::Request::new(collective, collective.tuning_bytes(count, dtype.size(), n));
        let mut asked = None;
        if !across_hosts && inner.tuner.plugin_name().is_some() && collective.is_tuned() {
            // On one host a tuner plugin that edits the table picks the schedule and its
            // protocol (never the one-hop kernel, which no NCCL algorithm names); one that
            // does not leaves the rules below, and the channels either asks for go to the
            // schedule.
            let choice = inner.tuner.choose(&request).map_err(|e| Error::invalid(e.to_string()))?;
            if choice.table_edited {
                let ll = choice.protocol == oxccl_tuning::Protocol::Ll;
                return Ok(self.schedule(collective, count, dtype, root, choice.algorithm, ll, choice.channels));
            }
            asked = choice.channels;
        }
        let allows_ll = inner.protocols.allows(collective, Protocols::LL);
        if allows_ll && inner.protocols.allows_direct(collective) && direct_mode(collective).is_some() && inner.direct.get().is_some_and(|d| d.carries(bytes, n)) {
            return Ok(Route::Direct);
        }
        let exchanges = matches!(collective, Collective::AllToAll | Collective::Gather | Collective::Scatter);
        if allows_ll && exchanges && bytes <= inner.p2p_ll.get().map_or(0, |p| p.limit) {
            return Ok(Route::Exchange);
        }
        let allows_simple = inner.protocols.allows(collective, Protocols::SIMPLE);
        if !across_hosts && !exchanges && !allows_simple && !allows_ll {
            return Err(Error::invalid(format!("NCCL_PROTO allows {} neither Simple nor LL, the protocols the GPU kernels run", collective.name())));
        }
        if exchanges && !allows_simple {
            return Err(Error::invalid(format!(
                "NCCL_PROTO excludes Simple for {}, and its blocks of {bytes} bytes are more than LL's send/recv path carries (NCCL_P2P_LL_THRESHOLD={})",
                collective.name(),
                inner.p2p_ll.get().map_or(0, |p| p.limit)
            )));
        }
        let (algorithm, ll, asked) = if exchanges {
            (Algorithm::Direct, false, None)
        } else if across_hosts {
            // Across hosts: the network kernels' model chooses among the ring, the direct
            // exchange, recursive doubling and the tree (what init connected), over Simple or
            // LL; NCCL_ALGO and NCCL_PROTO may force any, and a tuner plugin edit the table
            // and ask for channels.
            let choice = inner.tuner.choose(&request).map_err(|e| Error::invalid(e.to_string()))?;
            (choice.algorithm, choice.protocol == oxccl_tuning::Protocol::Ll, choice.channels)
        } else {
            // On one host the ring, unless NCCL_ALGO asks for the direct exchange alone
            // (two hops for all_reduce, one for the others) or recursive doubling (an error
            // where it leaves none of them); over LL up to OXCCL_GPU_LL_BYTES (unset: all_reduce
            // from 4 ranks up to 2 MiB, Config::gpu_ll_limit) or wherever NCCL_PROTO leaves LL
            // alone, else Simple.
            (inner.protocols.on_one_host(collective)?, inner.protocols.ll_on_one_host(collective, bytes, self.core.config.gpu_ll_limit(collective == Collective::AllReduce, n)), asked)
        };
        Ok(self.schedule(collective, count, dtype, root, algorithm, ll, asked))
    }

    /// The executor's route for `algorithm` (over LL where `ll`), on the channels a tuner
    /// plugin `asked` for (within NCCL_MAX_NCHANNELS as agreed), else on the size's.
    fn schedule(&self, collective: Collective, count: usize, dtype: DataType, root: usize, algorithm: Algorithm, ll: bool, asked: Option<usize>) -> Route {
        let inner = &self.inner;
        let (n, bytes) = (self.nranks(), count * dtype.size());
        let across_hosts = inner.departures.get().is_some();
        // Over the direct exchange's connections (channels 0 to direct_channels); two-shot
        // all_reduce takes two a part, one per phase.
        let most = match algorithm {
            Algorithm::Direct if collective == Collective::AllReduce && n > 2 => (inner.direct_channels(n) / 2).max(1),
            Algorithm::Direct | Algorithm::Doubling => inner.direct_channels(n),
            _ => inner.max_channels,
        };
        let channels = match asked {
            Some(asked) => asked.clamp(1, most),
            // An LL step between the GPUs of a host costs its lines' round trips more than
            // their bytes: twice the lanes of Simple, half the data in each.
            None if ll && !across_hosts && algorithm == Algorithm::Ring => inner.ll_channels(bytes),
            None => inner.channels(bytes).min(most),
        };
        let chunk = chunk_elements(ll, inner.geometry.slot_bytes, dtype.size());
        // Where the ranks lie host by host, the tree spans the hosts with a chain inside
        // each (algo::tree::trees); on one host every rank is the host's.
        let shape = Shape { collective, count, nranks: n, root, chunk, channels, per_host: self.core.rails.ranks_per_host_block() };
        if self.rank() == 0 {
            // NCCL's line, so that a run's choices can be compared with NCCL's.
            tracing::info!(target: crate::log_target::TUNING, "{}: {} Bytes -> Algo {} proto {} channel{{Lo..Hi}}={{0..{}}}", collective.nccl_name(), bytes, algorithm.nccl_name(), if ll { "LL" } else { "Simple" }, channels - 1);
        }
        Route::Schedule { shape, algorithm, ll }
    }
}

/// The elements of a schedule's chunk (its largest message) for Simple slots of
/// `slot_bytes` and elements of `esize` bytes, over LL where `ll`. An LL message fills its
/// own slot, and the encoder holds every message to a Simple slot as well
/// (OXCCL_GPU_SLOT_BYTES may be the smaller). Whole granules (an LL slot's 32760 data bytes
/// are not), so that the ring's segments start on 16-byte boundaries and the kernels copy
/// them with vector loads.
fn chunk_elements(ll: bool, slot_bytes: usize, esize: usize) -> usize {
    let slot_data = if ll { ll::slot_data(ll::SLOT_BYTES).min(slot_bytes) } else { slot_bytes };
    (slot_data / esize / CHANNEL_GRANULE * CHANNEL_GRANULE).max(1)
}

/// The direct kernel's mode for `collective`, if it has one.
pub(super) fn direct_mode(collective: Collective) -> Option<u32> {
    match collective {
        Collective::AllReduce => Some(direct::ALL_REDUCE),
        Collective::Reduce => Some(direct::REDUCE),
        Collective::AllGather => Some(direct::ALL_GATHER),
        Collective::ReduceScatter => Some(direct::REDUCE_SCATTER),
        Collective::Broadcast => Some(direct::BROADCAST),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk fits the Simple slot the encoder checks against and, over LL, the LL
    /// slot, in whole granules. (A 16 KiB Simple slot with an LL chunk of 32752 bytes was an
    /// internal error at a 4-rank all_reduce on 4×H200 until the chunk took the smaller.)
    #[test]
    fn a_chunk_fits_every_slot_it_goes_through() {
        for ll in [false, true] {
            for slot_bytes in [4096, 16 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20] {
                for esize in [1, 2, 4, 8] {
                    let chunk = chunk_elements(ll, slot_bytes, esize);
                    assert!(chunk * esize <= slot_bytes, "ll {ll}, slot {slot_bytes}, esize {esize}: {chunk} elements");
                    assert!(!ll || chunk * esize <= ll::slot_data(ll::SLOT_BYTES), "ll slot, esize {esize}: {chunk} elements");
                    assert_eq!(chunk % CHANNEL_GRANULE, 0, "ll {ll}, slot {slot_bytes}, esize {esize}");
                }
            }
        }
        assert_eq!(chunk_elements(true, 256 << 10, 1), 32752, "the LL slot's 32760 bytes, in granules");
        assert_eq!(chunk_elements(false, 256 << 10, 4), 65536);
    }
}
