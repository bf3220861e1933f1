//! Every setting oxccl reads, in one table, parsed once into a typed [`Config`].
//!
//! Names follow NCCL's where NCCL has the knob (`NCCL_DEBUG`, `NCCL_SOCKET_IFNAME`, ...);
//! oxccl's own knobs start with `OXCCL_`. A malformed value is an error naming the
//! variable. An unknown `OXCCL_*` variable is an error (a typo must not be silently
//! ignored); unknown `NCCL_*` variables are logged and ignored, since NCCL has hundreds of
//! knobs that scripts set for other libraries. Tests build a `Config` from a map instead of
//! mutating the process environment.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::iface::{AddressFamily, InterfaceFilter};
use crate::log::{DebugLevel, Subsystems};

/// The environment as seen once: variable name → value. Tests build one by hand.
pub type Env = BTreeMap<String, String>;

/// Snapshot of the process environment (non-UTF-8 variables are skipped: none of ours can
/// be non-UTF-8).
pub fn process_env() -> Env {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// How ranks find each other, chosen by `OXCCL_BOOTSTRAP`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootstrapMethod {
    /// `NCCL_COMM_ID`, then a launcher that names a root (torchrun, Slurm), then MPI
    /// (mpirun), then `OXCCL_UNIQUE_ID` / `OXCCL_UNIQUE_ID_FILE`.
    Auto,
    /// Only the environment (NCCL_COMM_ID, launcher variables, `OXCCL_UNIQUE_ID[_FILE]`).
    Env,
    /// Only MPI: rank 0 creates the id and broadcasts it over MPI_COMM_WORLD.
    Mpi,
}

/// oxccl's settings, typed. Build with [`Config::from_env`] or [`Config::from_vars`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Config {
    pub debug: DebugLevel,
    pub debug_subsys: Subsystems,
    pub debug_file: Option<String>,
    pub socket_ifname: Option<InterfaceFilter>,
    pub socket_family: Option<AddressFamily>,
    pub comm_id: Option<String>,
    pub bootstrap: BootstrapMethod,
    pub bootstrap_timeout: Duration,
    pub handshake_timeout: Duration,
    pub bootstrap_port: Option<u16>,
    pub unique_id: Option<String>,
    pub unique_id_file: Option<String>,
    pub max_frame_bytes: usize,
    pub host_id: Option<String>,
    pub buffsize: usize,
    pub algo: Option<String>,
    pub proto: Option<String>,
    pub shm_disable: bool,
    pub coll_timeout: Duration,
    pub socket_max_recvs: usize,
    /// NCCL_SOCKET_NTHREADS: helper threads per socket comm that move its large messages
    /// over its data sockets; `None` (unset): the socket net's automatic choice. Values
    /// above NCCL's 16 are kept here; the socket net lowers them to 16 with a warning, as
    /// NCCL does.
    pub socket_threads: Option<usize>,
    /// NCCL_NSOCKS_PERTHREAD: data sockets per helper thread; `None` (unset): automatic.
    /// The socket net keeps threads x sockets at most 64, as NCCL does.
    pub socks_per_thread: Option<usize>,
    /// NCCL_SOCKET_SNDBUF: SO_SNDBUF asked for each socket-net connection, in bytes;
    /// `None` (unset, 0 or negative, as in NCCL): the kernel's own sizing.
    pub socket_send_buffer: Option<usize>,
    /// NCCL_SOCKET_RCVBUF: SO_RCVBUF asked for each socket-net connection, as
    /// [`Config::socket_send_buffer`].
    pub socket_recv_buffer: Option<usize>,
    /// NCCL_PXN_DISABLE: never send through a rank of this host on the destination's rail.
    pub pxn_disable: bool,
    /// NCCL_P2P_PXN_LEVEL: 0 keeps point-to-point sends off PXN; 1 and 2 allow it.
    pub p2p_pxn_level: u8,
    /// OXCCL_PROXY_THREADS: the process's proxy threads, which progress its network
    /// connections (0: one per two of the host's cores per rank on it, 1 to 4).
    pub proxy_threads: usize,
    /// OXCCL_PROXY_TRACE: where each communicator writes its proxy timeline (a path the
    /// file names start with), or `None`.
    pub proxy_trace: Option<String>,
    /// OXCCL_KERNEL_TRACE: where each GPU communicator writes its executor kernel's
    /// timeline (a path prefix), if anywhere.
    pub kernel_trace: Option<String>,
    /// NCCL_COMM_BLOCKING: calls wait for their own completion (init included). `false`
    /// asks for non-blocking communicators (ncclInProgress semantics, the fault-handling
    /// part of the runtime).
    pub blocking: bool,
    /// OXCCL_HEARTBEAT_TIMEOUT_MS: silence after which a ring predecessor counts as failed
    /// (a hung or stopped process); `None` (0) disables heartbeats.
    pub heartbeat_timeout: Option<Duration>,
    /// OXCCL_BACKEND: where collectives run (GPU buffers on the GPU backend, host memory
    /// on the host backend).
    pub backend: Backend,
    /// OXCCL_GPU_SLOT_BYTES: bytes per slot of the GPU backend's FIFOs.
    pub gpu_slot_bytes: usize,
    /// OXCCL_GPU_DIRECT_BYTES: the most bytes a rank receives (from all peers together) in
    /// a collective the GPU backend sends in one hop over the LL protocol (0: never);
    /// `None`: by the communicator's size ([`Config::gpu_direct_limit`]).
    pub gpu_direct_bytes: Option<usize>,
    /// OXCCL_GPU_DIRECT_LL128_BYTES: a one-hop call in which a rank receives at least this
    /// many bytes (all peers together) writes 128-byte lines of 120 data bytes (LL128)
    /// instead of 16-byte lines of 8 (LL); 0: every one-hop call.
    pub gpu_direct_ll128_bytes: usize,
    /// OXCCL_GPU_TWO_SHOT_BYTES: on one host, the largest all_reduce (bytes a rank
    /// contributes) past the one-hop kernel's limit that goes in two one-hop shots in one
    /// launch: reduce_scatter, each folded line sent on at once to every other rank (0:
    /// never); `None`: by the communicator's size ([`Config::gpu_two_shot_limit`]).
    pub gpu_two_shot_bytes: Option<usize>,
    /// OXCCL_GPU_LL_BYTES: on one host, the largest message (count × datatype size) of a
    /// collective the GPU executor runs (ring, direct exchange, recursive doubling) that
    /// goes over the LL protocol between GPUs instead of Simple (0: never); `None`: by
    /// collective and communicator size ([`Config::gpu_ll_limit`]).
    pub gpu_ll_bytes: Option<usize>,
    /// NCCL_P2P_LL_THRESHOLD: the largest GPU send/recv message that goes in one hop over
    /// the LL protocol (straight into the receiver's inbox) instead of the Simple FIFOs
    /// (0: never).
    pub p2p_ll_bytes: usize,
    /// NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS: the GPU backend's channels (a thread block
    /// each) per collective; NCCL_MAX_NCHANNELS unset lets the GPU backend choose
    /// ([`Config::max_channels`] elsewhere).
    pub min_channels: usize,
    pub max_channels: Option<usize>,
    /// OXCCL_GPU_ACROSS_HOSTS: how a GPU communicator whose ranks span hosts runs its calls.
    pub gpu_across_hosts: AcrossHosts,
    /// OXCCL_GPU_NET_CHANNELS: the most channels a GPU communicator whose ranks span hosts
    /// uses (each channel has its own network connections).
    pub gpu_net_channels: usize,
    /// OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS: on one host, the most channels of a GPU send to
    /// the ring's next rank and of a receive from its previous one (0: the direct
    /// exchange's share, as every other transfer); unset lets the GPU backend choose.
    pub gpu_p2p_neighbour_channels: Option<usize>,
    /// NCCL_TOPO_FILE: NCCL topology XML used instead of discovering the host.
    pub topo_file: Option<String>,
    /// NCCL_TOPO_DUMP_FILE: where one rank writes the host's topology XML at init.
    pub topo_dump_file: Option<String>,
    /// NCCL_TOPO_DUMP_FILE_RANK: the rank that writes it.
    pub topo_dump_rank: usize,
    /// NCCL_TUNER_PLUGIN: the tuner plugin library (`none`: none; unset: `libnccl-tuner.so` if present).
    pub tuner_plugin: Option<String>,
    /// NCCL_NET_PLUGIN: the net plugins to try, in order.
    pub net_plugin: NetPlugins,
    /// NCCL_NET: the name of the net to use (a plugin's, or `Socket`).
    pub net: Option<String>,
    /// OXCCL_NETPLUGIN_MAX_RECVS: receives per `irecv` that libnccl-net-oxccl.so offers.
    pub netplugin_max_recvs: usize,
}

/// OXCCL_GPU_ACROSS_HOSTS's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcrossHosts {
    /// Kernels over FIFOs in pinned host memory that the network proxy moves (the NET
    /// transport).
    Kernels,
    /// Each call's buffers copied through host memory and the call run by the host path.
    Staged,
}

/// NCCL_NET_PLUGIN's values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NetPlugins {
    /// Unset: `libnccl-net.so` if the dynamic loader finds one, else the internal net.
    #[default]
    Default,
    /// `none`: no plugin, the internal net.
    None,
    /// Names (`x` for `libnccl-net-x.so`), file names or paths, tried in order.
    Named(Vec<String>),
}

impl std::str::FromStr for NetPlugins {
    type Err = String;

    /// NCCL's syntax: `none`, or a comma list of names or paths; empty means unset.
    fn from_str(text: &str) -> std::result::Result<NetPlugins, String> {
        let text = text.trim();
        if text.is_empty() {
            return Ok(NetPlugins::Default);
        }
        if text.eq_ignore_ascii_case("none") {
            return Ok(NetPlugins::None);
        }
        let names: Vec<String> = text.split(',').map(str::trim).filter(|name| !name.is_empty()).map(String::from).collect();
        if names.is_empty() {
            return Err("expected none, or a comma list of plugin names or paths".into());
        }
        Ok(NetPlugins::Named(names))
    }
}

/// OXCCL_BACKEND's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The GPU backend when a GPU is visible, else the host backend.
    Auto,
    /// Host memory (CPU copies and reductions), GPUs or not.
    Host,
    /// GPU buffers; an error without a GPU.
    Gpu,
}

/// One knob: its variable, default, parser and a one-line description.
pub struct Knob {
    pub name: &'static str,
    /// The default as the variable would spell it; `""` means unset.
    pub default: &'static str,
    pub doc: &'static str,
    set: fn(&mut Config, &str) -> std::result::Result<(), String>,
}

/// The table of every knob. docs/CONFIG.md is checked against it by a test.
pub static KNOBS: &[Knob] = &[
    Knob {
        name: "NCCL_DEBUG",
        default: "WARN",
        doc: "log level: NONE, VERSION, WARN, INFO, TRACE",
        set: |c, v| Ok(c.debug = v.parse()?),
    },
    Knob {
        name: "NCCL_DEBUG_SUBSYS",
        default: "INIT,BOOTSTRAP,ENV",
        doc: "subsystems logged at INFO/TRACE: comma list of INIT, COLL, P2P, SHM, NET, GRAPH, TUNING, ENV, ALLOC, CALL, PROXY, BOOTSTRAP, ALL; a leading ^ excludes",
        set: |c, v| Ok(c.debug_subsys = v.parse()?),
    },
    Knob {
        name: "NCCL_DEBUG_FILE",
        default: "",
        doc: "write logs to this file instead of stderr; %h is replaced by the host name, %p by the pid",
        set: |c, v| Ok(c.debug_file = non_empty(v)),
    },
    Knob {
        name: "NCCL_SOCKET_IFNAME",
        default: "",
        doc: "interfaces for bootstrap and socket traffic: comma list of name prefixes; ^ excludes, = matches exact names",
        set: |c, v| Ok(c.socket_ifname = if v.is_empty() { None } else { Some(v.parse()?) }),
    },
    Knob {
        name: "NCCL_SOCKET_FAMILY",
        default: "",
        doc: "restrict interfaces to AF_INET or AF_INET6",
        set: |c, v| Ok(c.socket_family = if v.is_empty() { None } else { Some(v.parse()?) }),
    },
    Knob {
        name: "NCCL_COMM_ID",
        default: "",
        doc: "host:port of a fixed bootstrap root (rank 0 listens there); skips passing a unique id",
        set: |c, v| Ok(c.comm_id = non_empty(v)),
    },
    Knob {
        name: "NCCL_HOSTID",
        default: "",
        doc: "override this process's host identity (ranks with different ids never use shared memory with each other)",
        set: |c, v| Ok(c.host_id = non_empty(v)),
    },
    Knob {
        name: "NCCL_BUFFSIZE",
        default: "1048576",
        doc: "bytes of buffering per connection, split into 8 slots (NCCL's GPU default is 4 MiB; host FIFOs default to 1 MiB so that a slot, its source and its destination stay in a core's L2)",
        set: |c, v| Ok(c.buffsize = parse_bytes(v, 4096)?),
    },
    Knob {
        name: "NCCL_ALGO",
        default: "",
        doc: "force or exclude algorithms (ring, tree, direct; NCCL's collnetdirect, collnetchain, nvls, nvlstree, pat are known and never available), NCCL syntax; checked when a collective is planned",
        set: |c, v| Ok(c.algo = non_empty(v)),
    },
    Knob {
        name: "NCCL_PROTO",
        default: "",
        doc: "force or exclude protocols (simple, ll, ll128), NCCL syntax; checked when a collective is planned",
        set: |c, v| Ok(c.proto = non_empty(v)),
    },
    Knob {
        name: "NCCL_TUNER_PLUGIN",
        default: "",
        doc: "tuner plugin library: a path, or a name tried as libnccl-tuner-<name>.so; none disables; unset tries libnccl-tuner.so; it sees and edits every collective's cost table (docs/TOPOLOGY.md)",
        set: |c, v| Ok(c.tuner_plugin = non_empty(v)),
    },
    Knob {
        name: "NCCL_TOPO_FILE",
        default: "",
        doc: "NCCL topology XML to use instead of discovering this host (NCCL's own dumps load)",
        set: |c, v| Ok(c.topo_file = non_empty(v)),
    },
    Knob {
        name: "NCCL_TOPO_DUMP_FILE",
        default: "",
        doc: "at communicator init, one rank writes the host's topology (discovered, or NCCL_TOPO_FILE's) to this file as NCCL's XML",
        set: |c, v| Ok(c.topo_dump_file = non_empty(v)),
    },
    Knob {
        name: "NCCL_TOPO_DUMP_FILE_RANK",
        default: "0",
        doc: "the rank that writes NCCL_TOPO_DUMP_FILE",
        set: |c, v| {
            c.topo_dump_rank = v.parse().map_err(|_| "expected a rank number".to_string())?;
            Ok(())
        },
    },
    Knob {
        name: "NCCL_SHM_DISABLE",
        default: "0",
        doc: "1: never use shared memory between ranks of one host (use the network transport)",
        set: |c, v| Ok(c.shm_disable = parse_bool(v)?),
    },
    Knob {
        name: "NCCL_COMM_BLOCKING",
        default: "1",
        doc: "1: communicator calls block until done; 0: non-blocking communicators (calls return in progress, poll the async error)",
        set: |c, v| Ok(c.blocking = parse_bool(v)?),
    },
    Knob {
        name: "OXCCL_BACKEND",
        default: "auto",
        doc: "where the C API's communicators run collectives: gpu (device buffers, CUDA streams), host (host memory, NULL stream), or auto (gpu when a GPU is visible)",
        set: |c, v| {
            c.backend = match v.trim().to_ascii_lowercase().as_str() {
                "auto" => Backend::Auto,
                "host" | "cpu" => Backend::Host,
                "gpu" | "cuda" => Backend::Gpu,
                _ => return Err("expected auto, host or gpu".into()),
            };
            Ok(())
        },
    },
    Knob {
        name: "OXCCL_GPU_SLOT_BYTES",
        default: "262144",
        doc: "bytes per slot of the GPU backend's FIFOs (8 slots per connection; with 64 channels 256 KiB measured best on 2xH200, docs/PERFORMANCE.md)",
        set: |c, v| Ok(c.gpu_slot_bytes = parse_bytes(v, 4096)?),
    },
    Knob {
        name: "OXCCL_GPU_DIRECT_BYTES",
        default: "",
        doc: "a GPU all_reduce, all_gather, reduce_scatter, reduce or broadcast goes in one hop over the LL protocol instead of the ring when a rank receives at most this many bytes from all its peers together ((nranks - 1) x the per-rank message; 0: never; NCCL_PROTO without LL also turns it off); unset: 1 MiB on up to 3 ranks, 2 MiB on 4 or more (where the ring's 2(n-1) steps cost more: 4xH100, docs/PERFORMANCE.md)",
        set: |c, v| Ok(c.gpu_direct_bytes = if v.is_empty() { None } else { Some(parse_bytes(v, 0)?) }),
    },
    Knob {
        name: "OXCCL_GPU_DIRECT_LL128_BYTES",
        default: "524288",
        doc: "a one-hop GPU call (OXCCL_GPU_DIRECT_BYTES) in which a rank receives at least this many bytes from all its peers together writes them 128-byte lines of 120 data bytes and a flag, each line stored by 8 threads of a warp at once (NCCL's LL128 layout; NVLink delivers such a store whole), instead of 16-byte lines of 8 data bytes (LL): about half the bytes on the links, a little slower for less (4xH100: all_reduce at 512 KiB 14.2-16.6 us against LL's 21.8-23.8, all_gather and reduce_scatter at 1 MiB mostly 8-9 us against 11-14; docs/PERFORMANCE.md); 0: every one-hop call; more than OXCCL_GPU_DIRECT_BYTES: none",
        set: |c, v| Ok(c.gpu_direct_ll128_bytes = parse_bytes(v, 0)?),
    },
    Knob {
        name: "OXCCL_GPU_TWO_SHOT_BYTES",
        default: "",
        doc: "on one host, a GPU all_reduce of at most this many bytes (count x datatype size) that is too large for the one-hop kernel (OXCCL_GPU_DIRECT_BYTES) runs in two one-hop shots in one launch, over LL128 lines: reduce_scatter, each folded line sent on at once to every other rank (each rank receiving (nranks - 1) / nranks of the message twice), instead of the ring, when the count divides by the ranks and a shot carries OXCCL_GPU_DIRECT_LL128_BYTES (0: never; the one-hop inboxes grow to hold a block of this / nranks); unset: 4 MiB on 4 or more ranks, 2 MiB on 2, never on 3 (4xH200: 1 MiB 11.9-12.3 us, 2 MiB 23.1-23.8, 4 MiB 38.7 against the ring's 21.5-24.6, 31.8-32.4, 42.1-43.9, slower than the ring at 8 MiB; 2 ranks at 2 MiB 14.4-17.4 against 18.8-27.4, even at 4 MiB; docs/PERFORMANCE.md)",
        set: |c, v| Ok(c.gpu_two_shot_bytes = if v.is_empty() { None } else { Some(parse_bytes(v, 0)?) }),
    },
    Knob {
        name: "OXCCL_GPU_LL_BYTES",
        default: "",
        doc: "on one host, a collective the GPU executor kernel runs (the ring, the direct exchange, recursive doubling) goes over the LL protocol between GPUs instead of Simple when its message (count x datatype size) is at most this many bytes (0: never; NCCL_PROTO=LL alone: always; NCCL_PROTO without LL: never); unset: all_reduce on 4 or more ranks up to 2 MiB, nothing else (4xH200, docs/PERFORMANCE.md)",
        set: |c, v| Ok(c.gpu_ll_bytes = if v.is_empty() { None } else { Some(parse_bytes(v, 0)?) }),
    },
    Knob {
        name: "OXCCL_GPU_ACROSS_HOSTS",
        default: "kernels",
        doc: "how a GPU communicator whose ranks span hosts runs: kernels (over FIFOs in pinned host memory that the network proxy moves: the NET transport) or staged (every call copied through host memory and run by the host path)",
        set: |c, v| {
            c.gpu_across_hosts = match v.trim().to_ascii_lowercase().as_str() {
                "kernels" => AcrossHosts::Kernels,
                "staged" => AcrossHosts::Staged,
                _ => return Err("expected kernels or staged".into()),
            };
            Ok(())
        },
    },
    Knob {
        name: "OXCCL_GPU_NET_CHANNELS",
        default: "8",
        doc: "most channels a GPU communicator whose ranks span hosts uses (1..=64; each has its own network connections, dealt to the proxy threads in turn)",
        set: |c, v| match v.trim().parse::<usize>() {
            Ok(n @ 1..=64) => Ok(c.gpu_net_channels = n),
            _ => Err("expected 1 to 64".into()),
        },
    },
    Knob {
        name: "OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS",
        default: "",
        doc: "on one host, a GPU send/recv's transfer to the ring's next rank and from its previous rank (a send/recv shift, a pipeline's neighbours) spread over up to this many channels (at most 64 and NCCL_MAX_NCHANNELS; ranks agree on the fewest asked) instead of the direct exchange's share of 64 (21 a peer with 4 ranks); a group of more than 128 send/receive lanes then runs them on 128 blocks, sends and receives on blocks of their own, each block its lanes in one order every rank shares; programs' send/recv groups only (collectives run schedules of their own). Unset: 64 where each rank has a GPU of 128 multiprocessors or more to itself (H100, H200: sendrecv on 4xH200 1.01-1.02x NCCL's busbw at 1 GiB against 0.91-0.93x; a group to every peer, folded, not yet timed on a GPU; docs/PERFORMANCE.md), else 0; 0: off",
        set: |c, v| {
            c.gpu_p2p_neighbour_channels = parse_count(v.trim(), "channels")?;
            Ok(())
        },
    },
    Knob {
        name: "NCCL_P2P_LL_THRESHOLD",
        default: "65536",
        doc: "a GPU send/recv message of at most this many bytes goes in one hop over the LL protocol, straight into the receiver's inbox (4 x this many bytes of inbox per peer; at most 4M; 0: never)",
        set: |c, v| {
            let bytes = parse_bytes(v, 0)?;
            if bytes > 4 << 20 {
                return Err("at most 4M (each peer's inbox holds 4 x this many bytes)".into());
            }
            c.p2p_ll_bytes = bytes;
            Ok(())
        },
    },
    Knob {
        name: "NCCL_MIN_NCHANNELS",
        default: "1",
        doc: "fewest channels (GPU thread blocks) a GPU collective uses",
        set: |c, v| {
            c.min_channels = v.trim().parse().map_err(|_| "expected a number of channels".to_string())?;
            Ok(())
        },
    },
    Knob {
        name: "NCCL_MAX_NCHANNELS",
        default: "",
        doc: "most channels (GPU thread blocks) a GPU collective uses; values past NCCL's 64 are taken up to the GPU's multiprocessors, each channel with FIFOs of its own; unset: 128 on one host where each rank has a GPU of 128 multiprocessors or more to itself (H100, H200: 4xH200 1.00-1.19x the busbw of 64 from 16 MiB to 1 GiB for every collective, one in-place row 0.98x, for about twice the connections' GPU memory; docs/PERFORMANCE.md), else 64, NCCL's most (the host path over the network: 64)",
        set: |c, v| {
            c.max_channels = parse_count(v.trim(), "channels")?;
            Ok(())
        },
    },
    Knob {
        name: "OXCCL_COLL_TIMEOUT_MS",
        default: "600000",
        doc: "how long one collective or point-to-point operation may wait for its peers before failing; also how long a host communicator's finalize waits with none of its queued work completing",
        set: |c, v| Ok(c.coll_timeout = parse_millis(v)?),
    },
    Knob {
        name: "OXCCL_SOCKET_MAX_RECVS",
        default: "1",
        doc: "receives the socket net accepts in one call (1..=8); above 1 the proxy posts receives together",
        set: |c, v| match v.parse::<usize>() {
            Ok(n @ 1..=8) => Ok(c.socket_max_recvs = n),
            _ => Err("expected 1 to 8".into()),
        },
    },
    Knob {
        name: "NCCL_SOCKET_NTHREADS",
        default: "",
        doc: "helper threads per socket-net connection that move its messages of 64 KiB and more over its data sockets, in pieces (0..=16; larger values are lowered to 16 with a warning, as NCCL does; 0: no helpers, the caller's thread moves everything over one socket); unset: 1 on hosts of 4 cores or more, 0 below, or NCCL's cloud defaults on AWS (2) and Google Cloud gVNIC (4); the listening side's value counts",
        set: |c, v| Ok(c.socket_threads = parse_count(v, "helper threads")?),
    },
    Knob {
        name: "NCCL_NSOCKS_PERTHREAD",
        default: "",
        doc: "data sockets per helper thread of a socket-net connection (threads x sockets at most 64: more lowers this with a warning, as NCCL does); unset: 1, or 8 on AWS; the listening side's value counts",
        set: |c, v| Ok(c.socks_per_thread = parse_count(v, "sockets per thread")?),
    },
    Knob {
        name: "NCCL_SOCKET_SNDBUF",
        default: "-1",
        doc: "SO_SNDBUF asked for each connection of the socket net (its control and data connections, not the bootstrap's), in bytes, decimal or 0x hexadecimal as NCCL reads it (no K/M/G suffix, no leading 0; at most 2147483647; Linux doubles it and caps it at net.core.wmem_max); 0 or negative: the kernel's automatic sizing, as in NCCL",
        set: |c, v| Ok(c.socket_send_buffer = parse_socket_buffer(v)?),
    },
    Knob {
        name: "NCCL_SOCKET_RCVBUF",
        default: "-1",
        doc: "SO_RCVBUF asked for each connection of the socket net, as NCCL_SOCKET_SNDBUF (capped at net.core.rmem_max; setting it turns off the kernel's receive-window autotuning for those connections)",
        set: |c, v| Ok(c.socket_recv_buffer = parse_socket_buffer(v)?),
    },
    Knob {
        name: "NCCL_PXN_DISABLE",
        default: "0",
        doc: "1: never send to another host through a rank of this host that sits on the destination's rail (PXN); each rank then uses its own NIC",
        set: |c, v| Ok(c.pxn_disable = parse_bool(v)?),
    },
    Knob {
        name: "NCCL_P2P_PXN_LEVEL",
        default: "2",
        doc: "PXN for point-to-point sends: 0 never, 1 or 2 when the sender has no NIC on the destination's rail (host ranks have their NICs alone: both levels mean the same)",
        set: |c, v| match v.parse::<u8>() {
            Ok(n @ 0..=2) => Ok(c.p2p_pxn_level = n),
            _ => Err("expected 0, 1 or 2".into()),
        },
    },
    Knob {
        name: "NCCL_NET_PLUGIN",
        default: "",
        doc: "net plugins to try, in order: a comma list of names (x loads libnccl-net-x.so), file names or paths; none: oxccl's socket net; unset: libnccl-net.so if the loader finds one and it can be used, else the socket net",
        set: |c, v| Ok(c.net_plugin = v.parse()?),
    },
    Knob {
        name: "NCCL_NET",
        default: "",
        doc: "use the net of this name only (a plugin's name, or Socket for oxccl's socket net); case does not matter",
        set: |c, v| Ok(c.net = non_empty(v)),
    },
    Knob {
        name: "OXCCL_NETPLUGIN_MAX_RECVS",
        default: "8",
        doc: "receives per irecv that libnccl-net-oxccl.so (oxccl's socket net as an NCCL net plugin) offers NCCL (1..=8)",
        set: |c, v| match v.parse::<usize>() {
            Ok(n @ 1..=8) => Ok(c.netplugin_max_recvs = n),
            _ => Err("expected 1 to 8".into()),
        },
    },
    Knob {
        name: "OXCCL_PROXY_THREADS",
        default: "0",
        doc: "threads progressing the process's network connections, each link on one, dealt in turn (1..=16; 0: one per two of the host's cores per rank on it, 1 to 4); the first communicator to use the network sets it for the process",
        set: |c, v| match v.parse::<usize>() {
            Ok(n @ 0..=16) => Ok(c.proxy_threads = n),
            _ => Err("expected 0 (automatic) to 16".into()),
        },
    },
    Knob {
        name: "OXCCL_PROXY_TRACE",
        default: "",
        doc: "path prefix of the proxy's timeline: each communicator creates <path>.pid<pid>.comm<n>.rank<r>.json (an error if it cannot) and writes it when destroyed: a Chrome trace of every network message's wait for data, send and receive, and the proxy threads' sleeps; empty: none",
        set: |c, v| Ok(c.proxy_trace = path_prefix(v)?),
    },
    Knob {
        name: "OXCCL_KERNEL_TRACE",
        default: "",
        doc: "path prefix of the GPU executor kernel's timeline: each GPU communicator creates <path>.pid<pid>.gpu<n>.rank<r>.txt (an error if it cannot) and writes it when destroyed: for the last 64 executor launches, when each of the first 2 lanes started and ended and each of their first 64 steps started, finished waiting, moved its data and published it, each step labelled with its kind and peers, with per-step medians; empty: none",
        set: |c, v| Ok(c.kernel_trace = path_prefix(v)?),
    },
    Knob {
        name: "OXCCL_BOOTSTRAP",
        default: "auto",
        doc: "how ranks find each other without an explicit id: auto, env, mpi",
        set: |c, v| {
            c.bootstrap = match v.to_ascii_lowercase().as_str() {
                "auto" => BootstrapMethod::Auto,
                "env" => BootstrapMethod::Env,
                "mpi" => BootstrapMethod::Mpi,
                _ => return Err("expected auto, env or mpi".into()),
            };
            Ok(())
        },
    },
    Knob {
        name: "OXCCL_BOOTSTRAP_TIMEOUT_MS",
        default: "60000",
        doc: "how long any bootstrap wait (root reachable, all ranks joined, a peer's message) may take",
        set: |c, v| Ok(c.bootstrap_timeout = parse_millis(v)?),
    },
    Knob {
        name: "OXCCL_HEARTBEAT_TIMEOUT_MS",
        default: "30000",
        doc: "a rank that sends nothing (not even its heartbeat, every 1/5 of this) for this long counts as failed, e.g. a stopped or hung process; 0 disables",
        set: |c, v| {
            c.heartbeat_timeout = match v.parse::<u64>() {
                Ok(0) => None,
                Ok(ms) => Some(Duration::from_millis(ms)),
                Err(_) => return Err("expected milliseconds (0 disables)".into()),
            };
            Ok(())
        },
    },
    Knob {
        name: "OXCCL_HANDSHAKE_TIMEOUT_MS",
        default: "5000",
        doc: "how long a newly connected peer may take to identify itself before it is dropped",
        set: |c, v| Ok(c.handshake_timeout = parse_millis(v)?),
    },
    Knob {
        name: "OXCCL_BOOTSTRAP_PORT",
        default: "",
        doc: "root port for launchers that give a root host but no port (Slurm); default derived from the job and step ids",
        set: |c, v| {
            c.bootstrap_port = if v.is_empty() {
                None
            } else {
                Some(v.parse().map_err(|_| "expected a port number 1..65535".to_string())?)
            };
            Ok(())
        },
    },
    Knob {
        name: "OXCCL_UNIQUE_ID",
        default: "",
        doc: "the job's unique id as 256 hex digits (as printed by UniqueId::to_hex)",
        set: |c, v| Ok(c.unique_id = non_empty(v)),
    },
    Knob {
        name: "OXCCL_UNIQUE_ID_FILE",
        default: "",
        doc: "rank 0 writes the unique id to this path, the other ranks wait for it (use a fresh path per job)",
        set: |c, v| Ok(c.unique_id_file = non_empty(v)),
    },
    Knob {
        name: "OXCCL_MAX_FRAME_BYTES",
        default: "67108864",
        doc: "largest bootstrap message accepted; longer frames are refused before any allocation",
        set: |c, v| Ok(c.max_frame_bytes = parse_bytes(v, 1024)?),
    },
];

/// Variables that launchers set and [`crate::launcher`] reads; not knobs, but not typos.
const LAUNCHER_VARS: &[&str] = &["OXCCL_RANK", "OXCCL_NRANKS", "OXCCL_LOCAL_RANK"];

impl Config {
    /// Reads the process environment once.
    pub fn from_env() -> Result<Config> {
        Config::from_vars(&process_env())
    }

    /// Builds a config from a variable map (defaults for everything absent).
    pub fn from_vars(env: &Env) -> Result<Config> {
        let mut config = Config::blank();
        for knob in KNOBS {
            let value = env.get(knob.name).map(String::as_str).unwrap_or(knob.default);
            config.set_knob(knob, value)?;
        }
        // OXCCL_TEST_* are the test suite's switches (OXCCL_TEST_SLURM, ...), not settings.
        for name in env.keys().filter(|k| k.starts_with("OXCCL_") && !k.starts_with("OXCCL_TEST_")) {
            if !KNOBS.iter().any(|k| k.name == name) && !LAUNCHER_VARS.contains(&name.as_str()) {
                return Err(Error::Config {
                    name: name.clone(),
                    value: env[name].clone(),
                    reason: "unknown oxccl setting (see docs/CONFIG.md)".into(),
                });
            }
        }
        Ok(config)
    }

    /// The direct LL kernel's limit (OXCCL_GPU_DIRECT_BYTES) for a communicator of
    /// `nranks`: as set, else 1 MiB up to 3 ranks and 2 MiB from 4. On 4×H100 the direct
    /// kernel took 24.6 µs where the ring took 46.4 for a 512 KiB all_reduce (each rank
    /// receiving 1.5 MiB), and 25 against 34–44 for all_gather and reduce_scatter of 512 KiB
    /// a rank; with 3 MiB to receive the ring was even or ahead
    /// (docs/results/2026-11-27-h200x4, `3-aligned-h100x4/variants`).
    pub fn gpu_direct_limit(&self, nranks: usize) -> usize {
        self.gpu_direct_bytes.unwrap_or(if nranks >= 4 { 2 << 20 } else { 1 << 20 })
    }

    /// NCCL_MAX_NCHANNELS as set, else 64 (NCCL's most): the channels of paths that do not
    /// choose their own default (the host path over the network).
    pub fn max_channels(&self) -> usize {
        self.max_channels.unwrap_or(64)
    }

    /// The largest all_reduce that goes in two one-hop shots (OXCCL_GPU_TWO_SHOT_BYTES) on
    /// `nranks`: as set, else 4 MiB from 4 ranks, 2 MiB on 2 and 0 on 3 (not measured; its
    /// power-of-two counts do not divide by 3 anyway). On 4×H200, in one launch, it took
    /// 11.9–12.3 µs at 1 MiB, 23.1–23.8 at 2 MiB and 38.7 at 4 MiB against the ring's
    /// 21.5–24.6, 31.8–32.4 and 42.1–43.9 (NCCL 19.8, 28.5, 44.1), and 69.4–71.2 against
    /// 61.1–62.1 at 8 MiB; on two GPUs of 4×H200, 14.4–17.4 at 2 MiB against the ring's
    /// 18.8–27.4 (NCCL 23.5–28.7) and even at 4 MiB (docs/results/2026-11-28-ll128-two-shot,
    /// docs/results/2026-11-28-h200x4-channels).
    pub fn gpu_two_shot_limit(&self, nranks: usize) -> usize {
        self.gpu_two_shot_bytes.unwrap_or(match nranks {
            2 => 2 << 20,
            n if n >= 4 => 4 << 20,
            _ => 0,
        })
    }

    /// The largest message of a collective that runs LL between the GPUs of one host
    /// (OXCCL_GPU_LL_BYTES), for all_reduce or another collective on `nranks`: as set (for
    /// every collective), else 2 MiB for all_reduce from 4 ranks and 0 otherwise. On
    /// 4×H200 the ring's all_reduce over LL took 25.7–28.6 µs at 1 MiB and 32.5–32.8 at
    /// 2 MiB against Simple's 29.2–31.4 and 34.4–35.6, and 51–52 against 42–44 at 4 MiB;
    /// all_gather, reduce_scatter and broadcast gained nothing from 1 MiB and lost from
    /// 2–4 MiB (docs/results/2026-11-27-h200x4-acquire).
    pub fn gpu_ll_limit(&self, all_reduce: bool, nranks: usize) -> usize {
        self.gpu_ll_bytes.unwrap_or(if all_reduce && nranks >= 4 { 2 << 20 } else { 0 })
    }

    /// Defaults only, ignoring the environment.
    pub fn defaults() -> Config {
        // Every default in KNOBS parses: the `defaults_parse` test checks it.
        Config::from_vars(&Env::new()).expect("KNOBS defaults parse")
    }

    /// Overrides one setting by its variable name, as an API caller would.
    pub fn set(&mut self, name: &str, value: &str) -> Result<&mut Config> {
        let knob = KNOBS
            .iter()
            .find(|k| k.name == name)
            .ok_or_else(|| Error::Config {
                name: name.into(),
                value: value.into(),
                reason: "unknown setting".into(),
            })?;
        self.set_knob(knob, value)?;
        Ok(self)
    }

    fn set_knob(&mut self, knob: &Knob, value: &str) -> Result<()> {
        (knob.set)(self, value.trim()).map_err(|reason| Error::Config {
            name: knob.name.into(),
            value: value.into(),
            reason,
        })
    }

    fn blank() -> Config {
        Config {
            debug: DebugLevel::Warn,
            debug_subsys: Subsystems::default(),
            debug_file: None,
            socket_ifname: None,
            socket_family: None,
            comm_id: None,
            bootstrap: BootstrapMethod::Auto,
            bootstrap_timeout: Duration::from_secs(60),
            handshake_timeout: Duration::from_secs(5),
            bootstrap_port: None,
            unique_id: None,
            unique_id_file: None,
            max_frame_bytes: 64 << 20,
            host_id: None,
            buffsize: 1 << 20,
            algo: None,
            proto: None,
            shm_disable: false,
            backend: Backend::Auto,
            gpu_slot_bytes: 256 << 10,
            gpu_direct_bytes: None,
            gpu_direct_ll128_bytes: 512 << 10,
            gpu_two_shot_bytes: None,
            gpu_ll_bytes: None,
            p2p_ll_bytes: 64 << 10,
            min_channels: 1,
            max_channels: None,
            gpu_across_hosts: AcrossHosts::Kernels,
            gpu_net_channels: 8,
            gpu_p2p_neighbour_channels: None,
            coll_timeout: Duration::from_secs(600),
            socket_max_recvs: 1,
            socket_threads: None,
            socks_per_thread: None,
            socket_send_buffer: None,
            socket_recv_buffer: None,
            pxn_disable: false,
            p2p_pxn_level: 2,
            net_plugin: NetPlugins::Default,
            net: None,
            netplugin_max_recvs: 8,
            proxy_threads: 0,
            proxy_trace: None,
            kernel_trace: None,
            blocking: true,
            heartbeat_timeout: Some(Duration::from_secs(30)),
            topo_file: None,
            topo_dump_file: None,
            topo_dump_rank: 0,
            tuner_plugin: None,
        }
    }

    /// A builder starting from the defaults (the environment is not read).
    ///
    /// ```
    /// use std::time::Duration;
    /// use oxccl_bootstrap::Config;
    /// let config = Config::builder().blocking(false).collective_timeout(Duration::from_secs(30)).algorithms("allreduce:ring").build()?;
    /// assert!(!config.blocking);
    /// # Ok::<(), oxccl_bootstrap::Error>(())
    /// ```
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder { config: Config::defaults(), error: None }
    }
}

/// Builds a [`Config`] in code with typed setters for the settings programs choose most
/// often, and [`ConfigBuilder::set`] for any knob by its variable name. Every value goes
/// through the knob's own parser; the first bad one is reported by [`ConfigBuilder::build`],
/// naming the variable.
pub struct ConfigBuilder {
    config: Config,
    error: Option<Error>,
}

impl ConfigBuilder {
    /// Starts from the environment (as [`Config::from_env`]) instead of the defaults.
    pub fn from_env() -> Result<ConfigBuilder> {
        Ok(ConfigBuilder { config: Config::from_env()?, error: None })
    }

    /// Any knob by its variable name (`"NCCL_BUFFSIZE"`, `"4194304"`).
    pub fn set(mut self, name: &str, value: &str) -> ConfigBuilder {
        if self.error.is_none() {
            if let Err(e) = self.config.set(name, value) {
                self.error = Some(e);
            }
        }
        self
    }

    /// NCCL_COMM_BLOCKING.
    pub fn blocking(self, blocking: bool) -> ConfigBuilder {
        self.set("NCCL_COMM_BLOCKING", if blocking { "1" } else { "0" })
    }

    /// OXCCL_COLL_TIMEOUT_MS: how long an operation may wait for its peers.
    pub fn collective_timeout(self, timeout: Duration) -> ConfigBuilder {
        self.set("OXCCL_COLL_TIMEOUT_MS", &timeout.as_millis().to_string())
    }

    /// OXCCL_BOOTSTRAP_TIMEOUT_MS: how long joining a job may take.
    pub fn bootstrap_timeout(self, timeout: Duration) -> ConfigBuilder {
        self.set("OXCCL_BOOTSTRAP_TIMEOUT_MS", &timeout.as_millis().to_string())
    }

    /// NCCL_BUFFSIZE: bytes of each connection's FIFO.
    pub fn buffer_size(self, bytes: usize) -> ConfigBuilder {
        self.set("NCCL_BUFFSIZE", &bytes.to_string())
    }

    /// NCCL_ALGO, in NCCL's syntax (`"ring"`, `"^tree"`, `"allreduce:tree;broadcast:ring"`).
    pub fn algorithms(self, selection: &str) -> ConfigBuilder {
        self.set("NCCL_ALGO", selection)
    }

    /// NCCL_PROTO, in NCCL's syntax.
    pub fn protocols(self, selection: &str) -> ConfigBuilder {
        self.set("NCCL_PROTO", selection)
    }

    /// `false`: NCCL_SHM_DISABLE=1 (ranks of one host talk through the network transport).
    pub fn shared_memory(self, allowed: bool) -> ConfigBuilder {
        self.set("NCCL_SHM_DISABLE", if allowed { "0" } else { "1" })
    }

    /// NCCL_HOSTID: the host identity that decides which ranks share memory.
    pub fn host_id(self, id: &str) -> ConfigBuilder {
        self.set("NCCL_HOSTID", id)
    }

    /// NCCL_SOCKET_IFNAME, in NCCL's syntax.
    pub fn socket_interfaces(self, selection: &str) -> ConfigBuilder {
        self.set("NCCL_SOCKET_IFNAME", selection)
    }

    /// The config, or the first value that did not parse.
    pub fn build(self) -> Result<Config> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.config),
        }
    }
}

fn non_empty(v: &str) -> Option<String> {
    (!v.is_empty()).then(|| v.to_string())
}

/// A count that may be left unset (empty: `None`); negative or non-numeric values are
/// errors (NCCL reads them as garbage).
fn parse_count(v: &str, what: &str) -> std::result::Result<Option<usize>, String> {
    match v {
        "" => Ok(None),
        _ => v.parse::<usize>().map(Some).map_err(|_| format!("expected a number of {what} (0 or more), or nothing for the automatic choice")),
    }
}

/// A socket buffer size as NCCL takes it: unset, 0 or negative leave the kernel's sizing
/// (`None`); else bytes that fit setsockopt's int. NCCL reads the variable with
/// `strtoll(str, NULL, 0)`: decimal, `0x` hexadecimal, a leading 0 octal, and it stops at
/// the first other character, so "4M" is 4 bytes to it (measured: its sockets then moved
/// 0.03 GB/s). oxccl takes decimal and hexadecimal as NCCL does and refuses the rest rather
/// than read it otherwise.
fn parse_socket_buffer(v: &str) -> std::result::Result<Option<usize>, String> {
    let v = v.trim();
    if v.is_empty() {
        return Ok(None);
    }
    let (negative, digits) = match v.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, v.strip_prefix('+').unwrap_or(v)),
    };
    let parsed = match digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None if digits.len() > 1 && digits.starts_with('0') => {
            return Err("a leading 0 is octal to NCCL (strtoll with base 0): write the bytes without it".into());
        }
        None => digits.parse::<i64>().ok().filter(|_| digits.bytes().all(|b| b.is_ascii_digit())),
    };
    let n = parsed.ok_or("expected a number of bytes, in decimal or 0x hexadecimal (NCCL reads no K/M/G suffix: \"4M\" is 4 bytes to it)")?;
    if negative || n == 0 {
        return Ok(None);
    }
    i32::try_from(n).map(|n| Some(n as usize)).map_err(|_| format!("{n} bytes is more than setsockopt takes (2147483647)"))
}

fn parse_bool(v: &str) -> std::result::Result<bool, String> {
    match v {
        "1" | "true" | "TRUE" | "yes" => Ok(true),
        "0" | "false" | "FALSE" | "no" | "" => Ok(false),
        _ => Err("expected 0 or 1".into()),
    }
}

fn parse_millis(v: &str) -> std::result::Result<Duration, String> {
    match v.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err("expected a positive number of milliseconds".into()),
    }
}

/// A trace's path prefix: none when empty, an error when it cannot be a path.
fn path_prefix(v: &str) -> std::result::Result<Option<String>, String> {
    let v = v.trim();
    if v.contains('\0') {
        return Err("expected a path".into());
    }
    Ok((!v.is_empty()).then(|| v.to_string()))
}

/// Bytes, with an optional K/M/G suffix (powers of two), at least `min`.
fn parse_bytes(v: &str, min: usize) -> std::result::Result<usize, String> {
    let (digits, shift) = match v.char_indices().last() {
        Some((i, 'k' | 'K')) => (&v[..i], 10),
        Some((i, 'm' | 'M')) => (&v[..i], 20),
        Some((i, 'g' | 'G')) => (&v[..i], 30),
        _ => (v, 0),
    };
    let n: usize = digits.parse().map_err(|_| "expected a byte count (e.g. 4194304 or 4M)".to_string())?;
    let bytes = n.checked_shl(shift).filter(|b| b >> shift == n).ok_or("byte count overflows")?;
    if bytes < min {
        return Err(format!("must be at least {min} bytes"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn defaults_parse() {
        let c = Config::defaults();
        assert_eq!(c.buffsize, 1 << 20);
        assert_eq!(c.bootstrap_timeout, Duration::from_secs(60));
        assert_eq!(c.bootstrap, BootstrapMethod::Auto);
    }

    /// Unset, LL between GPUs is all_reduce's from 4 ranks up to 2 MiB; set, it is what
    /// was set for every collective and size (0 too).
    #[test]
    fn the_peer_ll_limit_is_all_reduce_from_four_ranks_unless_set() {
        let unset = Config::defaults();
        assert_eq!([2, 3, 4, 8].map(|n| unset.gpu_ll_limit(true, n)), [0, 0, 2 << 20, 2 << 20]);
        assert_eq!(unset.gpu_ll_limit(false, 8), 0);
        let set = Config::from_vars(&env(&[("OXCCL_GPU_LL_BYTES", "1M")])).unwrap();
        assert_eq!([(true, 2), (false, 4)].map(|(r, n)| set.gpu_ll_limit(r, n)), [1 << 20, 1 << 20]);
        let off = Config::from_vars(&env(&[("OXCCL_GPU_LL_BYTES", "0")])).unwrap();
        assert_eq!(off.gpu_ll_limit(true, 4), 0);
    }

    /// Unset, the direct kernel's limit follows the communicator's size; set, it is what
    /// was set for every size (0 too).
    #[test]
    fn the_direct_limit_is_by_size_unless_set() {
        let unset = Config::defaults();
        assert_eq!([2, 3, 4, 8].map(|n| unset.gpu_direct_limit(n)), [1 << 20, 1 << 20, 2 << 20, 2 << 20]);
        let set = Config::from_vars(&env(&[("OXCCL_GPU_DIRECT_BYTES", "4M")])).unwrap();
        assert_eq!([2, 8].map(|n| set.gpu_direct_limit(n)), [4 << 20, 4 << 20]);
        let off = Config::from_vars(&env(&[("OXCCL_GPU_DIRECT_BYTES", "0")])).unwrap();
        assert_eq!(off.gpu_direct_limit(4), 0);
        assert!(Config::from_vars(&env(&[("OXCCL_GPU_DIRECT_BYTES", "lots")])).unwrap_err().to_string().contains("OXCCL_GPU_DIRECT_BYTES"));
        assert_eq!([2, 3, 4, 8].map(|n| unset.gpu_two_shot_limit(n)), [2 << 20, 0, 4 << 20, 4 << 20]);
        let two_shot = Config::from_vars(&env(&[("OXCCL_GPU_TWO_SHOT_BYTES", "2M"), ("OXCCL_GPU_DIRECT_LL128_BYTES", "0")])).unwrap();
        assert_eq!((two_shot.gpu_two_shot_limit(2), two_shot.gpu_direct_ll128_bytes), (2 << 20, 0));
        assert_eq!(unset.gpu_direct_ll128_bytes, 512 << 10);
    }

    #[test]
    fn values_are_typed() {
        let c = Config::from_vars(&env(&[
            ("NCCL_BUFFSIZE", "8M"),
            ("NCCL_SHM_DISABLE", "1"),
            ("OXCCL_BOOTSTRAP_TIMEOUT_MS", "1500"),
            ("NCCL_DEBUG", "info"),
        ]))
        .unwrap();
        assert_eq!(c.buffsize, 8 << 20);
        assert!(c.shm_disable);
        assert_eq!(c.bootstrap_timeout, Duration::from_millis(1500));
        assert_eq!(c.debug, DebugLevel::Info);
    }

    #[test]
    fn malformed_value_names_the_variable() {
        let err = Config::from_vars(&env(&[("NCCL_BUFFSIZE", "lots")])).unwrap_err();
        assert!(err.to_string().contains("NCCL_BUFFSIZE"), "{err}");
        let err = Config::from_vars(&env(&[("OXCCL_HANDSHAKE_TIMEOUT_MS", "0")])).unwrap_err();
        assert!(err.to_string().contains("OXCCL_HANDSHAKE_TIMEOUT_MS"), "{err}");
    }

    #[test]
    fn unknown_oxccl_variable_is_an_error_but_nccl_ones_are_not() {
        let err = Config::from_vars(&env(&[("OXCCL_BOOTSTRAP_TIMEOUT", "5")])).unwrap_err();
        assert!(err.to_string().contains("OXCCL_BOOTSTRAP_TIMEOUT"), "{err}");
        Config::from_vars(&env(&[("NCCL_IB_HCA", "mlx5"), ("OXCCL_RANK", "0"), ("OXCCL_TEST_SLURM", "1")])).unwrap();
    }

    #[test]
    fn the_builder_sets_typed_values_and_reports_the_first_bad_one() {
        let c = Config::builder()
            .blocking(false)
            .collective_timeout(Duration::from_millis(1500))
            .buffer_size(1 << 20)
            .shared_memory(false)
            .host_id("node7")
            .algorithms("allreduce:tree")
            .build()
            .unwrap();
        assert!(!c.blocking && c.shm_disable);
        assert_eq!((c.coll_timeout, c.buffsize), (Duration::from_millis(1500), 1 << 20));
        assert_eq!((c.host_id.as_deref(), c.algo.as_deref()), (Some("node7"), Some("allreduce:tree")));
        assert!(Config::defaults().blocking);
        let err = Config::builder().set("NCCL_BUFFSIZE", "lots").blocking(true).set("NCCL_NOPE", "1").build().unwrap_err();
        assert!(err.to_string().contains("NCCL_BUFFSIZE"), "{err}");
    }

    #[test]
    fn api_override_goes_through_the_same_parser() {
        let mut c = Config::defaults();
        c.set("OXCCL_HANDSHAKE_TIMEOUT_MS", "250").unwrap();
        assert_eq!(c.handshake_timeout, Duration::from_millis(250));
        assert!(c.set("OXCCL_HANDSHAKE_TIMEOUT_MS", "-1").is_err());
        assert!(c.set("NCCL_NOPE", "1").is_err());
    }

    #[test]
    fn byte_counts_check_overflow_and_minimum() {
        assert_eq!(parse_bytes("1K", 0), Ok(1024));
        assert!(parse_bytes("99999999999999999999G", 0).is_err());
        assert!(parse_bytes("10", 4096).is_err());
    }

    #[test]
    fn net_plugins_parse_as_nccl_reads_them() {
        let plugins = |value: &str| Config::from_vars(&env(&[("NCCL_NET_PLUGIN", value)])).map(|c| c.net_plugin);
        assert_eq!(plugins("").unwrap(), NetPlugins::Default);
        assert_eq!(plugins(" NONE ").unwrap(), NetPlugins::None);
        assert_eq!(plugins("ofi, /opt/x/libnccl-net.so").unwrap(), NetPlugins::Named(vec!["ofi".into(), "/opt/x/libnccl-net.so".into()]));
        assert!(plugins(",,").unwrap_err().to_string().contains("NCCL_NET_PLUGIN"));
        let c = Config::from_vars(&env(&[("NCCL_NET", "Socket"), ("OXCCL_NETPLUGIN_MAX_RECVS", "2")])).unwrap();
        assert_eq!((c.net.as_deref(), c.netplugin_max_recvs), (Some("Socket"), 2));
        assert!(Config::from_vars(&env(&[("OXCCL_NETPLUGIN_MAX_RECVS", "9")])).is_err());
    }

    #[test]
    fn socket_buffers_parse_as_nccl_reads_them() {
        let c = Config::defaults();
        assert_eq!((c.socket_send_buffer, c.socket_recv_buffer), (None, None));
        let c = Config::from_vars(&env(&[("NCCL_SOCKET_SNDBUF", "4194304"), ("NCCL_SOCKET_RCVBUF", " 262144 ")])).unwrap();
        assert_eq!((c.socket_send_buffer, c.socket_recv_buffer), (Some(4 << 20), Some(256 << 10)));
        let c = Config::from_vars(&env(&[("NCCL_SOCKET_SNDBUF", "0x100000"), ("NCCL_SOCKET_RCVBUF", "+0X40000")])).unwrap();
        assert_eq!((c.socket_send_buffer, c.socket_recv_buffer), (Some(1 << 20), Some(256 << 10)));
        // NCCL's default is -1, and only a positive size is applied.
        for unset in ["-1", "0", "-4096", "", "-0x10"] {
            let c = Config::from_vars(&env(&[("NCCL_SOCKET_SNDBUF", unset), ("NCCL_SOCKET_RCVBUF", unset)])).unwrap();
            assert_eq!((c.socket_send_buffer, c.socket_recv_buffer), (None, None), "{unset:?}");
        }
        let suffix = "NCCL reads no K/M/G suffix";
        for (name, value, says) in [("NCCL_SOCKET_SNDBUF", "big", suffix), ("NCCL_SOCKET_SNDBUF", "4M", suffix), ("NCCL_SOCKET_RCVBUF", "2147483648", "more than setsockopt takes"), ("NCCL_SOCKET_RCVBUF", "1.5", suffix), ("NCCL_SOCKET_RCVBUF", "0x", suffix), ("NCCL_SOCKET_RCVBUF", "--1", suffix), ("NCCL_SOCKET_SNDBUF", "0262144", "octal")] {
            let err = Config::from_vars(&env(&[(name, value)])).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(value) && err.contains(says), "{err}");
        }
    }

    #[test]
    fn socket_threads_and_sockets_parse_as_counts() {
        let c = Config::defaults();
        assert_eq!((c.socket_threads, c.socks_per_thread), (None, None));
        let c = Config::from_vars(&env(&[("NCCL_SOCKET_NTHREADS", "4"), ("NCCL_NSOCKS_PERTHREAD", " 32 ")])).unwrap();
        assert_eq!((c.socket_threads, c.socks_per_thread), (Some(4), Some(32)));
        // Beyond NCCL's limits is for the socket net to lower (with a warning), not an error.
        assert_eq!(Config::from_vars(&env(&[("NCCL_SOCKET_NTHREADS", "40")])).unwrap().socket_threads, Some(40));
        for (name, value) in [("NCCL_SOCKET_NTHREADS", "-1"), ("NCCL_SOCKET_NTHREADS", "four"), ("NCCL_NSOCKS_PERTHREAD", "2.5")] {
            let err = Config::from_vars(&env(&[(name, value)])).unwrap_err().to_string();
            assert!(err.contains(name) && err.contains(value) && err.contains("expected a number"), "{err}");
        }
    }

    #[test]
    fn config_doc_lists_every_knob() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CONFIG.md"))
            .expect("docs/CONFIG.md exists");
        for knob in KNOBS {
            assert!(doc.contains(&format!("`{}`", knob.name)), "docs/CONFIG.md misses {}", knob.name);
        }
    }
}
