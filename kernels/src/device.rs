//! What the CUDA executor kernel reads: schedule steps and connection ends, laid out
//! `#[repr(C)]` here and declared to the kernel by a header generated from these types
//! ([`header`]), which NVRTC checks with `static_assert`s on the size of every struct and
//! field: the fields tile each struct with no padding (tested here), so equal sizes in the
//! same order mean equal offsets (NVRTC 13.0 has no `offsetof`). The Rust
//! side is the one definition; the kernel never declares these structs by hand.
//!
//! A step of the host schedule (`oxccl_runtime::algo::Step`) becomes one [`DevStep`]: the
//! kind, the connection it receives from and the one it sends to (indices into the
//! launch's [`DevConn`] table, or [`NO_CONN`]), its length in bytes and its local source
//! and destination as [`DevSlice`] words (a byte offset, with [`RECV_BUFFER`] set for the
//! output buffer).

use std::fmt::Write;
use std::mem::{offset_of, size_of};

/// Step kinds, as `DevStep::kind` holds them; the names follow the host schedule's steps.
pub mod kind {
    pub const SEND: u32 = 0;
    pub const RECV: u32 = 1;
    pub const RECV_REDUCE_SEND: u32 = 2;
    pub const RECV_REDUCE_COPY: u32 = 3;
    pub const RECV_REDUCE_COPY_SEND: u32 = 4;
    pub const RECV_COPY_SEND: u32 = 5;
    pub const COPY: u32 = 6;
    /// A send and a copy of the same local slice in one pass (the encoder's fusion of a
    /// schedule's `Send` followed by a `Copy` of what it sent): each line read once, written
    /// to the outgoing slot and to `dst` (not where `dst` is the slice itself, in place).
    pub const COPY_SEND: u32 = 7;
    /// Every kind with its C name.
    pub const ALL: [(&str, u32); 8] = [
        ("OX_SEND", SEND),
        ("OX_RECV", RECV),
        ("OX_RECV_REDUCE_SEND", RECV_REDUCE_SEND),
        ("OX_RECV_REDUCE_COPY", RECV_REDUCE_COPY),
        ("OX_RECV_REDUCE_COPY_SEND", RECV_REDUCE_COPY_SEND),
        ("OX_RECV_COPY_SEND", RECV_COPY_SEND),
        ("OX_COPY", COPY),
        ("OX_COPY_SEND", COPY_SEND),
    ];
}

/// `DevStep::recv` / `send` when the step has no such connection.
pub const NO_CONN: i32 = -1;

/// Set in a slice word when the slice is in the output (`recvbuff`), clear for the input.
pub const RECV_BUFFER: u64 = 1 << 63;

/// Why a kernel stopped early, as it writes into the status word.
pub mod status {
    /// The abort flag was raised (abort, a dead peer).
    pub const ABORTED: i32 = 1;
    /// A wait outlasted the launch's timeout.
    pub const TIMED_OUT: i32 = 2;
    /// The peer waited for left the job normally (its `gone` flag is up) and what was
    /// waited for had not come: the ranks did not make the same calls.
    pub const PEER_LEFT: i32 = 3;
    /// The executor's LL entry (`ox_run_ll`) met a step it cannot move: the runtime picked
    /// it for a plan that [`super::ll_entry_fits`] does not fit (a bug in oxccl).
    pub const MISPLANNED: i32 = 4;
    /// Ints of the status word: code, lane, step, kernel, the peer waited for.
    pub const WORDS: usize = 5;
    /// Which kernel stopped, in the status word's fourth int.
    pub const KERNEL_RUN: i32 = 1;
    pub const KERNEL_DIRECT: i32 = 2;
    /// `ox_p2p`, sending to (receiving from) the rank in the lane int.
    pub const KERNEL_P2P_SEND: i32 = 3;
    pub const KERNEL_P2P_RECV: i32 = 4;
    /// `ox_wait_host`, holding a stream for the host's part of a staged operation.
    pub const KERNEL_WAIT_HOST: i32 = 5;
}

/// What a direct launch ([`DevDirect`]) does, as `DevDirect::mode` holds it.
pub mod direct {
    /// Every rank sends its input to every other; every rank reduces all of them.
    pub const ALL_REDUCE: u32 = 0;
    /// Every rank but the root sends its input to the root, which reduces.
    pub const REDUCE: u32 = 1;
    /// Every rank sends its input to every other; every rank places block p at p.
    pub const ALL_GATHER: u32 = 2;
    /// Every rank sends its input's block d to rank d; every rank reduces its block.
    pub const REDUCE_SCATTER: u32 = 3;
    /// The root sends its input to every other rank.
    pub const BROADCAST: u32 = 4;
    /// all_reduce in two shots in one launch (over LL128 lines only): every rank sends its
    /// input's block d to rank d, folds its own block and sends each folded line on to every
    /// other rank (into the rows at `DevDirect::second_offset`), and places block p, as p
    /// folded it, at p.
    pub const TWO_SHOT: u32 = 5;
    /// Every mode with its C name.
    pub const ALL: [(&str, u32); 6] = [
        ("OX_DIRECT_ALL_REDUCE", ALL_REDUCE),
        ("OX_DIRECT_REDUCE", REDUCE),
        ("OX_DIRECT_ALL_GATHER", ALL_GATHER),
        ("OX_DIRECT_REDUCE_SCATTER", REDUCE_SCATTER),
        ("OX_DIRECT_BROADCAST", BROADCAST),
        ("OX_DIRECT_TWO_SHOT", TWO_SHOT),
    ];
}

/// Bytes of one LL line: 8 bytes of data and two 4-byte flags, stored in one 16-byte store.
pub const LL_LINE_BYTES: usize = 16;
/// Data bytes one LL line carries.
pub const LL_LINE_DATA: usize = 8;

/// A local slice: byte offset, [`RECV_BUFFER`] for the output buffer.
pub type DevSlice = u64;

/// One schedule step (C: `OxStep`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevStep {
    pub kind: u32,
    /// Connection received from, or [`NO_CONN`].
    pub recv: i32,
    /// Connection sent to, or [`NO_CONN`].
    pub send: i32,
    /// Bytes the step moves (at most a slot).
    pub bytes: u32,
    /// The local slice read (sends and reductions) — 0 when the step reads none.
    pub src: DevSlice,
    /// The local slice written — 0 when the step writes none.
    pub dst: DevSlice,
}

/// One end of a connection (C: `OxConn`). A connection is a FIFO of `slots` slots, one
/// every `slot_bytes` from `slots_base`; `tail` counts the messages the sender posted,
/// `head` those the receiver consumed; `counter` (this end's own GPU memory) counts this
/// end's messages over every launch so far. All addresses are device addresses this GPU
/// can reach. `peer` is the rank at the other end.
///
/// Between GPUs of one host the FIFO and its tail are in the receiver's GPU memory and the
/// head in the sender's. Over the network ([`conn::HOST`] in `flags`) the FIFO, its tail,
/// head and `sizes` are pinned host memory mapped into this GPU, the other end being this
/// rank's network proxy (oxccl_transports::fifo's layout): a sender then also writes each
/// message's size (`u32` per slot at `sizes`) before the tail, and a receiver reads slots
/// past the GPU's caches; `counter` is then two `u64`, the second the last head a sending
/// kernel read (it rereads the head, a PCIe round trip, only when that one is short).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevConn {
    pub slots_base: u64,
    pub tail: u64,
    pub head: u64,
    pub counter: u64,
    /// `u32[slots]`: each posted message's size, for a proxy that sends it on; 0 when
    /// nobody reads sizes (the receiver knows them from its steps).
    pub sizes: u64,
    pub slot_bytes: u64,
    /// The LL slots ([`ll`]), `slots` of `ll_slot_bytes` from here: over the network in
    /// the shared FIFO after the Simple slots; between GPUs of a host in the receiver's GPU
    /// memory after its Simple slots ([`conn::PEER_LL`]).
    pub ll_slots: u64,
    pub slots: u32,
    pub peer: u32,
    /// [`conn`] bits.
    pub flags: u32,
    pub ll_slot_bytes: u32,
}

impl DevConn {
    /// Whether this connection runs LL in a launch with [`DevArgs::ll`] bits `ll` (C:
    /// `ox_runs_ll`).
    pub fn runs_ll(&self, ll: u32) -> bool {
        if self.flags & conn::HOST != 0 {
            ll & launch::NET_LL != 0
        } else {
            ll & launch::PEER_LL != 0 && self.flags & conn::PEER_LL != 0
        }
    }
}

/// Whether the executor's LL entry (`ox_run_ll`, [`crate::cuda::RUN_LL`]) can run a plan of
/// `steps` over `conns` in a launch with [`DevArgs::ll`] bits `ll`: every step moves over
/// LL on one of its ends (the kernel's `in_ll || out_ll`) or is a local copy. Those are the
/// only moves the entry has; what it is given besides stops it with [`status::MISPLANNED`].
pub fn ll_entry_fits(steps: &[DevStep], conns: &[DevConn], ll: u32) -> bool {
    let runs_ll = |end: i32| usize::try_from(end).ok().and_then(|i| conns.get(i)).is_some_and(|c| c.runs_ll(ll));
    steps.iter().all(|s| runs_ll(s.recv) || runs_ll(s.send) || (s.kind == kind::COPY && s.recv == NO_CONN && s.send == NO_CONN))
}

/// `DevConn::flags` bits.
pub mod conn {
    /// The FIFO is pinned host memory that the network proxy fills or drains.
    pub const HOST: u32 = 1;
    /// Between GPUs of a host: the connection has LL slots, which a launch with
    /// [`super::launch::PEER_LL`] uses.
    pub const PEER_LL: u32 = 2;
}

/// `DevArgs::ll` bits: which connections run the LL protocol in a launch.
pub mod launch {
    /// Those over the network ([`super::conn::HOST`]).
    pub const NET_LL: u32 = 1;
    /// Those between GPUs of a host that have LL slots ([`super::conn::PEER_LL`]).
    pub const PEER_LL: u32 = 2;
}

/// The LL protocol over a FIFO (a launch with [`DevArgs::ll`]): over the network
/// ([`conn::HOST`]) or between GPUs of a host ([`conn::PEER_LL`]).
/// LL messages go through slots of their own ([`DevConn::ll_slots`], [`SLOT_BYTES`]
/// each): slot `n % slots` for message `n`, as the Simple slot, so that one FIFO's head and
/// tail count both, but never memory a Simple message wrote (whose bytes could look like
/// a flag). A message's slot holds a header line — its byte count in the first data word, 0 in the
/// second — then one line per 8 bytes of data, every line of [`LL_LINE_BYTES`] carrying
/// the message's flag ([`ll::flag`]) beside each 4 data bytes, so that each 8-byte half is
/// whole once its flag shows. The sending kernel needs no fence: over the network its
/// proxy sends the slot once the header and every line show the flag, between GPUs it
/// writes the lines straight into the receiver's slot; the receiving kernel polls the
/// data lines, with no tail to wait for first (and the header only in a message of no
/// bytes). A receiver frees a slot (its head) only after it read every data line of it.
pub mod ll {
    use super::LL_LINE_BYTES;

    /// Bytes of an LL slot: a header line and 4095 lines, 32760 data bytes.
    pub const SLOT_BYTES: usize = 64 << 10;

    /// Data bytes a slot of `slot_bytes` carries over LL (a header line, then lines of 8).
    pub fn slot_data(slot_bytes: usize) -> usize {
        (slot_bytes / LL_LINE_BYTES).saturating_sub(1) * super::LL_LINE_DATA
    }

    /// Bytes of a message of `bytes` data bytes over LL, header line included.
    pub fn message_bytes(bytes: usize) -> usize {
        (bytes.div_ceil(super::LL_LINE_DATA) + 1) * LL_LINE_BYTES
    }

    /// The flag of message `n` (counted from 0 over the connection's life): never 0, so a
    /// slot not yet written never shows it; equal again only 2^32 - 1 messages later.
    pub fn flag(n: u64) -> u32 {
        (n % 0xffff_ffff) as u32 + 1
    }
}

/// LL128 lines (the one-hop kernel's calls of OXCCL_GPU_DIRECT_LL128_BYTES and more, and
/// its two shots): 128 bytes, 15 data words of 8 bytes and a flag word (the launch's flag
/// twice), written by 8 threads of a warp in one store instruction, 16 bytes each, the
/// eighth holding the last data word and the flag. NVLink delivers such a store to a 128-byte line whole, so the flag's arrival
/// means the line's; NCCL's LL128 relies on the same.
pub mod ll128 {
    /// Bytes of a line.
    pub const LINE_BYTES: usize = 128;
    /// Data bytes of a line.
    pub const LINE_DATA: usize = 120;
    /// Threads that write (and read) one line.
    pub const LINE_THREADS: usize = 8;

    /// Bytes of `bytes` data bytes as LL128 lines.
    pub fn message_bytes(bytes: usize) -> usize {
        bytes.div_ceil(LINE_DATA) * LINE_BYTES
    }
}

/// What every wait of every kernel watches (C: `OxWatch`), part of each launch's
/// arguments.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevWatch {
    /// A mapped host `int` the host raises to stop the kernel.
    pub abort: u64,
    /// A mapped host `int[status::WORDS]`: status code, lane, step, kernel
    /// (`status::KERNEL_*`), the peer waited for.
    pub status: u64,
    /// `u32[nranks]` in this rank's GPU memory: rank p writes 1 at p when it leaves the
    /// communicator normally, after its last kernel ended.
    pub gone: u64,
    /// How long one wait may last (ns of `%globaltimer`).
    pub timeout_ns: u64,
}

/// Kernel arguments (C: `OxArgs`), passed by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevArgs {
    /// `DevStep`s of every lane, lane after lane.
    pub steps: u64,
    /// `u32` bounds: lane i runs steps `bounds[i]..bounds[i+1]`.
    pub bounds: u64,
    /// The `DevConn` table.
    pub conns: u64,
    /// The input and output buffers.
    pub send: u64,
    pub recv: u64,
    pub watch: DevWatch,
    /// When `scaled` is 1: every element read from the input buffer is first multiplied
    /// by this (PreMulSum, float Avg), in the datatype's arithmetic.
    pub scale: f64,
    pub scaled: u32,
    /// [`launch`] bits: which connections run the LL protocol in this launch ([`ll`]):
    /// those over the network ([`launch::NET_LL`]), those between GPUs of a host
    /// ([`launch::PEER_LL`]); the others Simple.
    pub ll: u32,
    /// The launch's timeline record ([`timeline`]) in mapped host memory, or 0: none kept.
    pub stamps: u64,
    /// With `stamps`: a mapped host word that a host thread keeps at the host's clock (ns),
    /// which lane 0 reads once at its end to pin the timeline's clock to the host's
    /// ([`timeline::CLOCK`]); 0: not read.
    pub clock: u64,
}

/// The arguments of the executor's LL entry (C: `OxArgsLl`): a [`DevArgs`] whose `steps`,
/// `bounds` and `conns` are offsets into the plan's image, which follows it by value (the
/// connection table, bounds and steps as uploaded), so that the kernel reads its plan from
/// its parameters instead of through dependent loads from global memory. Declared
/// [`PARAM_BYTES`](ll_args::PARAM_BYTES) long, a launch passes only [`ll_args::buffer`]'s
/// bytes (cuLaunchKernel's `extra`), as NCCL passes its kernels' work.
pub mod ll_args {
    use super::DevArgs;

    /// Where the image starts: after the [`DevArgs`], the image's length (`u32`) and a pad.
    pub const IMAGE_OFFSET: usize = std::mem::size_of::<DevArgs>() + 8;
    /// The entry's declared parameter bytes: CUDA's classic 4 KiB limit.
    pub const PARAM_BYTES: usize = 4096 - 16;
    /// The largest image the entry takes; a larger plan runs in the full entry.
    pub const IMAGE_BYTES: usize = PARAM_BYTES - IMAGE_OFFSET;
    // Within CUDA's 4 KiB, and whole `uint4`s (the C array's element).
    const _: () = assert!(PARAM_BYTES <= 4096 && IMAGE_BYTES % 16 == 0);

    /// The parameter bytes of a launch of the LL entry over `image`, with `args` (whose plan
    /// addresses are the image's offsets); `None` when the image is larger than
    /// [`IMAGE_BYTES`].
    pub fn buffer(args: &DevArgs, image: &[u8]) -> Option<Vec<u8>> {
        if image.len() > IMAGE_BYTES {
            return None;
        }
        let len = u32::try_from(image.len()).ok()?;
        let mut bytes = Vec::with_capacity(IMAGE_OFFSET + image.len());
        bytes.extend_from_slice(bytemuck::bytes_of(args));
        bytes.extend_from_slice(&len.to_le_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(image);
        Some(bytes)
    }
}

/// The executor kernel's timeline (`OXCCL_KERNEL_TRACE`): thread 0 of each of the first
/// [`timeline::LANES`] lanes writes `%globaltimer` (ns) into the launch's record: the lane's
/// start and end, then per step (the first [`timeline::STEPS`]) when it started, when its
/// waits were over (the incoming slot full, the outgoing one free), when the data had
/// moved (every thread past it) and when it was published (counters written). A lane's
/// words: [start, end, then STAMPS per step]; the record holds LANES lanes, then
/// [`timeline::CLOCK_WORDS`] words at [`timeline::CLOCK`] where thread 0 of lane 0, after its
/// end, writes `%globaltimer`, the host clock word ([`DevArgs::clock`]) as it read it, and
/// `%globaltimer` once that read came back: the host's clock was read between the two.
pub mod timeline {
    pub const LANES: usize = 2;
    pub const STEPS: usize = 64;
    pub const STAMPS: usize = 4;
    /// u64 words of one lane.
    pub const LANE_WORDS: usize = 2 + STEPS * STAMPS;
    /// Where a record's clock reading starts, and its words.
    pub const CLOCK: usize = LANES * LANE_WORDS;
    pub const CLOCK_WORDS: usize = 3;
    /// u64 words of one launch's record.
    pub const RECORD_WORDS: usize = CLOCK + CLOCK_WORDS;
}

/// Arguments of the direct kernel (C: `OxDirect`), passed by value: a small collective in
/// one hop over the LL protocol, or LL128 (`ll128`). Every rank owns an inbox in its GPU
/// memory: per protocol 2 halves × `nranks` senders × a row of 16-byte lines (`cap_lines`
/// of them for this launch's protocol, from `rows_offset`; as many LL128 rows again from
/// `second_offset` for the second of [`direct::TWO_SHOT`]'s shots), then at `ack_offset`
/// one u64 per rank. A sender writes its data into the receiver's inbox with the flag
/// `epoch` in every line, so data and its readiness travel in one store, and the receiver
/// waits for the flags line by line. Launch `launch` uses half `launch & 1`. A launch starting on a
/// rank means the one before ended there: it first writes `launch - 1` into slot `rank` of
/// every peer's acknowledgements; a sender writes into a peer's half only once that peer
/// acknowledged the launch two before, the last one that used the half (a broadcast's root
/// or a reduce's non-roots would otherwise run ahead of their receivers).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevDirect {
    pub send: u64,
    pub recv: u64,
    /// This rank's inbox.
    pub inbox: u64,
    /// `nranks` device addresses: every rank's inbox as this GPU reaches it.
    pub peers: u64,
    pub watch: DevWatch,
    /// As in [`DevArgs`].
    pub scale: f64,
    /// Data bytes of one rank's contribution (a block, for the gathers and scatters).
    pub bytes: u64,
    /// This communicator's direct launches so far, this one included (1 for the first).
    pub launch: u64,
    /// Where, in every inbox, the rows of this launch's protocol start (LL128 rows apart
    /// from LL's).
    pub rows_offset: u64,
    /// Where, in every inbox, the second shot's LL128 rows start ([`direct::TWO_SHOT`];
    /// rows as long as the first's).
    pub second_offset: u64,
    /// Where, in every inbox, the acknowledgements (u64 per rank) lie.
    pub ack_offset: u64,
    /// 16-byte lines per (half, sender) row of this launch's protocol in every inbox.
    pub cap_lines: u32,
    /// The launch's flag in every line: never 0 (inboxes start zeroed), and different from
    /// the flags of the launches before it that used the same half.
    pub epoch: u32,
    pub rank: u32,
    pub nranks: u32,
    pub root: u32,
    /// One of [`direct`].
    pub mode: u32,
    pub scaled: u32,
    /// 1: the lines are LL128's (128 bytes: 15 data words and the flag word), else LL's.
    pub ll128: u32,
}

/// Arguments of the point-to-point LL kernel (C: `OxP2p`), passed by value: a group's
/// small sends and receives, each written as LL lines straight into the receiver's inbox.
/// Every rank owns a second inbox for these, apart from the direct kernel's: for each
/// sender s, two halves of `cap_lines` lines, row `2 s + half`; at `ack_offset` one u64 per
/// rank r, the last message from this rank that r has read (r writes it); at
/// `count_offset` this rank's own counters, u64 `sent[nranks]` then `received[nranks]`.
/// Messages are counted per ordered pair over the communicator's life: message k (from 1)
/// from s to d goes into d's row for s, half `k & 1`, every line flagged k (1..=u32::MAX
/// and around, never 0); s writes it only once d acknowledged message k − 2, the last one
/// in that half. Lane i (block i) runs `lanes[i]`: the messages for one peer in one
/// direction, in call order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevP2p {
    /// `DevP2pLane`s, one per block.
    pub lanes: u64,
    /// `DevP2pMsg`s, lane after lane.
    pub msgs: u64,
    /// What the messages' addresses are offsets from: sends' (and copies' sources) from
    /// `send_base`, receives' (and copies' destinations) from `recv_base` — so that a
    /// group whose buffers move, its layout within them unchanged, keeps its plan.
    pub send_base: u64,
    pub recv_base: u64,
    /// This rank's inbox.
    pub inbox: u64,
    /// `nranks` device addresses: every rank's inbox as this GPU reaches it.
    pub peers: u64,
    pub watch: DevWatch,
    pub ack_offset: u64,
    pub count_offset: u64,
    /// Lines per half of a row (each message fits in one half).
    pub cap_lines: u32,
    pub rank: u32,
    pub nranks: u32,
    pub _pad: u32,
}

/// What a lane of a [`DevP2p`] launch does, as `DevP2pLane::kind` holds it.
pub mod lane {
    /// Receives its messages from `peer`, in order.
    pub const RECV: u32 = 0;
    /// Sends its messages to `peer`, in order.
    pub const SEND: u32 = 1;
    /// Copies each message's `src` to its `addr` (this rank's sends to itself; no peer).
    pub const COPY: u32 = 2;
    /// Sends each message to `peer`, then receives `peer`'s message of the same size in
    /// its place (an in-place alltoall: both at `addr`, the send read before the receive
    /// writes over it).
    pub const EXCHANGE: u32 = 3;
    /// Every kind with its C name.
    pub const ALL: [(&str, u32); 4] = [("OX_LANE_RECV", RECV), ("OX_LANE_SEND", SEND), ("OX_LANE_COPY", COPY), ("OX_LANE_EXCHANGE", EXCHANGE)];
}

/// One lane of a [`DevP2p`] launch (C: `OxP2pLane`): messages `first..end` of the launch's
/// list, all sent to or received from `peer`, or both (by [`lane`] `kind`), in call order.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevP2pLane {
    pub peer: u32,
    pub kind: u32,
    pub first: u32,
    pub end: u32,
}

/// One message of a [`DevP2p`] launch (C: `OxP2pMsg`): `bytes` at `addr` (read when
/// sending, written when receiving or copying), and a copy's source `src`; offsets from
/// the launch's bases (`DevP2p::send_base` for what is read, `recv_base` for what is
/// written).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DevP2pMsg {
    pub addr: u64,
    pub bytes: u64,
    pub src: u64,
}

struct Field {
    c_type: &'static str,
    name: &'static str,
    offset: usize,
    size: usize,
}

macro_rules! fields {
    ($ty:ty { $($c:literal $name:ident : $rust:ty),* $(,)? }) => {
        vec![$(Field { c_type: $c, name: stringify!($name), offset: offset_of!($ty, $name), size: size_of::<$rust>() }),*]
    };
}

fn structs() -> Vec<(&'static str, usize, Vec<Field>)> {
    vec![
        (
            "OxWatch",
            size_of::<DevWatch>(),
            fields!(DevWatch { "volatile int*" abort: u64, "int*" status: u64, "const volatile unsigned int*" gone: u64, "unsigned long long" timeout_ns: u64 }),
        ),
        (
            "OxStep",
            size_of::<DevStep>(),
            fields!(DevStep { "unsigned int" kind: u32, "int" recv: i32, "int" send: i32, "unsigned int" bytes: u32, "unsigned long long" src: u64, "unsigned long long" dst: u64 }),
        ),
        (
            "OxConn",
            size_of::<DevConn>(),
            fields!(DevConn {
                "char*" slots_base: u64,
                "volatile unsigned long long*" tail: u64,
                "volatile unsigned long long*" head: u64,
                "unsigned long long*" counter: u64,
                "volatile unsigned int*" sizes: u64,
                "unsigned long long" slot_bytes: u64,
                "char*" ll_slots: u64,
                "unsigned int" slots: u32,
                "unsigned int" peer: u32,
                "unsigned int" flags: u32,
                "unsigned int" ll_slot_bytes: u32,
            }),
        ),
        (
            "OxArgs",
            size_of::<DevArgs>(),
            fields!(DevArgs {
                "const OxStep*" steps: u64,
                "const unsigned int*" bounds: u64,
                "const OxConn*" conns: u64,
                "const char*" send: u64,
                "char*" recv: u64,
                "OxWatch" watch: DevWatch,
                "double" scale: f64,
                "unsigned int" scaled: u32,
                "unsigned int" ll: u32,
                "unsigned long long*" stamps: u64,
                "const volatile unsigned long long*" clock: u64,
            }),
        ),
        (
            "OxDirect",
            size_of::<DevDirect>(),
            fields!(DevDirect {
                "const char*" send: u64,
                "char*" recv: u64,
                "char*" inbox: u64,
                "char* const*" peers: u64,
                "OxWatch" watch: DevWatch,
                "double" scale: f64,
                "unsigned long long" bytes: u64,
                "unsigned long long" launch: u64,
                "unsigned long long" rows_offset: u64,
                "unsigned long long" second_offset: u64,
                "unsigned long long" ack_offset: u64,
                "unsigned int" cap_lines: u32,
                "unsigned int" epoch: u32,
                "unsigned int" rank: u32,
                "unsigned int" nranks: u32,
                "unsigned int" root: u32,
                "unsigned int" mode: u32,
                "unsigned int" scaled: u32,
                "unsigned int" ll128: u32,
            }),
        ),
        (
            "OxP2pLane",
            size_of::<DevP2pLane>(),
            fields!(DevP2pLane { "unsigned int" peer: u32, "unsigned int" kind: u32, "unsigned int" first: u32, "unsigned int" end: u32 }),
        ),
        ("OxP2pMsg", size_of::<DevP2pMsg>(), fields!(DevP2pMsg { "unsigned long long" addr: u64, "unsigned long long" bytes: u64, "unsigned long long" src: u64 })),
        (
            "OxP2p",
            size_of::<DevP2p>(),
            fields!(DevP2p {
                "const OxP2pLane*" lanes: u64,
                "const OxP2pMsg*" msgs: u64,
                "const char*" send_base: u64,
                "char*" recv_base: u64,
                "char*" inbox: u64,
                "char* const*" peers: u64,
                "OxWatch" watch: DevWatch,
                "unsigned long long" ack_offset: u64,
                "unsigned long long" count_offset: u64,
                "unsigned int" cap_lines: u32,
                "unsigned int" rank: u32,
                "unsigned int" nranks: u32,
                "unsigned int" _pad: u32,
            }),
        ),
    ]
}

/// The C declarations of [`DevStep`], [`DevConn`], [`DevArgs`], the step kinds and the
/// status codes, with `static_assert`s on every struct and field size, for the kernel
/// source.
pub fn header() -> String {
    let mut h = String::from("// Generated by oxccl_kernels::device::header() from the Rust layouts. Do not edit.\n");
    for (name, value) in kind::ALL {
        let _ = writeln!(h, "#define {name} {value}u");
    }
    for (name, value) in direct::ALL.into_iter().chain(lane::ALL) {
        let _ = writeln!(h, "#define {name} {value}u");
    }
    let _ = writeln!(h, "#define OX_NO_CONN ({NO_CONN})");
    let _ = writeln!(h, "#define OX_RECV_BUFFER 0x{RECV_BUFFER:x}ull");
    // Name, value, C suffix: the bit masks and sizes unsigned, the status codes int.
    let defines: [(&str, i64, &str); 21] = [
        ("OX_CONN_HOST", conn::HOST.into(), "u"),
        ("OX_CONN_PEER_LL", conn::PEER_LL.into(), "u"),
        ("OX_LAUNCH_NET_LL", launch::NET_LL.into(), "u"),
        ("OX_LAUNCH_PEER_LL", launch::PEER_LL.into(), "u"),
        ("OX_TRACE_LANES", timeline::LANES as i64, "u"),
        ("OX_TRACE_STEPS", timeline::STEPS as i64, "u"),
        ("OX_TRACE_STAMPS", timeline::STAMPS as i64, "u"),
        ("OX_TRACE_LANE_WORDS", timeline::LANE_WORDS as i64, "u"),
        ("OX_TRACE_CLOCK", timeline::CLOCK as i64, "u"),
        ("OX_ABORTED", status::ABORTED.into(), ""),
        ("OX_TIMED_OUT", status::TIMED_OUT.into(), ""),
        ("OX_PEER_LEFT", status::PEER_LEFT.into(), ""),
        ("OX_MISPLANNED", status::MISPLANNED.into(), ""),
        ("OX_LL_IMAGE_OFFSET", ll_args::IMAGE_OFFSET as i64, "u"),
        ("OX_LL_IMAGE_BYTES", ll_args::IMAGE_BYTES as i64, "u"),
        ("OX_KERNEL_RUN", status::KERNEL_RUN.into(), ""),
        ("OX_KERNEL_DIRECT", status::KERNEL_DIRECT.into(), ""),
        ("OX_KERNEL_P2P_SEND", status::KERNEL_P2P_SEND.into(), ""),
        ("OX_KERNEL_P2P_RECV", status::KERNEL_P2P_RECV.into(), ""),
        ("OX_KERNEL_WAIT_HOST", status::KERNEL_WAIT_HOST.into(), ""),
        ("OX_LL128_WORDS", (ll128::LINE_DATA / LL_LINE_DATA) as i64, "u"),
    ];
    for (name, value, suffix) in defines {
        let _ = writeln!(h, "#define {name} {value}{suffix}");
    }
    for (name, size, fields) in structs() {
        let _ = writeln!(h, "struct {name} {{");
        for f in &fields {
            let _ = writeln!(h, "  {} {};", f.c_type, f.name);
        }
        let _ = writeln!(h, "}};");
        let _ = writeln!(h, "static_assert(sizeof({name}) == {size}, \"{name} size differs from Rust\");");
        for f in &fields {
            // With every field's size equal and no padding (the size is their sum), the
            // offsets are the running sums, which the Rust side's test checks are its own.
            let _ = writeln!(h, "static_assert(sizeof((({name}*)0)->{}) == {}, \"{name}.{} (at {}) differs from Rust\");", f.name, f.size, f.name, f.offset);
        }
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_tile_each_struct_exactly() {
        for (name, size, fields) in structs() {
            let mut at = 0;
            for f in &fields {
                assert_eq!(f.offset, at, "{name}.{} is not where the previous field ends", f.name);
                at += f.size;
            }
            assert_eq!(at, size, "{name}: the fields do not cover the struct (padding or a missing field)");
        }
    }

    #[test]
    fn the_ll_entry_fits_plans_of_ll_moves_and_local_copies() {
        let net = DevConn { flags: conn::HOST, ..Default::default() };
        let peer_ll = DevConn { flags: conn::PEER_LL, ..Default::default() };
        let peer = DevConn::default();
        let conns = [net, peer_ll, peer];
        let step = |kind, recv, send| DevStep { kind, recv, send, ..Default::default() };
        let ring = [step(kind::COPY_SEND, NO_CONN, 0), step(kind::RECV, 0, NO_CONN), step(kind::COPY, NO_CONN, NO_CONN)];
        assert!(ll_entry_fits(&ring, &conns, launch::NET_LL));
        assert!(!ll_entry_fits(&ring, &conns, 0), "no connection runs LL without the launch's bits");
        assert!(!ll_entry_fits(&ring, &conns, launch::PEER_LL), "network connections run LL only with NET_LL");
        // One LL end is enough: the LL move reads (or writes) the other end plainly.
        assert!(ll_entry_fits(&[step(kind::RECV_COPY_SEND, 2, 0)], &conns, launch::NET_LL));
        // A step between GPUs of a host without LL slots moves Simple.
        assert!(!ll_entry_fits(&[step(kind::RECV_REDUCE_SEND, 2, 2)], &conns, launch::NET_LL | launch::PEER_LL));
        assert!(ll_entry_fits(&[step(kind::RECV_REDUCE_SEND, 1, 1)], &conns, launch::PEER_LL));
        // A step with no connection that is not a copy needs the full entry; so does a bad index.
        assert!(!ll_entry_fits(&[step(kind::SEND, NO_CONN, NO_CONN)], &conns, launch::NET_LL));
        assert!(!ll_entry_fits(&[step(kind::SEND, NO_CONN, 7)], &conns, launch::NET_LL));
        assert!(ll_entry_fits(&[], &conns, launch::NET_LL));
    }

    #[test]
    fn the_ll_entrys_parameters_are_the_args_then_the_image() {
        let args = DevArgs { steps: 7, bounds: 3, conns: 0, ..Default::default() };
        let image: Vec<u8> = (0..224u32).map(|i| i as u8).collect();
        let bytes = ll_args::buffer(&args, &image).unwrap();
        assert_eq!(ll_args::IMAGE_OFFSET, 112);
        assert_eq!(bytes.len(), ll_args::IMAGE_OFFSET + image.len());
        assert_eq!(&bytes[..std::mem::size_of::<DevArgs>()], bytemuck::bytes_of(&args));
        assert_eq!(&bytes[104..108], &224u32.to_le_bytes());
        assert_eq!(&bytes[ll_args::IMAGE_OFFSET..], &image[..]);
        // The declared parameters hold the largest image and stay within CUDA's 4 KiB.
        assert!(ll_args::buffer(&args, &vec![0; ll_args::IMAGE_BYTES]).is_some());
        assert!(ll_args::buffer(&args, &vec![0; ll_args::IMAGE_BYTES + 1]).is_none());
    }

    #[test]
    fn header_declares_every_kind_and_struct() {
        let h = header();
        for (name, value) in kind::ALL {
            assert!(h.contains(&format!("#define {name} {value}u")), "{name}");
        }
        for s in ["struct OxStep {", "struct OxConn {", "struct OxArgs {", "sizeof(OxStep) == 32", "sizeof(OxConn) == 72", "sizeof(OxArgs) == 104", "sizeof(OxWatch) == 32", "#define OX_PEER_LEFT 3", "#define OX_MISPLANNED 4", "struct OxDirect {", "sizeof(OxDirect) == 144", "#define OX_DIRECT_BROADCAST 4u", "struct OxP2p {", "sizeof(OxP2p) == 112", "sizeof(OxP2pLane) == 16", "sizeof(OxP2pMsg) == 24", "#define OX_LANE_COPY 2u"] {
            assert!(h.contains(s), "{s} missing from:\n{h}");
        }
    }
}
