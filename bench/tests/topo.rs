//! oxccl-topo as users run it: the NICs nearest the CPUs a rank runs on, from a topology
//! file, and a bad CPU list named; the routes of oxccl's GPU kernels (`--kernels`).

use std::process::{Command, Output};
use std::time::Duration;

/// Two NUMA nodes (CPUs 0-1 and 2-3), a NIC under each.
const TWO_SOCKETS: &str = r#"<system version="1">
  <cpu host_hash="0x1" numaid="0" affinity="00000003" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:10:00.0" class="0x020000" vendor="0x8086" device="0x1592" subsystem_vendor="0x8086" subsystem_device="0x0002" link_speed="16.0 GT/s PCIe" link_width="16">
      <nic><net name="rail0" dev="0" speed="100000" port="1" latency="0" guid="0x100" maxconn="65536" gdr="0"/></nic>
    </pci>
  </cpu>
  <cpu host_hash="0x1" numaid="1" affinity="0000000c" arch="x86_64" vendor="GenuineIntel" familyid="6" modelid="143">
    <pci busid="0000:90:00.0" class="0x020000" vendor="0x8086" device="0x1592" subsystem_vendor="0x8086" subsystem_device="0x0002" link_speed="16.0 GT/s PCIe" link_width="16">
      <nic><net name="rail1" dev="1" speed="100000" port="1" latency="0" guid="0x101" maxconn="65536" gdr="0"/></nic>
    </pci>
  </cpu>
</system>
"#;

fn topo(cpus: &str) -> Output {
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("topo-two-sockets-{}.xml", std::process::id()));
    std::fs::write(&file, TWO_SOCKETS).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl-topo"));
    cmd.arg("--topo-file").arg(&file).args(["--host", "-b", "8", "-e", "8", "--cpus", cpus]).env_remove("NCCL_TOPO_FILE").env_remove("NCCL_TOPO_DUMP_FILE");
    oxccl_testkit::run(cmd, Duration::from_secs(60))
}

#[test]
fn the_nic_nearest_a_ranks_cpus() {
    for (cpus, nic) in [("0", "rail0"), ("2-3", "rail1")] {
        let out = topo(cpus);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let section = stdout.split("# NICs nearest CPUs").nth(1).unwrap_or_else(|| panic!("no NIC section:\n{stdout}"));
        assert_eq!(section.lines().nth(1), Some(nic), "--cpus {cpus}:\n{section}");
    }
    let spanning = topo("1-2");
    assert!(String::from_utf8_lossy(&spanning.stdout).contains("none nearer than another"));
    let bad = topo("x");
    assert!(!bad.status.success() && String::from_utf8_lossy(&bad.stderr).contains("--cpus \"x\""));
}

/// `--kernels`: the GPU kernels' routes from the settings, here the defaults for 4 ranks
/// on one host (the one-hop kernel for small all_reduces, two shots over LL128 at 2 MiB)
/// and with NCCL_ALGO=ring (no one-hop kernel); a rank count of two hosts gives
/// the network kernels' choices (the tree for a large all_reduce).
#[test]
fn the_gpu_kernels_routes() {
    let file = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("topo-kernels-{}.xml", std::process::id()));
    std::fs::write(&file, TWO_SOCKETS).unwrap();
    let run = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_oxccl-topo"));
        cmd.arg("--topo-file").arg(&file).args(["--kernels", "--choices-only", "--nranks", "4", "-b", "8", "-e", "2M", "-f", "512"]).args(extra);
        for name in ["NCCL_TOPO_FILE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_TUNER_PLUGIN", "OXCCL_GPU_DIRECT_BYTES", "OXCCL_GPU_DIRECT_LL128_BYTES", "OXCCL_GPU_TWO_SHOT_BYTES", "OXCCL_GPU_LL_BYTES", "NCCL_MAX_NCHANNELS", "NCCL_MIN_NCHANNELS"] {
            cmd.env_remove(name);
        }
        let out = oxccl_testkit::run(cmd, Duration::from_secs(60));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let rows: Vec<Vec<String>> = String::from_utf8_lossy(&out.stdout).lines().map(|l| l.split_whitespace().map(str::to_string).collect()).collect();
        rows
    };
    let row = |rows: &[Vec<String>], collective: &str, bytes: &str| rows.iter().find(|r| r.first().map(String::as_str) == Some(collective) && r.get(1).map(String::as_str) == Some(bytes)).cloned().unwrap_or_else(|| panic!("no {collective} {bytes} row in {rows:?}"));
    let defaults = run(&[]);
    assert_eq!(row(&defaults, "AllReduce", "8")[2..], ["one", "hop", "LL", "-"]);
    assert_eq!(row(&defaults, "AllReduce", "2097152")[2..], ["two", "shots", "LL128", "-"]);
    let ring = run(&["--algo", "ring"]);
    assert_eq!(row(&ring, "AllReduce", "8")[2..], ["Ring", "LL", "1"]);
    let hosts = run(&["--nnodes", "2"]);
    assert_eq!(row(&hosts, "AllReduce", "2097152")[2], "Tree");
}
