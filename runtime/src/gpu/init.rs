//! Making a [`GpuBackend`]: the GPU's settings, the watcher thread that stops kernels when
//! a peer fails, and every connection and inbox a call can use, set up with the peers
//! before the first call.
//!
//! Across hosts (some rank on another host, OXCCL_GPU_ACROSS_HOSTS=kernels) the
//! connections to other hosts' ranks go over the network (conns.rs), at most
//! OXCCL_GPU_NET_CHANNELS channels, and the one-hop LL paths (inboxes in the peers' GPU
//! memory) are not set up: every call runs the executor kernel. The `gone` flags are then
//! mapped host memory that the watcher raises for peers that left (the bootstrap says so)
//! and stayed gone for `NET_LEFT_GRACE`, as the host path waits for their last bytes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use oxccl_kernels::cuda::Toolchain;
use oxccl_kernels::device::{ll128, LL_LINE_BYTES, LL_LINE_DATA};

use oxccl_transports::fifo::Geometry;

use super::conns::{Inbox, Origin, Setup};
use super::driver::{Device, DeviceMemory, MappedHost};
use super::encode::End;
use super::staged::Staged;
use super::{Direct, GpuBackend, Inner, P2pLl, Protocols, State, FLAG_WORDS, ONE_WORD};
use oxccl_bootstrap::config::AcrossHosts;
use crate::algo;
use crate::base::Core;
use crate::base::host_id;
use crate::error::{Error, Result};
use crate::host::SLOTS;

impl GpuBackend {
    /// The GPU backend of `core`'s communicator on GPU `ordinal`: every connection and
    /// inbox a call can use is set up with the peers here (collective: every rank calls it).
    pub fn new(core: Arc<Core>, ordinal: usize) -> Result<GpuBackend> {
        let device = Device::open(ordinal)?;
        device.bind()?;
        let (major, minor) = device.capability()?;
        let arch = oxccl_kernels::cuda::arch_name(major, minor).map_err(|e| Error::from_kernels(format!("compute capability {major}.{minor}"), e))?;
        let toolchain = Toolchain::find().map_err(|e| Error::from_kernels("finding NVRTC and the CUDA headers", e))?;
        let config = &core.config;
        let slot_bytes = super::slot_bytes(config);
        // Ranks sharing this GPU run their kernels side by side, and a kernel whose blocks
        // wait for a peer's kernel needs all of both resident: each rank gets at most its
        // share of the multiprocessors, one 512-thread block each (4 ranks on one H200
        // with 64 channels each deadlocked in an 8 MiB all_reduce).
        let gpus = gather_gpus(&core, &device.pci_bus_id()?)?;
        let (sharing, sharing_here) = ranks_on_this_gpu(&core, &gpus);
        if sharing_here > 1 {
            warn_streams_may_share_queues(device.ordinal, sharing_here);
        }
        let across_hosts = core.same_host.iter().any(|&same| !same);
        let net_kernels = across_hosts && config.gpu_across_hosts == AcrossHosts::Kernels;
        let multiprocessors = device.multiprocessors()? / sharing;
        let mine = super::most_channels(config, net_kernels, multiprocessors);
        let neighbours = super::neighbour_channels(config, net_kernels, multiprocessors);
        let (min_channels, max_channels, neighbour_channels) = agree_on_channels(&core, config.min_channels, mine, neighbours)?;
        let selection = oxccl_tuning::Selection::parse(config.algo.as_deref(), config.proto.as_deref()).map_err(|e| Error::invalid(e.to_string()))?;
        let protocols = Protocols::new(&selection);
        // Across hosts the network kernels' model prices the choice (route.rs); on one host
        // it prices what a tuner plugin sees, and the plugin's edits choose. Staged calls
        // choose on the host path, whose tuner loads the plugin for them.
        let plugin = if across_hosts && !net_kernels { None } else { crate::host::load_tuner_plugin(&core)? };
        let tuner = super::route::kernel_tuner(selection, core.nranks, core.rails.ranks_per_host_block(), across_hosts, max_channels, plugin);
        let inner = Arc::new(Inner {
            arch,
            toolchain,
            origin: Origin::here(&host_id(config)),
            geometry: Geometry { slots: SLOTS, slot_bytes },
            max_channels,
            min_channels,
            neighbour_channels,
            timeout: config.coll_timeout,
            direct: std::sync::OnceLock::new(),
            p2p_ll: std::sync::OnceLock::new(),
            gone: std::sync::OnceLock::new(),
            departures: std::sync::OnceLock::new(),
            protocols,
            timeline: config.kernel_trace.as_deref().map(|path| super::timeline::KernelTimeline::new(path, core.rank)).transpose()?,
            tuner,
            state: Mutex::new(State::default()),
            flags: {
                let flags = MappedHost::zeroed(FLAG_WORDS)?;
                flags.set(ONE_WORD, 1);
                flags
            },
            stop: AtomicBool::new(false),
            failure: Mutex::new(None),
            device,
        });
        // The watcher raises the kernels' abort flag when the control plane sees a failure
        // or the communicator is aborted, and tells every rank when a kernel here stopped
        // because a peer left (the ranks waiting on this one learn it too, as of a death).
        let (watched, watching) = (inner.clone(), core.clone());
        let watcher = std::thread::Builder::new()
            .name(format!("oxccl-gpu-watch-{}", core.rank))
            .spawn(move || {
                let mut announced = false;
                let mut departed: Vec<(u32, std::time::Instant)> = Vec::new();
                while !watched.stop.load(Ordering::Acquire) {
                    if let Err(e) = watching.health() {
                        watched.fail(e);
                        return;
                    }
                    if let Some(gone) = watched.departures.get() {
                        raise_gone_flags(gone, &watching.boot.departed(), &mut departed);
                    }
                    if let Some(Error::PeerFailed { rank, reason }) = watched.kernel_stop().and_then(|stop| watched.stop_error(&stop)).filter(|_| !announced) {
                        announced = true;
                        watching.announce_failed(rank, &reason);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
            .map_err(|e| Error::Internal(format!("starting the GPU watcher thread: {e}")))?;
        if across_hosts && !net_kernels {
            // OXCCL_GPU_ACROSS_HOSTS=staged: every operation is staged through host memory
            // and run by the host data path (a host-memory communicator over the same core).
            let gone = DeviceMemory::zeroed(core.nranks * 4)?;
            let _ = inner.gone.set(gone.ptr);
            inner.state.lock().gone = Some(gone);
            let staged = Staged::new(core.clone(), inner.clone())?;
            tracing::info!(target: crate::log_target::INIT, "rank {}: GPU {} ({arch}); ranks on other hosts: collectives and send/recv staged through host memory", core.rank, inner.device.ordinal);
            return Ok(GpuBackend { inner, watcher: Some(watcher), core, staged: Some(staged) });
        }
        let dev = GpuBackend { inner, watcher: Some(watcher), core, staged: None };
        dev.connect_all(across_hosts)?;
        let n = dev.nranks();
        let limit = dev.core.config.gpu_direct_limit(n);
        if across_hosts {
            // No peer on another host reaches this GPU's memory: the flags are host memory
            // the watcher raises.
            let gone = MappedHost::zeroed(n)?;
            let _ = dev.inner.gone.set(gone.device);
            let _ = dev.inner.departures.set(gone);
            tracing::info!(target: crate::log_target::INIT, "rank {}: GPU {} ({arch}), ranks on other hosts over the network (kernels and the proxy), up to {max_channels} channels", dev.rank(), dev.inner.device.ordinal);
            return Ok(dev);
        }
        // A u32 per rank, which that rank raises in its peers' memory when it leaves.
        let (gone, _) = dev.inner.state.lock().conns.inboxes(Inbox::Gone, n * 4, &dev.setup())?;
        let _ = dev.inner.gone.set(gone);
        if limit > 0 && n > 1 {
            let ll128_bytes = if lines_arrive_whole(&dev.core, &dev.inner.device, major, &gpus)? { dev.core.config.gpu_direct_ll128_bytes } else { usize::MAX };
            let layout = DirectLayout::new(limit, n, dev.core.config.gpu_two_shot_limit(n), ll128_bytes);
            let inner = &dev.inner;
            let (inbox, table) = inner.state.lock().conns.inboxes(Inbox::Direct, layout.bytes(n), &dev.setup())?;
            let direct = Direct { limit, inbox, table, layout, ll128_bytes, launches: AtomicU64::new(0) };
            let _ = inner.direct.set(direct);
        }
        let limit = dev.core.config.p2p_ll_bytes;
        if limit > 0 && n > 1 {
            // Per sender two halves of one message each; acknowledgements (u64 per rank),
            // then this rank's message counters (u64 sent and received per rank).
            let cap_lines = limit.div_ceil(LL_LINE_DATA);
            let ack_offset = 2 * n * cap_lines * LL_LINE_BYTES;
            let count_offset = ack_offset + n * 8;
            let inner = &dev.inner;
            let (inbox, table) = inner.state.lock().conns.inboxes(Inbox::PointToPoint, count_offset + 2 * n * 8, &dev.setup())?;
            let p2p = P2pLl { limit, inbox, table, cap_lines: cap_lines as u32, ack_offset: ack_offset as u64, count_offset: count_offset as u64, rank: dev.rank() as u32, nranks: n as u32 };
            let _ = inner.p2p_ll.set(p2p);
        }
        tracing::info!(target: crate::log_target::INIT, "rank {}: GPU {} ({arch}), slots of {} KiB, up to {max_channels} channels", dev.rank(), dev.inner.device.ordinal, slot_bytes >> 10);
        Ok(dev)
    }

    /// Connects, at init, every link a collective can use: the ring's channels and the
    /// direct exchange with every peer, and across hosts the tree's links on every channel
    /// (collective: every rank calls it). Allocating GPU
    /// memory later, while a rank sharing this GPU waits in a kernel, could serialize the
    /// two (allocations and memsets synchronize); at init no kernel runs.
    fn connect_all(&self, across_hosts: bool) -> Result<()> {
        let (n, rank) = (self.nranks(), self.rank());
        if n == 1 {
            return Ok(());
        }
        let mut ends = std::collections::BTreeSet::new();
        for channel in 0..self.inner.max_channels {
            ends.insert(End::Send(algo::Link { peer: (rank + 1) % n, channel }));
            ends.insert(End::Recv(algo::Link { peer: (rank + n - 1) % n, channel }));
        }
        // Across hosts, two-shot all_reduce's second phase is channel 1 (route.rs).
        let direct_channels = if across_hosts { self.inner.direct_channels(n).max(2) } else { self.inner.direct_channels(n) };
        let both_ways = |ends: &mut std::collections::BTreeSet<End>, peer, channel| {
            ends.insert(End::Send(algo::Link { peer, channel }));
            ends.insert(End::Recv(algo::Link { peer, channel }));
        };
        for peer in (0..n).filter(|&p| p != rank) {
            for channel in 0..direct_channels {
                both_ways(&mut ends, peer, channel);
            }
        }
        if across_hosts {
            // Tree t of channel c runs on connection channel 2c+t (algo::tree), both ways
            // between each rank and its parent and children. On one host those a plan
            // lacks are connected at its first call; across hosts a connection made then,
            // while a rank sharing this GPU waits in a kernel, could wait for it.
            let trees = algo::trees(n, self.core.rails.ranks_per_host_block(), rank);
            for (t, node) in trees.iter().enumerate() {
                for peer in node.parent.iter().chain(&node.children) {
                    for channel in 0..self.inner.max_channels {
                        both_ways(&mut ends, *peer, 2 * channel + t);
                    }
                }
            }
        }
        let ends: Vec<End> = ends.into_iter().collect();
        let inner = &self.inner;
        let mut state = inner.state.lock();
        state.conns.ensure(&ends, &self.setup())?;
        // One arena block ahead, for the first plans.
        state.arena.reserve()?;
        Ok(())
    }

    /// What connecting needs: the bootstrap, the GPU, who this rank is, the FIFO shape.
    pub(super) fn setup(&self) -> Setup<'_> {
        let inner = &self.inner;
        // LL slots between GPUs only where a call can run LL there (route.rs, the same rule):
        // they add a quarter to each FIFO.
        let n = self.nranks();
        let peer_ll = algo::Collective::ALL.iter().any(|&c| inner.protocols.ll_on_one_host(c, 0, self.core.config.gpu_ll_limit(c == algo::Collective::AllReduce, n)));
        Setup { boot: &self.core.boot, device: &inner.device, origin: inner.origin, geometry: inner.geometry, peer_ll, same_host: &self.core.same_host, net: &self.core.net, rails: &self.core.rails }
    }
}

/// Raises, in `gone` (a u32 per rank), the flag of every peer that has been in `now_departed`
/// (the bootstrap's departed ranks) for [`NET_LEFT_GRACE`](crate::host::exec::NET_LEFT_GRACE):
/// what it sent had time to land. `seen` remembers when each was first seen.
fn raise_gone_flags(gone: &MappedHost, now_departed: &[u32], seen: &mut Vec<(u32, std::time::Instant)>) {
    for &rank in now_departed {
        if !seen.iter().any(|(r, _)| *r == rank) {
            seen.push((rank, std::time::Instant::now()));
        }
    }
    for &(rank, since) in seen.iter() {
        if since.elapsed() >= crate::host::exec::NET_LEFT_GRACE && gone.get(rank as usize) == 0 {
            gone.set(rank as usize, 1);
        }
    }
}

/// Bytes of a GPU's id as ranks exchange it at init: its PCI bus id, NUL-padded.
const GPU_ID: usize = 32;

/// A GPU's id for the exchange: `bus_id` (the PCI bus id, the same in every process
/// whatever CUDA_VISIBLE_DEVICES numbers it), NUL-padded to [`GPU_ID`] bytes.
fn gpu_id(bus_id: &str) -> [u8; GPU_ID] {
    let mut id = [0u8; GPU_ID];
    let len = bus_id.len().min(GPU_ID);
    id[..len].copy_from_slice(&bus_id.as_bytes()[..len]);
    id
}

/// Every rank's GPU and process, in rank order (collective: every rank calls it at init):
/// per rank its GPU's id ([`gpu_id`] of `bus_id`, the PCI bus id) then a tag of its
/// process, told apart from every other on any host.
fn gather_gpus(core: &Core, bus_id: &str) -> Result<Vec<Vec<u8>>> {
    let mine = [&gpu_id(bus_id)[..], &crate::base::process_tag().to_le_bytes()].concat();
    Ok(core.boot.allgather(&mine)?.chunks_exact(mine.len()).map(<[u8]>::to_vec).collect())
}

/// How many ranks of `comm` (this one included) run on this rank's GPU on this host, by
/// the ids [`gather_gpus`] gathered (told apart by PCI bus id, not by ordinal: processes
/// that each see only their own GPU, as under `srun --gpus-per-task=1`, all call it GPU
/// 0), and how many on that GPU in this very process — whatever host each claims
/// (NCCL_HOSTID): ranks posing as separate hosts still share the GPU's queues.
fn ranks_on_this_gpu(core: &Core, gpus: &[Vec<u8>]) -> (usize, usize) {
    let Some(mine) = gpus.get(core.rank) else { return (1, 1) };
    let on_gpu = gpus.iter().zip(&core.same_host).filter(|(r, &host)| host && r[..GPU_ID] == mine[..GPU_ID]).count();
    let in_process = gpus.iter().filter(|r| *r == mine).count();
    (on_gpu.max(1), in_process.max(1))
}

/// Whether every rank's GPU stores a warp's 128-byte line whole into every other rank's,
/// as LL128 lines need (collective: every rank on one host calls it at init): each rank
/// checks its GPU, Volta or newer, against every rank's by PCI bus id (as [`gather_gpus`]
/// gathered them; the same GPU, or NVLink: [`Device::stores_lines_whole_to`]), and all
/// must say yes, so that every rank routes alike. NCCL likewise runs LL128 only over NVLink.
fn lines_arrive_whole(core: &Core, device: &Device, major: i32, gpus: &[Vec<u8>]) -> Result<bool> {
    let mut whole = major >= 7;
    for gpu in gpus {
        let id = String::from_utf8_lossy(&gpu[..GPU_ID]);
        whole = whole && device.stores_lines_whole_to(id.trim_end_matches('\0'));
    }
    let votes = core.boot.allgather(&[whole as u8])?;
    let all_whole = votes.iter().all(|&v| v == 1);
    if !all_whole && core.rank == 0 {
        tracing::info!(target: crate::log_target::INIT, "one-hop calls stay on LL lines: not every pair of the communicator's GPUs is NVLink-connected (or sm70+), which LL128 lines need");
    }
    Ok(all_whole)
}

/// The channel bounds every rank plans with (collective: every rank calls it at init):
/// the most every rank allows and the least any rank asks, held to that most. A rank's
/// limit depends on its GPU's multiprocessors and on how many ranks share that GPU, which
/// need not be the same for all (5 ranks on 2 GPUs: 3 on one, 2 on the other), and its
/// least on its NCCL_MIN_NCHANNELS or config's minCTAs; yet every schedule's channel
/// count derives from both, so all ranks must plan with one pair: with two, a large
/// all_reduce is split over 44 channels on one rank and 64 on its peer. Likewise the
/// channels of a send/recv along the ring (OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS, `neighbours`):
/// the fewest any rank asks, held to that most, since both ends must split a transfer alike.
fn agree_on_channels(core: &Core, least: usize, most: usize, neighbours: usize) -> Result<(usize, usize, usize)> {
    let mine: Vec<u8> = [least, most, neighbours].iter().flat_map(|&v| (v as u32).to_le_bytes()).collect();
    let all = core.boot.allgather(&mine)?;
    // Each rank sent 12 bytes: its least, its most, then its neighbours' channels (from_le_bytes
    // of 4 bytes cannot fail).
    let word = |r: &[u8], i: usize| u32::from_le_bytes(r[4 * i..4 * i + 4].try_into().expect("4 bytes")) as usize;
    let most = all.chunks_exact(12).map(|r| word(r, 1)).min().unwrap_or(most);
    let least = all.chunks_exact(12).map(|r| word(r, 0)).max().unwrap_or(least);
    let neighbours = all.chunks_exact(12).map(|r| word(r, 2)).min().unwrap_or(neighbours);
    Ok((least.clamp(1, most.max(1)), most, neighbours.min(most)))
}

/// Ranks sharing a GPU in one process wait for each other's kernels, so the GPU must run
/// their streams side by side; CUDA multiplexes a context's streams onto
/// CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default), and a rank's stream queued
/// behind another's waiting kernel in the same queue cannot start: both wait until the
/// collective timeout. Said once per process, when the limit is below its maximum (32).
fn warn_streams_may_share_queues(ordinal: i32, ranks: usize) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let queues = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").ok().and_then(|v| v.parse::<u32>().ok()).unwrap_or(8);
    if queues >= 32 {
        return;
    }
    ONCE.call_once(|| {
        tracing::warn!(
            target: crate::log_target::INIT,
            "{ranks} ranks share GPU {ordinal} in this process: their kernels wait for each other, which needs the GPU to run their streams side by side, \
             but CUDA puts a context's streams on CUDA_DEVICE_MAX_CONNECTIONS={queues} hardware queues and two ranks' streams in one queue wait for each other \
             until the collective timeout; set CUDA_DEVICE_MAX_CONNECTIONS=32 before CUDA starts, or give each rank a GPU of its own (NCCL refuses ranks sharing a GPU)"
        );
    });
}

/// Where things lie in a one-hop inbox (bytes from its start; rows of 16-byte lines): two
/// halves × `nranks` senders × a row of LL lines holding a rank's largest one-hop message;
/// where some call goes over LL128, as many rows of LL128 lines holding that message and a
/// two-shot all_reduce's block, and where all_reduce goes in two shots as many again for
/// the second shot; then an acknowledgement (u64) per rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct DirectLayout {
    /// Lines of an LL row: whole 128-byte lines (8 each), so that the LL128 rows start on one.
    pub(super) cap_lines: usize,
    pub(super) ll128_offset: usize,
    /// Lines of an LL128 row: the largest one-hop message or two-shot block (0: no LL128
    /// rows).
    pub(super) ll128_lines: usize,
    /// Where the second shot's rows start (0: none, no call goes in two shots).
    pub(super) second_offset: usize,
    pub(super) ack_offset: usize,
}

impl DirectLayout {
    /// The inbox of `nranks` ranks whose one-hop calls receive at most `limit`, whose
    /// all_reduce goes in two shots up to `two_shot` bytes (0: never), over LL128 lines
    /// from `ll128_bytes` received (usize::MAX: never).
    fn new(limit: usize, nranks: usize, two_shot: usize, ll128_bytes: usize) -> DirectLayout {
        let n = nranks.max(2);
        let cap_lines = (limit / (n - 1)).div_ceil(LL_LINE_DATA).max(1).next_multiple_of(8);
        let received = limit.max(two_shot / n * (n - 1));
        let ll128_row = (limit / (n - 1)).max(two_shot / n);
        let ll128_lines = if ll128_bytes <= received { ll128::message_bytes(ll128_row).max(ll128::LINE_BYTES) / LL_LINE_BYTES } else { 0 };
        let ll128_offset = 2 * n * cap_lines * LL_LINE_BYTES;
        let ll128_rows = 2 * n * ll128_lines * LL_LINE_BYTES;
        let second = ll128_lines > 0 && two_shot > 0;
        DirectLayout {
            cap_lines,
            ll128_offset,
            ll128_lines,
            second_offset: if second { ll128_offset + ll128_rows } else { 0 },
            ack_offset: ll128_offset + ll128_rows * (1 + second as usize),
        }
    }

    /// Bytes of the inbox.
    fn bytes(&self, nranks: usize) -> usize {
        self.ack_offset + nranks * 8
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Communicator;
    use crate::bootstrap::Config;

    /// Counting the ranks that share a GPU needs no GPU: ranks 0 and 2 of three threads
    /// name GPU 0, rank 1 GPU 1; ranks 0 and 1 claim host "a", rank 2 host "b". On GPU 0
    /// of host "a" only rank 0 runs, but in this process ranks 0 and 2 share GPU 0 (the
    /// staged test's layout that hung on 2×H200).
    #[test]
    fn ranks_sharing_a_gpu_are_counted_per_host_and_per_process() {
        let comms = Communicator::init_posed_hosts(&["a", "a", "b"]);
        let counts: Vec<(usize, usize)> = std::thread::scope(|s| {
            let handles: Vec<_> = comms.iter().zip(["0000:00:06.0", "0000:00:07.0", "0000:00:06.0"]).map(|(c, gpu)| s.spawn(move || ranks_on_this_gpu(c.core(), &gather_gpus(c.core(), gpu).unwrap()))).collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(counts, [(1, 2), (1, 1), (1, 2)]);
    }

    /// Ranks whose GPUs allow different channel counts plan with the smallest, and with
    /// the largest least any rank asks (NCCL_MIN_NCHANNELS, minCTAs), never past that
    /// smallest most.
    #[test]
    fn ranks_agree_on_the_fewest_channels() {
        let mut config = Config::defaults();
        config.set("NCCL_SOCKET_IFNAME", "lo").unwrap();
        let comms = Communicator::init_all(3, &config).unwrap();
        let agree = |bounds: [(usize, usize); 3]| -> Vec<(usize, usize, usize)> {
            std::thread::scope(|s| {
                let handles: Vec<_> = comms.iter().zip(bounds).map(|(c, (least, most))| s.spawn(move || agree_on_channels(c.core(), least, most, most / 2).unwrap())).collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            })
        };
        assert_eq!(agree([(1, 64), (1, 44), (1, 64)]), [(1, 44, 22); 3]);
        assert_eq!(agree([(1, 128), (8, 128), (2, 128)]), [(8, 128, 64); 3]);
        assert_eq!(agree([(1, 16), (32, 128), (1, 128)]), [(16, 16, 8); 3], "the least held to the agreed most");
    }

    /// The routes and the inbox agree: every call the rules send in one hop or in two shots
    /// (all collectives, float counts from 1 to past 4 MiB, 2 to 8 ranks, at the defaults and
    /// with two shots on every rank count) fits the rows of its protocol, and a two-shot
    /// call finds the second shot's rows.
    #[test]
    fn every_one_hop_call_fits_the_rows_init_makes() {
        use super::super::route::{KernelRoutes, Route};
        use crate::algo::Collective;
        use crate::DataType;
        let mut seen = [0usize; 3];
        for settings in [&[][..], &[("OXCCL_GPU_TWO_SHOT_BYTES", "4M")][..], &[("OXCCL_GPU_DIRECT_LL128_BYTES", "0"), ("OXCCL_GPU_DIRECT_BYTES", "3M")][..]] {
            let mut config = Config::defaults();
            for (name, value) in settings {
                config.set(name, value).unwrap();
            }
            for n in [2, 3, 4, 5, 8] {
                let l = DirectLayout::new(config.gpu_direct_limit(n), n, config.gpu_two_shot_limit(n), config.gpu_direct_ll128_bytes);
                let routes = KernelRoutes::new(&config, n, 1, false, None).unwrap();
                let mut count = 1;
                while count <= (5 << 20) / 4 {
                    for count in [count, count + 1, count / n * n] {
                        for collective in Collective::ALL {
                            let bytes = count * 4;
                            let at = format!("{settings:?}, {n} ranks, {collective:?} of {bytes} B");
                            match routes.route(collective, count, DataType::Float32, 0).unwrap() {
                                Route::Direct { ll128: false } => {
                                    seen[0] += 1;
                                    assert!(bytes.div_ceil(LL_LINE_DATA) * LL_LINE_BYTES <= l.cap_lines * LL_LINE_BYTES, "{at}");
                                }
                                Route::Direct { ll128: true } => {
                                    seen[1] += 1;
                                    assert!(ll128::message_bytes(bytes) <= l.ll128_lines * LL_LINE_BYTES, "{at}");
                                }
                                Route::TwoShot => {
                                    seen[2] += 1;
                                    assert!(ll128::message_bytes(bytes / n) <= l.ll128_lines * LL_LINE_BYTES && l.second_offset > 0, "{at}");
                                }
                                _ => {}
                            }
                        }
                    }
                    count = count * 3 / 2 + 1;
                }
            }
        }
        assert!(seen.iter().all(|&calls| calls > 0), "one hop over LL, over LL128, two shots: {seen:?} calls");
    }

    /// Every message a one-hop row is meant for fits it: the largest one-hop message as LL
    /// lines and, where LL128 rows are made, as LL128 lines, as is the largest two-shot
    /// block; the rows start on 128-byte lines, one region after the other, the
    /// acknowledgements after them all; LL128 rows are made exactly when some call can
    /// receive OXCCL_GPU_DIRECT_LL128_BYTES, and the second shot's exactly where all_reduce
    /// goes in two shots over them.
    #[test]
    fn a_one_hop_inbox_holds_every_message_it_is_meant_for() {
        for limit in [1, 7, 64, 1000, 4096, 1 << 20, 2 << 20, (2 << 20) + 5] {
            for n in 2..=9 {
                for two_shot in [0, 1 << 20, 4 << 20] {
                    for ll128_bytes in [0, 512 << 10, usize::MAX] {
                        let at = format!("limit {limit}, {n} ranks, two shots to {two_shot}, LL128 from {ll128_bytes}");
                        let l = DirectLayout::new(limit, n, two_shot, ll128_bytes);
                        let (row, ll128_row) = (l.cap_lines * LL_LINE_BYTES, l.ll128_lines * LL_LINE_BYTES);
                        let largest = limit / (n - 1);
                        assert!(largest.div_ceil(LL_LINE_DATA) * LL_LINE_BYTES <= row, "{at}: LL");
                        let received = limit.max(two_shot / n * (n - 1));
                        assert_eq!(l.ll128_lines > 0, ll128_bytes <= received, "{at}: LL128 rows");
                        if l.ll128_lines > 0 {
                            assert!(ll128::message_bytes(largest) <= ll128_row && ll128::message_bytes(two_shot / n) <= ll128_row, "{at}: LL128");
                        }
                        assert_eq!(l.second_offset > 0, l.ll128_lines > 0 && two_shot > 0, "{at}: second shot");
                        assert_eq!(l.ll128_offset, 2 * n * row, "{at}");
                        for offset in [l.ll128_offset, l.second_offset, row, ll128_row] {
                            assert_eq!(offset % ll128::LINE_BYTES, 0, "{at}: {l:?}");
                        }
                        let end = if l.second_offset > 0 { l.second_offset + 2 * n * ll128_row } else { l.ll128_offset + 2 * n * ll128_row };
                        assert!(l.second_offset == 0 || l.second_offset == l.ll128_offset + 2 * n * ll128_row, "{at}: {l:?}");
                        assert_eq!(l.ack_offset, end, "{at}: {l:?}");
                        assert_eq!(l.bytes(n), end + 8 * n);
                    }
                }
            }
        }
    }
}
