//! NCCL's tuning model on NCCL's own dump of the one-H200 machine reproduces, digit for
//! digit, the latency/bandwidth table NCCL 2.28 printed for that run (2 ranks on 2 hosts
//! through the socket Net on `lo`; reference/topo in the shared notes, copied as fixtures).

use oxccl_topology::layout::ChannelBounds;
use oxccl_topology::search::SearchSettings;
use oxccl_topology::{PathSettings, System, Topology, XmlNode};
use oxccl_tuning::{gpu_setup, Algorithm, Collective, Constants, NcclModel, Protocol};

const DUMP: &str = include_str!("../../topology/tests/fixtures/nccl-2.28-h200x1.xml");
const TUNING: &str = include_str!("../../topology/tests/fixtures/nccl-2.28-h200x1-two-hosts-tuning.txt");

fn model() -> NcclModel {
    let topology = Topology::new(System::from_xml(&XmlNode::parse(DUMP, None).unwrap()).unwrap(), PathSettings::default()).unwrap();
    // The other host is the same machine (NCCL_HOSTID), rank 1 there.
    let setup = gpu_setup(&topology, 2, 2, &SearchSettings::default(), ChannelBounds::default()).unwrap();
    assert_eq!(setup.layout.rings.len(), 2, "NCCL: 2 coll channels");
    NcclModel::new(setup.input, &Constants::default())
}

#[test]
fn the_table_nccl_printed() {
    let expected: Vec<&str> = TUNING.lines().filter_map(|l| l.strip_prefix("NCCL INFO ")).filter(|l| l.contains('|') && !l.starts_with("threadThresholds")).collect();
    let printed = model().print();
    let got: Vec<&str> = printed.lines().collect();
    assert_eq!(got.len(), expected.len(), "{printed}");
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!(g.trim_end(), e.trim_end());
    }
    let m = model();
    let t = &m.thread_thresholds;
    let line = format!(
        "threadThresholds {}/{}/{} | {}/{}/{} | {} | {}",
        t[0][0], t[0][1], t[0][2], t[1][0], t[1][1], t[1][2], t[Algorithm::CollNetDirect as usize][2], t[Algorithm::CollNetChain as usize][2]
    );
    assert!(TUNING.contains(&line), "{line}");
}

#[test]
fn choices_follow_the_table() {
    let m = model();
    // Small all_reduce: Ring/LL (16.6 µs latency, the lowest available); large: Ring/Simple
    // (1.2 GB/s against LL's 0.6 and the tree's 0.9 GB/s).
    let best = |bytes| m.table(Collective::AllReduce, bytes, 1, false).best().map(|(a, p, _)| (a, p));
    assert_eq!(best(8), Some((Algorithm::Ring, Protocol::Ll)));
    assert_eq!(best(64 << 20), Some((Algorithm::Ring, Protocol::Simple)));
    // LL128 is off (the NIC hangs off the CPU: worse than PXN), CollNet and NVLS unavailable.
    let table = m.table(Collective::AllReduce, 1 << 20, 1, false);
    assert_eq!(table.get(Algorithm::Ring, Protocol::Ll128), None);
    assert_eq!(table.get(Algorithm::CollNetDirect, Protocol::Simple), None);
    // PAT for all_gather with one GPU per host.
    assert!(m.table(Collective::AllGather, 1 << 20, 1, false).get(Algorithm::Pat, Protocol::Simple).is_some());
    // time = latency + bytes / (1000 × GB/s): Ring/Simple all_reduce of 1.2 MB, ×1.4 plateau across hosts.
    let t = m.time(Collective::AllReduce, Algorithm::Ring, Protocol::Simple, 1_200_000, 1).unwrap();
    assert!((t - (36.4 * 1.4 + 1000.0)).abs() < 0.5, "{t}");
}
