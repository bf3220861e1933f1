//! The NIC near a process from NCCL's topology XML (NCCL_TOPO_FILE): what PXN on the host
//! path takes as each rank's own NICs when it sees several.

#[path = "fixtures/mod.rs"]
mod fixtures;

use oxccl_topology::layout::{cpu_list, cpumask, nets_near_cpus, allowed_cpus};
use oxccl_topology::{PathSettings, System, Topology, XmlNode};

/// Two sockets (NUMA nodes 0 and 1, CPUs 0-1 and 2-3), each with a NIC of its own on its
/// host bridge: `rail0` under socket 0, `rail1` under socket 1.
fn two_sockets() -> Topology {
    let socket = |numa: i32, mask: &str, nic: String| fixtures::cpu(numa, 0x8f, &[nic]).replacen(&format!("numaid=\"{numa}\""), &format!("numaid=\"{numa}\" affinity=\"{mask}\""), 1);
    let xml = fixtures::system(&[
        socket(0, "00000003", fixtures::nic("0000:10:00.0", "rail0", 0, 100, 0x10, "32.0 GT/s PCIe")),
        socket(1, "0000000c", fixtures::nic("0000:90:00.0", "rail1", 1, 100, 0x90, "32.0 GT/s PCIe")),
    ]);
    let xml = XmlNode::parse(&xml, None).unwrap();
    Topology::new(System::from_xml(&xml).unwrap(), PathSettings::default()).unwrap()
}

#[test]
fn affinity_masks_read_as_sysfs_writes_them() {
    assert_eq!(cpumask("00000000,0000ffff"), Some((0..16).collect()));
    assert_eq!(cpumask("1"), Some(vec![0]));
    assert_eq!(cpumask("f,00000001"), Some(vec![0, 32, 33, 34, 35]));
    assert_eq!(cpumask("ffffffff,ffffffff").map(|c| c.len()), Some(64));
    assert_eq!(cpumask("xyz"), None);
    assert_eq!(cpu_list("0-3,8"), Some(vec![0, 1, 2, 3, 8]));
    assert_eq!(cpu_list(" 5 "), Some(vec![5]));
    assert_eq!(cpu_list("2-x"), None);
    assert!(!allowed_cpus().is_empty(), "this process runs on some CPU");
}

#[test]
fn a_process_gets_the_nic_of_the_socket_it_runs_on() {
    let t = two_sockets();
    // On socket 0 its NIC is one PCIe hop away; socket 1's is across the SMP link.
    assert_eq!(nets_near_cpus(&t, &[0]), Some(vec!["rail0".to_string()]));
    assert_eq!(nets_near_cpus(&t, &[0, 1]), Some(vec!["rail0".to_string()]));
    assert_eq!(nets_near_cpus(&t, &[3]), Some(vec!["rail1".to_string()]));
    // Bound across both sockets (or to no CPU the file knows): no NIC is nearer than another.
    assert_eq!(nets_near_cpus(&t, &[1, 2]), None);
    assert_eq!(nets_near_cpus(&t, &[7]), None);
    assert_eq!(nets_near_cpus(&t, &[]), None);
}

#[test]
fn without_affinities_no_nic_is_nearer() {
    let xml = fixtures::system(&[fixtures::cpu(0, 0x8f, &[fixtures::nic("0000:10:00.0", "rail0", 0, 100, 0x10, "32.0 GT/s PCIe")])]);
    let t = Topology::new(System::from_xml(&XmlNode::parse(&xml, None).unwrap()).unwrap(), PathSettings::default()).unwrap();
    assert_eq!(nets_near_cpus(&t, &[0]), None);
}
