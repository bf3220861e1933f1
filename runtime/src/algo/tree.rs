//! NCCL's double binary tree for all_reduce (`graph/trees.cc`, `device/all_reduce.h`
//! `runTreeSplit`). Two binary trees over the ranks, built so that (for even n) every
//! rank is a leaf in one and an inner node in the other; each tree carries half of every
//! channel's data. Where the ranks lie host by host ([`Shape::per_host`]), the two trees
//! span the hosts and each host's ranks form a chain below its head ([`trees`]), as NCCL's
//! trees across nodes do: one pair of network connections per tree and host link. In each tree a chunk is reduced from the leaves up to the root, which
//! writes the result and sends it back down; every rank receives it from its parent,
//! writes it and forwards it to its children.
//!
//! Each (channel, tree) has two lanes per rank — reduce up, broadcast down — so the next
//! chunk climbs while the previous one descends (NCCL splits its threads the same way). The
//! root has one lane: its reduce step also starts the broadcast. Tree t of channel c uses
//! connection channel 2c+t, so the two trees never share a FIFO.
//!
//! A node with several children keeps its partial sum in its own output chunk (received
//! from the first child, reduced with its input, written to `Recv`; then reduced with each
//! further child), so no scratch buffer is needed. The broadcast later overwrites that chunk
//! with the final result; it arrives only after this node sent its partial sum up, so the
//! two lanes never touch the chunk at the same time. In place, the first reduce reads the
//! input chunk and writes the output over it in one step, and nothing reads it after.

use super::{chunks, split_channels, Lane, Link, Role, Shape, Slice, Step, CHANNEL_GRANULE};

/// A rank's place in one tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeNode {
    pub parent: Option<usize>,
    pub children: Vec<usize>,
}

/// NCCL's `ncclGetBtree`: a binary tree rooted at 0, whose root has one child (the highest
/// power of two below n) and whose other nodes have up to two. Parent and children follow
/// from the lowest set bit of the rank.
pub fn binary_tree(nranks: usize, rank: usize) -> TreeNode {
    let mut bit = 1;
    while bit < nranks && bit & rank == 0 {
        bit <<= 1;
    }
    if rank == 0 {
        return TreeNode { parent: None, children: if nranks > 1 { vec![bit >> 1] } else { vec![] } };
    }
    let mut parent = (rank ^ bit) | (bit << 1);
    if parent >= nranks {
        parent = rank ^ bit;
    }
    let low = bit >> 1;
    let mut children = Vec::new();
    if low > 0 {
        children.push(rank - low);
        // The second child is rank + low, or the nearest rank + low/2^k that exists.
        let mut step = low;
        while step > 0 && rank + step >= nranks {
            step >>= 1;
        }
        if step > 0 {
            children.push(rank + step);
        }
    }
    TreeNode { parent: Some(parent), children }
}

/// NCCL's `ncclGetDtree`: tree 0 is [`binary_tree`]; tree 1 is its mirror (rank r plays
/// n-1-r) for even n, and the same tree shifted by one rank for odd n.
pub fn double_tree(nranks: usize, rank: usize) -> [TreeNode; 2] {
    let n = nranks;
    // Rank r plays `image(r)` in the second tree; `back` undoes it.
    let image = |r: usize| if n % 2 == 0 { n - 1 - r } else { (r + n - 1) % n };
    let back = |r: usize| if n % 2 == 0 { n - 1 - r } else { (r + 1) % n };
    let played = binary_tree(n, image(rank));
    let second = TreeNode { parent: played.parent.map(back), children: played.children.into_iter().map(back).collect() };
    [binary_tree(n, rank), second]
}

/// A rank's two trees, where the ranks lie host by host in blocks of `per_host` (NCCL's
/// trees across nodes with a chain inside each, `graph/connect.cc`): [`double_tree`] over
/// the hosts, and inside each host a chain through its ranks whose head alone talks to
/// other hosts — its parent host's head above it, its child hosts' heads and the chain's
/// next rank below. The chain runs in rank order in tree 0 and backwards in tree 1, so the
/// two trees leave a host by different ranks (and NICs). [`double_tree`] over the ranks on
/// one host, with one rank a host, or where the blocks do not tile the ranks.
pub fn trees(nranks: usize, per_host: usize, rank: usize) -> [TreeNode; 2] {
    let hosts = nranks / per_host.max(1);
    if per_host < 2 || hosts < 2 || nranks % per_host != 0 {
        return double_tree(nranks, rank);
    }
    let (host, local) = (rank / per_host, rank % per_host);
    let across = double_tree(hosts, host);
    [0, 1].map(|tree| {
        // The rank at place p of host h's chain, and this rank's place in its own.
        let at = |h: usize, p: usize| h * per_host + if tree == 0 { p } else { per_host - 1 - p };
        let place = if tree == 0 { local } else { per_host - 1 - local };
        let hosts = &across[tree];
        let parent = if place > 0 { Some(at(host, place - 1)) } else { hosts.parent.map(|h| at(h, 0)) };
        let mut children: Vec<usize> = (place + 1 < per_host).then(|| at(host, place + 1)).into_iter().collect();
        if place == 0 {
            children.extend(hosts.children.iter().map(|&h| at(h, 0)));
        }
        TreeNode { parent, children }
    })
}

pub(super) fn lanes(shape: &Shape, rank: usize) -> Vec<Lane> {
    if shape.nranks == 1 {
        let copy = Step::Copy { src: Slice::send(0, shape.count), dst: Slice::recv(0, shape.count) };
        return vec![Lane { role: Role::Local, steps: if shape.count > 0 { vec![copy] } else { vec![] } }];
    }
    let trees = trees(shape.nranks, shape.per_host, rank);
    let mut lanes = Vec::new();
    for (channel, (offset, len)) in split_channels(shape.count, shape.channels, CHANNEL_GRANULE).enumerate() {
        for (tree, (half, half_len)) in split_channels(len, 2, CHANNEL_GRANULE).enumerate() {
            let node = &trees[tree];
            let link = |peer| Link { peer, channel: 2 * channel + tree };
            let (mut up, mut down) = (Vec::new(), Vec::new());
            for (o, c) in chunks(offset + half, half_len, shape.chunk) {
                up_steps(node, &link, o, c, &mut up);
                down_steps(node, &link, o, c, &mut down);
            }
            lanes.push(Lane { role: Role::TreeUp { channel, tree }, steps: up });
            lanes.push(Lane { role: Role::TreeDown { channel, tree }, steps: down });
        }
    }
    lanes
}

/// Reduce chunk [o, o+c) from the children up to the parent; at the root, write the result
/// and start it down.
fn up_steps(node: &TreeNode, link: &dyn Fn(usize) -> Link, o: usize, c: usize, steps: &mut Vec<Step>) {
    let (input, output) = (Slice::send(o, c), Slice::recv(o, c));
    let Some((&last, first)) = node.children.split_last() else {
        // A leaf (every tree here has n >= 2 ranks, so a leaf has a parent).
        let parent = node.parent.expect("a leaf of a tree of two or more ranks has a parent");
        steps.push(Step::Send { to: link(parent), src: input });
        return;
    };
    // Partial sums of all children but the last go to the output chunk.
    for (i, &child) in first.iter().enumerate() {
        let local = if i == 0 { input } else { output };
        steps.push(Step::RecvReduceCopy { from: link(child), local, dst: output });
    }
    let local = if first.is_empty() { input } else { output };
    match node.parent {
        Some(parent) => steps.push(Step::RecvReduceSend { from: link(last), to: link(parent), local }),
        None => {
            let first_child = node.children[0];
            steps.push(Step::RecvReduceCopySend { from: link(last), to: link(first_child), local, dst: output });
            for &child in &node.children[1..] {
                steps.push(Step::Send { to: link(child), src: output });
            }
        }
    }
}

/// Receive the result of chunk [o, o+c) from the parent, write it, pass it to the children.
fn down_steps(node: &TreeNode, link: &dyn Fn(usize) -> Link, o: usize, c: usize, steps: &mut Vec<Step>) {
    let Some(parent) = node.parent else {
        return; // The root's up lane starts the broadcast.
    };
    let output = Slice::recv(o, c);
    match node.children.split_first() {
        None => steps.push(Step::Recv { from: link(parent), dst: output }),
        Some((&first, rest)) => {
            steps.push(Step::RecvCopySend { from: link(parent), to: link(first), dst: output });
            for &child in rest {
                steps.push(Step::Send { to: link(child), src: output });
            }
        }
    }
}
