//! What every backend of a communicator shares: who is in it and who shares this rank's
//! host, its settings, the network links the proxy engine progresses for it, and its fault
//! state (abort flag, failure announcements, creations running from it, suspension); and
//! the figures a backend reports about its memory. Backends hold an `Arc<Core>`; nothing
//! here knows how a collective runs, and nothing here imports the API above it (`comm`)
//! or a backend.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use oxccl_bootstrap::{AbortFlag, Bootstrap, Config};
use oxccl_transports::net::socket::{SocketBuffers, SocketDevice, SocketNet, StreamSettings};
use oxccl_transports::net::{self, Net};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::proxy::NetLinks;
use crate::pxn::{self, Rails};

/// How long a failure the data path saw waits for the control plane to tell of an earlier
/// one before it is announced as the job's (see [`Core::health`]).
const CONTROL_PLANE_GRACE: std::time::Duration = std::time::Duration::from_millis(200);

/// The shared part of a communicator.
pub(crate) struct Core {
    pub boot: Bootstrap,
    pub rank: usize,
    pub nranks: usize,
    pub config: Config,
    /// Raised by [`Core::abort`]: every wait of the communicator watches it.
    pub abort: AbortFlag,
    /// Which ranks share this rank's host (NCCL_HOSTID, else host name and boot id), this
    /// one included.
    pub same_host: Vec<bool>,
    /// Which ranks run on this rank's machine (host name and boot id, whatever NCCL_HOSTID
    /// says), this one included: those sharing its cores.
    pub same_machine: Vec<bool>,
    /// Which ranks run in this rank's process (as threads), this one included: those
    /// sharing its proxy threads.
    pub same_process: Vec<bool>,
    /// The network links of both backends, progressed by the process's proxy threads, over
    /// the Net that NCCL_NET_PLUGIN and NCCL_NET choose.
    pub net: NetLinks,
    /// oxccl's socket Net, the one under `net` unless a plugin was chosen (its counters are
    /// reported by [`Communicator::net_receive_stats`](crate::Communicator::net_receive_stats)).
    pub socket: Arc<SocketNet>,
    /// Which NIC, and whose proxy, carries each network connection (PXN).
    pub rails: Rails,
    /// Set once this rank and the ranks relaying for it, or relayed by it, parted
    /// (`pxn::relay::part`).
    pub relays_parted: AtomicBool,
    /// The relay service of this rank, once started (`pxn::relay::serve_if_needed`), until
    /// it is stopped (`pxn::relay::stop_service`).
    pub relay_service: Mutex<pxn::relay::Service>,
    /// Set by a suspension: calls are refused until the communicator is resumed.
    pub suspended: AtomicBool,
    /// Abort flags of the non-blocking splits, shrinks and grows running from this
    /// communicator: it reports `InProgress` while there are any, and aborts them when
    /// aborted.
    creating: Mutex<Vec<AbortFlag>>,
    /// How the exchange of a non-blocking split that joined nothing (NOCOLOR) failed.
    background_error: Mutex<Option<Error>>,
}

impl Core {
    /// The core over a joined bootstrap, once the ranks know who shares their host: the
    /// Net is chosen (a plugin or the socket Net) and initialized for this communicator.
    pub fn new(boot: Bootstrap, placement: Placement, config: &Config) -> Result<Arc<Core>> {
        let Placement { same_host, same_machine, same_process } = placement;
        let socket = Arc::new(SocketNet::with_devices(socket_devices(&boot, config), config.socket_max_recvs).with_streams(StreamSettings::from_config(config).without_default_helpers()).with_buffers(SocketBuffers::from_config(config)));
        let chosen = net::open(&config.net_plugin, config.net.as_deref(), vec![socket.clone() as Arc<dyn Net>]).map_err(|e| Error::from_transport("choosing the network (NCCL_NET_PLUGIN, NCCL_NET)", e))?;
        let rails = gather_rails(&boot, chosen.as_ref(), &same_host, config)?;
        // Tells communicators apart in the Net's context (NCCL passes its comm hash).
        static COMMUNICATORS: AtomicU64 = AtomicU64::new(0);
        let number = COMMUNICATORS.fetch_add(1, Ordering::Relaxed);
        let comm_id = u64::from(std::process::id()) << 32 | number;
        let mut net = NetLinks::new(chosen, comm_id, proxy_threads(config, &same_machine, &same_process), config.bootstrap_timeout)?;
        if let Some(path) = &config.proxy_trace {
            net = net.with_trace(path, number, boot.rank() as usize)?;
        }
        Ok(Arc::new(Core {
            rank: boot.rank() as usize,
            nranks: boot.nranks() as usize,
            net,
            socket,
            rails,
            relays_parted: AtomicBool::new(false),
            relay_service: Mutex::new(pxn::relay::Service::NotStarted),
            boot,
            config: config.clone(),
            abort: AbortFlag::new(),
            same_host,
            same_machine,
            same_process,
            suspended: AtomicBool::new(false),
            creating: Mutex::new(Vec::new()),
            background_error: Mutex::new(None),
        }))
    }

    /// An error once the communicator is aborted or a peer has failed (the control plane
    /// or a network link saw it).
    pub fn health(&self) -> Result<()> {
        if self.abort.is_raised() {
            return Err(Error::Aborted { reason: String::new() });
        }
        self.boot.check("collective")?;
        if let Err(e) = self.net.check() {
            // The data path saw the peer go before the control plane did. The peer's
            // control connection closes with it, after any failure notice the peer sent
            // (it may have exited on another rank's death): give that a moment to be read,
            // so that the rank that failed first is the one named. Else tell the job, so
            // that every rank names the same failed rank.
            if let Err(first) = self.boot.check_within("collective", CONTROL_PLANE_GRACE) {
                return Err(first.into());
            }
            if let Error::PeerFailed { rank, reason } = &e {
                self.announce_failed(*rank, reason);
            }
            return Err(self.boot.check("collective").err().map(Error::from).unwrap_or(e));
        }
        Ok(())
    }

    /// Tells every rank that `rank` can no longer take part (`reason`): their waits fail
    /// naming it, this rank's too.
    pub fn announce_failed(&self, rank: u32, reason: &str) {
        let named = reason.starts_with(&format!("rank {rank} "));
        self.boot.announce_failure(&if named { reason.to_string() } else { format!("rank {rank}: {reason}") }, &[rank]);
    }

    /// Raises the abort flag of the communicator and of the creations running from it.
    pub fn abort(&self) {
        self.abort.raise();
        self.boot.abort();
        for creation in self.creating.lock().iter() {
            creation.raise();
        }
    }

    /// The communicator's own error state, without its backend's: aborted, revoked, busy
    /// with a creation, or a failed background exchange.
    pub fn error(&self) -> Option<Error> {
        if self.abort.is_raised() {
            return Some(Error::Aborted { reason: String::new() });
        }
        if let Some(reason) = self.boot.revoked() {
            return Some(Error::Aborted { reason });
        }
        let creating = self.creating.lock().len();
        if creating > 0 {
            return Some(Error::InProgress { what: format!("{creating} non-blocking split, shrink or grow of this communicator still running") });
        }
        self.background_error.lock().clone()
    }

    /// `InvalidUsage` naming the suspension, while suspended.
    pub fn refuse_if_suspended(&self) -> Result<()> {
        if self.suspended.load(Ordering::Acquire) {
            return Err(Error::InvalidUsage { what: format!("{} is suspended (ncclCommSuspend): resume it (ncclCommResume) before using it", self.name()) });
        }
        Ok(())
    }

    /// A creation from this communicator starts: it reports `InProgress` until
    /// [`Core::end_creation`], and aborting it raises `abort`.
    pub fn start_creation(&self, abort: &AbortFlag) {
        self.creating.lock().push(abort.clone());
    }

    /// The creation of [`Core::start_creation`] is done.
    pub fn end_creation(&self, abort: &AbortFlag) {
        self.creating.lock().retain(|a| !a.ptr_eq(abort));
    }

    /// How a background exchange of this communicator failed (reported by
    /// [`Core::error`] from now on).
    pub fn record_background_error(&self, error: Error) {
        *self.background_error.lock() = Some(error);
    }

    /// "communicator rank r of n", for messages.
    pub fn name(&self) -> String {
        format!("communicator rank {} of {}", self.rank, self.nranks)
    }
}

/// The internal socket Net's devices: every interface NCCL_SOCKET_IFNAME allows, or NCCL's
/// default tiers, as NCCL's socket transport takes them (named after their interfaces: the
/// rail names PXN pairs NICs by); where none is usable, the bootstrap's address alone,
/// named after its interface, or after the address where no interface has it.
fn socket_devices(boot: &Bootstrap, config: &Config) -> Vec<SocketDevice> {
    let interfaces = oxccl_bootstrap::iface::list().unwrap_or_default();
    oxccl_transports::net::socket::choose_devices(&interfaces, config).unwrap_or_else(|reason| {
        tracing::debug!(target: crate::log_target::NET, "socket net: {reason}; the bootstrap's address serves");
        let ip = boot.listen_addr().ip();
        vec![match interfaces.iter().find(|i| i.addr == ip) {
            Some(interface) => SocketDevice::interface(&interface.name, ip),
            None => SocketDevice::address(ip),
        }]
    })
}

/// The communicator's NIC map: every rank's host and device names, gathered when it spans
/// hosts (every rank then has a peer elsewhere, so all of them take part, or none); on one
/// host every rank has this rank's devices (network links there: NCCL_SHM_DISABLE).
fn gather_rails(boot: &Bootstrap, net: &dyn Net, same_host: &[bool], config: &Config) -> Result<Rails> {
    let devices = net.devices().map_err(|e| Error::from_transport("counting the net's devices", e))?;
    let names = (0..devices).map(|d| net.properties(d).map(|p| p.name)).collect::<std::result::Result<Vec<_>, _>>().map_err(|e| Error::from_transport("reading the net's devices", e))?;
    if same_host.iter().all(|&same| same) {
        let n = same_host.len();
        return Ok(Rails::new(vec![names; n], &vec![String::new(); n], !config.shm_disable, config.pxn_disable, config.p2p_pxn_level));
    }
    let names = mark_far_devices(config, names)?;
    let records = boot.allgather(&pxn::encode_record(&host_id(config), &names)?)?;
    let (hosts, names): (Vec<String>, Vec<Vec<String>>) = records.chunks(pxn::RECORD_BYTES).map(pxn::decode_record).unzip();
    Ok(Rails::new(names, &hosts, !config.shm_disable, config.pxn_disable, config.p2p_pxn_level))
}

/// `names` (this rank's devices), those not near the CPUs this process runs on marked far
/// (`!name`), where NCCL_TOPO_FILE says which NIC is near which CPU and this rank sees more
/// than one: PXN then sends from a near NIC, relaying through the host rank next to the
/// receiver's rail where this rank has none on it. Unchanged where the file says nothing
/// of the process's CPUs or of these devices.
fn mark_far_devices(config: &Config, names: Vec<String>) -> Result<Vec<String>> {
    let Some(file) = config.topo_file.as_deref().filter(|_| names.len() > 1) else { return Ok(names) };
    let bad = |e: oxccl_topology::Error| Error::invalid(format!("NCCL_TOPO_FILE {file}: {e}"));
    let xml = oxccl_topology::XmlNode::load(std::path::Path::new(file)).map_err(bad)?;
    let topology = oxccl_topology::Topology::new(oxccl_topology::System::from_xml(&xml).map_err(bad)?, oxccl_topology::PathSettings::default()).map_err(bad)?;
    let cpus = oxccl_topology::layout::allowed_cpus();
    let Some(near) = oxccl_topology::layout::nets_near_cpus(&topology, &cpus) else { return Ok(names) };
    if !names.iter().any(|n| near.contains(n)) {
        return Ok(names);
    }
    tracing::info!(target: crate::log_target::NET, "NCCL_TOPO_FILE: the NICs near CPUs {cpus:?} are {near:?}");
    Ok(names.into_iter().map(|n| if near.contains(&n) { n } else { format!("{}{n}", pxn::FAR) }).collect())
}

/// OXCCL_PROXY_THREADS, or the default for this process: its share of the machine's cores
/// online (not this process's affinity: launchers bind ranks), by its ranks among the
/// communicator's ranks on the machine (`same_machine`: ranks posing as other hosts with
/// NCCL_HOSTID run on these cores too; `same_process`: ranks run as threads of one
/// process share its proxy threads).
fn proxy_threads(config: &Config, same_machine: &[bool], same_process: &[bool]) -> usize {
    if config.proxy_threads != 0 {
        return config.proxy_threads;
    }
    // SAFETY: sysconf has no preconditions.
    let cores = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
    let count = |same: &[bool]| same.iter().filter(|&&same| same).count();
    crate::proxy::default_threads(cores, count(same_machine), count(same_process))
}

/// A communicator's memory, in bytes, as `ncclCommMemStats` reports it (on the host
/// backend the buffers are host memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryStats {
    /// Held now and released by `Communicator::suspend` with `release_memory` (0 while
    /// suspended so).
    pub releasable: u64,
    /// Held for the communicator's life: the FIFO slots of its connections (this rank's
    /// receiving ends, and the sending ends it keeps itself, over the network).
    pub persistent: u64,
    /// Whether the communicator is suspended.
    pub suspended: bool,
}

impl MemoryStats {
    /// Everything counted.
    pub fn total(&self) -> u64 {
        self.releasable + self.persistent
    }
}

/// This host's identity: NCCL_HOSTID, else host name and boot id.
pub fn host_id(config: &Config) -> String {
    config.host_id.clone().unwrap_or_else(machine_id)
}

/// This machine's identity: its host name and boot id.
pub fn machine_id() -> String {
    let boot_id = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    format!("{}:{}", oxccl_bootstrap::host_name(), boot_id.trim())
}

/// Who shares a rank's host, who its machine, and who its process, by rank.
pub(crate) struct Placement {
    pub same_host: Vec<bool>,
    pub same_machine: Vec<bool>,
    pub same_process: Vec<bool>,
}

/// A tag of this process, told apart from every other on any host (a pid may repeat in
/// two containers of one machine): its pid hashed with keys drawn once per process.
pub(crate) fn process_tag() -> u64 {
    static PROCESS: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.finish()
    });
    *PROCESS
}
