//! Bootstrapping without an explicit id: from `NCCL_COMM_ID`, `OXCCL_UNIQUE_ID`, a
//! launcher's environment, MPI, or an id file.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::config::{process_env, BootstrapMethod, Config, Env};
use crate::error::{Error, Result};
use crate::id::UniqueId;
use crate::launcher::{self, Launch};
use crate::log::target;
use crate::{root, sock, AbortFlag, Bootstrap};

impl Bootstrap {
    /// Joins the job described by the process environment (see [`Bootstrap::from_vars`]).
    pub fn from_env(config: &Config) -> Result<Bootstrap> {
        Bootstrap::from_vars(&process_env(), config)
    }

    /// Joins the job that the given environment describes. The rank and size come from
    /// the launcher ([`crate::launcher`]); the id, in this order, from `OXCCL_UNIQUE_ID`,
    /// `NCCL_COMM_ID`, the launcher's root address (torchrun, Slurm), MPI (mpirun; needs
    /// the `mpi` feature), then `OXCCL_UNIQUE_ID_FILE`. `OXCCL_BOOTSTRAP=mpi` goes to MPI
    /// straight away; `OXCCL_BOOTSTRAP=env` never uses MPI.
    pub fn from_vars(env: &Env, config: &Config) -> Result<Bootstrap> {
        if config.bootstrap == BootstrapMethod::Mpi {
            return from_mpi_world(config);
        }
        let launch = launcher::detect(env)?.ok_or_else(|| {
            Error::NoLauncher(
                "no launcher found: run under mpirun, srun or torchrun, or set OXCCL_RANK and OXCCL_NRANKS \
                 (with NCCL_COMM_ID, OXCCL_UNIQUE_ID or OXCCL_UNIQUE_ID_FILE)"
                    .into(),
            )
        })?;
        tracing::info!(target: target::BOOTSTRAP, "launched by {:?}: rank {} of {}", launch.kind, launch.rank, launch.nranks);
        if let Some(hex) = &config.unique_id {
            let id = UniqueId::from_hex(hex).map_err(|e| config_error("OXCCL_UNIQUE_ID", hex, e))?;
            return Bootstrap::init(&id, launch.rank, launch.nranks, config, AbortFlag::new());
        }
        if let Some(comm_id) = &config.comm_id {
            let addr = resolve(comm_id).map_err(|e| config_error("NCCL_COMM_ID", comm_id, e))?;
            let id = UniqueId::derived(addr, &["NCCL_COMM_ID"]);
            return Bootstrap::init(&id, launch.rank, launch.nranks, config, AbortFlag::new());
        }
        if let Some(hint) = &launch.root {
            let addr = resolve(&format!("{}:{}", hint.host, hint.port)).map_err(|e| config_error("launcher root", &hint.host, e))?;
            let parts: Vec<&str> = hint.job.iter().map(String::as_str).collect();
            let id = UniqueId::derived(addr, &parts);
            if launch.rank == 0 {
                serve_launcher_root(&id, config)?;
            }
            return Bootstrap::init(&id, launch.rank, launch.nranks, config, AbortFlag::new());
        }
        if config.bootstrap == BootstrapMethod::Auto && cfg!(feature = "mpi") && config.unique_id_file.is_none() {
            return from_mpi_world(config);
        }
        if let Some(path) = &config.unique_id_file {
            let id = exchange_through_file(Path::new(path), &launch, config)?;
            return Bootstrap::init(&id, launch.rank, launch.nranks, config, AbortFlag::new());
        }
        Err(Error::NoLauncher(format!(
            "{:?} gives no root address: use MPI (build with the `mpi` feature, OXCCL_BOOTSTRAP=mpi), \
             or set NCCL_COMM_ID=host:port, OXCCL_UNIQUE_ID or OXCCL_UNIQUE_ID_FILE",
            launch.kind
        )))
    }
}

/// MPI_COMM_WORLD: initialises MPI when the program has not (and finalises it again once
/// the id has travelled).
#[cfg(feature = "mpi")]
fn from_mpi_world(config: &Config) -> Result<Bootstrap> {
    if mpi::environment::is_initialized() {
        return Bootstrap::from_mpi(&mpi::topology::SimpleCommunicator::world(), config);
    }
    let universe = mpi::initialize().ok_or_else(|| Error::Mpi("MPI was finalized already; cannot initialise it again".into()))?;
    {
        use mpi::topology::Communicator;
        let world = universe.world();
        tracing::info!(target: target::BOOTSTRAP, "MPI initialized: rank {} of {}", world.rank(), world.size());
    }
    let result = Bootstrap::from_mpi(&universe.world(), config);
    drop(universe);
    result
}

#[cfg(not(feature = "mpi"))]
fn from_mpi_world(_config: &Config) -> Result<Bootstrap> {
    Err(Error::Mpi("this build has no MPI support (the `mpi` feature is off)".into()))
}

#[cfg(feature = "mpi")]
impl Bootstrap {
    /// Rank 0 of `comm` creates the id and broadcasts it over `comm`; every rank joins as
    /// its rank in `comm`. Collective over `comm`.
    pub fn from_mpi<C: mpi::topology::Communicator>(comm: &C, config: &Config) -> Result<Bootstrap> {
        use mpi::collective::Root;
        let (rank, size) = (comm.rank() as u32, comm.size() as u32);
        let mut bytes = [0u8; crate::UNIQUE_ID_BYTES];
        let mut failure = None;
        if rank == 0 {
            match Bootstrap::create_id(config) {
                Ok(id) => bytes = id.to_bytes(),
                Err(e) => failure = Some(e), // zeros tell the others that rank 0 failed
            }
        }
        comm.process_at_rank(0).broadcast_into(&mut bytes[..]);
        if let Some(e) = failure {
            return Err(e);
        }
        if bytes.iter().all(|&b| b == 0) {
            return Err(Error::Mpi("rank 0 could not create the bootstrap id (see its log)".into()));
        }
        let id = UniqueId::from_bytes(&bytes)?;
        Bootstrap::init(&id, rank, size, config, AbortFlag::new())
    }
}

/// Rank 0 of a launcher-named root listens on every address at the root's port: the host
/// name the launcher gives may resolve to any of this machine's addresses.
fn serve_launcher_root(id: &UniqueId, config: &Config) -> Result<()> {
    let any = if id.root().is_ipv4() { IpAddr::V4(Ipv4Addr::UNSPECIFIED) } else { IpAddr::V6(Ipv6Addr::UNSPECIFIED) };
    let listener = sock::listen(any, id.root().port())
        .map_err(|e| Error::io(format!("rank 0 listening on port {} for the bootstrap root (set OXCCL_BOOTSTRAP_PORT to another)", id.root().port()), e))?;
    root::serve(listener, *id, root::RootTimeouts::from_config(config))?;
    root::mark_served(id.root());
    Ok(())
}

/// Rank 0 writes a fresh id to `path`; the others wait for it.
fn exchange_through_file(path: &Path, launch: &Launch, config: &Config) -> Result<UniqueId> {
    if launch.rank == 0 {
        let id = Bootstrap::create_id(config)?;
        let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
        std::fs::write(&tmp, id.to_hex()).and_then(|()| std::fs::rename(&tmp, path)).map_err(|e| Error::io(format!("writing the unique id to {}", path.display()), e))?;
        return Ok(id);
    }
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return UniqueId::from_hex(&text).map_err(|e| config_error("OXCCL_UNIQUE_ID_FILE", &path.display().to_string(), e));
        }
        if start.elapsed() >= config.bootstrap_timeout {
            return Err(Error::Timeout { phase: format!("waiting for rank 0 to write the unique id to {}", path.display()), waited: start.elapsed() });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Resolves `host:port` (IPv6 as `[addr]:port`), preferring IPv4.
fn resolve(spec: &str) -> std::result::Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = spec.to_socket_addrs().map_err(|e| format!("cannot resolve {spec:?} as host:port: {e}"))?.collect();
    addrs.iter().find(|a| a.is_ipv4()).or(addrs.first()).copied().ok_or_else(|| format!("{spec:?} resolves to no address"))
}

fn config_error(name: &str, value: &str, reason: impl std::fmt::Display) -> Error {
    Error::Config { name: name.into(), value: value.into(), reason: reason.to_string() }
}
