//! `mpirun` (Open MPI) across the hosts of a [`Cluster`], as on a cluster of machines: a
//! hostfile of the hosts' rail-0 addresses, and `scripts/netns-rsh.sh` as the remote agent
//! in ssh's place, so that mpirun, run in the first host, starts its daemons (orted) in the
//! others, which start the ranks there. Open MPI's own traffic (the daemons' out-of-band
//! channel, MPI messages over its TCP BTL) goes over rail 0 as well: nothing of the test
//! process's loopback settings (`scripts/test.sh` sets them for everything) reaches the job.
//!
//! The agent gives the daemons a login's environment, not mpirun's, as ssh would: the ranks
//! of the other hosts see only what mpirun passes them (`-x`), and their host identity is
//! their host's name (the hosts share /dev/shm, so a leaked `NCCL_HOSTID` would make them
//! one host silently).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Cluster;

/// The remote agent, `scripts/netns-rsh.sh` of this repository.
pub fn agent() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().map(|root| root.join("scripts/netns-rsh.sh")).unwrap_or_default()
}

/// `mpirun` of `program` with `ranks_per_host` ranks in each host of `hosts` (indices into
/// the cluster's hosts), started in the first of them: rank `r` runs in host
/// `hosts[r / ranks_per_host]`. The ranks get `NCCL_SOCKET_IFNAME==rail0`, a 60 s collective
/// timeout and the variables of `env` (all passed with `-x`), and no `NCCL_HOSTID`; Open
/// MPI binds nothing (`--bind-to none`). Arguments for `program` may be added to the
/// command. Fails, saying why, when `hosts` is empty or names a host the cluster lacks, or
/// the hostfile cannot be written.
pub fn command(cluster: &Cluster, hosts: &[usize], ranks_per_host: usize, env: &[(&str, &str)], program: &Path) -> Result<Command, String> {
    command_over(cluster, hosts, ranks_per_host, env, program, "rail0")
}

/// [`command`], with MPI's messages over the TCP BTL on the interfaces `btl_interfaces`
/// (Open MPI's `btl_tcp_if_include`: e.g. `rail0,rail1`, every rail of a host, which Open
/// MPI pairs by subnet and stripes messages over); its daemons stay on rail 0.
pub fn command_over(cluster: &Cluster, hosts: &[usize], ranks_per_host: usize, env: &[(&str, &str)], program: &Path, btl_interfaces: &str) -> Result<Command, String> {
    if hosts.is_empty() || ranks_per_host == 0 {
        return Err(format!("mpirun on hosts {hosts:?} with {ranks_per_host} ranks each: no ranks"));
    }
    if let Some(missing) = hosts.iter().find(|&&host| host >= cluster.hosts.len()) {
        return Err(format!("mpirun on host {missing}: the cluster has {} hosts", cluster.hosts.len()));
    }
    let agent = agent();
    if !agent.exists() {
        return Err(format!("the remote agent {} is missing", agent.display()));
    }
    let lines: Vec<String> = hosts.iter().map(|&host| format!("{} slots={ranks_per_host}\n", cluster.hosts[host].address(0))).collect();
    let names: Vec<String> = hosts.iter().map(usize::to_string).collect();
    let hostfile = cluster.directory().join(format!("hostfile-{}-by-{ranks_per_host}", names.join("-")));
    super::write(&hostfile, &lines.concat())?;

    let tmp = cluster.job_tmpdir()?;
    let mut command = cluster.hosts[hosts[0]].login_command("mpirun");
    command
        // Open MPI's session directories under this cluster's own temporary directory
        // (Cluster::job_tmpdir), in mpirun and in the daemons it starts.
        .env("TMPDIR", &tmp)
        .env("OMPI_MCA_orte_tmpdir_base", &tmp)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("NETNS_RSH_HOSTS", cluster.host_map())
        .env("NCCL_SOCKET_IFNAME", "=rail0")
        .env("OXCCL_COLL_TIMEOUT_MS", "60000")
        .arg("--hostfile")
        .arg(&hostfile)
        .args(["-np", &(hosts.len() * ranks_per_host).to_string(), "--map-by", "slot", "--bind-to", "none"])
        .arg("--mca")
        .arg("plm_rsh_agent")
        .arg(&agent)
        // MPI's messages over its TCP BTL (UCX would choose transports of its own).
        .args(["--mca", "pml", "ob1", "--mca", "btl", "self,vader,tcp"])
        .args(["--mca", "oob_tcp_if_include", "rail0", "--mca", "btl_tcp_if_include", btl_interfaces])
        .args(["-x", "NCCL_SOCKET_IFNAME", "-x", "OXCCL_COLL_TIMEOUT_MS"]);
    for (name, value) in env {
        command.env(name, value).args(["-x", name]);
    }
    command.arg(program);
    Ok(command)
}
