//! Which path a collective call takes on a GPU communicator, decided in one place:
//! [`GpuBackend::enqueue`] follows it, and the checks ask it what the CPU must compute to
//! hold the same bits (`oxccl_testkit::check::gpu_reference`). [`KernelRoutes`] works the
//! same routes out from the settings alone, with no GPU (oxccl-topo, the route tests).

use oxccl_kernels::device::{direct, ll};

use super::{channel_count, direct_channels, most_channels, slot_bytes, GpuBackend, Protocols, LL_BYTES_PER_CHANNEL, LL_SPREAD_CHANNELS};
use crate::algo::{Algorithm, Collective, Shape, CHANNEL_GRANULE};
use crate::bootstrap::Config;
use crate::error::{Error, Result};
use crate::DataType;

/// The path one collective call takes on a [`GpuBackend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Through host memory and the host data path: some ranks are on other hosts.
    Staged,
    /// The direct kernel, one hop over LL lines, or LL128's where `ll128` (all_reduce,
    /// reduce, reduce_scatter, all_gather, broadcast of small messages). Reductions fold the
    /// ranks' contributions, each scaled by its rank's factor, in rank order:
    /// `((x0 op x1) op x2) ...` on every rank.
    Direct { ll128: bool },
    /// all_reduce as two one-hop shots in one launch of the direct kernel, over LL128 lines:
    /// reduce_scatter (block r of the result folded on rank r, in rank order as
    /// [`Route::Direct`]), each folded line sent on at once to every other rank.
    TwoShot,
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
        let rules = Rules {
            nranks: self.nranks(),
            rank: self.rank(),
            across_hosts: inner.across_hosts(),
            per_host: self.core.rails.ranks_per_host_block(),
            direct_limit: inner.direct.get().map_or(0, |d| d.limit),
            two_shot_limit: inner.direct.get().filter(|d| d.layout.second_offset > 0).map_or(0, |_| self.core.config.gpu_two_shot_limit(self.nranks())),
            ll128_bytes: inner.direct.get().map_or(usize::MAX, |d| d.ll128_bytes),
            p2p_ll_limit: inner.p2p_ll.get().map_or(0, |p| p.limit),
            min_channels: inner.min_channels,
            max_channels: inner.max_channels,
            slot_bytes: inner.geometry.slot_bytes,
            config: &self.core.config,
            protocols: &inner.protocols,
            tuner: &inner.tuner,
        };
        rules.decide(collective, count, dtype, root)
    }
}

/// The routes a communicator's GPU kernels take, worked out from its settings alone, with
/// no GPU: what `oxccl-topo --kernels` shows, and what the route tests check. It assumes
/// what init agrees where a GPU is present: NCCL_MAX_NCHANNELS channels, unset 128 on one
/// host as on a GPU of 128 multiprocessors or more a rank (init also holds them to the
/// multiprocessors, and across hosts to OXCCL_GPU_NET_CHANNELS), the one-hop
/// kernel and LL send/recv paths on one host, LL128 lines from OXCCL_GPU_DIRECT_LL128_BYTES
/// (init also needs every pair of GPUs NVLink-connected), the kernels (not staging) across
/// hosts.
pub struct KernelRoutes {
    nranks: usize,
    across_hosts: bool,
    per_host: usize,
    max_channels: usize,
    config: Config,
    protocols: Protocols,
    tuner: oxccl_tuning::Tuner,
}

impl KernelRoutes {
    /// The routes of `nranks` ranks on GPUs (`per_host` a host where they lie host by host
    /// in equal blocks, else 1; across hosts where `across_hosts`) under `config`, with the
    /// tuner plugin `plugin` if any (init loads NCCL_TUNER_PLUGIN's).
    pub fn new(config: &Config, nranks: usize, per_host: usize, across_hosts: bool, plugin: Option<Box<dyn oxccl_tuning::TunerPlugin>>) -> Result<KernelRoutes> {
        let selection = oxccl_tuning::Selection::parse(config.algo.as_deref(), config.proto.as_deref()).map_err(|e| Error::invalid(e.to_string()))?;
        let max_channels = most_channels(config, across_hosts, usize::MAX);
        let protocols = Protocols::new(&selection);
        let tuner = kernel_tuner(selection, nranks, per_host, across_hosts, max_channels, plugin);
        Ok(KernelRoutes { nranks, across_hosts, per_host, max_channels, config: config.clone(), protocols, tuner })
    }

    /// The route of a call (as [`GpuBackend::route`], rank 0's).
    pub fn route(&self, collective: Collective, count: usize, dtype: DataType, root: usize) -> Result<Route> {
        let (n, one_host) = (self.nranks, !self.across_hosts);
        let rules = Rules {
            nranks: n,
            rank: usize::MAX,
            across_hosts: self.across_hosts,
            per_host: self.per_host,
            direct_limit: if one_host && n > 1 { self.config.gpu_direct_limit(n) } else { 0 },
            two_shot_limit: self.config.gpu_two_shot_limit(n),
            ll128_bytes: self.config.gpu_direct_ll128_bytes,
            p2p_ll_limit: if one_host && n > 1 { self.config.p2p_ll_bytes } else { 0 },
            min_channels: self.config.min_channels.clamp(1, self.max_channels),
            max_channels: self.max_channels,
            slot_bytes: slot_bytes(&self.config),
            config: &self.config,
            protocols: &self.protocols,
            tuner: &self.tuner,
        };
        rules.decide(collective, count, dtype, root)
    }
}

/// The tuner of a GPU communicator: across hosts the network kernels' model, which
/// chooses; on one host [`oxccl_tuning::OneHostModel`], which prices what a tuner plugin
/// sees (the rules route where the plugin edits nothing).
pub(super) fn kernel_tuner(selection: oxccl_tuning::Selection, nranks: usize, per_host: usize, across_hosts: bool, max_channels: usize, plugin: Option<Box<dyn oxccl_tuning::TunerPlugin>>) -> oxccl_tuning::Tuner {
    if across_hosts {
        let model = oxccl_tuning::NetKernelModel { nranks, per_host, channels: max_channels };
        oxccl_tuning::Tuner::new(selection, oxccl_tuning::Model::NetKernels(model), oxccl_tuning::NetKernelModel::runs, plugin)
    } else {
        let model = oxccl_tuning::OneHostModel { nranks };
        oxccl_tuning::Tuner::new(selection, oxccl_tuning::Model::OneHost(model), oxccl_tuning::OneHostModel::runs, plugin)
    }
}

/// What a call's route depends on besides the call: the communicator's settings as its
/// GPU backend agreed them at init.
struct Rules<'a> {
    nranks: usize,
    /// This rank (rank 0 logs NCCL's TUNING line; usize::MAX: none logs).
    rank: usize,
    /// Some rank on another host (the kernels over the network).
    across_hosts: bool,
    per_host: usize,
    /// The most a rank receives in a one-hop call (0: no one-hop kernel).
    direct_limit: usize,
    /// The largest all_reduce that goes in two shots (0: the inboxes have no rows for them).
    two_shot_limit: usize,
    /// One-hop calls in which a rank receives this many bytes or more go over LL128, where
    /// NCCL_PROTO allows it.
    ll128_bytes: usize,
    /// The largest block of the LL send/recv path (0: none).
    p2p_ll_limit: usize,
    min_channels: usize,
    max_channels: usize,
    slot_bytes: usize,
    config: &'a Config,
    protocols: &'a Protocols,
    tuner: &'a oxccl_tuning::Tuner,
}

impl Rules<'_> {
    fn decide(&self, collective: Collective, count: usize, dtype: DataType, root: usize) -> Result<Route> {
        let (n, bytes, across_hosts) = (self.nranks, count * dtype.size(), self.across_hosts);
        let request = oxccl_tuning::Request::new(collective, collective.tuning_bytes(count, dtype.size(), n));
        let mut asked = None;
        if !across_hosts && self.tuner.plugin_name().is_some() && collective.is_tuned() {
            // On one host a tuner plugin that edits the table picks the schedule and its
            // protocol (never the one-hop kernel, which no NCCL algorithm names); one that
            // does not leaves the rules below, and the channels either asks for go to the
            // schedule.
            let choice = self.tuner.choose(&request).map_err(|e| Error::invalid(e.to_string()))?;
            if choice.table_edited {
                let ll = choice.protocol == oxccl_tuning::Protocol::Ll;
                return Ok(self.schedule(collective, count, dtype, root, choice.algorithm, ll, choice.channels));
            }
            asked = choice.channels;
        }
        let protocols = self.protocols;
        let allows_ll = protocols.allows(collective, Protocols::LL);
        let one_hop = allows_ll && protocols.allows_direct(collective) && direct_mode(collective).is_some() && self.direct_limit > 0 && n > 1;
        let allows_ll128 = protocols.allows(collective, Protocols::LL128);
        if one_hop && bytes * (n - 1) <= self.direct_limit {
            return Ok(Route::Direct { ll128: allows_ll128 && bytes * (n - 1) >= self.ll128_bytes });
        }
        // Two shots, for an all_reduce too large for one, in equal blocks large enough for
        // LL128 lines (the LL128 rows hold OXCCL_GPU_TWO_SHOT_BYTES / nranks).
        let received = bytes / n.max(1) * (n - 1);
        if one_hop && allows_ll128 && collective == Collective::AllReduce && bytes <= self.two_shot_limit && count % n == 0 && received >= self.ll128_bytes {
            return Ok(Route::TwoShot);
        }
        let exchanges = matches!(collective, Collective::AllToAll | Collective::Gather | Collective::Scatter);
        if allows_ll && exchanges && bytes <= self.p2p_ll_limit {
            return Ok(Route::Exchange);
        }
        let allows_simple = protocols.allows(collective, Protocols::SIMPLE);
        if !across_hosts && !exchanges && !allows_simple && !allows_ll {
            return Err(Error::invalid(format!("NCCL_PROTO allows {} neither Simple nor LL, the protocols the GPU kernels run", collective.name())));
        }
        if exchanges && !allows_simple {
            return Err(Error::invalid(format!(
                "NCCL_PROTO excludes Simple for {}, and its blocks of {bytes} bytes are more than LL's send/recv path carries (NCCL_P2P_LL_THRESHOLD={})",
                collective.name(),
                self.p2p_ll_limit
            )));
        }
        let (algorithm, ll, asked) = if exchanges {
            (Algorithm::Direct, false, None)
        } else if across_hosts {
            // Across hosts: the network kernels' model chooses among the ring, the direct
            // exchange, recursive doubling and the tree (what init connected), over Simple or
            // LL; NCCL_ALGO and NCCL_PROTO may force any, and a tuner plugin edit the table
            // and ask for channels.
            let choice = self.tuner.choose(&request).map_err(|e| Error::invalid(e.to_string()))?;
            (choice.algorithm, choice.protocol == oxccl_tuning::Protocol::Ll, choice.channels)
        } else {
            // On one host the ring, unless NCCL_ALGO asks for the direct exchange alone
            // (two hops for all_reduce, one for the others) or recursive doubling (an error
            // where it leaves none of them); over LL up to OXCCL_GPU_LL_BYTES (unset: all_reduce
            // from 4 ranks up to 2 MiB, Config::gpu_ll_limit) or wherever NCCL_PROTO leaves LL
            // alone, else Simple.
            (protocols.on_one_host(collective)?, protocols.ll_on_one_host(collective, bytes, self.config.gpu_ll_limit(collective == Collective::AllReduce, n)), asked)
        };
        Ok(self.schedule(collective, count, dtype, root, algorithm, ll, asked))
    }

    /// The executor's route for `algorithm` (over LL where `ll`), on the channels a tuner
    /// plugin `asked` for (within NCCL_MAX_NCHANNELS as agreed), else on the size's.
    #[allow(clippy::too_many_arguments)]
    fn schedule(&self, collective: Collective, count: usize, dtype: DataType, root: usize, algorithm: Algorithm, ll: bool, asked: Option<usize>) -> Route {
        let (n, bytes) = (self.nranks, count * dtype.size());
        let (min, max) = (self.min_channels, self.max_channels);
        // Over the direct exchange's connections (channels 0 to direct_channels); two-shot
        // all_reduce takes two a part, one per phase. With 2 ranks on one host init connects
        // the ring's `max` channels both ways to the one peer, and two exchanges take them
        // too: a gather, which flows one way into the root (1448 µs at 1 GiB on 2 H200s
        // against 1489 on 64, NCCL 1454; scatter, the other way, gained nothing), and
        // alltoall, whose lanes in place each send and receive (out of place its plan runs
        // two channels a lane, GpuBackend::plan, so as not to double its blocks).
        let most = match algorithm {
            Algorithm::Direct if collective == Collective::AllReduce && n > 2 => (direct_channels(max, n) / 2).max(1),
            Algorithm::Direct if matches!(collective, Collective::Gather | Collective::AllToAll) && n == 2 && !self.across_hosts => max,
            Algorithm::Direct | Algorithm::Doubling => direct_channels(max, n),
            _ => max,
        };
        let channels = match asked {
            Some(asked) => asked.clamp(1, most),
            // An LL step between the GPUs of a host costs its lines' round trips more than
            // their bytes: twice the lanes of Simple, half the data in each.
            None if ll && !self.across_hosts && algorithm == Algorithm::Ring => channel_count(bytes, min, max, Some((LL_BYTES_PER_CHANNEL, LL_SPREAD_CHANNELS))),
            None => channel_count(bytes, min, max, None).min(most),
        };
        let chunk = chunk_elements(ll, self.slot_bytes, dtype.size());
        // Where the ranks lie host by host, the tree spans the hosts with a chain inside
        // each (algo::tree::trees); on one host every rank is the host's.
        let shape = Shape { collective, count, nranks: n, root, chunk, channels, per_host: self.per_host };
        if self.rank == 0 {
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

    /// What a route is, in short: (one-hop, exchange, or the schedule's algorithm, LL, channels).
    fn short(route: Route) -> (&'static str, Option<(Algorithm, bool, usize)>) {
        match route {
            Route::Staged => ("staged", None),
            Route::Direct { ll128 } => (if ll128 { "one hop, LL128" } else { "one hop" }, None),
            Route::TwoShot => ("two shots", None),
            Route::Exchange => ("exchange", None),
            Route::Schedule { shape, algorithm, ll } => ("schedule", Some((algorithm, ll, shape.channels))),
        }
    }

    fn routes(settings: &[(&str, &str)], nranks: usize, across_hosts: bool, plugin: Option<Box<dyn oxccl_tuning::TunerPlugin>>) -> KernelRoutes {
        let mut config = Config::defaults();
        for (name, value) in settings {
            config.set(name, value).unwrap();
        }
        KernelRoutes::new(&config, nranks, 1, across_hosts, plugin).unwrap()
    }

    fn float_route(r: &KernelRoutes, c: Collective, bytes: usize) -> (&'static str, Option<(Algorithm, bool, usize)>) {
        short(r.route(c, bytes / 4, DataType::Float32, 0).unwrap())
    }

    /// The rules on one host, at the defaults: the one-hop kernel while a rank receives
    /// at most OXCCL_GPU_DIRECT_BYTES (2 MiB from 4 ranks, 1 MiB below), over LL128 from
    /// 512 KiB received; from 4 ranks all_reduce up to 4 MiB in two one-hop shots where the
    /// ranks divide the count; the ring over LL
    /// for all_reduce up to 2 MiB from 4 ranks (a lane per 32 KiB up to 32), else over
    /// Simple (a lane per 64 KiB up to NCCL_MAX_NCHANNELS, unset 128 on a GPU of 128
    /// multiprocessors a rank); on 2 ranks two shots up to 2 MiB; small alltoall blocks as an LL
    /// exchange; NCCL_ALGO=ring keeps the one-hop kernel off; NCCL_PROTO that leaves the
    /// kernels nothing is an error naming it.
    #[test]
    fn one_host_routes_by_size_ranks_and_settings() {
        let four = routes(&[], 4, false, None);
        let ring = |ll, lanes| ("schedule", Some((Algorithm::Ring, ll, lanes)));
        assert_eq!(float_route(&four, Collective::AllReduce, 8), ("one hop", None));
        assert_eq!(float_route(&four, Collective::AllReduce, 128 << 10), ("one hop", None), "3 x 128 KiB received: LL");
        assert_eq!(float_route(&four, Collective::AllReduce, 512 << 10), ("one hop, LL128", None), "3 x 512 KiB received");
        assert_eq!(float_route(&four, Collective::AllReduce, 1 << 20), ("two shots", None), "3 x 256 KiB received twice");
        assert_eq!(float_route(&four, Collective::AllReduce, (1 << 20) + 4), ring(true, 32), "blocks of a count 4 does not divide");
        assert_eq!(float_route(&four, Collective::AllReduce, 2 << 20), ("two shots", None));
        assert_eq!(float_route(&four, Collective::AllReduce, (2 << 20) + 4), ring(false, 33), "blocks of a count 4 does not divide, past the LL ring's 2 MiB");
        assert_eq!(float_route(&four, Collective::AllReduce, 4 << 20), ("two shots", None));
        assert_eq!(float_route(&four, Collective::AllReduce, (4 << 20) + 16), ring(false, 65), "past OXCCL_GPU_TWO_SHOT_BYTES");
        assert_eq!(float_route(&four, Collective::AllReduce, 64 << 20), ring(false, 128), "128 channels where the GPU has the multiprocessors");
        let sixty_four = routes(&[("NCCL_MAX_NCHANNELS", "64")], 4, false, None);
        assert_eq!(float_route(&sixty_four, Collective::AllReduce, 64 << 20), ring(false, 64), "NCCL_MAX_NCHANNELS as set");
        assert_eq!(float_route(&four, Collective::AllGather, 1 << 20), ring(false, 16), "LL by default for all_reduce alone");
        assert_eq!(float_route(&four, Collective::AllToAll, 4096), ("exchange", None));
        let two = routes(&[], 2, false, None);
        assert_eq!(float_route(&two, Collective::AllReduce, 1 << 20), ("one hop, LL128", None));
        assert_eq!(float_route(&two, Collective::AllReduce, 2 << 20), ("two shots", None), "2 MiB on 2 ranks");
        assert_eq!(float_route(&two, Collective::AllReduce, 4 << 20), ring(false, 64), "no LL by default below 4 ranks");
        let direct = |lanes| ("schedule", Some((Algorithm::Direct, false, lanes)));
        assert_eq!(float_route(&two, Collective::Gather, 1 << 30), direct(128), "a gather of 2 ranks on the ring's connections too");
        assert_eq!(float_route(&two, Collective::Scatter, 1 << 30), direct(64));
        assert_eq!(float_route(&two, Collective::AllToAll, 1 << 30), direct(128));
        assert_eq!(float_route(&routes(&[], 2, true, None), Collective::Gather, 1 << 30).1.map(|(_, _, lanes)| lanes <= 64), Some(true), "not across hosts");
        assert_eq!(float_route(&four, Collective::Gather, 1 << 30), direct(21), "the direct share of 64 from 3 ranks");
        let three = routes(&[], 3, false, None);
        assert_eq!(float_route(&three, Collective::AllReduce, 3 << 20), ring(false, 48), "no two shots on 3 ranks");
        let forced = routes(&[("NCCL_ALGO", "ring")], 4, false, None);
        assert_eq!(float_route(&forced, Collective::AllReduce, 8), ring(true, 1), "the ring over LL, as all_reduce from 4 ranks to 2 MiB");
        let e = routes(&[("NCCL_PROTO", "LL128")], 4, false, None).route(Collective::AllReduce, 1 << 20, DataType::Float32, 0).unwrap_err().to_string();
        assert!(e.contains("NCCL_PROTO") && e.contains("neither Simple nor LL"), "{e}");
        let no_hop = routes(&[("OXCCL_GPU_DIRECT_BYTES", "0")], 4, false, None);
        assert_eq!(float_route(&no_hop, Collective::AllReduce, 0), ring(true, 1), "no one-hop kernel, not even for nothing");
        let no_ll128 = routes(&[("NCCL_PROTO", "^LL128")], 4, false, None);
        assert_eq!(float_route(&no_ll128, Collective::AllReduce, 512 << 10), ("one hop", None), "NCCL_PROTO=^LL128: LL lines");
        let capped = routes(&[("NCCL_MAX_NCHANNELS", "8"), ("OXCCL_GPU_TWO_SHOT_BYTES", "0")], 4, false, None);
        assert_eq!(float_route(&capped, Collective::AllReduce, 1 << 20), ring(true, 8));
        let ll_only = routes(&[("OXCCL_GPU_DIRECT_LL128_BYTES", "1G")], 4, false, None);
        assert_eq!(float_route(&ll_only, Collective::AllReduce, 512 << 10), ("one hop", None));
        assert_eq!(float_route(&ll_only, Collective::AllReduce, 2 << 20), ring(true, 32), "two shots run LL128 lines alone");
        assert_eq!(float_route(&ll_only, Collective::AllGather, 2 << 20), ring(false, 32), "all_reduce alone goes twice");
    }

    /// Across hosts the network kernels' model chooses (NCCL_ALGO forcing the tree here),
    /// on at most OXCCL_GPU_NET_CHANNELS channels; no one-hop kernel, no LL exchange.
    #[test]
    fn across_hosts_the_model_chooses() {
        let tree = routes(&[("NCCL_ALGO", "allreduce:tree")], 4, true, None);
        match float_route(&tree, Collective::AllReduce, 64 << 20) {
            ("schedule", Some((Algorithm::Tree, _, lanes))) => assert!(lanes <= 8, "{lanes} lanes"),
            other => panic!("{other:?}"),
        }
        let plain = routes(&[], 2, true, None);
        assert_eq!(float_route(&plain, Collective::AllReduce, 8).0, "schedule");
        assert_eq!(float_route(&plain, Collective::AllToAll, 64).0, "schedule");
    }

    /// A tuner plugin that names the ring over Simple on 3 channels for all_reduce, and
    /// only asks 5 channels of broadcast.
    struct Rules3;

    impl oxccl_tuning::TunerPlugin for Rules3 {
        fn name(&self) -> &str {
            "rules3"
        }
        fn get_coll_info(&self, collective: Collective, _: usize, _: usize, table: &mut oxccl_tuning::CostTable, _: bool, channels: &mut usize) -> oxccl_tuning::Result<()> {
            match collective {
                Collective::AllReduce => {
                    table.nccl_rows_mut()[Algorithm::Ring as usize][oxccl_tuning::Protocol::Simple as usize] = 0.0;
                    *channels = 3;
                }
                Collective::Broadcast => *channels = 5,
                _ => {}
            }
            Ok(())
        }
    }

    /// On one host a plugin that edits the table takes the call off the one-hop kernel to
    /// its pair and channels; one that only asks channels leaves the rules, its channels
    /// going to schedules; collectives NCCL does not tune never reach it. Across hosts its
    /// choice and channels stand too.
    #[test]
    fn a_tuner_plugin_overrides_the_rules_where_it_edits_the_table() {
        let four = routes(&[], 4, false, Some(Box::new(Rules3)));
        assert_eq!(float_route(&four, Collective::AllReduce, 8), ("schedule", Some((Algorithm::Ring, false, 3))));
        assert_eq!(float_route(&four, Collective::AllReduce, 1 << 20), ("schedule", Some((Algorithm::Ring, false, 3))));
        assert_eq!(float_route(&four, Collective::Broadcast, 8), ("one hop", None));
        assert_eq!(float_route(&four, Collective::Broadcast, 64 << 20), ("schedule", Some((Algorithm::Ring, false, 5))));
        assert_eq!(float_route(&four, Collective::AllGather, 64 << 20), ("schedule", Some((Algorithm::Ring, false, 128))));
        assert_eq!(float_route(&four, Collective::AllToAll, 4096), ("exchange", None));
        let across = routes(&[], 4, true, Some(Box::new(Rules3)));
        assert_eq!(float_route(&across, Collective::AllReduce, 64 << 20), ("schedule", Some((Algorithm::Ring, false, 3))));
    }
}
