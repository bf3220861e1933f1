//! A Slurm across the hosts of a [`Cluster`], as on a cluster of machines: slurmctld in the
//! first host, one slurmd in every host (`slurmd -N <host name>`), each node named by its
//! host's name with its rail-0 address as `NodeAddr`, so that `srun -N 3` places tasks in
//! three hosts. Everything of this Slurm lives in the cluster's directory (configuration,
//! state, spool, logs, pid files), so that it runs beside the machine's own Slurm (the
//! single-host one of `scripts/test.sh`) and beside other tests' clusters; its daemons
//! listen in their hosts' namespaces, on Slurm's usual ports.
//!
//! What the hosts share and Slurm must not: the file system. Per node, by Slurm's `%n`:
//! spool directories, pid and log files, and `TmpFS` (`srun --mpi=pmix` makes a directory
//! named by the job and step there on every node of the step). munge is shared as on a
//! cluster with one key: the machine's munged, whose socket is a file, reachable from every
//! namespace (`slurm/start-single-host.sh` starts it).
//!
//! Debian 12's slurmd (22.05) will not start without a cgroup file system, whatever its
//! proctrack and task plugins (it initialises its cgroup plugin regardless: "No filesystem
//! mounted on /sys/fs/cgroup", "Unable to initialize cgroup plugin"), and `ip netns exec`
//! mounts a fresh /sys for the namespace, without one: each slurmd mounts the machine's
//! cgroup hierarchies again, in the mount namespace `ip netns exec` gave it (the same
//! hierarchies, not new ones; processes are tracked by parentage, `proctrack/linuxproc`).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::Cluster;

/// How long the daemons get to bring every node up.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The partition holding every host.
const PARTITION: &str = "hosts";

/// Mounts the cgroup file systems of the machine (those of pid 1's mount namespace) in this
/// mount namespace, then runs its arguments.
const WITH_CGROUPS: &str = r#"while read -r source dir type options rest; do
  case $dir in /sys/fs/cgroup|/sys/fs/cgroup/*) ;; *) continue ;; esac
  case $type in
    tmpfs|cgroup|cgroup2) mkdir -p "$dir" && mount -t "$type" -o "$options" "$source" "$dir" || exit 1 ;;
  esac
done < /proc/1/mounts
exec "$@""#;

/// A running Slurm of a cluster's hosts; its jobs are cancelled and its daemons stopped on
/// drop.
pub struct Slurm<'a> {
    cluster: &'a Cluster,
    directory: PathBuf,
    /// (what it is, the process), slurmds first.
    daemons: Vec<(String, Child)>,
}

impl<'a> Slurm<'a> {
    /// Starts the Slurm of `cluster` and waits until every node takes work, or says why it
    /// could not (a daemon's exit or a node not idle within a minute, with the daemons' log
    /// tails; munge not answering).
    pub fn start(cluster: &'a Cluster) -> Result<Slurm<'a>, String> {
        let munge = Command::new("sh").args(["-c", "munge -n | unmunge"]).output().map_err(|e| format!("cannot run munge: {e}"))?;
        if !munge.status.success() {
            return Err(format!(
                "munge does not round-trip a credential (is munged running? slurm/start-single-host.sh starts it): {}",
                String::from_utf8_lossy(&munge.stderr).trim()
            ));
        }
        let directory = cluster.directory().join("slurm");
        let mut slurm = Slurm { cluster, directory, daemons: Vec::new() };
        slurm.write_config()?;
        let controller = &cluster.hosts[0];
        slurm.spawn("slurmctld".into(), controller.login_command("slurmctld"))?;
        for host in &cluster.hosts {
            let mut slurmd = host.login_command("sh");
            slurmd.args(["-c", WITH_CGROUPS, "sh", "slurmd", "-D", "-f"]).arg(slurm.config()).args(["-N", &host.name]);
            slurm.spawn(format!("slurmd {}", host.name), slurmd)?;
        }
        slurm.wait_for_idle_nodes()?;
        Ok(slurm)
    }

    /// The Slurm of `cluster` for a test: `None` (the test says it is skipped) unless
    /// `OXCCL_TEST_SLURM=1` (as for the other srun tests: scripts/test.sh sets it, with munged
    /// running); a Slurm that cannot start fails the test, saying why.
    pub fn or_skip(cluster: &'a Cluster) -> Option<Slurm<'a>> {
        if std::env::var("OXCCL_TEST_SLURM").as_deref() != Ok("1") {
            eprintln!("skipped: set OXCCL_TEST_SLURM=1 with munged running (scripts/test.sh does both)");
            return None;
        }
        Some(Slurm::start(cluster).unwrap_or_else(|reason| panic!("the cluster's Slurm did not start: {reason}")))
    }

    /// `srun` in the first host, with `args` (`-N 3 -n 6`, ...) after a 2-minute time limit
    /// and `--kill-on-bad-exit=1`; the program and its arguments go after. The tasks get
    /// srun's environment, as Slurm passes it: `NCCL_SOCKET_IFNAME==rail0`, a 60 s collective
    /// timeout, PATH, HOME, LD_LIBRARY_PATH, the cluster's own TMPDIR
    /// ([`Cluster::job_tmpdir`]), and what the caller adds.
    pub fn srun(&self, args: &[&str]) -> Command {
        let mut command = self.slurm_command("srun");
        if let Ok(tmp) = self.cluster.job_tmpdir() {
            command.env("TMPDIR", tmp);
        }
        command.env("NCCL_SOCKET_IFNAME", "=rail0").env("OXCCL_COLL_TIMEOUT_MS", "60000").args(["--time=2", "--kill-on-bad-exit=1"]).args(args);
        command
    }

    fn config(&self) -> PathBuf {
        self.directory.join("slurm.conf")
    }

    /// A Slurm client command in the first host, told this Slurm's configuration, with
    /// nothing of the test process's environment but PATH, HOME, LD_LIBRARY_PATH and TMPDIR.
    fn slurm_command(&self, program: &str) -> Command {
        let mut command = self.cluster.hosts[0].login_command(program);
        command.env("SLURM_CONF", self.config());
        command
    }

    /// slurm.conf: every host a node with the CPUs, sockets, cores and memory that slurmd
    /// detects on this machine (a node configured with more than it has would be drained).
    fn write_config(&self) -> Result<(), String> {
        let detected = Command::new("slurmd").arg("-C").output().map_err(|e| format!("cannot run slurmd -C (scripts/install-deps.sh installs slurm-wlm): {e}"))?;
        let detected = String::from_utf8_lossy(&detected.stdout);
        // "NodeName=<host> CPUs=.. Boards=.. ... RealMemory=..", then "UpTime=..".
        let hardware = detected.lines().next().and_then(|line| line.split_once(' ')).map(|(_, rest)| rest.to_string()).filter(|rest| rest.contains("CPUs="));
        let hardware = hardware.ok_or_else(|| format!("slurmd -C did not describe this machine: {detected}"))?;
        let directory = &self.directory;
        let per_host = self.cluster.hosts.iter().flat_map(|host| [directory.join("spool").join(&host.name), directory.join("tmp").join(&host.name)]);
        for path in std::iter::once(directory.join("state")).chain(per_host) {
            std::fs::create_dir_all(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        }
        let controller = &self.cluster.hosts[0];
        let d = directory.display();
        let mut config = format!(
            "# Written by oxccl_testkit::cluster::slurm: one slurmd per namespaced host.\n\
             ClusterName=oxccl\n\
             SlurmctldHost={}({})\n\
             SlurmUser=root\nSlurmdUser=root\n\
             AuthType=auth/munge\nCredType=cred/munge\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n\
             MpiDefault=none\nReturnToService=2\nSchedulerType=sched/backfill\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool/%n\n\
             TmpFS={d}/tmp/%n\n\
             SlurmctldPidFile={d}/slurmctld.pid\nSlurmdPidFile={d}/slurmd-%n.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd-%n.log\n",
            controller.name,
            controller.address(0)
        );
        for host in &self.cluster.hosts {
            config += &format!("NodeName={} NodeAddr={} {hardware} State=UNKNOWN\n", host.name, host.address(0));
        }
        let names: Vec<&str> = self.cluster.hosts.iter().map(|host| host.name.as_str()).collect();
        config += &format!("PartitionName={PARTITION} Nodes={} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n", names.join(","));
        super::write(&self.config(), &config)
    }

    /// Starts a daemon in the foreground (`-D`), its output to `<name>.out` beside the logs.
    fn spawn(&mut self, name: String, mut command: Command) -> Result<(), String> {
        if name == "slurmctld" {
            command.args(["-D", "-f"]).arg(self.config());
        }
        let output = self.directory.join(format!("{}.out", name.replace(' ', "-")));
        let file = File::create(&output).map_err(|e| format!("creating {}: {e}", output.display()))?;
        let error_file = file.try_clone().map_err(|e| format!("{}: {e}", output.display()))?;
        let child = command.stdin(Stdio::null()).stdout(file).stderr(error_file).spawn().map_err(|e| format!("starting {name}: {e}"))?;
        self.daemons.push((name, child));
        Ok(())
    }

    /// Waits until `sinfo` shows every node idle, failing early when a daemon exits.
    fn wait_for_idle_nodes(&mut self) -> Result<(), String> {
        let start = Instant::now();
        let mut states = String::new();
        while start.elapsed() < START_TIMEOUT {
            let exited = self.daemons.iter_mut().find_map(|(name, child)| child.try_wait().ok().flatten().map(|status| format!("{name} exited ({status})")));
            if let Some(exited) = exited {
                return Err(format!("{exited} while starting\n{}", self.log_tails()));
            }
            let output = self.slurm_command("sinfo").args(["-h", "-N", "-o", "%N %T"]).output().map_err(|e| format!("cannot run sinfo: {e}"))?;
            states = String::from_utf8_lossy(&output.stdout).trim().to_string();
            let idle = states.lines().filter(|line| line.ends_with(" idle")).count();
            if idle == self.cluster.hosts.len() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("the nodes were not all idle after {START_TIMEOUT:?}; sinfo says:\n{states}\n{}", self.log_tails()))
    }

    /// The last lines of every daemon's log and output.
    pub fn log_tails(&self) -> String {
        let mut tails = String::new();
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.directory).into_iter().flatten().flatten().map(|entry| entry.path()).collect();
        files.sort();
        for path in files.iter().filter(|path| path.extension().is_some_and(|extension| extension == "log" || extension == "out")) {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            tails += &format!("--- last lines of {}\n{}\n", path.display(), lines[lines.len().saturating_sub(12)..].join("\n"));
        }
        tails
    }
}

impl Drop for Slurm<'_> {
    /// Cancels every job (their steps' processes end with them), then stops the daemons:
    /// SIGTERM, and SIGKILL for one still there after 10 s.
    fn drop(&mut self) {
        let cancelled = self.slurm_command("scancel").arg(format!("--partition={PARTITION}")).output();
        if cancelled.is_ok_and(|output| output.status.success()) {
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs(10) {
                match self.slurm_command("squeue").arg("-h").output() {
                    Ok(output) if output.status.success() && !output.stdout.is_empty() => std::thread::sleep(Duration::from_millis(100)),
                    _ => break,
                }
            }
        }
        for (name, child) in &mut self.daemons {
            let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
            let start = Instant::now();
            while matches!(child.try_wait(), Ok(None)) && start.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            if matches!(child.try_wait(), Ok(None)) {
                eprintln!("{name} ignored SIGTERM for 10 s: killing it");
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

/// Kills the daemons of a Slurm whose test process was killed before it could stop them:
/// the pids in its pid files, each only if its command line names this directory (the
/// daemons were started with `-f <directory>/slurm/slurm.conf`; a pid may have been reused).
pub(super) fn stop_orphaned_daemons(cluster_directory: &Path) {
    let directory = cluster_directory.join("slurm");
    let Ok(entries) = std::fs::read_dir(&directory) else { return };
    for path in entries.flatten().map(|entry| entry.path()).filter(|path| path.extension().is_some_and(|extension| extension == "pid")) {
        let Some(pid) = std::fs::read_to_string(&path).ok().and_then(|text| text.trim().parse::<u32>().ok()) else { continue };
        let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&command_line).contains(&*directory.to_string_lossy()) {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
    }
}
