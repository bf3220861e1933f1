//! A simulated cluster on one machine, for tests that need hosts: each host a network
//! namespace with one interface per rail (`rail0`, `rail1`, ...), each rail a bridge (in a
//! namespace of its own, the "fabric") joining the hosts' interfaces of that rail through
//! veth pairs, optionally a rate on every host link (`tc ... tbf`), and optionally a router
//! namespace joining the rails as a slow "spine". Ranks run as processes inside their host
//! ([`Host::command`]: `ip netns exec`, and a UTS namespace with the host's name, `h0`,
//! `h1`, ...), each told its interfaces (`NCCL_SOCKET_IFNAME`) and its host identity
//! (`NCCL_HOSTID`: the namespaces share /dev/shm and the boot id, so a rank started some
//! other way, under its own name, counts as its own host only by that name).
//!
//! The host names resolve inside the hosts (to their rail-0 addresses: an `/etc/hosts` that
//! `ip netns exec` puts in place from `/etc/netns/<namespace>/hosts`), and the cluster's
//! directory ([`Cluster::directory`]) holds a map from host names and addresses to
//! namespaces for `scripts/netns-rsh.sh`, the remote agent that lets `mpirun` start its
//! daemons in the hosts instead of through ssh ([`mpirun`]), and what a Slurm of the
//! cluster writes ([`slurm`]).
//!
//! Addresses: host `h` is `10.(100 + r).0.(h + 1)/24` on rail `r`; the spine router is
//! `.254` on every rail. Rails are separate: traffic from a host's rail-`r` address goes out
//! `rail<r>` only (a routing rule per source address), and reaches another rail's subnet
//! through the spine if there is one, else not at all. A socket bound to its device's
//! address therefore stays on its rail, as a NIC does.
//!
//! Nothing is made in the machine's own namespace: deleting the namespaces deletes every
//! interface, bridge and rate with them. [`Cluster`] deletes them, their `/etc/netns` files
//! and its directory when dropped (a failing test included); names carry the test process's
//! id and a counter, so tests may run at once, and what a test process that was killed left
//! (namespaces, files, a Slurm's daemons) is deleted by the next cluster made on the machine.
//!
//! Making namespaces needs root (CAP_SYS_ADMIN) and iproute2. [`Cluster::or_skip`] fails the
//! test with a clear message when they cannot be made, unless `OXCCL_TEST_NETNS=0` says to
//! run without them (the test then says it is skipped): a silently skipped test would report
//! a green suite that tested less.

pub mod mpirun;
pub mod slurm;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Namespace names of this harness start with this.
const PREFIX: &str = "oxt-";

/// What to build.
#[derive(Clone, Debug)]
pub struct Spec {
    pub hosts: usize,
    pub rails: usize,
    /// Rate of each host link, both ways, in megabits per second (`None`: as fast as veth).
    pub link_mbps: Option<u64>,
    /// A spine router joining the rails, with this rate on each of its rail links (`None`:
    /// no spine; rails cannot reach each other).
    pub spine: Option<Option<u64>>,
}

impl Spec {
    /// `hosts` hosts on `rails` rails, no rates, no spine.
    pub fn new(hosts: usize, rails: usize) -> Spec {
        Spec { hosts, rails, link_mbps: None, spine: None }
    }

    /// Every host link limited to `mbps` megabits per second, both ways.
    pub fn link_rate(self, mbps: u64) -> Spec {
        Spec { link_mbps: Some(mbps), ..self }
    }

    /// A spine joining the rails, its links limited to `mbps` (or not, `None`).
    pub fn spine(self, mbps: Option<u64>) -> Spec {
        Spec { spine: Some(mbps), ..self }
    }
}

/// One host: a namespace and its interfaces, one per rail.
#[derive(Clone, Debug)]
pub struct Host {
    pub namespace: String,
    /// Its host name (`h0`, `h1`, ...: what `hostname` says inside, and what resolves to
    /// its rail-0 address in every host).
    pub name: String,
    /// The host identity its ranks get (`NCCL_HOSTID`).
    pub id: String,
    /// `(interface name, address)` per rail.
    pub interfaces: Vec<(String, Ipv4Addr)>,
}

/// A cluster of namespaced hosts, deleted on drop.
#[derive(Debug)]
pub struct Cluster {
    pub hosts: Vec<Host>,
    /// Every namespace made, the hosts' included.
    namespaces: Vec<String>,
    /// Files of the cluster (the agent's host map, hostfiles, a Slurm's configuration).
    directory: PathBuf,
}

impl Host {
    /// The host's address on `rail`.
    pub fn address(&self, rail: usize) -> Ipv4Addr {
        self.interfaces[rail].1
    }

    /// `program` run inside this host (`ip netns exec`, under the host's name), with
    /// `NCCL_SOCKET_IFNAME` naming its rail interfaces exactly (`=rail0,rail1`) and
    /// `NCCL_HOSTID` set.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let names: Vec<&str> = self.interfaces.iter().map(|(name, _)| name.as_str()).collect();
        self.command_on(program, &names)
    }

    /// Like [`Host::command`], told only the interface of `rail`.
    pub fn command_on_rail(&self, program: impl AsRef<std::ffi::OsStr>, rail: usize) -> Command {
        self.command_on(program, &[self.interfaces[rail].0.as_str()])
    }

    fn command_on(&self, program: impl AsRef<std::ffi::OsStr>, interfaces: &[&str]) -> Command {
        let mut command = self.command_as_host(program);
        command.env("NCCL_SOCKET_IFNAME", format!("={}", interfaces.join(","))).env("NCCL_HOSTID", &self.id);
        command
    }

    /// `program` run inside this host under the host's name, nothing added to its
    /// environment: `ip netns exec` (the network namespace, and the host's /etc/hosts), then
    /// a UTS namespace of its own whose host name is set before `program` replaces the shell
    /// (one process throughout: killing the command's pid kills `program`).
    fn command_as_host(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.namespace, "unshare", "--uts", "sh", "-c", r#"echo "$0" > /proc/sys/kernel/hostname && exec "$@""#, &self.name]).arg(program);
        command
    }

    /// [`Host::command_as_host`] with the environment of a login rather than the test
    /// process's: PATH, HOME, LD_LIBRARY_PATH and TMPDIR only. What launchers and daemons of
    /// the cluster start from, so that nothing the test process was given (scripts/test.sh's
    /// loopback settings for MPI and PMIx, say) reaches a job in the hosts.
    pub fn login_command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = self.command_as_host(program);
        crate::keep_only_login_environment(&mut command);
        command
    }
}

impl Cluster {
    /// Builds the cluster of `spec`, or says why it cannot be made (what `ip` answered).
    pub fn new(spec: &Spec) -> Result<Cluster, String> {
        if spec.hosts == 0 || spec.rails == 0 || spec.hosts > 250 || spec.rails > 100 {
            return Err(format!("{} hosts on {} rails (1..=250 hosts, 1..=100 rails)", spec.hosts, spec.rails));
        }
        delete_orphans();
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("{PREFIX}{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        // From here on every namespace and file made is deleted on drop, even if a later step fails.
        let directory = std::env::temp_dir().join(&name);
        let mut cluster = Cluster { hosts: Vec::new(), namespaces: Vec::new(), directory };
        std::fs::create_dir_all(&cluster.directory).map_err(|e| format!("creating {}: {e}", cluster.directory.display()))?;
        let fabric = cluster.namespace(&format!("{name}-fabric"))?;
        for rail in 0..spec.rails {
            ip(&["-n", &fabric, "link", "add", &format!("rail{rail}"), "type", "bridge"])?;
            ip(&["-n", &fabric, "link", "set", &format!("rail{rail}"), "up"])?;
        }
        for index in 0..spec.hosts {
            let namespace = cluster.namespace(&format!("{name}-h{index}"))?;
            let mut interfaces = Vec::new();
            for rail in 0..spec.rails {
                let (interface, address) = (format!("rail{rail}"), rail_address(rail, index as u8 + 1));
                cable(&fabric, &format!("h{index}r{rail}"), &namespace, &interface, rail, spec.link_mbps)?;
                ip(&["-n", &namespace, "addr", "add", &format!("{address}/24"), "dev", &interface])?;
                // This address's traffic stays on its rail (or goes through the spine).
                let table = (100 + rail).to_string();
                ip(&["-n", &namespace, "rule", "add", "from", &address.to_string(), "lookup", &table])?;
                ip(&["-n", &namespace, "route", "add", &format!("{}/24", rail_address(rail, 0)), "dev", &interface, "src", &address.to_string(), "table", &table])?;
                let beyond: &[&str] = match spec.spine {
                    Some(_) => &["default", "via", &rail_address(rail, 254).to_string()],
                    None => &["unreachable", "default"],
                };
                ip(&[&["-n", &namespace, "route", "add"], beyond, &["table", &table]].concat())?;
                interfaces.push((interface, address));
            }
            cluster.hosts.push(Host { namespace, name: format!("h{index}"), id: format!("{name}-h{index}"), interfaces });
        }
        cluster.write_host_names()?;
        if let Some(rate) = spec.spine {
            let router = cluster.namespace(&format!("{name}-spine"))?;
            for rail in 0..spec.rails {
                let interface = format!("rail{rail}");
                cable(&fabric, &format!("spine{rail}"), &router, &interface, rail, rate)?;
                ip(&["-n", &router, "addr", "add", &format!("{}/24", rail_address(rail, 254)), "dev", &interface])?;
            }
            run_in(&router, &["sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"])?;
        }
        Ok(cluster)
    }

    /// The cluster of `spec` for a test: `None` (the test says it is skipped) only when
    /// `OXCCL_TEST_NETNS=0`; a cluster that cannot be made fails the test, saying why.
    pub fn or_skip(spec: &Spec) -> Option<Cluster> {
        if std::env::var("OXCCL_TEST_NETNS").as_deref() == Ok("0") {
            eprintln!("skipped: OXCCL_TEST_NETNS=0 (no network namespaces)");
            return None;
        }
        match Cluster::new(spec) {
            Ok(cluster) => Some(cluster),
            Err(reason) => panic!(
                "this test needs a simulated cluster (network namespaces, veth, bridges, tc: root and iproute2) and none could be made: {reason}. \
                 Run as root with iproute2 installed (scripts/install-deps.sh), or set OXCCL_TEST_NETNS=0 to skip such tests"
            ),
        }
    }

    /// The namespaces' names (for checks: each is gone once the cluster is dropped).
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// The cluster's own directory (under the temporary directory, named like its
    /// namespaces), deleted on drop.
    pub fn directory(&self) -> &Path {
        &self.directory
    }

    /// A temporary directory for the jobs this cluster runs (`TMPDIR` of its launchers'
    /// commands), made on first use. Open MPI keeps its session directory (shared-memory
    /// backing files among them) under `TMPDIR`, named by host name and user: the hosts of
    /// two clusters made at once are both `h0`, `h1`, ..., and /tmp is the machine's, so
    /// without this two tests' jobs would share one.
    pub fn job_tmpdir(&self) -> Result<PathBuf, String> {
        let dir = self.directory.join("job-tmp");
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// The file `scripts/netns-rsh.sh` reads (`NETNS_RSH_HOSTS`): per host a line
    /// `<namespace> <host name> <address>...`, its addresses on every rail.
    pub fn host_map(&self) -> PathBuf {
        self.directory.join("hosts")
    }

    /// The host names, resolving inside every host (`/etc/netns/<namespace>/hosts`, which
    /// `ip netns exec` mounts on /etc/hosts), and the agent's map.
    fn write_host_names(&self) -> Result<(), String> {
        let mut etc_hosts = String::from("127.0.0.1 localhost\n::1 localhost\n");
        let mut map = String::new();
        for host in &self.hosts {
            etc_hosts += &format!("{} {}\n", host.address(0), host.name);
            let addresses: Vec<String> = host.interfaces.iter().map(|(_, address)| address.to_string()).collect();
            map += &format!("{} {} {}\n", host.namespace, host.name, addresses.join(" "));
        }
        write(&self.host_map(), &map)?;
        for host in &self.hosts {
            write(&Path::new(NETNS_ETC).join(&host.namespace).join("hosts"), &etc_hosts)?;
        }
        Ok(())
    }

    fn namespace(&mut self, name: &str) -> Result<String, String> {
        ip(&["netns", "add", name])?;
        self.namespaces.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"])?;
        // Replies through the spine arrive on another rail than their source's subnet: no
        // reverse-path filter (interfaces made later take the default).
        run_in(name, &["sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter && echo 0 > /proc/sys/net/ipv4/conf/default/rp_filter"])?;
        Ok(name.to_string())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for namespace in self.namespaces.iter().rev() {
            if let Err(e) = ip(&["netns", "delete", namespace]) {
                eprintln!("could not delete network namespace {namespace}: {e}");
            }
            remove_dir(&Path::new(NETNS_ETC).join(namespace));
        }
        remove_dir(&self.directory);
    }
}

/// Where `ip netns exec` finds the files it mounts over /etc for a namespace.
const NETNS_ETC: &str = "/etc/netns";

/// Writes `text` to `path`, making its directory.
fn write(path: &Path, text: &str) -> Result<(), String> {
    let written = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(path, text));
    written.map_err(|e| format!("writing {}: {e}", path.display()))
}

fn remove_dir(path: &Path) {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => eprintln!("could not delete {}: {e}", path.display()),
        _ => {}
    }
}

/// Address `host` of rail `rail`'s subnet (`host` 0: the subnet).
fn rail_address(rail: usize, host: u8) -> Ipv4Addr {
    Ipv4Addr::new(10, 100 + rail as u8, 0, host)
}

/// A veth pair from `fabric` (end `fabric_end`, on rail `rail`'s bridge) into `namespace`
/// (end `end`), both ends up and, with a rate, shaped both ways.
fn cable(fabric: &str, fabric_end: &str, namespace: &str, end: &str, rail: usize, mbps: Option<u64>) -> Result<(), String> {
    ip(&["-n", fabric, "link", "add", fabric_end, "type", "veth", "peer", "name", end, "netns", namespace])?;
    ip(&["-n", fabric, "link", "set", fabric_end, "master", &format!("rail{rail}")])?;
    ip(&["-n", fabric, "link", "set", fabric_end, "up"])?;
    ip(&["-n", namespace, "link", "set", end, "up"])?;
    if let Some(mbps) = mbps {
        // Burst: 10 ms at the rate, at least 64 KiB (tbf needs one timer tick's worth).
        let burst = (mbps * 1_000_000 / 8 / 100).max(64 << 10).to_string();
        let rate = format!("{mbps}mbit");
        for (side, device) in [(fabric, fabric_end), (namespace, end)] {
            tc(&["-n", side, "qdisc", "add", "dev", device, "root", "tbf", "rate", &rate, "burst", &burst, "latency", "100ms"])?;
        }
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<(), String> {
    checked("ip", args)
}

fn tc(args: &[&str]) -> Result<(), String> {
    checked("tc", args)
}

fn run_in(namespace: &str, command: &[&str]) -> Result<(), String> {
    checked("ip", &[&["netns", "exec", namespace], command].concat())
}

fn checked(program: &str, args: &[&str]) -> Result<(), String> {
    let mut command = Command::new(program);
    command.args(args);
    let output = match command.output() {
        Ok(output) => output,
        Err(e) => return Err(format!("cannot run {program}: {e}")),
    };
    if !output.status.success() {
        return Err(format!("`{program} {}` failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr).trim()));
    }
    Ok(())
}

/// Deletes what clusters of test processes that no longer exist (killed before they could
/// drop their clusters) left: a Slurm's daemons first, then namespaces, their /etc/netns
/// files and the clusters' directories.
fn delete_orphans() {
    let orphans = |directory: &Path| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(directory) else { return Vec::new() };
        let orphaned = |name: &str| {
            let pid = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()).and_then(|pid| pid.parse::<u32>().ok());
            pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        };
        entries.flatten().filter(|entry| orphaned(&entry.file_name().to_string_lossy())).map(|entry| entry.path()).collect()
    };
    for directory in orphans(&std::env::temp_dir()) {
        slurm::stop_orphaned_daemons(&directory);
        remove_dir(&directory);
    }
    for namespace in orphans(Path::new("/var/run/netns")) {
        let _ = ip(&["netns", "delete", &namespace.file_name().unwrap_or_default().to_string_lossy()]);
    }
    for files in orphans(Path::new(NETNS_ETC)) {
        remove_dir(&files);
    }
}

/// How long a test should give a process in a cluster (namespaced processes start as fast
/// as others; this is the bound a hang is caught by).
pub const PROCESS_TIMEOUT: Duration = Duration::from_secs(120);
