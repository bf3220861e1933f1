//! The host executor: walks a rank's lanes of schedule steps over FIFO connections with CPU
//! copies and reductions. Lanes progress round-robin and never block on one connection, so
//! exchanges with many peers (all_to_all, grouped send/recv) cannot wait on each other.
//! Idle passes spin, then yield, then sleep; every wait watches the deadline, the abort flag and the
//! bootstrap's failure notices.

use rustc_hash::FxHashMap;
use std::time::{Duration, Instant};

use oxccl_kernels::{combine, combine_into, Combine, DataType};
use oxccl_transports::fifo;

use crate::algo::{Buffer, Link, Slice, Step};
use crate::error::{Error, Result};

/// The user buffers of one operation. The pointers must stay valid, and not be touched by
/// anyone else, until the operation completes; `send` may alias `recv` as the schedule's
/// in-place conventions allow.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Buffers {
    pub send: *const u8,
    pub send_bytes: usize,
    pub recv: *mut u8,
    pub recv_bytes: usize,
}

// SAFETY: Buffers only carries addresses; whoever builds one vouches for their validity for
// the operation (see the struct's contract), whichever thread runs it.
unsafe impl Send for Buffers {}

/// A lane of steps; each step works on the buffers it names (an index into the buffers
/// passed to [`run`]): a group's point-to-point lane may serve several operations.
pub(crate) struct Lane {
    pub steps: Vec<(Step, usize)>,
}

/// This rank's ends of its connections, by link.
#[derive(Default)]
pub(crate) struct Connections {
    pub senders: FxHashMap<Link, fifo::Sender>,
    pub receivers: FxHashMap<Link, fifo::Receiver>,
    /// The proxy thread of each network link, woken when a step gives it work (a slot to
    /// send, a slot free to receive into): a thread idle for long sleeps, and waiting for
    /// it to look again would cost each ring step tens of µs.
    pub proxies: FxHashMap<(Link, bool), crate::proxy::ProxyWaker>,
}

/// What the executor needs besides steps and buffers.
pub(crate) struct Context<'a> {
    pub dtype: DataType,
    pub combine: Combine,
    /// How long the run may wait for its peers, counted from when it first has to (reading
    /// the clock costs tens of ns a call, more than a small step: only waits read it).
    pub timeout: Duration,
    /// Returns an error when the operation must stop (abort, a dead peer).
    pub health: &'a dyn Fn() -> Result<()>,
    /// Peers (ranks) that left the job, each with how long a run may stay blocked on it
    /// before it fails: a step waiting on one never completes once what the peer sent
    /// has had time to land ([`LEFT_GRACE`], [`NET_LEFT_GRACE`]).
    pub departed: &'a dyn Fn() -> Vec<(usize, Duration)>,
    /// Whether a waiting run makes the proxy threads' passes itself (`proxy::help`): only
    /// a run with network links, and not where the host runs more of the communicator's
    /// ranks than it has cores, whose executors' passes would take the cores the ranks and
    /// proxies need (4 ranks on the 2-core VM: small all_reduce over the socket Net
    /// 290-640 us with them, 120-430 without; docs/results/2026-11-27-vm/help-oversubscribed).
    pub help_proxy: bool,
}

/// Runs every lane to completion. `checked`: the lanes already passed [`check_bounds`] with
/// buffers of the same sizes (a cached plan).
pub(crate) fn run(lanes: &[Lane], buffers: &[Buffers], connections: &mut Connections, cx: &Context, checked: bool) -> Result<()> {
    let esize = cx.dtype.size();
    if !checked {
        check_bounds(lanes, buffers, connections, esize)?;
    }
    // Each lane's next step; on the stack for the usual few lanes (no allocation per call).
    let mut few = [0usize; 32];
    let mut many = Vec::new();
    let cursor: &mut [usize] = if lanes.len() <= few.len() {
        &mut few[..lanes.len()]
    } else {
        many.resize(lanes.len(), 0);
        &mut many
    };
    // When the run first had to wait: its timeout counts from there.
    let mut waiting_since: Option<Instant> = None;
    let mut idle = Idle::default();
    // A peer this run waits on and that has left the job, and since when: still waited on
    // after LEFT_GRACE, the run fails rather than wait for the timeout.
    let mut left_behind: Option<(usize, Duration, Instant)> = None;
    loop {
        let mut progressed = false;
        let mut pending = false;
        for (lane, at) in lanes.iter().zip(cursor.iter_mut()) {
            while let Some((step, b)) = lane.steps.get(*at) {
                // SAFETY: bounds were checked above; the buffers' validity is the caller's.
                if !unsafe { try_step(step, &buffers[*b], connections, esize, cx)? } {
                    pending = true;
                    break;
                }
                *at += 1;
                progressed = true;
            }
        }
        if !pending {
            return Ok(());
        }
        if progressed {
            idle = Idle::default();
            left_behind = None;
            continue;
        }
        // Waiting, perhaps on the network: make a pass over the proxy threads' links here
        // (`proxy::help`) rather than only wait for their threads to be scheduled. The
        // pause (and its health checks) follows all the same.
        if cx.help_proxy {
            crate::proxy::help();
        }
        if idle.pause() {
            (cx.health)()?;
            let departed = (cx.departed)();
            let gone = if departed.is_empty() {
                None
            } else {
                let stuck = lanes.iter().zip(cursor.iter()).filter_map(|(l, &c)| l.steps.get(c));
                stuck.filter_map(|(s, _)| blocked_on(s, connections)).find_map(|p| departed.iter().find(|(d, _)| *d == p).copied())
            };
            left_behind = match (gone, left_behind) {
                (Some((peer, _)), Some((seen, grace, since))) if peer == seen => {
                    if since.elapsed() >= grace {
                        return Err(Error::PeerFailed {
                            rank: peer as u32,
                            reason: format!("rank {peer} left the job (ended normally) while this rank still waited for it in a collective or send/recv: the ranks did not make the same calls"),
                        });
                    }
                    Some((seen, grace, since))
                }
                (gone, _) => gone.map(|(peer, grace)| (peer, grace, Instant::now())),
            };
            let since = *waiting_since.get_or_insert_with(Instant::now);
            if since.elapsed() >= cx.timeout {
                let stuck: Vec<String> = lanes.iter().zip(cursor.iter()).filter_map(|(l, &c)| l.steps.get(c).map(|(s, _)| format!("{s:?}"))).collect();
                return Err(Error::Timeout { phase: format!("collective, waiting at {}", stuck.join("; ")), waited: since.elapsed() });
            }
        }
    }
}

/// How long a run may stay blocked on a peer linked by shared memory that left the job
/// before it fails. A peer that left normally had waited until this rank took every
/// message it sent over shared memory (`Communicator::finalize`), and a slot it freed shows
/// at once, so nothing of it can still be on its way: the grace only covers the order in
/// which the two news arrive.
pub(crate) const LEFT_GRACE: Duration = Duration::from_millis(250);
/// The same over the network. A peer that left had its sends taken by the sockets, but
/// their last bytes may still be on the wire; a link whose connection ended is reported by
/// the proxy itself, this covers the rest (a link the peer never connected: say, a
/// receive of a send/recv group it never joined).
pub(crate) const NET_LEFT_GRACE: Duration = Duration::from_secs(2);

/// The peer a step waits for: the sender of the message it has yet to receive, else the
/// receiver whose slot it has yet to get (a step waiting on both is blocked by either).
fn blocked_on(step: &Step, conns: &mut Connections) -> Option<usize> {
    if let Some(link) = step.receives() {
        if conns.receivers.get_mut(&link).is_some_and(|rx| rx.try_peek().is_none()) {
            return Some(link.peer);
        }
    }
    let link = step.sends()?;
    conns.senders.get_mut(&link).is_some_and(|tx| tx.try_reserve().is_none()).then_some(link.peer)
}

/// Idle passes that spin before the executor yields: a running peer answers within
/// microseconds.
const SPIN_PASSES: u32 = 64;
/// How long an idle executor yields before it sleeps between passes: a step of a healthy
/// collective rarely waits this long, so its latency is untouched.
const YIELD_FOR: Duration = Duration::from_millis(1);
/// How often a yielding executor looks at its health at the least: with more processes
/// than cores, 256 yields can take many time slices.
const CHECK_EVERY: Duration = Duration::from_micros(100);
/// Sleeps between idle passes start here and double up to [`LONGEST_SLEEP`].
const FIRST_SLEEP: Duration = Duration::from_micros(10);
/// The longest sleep, which bounds the latency a wait already past [`YIELD_FOR`] gains
/// (at most a tenth).
const LONGEST_SLEEP: Duration = Duration::from_micros(100);

/// The executor's pauses between passes that moved nothing: spin, then yield, then sleep in
/// growing steps. Yielding is timed, not counted: with more spinning processes than cores
/// (16 ranks on 2 cores) each yield can last a time slice, and a rank that yields forever
/// keeps the cores from the ranks that have work — the reader of a revocation notice, the
/// thread that calls abort, the rank the others wait for. Sleeping leaves them the cores.
#[derive(Default)]
struct Idle {
    passes: u32,
    since: Option<Instant>,
    checked: Option<Instant>,
    sleep: Option<Duration>,
}

impl Idle {
    /// Pauses once; true when the wait should look at its health and deadline now (every
    /// 256 passes while spinning, every 256 passes or [`CHECK_EVERY`] while yielding,
    /// every pass once sleeping).
    fn pause(&mut self) -> bool {
        self.passes = self.passes.saturating_add(1);
        if self.passes < SPIN_PASSES {
            std::hint::spin_loop();
            return false;
        }
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        if now - since < YIELD_FOR {
            std::thread::yield_now();
            let due = self.passes % 256 == 0 || now - *self.checked.get_or_insert(since) >= CHECK_EVERY;
            if due {
                self.checked = Some(now);
            }
            return due;
        }
        let sleep = self.sleep.map_or(FIRST_SLEEP, |s| (s * 2).min(LONGEST_SLEEP));
        self.sleep = Some(sleep);
        std::thread::sleep(sleep);
        true
    }
}

/// Checks that every step's slices lie within its buffers and its messages fit the slots.
pub(crate) fn check_bounds(lanes: &[Lane], buffers: &[Buffers], connections: &Connections, esize: usize) -> Result<()> {
    for lane in lanes {
        for (step, index) in &lane.steps {
            let b = buffers.get(*index).ok_or_else(|| Error::Internal("a step names missing buffers".into()))?;
            for slice in slices(step) {
                let limit = match slice.buffer {
                    Buffer::Send => b.send_bytes,
                    Buffer::Recv => b.recv_bytes,
                };
                if (slice.offset + slice.count) * esize > limit {
                    return Err(Error::Internal(format!("{step:?} exceeds a buffer of {limit} bytes")));
                }
            }
            if let Some(link) = step.sends() {
                let tx = connections.senders.get(&link).ok_or_else(|| Error::Internal(format!("no connection to {link:?}")))?;
                if step.count() * esize > tx.slot_bytes() {
                    return Err(Error::Internal(format!("{step:?} exceeds a {}-byte slot", tx.slot_bytes())));
                }
            }
            if let Some(link) = step.receives() {
                connections.receivers.get(&link).ok_or_else(|| Error::Internal(format!("no connection from {link:?}")))?;
            }
        }
    }
    Ok(())
}

fn slices(step: &Step) -> Vec<Slice> {
    match *step {
        Step::Send { src, .. } => vec![src],
        Step::Recv { dst, .. } | Step::RecvCopySend { dst, .. } => vec![dst],
        Step::RecvReduceSend { local, .. } => vec![local],
        Step::RecvReduceCopy { local, dst, .. } | Step::RecvReduceCopySend { local, dst, .. } => vec![local, dst],
        Step::Copy { src, dst } => vec![src, dst],
    }
}

fn address(b: &Buffers, s: &Slice, esize: usize) -> *mut u8 {
    let base = match s.buffer {
        Buffer::Send => b.send as *mut u8,
        Buffer::Recv => b.recv,
    };
    base.wrapping_add(s.offset * esize)
}

/// # Safety
/// The slice is within its buffer (checked by `check_bounds`) and the buffer is valid.
unsafe fn read<'a>(b: &Buffers, s: &Slice, esize: usize) -> &'a [u8] {
    // SAFETY: per the function's contract.
    unsafe { std::slice::from_raw_parts(address(b, s, esize), s.count * esize) }
}

/// # Safety
/// As [`read`], and no other reference to the slice's memory is live.
unsafe fn write<'a>(b: &Buffers, s: &Slice, esize: usize) -> &'a mut [u8] {
    // SAFETY: per the function's contract.
    unsafe { std::slice::from_raw_parts_mut(address(b, s, esize), s.count * esize) }
}

/// `dst = received (op) local`, in place when `local` and `dst` are the same memory.
///
/// # Safety
/// As [`write`] for `dst` and [`read`] for `local`.
unsafe fn reduce_to(b: &Buffers, local: &Slice, dst: &Slice, received: &[u8], esize: usize, cx: &Context) -> Result<()> {
    let (l, d) = (address(b, local, esize), address(b, dst, esize));
    let len = local.count * esize;
    if l == d {
        // SAFETY: per the function's contract; only `dst` is referenced.
        combine(cx.dtype, cx.combine, unsafe { write(b, dst, esize) }, received)?;
    } else if (l as usize) < (d as usize) + len && (d as usize) < (l as usize) + len {
        return Err(Error::Internal(format!("{local:?} and {dst:?} overlap partially")));
    } else {
        // SAFETY: disjoint, checked above.
        combine_into(cx.dtype, cx.combine, unsafe { write(b, dst, esize) }, received, unsafe { read(b, local, esize) })?;
    }
    Ok(())
}

/// Runs `step` if its connections are ready; returns whether it ran.
///
/// # Safety
/// The step's slices are within `b`'s buffers, which are valid.
unsafe fn try_step(step: &Step, b: &Buffers, conns: &mut Connections, esize: usize, cx: &Context) -> Result<bool> {
    let bytes = step.count() * esize;
    let Connections { senders, receivers, proxies } = conns;
    // Everything is checked for readiness before anything is consumed.
    let mut rx = match step.receives() {
        Some(link) => {
            let rx = receivers.get_mut(&link).expect("checked by check_bounds");
            match rx.try_peek() {
                Some(slot) if slot.len() == bytes => Some((rx_ptr(slot), rx)),
                Some(slot) => {
                    return Err(Error::Internal(format!("{step:?}: received {} bytes, expected {bytes}", slot.len())));
                }
                None => return Ok(false),
            }
        }
        None => None,
    };
    let mut tx = match step.sends() {
        Some(link) => {
            let tx = senders.get_mut(&link).expect("checked by check_bounds");
            match tx.try_reserve() {
                Some(slot) => Some((slot.as_mut_ptr(), tx)),
                None => return Ok(false),
            }
        }
        None => None,
    };
    let received: &[u8] = match &rx {
        // SAFETY: the peeked slot stays valid and unchanged until released below.
        Some((ptr, _)) => unsafe { std::slice::from_raw_parts(*ptr, bytes) },
        None => &[],
    };
    let outgoing: &mut [u8] = match &mut tx {
        // SAFETY: the reserved slot is ours until posted below.
        Some((ptr, _)) => unsafe { std::slice::from_raw_parts_mut(*ptr, bytes) },
        None => &mut [],
    };
    // SAFETY: every slice a step names is in bounds (check_bounds) of buffers valid for the
    // operation (the caller's contract); a Copy's source and destination may overlap only
    // as the schedule allows, which ptr::copy handles.
    unsafe {
        match *step {
            Step::Send { src, .. } => outgoing.copy_from_slice(read(b, &src, esize)),
            Step::Recv { dst, .. } => write(b, &dst, esize).copy_from_slice(received),
            Step::RecvReduceSend { local, .. } => combine_into(cx.dtype, cx.combine, outgoing, received, read(b, &local, esize))?,
            Step::RecvReduceCopy { local, dst, .. } => reduce_to(b, &local, &dst, received, esize, cx)?,
            Step::RecvReduceCopySend { local, dst, .. } => {
                reduce_to(b, &local, &dst, received, esize, cx)?;
                outgoing.copy_from_slice(read(b, &dst, esize));
            }
            Step::RecvCopySend { dst, .. } => {
                write(b, &dst, esize).copy_from_slice(received);
                outgoing.copy_from_slice(received);
            }
            Step::Copy { src, dst } => {
                let (s, d) = (address(b, &src, esize), address(b, &dst, esize));
                if s != d {
                    std::ptr::copy(s as *const u8, d, src.count * esize);
                }
            }
        }
    }
    if let Some((_, tx)) = tx {
        tx.post(bytes);
        wake(proxies, step.sends(), true);
    }
    if let Some((_, rx)) = rx.as_mut() {
        rx.release();
        wake(proxies, step.receives(), false);
    }
    Ok(true)
}

/// Wakes the proxy thread of `link`'s sending (`send`) or receiving end, if a network link.
fn wake(proxies: &FxHashMap<(Link, bool), crate::proxy::ProxyWaker>, link: Option<Link>, send: bool) {
    if let Some(proxy) = link.and_then(|l| proxies.get(&(l, send))) {
        proxy.wake();
    }
}

fn rx_ptr(slot: &[u8]) -> *const u8 {
    slot.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_waits_spin_then_yield_for_a_while_then_sleep_in_growing_steps() {
        let mut idle = Idle::default();
        // Spinning: no health check (it would cost more than the wait).
        for _ in 1..SPIN_PASSES {
            assert!(!idle.pause());
        }
        let start = Instant::now();
        while idle.sleep.is_none() {
            idle.pause();
            assert!(start.elapsed() < Duration::from_secs(5), "never started sleeping");
        }
        assert!(start.elapsed() >= YIELD_FOR, "slept after {:?} of yielding", start.elapsed());
        // Sleeping: every pass looks at the health, and sleeps at least the first step.
        let before = Instant::now();
        assert!(idle.pause());
        assert!(before.elapsed() >= FIRST_SLEEP * 2);
        for _ in 0..10 {
            idle.pause();
        }
        assert_eq!(idle.sleep, Some(LONGEST_SLEEP));
    }
}
