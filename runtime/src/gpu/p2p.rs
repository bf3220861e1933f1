//! Sends and receives on GPU buffers: a group's small transfers go in one LL launch, the
//! others become lanes of `send` and `recv` steps over the direct channels, run by the
//! same kernel as the collectives. Both plans hold offsets from the group's lowest send
//! and lowest receive address (the launches' two bases), cached by them: a program whose
//! buffers move from call to call keeps its plans.

use oxccl_kernels::cuda::Specialization;

use oxccl_kernels::device::{lane, DevP2p, DevP2pLane, DevP2pMsg};

use super::{driver, CUstream, CacheKey, GpuBackend, Inner, Loaded, Plan, DIRECT_MOST_CHANNELS};
use crate::algo::{self, Collective};
use crate::error::{Error, Result};
use crate::DataType;

/// One send or receive of a group: `bytes` at device address `addr`, to or from `peer`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct P2p {
    pub send: bool,
    pub peer: usize,
    pub addr: u64,
    pub bytes: usize,
}

impl GpuBackend {
    /// Enqueues a group of sends and receives, checked by the communicator, on `stream`
    /// and returns. Sends to and receives from each peer pair up in order with the peer's
    /// (equal sizes, as NCCL requires); each transfer is split over the direct channels and
    /// runs beside the others, so a group exchanging with many peers never waits on one.
    /// Transfers with this rank itself are copies, paired in order.
    ///
    /// # Safety
    /// Every address must be device memory this GPU can access, holding `bytes`, untouched
    /// until the stream passes this point; `stream` as for [`GpuBackend::enqueue`].
    pub unsafe fn enqueue_p2p(&self, ops: &[P2p], stream: CUstream) -> Result<()> {
        self.inner.device.bind()?;
        if let Some(staged) = &self.staged {
            // SAFETY: the caller's contract.
            unsafe { staged.group(&self.inner, ops, stream)? };
            return self.mark(stream);
        }
        // SAFETY: the caller's contract.
        unsafe { self.launch_group(ops, stream)? };
        self.mark(stream)
    }

    /// Enqueues the group `ops`, whose peers and buffers the caller checked.
    ///
    /// # Safety
    /// As [`GpuBackend::enqueue_p2p`].
    pub(super) unsafe fn launch_group(&self, ops: &[P2p], stream: CUstream) -> Result<()> {
        let (inner, rank) = (&self.inner, self.rank());
        // Transfers with oneself: copies, the k-th send with the k-th receive (paired as
        // `call::check_own_transfers` checked).
        let own = |send: bool| ops.iter().filter(move |o| o.send == send && o.peer == rank && o.bytes > 0);
        let ll_limit = inner.p2p_ll.get().map_or(0, |p| p.limit);
        // Copies up to the LL limit run in the LL launch (a lane of their own: no copy
        // launch of its own, a few µs less); larger ones in the Simple launch beside its
        // transfers, or as driver copies where it has none.
        let (mut ll, mut copies) = (Vec::new(), Vec::new());
        for (s, r) in own(true).zip(own(false)) {
            if s.addr != r.addr {
                (if s.bytes <= ll_limit { &mut ll } else { &mut copies }).extend([*s, *r]);
            }
        }
        // Messages up to the LL limit go over LL (one launch), the rest over the Simple
        // FIFOs (a second launch): both ends of a message decide by its size alone. The
        // two launches never wait for each other's messages, so their order is free.
        let (small, mut simple): (Vec<P2p>, Vec<P2p>) = ops.iter().copied().filter(|o| o.peer != rank && o.bytes > 0).partition(|o| o.bytes <= ll_limit);
        ll.extend(small);
        if simple.is_empty() {
            for pair in copies.chunks(2) {
                let (s, r) = (pair[0], pair[1]);
                // SAFETY: both are the caller's device buffers of `bytes` (its contract).
                driver::check(unsafe { cudarc::driver::sys::cuMemcpyDtoDAsync_v2(r.addr, s.addr, s.bytes, stream) }, || "copying a send to this rank".into())?;
            }
        } else {
            // A driver copy ahead of the launch held its transfers back for as long as it
            // took: alltoall as a group on 2 H200s, 1 GiB, 1740 µs against the collective's
            // 1490, whose copy runs beside its sends (docs/PERFORMANCE.md).
            simple.extend(copies);
        }
        if ll.is_empty() && simple.is_empty() {
            return Ok(());
        }
        let loaded = inner.loaded(Specialization { dtype: DataType::Uint8, op: oxccl_kernels::Combine::Sum })?;
        if !ll.is_empty() {
            let (send_base, recv_base) = offsets_from_bases(&mut ll);
            // Whether the group is in place is a matter of its offsets (pairs_in_place, worked
            // out once per plan) and of one base for sends and receives (in the key).
            let one_base = send_base == recv_base;
            let plan = inner.cached_or(CacheKey::PointToPointLl { ops: ll, one_base }, |key| {
                let ops = key.transfers();
                let (lanes, msgs) = ll_lanes(ops, rank, one_base && pairs_in_place(ops, rank));
                let lanes_bytes = std::mem::size_of_val(&lanes[..]);
                let mut image = bytemuck::cast_slice::<DevP2pLane, u8>(&lanes).to_vec();
                image.extend_from_slice(bytemuck::cast_slice::<DevP2pMsg, u8>(&msgs));
                let count = lanes.len() as u32;
                inner.store(inner.state.lock(), key, &image, |at| Plan::Messages { lanes: count, at, msgs: at + lanes_bytes as u64 })
            })?;
            // SAFETY: the caller's buffers (the messages are offsets from these bases).
            unsafe { inner.launch_p2p_ll(&loaded, &plan, send_base, recv_base, stream)? };
        }
        if !simple.is_empty() {
            let (send_base, recv_base) = offsets_from_bases(&mut simple);
            let plan = inner.cached_or(CacheKey::PointToPoint(simple), |key| {
                let lanes = self.p2p_lanes(key.transfers());
                self.upload(key, &lanes, 1)
            })?;
            // Sends and receives never wait for the other side's other messages.
            self.announce(&plan, true, false);
            // SAFETY: as above.
            unsafe { inner.launch(&loaded, &plan, send_base, recv_base, None, false, stream, &|| "send/recv group".to_string())? };
        }
        Ok(())
    }

    /// A lane per peer, direction and channel (see [`lanes`]), a transfer spread over the
    /// direct exchange's channels; with OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS on one host, a
    /// send to the ring's next rank or a receive from its previous one over up to that many
    /// (init connects both on every channel; both ends see a transfer alike, one's next
    /// being the other's previous), and a launch of more lanes than [`P2P_MOST_BLOCKS`]
    /// folded onto that many blocks ([`fold`]). A collective's exchange never gets here
    /// (`Route::Exchange` takes blocks up to the LL limit, all over LL; larger ones run the
    /// executor's schedule), so the setting touches programs' groups only.
    fn p2p_lanes(&self, ops: &[P2p]) -> Vec<Vec<algo::Step>> {
        let inner = &self.inner;
        let (n, rank) = (self.nranks(), self.rank());
        let direct = inner.direct_channels(n);
        let neighbours = inner.neighbour_channels.max(direct);
        let cap = |op: &P2p| if ring_neighbour(op, rank, n) { neighbours } else { direct };
        let (own, others): (Vec<P2p>, Vec<P2p>) = ops.iter().partition(|o| o.peer == rank);
        let mut lanes = fold(lanes(&others, |op| inner.p2p_channels(op.bytes).min(cap(op)), inner.geometry.slot_bytes), rank, P2P_MOST_BLOCKS);
        lanes.extend(copy_lanes(&own, |op| inner.p2p_channels(op.bytes).min(direct)));
        lanes
    }
}

/// The sends and receives of an alltoall, gather or scatter with blocks of `bytes` on
/// `rank` (this rank's own block a send to itself, paired with its receive; none where
/// in place leaves it where it is).
pub(super) fn exchange_ops(collective: Collective, send: u64, recv: u64, bytes: usize, root: usize, rank: usize, n: usize) -> Vec<P2p> {
    let block = |base: u64, i: usize| base + (i * bytes) as u64;
    let op = |send: bool, peer: usize, addr: u64| P2p { send, peer, addr, bytes };
    let mut ops = Vec::new();
    match collective {
        Collective::AllToAll => {
            for p in 0..n {
                ops.push(op(true, p, block(send, p)));
                ops.push(op(false, p, block(recv, p)));
            }
        }
        Collective::Gather => {
            ops.push(op(true, root, send));
            if rank == root {
                ops.extend((0..n).map(|p| op(false, p, block(recv, p))));
            }
        }
        Collective::Scatter => {
            if rank == root {
                ops.extend((0..n).map(|p| op(true, p, block(send, p))));
            }
            ops.push(op(false, root, recv));
        }
        _ => unreachable!("only the exchanges come here"),
    }
    ops
}

impl Inner {
    /// Launches the point-to-point LL kernel on `plan` (one block per lane), its messages
    /// at offsets from `send_base` and `recv_base`.
    ///
    /// # Safety
    /// As [`GpuBackend::enqueue_p2p`].
    unsafe fn launch_p2p_ll(&self, loaded: &Loaded, plan: &Plan, send_base: u64, recv_base: u64, stream: CUstream) -> Result<()> {
        let &Plan::Messages { lanes, at, msgs } = plan else { return Err(Error::Internal("the LL send/recv kernel launched with an executor plan".into())) };
        let p = self.p2p_ll.get().ok_or_else(|| Error::Internal("no send/recv inboxes".into()))?;
        let mut args = DevP2p {
            lanes: at,
            msgs,
            send_base,
            recv_base,
            inbox: p.inbox,
            peers: p.table,
            watch: self.watch(),
            ack_offset: p.ack_offset,
            count_offset: p.count_offset,
            cap_lines: p.cap_lines,
            rank: p.rank,
            nranks: p.nranks,
            _pad: 0,
        };
        // SAFETY: the plan's lanes and messages are in the arena; the buffers are the
        // caller's contract.
        unsafe { loaded.p2p.launch(lanes, oxccl_kernels::cuda::THREADS, stream, &mut [(&mut args as *mut DevP2p).cast()]) }
    }
}

/// Turns the addresses of `ops` into offsets — sends' from the lowest send address,
/// receives' from the lowest receive address — and returns those two bases (the launch's
/// buffer bases): a program whose buffers move from call to call, its groups' layout
/// within them unchanged (one send and one receive buffer, say), reuses one plan.
fn offsets_from_bases(ops: &mut [P2p]) -> (u64, u64) {
    let base = |send: bool| ops.iter().filter(|o| o.send == send).map(|o| o.addr).min().unwrap_or(0);
    let (send_base, recv_base) = (base(true), base(false));
    for o in ops.iter_mut() {
        o.addr -= if o.send { send_base } else { recv_base };
    }
    (send_base, recv_base)
}

/// Whether every send of `ops` to another rank than `rank` has its receive from that peer
/// at the same place, and every receive its send (the k-th with the k-th, same offset and
/// size): an in-place alltoall, each block sent to a peer and overwritten by the peer's.
fn pairs_in_place(ops: &[P2p], rank: usize) -> bool {
    let with = |p: usize, send: bool| ops.iter().filter(move |o| o.peer == p && o.send == send).map(|o| (o.addr, o.bytes));
    let mut others = ops.iter().filter(|o| o.peer != rank).peekable();
    others.peek().is_some() && others.all(|o| with(o.peer, true).eq(with(o.peer, false)))
}

/// The LL launch of `ops` (each within the LL limit) on `rank`: a lane per peer and
/// direction, each with its messages in call order — the order that pairs them with the
/// peer's — and one lane of copies for the sends to `rank` itself (the k-th with the k-th
/// receive). `in_place` (as [`pairs_in_place`] found `ops`, one base for sends and
/// receives): a lane per peer instead, that sends each message and then receives the
/// peer's over it.
fn ll_lanes(ops: &[P2p], rank: usize, in_place: bool) -> (Vec<DevP2pLane>, Vec<DevP2pMsg>) {
    let mut by_lane: std::collections::BTreeMap<(usize, u32), Vec<DevP2pMsg>> = Default::default();
    for op in ops.iter().filter(|o| o.peer != rank && (o.send || !in_place)) {
        let kind = if in_place { lane::EXCHANGE } else if op.send { lane::SEND } else { lane::RECV };
        by_lane.entry((op.peer, kind)).or_default().push(DevP2pMsg { addr: op.addr, bytes: op.bytes as u64, src: 0 });
    }
    let own = |send: bool| ops.iter().filter(move |o| o.peer == rank && o.send == send);
    let copies: Vec<DevP2pMsg> = own(true).zip(own(false)).map(|(s, r)| DevP2pMsg { addr: r.addr, bytes: r.bytes as u64, src: s.addr }).collect();
    if !copies.is_empty() {
        by_lane.insert((rank, lane::COPY), copies);
    }
    let (mut lanes, mut msgs) = (Vec::with_capacity(by_lane.len()), Vec::with_capacity(ops.len()));
    for ((peer, kind), m) in by_lane {
        let first = msgs.len() as u32;
        msgs.extend(m);
        lanes.push(DevP2pLane { peer: peer as u32, kind, first, end: msgs.len() as u32 });
    }
    (lanes, msgs)
}

/// Bytes per granule of a transfer's split over channels: every channel's part but the
/// last starts 16-byte aligned where the buffer is.
const P2P_GRANULE: usize = 16;

/// A lane per peer, direction and channel; each transfer split over `channels(bytes)`
/// channels — a function of the size alone, so both ends split a transfer alike — and
/// each part into messages of at most a slot. Slices hold absolute addresses.
fn lanes(ops: &[P2p], channels: impl Fn(&P2p) -> usize, slot_bytes: usize) -> Vec<Vec<algo::Step>> {
    let mut lanes: std::collections::BTreeMap<(usize, bool, usize), Vec<algo::Step>> = Default::default();
    for op in ops {
        for (channel, (offset, len)) in algo::split_channels(op.bytes, channels(op).max(1), P2P_GRANULE).enumerate().filter(|(_, (_, len))| *len > 0) {
            let link = algo::Link { peer: op.peer, channel };
            let lane = lanes.entry((op.peer, op.send, channel)).or_default();
            for (o, c) in algo::chunks(offset, len, slot_bytes) {
                let at = op.addr as usize + o;
                lane.push(if op.send { algo::Step::Send { to: link, src: algo::Slice::send(at, c) } } else { algo::Step::Recv { from: link, dst: algo::Slice::recv(at, c) } });
            }
        }
    }
    lanes.into_values().collect()
}

/// The most bytes one copy step moves (a step's size is 32 bits on the GPU).
const COPY_STEP_BYTES: usize = 1 << 30;

/// Lanes of copies for `own`, a rank's sends to itself and its receives from itself (the
/// k-th send with the k-th receive), each copy split over `channels(send)` lanes as a
/// transfer is, in steps of at most [`COPY_STEP_BYTES`]: blocks beside the transfers'
/// (never folded with them), as the direct alltoall copies a rank's own block.
fn copy_lanes(own: &[P2p], channels: impl Fn(&P2p) -> usize) -> Vec<Vec<algo::Step>> {
    let side = |send: bool| own.iter().filter(move |o| o.send == send);
    let mut lanes: Vec<Vec<algo::Step>> = Vec::new();
    for (s, r) in side(true).zip(side(false)) {
        for (channel, (offset, len)) in algo::split_channels(s.bytes, channels(s).max(1), P2P_GRANULE).enumerate().filter(|(_, (_, len))| *len > 0) {
            if lanes.len() <= channel {
                lanes.resize_with(channel + 1, Vec::new);
            }
            for (o, c) in algo::chunks(offset, len, COPY_STEP_BYTES) {
                lanes[channel].push(algo::Step::Copy { src: algo::Slice::send(s.addr as usize + o, c), dst: algo::Slice::recv(r.addr as usize + o, c) });
            }
        }
    }
    lanes
}

/// Whether `op` of `rank` (of `n`) goes along the ring: a send to the next rank or a
/// receive from the previous one, whose FIFOs init makes on every channel.
fn ring_neighbour(op: &P2p, rank: usize, n: usize) -> bool {
    op.peer != rank && op.peer == if op.send { (rank + 1) % n } else { (rank + n - 1) % n }
}

/// The most blocks a send/recv launch runs: as many as the direct exchange's lanes can
/// number (64 channels each way), about one per multiprocessor of an H100 or H200. More
/// blocks than that share multiprocessors, and lost: sendrecv with 128 channels each way
/// (256 blocks) took 1.3x the time of 21 each way on 4xH200 (docs/PERFORMANCE.md).
const P2P_MOST_BLOCKS: usize = 2 * DIRECT_MOST_CHANNELS;

/// `lanes` of `rank` (each on one connection end, as [`lanes`] makes them) on at most
/// `most` blocks: unchanged when they fit; else sends and receives on blocks of their own
/// (shared out by bytes, [`kinds_blocks`]), each kind packed by bytes ([`pack`]), each block
/// running its lanes one after another in ascending order of the connection each uses,
/// keyed (channel, sender, receiver) as both of its ends see it. No launch then deadlocks:
/// of the connections some block has not finished, take the smallest; its sender's block
/// and its receiver's block are each at it or past it (they take their lanes in ascending
/// order), and so one of them can move — there is a message to take, or a free slot.
/// Blocks of one kind keep both directions of a link busy: a send lane and a receive lane
/// in one block move one direction, then the other (2 H200s: a shift of 128 channels each
/// way, so folded, took 1.7× as long as 64 unfolded).
fn fold(lanes: Vec<Vec<algo::Step>>, rank: usize, most: usize) -> Vec<Vec<algo::Step>> {
    if lanes.len() <= most {
        return lanes;
    }
    let keys: Vec<(usize, usize, usize)> = lanes.iter().map(|lane| connection_key(lane, rank)).collect();
    let bytes: Vec<usize> = lanes.iter().map(|lane| lane_bytes(lane)).collect();
    let (sends, receives): (Vec<usize>, Vec<usize>) = (0..lanes.len()).partition(|&i| matches!(lanes[i].first(), Some(algo::Step::Send { .. })));
    let weight = |kind: &[usize]| kind.iter().map(|&i| bytes[i]).sum::<usize>();
    let packed = |kind: &[usize], blocks: usize| -> Vec<Vec<usize>> {
        let kind_bytes: Vec<usize> = kind.iter().map(|&i| bytes[i]).collect();
        pack(&kind_bytes, blocks).into_iter().map(|members| members.into_iter().map(|m| kind[m]).collect()).collect()
    };
    let groups = if most < 2 || sends.is_empty() || receives.is_empty() {
        packed(&(0..lanes.len()).collect::<Vec<_>>(), most)
    } else {
        let (send_blocks, receive_blocks) = kinds_blocks((sends.len(), weight(&sends)), (receives.len(), weight(&receives)), most);
        let mut groups = packed(&sends, send_blocks);
        groups.extend(packed(&receives, receive_blocks));
        groups
    };
    blocks_of(lanes, groups, |members| members.sort_by_key(|&i| keys[i]))
}

/// Bytes a lane moves.
fn lane_bytes(lane: &[algo::Step]) -> usize {
    lane.iter().map(|s| s.count()).sum()
}

/// The blocks that run `lanes` by `groups` of lane indices (each lane in one group), each
/// group's lanes one after another in the order `order` puts them.
fn blocks_of(lanes: Vec<Vec<algo::Step>>, groups: Vec<Vec<usize>>, mut order: impl FnMut(&mut Vec<usize>)) -> Vec<Vec<algo::Step>> {
    let mut lanes: Vec<Option<Vec<algo::Step>>> = lanes.into_iter().map(Some).collect();
    groups
        .into_iter()
        .map(|mut members| {
            order(&mut members);
            members.into_iter().flat_map(|i| lanes[i].take().expect("each lane in one block")).collect()
        })
        .collect()
}

/// How many of `most` (2 or more) blocks the send lanes and the receive lanes get, each
/// kind given as (lanes, bytes), both kinds having lanes: in proportion to bytes, at least
/// one each, never more than a kind's lanes (a block left over goes to the other kind).
fn kinds_blocks(sends: (usize, usize), receives: (usize, usize), most: usize) -> (usize, usize) {
    let total = (sends.1 + receives.1).max(1);
    let share = ((most * sends.1 + total / 2) / total).clamp(1, most - 1).min(sends.0);
    let receive_blocks = (most - share).min(receives.0);
    ((most - receive_blocks).min(sends.0), receive_blocks)
}

/// The connection a send/recv lane of `rank` uses, as (channel, sender, receiver).
fn connection_key(lane: &[algo::Step], rank: usize) -> (usize, usize, usize) {
    match lane.first() {
        Some(algo::Step::Send { to, .. }) => (to.channel, rank, to.peer),
        Some(algo::Step::Recv { from, .. }) => (from.channel, from.peer, rank),
        _ => (usize::MAX, rank, rank),
    }
}

/// Items of `bytes` in at most `most` non-empty groups, the largest first into the group
/// with the fewest bytes so far (ties: the lower group): each group's item indices.
fn pack(bytes: &[usize], most: usize) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..bytes.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(bytes[i]));
    let mut groups: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); most.max(1).min(bytes.len())];
    for i in order {
        let g = (0..groups.len()).min_by_key(|&g| groups[g].0).expect("at least one group");
        groups[g].0 += bytes[i];
        groups[g].1.push(i);
    }
    groups.into_iter().map(|(_, members)| members).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::Step;

    /// A group moved to other buffers keeps its key (the offsets within them), and every
    /// transfer's address is its base plus its offset.
    #[test]
    fn groups_in_moved_buffers_share_a_plan_key() {
        let op = |send: bool, peer: usize, addr: u64| P2p { send, peer, addr, bytes: 1 << 20 };
        let group = |send: u64, recv: u64| vec![op(true, 1, send + 4096), op(false, 1, recv), op(true, 2, send), op(false, 2, recv + (1 << 20))];
        let (mut a, mut b) = (group(0x7000_0000, 0x9000_0000), group(0x7100_0200, 0x9300_0000));
        let (s1, r1) = offsets_from_bases(&mut a);
        let (s2, r2) = offsets_from_bases(&mut b);
        assert_eq!(a, b);
        assert_eq!((s1, r1, s2, r2), (0x7000_0000, 0x9000_0000, 0x7100_0200, 0x9300_0000));
        for (o, rel) in group(0x7100_0200, 0x9300_0000).iter().zip(&b) {
            assert_eq!(o.addr, rel.addr + if o.send { s2 } else { r2 });
        }
        // Only receives: the send base is unused.
        let mut only = [op(false, 1, 0x5000), op(false, 2, 0x4000)];
        let (_, r) = offsets_from_bases(&mut only);
        assert_eq!((r, only[0].addr, only[1].addr), (0x4000, 0x1000, 0));
    }

    fn channels(op: &P2p) -> usize {
        op.bytes.div_ceil(64 << 10).clamp(1, 8)
    }

    /// Along the ring (OXCCL_GPU_P2P_NEIGHBOUR_CHANNELS): a send to the next rank and a
    /// receive from the previous one, and no transfer with itself; with two ranks the peer
    /// is both. Each transfer is along the ring at both ends or at neither, so both split
    /// it alike.
    #[test]
    fn ring_neighbours_are_seen_alike_at_both_ends_of_a_transfer() {
        let op = |send: bool, peer: usize| P2p { send, peer, addr: 0, bytes: 1 };
        assert!(ring_neighbour(&op(true, 2), 1, 4) && ring_neighbour(&op(false, 0), 1, 4));
        assert!(!ring_neighbour(&op(true, 0), 1, 4) && !ring_neighbour(&op(false, 2), 1, 4) && !ring_neighbour(&op(true, 3), 1, 4));
        assert!(ring_neighbour(&op(true, 1), 0, 2) && ring_neighbour(&op(false, 1), 0, 2));
        assert!(!ring_neighbour(&op(true, 0), 0, 1), "itself");
        for n in 2..=6 {
            for from in 0..n {
                for to in (0..n).filter(|&to| to != from) {
                    assert_eq!(ring_neighbour(&op(true, to), from, n), ring_neighbour(&op(false, from), to, n), "{from} -> {to} of {n}");
                }
            }
        }
    }

    /// Packing puts every item in one group, at most `most` groups, none empty, the
    /// heaviest group within the largest item of the lightest.
    #[test]
    fn packing_balances_bytes_over_the_groups() {
        let mut rng = lcg(7);
        for _ in 0..200 {
            let items = 1 + rng(300);
            let most = 1 + rng(130);
            let bytes: Vec<usize> = (0..items).map(|_| 1 + rng(1 << 20)).collect();
            let groups = pack(&bytes, most);
            assert!(groups.len() <= most && groups.iter().all(|g| !g.is_empty()));
            let mut seen: Vec<usize> = groups.iter().flatten().copied().collect();
            seen.sort_unstable();
            assert_eq!(seen, (0..items).collect::<Vec<_>>());
            let loads: Vec<usize> = groups.iter().map(|g| g.iter().map(|&i| bytes[i]).sum()).collect();
            let (low, high) = (*loads.iter().min().unwrap(), *loads.iter().max().unwrap());
            assert!(high - low <= *bytes.iter().max().unwrap(), "{loads:?}");
        }
    }

    /// A pseudo-random source: `rng(k)` is in 0..k.
    fn lcg(seed: u64) -> impl FnMut(usize) -> usize {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        move |k| {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) as usize) % k.max(1)
        }
    }

    /// Every rank's blocks (lists of steps) run over FIFOs of `slots` messages a
    /// connection, a random block that can move taking its next step each turn: an error
    /// names a deadlock, or a message whose size its receive does not expect.
    fn run_blocks(blocks: &[Vec<Vec<Step>>], slots: usize, seed: u64) -> Result<(), String> {
        let mut rng = lcg(seed);
        let mut fifos: std::collections::HashMap<(usize, usize, usize), std::collections::VecDeque<usize>> = Default::default();
        let mut at: Vec<Vec<usize>> = blocks.iter().map(|b| vec![0; b.len()]).collect();
        loop {
            let mut ready = Vec::new();
            for (r, rank_blocks) in blocks.iter().enumerate() {
                for (b, steps) in rank_blocks.iter().enumerate() {
                    let can = match steps.get(at[r][b]) {
                        Some(Step::Send { to, .. }) => fifos.get(&(r, to.peer, to.channel)).map_or(0, |f| f.len()) < slots,
                        Some(Step::Recv { from, .. }) => fifos.get(&(from.peer, r, from.channel)).is_some_and(|f| !f.is_empty()),
                        _ => false,
                    };
                    if can {
                        ready.push((r, b));
                    }
                }
            }
            if ready.is_empty() {
                let mut stuck = Vec::new();
                for (r, rank_blocks) in blocks.iter().enumerate() {
                    stuck.extend((0..rank_blocks.len()).filter(|&b| at[r][b] < rank_blocks[b].len()).map(|b| format!("rank {r} block {b}")));
                }
                return if stuck.is_empty() { Ok(()) } else { Err(format!("deadlock: {}", stuck.join(", "))) };
            }
            let (r, b) = ready[rng(ready.len())];
            match blocks[r][b][at[r][b]] {
                Step::Send { to, src } => fifos.entry((r, to.peer, to.channel)).or_default().push_back(src.count),
                Step::Recv { from, dst } => {
                    let got = fifos.get_mut(&(from.peer, r, from.channel)).and_then(|f| f.pop_front());
                    if got != Some(dst.count) {
                        return Err(format!("rank {r} received {got:?} bytes from {} on channel {}, expected {}", from.peer, from.channel, dst.count));
                    }
                }
                _ => unreachable!("send/recv lanes hold sends and receives"),
            }
            at[r][b] += 1;
        }
    }

    /// Random groups of sends and receives (each pair's in one order at both ends), their
    /// transfers along the ring wider than the others, as each rank's lanes folded onto a
    /// few blocks: every message arrives with the size expected, and nothing deadlocks, on
    /// FIFOs of one slot. Folded in any other order, some launch deadlocks.
    #[test]
    fn folded_lanes_deliver_and_never_deadlock() {
        let slot = 4096;
        let groups = |seed: u64| {
            let mut rng = lcg(seed);
            let n = 2 + rng(5);
            let mut ops: Vec<Vec<P2p>> = vec![Vec::new(); n];
            for _ in 0..1 + rng(4 * n) {
                let (s, d) = (rng(n), rng(n));
                if s != d {
                    let bytes = 1 + rng(40_000);
                    ops[s].push(P2p { send: true, peer: d, addr: 0, bytes });
                    ops[d].push(P2p { send: false, peer: s, addr: 0, bytes });
                }
            }
            let most: Vec<usize> = (0..n).map(|_| 1 + rng(6)).collect();
            (n, ops, most)
        };
        let planned = |n: usize, ops: &[Vec<P2p>]| -> Vec<Vec<Vec<Step>>> {
            (0..n).map(|r| lanes(&ops[r], |op| if ring_neighbour(op, r, n) { 5 } else { 2 }, slot)).collect()
        };
        for seed in 0..1500u64 {
            let (n, ops, most) = groups(seed);
            let blocks: Vec<Vec<Vec<Step>>> = planned(n, &ops).into_iter().enumerate().map(|(r, l)| fold(l, r, most[r])).collect();
            assert!(blocks.iter().zip(&most).all(|(b, &m)| b.len() <= m), "seed {seed}");
            if let Err(e) = run_blocks(&blocks, 1, seed) {
                panic!("seed {seed}, {n} ranks, blocks at most {most:?}: {e}");
            }
        }
        // The order matters: the same packing, each block's lanes in a random order.
        let deadlocked = (0..1500u64).any(|seed| {
            let (n, ops, most) = groups(seed);
            let mut rng = lcg(!seed);
            let blocks: Vec<Vec<Vec<Step>>> = planned(n, &ops)
                .into_iter()
                .enumerate()
                .map(|(r, l)| {
                    let groups = pack(&l.iter().map(|lane| lane_bytes(lane)).collect::<Vec<_>>(), most[r]);
                    blocks_of(l, groups, |members| {
                        for i in (1..members.len()).rev() {
                            members.swap(i, rng(i + 1));
                        }
                    })
                })
                .collect();
            run_blocks(&blocks, 1, seed).is_err_and(|e| e.contains("deadlock"))
        });
        assert!(deadlocked, "lanes folded in a random order never deadlocked");
    }

    /// Rounds the ranks' blocks take over FIFOs of `slots` messages a connection when in
    /// each round every block takes at most one step and each direction between two
    /// ranks carries at most `link` messages (a receive takes only what was there when the
    /// round began): a model of block-bound copies over links of fixed bandwidth, not of a
    /// GPU. An error names a deadlock.
    fn rounds(blocks: &[Vec<Vec<Step>>], slots: usize, link: usize) -> Result<usize, String> {
        let mut fifos: std::collections::HashMap<(usize, usize, usize), std::collections::VecDeque<usize>> = Default::default();
        let mut at: Vec<Vec<usize>> = blocks.iter().map(|b| vec![0; b.len()]).collect();
        for round in 0.. {
            if blocks.iter().enumerate().all(|(r, rb)| (0..rb.len()).all(|b| at[r][b] == rb[b].len())) {
                return Ok(round);
            }
            let waiting: std::collections::HashMap<_, usize> = fifos.iter().map(|(k, f)| (*k, f.len())).collect();
            let mut taken: std::collections::HashMap<(usize, usize, usize), usize> = Default::default();
            let mut carried: std::collections::HashMap<(usize, usize), usize> = Default::default();
            let mut moved = false;
            for (r, rank_blocks) in blocks.iter().enumerate() {
                for (b, steps) in rank_blocks.iter().enumerate() {
                    match steps.get(at[r][b]) {
                        Some(Step::Send { to, .. }) => {
                            let fifo = fifos.entry((r, to.peer, to.channel)).or_default();
                            let load = carried.entry((r, to.peer)).or_default();
                            if fifo.len() < slots && *load < link {
                                fifo.push_back(0);
                                *load += 1;
                            } else {
                                continue;
                            }
                        }
                        Some(Step::Recv { from, .. }) => {
                            let key = (from.peer, r, from.channel);
                            let took = taken.entry(key).or_default();
                            if *took < waiting.get(&key).copied().unwrap_or(0) {
                                *took += 1;
                                fifos.get_mut(&key).expect("a FIFO with messages").pop_front();
                            } else {
                                continue;
                            }
                        }
                        _ => continue,
                    }
                    at[r][b] += 1;
                    moved = true;
                }
            }
            if !moved {
                return Err(format!("deadlock in round {round}"));
            }
        }
        unreachable!("the rounds end")
    }

    /// Folded groups keep both directions of every link busy (in the model of [`rounds`]:
    /// a block one step a round, a link a fixed number of messages a round). A shift both
    /// ways between 2 ranks on 128 channels folded onto 128 blocks takes as many rounds as
    /// on 64 channels unfolded (17), where a send lane and a receive lane in each block (the
    /// packing before, which took 1.7× as long on 2 H200s) take half again as many (26); an
    /// exchange with every peer of 4 ranks, 64 channels along the ring and 21 to the others
    /// folded onto 128 blocks, as many as on 21 each unfolded (65).
    #[test]
    fn folded_groups_keep_both_directions_busy() {
        let slot = 4096;
        let all_peers = |n: usize, bytes: usize| -> Vec<Vec<P2p>> {
            (0..n).map(|r| (0..n).filter(|&p| p != r).flat_map(|p| [P2p { send: true, peer: p, addr: 0, bytes }, P2p { send: false, peer: p, addr: 0, bytes }]).collect()).collect()
        };
        let plan = |ops: &[Vec<P2p>], along: usize, others: usize, fold_onto: Option<usize>| -> Vec<Vec<Vec<Step>>> {
            let n = ops.len();
            (0..n)
                .map(|r| {
                    let l = lanes(&ops[r], |op| if ring_neighbour(op, r, n) { along } else { others }, slot);
                    match fold_onto {
                        Some(most) => fold(l, r, most),
                        None => l,
                    }
                })
                .collect()
        };
        // 2 ranks: every lane 8 or 16 slots long; a link carries 64 messages a round.
        let shift = all_peers(2, 128 * 8 * slot);
        let unfolded = rounds(&plan(&shift, 64, 64, None), 8, 64).unwrap();
        let folded = rounds(&plan(&shift, 128, 128, Some(128)), 8, 64).unwrap();
        let mixed: Vec<Vec<Vec<Step>>> = plan(&shift, 128, 128, None)
            .into_iter()
            .enumerate()
            .map(|(r, l)| {
                let keys: Vec<_> = l.iter().map(|lane| connection_key(lane, r)).collect();
                let groups = pack(&l.iter().map(|lane| lane_bytes(lane)).collect::<Vec<_>>(), 128);
                blocks_of(l, groups, |members| members.sort_by_key(|&i| keys[i]))
            })
            .collect();
        let mixed = rounds(&mixed, 8, 64).unwrap();
        assert!(folded * 10 <= unfolded * 11, "2 ranks: folded {folded} rounds, unfolded {unfolded}");
        eprintln!("2 ranks: folded {folded}, mixed {mixed}, unfolded {unfolded}");
        assert!(mixed * 10 >= unfolded * 14, "2 ranks, sends and receives in one block: {mixed} rounds, unfolded {unfolded}");
        // 4 ranks: a link carries 22 messages a round (a third of a GPU's links each).
        let exchange = all_peers(4, 21 * 64 * 64 * slot / 64);
        let unfolded = rounds(&plan(&exchange, 21, 21, None), 8, 22).unwrap();
        let folded = rounds(&plan(&exchange, 64, 21, Some(128)), 8, 22).unwrap();
        assert!(folded * 100 <= unfolded * 115, "4 ranks: folded {folded} rounds, unfolded {unfolded}");
        eprintln!("4 ranks: folded {folded}, unfolded {unfolded}");
    }

    /// Folding keeps every step, puts each lane whole in one block, and orders a block's
    /// lanes by connection; lanes that fit are left as they are.
    #[test]
    fn folding_keeps_whole_lanes_in_connection_order() {
        let op = |send: bool, peer: usize, bytes: usize| P2p { send, peer, addr: 0, bytes };
        let ops: Vec<P2p> = (1..5).flat_map(|p| [op(true, p, 70_000 * p), op(false, p, 50_000)]).collect();
        let unfolded = lanes(&ops, |o| if o.peer == 1 { 9 } else { 3 }, 4096);
        assert_eq!(fold(unfolded.clone(), 0, unfolded.len()), unfolded);
        let folded = fold(unfolded.clone(), 0, 5);
        assert_eq!(folded.len(), 5);
        let mut all: Vec<String> = folded.iter().flatten().map(|s| format!("{s:?}")).collect();
        let mut expected: Vec<String> = unfolded.iter().flatten().map(|s| format!("{s:?}")).collect();
        all.sort();
        expected.sort();
        assert_eq!(all, expected);
        for block in &folded {
            let keys: Vec<(usize, usize, usize)> = block.iter().map(|s| connection_key(std::slice::from_ref(s), 0)).collect();
            assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{keys:?}");
        }
    }

    /// The LL launch has one lane per peer and direction, each holding exactly that
    /// lane's messages in call order (the order that pairs them with the peer's), every
    /// message in exactly one lane, and one lane of copies for the sends to itself.
    #[test]
    fn ll_lanes_keep_each_peers_messages_in_call_order() {
        let op = |send: bool, peer: usize, addr: u64| P2p { send, peer, addr, bytes: addr as usize % 97 + 1 };
        // Rank 0's group: sends to itself pair with its receives from itself in order.
        let ops = [op(true, 2, 10), op(false, 1, 20), op(true, 0, 15), op(true, 1, 30), op(true, 2, 40), op(false, 0, 15), op(false, 1, 50), op(false, 2, 60), op(true, 2, 70), op(true, 0, 1), op(false, 0, 1)];
        let (lanes, msgs) = ll_lanes(&ops, 0, false);
        let mut seen = std::collections::HashSet::new();
        for l in &lanes {
            assert!(seen.insert((l.peer, l.kind)), "two lanes for {l:?}");
            assert!(l.first < l.end && l.end as usize <= msgs.len());
            let got: Vec<(u64, u64, u64)> = msgs[l.first as usize..l.end as usize].iter().map(|m| (m.addr, m.bytes, m.src)).collect();
            let expected: Vec<(u64, u64, u64)> = if l.kind == lane::COPY {
                assert_eq!(l.peer, 0);
                vec![(15, 16, 15), (1, 2, 1)]
            } else {
                ops.iter().filter(|o| o.peer == l.peer as usize && o.send == (l.kind == lane::SEND)).map(|o| (o.addr, o.bytes as u64, 0)).collect()
            };
            assert_eq!(got, expected, "lane {l:?}");
        }
        assert_eq!(lanes.iter().map(|l| (l.end - l.first) as usize).sum::<usize>(), ops.len() - 2);
        assert_eq!(lanes.len(), 5);
    }

    /// In place (an alltoall's group on one buffer), a lane per peer sends each message
    /// and receives the peer's in its place; any group that does not pair up so keeps a
    /// lane per peer and direction.
    #[test]
    fn in_place_groups_exchange_in_one_lane_per_peer() {
        let op = |send: bool, peer: usize, addr: u64| P2p { send, peer, addr, bytes: 64 };
        let ops: Vec<P2p> = (0..4).filter(|&p| p != 1).flat_map(|p| [op(true, p, p as u64 * 64), op(false, p, p as u64 * 64)]).collect();
        assert!(pairs_in_place(&ops, 1));
        let (lanes, msgs) = ll_lanes(&ops, 1, true);
        assert_eq!(lanes.iter().map(|l| (l.peer, l.kind, l.end - l.first)).collect::<Vec<_>>(), vec![(0, lane::EXCHANGE, 1), (2, lane::EXCHANGE, 1), (3, lane::EXCHANGE, 1)]);
        assert_eq!(msgs.iter().map(|m| m.addr).collect::<Vec<_>>(), vec![0, 128, 192]);
        // Not in place: a receive elsewhere, one missing, two sizes, only sends, nothing.
        let mut moved = ops.clone();
        moved[1].addr += 8;
        let mut fewer = ops.clone();
        fewer.pop();
        let mut sized = ops.clone();
        sized[0].bytes = 32;
        let sends: Vec<P2p> = ops.iter().copied().filter(|o| o.send).collect();
        for group in [&moved, &fewer, &sized, &sends, &Vec::new()] {
            assert!(!pairs_in_place(group, 1), "{group:?}");
        }
        let (lanes, _) = ll_lanes(&moved, 1, false);
        assert_eq!(lanes.len(), 6);
        // An in-place alltoall's group, as the collective makes it, pairs so on every rank
        // (the collective then skips its copy of the input).
        for n in 2..=5 {
            for rank in 0..n {
                let mut group: Vec<P2p> = exchange_ops(Collective::AllToAll, 0x7000, 0x7000, 96, 0, rank, n).into_iter().filter(|o| o.peer != rank).collect();
                let (send_base, recv_base) = offsets_from_bases(&mut group);
                assert!(send_base == recv_base && pairs_in_place(&group, rank), "{n} ranks, rank {rank}");
            }
        }
    }

    /// alltoall, gather and scatter as groups: pairing every rank's sends with their
    /// receivers' receives in order delivers exactly the blocks the collective defines,
    /// and nothing else; in place, a rank's own block is not copied onto itself.
    #[test]
    fn exchanges_as_groups_move_the_collectives_blocks() {
        let bytes = 100;
        // Rank r's buffers: send at r * 2^20, recv at r * 2^20 + 2^19.
        let (send, recv) = (|r: usize| (r << 20) as u64, |r: usize| ((r << 20) + (1 << 19)) as u64);
        for n in 1..=5 {
            for collective in [Collective::AllToAll, Collective::Gather, Collective::Scatter] {
                for root in 0..n {
                    for in_place in [false, true] {
                        let bufs = |r: usize| match (collective, in_place) {
                            (Collective::AllToAll, true) => (recv(r), recv(r)),
                            (Collective::Gather, true) if r == root => (recv(r) + (root * bytes) as u64, recv(r)),
                            (Collective::Scatter, true) if r == root => (send(r), send(r) + (root * bytes) as u64),
                            _ => (send(r), recv(r)),
                        };
                        let ops: Vec<Vec<P2p>> = (0..n).map(|r| exchange_ops(collective, bufs(r).0, bufs(r).1, bytes, root, r, n)).collect();
                        // Deliveries: (destination address) <- (source address), pairing in order.
                        let mut delivered = std::collections::BTreeMap::new();
                        for s in 0..n {
                            for d in 0..n {
                                let sends: Vec<&P2p> = ops[s].iter().filter(|o| o.send && o.peer == d).collect();
                                let recvs: Vec<&P2p> = ops[d].iter().filter(|o| !o.send && o.peer == s).collect();
                                assert_eq!(sends.len(), recvs.len(), "{collective:?} n={n} root={root}: {s} -> {d}");
                                for (a, b) in sends.iter().zip(&recvs) {
                                    assert_eq!((a.bytes, b.bytes), (bytes, bytes));
                                    if a.addr != b.addr {
                                        assert!(delivered.insert(b.addr, a.addr).is_none(), "{:#x} written twice", b.addr);
                                    }
                                }
                            }
                        }
                        let block = |base: u64, i: usize| base + (i * bytes) as u64;
                        let mut expected = std::collections::BTreeMap::new();
                        for r in 0..n {
                            let rb = bufs(r).1;
                            for p in 0..n {
                                let (dst, src) = match collective {
                                    Collective::AllToAll => (block(rb, p), block(bufs(p).0, r)),
                                    Collective::Gather if r == root => (block(rb, p), bufs(p).0),
                                    Collective::Scatter if p == root => (rb, block(bufs(root).0, r)),
                                    _ => continue,
                                };
                                // In place, a rank's own block is where it belongs (alltoall
                                // in place reads the copy the caller makes; here both are `recv`).
                                if dst != src {
                                    expected.insert(dst, src);
                                }
                            }
                        }
                        assert_eq!(delivered, expected, "{collective:?} n={n} root={root} in_place={in_place}");
                    }
                }
            }
        }
    }

    /// alltoall of 2 ranks on 128 channels, each rank in place (a lane a channel that sends
    /// each chunk and then receives over it) or out of place (two channels a lane,
    /// `two_channels_a_lane`): all four pairings deliver every message in order over FIFOs
    /// of one slot, whatever order the blocks move in (copies left out: they touch no link).
    #[test]
    fn alltoall_of_two_ranks_pairs_in_and_out_of_place_on_one_slot() {
        let shape = algo::Shape { collective: Collective::AllToAll, count: 3 * 4096 * 128 + 5, nranks: 2, root: 0, chunk: 4096, channels: 128, per_host: 2 };
        let plan = |rank: usize, in_place: bool| -> Vec<Vec<Step>> {
            let lanes = algo::plan_call(shape, algo::Algorithm::Direct, rank, in_place).unwrap();
            let lanes = if in_place { lanes } else { super::super::two_channels_a_lane(lanes, 64) };
            lanes.into_iter().map(|l| l.into_iter().filter(|s| !matches!(s, Step::Copy { .. })).collect::<Vec<_>>()).filter(|l| !l.is_empty()).collect()
        };
        for (a, b) in [(false, false), (true, false), (false, true), (true, true)] {
            let blocks = [plan(0, a), plan(1, b)];
            // In place 128 lanes; out of place 64 send and 64 receive lanes.
            assert_eq!(blocks[0].len(), 128, "rank 0's blocks with links");
            for seed in 0..4 {
                if let Err(e) = run_blocks(&blocks, 1, seed) {
                    panic!("rank 0 in place {a}, rank 1 in place {b}, seed {seed}: {e}");
                }
            }
        }
    }

    /// A rank's copies to itself: the k-th send to the k-th receive, every byte once, each
    /// split over its channels (a lane each), nothing over a link.
    #[test]
    fn copies_to_oneself_cover_each_byte_once_on_lanes_of_their_own() {
        for &bytes in &[1usize, 17, 4096, 65536 * 3 + 5, 1 << 20] {
            let own = [
                P2p { send: true, peer: 2, addr: 0x1000, bytes },
                P2p { send: false, peer: 2, addr: 0x50_0000, bytes },
                P2p { send: true, peer: 2, addr: 0x20_0000, bytes: bytes + 3 },
                P2p { send: false, peer: 2, addr: 0x90_0000, bytes: bytes + 3 },
            ];
            let lanes = copy_lanes(&own, channels);
            assert_eq!(lanes.len(), channels(&own[0]).max(channels(&own[2])), "{bytes} bytes");
            for (s, r) in [(own[0], own[1]), (own[2], own[3])] {
                let mut covered = vec![0u8; s.bytes];
                for step in lanes.iter().flatten() {
                    let Step::Copy { src, dst } = *step else { panic!("{step:?} in a copy lane") };
                    if src.offset >= s.addr as usize && src.offset < s.addr as usize + s.bytes {
                        let at = src.offset - s.addr as usize;
                        assert_eq!(dst.offset, r.addr as usize + at, "the same place in the receive");
                        covered[at..at + src.count].iter_mut().for_each(|c| *c += 1);
                    }
                }
                assert!(covered.iter().all(|&c| c == 1), "{bytes} bytes: a byte copied {:?} times", covered.iter().find(|&&c| c != 1));
            }
        }
    }

    /// Every byte of every transfer is moved exactly once, in messages of at most a slot;
    /// each connection end belongs to one lane; and the messages one rank sends to a peer
    /// on each channel have the sizes, in order, that the peer's receives expect.
    #[test]
    fn transfers_are_covered_once_and_both_ends_agree() {
        let slot = 4096;
        let sizes = [1usize, 7, 4096, 4097, 65536 * 3 + 5, 1 << 20];
        for &bytes in &sizes {
            // Rank 0 sends `bytes` twice to rank 1 and receives once from it.
            let ops0 = [
                P2p { send: true, peer: 1, addr: 0x10_0000, bytes },
                P2p { send: true, peer: 1, addr: 0x90_0000, bytes },
                P2p { send: false, peer: 1, addr: 0x200_0000, bytes },
            ];
            let ops1 = [
                P2p { send: false, peer: 0, addr: 0x30_0000, bytes },
                P2p { send: false, peer: 0, addr: 0xB0_0000, bytes },
                P2p { send: true, peer: 0, addr: 0x400_0000, bytes },
            ];
            let (l0, l1) = (lanes(&ops0, channels, slot), lanes(&ops1, channels, slot));
            for (ops, ls) in [(&ops0, &l0), (&ops1, &l1)] {
                let mut seen = std::collections::HashMap::new();
                for (i, lane) in ls.iter().enumerate() {
                    for step in lane {
                        assert!(step.count() <= slot && step.count() > 0);
                        let end = (step.sends().is_some(), step.sends().or(step.receives()).unwrap());
                        assert_eq!(*seen.entry(end).or_insert(i), i, "{end:?} in two lanes");
                    }
                }
                for op in ops.iter() {
                    let mut covered = vec![0u8; op.bytes];
                    for step in ls.iter().flatten() {
                        let s = step.reads().or(step.writes()).unwrap();
                        if s.offset >= op.addr as usize && s.offset < op.addr as usize + op.bytes && step.sends().is_some() == op.send {
                            covered[s.offset - op.addr as usize..s.end() - op.addr as usize].iter_mut().for_each(|c| *c += 1);
                        }
                    }
                    assert!(covered.iter().all(|&c| c == 1), "{bytes} bytes: a byte moved {:?} times", covered.iter().find(|&&c| c != 1));
                }
            }
            // Per channel, rank 0's sends to 1 match rank 1's receives from 0, message by message.
            let messages = |ls: &[Vec<Step>], send: bool| -> Vec<(usize, usize)> {
                let mut m: Vec<(usize, usize)> = ls.iter().flatten().filter(|s| s.sends().is_some() == send).map(|s| (s.sends().or(s.receives()).unwrap().channel, s.count())).collect();
                m.sort_by_key(|&(ch, _)| ch);
                m
            };
            assert_eq!(messages(&l0, true), messages(&l1, false), "{bytes} bytes: 0 -> 1");
            assert_eq!(messages(&l1, true), messages(&l0, false), "{bytes} bytes: 1 -> 0");
        }
    }
}
