//! The search on synthetic machines (NCCL topology XML the tests write): the rings, trees,
//! channels and NICs NCCL 2.28's rules call for, each with the reason it is expected.

#[path = "fixtures/mod.rs"]
mod fixtures;

use oxccl_topology::layout::{self, ChannelBounds, HostGraphs, P2pSettings};
use oxccl_topology::search::{compute, Graph, Pattern, SearchSettings};
use oxccl_topology::{Detail, NodeKind, NodeRef, PathKind, PathSettings, System, Topology, XmlNode};

fn topology(xml: &str) -> Topology {
    let xml = XmlNode::parse(xml, None).unwrap();
    Topology::new(System::from_xml(&xml).unwrap(), PathSettings::default()).unwrap()
}

fn graphs(t: &Topology, nranks: usize) -> (Graph, Graph) {
    let ring = compute(t, nranks, Pattern::Ring, 1, 32, &SearchSettings::default());
    let n = ring.channels.len();
    (ring.clone(), compute(t, nranks, Pattern::BalancedTree, n, n, &SearchSettings::default()))
}

fn net_name(t: &Topology, id: u64) -> String {
    let r = t.system.find(NodeKind::Net, id).expect("a NET of the system");
    match &t.system.node(r).detail {
        Detail::Net { name, .. } => name.clone(),
        _ => unreachable!(),
    }
}

fn gpu(i: usize) -> NodeRef {
    NodeRef { kind: NodeKind::Gpu, index: i }
}

fn net(i: usize) -> NodeRef {
    NodeRef { kind: NodeKind::Net, index: i }
}

/// 8 H100s on NVSwitches, a 400 Gb/s NIC per GPU on shared Gen5 switches, two sockets,
/// two such hosts (16 ranks).
#[test]
fn nvswitch_host_with_a_nic_per_gpu() {
    let t = topology(&fixtures::nvswitch_8gpu_8nic());
    // Every GPU pair: NVLink through the switch, 18 links x 20.6 GB/s.
    assert_eq!(t.path(gpu(0), gpu(5)).kind, PathKind::Nvl);
    assert!((t.path(gpu(0), gpu(5)).bandwidth - 370.8).abs() < 0.01);
    // Its own switch's NICs are one PCIe switch away; the others are reached through the
    // NVLink peer next to them (PXN), since that peer is PIX to the NIC and this GPU's own
    // path crosses the CPU (PHB) or the sockets (SYS).
    assert_eq!(t.path(gpu(0), net(1)).kind, PathKind::Pix);
    assert_eq!(t.path(gpu(0), net(2)).kind, PathKind::Pxn);
    assert_eq!(t.path(gpu(0), net(7)).kind, PathKind::Pxn);
    assert_eq!(t.intermediate_gpu(0, 7), Some(7), "NIC 7's own GPU carries GPU 0's traffic to it");
    // Rail alignment: two GPUs share two NICs; device numbers mirrored over the pair give GPU g NIC g.
    for g in 0..8 {
        assert_eq!(t.local_net(g, 0).unwrap(), g, "GPU {g}");
        assert_eq!(t.local_gpu(g).unwrap(), Some(g), "NIC {g}");
    }

    let (ring, tree) = graphs(&t, 16);
    // One ring channel per NIC: each channel starts at a NIC's own GPU (its local GPU is
    // tried first) and its 48 GB/s (the Gen5 x16 PCIe link, below the NIC's 50) fills that
    // GPU's PCIe link in and out, so no second channel fits on a NIC; 8 channels reach
    // the maximum a NIC set allows and the search stops there.
    assert_eq!(ring.channels.len(), 8);
    assert_eq!((ring.bw_inter, ring.type_intra, ring.type_inter), (48.0, PathKind::Nvl, PathKind::Pix));
    for (c, ch) in ring.channels.iter().enumerate() {
        // Enters by NIC c at GPU c, leaves by the same NIC (its port has the bandwidth back
        // out; cross-NIC is not needed), visiting all 8 GPUs once.
        assert_eq!(ch.ranks[0], c as i32);
        assert_eq!((net_name(&t, ch.nets.0), net_name(&t, ch.nets.1)), (format!("mlx5_{c}"), format!("mlx5_{c}")));
        let mut sorted = ch.ranks.clone();
        sorted.sort();
        assert_eq!(sorted, (0..8).collect::<Vec<_>>());
        // On NVSwitch systems only the index neighbours are tried, the previous one first
        // (NCCL's familiar "0 7 6 5 4 3 2 1"), so every ring walks the GPUs in index order,
        // one way or the other.
        let step = (ch.ranks[1] - ch.ranks[0] + 8) % 8;
        assert!(step == 1 || step == 7, "channel {c}: {:?}", ch.ranks);
        assert!((0..8).all(|i| (ch.ranks[(i + 1) % 8] - ch.ranks[i] + 8) % 8 == step), "channel {c}: {:?}", ch.ranks);
        // Downwards first; but an odd channel's downward ring would end at the previous
        // channel's first GPU, whose PCIe uplink the previous channel's exit (its last GPU
        // to its NIC on the same switch) already filled, so it is reached through PXN no
        // more: odd channels run upwards and end next to their NIC on the other GPU.
        assert_eq!(step, if c % 2 == 0 { 7 } else { 1 }, "channel {c}: {:?}", ch.ranks);
    }
    // The tree: sm90 keeps the balanced tree (NIC traffic split over the chain's first two
    // GPUs), the same 8 NICs; its chain runs up from the first GPU (trees try the next
    // neighbour... after the previous one, which the balanced pattern puts first).
    assert_eq!(tree.channels.len(), 8);
    assert_eq!(tree.pattern, Pattern::BalancedTree);
    for (c, ch) in tree.channels.iter().enumerate() {
        assert_eq!(ch.ranks[0], c as i32);
        assert_eq!(net_name(&t, ch.nets.0), format!("mlx5_{c}"));
    }

    // Two such hosts: every channel's ring joins host 0's order to host 1's (ranks 8..16).
    let mut second = t.clone();
    for n in &mut second.system.nodes[NodeKind::Gpu as usize] {
        if let Detail::Gpu { rank, .. } = &mut n.detail {
            *rank += 8;
        }
    }
    let (ring1, tree1) = graphs(&second, 16);
    let hosts = [HostGraphs { ring: ring.clone(), tree: tree.clone() }, HostGraphs { ring: ring1, tree: tree1 }];
    let laid = layout::layout(&hosts, 16, 90, ChannelBounds::default()).unwrap();
    // 8 channels doubled (every tree channel gets its twin on the mirrored tree): 16. The
    // sm90 doubling for rings above 45 GB/s across hosts applies below 16 channels only.
    assert_eq!(laid.rings.len(), 16);
    let expected: Vec<i32> = ring.channels[0].ranks.iter().copied().chain(ring.channels[0].ranks.iter().map(|r| r + 8)).collect();
    assert_eq!(laid.rings[0], expected);
    // Across 2 hosts the double binary tree is one edge: host 0's first GPU is the root on
    // tree 0, host 1's on the mirrored tree.
    assert_eq!(laid.trees[0][0].up, None);
    // Host 1 is host 0's second child, and a balanced tree keeps the parent and the second
    // child on the chain's first GPU (the first child goes to the second GPU).
    assert_eq!(laid.trees[0][8].up, Some(0));
    assert_eq!(laid.trees[8][8].up, None);
    assert_eq!(laid.trees[8][0].up, Some(8));

    // Point-to-point to a peer on GPU 5 of another host: rail 5's NIC, sent through GPU 5
    // (PXN level 2: the NIC's local GPU is an NVLink peer and PIX to it).
    let p2p = layout::p2p_net(&t, 0, 5, 0, P2pSettings::default()).unwrap();
    assert_eq!((p2p.net, p2p.proxy_rank), (5, 5));
    // Without PXN, GPU 0 keeps its own NIC.
    let own = layout::p2p_net(&t, 0, 5, 0, P2pSettings { pxn_level: 0, ..P2pSettings::default() }).unwrap();
    assert_eq!((own.net, own.proxy_rank), (0, 0));
    assert_eq!(layout::nic_map(&t, 0, P2pSettings::default()).unwrap().len(), 64);
}

/// 4 PCIe A100s: pairs on two Gen4 switches, one socket, no NVLink (4 ranks, one host).
#[test]
fn pcie_host() {
    let t = topology(&fixtures::pcie_4gpu());
    // Peers on one switch: PIX. Across switches the path crosses the host bridge (PHB),
    // beyond NCCL's default P2P level (PXB): that traffic is routed through the CPU.
    assert_eq!(t.path(gpu(0), gpu(1)).kind, PathKind::Pix);
    assert_eq!(t.path(gpu(1), gpu(2)).kind, PathKind::Phb);
    assert!(t.p2p(0, 1) && !t.p2p(1, 2));
    let (ring, tree) = graphs(&t, 4);
    // The PCI order 0 1 2 3 works first. Speed: the sm80 list's first below the GPUs' 24
    // GB/s is 20; two channels would need 2 x 20 x 6/5 (Intel's P2P overhead through the
    // host bridge) = 48 on the 24 GB/s switch uplinks, so one channel of 20, and lower
    // speeds give no more channel x bandwidth (2 x 10 = 20 only ties it with more hops).
    assert_eq!(ring.channels.len(), 1);
    assert_eq!(ring.channels[0].ranks, vec![0, 1, 2, 3]);
    assert_eq!((ring.bw_intra, ring.type_intra), (20.0, PathKind::Phb));
    // Below 25 GB/s channels are not duplicated; the tree takes the ring's channel count.
    assert_eq!(tree.channels.len(), 1);
    let laid = layout::layout(&[HostGraphs { ring, tree }], 4, 80, ChannelBounds::default()).unwrap();
    assert_eq!(laid.rings, vec![vec![0, 1, 2, 3], vec![0, 1, 2, 3]], "one channel, doubled for the second tree");
    assert_eq!(laid.trees[0][1].up, Some(0));
    assert_eq!(laid.trees[0][1].down, vec![2]);
}

/// Two sockets of 4 A100s, NVLink only within a socket (8 ranks, one host).
#[test]
fn two_sockets_with_nvlink_only_within_each() {
    let t = topology(&fixtures::split_nvlink_8gpu());
    assert_eq!(t.path(gpu(0), gpu(3)).kind, PathKind::Nvl);
    assert_eq!(t.path(gpu(0), gpu(4)).kind, PathKind::Sys);
    assert!(t.split_nvlink());
    let (ring, tree) = graphs(&t, 8);
    // Two NVLink islands: NCCL asks for at least 2 ring channels. Each ring crosses the
    // Skylake UPI (10 GB/s each way) once in each direction, so the two channels share it:
    // 5 GB/s each (the PCI links and NVLinks have room to spare).
    assert_eq!(ring.channels.len(), 2);
    assert_eq!((ring.bw_intra, ring.type_intra), (5.0, PathKind::Sys));
    for ch in &ring.channels {
        // Each island is traversed whole before crossing: the ring crosses the sockets exactly twice.
        let crossings = (0..8).filter(|&i| (ch.ranks[i] < 4) != (ch.ranks[(i + 1) % 8] < 4)).count();
        assert_eq!(crossings, 2, "{:?}", ch.ranks);
    }
    // A tree chain crosses the UPI once, one way: each of the 2 channels gets a direction at the full 10 GB/s.
    assert_eq!(tree.channels.len(), 2);
    assert_eq!(tree.bw_intra, 10.0);
    let first_socket = |ch: &oxccl_topology::search::Channel| ch.ranks[0] < 4;
    assert_ne!(first_socket(&tree.channels[0]), first_socket(&tree.channels[1]), "the two chains start on different sockets");
}

/// NCCL's own dump of the one-H200 machine loads and builds the graph NCCL built.
#[test]
fn nccls_h200_dump_builds_its_graph() {
    let t = topology(include_str!("fixtures/nccl-2.28-h200x1.xml"));
    assert_eq!(t.system.of(NodeKind::Gpu).len(), 1);
    // The socket Net on `lo` has no PCI device: a virtual NIC under the CPU, at 10 Gb/s.
    assert_eq!(t.path(gpu(0), net(0)).kind, PathKind::Phb);
    assert_eq!(t.path(gpu(0), net(0)).bandwidth, 1.25);
    // Two ranks on two hosts (NCCL_HOSTID): one ring channel at 1.2 GB/s (the sm90 list's
    // first speed under the NIC's 1.25); the tree may raise its within-host speed to twice
    // that (2.4), the GPU being alone on its host. These are the numbers NCCL printed
    // (ring 1.2 and tree 2.4 x .92 x .85 / 2 = 0.9 GB/s Simple all_reduce, in the fixture's TUNING lines).
    let (ring, tree) = graphs(&t, 2);
    assert_eq!((ring.channels.len(), ring.bw_intra, ring.bw_inter), (1, 1.2, 1.2));
    assert_eq!((tree.channels.len(), tree.bw_intra, tree.bw_inter, tree.pattern), (1, 2.4, 1.2, Pattern::Tree));
}
