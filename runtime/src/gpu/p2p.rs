//! Sends and receives on GPU buffers: a group's transfers become lanes of `send` and `recv`
//! steps over the direct channels (the slices hold absolute device addresses, so the launch
//! passes 0 as both buffer bases), run by the same kernel as the collectives.

use oxccl_kernels::cuda::Specialization;

use oxccl_kernels::device::{DevP2p, DevP2pLane, DevP2pMsg};

use super::{driver, CUstream, CacheKey, DeviceComm, Inner, Loaded, Plan};
use crate::algo;
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

impl DeviceComm {
    /// Enqueues a group of sends and receives on `stream` and returns. Sends to and
    /// receives from each peer pair up in order with the peer's (equal sizes, as NCCL
    /// requires); each transfer is split over the direct channels and runs beside the
    /// others, so a group exchanging with many peers never waits on one. Transfers with
    /// this rank itself are copies, paired in order.
    ///
    /// # Safety
    /// Every address must be device memory this GPU can access, holding `bytes`, untouched
    /// until the stream passes this point; `stream` as for [`DeviceComm::enqueue`].
    pub unsafe fn enqueue_p2p(&self, ops: &[P2p], stream: CUstream) -> Result<()> {
        let (n, rank) = (self.nranks(), self.rank());
        for op in ops {
            if op.peer >= n {
                return Err(Error::invalid(format!("peer {} is not a rank of this communicator of {n}", op.peer)));
            }
            if op.bytes > 0 && op.addr == 0 {
                return Err(Error::invalid(format!("{} buffer is null with {} bytes", if op.send { "send" } else { "recv" }, op.bytes)));
            }
        }
        self.comm.refuse_if_suspended()?;
        if let Some(e) = self.async_error() {
            return Err(e);
        }
        let inner = &self.inner;
        inner.device.bind()?;
        // Transfers with oneself: copies, the k-th send with the k-th receive.
        let own_sends: Vec<&P2p> = ops.iter().filter(|o| o.send && o.peer == rank && o.bytes > 0).collect();
        let own_recvs: Vec<&P2p> = ops.iter().filter(|o| !o.send && o.peer == rank && o.bytes > 0).collect();
        if own_sends.len() != own_recvs.len() {
            return Err(Error::invalid(format!("{} sends to this rank but {} receives from it in one group", own_sends.len(), own_recvs.len())));
        }
        for (s, r) in own_sends.iter().zip(&own_recvs) {
            if s.bytes != r.bytes {
                return Err(Error::invalid(format!("a send of {} bytes to this rank meets a receive of {} bytes", s.bytes, r.bytes)));
            }
            driver::check(cudarc::driver::sys::cuMemcpyDtoDAsync_v2(r.addr, s.addr, s.bytes, stream), || "copying a send to this rank".into())?;
        }
        // Messages up to the LL limit go over LL (one launch), the rest over the Simple
        // FIFOs (a second launch): both ends of a message decide by its size alone. The
        // two launches never wait for each other's messages, so their order is free.
        let ll_limit = inner.p2p_ll.get().map_or(0, |p| p.limit);
        let (ll, simple): (Vec<P2p>, Vec<P2p>) = ops.iter().copied().filter(|o| o.peer != rank && o.bytes > 0).partition(|o| o.bytes <= ll_limit);
        if !ll.is_empty() {
            let key = CacheKey::PointToPointLl(ll);
            let cached = inner.state.lock().plans.get(&key).cloned();
            let plan = match cached {
                Some(p) => p,
                None => {
                    let CacheKey::PointToPointLl(ops) = &key else { unreachable!("made just above") };
                    let (lanes, msgs) = ll_lanes(ops);
                    let lanes_bytes = std::mem::size_of_val(&lanes[..]);
                    let mut image = bytemuck::cast_slice::<DevP2pLane, u8>(&lanes).to_vec();
                    image.extend_from_slice(bytemuck::cast_slice::<DevP2pMsg, u8>(&msgs));
                    let count = lanes.len() as u32;
                    inner.store(inner.state.lock(), key, &image, |at| Plan::Messages { lanes: count, at, msgs: at + lanes_bytes as u64 })?
                }
            };
            let loaded = inner.loaded(Specialization { dtype: DataType::Uint8, op: oxccl_kernels::Combine::Sum })?;
            inner.launch_p2p_ll(&loaded, &plan, stream)?;
        }
        if !simple.is_empty() {
            // The transfers are the key (no copy of them per call).
            let key = CacheKey::PointToPoint(simple);
            let cached = inner.state.lock().plans.get(&key).cloned();
            let plan = match cached {
                Some(p) => p,
                None => {
                    let CacheKey::PointToPoint(ops) = &key else { unreachable!("made just above") };
                    let lanes = self.p2p_lanes(ops);
                    self.upload(key, &lanes, 1)?
                }
            };
            let loaded = inner.loaded(Specialization { dtype: DataType::Uint8, op: oxccl_kernels::Combine::Sum })?;
            // Slices hold absolute addresses: both buffer bases are 0.
            inner.launch(&loaded, &plan, 0, 0, None, stream)?;
        }
        self.mark(stream)
    }

    /// A lane per peer, direction and channel (see [`lanes`]).
    fn p2p_lanes(&self, ops: &[P2p]) -> Vec<Vec<algo::Step>> {
        let inner = &self.inner;
        let direct = inner.direct_channels(self.nranks());
        lanes(ops, |bytes| inner.channels(bytes).min(direct), inner.geometry.slot_bytes)
    }
}

impl Inner {
    /// Launches the point-to-point LL kernel on `plan` (one block per lane).
    ///
    /// # Safety
    /// As [`DeviceComm::enqueue_p2p`].
    unsafe fn launch_p2p_ll(&self, loaded: &Loaded, plan: &Plan, stream: CUstream) -> Result<()> {
        let &Plan::Messages { lanes, at, msgs } = plan else { return Err(Error::Internal("the LL send/recv kernel launched with an executor plan".into())) };
        let p = self.p2p_ll.get().ok_or_else(|| Error::Internal("no send/recv inboxes".into()))?;
        let mut args = DevP2p {
            lanes: at,
            msgs,
            inbox: p.inbox,
            peers: p.table,
            abort: self.abort_word(),
            status: self.status_word(),
            timeout_ns: self.timeout_ns(),
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

/// The LL launch of `ops` (every one to or from another rank, within the LL limit): a lane
/// per peer and direction, each with its messages in call order — the order that pairs
/// them with the peer's.
fn ll_lanes(ops: &[P2p]) -> (Vec<DevP2pLane>, Vec<DevP2pMsg>) {
    let mut by_lane: std::collections::BTreeMap<(usize, bool), Vec<DevP2pMsg>> = Default::default();
    for op in ops {
        by_lane.entry((op.peer, op.send)).or_default().push(DevP2pMsg { addr: op.addr, bytes: op.bytes as u64 });
    }
    let (mut lanes, mut msgs) = (Vec::with_capacity(by_lane.len()), Vec::with_capacity(ops.len()));
    for ((peer, send), m) in by_lane {
        let first = msgs.len() as u32;
        msgs.extend(m);
        lanes.push(DevP2pLane { peer: peer as u32, send: send as u32, first, end: msgs.len() as u32 });
    }
    (lanes, msgs)
}

/// A lane per peer, direction and channel; each transfer split over `channels(bytes)`
/// channels — a function of the size alone, so both ends split a transfer alike — and
/// each part into messages of at most a slot. Slices hold absolute addresses.
fn lanes(ops: &[P2p], channels: impl Fn(usize) -> usize, slot_bytes: usize) -> Vec<Vec<algo::Step>> {
    let mut lanes: std::collections::BTreeMap<(usize, bool, usize), Vec<algo::Step>> = Default::default();
    for op in ops {
        for (channel, (offset, len)) in algo::split(op.bytes, channels(op.bytes).max(1)).enumerate().filter(|(_, (_, len))| *len > 0) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algo::Step;

    fn channels(bytes: usize) -> usize {
        bytes.div_ceil(64 << 10).clamp(1, 8)
    }

    /// The LL launch has one lane per peer and direction, each holding exactly that
    /// lane's messages in call order (the order that pairs them with the peer's), every
    /// message in exactly one lane.
    #[test]
    fn ll_lanes_keep_each_peers_messages_in_call_order() {
        let op = |send: bool, peer: usize, addr: u64| P2p { send, peer, addr, bytes: addr as usize % 97 + 1 };
        let ops = [op(true, 2, 10), op(false, 1, 20), op(true, 1, 30), op(true, 2, 40), op(false, 1, 50), op(false, 2, 60), op(true, 2, 70)];
        let (lanes, msgs) = ll_lanes(&ops);
        assert_eq!(msgs.len(), ops.len());
        let mut seen = std::collections::HashSet::new();
        for lane in &lanes {
            assert!(seen.insert((lane.peer, lane.send)), "two lanes for {lane:?}");
            assert!(lane.first < lane.end && lane.end as usize <= msgs.len());
            let expected: Vec<(u64, u64)> = ops.iter().filter(|o| o.peer == lane.peer as usize && o.send == (lane.send == 1)).map(|o| (o.addr, o.bytes as u64)).collect();
            let got: Vec<(u64, u64)> = msgs[lane.first as usize..lane.end as usize].iter().map(|m| (m.addr, m.bytes)).collect();
            assert_eq!(got, expected, "lane {lane:?}");
        }
        assert_eq!(lanes.iter().map(|l| (l.end - l.first) as usize).sum::<usize>(), ops.len());
        assert_eq!(lanes.len(), 4);
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
