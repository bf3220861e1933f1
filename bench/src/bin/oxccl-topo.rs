//! oxccl-topo: the machine as oxccl sees it, and what it would choose.
//!
//! ```text
//! oxccl-topo                                  # discover this host: tree, path matrix, channels, choices
//! oxccl-topo --topo-file dgx.xml --nnodes 2   # a machine described in NCCL's XML, over 2 such hosts
//! oxccl-topo --dump-xml here.xml --svg here.svg
//! oxccl-topo --nranks 2 --nnodes 2 --tuner-plugin ./libnccl-tuner-rules.so -b 8 -e 64M
//! oxccl-topo --kernels --nranks 4 -b 8 -e 64M   # what oxccl's GPU kernels run, per call
//! ```
//!
//! Prints the machine as a tree, GPUs and NICs against each other like
//! `nvidia-smi topo -m`, the NICs nearest the CPUs a rank runs on (`--cpus`), the ring and
//! tree channels found, NCCL's latency/bandwidth table, and per collective and size the
//! algorithm, protocol, channels and predicted time. With
//! no GPU (or `--host`) the choices are the host executor's; with `--kernels`, the routes
//! oxccl's GPU kernels take (the one-hop kernel, the LL exchange, or a schedule's
//! algorithm, protocol and channels: the runtime's rules and tuner, from the settings
//! alone, `oxccl_runtime::gpu::KernelRoutes`). NCCL_TOPO_FILE,
//! NCCL_TOPO_DUMP_FILE, NCCL_ALGO, NCCL_PROTO and NCCL_TUNER_PLUGIN are read as the
//! library reads them; the options override them.

#![forbid(unsafe_code)]

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use oxccl_topology::discover::{self, NicDescription, Options};
use oxccl_topology::layout::ChannelBounds;
use oxccl_topology::search::SearchSettings;
use oxccl_topology::{render, NodeKind, PathSettings, System, Topology, XmlNode};
use oxccl_transports::net::socket::SocketNet;
use oxccl_transports::net::Net;
use oxccl_tuning::plugin::{self, InitInfo, NvlDomains};
use oxccl_tuning::{gpu_setup, rank_locally, Collective, Constants, HostModel, Model, NcclModel, Request, Selection, Tuner};

#[derive(Parser, Debug)]
#[command(name = "oxccl-topo", about = "oxccl's view of the machine: topology, paths, channels, and the algorithm and protocol it would choose")]
struct Args {
    /// Load the machine from NCCL's topology XML instead of discovering it (default: NCCL_TOPO_FILE).
    #[arg(long)]
    topo_file: Option<PathBuf>,
    /// Write the machine as NCCL's topology XML (default: NCCL_TOPO_DUMP_FILE).
    #[arg(long)]
    dump_xml: Option<PathBuf>,
    /// Draw the graph as an SVG picture.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Ranks of the communicator (default: one per GPU of every host).
    #[arg(long)]
    nranks: Option<usize>,
    /// Hosts, each like this one.
    #[arg(long, default_value_t = 1)]
    nnodes: usize,
    /// A NIC to place, `name[:speed_mbps[:sysfs_path]]` (repeatable); default: the socket Net on loopback.
    #[arg(long = "nic")]
    nics: Vec<String>,
    /// The host executor's choices (the data in host memory) instead of NCCL's model.
    #[arg(long)]
    host: bool,
    /// The routes oxccl's GPU kernels take (its rules and tuner, from the settings) instead
    /// of NCCL's model; sizes are the user's count in bytes (per rank for all_gather and
    /// reduce_scatter), as NCCL's TUNING lines print them.
    #[arg(long, conflicts_with = "host")]
    kernels: bool,
    /// NCCL_ALGO for the choices.
    #[arg(long)]
    algo: Option<String>,
    /// NCCL_PROTO for the choices.
    #[arg(long)]
    proto: Option<String>,
    /// NCCL_TUNER_PLUGIN for the choices (`none` for none).
    #[arg(long)]
    tuner_plugin: Option<String>,
    /// Smallest size (bytes, K/M/G suffixes).
    #[arg(short = 'b', long, default_value = "8")]
    min_bytes: String,
    /// Largest size.
    #[arg(short = 'e', long, default_value = "1G")]
    max_bytes: String,
    /// Size factor between rows.
    #[arg(short = 'f', long, default_value_t = 4)]
    factor: usize,
    /// Only the choices (no tree, matrix or channels).
    #[arg(long)]
    choices_only: bool,
    /// The CPUs a rank runs on, for the NICs nearest them (`0-3,8`; default: this
    /// process's, from /proc/self/status).
    #[arg(long)]
    cpus: Option<String>,
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("oxccl-topo: {e}");
            ExitCode::FAILURE
        }
    }
}

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn bytes(text: &str) -> Result<usize> {
    let t = text.trim();
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        _ => (t, 0),
    };
    Ok(digits.parse::<usize>().map_err(|_| format!("{text:?} is not a size (e.g. 8, 64K, 1G)"))? << shift)
}

fn nics(args: &Args) -> Result<Vec<NicDescription>> {
    if args.nics.is_empty() {
        let net = SocketNet::new(IpAddr::V4(Ipv4Addr::LOCALHOST));
        let p = net.properties(0)?;
        return Ok(vec![NicDescription { name: p.name, pci_path: p.pci_path, speed_mbps: p.speed_mbps, port: p.port, guid: p.guid, latency_us: p.latency_us, max_comms: p.max_comms, gdr: p.ptr_support.cuda }]);
    }
    args.nics
        .iter()
        .map(|spec| {
            let mut parts = spec.splitn(3, ':');
            let name = parts.next().unwrap_or_default().to_string();
            let speed_mbps = parts.next().map(|s| s.parse().map_err(|_| format!("--nic {spec}: speed {s:?} is not Mb/s"))).transpose()?.unwrap_or(10_000);
            let pci_path = parts.next().map(str::to_string);
            Ok(NicDescription { name, pci_path, speed_mbps, port: 0, guid: 0, latency_us: 0.0, max_comms: 65536, gdr: false })
        })
        .collect()
}

fn run(args: Args) -> Result<()> {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let topo_file = args.topo_file.clone().or_else(|| env("NCCL_TOPO_FILE").map(PathBuf::from));
    let xml = match &topo_file {
        Some(path) => XmlNode::load(path)?,
        None => {
            let found = discover::discover(&Options { nics: nics(&args)?, gpu_ranks: Vec::new(), host_id: env("NCCL_HOSTID") })?;
            for note in &found.notes {
                eprintln!("note: {note}");
            }
            if !found.packages.is_empty() && !args.choices_only {
                println!("CPU packages (NUMA nodes): {:?}", found.packages);
            }
            found.xml
        }
    };
    if let Some(path) = args.dump_xml.clone().or_else(|| env("NCCL_TOPO_DUMP_FILE").map(PathBuf::from)) {
        xml.dump(&path)?;
        eprintln!("wrote {}", path.display());
    }
    let mut topology = Topology::new(System::from_xml(&xml)?, PathSettings::default())?;
    rank_locally(&mut topology);
    if let Some(path) = &args.svg {
        std::fs::write(path, render::svg(&topology.system))?;
        eprintln!("wrote {}", path.display());
    }
    if !args.choices_only {
        println!("# Machine\n{}", render::tree(&topology.system));
        println!("# Paths\n{}", render::matrix(&topology));
        let cpus = match &args.cpus {
            Some(list) => oxccl_topology::layout::cpu_list(list).ok_or_else(|| format!("--cpus {list:?}: expected CPUs and ranges, as 0-3,8"))?,
            None => oxccl_topology::layout::allowed_cpus(),
        };
        match oxccl_topology::layout::nets_near_cpus(&topology, &cpus) {
            Some(nets) => println!("# NICs nearest CPUs {cpus:?} (a rank's own NICs for PXN on the host path)\n{}\n", nets.join(", ")),
            None => println!("# NICs nearest CPUs {cpus:?}\nnone nearer than another (no CPU of the topology holds them all, or it gives no affinities)\n"),
        }
    }
    let gpus = topology.system.of(NodeKind::Gpu).len();
    let nranks = args.nranks.unwrap_or((gpus * args.nnodes).max(1));
    let selection = Selection::parse(args.algo.as_deref().or(env("NCCL_ALGO").as_deref()), args.proto.as_deref().or(env("NCCL_PROTO").as_deref()))?;
    let plugin_setting = args.tuner_plugin.clone().or_else(|| env("NCCL_TUNER_PLUGIN"));
    let info = InitInfo { comm_id: 0, nranks, nnodes: args.nnodes, nvl_domains: NvlDomains { count: args.nnodes as i32, min_ranks: (nranks / args.nnodes.max(1)) as i32, max_ranks: (nranks / args.nnodes.max(1)) as i32 } };
    let mut constants = Constants::default();
    let plugin = plugin::load(plugin_setting.as_deref(), &info, &mut constants)?;
    let (lo, hi) = (bytes(&args.min_bytes)?, bytes(&args.max_bytes)?);
    if args.kernels {
        return print_kernel_routes(&args, nranks, plugin, lo, hi);
    }
    let tuner = if args.host || gpus == 0 {
        // Ranks placed host by host, as launchers do by default.
        let per_host = if args.nnodes > 1 && nranks % args.nnodes == 0 { nranks / args.nnodes } else { 1 };
        let model = HostModel { nranks, net: args.nnodes > 1, oversubscribed: false, per_host };
        println!("# Choices: the host executor's model ({nranks} ranks, {})", if model.net { "through the network" } else { "shared memory" });
        Tuner::new(selection, Model::Host(model), HostModel::runs, plugin)
    } else {
        let setup = gpu_setup(&topology, nranks, args.nnodes, &SearchSettings::default(), ChannelBounds::default())?;
        if !args.choices_only {
            println!("# Channels\n{}{}", render::channels(&topology, "ring graph", &setup.ring), render::channels(&topology, "tree graph", &setup.tree));
            println!("{} collective channels over {} host(s); ring 0: {:?}\n", setup.layout.rings.len(), args.nnodes, setup.layout.rings[0]);
        }
        let model = NcclModel::new(setup.input, &constants);
        if !args.choices_only {
            println!("# NCCL's tuning model (latency µs / bandwidth GB/s)\n{}", model.print());
        }
        println!("# Choices: NCCL's model ({nranks} ranks over {} host(s))", args.nnodes);
        Tuner::new(selection, Model::Nccl(Box::new(model)), oxccl_tuning_runnable, plugin)
    };
    if let Some(name) = tuner.plugin_name() {
        println!("tuner plugin: {name}");
    }
    println!("{:>14} {:>12}  {:>14} {:>8} {:>8} {:>12}", "collective", "bytes", "algorithm", "protocol", "channels", "time (us)");
    for collective in Collective::ALL {
        if !args.host && gpus > 0 && !collective.is_tuned() {
            continue;
        }
        let mut size = lo.max(1);
        while size <= hi {
            match tuner.choose(&Request::new(collective, size)) {
                Ok(c) => {
                    let channels = match (c.channels, &tuner.model) {
                        (Some(n), _) => n.to_string(),
                        (None, Model::Nccl(m)) => m.channels_and_threads(c.algorithm, c.protocol, size).0.to_string(),
                        (None, Model::Host(_) | Model::NetKernels(_) | Model::OneHost(_)) => "-".into(),
                    };
                    println!("{:>14} {size:>12}  {:>14} {:>8} {channels:>8} {:>12.1}", collective.nccl_name(), c.algorithm.nccl_name(), c.protocol.nccl_name(), c.time_us);
                }
                Err(e) => println!("{:>14} {size:>12}  {e}", collective.nccl_name()),
            }
            size = size.saturating_mul(args.factor.max(2));
        }
    }
    Ok(())
}

/// On GPU paths every pair NCCL's model prices is shown as NCCL would run it (oxccl's own
/// Direct and Doubling are not NCCL's).
fn oxccl_tuning_runnable(_: Collective, algorithm: oxccl_tuning::Algorithm, _: oxccl_tuning::Protocol) -> bool {
    !matches!(algorithm, oxccl_tuning::Algorithm::Direct | oxccl_tuning::Algorithm::Doubling)
}

/// `--kernels`: per collective and size, the route oxccl's GPU kernels take for float
/// data on `nranks` ranks over `args.nnodes` hosts (placed host by host), under the
/// environment's settings and the options' NCCL_ALGO/NCCL_PROTO, with `plugin`.
fn print_kernel_routes(args: &Args, nranks: usize, plugin: Option<Box<dyn oxccl_tuning::TunerPlugin>>, lo: usize, hi: usize) -> Result<()> {
    use oxccl_runtime::gpu::{KernelRoutes, Route};
    let mut config = oxccl_runtime::bootstrap::config::Config::from_env()?;
    if let Some(algo) = &args.algo {
        config.set("NCCL_ALGO", algo)?;
    }
    if let Some(proto) = &args.proto {
        config.set("NCCL_PROTO", proto)?;
    }
    let per_host = if args.nnodes > 1 && nranks % args.nnodes == 0 { nranks / args.nnodes } else { 1 };
    let routes = KernelRoutes::new(&config, nranks, per_host, args.nnodes > 1, plugin)?;
    println!("# Routes of oxccl's GPU kernels ({nranks} ranks over {} host(s), float data)", args.nnodes);
    println!("{:>14} {:>12}  {:>14} {:>8} {:>8}", "collective", "bytes", "route", "protocol", "channels");
    for collective in Collective::ALL {
        let mut size = lo.max(4);
        while size <= hi {
            let row = match routes.route(collective, size / 4, oxccl_runtime::DataType::Float32, 0) {
                Ok(Route::Schedule { shape, algorithm, ll }) => format!("{:>14} {:>8} {:>8}", algorithm.nccl_name(), if ll { "LL" } else { "Simple" }, shape.channels),
                Ok(Route::Direct { ll128 }) => format!("{:>14} {:>8} {:>8}", "one hop", if ll128 { "LL128" } else { "LL" }, "-"),
                Ok(Route::TwoShot) => format!("{:>14} {:>8} {:>8}", "two shots", "LL128", "-"),
                Ok(Route::Exchange) => format!("{:>14} {:>8} {:>8}", "exchange", "LL", "-"),
                Ok(Route::Staged) => format!("{:>14} {:>8} {:>8}", "staged", "-", "-"),
                Err(e) => e.to_string(),
            };
            println!("{:>14} {size:>12}  {row}", collective.nccl_name());
            size = size.saturating_mul(args.factor.max(2));
        }
    }
    Ok(())
}
