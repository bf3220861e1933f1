//! One-way FIFOs of slots in memory both ends can see: a mapping under /dev/shm for two
//! processes on one host, or the heap for two threads (or the local half of a network
//! connection, which the proxy engine fills or drains).
//!
//! # Layout
//!
//! One page of `#[repr(C)]` header (checked at compile time): magic, geometry and the
//! two pids, then the tail (slots posted by the sender) and the head (slots released by the
//! receiver), each on its own 128-byte line (a GPU's cache line) so that the two ends never
//! write the same line,
//! then each slot's byte count, then a small ring of the sender's notes to the receiver
//! ([`Region::note`]). The slots follow, 64-byte aligned, and in a shared segment made
//! with [`Region::create_shared_with_tail`] the caller's tail bytes after them. Counters
//! are 64-bit and only grow; slot `i` is `i % slots`.
//!
//! # Protocol
//!
//! The sender writes slot `tail % slots` in place (the executor reduces straight into it),
//! stores its size, then publishes it by advancing the tail with release ordering. The
//! receiver sees the tail with acquire ordering, reads the slot in place, then frees it by
//! advancing the head with release ordering; the sender's acquire of the head orders its
//! next write to that slot after the receiver's read. The loom tests in `loom_tests` check
//! exactly this, on the heap with the same code:
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p oxccl-transports --release loom
//! ```
//!
//! `try_*` calls never block, so one thread can progress many connections. `wait_*` calls
//! spin briefly, then yield, then sleep in growing steps, and give up with an error at the
//! deadline, when the caller's abort flag is set, or when the peer process has exited.
//!
//! # Lifetime of a shared segment
//!
//! The receiver creates the segment (`/dev/shm/oxccl-<pid>-<random>`, mode 0600) and hands
//! the sender the bytes of [`Region::create_shared`]'s handle. The sender maps it and
//! removes its name at once: from then on nothing is left in /dev/shm whoever crashes. If
//! the sender never comes, the receiver's [`Region`] removes the name on drop; if the
//! receiver is killed before that, [`cleanup_stale`] removes segments of dead pids.

mod memory;

pub use memory::cleanup_stale;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{spin_hint, AtomicU32, AtomicU64, SlotAccess};
use crate::{Error, Result};

/// Slots per FIFO by default (NCCL_STEPS).
pub const DEFAULT_SLOTS: usize = 8;
/// Bytes of all slots of a FIFO together by default (NCCL_BUFFSIZE, 4 MiB).
pub const DEFAULT_BUFFER_BYTES: usize = 4 << 20;
/// Bytes per slot by default: the buffer split into its steps.
pub const DEFAULT_SLOT_BYTES: usize = DEFAULT_BUFFER_BYTES / DEFAULT_SLOTS;
/// Most slots a FIFO may have (the header holds this many sizes).
pub const MAX_SLOTS: usize = 16;
/// Notes the header's ring holds that the receiver has not taken yet ([`Region::note`]).
pub const NOTES: usize = 32;

const MAGIC: u64 = 0x4f58_4649_464f_0004; // "OXFIFO", layout version 4
/// The header takes one page, so that the slots start page-aligned in a mapping.
pub const HEADER_BYTES: usize = 4096;
/// Where, in the header, the tail (u64), the head (u64) and the slots' sizes (u32 each)
/// are: what code on the other side of a lent region (a GPU kernel) reads and writes.
pub const TAIL_OFFSET: usize = 128;
pub const HEAD_OFFSET: usize = 256;
pub const SIZES_OFFSET: usize = 384;
const SLOT_ALIGN: usize = 64;
/// The FIFO has no doorbell: its reader polls (every FIFO but a PXN relay's).
const BELL_OFF: u32 = 0;
/// The reader may sleep on the doorbell, and is awake.
const BELL_ON: u32 = 1;
/// The reader is about to sleep, or sleeps: the sender rings after each post.
#[cfg(not(loom))]
const BELL_ARMED: u32 = 2;

/// How a FIFO is cut into slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub slots: usize,
    pub slot_bytes: usize,
}

impl Geometry {
    /// `buffer_bytes` (NCCL_BUFFSIZE) split into `slots` steps.
    pub fn from_buffer(buffer_bytes: usize, slots: usize) -> Geometry {
        Geometry { slots, slot_bytes: buffer_bytes / slots.max(1) }
    }

    /// Bytes of memory a FIFO of this geometry takes, header included.
    pub fn region_bytes(&self) -> usize {
        HEADER_BYTES + self.slots * self.stride()
    }

    /// Bytes from one slot to the next: `slot_bytes` rounded up to 64.
    pub fn stride(&self) -> usize {
        self.slot_bytes.next_multiple_of(SLOT_ALIGN)
    }

    fn check(&self) -> Result<()> {
        // Sizes are stored as u32; half of that leaves room for the rounding to SLOT_ALIGN.
        if !(2..=MAX_SLOTS).contains(&self.slots) || self.slot_bytes == 0 || self.slot_bytes > u32::MAX as usize / 2 {
            return Err(Error::InvalidArgument(format!(
                "FIFO of {} slots of {} bytes (needs 2..={MAX_SLOTS} slots of 1..=2 GiB)",
                self.slots, self.slot_bytes
            )));
        }
        Ok(())
    }
}

impl Default for Geometry {
    fn default() -> Geometry {
        Geometry { slots: DEFAULT_SLOTS, slot_bytes: DEFAULT_SLOT_BYTES }
    }
}

/// 128 bytes: a GPU's cache line (L2), the largest of the two ends' lines. A line that
/// both ends write (one a counter, the other a size) could be held by one side's cache
/// while the other rewrites it, so each part the two ends write apart has a line of its own.
#[repr(C, align(128))]
struct CacheLine<T>(T);

/// The shared part of a FIFO, at the start of its memory.
#[repr(C)]
struct Header {
    magic: AtomicU64,
    slots: AtomicU32,
    slot_bytes: AtomicU32,
    /// The receiver's pid (it creates shared segments); 0 on the heap.
    receiver_pid: AtomicU32,
    /// The sender's pid once it has opened the segment; 0 before that and on the heap.
    sender_pid: AtomicU32,
    /// The doorbell (see [`Doorbell`]): bumped and woken by the sender when the reader
    /// sleeps on it.
    bell: AtomicU32,
    /// [`BELL_OFF`], [`BELL_ON`] or [`BELL_ARMED`].
    bell_state: AtomicU32,
    _reserved: [u32; 8],
    tail: CacheLine<AtomicU64>,
    head: CacheLine<AtomicU64>,
    sizes: CacheLine<[AtomicU32; MAX_SLOTS]>,
    /// Notes written (by the sender) and taken (by the receiver), and the ring of them.
    notes_written: CacheLine<AtomicU64>,
    notes_taken: CacheLine<AtomicU64>,
    notes: CacheLine<[AtomicU64; NOTES]>,
}

// The layout is shared between processes (possibly of different builds): pin it. Loom's
// atomics are larger, and loom builds have no shared segments.
#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<Header>() == 1024);
    assert!(std::mem::align_of::<Header>() == 128);
    assert!(std::mem::offset_of!(Header, slots) == 8);
    assert!(std::mem::offset_of!(Header, receiver_pid) == 16);
    assert!(std::mem::offset_of!(Header, sender_pid) == 20);
    assert!(std::mem::offset_of!(Header, bell) == 24);
    assert!(std::mem::offset_of!(Header, bell_state) == 28);
    assert!(std::mem::offset_of!(Header, tail) == TAIL_OFFSET);
    assert!(std::mem::offset_of!(Header, head) == HEAD_OFFSET);
    assert!(std::mem::offset_of!(Header, sizes) == SIZES_OFFSET);
    assert!(std::mem::size_of::<Header>() <= HEADER_BYTES);
};

impl Header {
    fn new() -> Header {
        Header {
            magic: AtomicU64::new(0),
            slots: AtomicU32::new(0),
            slot_bytes: AtomicU32::new(0),
            receiver_pid: AtomicU32::new(0),
            sender_pid: AtomicU32::new(0),
            bell: AtomicU32::new(0),
            bell_state: AtomicU32::new(BELL_OFF),
            _reserved: [0; 8],
            tail: CacheLine(AtomicU64::new(0)),
            head: CacheLine(AtomicU64::new(0)),
            sizes: CacheLine(std::array::from_fn(|_| AtomicU32::new(0))),
            notes_written: CacheLine(AtomicU64::new(0)),
            notes_taken: CacheLine(AtomicU64::new(0)),
            notes: CacheLine(std::array::from_fn(|_| AtomicU64::new(0))),
        }
    }
}

/// The memory of one FIFO, shared by its two ends.
pub struct Region {
    header: NonNull<Header>,
    slots: NonNull<u8>,
    geometry: Geometry,
    /// Loom's view of who owns each slot (zero-sized outside loom).
    access: Box<[SlotAccess]>,
    memory: memory::Memory,
}

// SAFETY: the region is plain memory owned by `memory`; concurrent access is coordinated
// through the header's atomics (one sender, one receiver, each touching only the slots the
// protocol gives it at the time).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// A FIFO on the heap, for two ends in one process.
    pub fn heap(slots: usize, slot_bytes: usize) -> Result<Arc<Region>> {
        let geometry = Geometry { slots, slot_bytes };
        geometry.check()?;
        let memory = memory::Memory::heap(geometry, Header::new())?;
        let region = Region::over(memory, geometry);
        region.initialize(0);
        Ok(Arc::new(region))
    }

    /// A FIFO in a new shared-memory segment, made by the receiving end. Returns it and the
    /// handle (segment name and geometry, as bytes) that the sending process opens.
    #[cfg(not(loom))]
    pub fn create_shared(slots: usize, slot_bytes: usize) -> Result<(Arc<Region>, Vec<u8>)> {
        Region::create_shared_with_tail(Geometry { slots, slot_bytes }, 0)
    }

    /// As [`Region::create_shared`], with `tail_bytes` more after the slots, zeroed, which
    /// the FIFO's users lay out themselves ([`Region::tail_memory`]: a GPU kernel's LL
    /// slots); the handle carries their size, and the opener maps them too.
    #[cfg(not(loom))]
    pub fn create_shared_with_tail(geometry: Geometry, tail_bytes: usize) -> Result<(Arc<Region>, Vec<u8>)> {
        geometry.check()?;
        if u32::try_from(tail_bytes).is_err() {
            return Err(Error::InvalidArgument(format!("{tail_bytes} bytes after a FIFO's slots (at most 4 GiB)")));
        }
        let memory = memory::Memory::create_segment(geometry, tail_bytes)?;
        let handle = memory::encode_handle(memory.segment_name().expect("a segment has a name"), geometry, tail_bytes);
        let region = Region::over(memory, geometry);
        region.initialize(std::process::id());
        Ok((Arc::new(region), handle))
    }

    /// A FIFO in memory the caller lends: the header at `header` ([`HEADER_BYTES`], 128-byte
    /// aligned, zeroed), the slots at `slots` (`slots` strides of [`Geometry::stride`]),
    /// freed when `owner` is dropped, after the region. For a FIFO one of whose ends is not
    /// a thread of this process but code that reaches the same memory (a GPU kernel over
    /// pinned host memory mapped into the GPU), using the header layout's offsets
    /// ([`TAIL_OFFSET`], [`HEAD_OFFSET`], [`SIZES_OFFSET`]) and the protocol in this
    /// module's doc.
    ///
    /// # Safety
    /// Both ranges stay valid while `owner` lives and are touched by nobody else but
    /// through this protocol.
    #[cfg(not(loom))]
    pub unsafe fn lent(geometry: Geometry, header: *mut u8, slots: *mut u8, owner: Box<dyn std::any::Any + Send + Sync>) -> Result<Arc<Region>> {
        geometry.check()?;
        let nonnull = |p: *mut u8, what: &str| NonNull::new(p).ok_or_else(|| Error::InvalidArgument(format!("lent FIFO {what} at address 0")));
        let (header, slots) = (nonnull(header, "header")?, nonnull(slots, "slots")?);
        if header.as_ptr() as usize % 128 != 0 || slots.as_ptr() as usize % SLOT_ALIGN != 0 {
            return Err(Error::InvalidArgument(format!("lent FIFO at {header:p} / {slots:p}: the header must be 128-byte and the slots 64-byte aligned")));
        }
        let region = Region::over(memory::Memory::Lent { header, slots, owner }, geometry);
        region.initialize(0);
        Ok(Arc::new(region))
    }

    /// Opens the segment another process created (the sending end), and removes its name:
    /// both ends have it mapped now, so nothing needs the name any more.
    #[cfg(not(loom))]
    pub fn open_shared(handle: &[u8]) -> Result<Arc<Region>> {
        let (name, geometry, tail_bytes) = memory::decode_handle(handle)?;
        geometry.check()?;
        let memory = memory::Memory::open_segment(&name, geometry, tail_bytes)?;
        let region = Region::over(memory, geometry);
        let header = region.header();
        let bad = |reason: &str| Error::Malformed { what: "shared-memory segment", reason: format!("{name}: {reason}") };
        if header.magic.load(Ordering::Acquire) != MAGIC {
            return Err(bad("not initialized by an oxccl FIFO of this layout version"));
        }
        if header.slots.load(Ordering::Relaxed) as usize != geometry.slots || header.slot_bytes.load(Ordering::Relaxed) as usize != geometry.slot_bytes {
            return Err(bad("header geometry differs from the handle's"));
        }
        // One sender per FIFO: a second opener (impossible once the name is gone, but a
        // race between two openers is not) is refused.
        let me = std::process::id();
        if let Err(other) = header.sender_pid.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
            return Err(bad(&format!("already opened by process {other}")));
        }
        Ok(Arc::new(region))
    }

    /// Gives the FIFO a doorbell (before the sender opens it): its reader may then sleep
    /// until the sender posts ([`Region::doorbell`]), where it would otherwise have to
    /// poll the tail — a reader in another process than the sender, which nothing else
    /// can wake (a PXN relay's proxy).
    pub fn enable_doorbell(&self) {
        self.header().bell_state.store(BELL_ON, Ordering::Release);
    }

    /// The doorbell the reader sleeps on, if the FIFO has one.
    #[cfg(not(loom))]
    pub fn doorbell(&self) -> Option<Doorbell<'_>> {
        let header = self.header();
        (header.bell_state.load(Ordering::Acquire) != BELL_OFF).then_some(Doorbell { header })
    }

    /// After a post: wakes the reader if it sleeps on the doorbell. The fence orders the
    /// tail's store before the state's load, as [`Doorbell::arm`]'s orders the state's
    /// store before the tail's load: either the reader sees the post, or the sender sees
    /// the reader armed and rings.
    fn ring(&self) {
        #[cfg(not(loom))]
        {
            let header = self.header();
            if header.bell_state.load(Ordering::Relaxed) == BELL_OFF {
                return;
            }
            std::sync::atomic::fence(Ordering::SeqCst);
            if header.bell_state.load(Ordering::Relaxed) == BELL_ARMED {
                header.bell.fetch_add(1, Ordering::SeqCst);
                crate::futex::wake(&header.bell, true);
            }
        }
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn nslots(&self) -> usize {
        self.geometry.slots
    }

    pub fn slot_bytes(&self) -> usize {
        self.geometry.slot_bytes
    }

    /// Messages posted and not yet released (read from the header: either end, or neither,
    /// may ask).
    pub fn in_flight(&self) -> u64 {
        let header = self.header();
        header.tail.0.load(Ordering::Acquire).wrapping_sub(header.head.0.load(Ordering::Acquire))
    }

    /// The slots' memory, as one range (`slots` strides of `slot_bytes` rounded up to 64):
    /// what a network registers for the FIFO's sends and receives.
    pub fn slots_memory(&self) -> (*mut u8, usize) {
        (self.slots.as_ptr(), self.geometry.slots * self.geometry.stride())
    }

    /// The bytes after the slots of a segment made with [`Region::create_shared_with_tail`]
    /// (as this process maps them; none for other FIFOs).
    pub fn tail_memory(&self) -> (*mut u8, usize) {
        let (slots, len) = self.slots_memory();
        // SAFETY: one past the slots, within (or at the end of) the FIFO's memory.
        (unsafe { slots.add(len) }, self.memory.tail_bytes())
    }

    /// The whole of a shared segment's memory as this process maps it (header, slots, tail
    /// bytes): what a GPU registers to reach the FIFO. `None` for other FIFOs.
    pub fn segment_memory(&self) -> Option<(*mut u8, usize)> {
        let (tail, tail_bytes) = self.tail_memory();
        self.memory.segment_name()?;
        let start = self.header.as_ptr().cast::<u8>();
        Some((start, tail as usize + tail_bytes - start as usize))
    }

    /// Leaves `note` for the receiver (the FIFO's one writer of notes: its sender), and
    /// rings the doorbell if the receiver sleeps on it: what a sender that can neither
    /// wake the receiver's process nor be seen through its slots (a GPU kernel's host,
    /// announcing the kernel's messages) tells it. False, and nothing written, while
    /// [`NOTES`] notes wait untaken.
    pub fn note(&self, note: u64) -> bool {
        let header = self.header();
        let written = header.notes_written.0.load(Ordering::Relaxed);
        if written.wrapping_sub(header.notes_taken.0.load(Ordering::Acquire)) >= NOTES as u64 {
            return false;
        }
        header.notes.0[(written % NOTES as u64) as usize].store(note, Ordering::Relaxed);
        header.notes_written.0.store(written + 1, Ordering::Release);
        self.ring();
        true
    }

    /// The oldest note not yet taken (the receiver's side of [`Region::note`]).
    pub fn take_note(&self) -> Option<u64> {
        let header = self.header();
        let taken = header.notes_taken.0.load(Ordering::Relaxed);
        if header.notes_written.0.load(Ordering::Acquire) == taken {
            return None;
        }
        let note = header.notes.0[(taken % NOTES as u64) as usize].load(Ordering::Relaxed);
        header.notes_taken.0.store(taken + 1, Ordering::Release);
        Some(note)
    }

    /// The segment's name under /dev/shm, for shared FIFOs (gone from there once opened).
    pub fn segment_name(&self) -> Option<&str> {
        self.memory.segment_name()
    }

    fn over(memory: memory::Memory, geometry: Geometry) -> Region {
        let (header, slots) = memory.parts();
        let access = (0..geometry.slots).map(|_| SlotAccess::default()).collect();
        Region { header: header.cast(), slots, geometry, access, memory }
    }

    fn initialize(&self, receiver_pid: u32) {
        let header = self.header();
        header.slots.store(self.geometry.slots as u32, Ordering::Relaxed);
        header.slot_bytes.store(self.geometry.slot_bytes as u32, Ordering::Relaxed);
        header.receiver_pid.store(receiver_pid, Ordering::Relaxed);
        header.head.0.store(0, Ordering::Relaxed);
        header.tail.0.store(0, Ordering::Relaxed);
        // Last, with release: an opener that sees the magic sees everything above.
        header.magic.store(MAGIC, Ordering::Release);
    }

    fn header(&self) -> &Header {
        // SAFETY: `header` points at a Header (heap) or at zero-filled or initialized bytes
        // (mapping), valid for every bit pattern since it holds only atomics and integers,
        // and lives as long as `memory`, which lives as long as self.
        unsafe { self.header.as_ref() }
    }

    fn slot_index(&self, counter: u64) -> usize {
        (counter % self.geometry.slots as u64) as usize
    }

    fn slot_ptr(&self, counter: u64) -> *mut u8 {
        let offset = self.slot_index(counter) * self.geometry.stride();
        // SAFETY: index < slots, and the slot memory holds `slots` strides.
        unsafe { self.slots.as_ptr().add(offset) }
    }

    /// The pid in `field` if it names another process that no longer exists.
    fn exited_peer(&self, field: &AtomicU32) -> Option<u32> {
        let pid = field.load(Ordering::Relaxed);
        (pid != 0 && pid != std::process::id() && !memory::process_exists(pid)).then_some(pid)
    }
}

/// The reader's side of a FIFO's doorbell ([`Region::enable_doorbell`]), for a reader
/// that sleeps until the sender posts: [`arm`](Doorbell::arm), look at the FIFO once more,
/// and if nothing came, sleep on [`word`](Doorbell::word) while it holds what `arm`
/// returned (`futex::wait`, shared: the word is in memory two processes map); then
/// [`disarm`](Doorbell::disarm).
#[cfg(not(loom))]
pub struct Doorbell<'a> {
    header: &'a Header,
}

#[cfg(not(loom))]
impl Doorbell<'_> {
    /// From now on the sender rings after each post. Returns the word's value to sleep on:
    /// a post after this changes it.
    pub fn arm(&self) -> u32 {
        self.header.bell_state.store(BELL_ARMED, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        self.header.bell.load(Ordering::SeqCst)
    }

    /// Awake again: the sender stops ringing.
    pub fn disarm(&self) {
        self.header.bell_state.store(BELL_ON, Ordering::Relaxed);
    }

    /// The word the sender bumps and wakes.
    pub fn word(&self) -> &std::sync::atomic::AtomicU32 {
        &self.header.bell
    }
}

/// The sending end of a FIFO. One per FIFO.
pub struct Sender {
    region: Arc<Region>,
    tail: u64,
    head_seen: u64,
    /// See [`Sender::allow_early_release`].
    early_release: bool,
}

/// The receiving end of a FIFO. One per FIFO.
pub struct Receiver {
    region: Arc<Region>,
    head: u64,
    tail_seen: u64,
}

impl Sender {
    pub fn new(region: Arc<Region>) -> Sender {
        let header = region.header();
        let tail = header.tail.0.load(Ordering::Acquire);
        let head_seen = header.head.0.load(Ordering::Acquire);
        Sender { region, tail, head_seen, early_release: false }
    }

    /// Lets the receiver release slots not yet posted, up to a FIFO's worth: a reader that
    /// sees a message's bytes land by themselves (the LL protocol: each line carries its
    /// flag) may consume and release it before the sender publishes it. Such a head reads
    /// as no message in flight; farther ahead it is still taken for corruption (a full
    /// FIFO).
    pub fn allow_early_release(&mut self) {
        self.early_release = true;
    }

    /// The next free slot to write in place, if there is one; publish it with [`post`](Self::post).
    pub fn try_reserve(&mut self) -> Option<&mut [u8]> {
        if self.has_free_slot() {
            Some(self.reserved_slot())
        } else {
            None
        }
    }

    /// The next free slot, waiting for the receiver to free one until `deadline` or `abort`.
    pub fn wait_reserve(&mut self, deadline: Instant, abort: &AtomicBool) -> Result<&mut [u8]> {
        let mut backoff = Backoff::new(deadline, "a free FIFO slot");
        while !self.has_free_slot() {
            backoff.pause(abort, || self.region.exited_peer(&self.region.header().receiver_pid))?;
        }
        Ok(self.reserved_slot())
    }

    /// Publishes the reserved slot holding `len` bytes.
    ///
    /// Panics if no slot is free (post without reserve) or `len` exceeds the slot.
    pub fn post(&mut self, len: usize) {
        let geometry = self.region.geometry;
        assert!(len <= geometry.slot_bytes, "posted {len} bytes into a {}-byte slot", geometry.slot_bytes);
        assert!(self.in_flight() < geometry.slots as u64, "post without a free slot (reserve first)");
        let index = self.region.slot_index(self.tail);
        self.region.access[index].writing();
        let header = self.region.header();
        // Relaxed: the release store of the tail below publishes it with the slot's bytes.
        header.sizes.0[index].store(len as u32, Ordering::Relaxed);
        self.tail += 1;
        header.tail.0.store(self.tail, Ordering::Release);
        self.region.ring();
    }

    /// How many slots are free now (the proxy engine fills several at once).
    pub fn free(&mut self) -> usize {
        self.refresh_head();
        self.region.geometry.slots - self.in_flight() as usize
    }

    /// The address of the `i`-th free slot after the tail (`i < free()`): it stays free until
    /// posted, so it may be filled asynchronously (by a network receive). Posts go in order.
    pub fn free_slot_ptr(&self, i: usize) -> *mut u8 {
        assert!(self.in_flight() + (i as u64) < self.region.geometry.slots as u64, "slot {i} is not known to be free");
        let counter = self.tail + i as u64;
        self.region.access[self.region.slot_index(counter)].writing();
        self.region.slot_ptr(counter)
    }

    /// Whether the receiver has released every posted slot.
    pub fn drained(&mut self) -> bool {
        self.refresh_head();
        self.in_flight() == 0
    }

    /// Waits until the receiver has released every posted slot, e.g. before closing.
    pub fn wait_drained(&mut self, deadline: Instant, abort: &AtomicBool) -> Result<()> {
        let mut backoff = Backoff::new(deadline, "the receiver to drain the FIFO");
        while !self.drained() {
            backoff.pause(abort, || self.region.exited_peer(&self.region.header().receiver_pid))?;
        }
        Ok(())
    }

    pub fn slot_bytes(&self) -> usize {
        self.region.geometry.slot_bytes
    }

    fn has_free_slot(&mut self) -> bool {
        if self.in_flight() < self.region.geometry.slots as u64 {
            return true;
        }
        self.refresh_head();
        self.in_flight() < self.region.geometry.slots as u64
    }

    /// Posted and not yet released. Clamped: a head past the tail (a corrupt peer) reads as
    /// a full FIFO, which stalls into the caller's deadline instead of overwriting slots.
    fn in_flight(&self) -> u64 {
        let slots = self.region.geometry.slots as u64;
        if self.early_release && self.head_seen > self.tail && self.head_seen - self.tail <= slots {
            return 0;
        }
        self.tail.wrapping_sub(self.head_seen).min(slots)
    }

    fn refresh_head(&mut self) {
        self.head_seen = self.region.header().head.0.load(Ordering::Acquire);
    }

    fn reserved_slot(&mut self) -> &mut [u8] {
        self.region.access[self.region.slot_index(self.tail)].writing();
        let data = self.region.slot_ptr(self.tail);
        // SAFETY: slot `tail` is free (the receiver released it: the acquire load of the head
        // in has_free_slot ordered its reads before this), only this sender writes free slots,
        // and the borrow of self keeps a second reservation from aliasing it.
        unsafe { std::slice::from_raw_parts_mut(data, self.region.geometry.slot_bytes) }
    }
}

impl Receiver {
    pub fn new(region: Arc<Region>) -> Receiver {
        let header = region.header();
        let head = header.head.0.load(Ordering::Acquire);
        let tail_seen = header.tail.0.load(Ordering::Acquire);
        Receiver { region, head, tail_seen }
    }

    /// The next filled slot to read in place, if there is one; free it with [`release`](Self::release).
    pub fn try_peek(&mut self) -> Option<&[u8]> {
        if self.has_filled_slot() {
            Some(self.filled_front())
        } else {
            None
        }
    }

    /// The next filled slot, waiting for the sender until `deadline` or `abort`. Slots the
    /// sender posted before it exited are still delivered; after them, its exit is an error.
    pub fn wait_peek(&mut self, deadline: Instant, abort: &AtomicBool) -> Result<&[u8]> {
        let mut backoff = Backoff::new(deadline, "a filled FIFO slot");
        while !self.has_filled_slot() {
            backoff.pause(abort, || self.region.exited_peer(&self.region.header().sender_pid))?;
        }
        Ok(self.filled_front())
    }

    /// Frees the slot returned by `try_peek` / `wait_peek` (or `filled_slot(0)`).
    ///
    /// Panics if no slot is known to be filled.
    pub fn release(&mut self) {
        assert!(self.filled_known() > 0, "release without a filled slot");
        self.region.access[self.region.slot_index(self.head)].reading();
        self.head += 1;
        self.region.header().head.0.store(self.head, Ordering::Release);
    }

    /// How many slots are filled now.
    pub fn filled(&mut self) -> usize {
        self.refresh_tail();
        self.filled_known() as usize
    }

    /// The `i`-th filled slot after the head (`i < filled()`), as address and length: it
    /// stays unchanged until released, so it may be read asynchronously (by a network send).
    pub fn filled_slot(&self, i: usize) -> (*const u8, usize) {
        assert!((i as u64) < self.filled_known(), "slot {i} is not known to be filled");
        let counter = self.head + i as u64;
        self.region.access[self.region.slot_index(counter)].reading();
        (self.region.slot_ptr(counter), self.posted_len(counter))
    }

    pub fn slot_bytes(&self) -> usize {
        self.region.geometry.slot_bytes
    }

    fn has_filled_slot(&mut self) -> bool {
        if self.filled_known() > 0 {
            return true;
        }
        self.refresh_tail();
        self.filled_known() > 0
    }

    /// Posted and not yet released, as far as this end knows. Clamped to the slot count so
    /// that a corrupt tail cannot send indices past the FIFO.
    fn filled_known(&self) -> u64 {
        self.tail_seen.wrapping_sub(self.head).min(self.region.geometry.slots as u64)
    }

    fn refresh_tail(&mut self) {
        self.tail_seen = self.region.header().tail.0.load(Ordering::Acquire);
    }

    /// The size the sender stored with slot `counter`, bounded by the slot.
    fn posted_len(&self, counter: u64) -> usize {
        let index = self.region.slot_index(counter);
        let len = self.region.header().sizes.0[index].load(Ordering::Relaxed) as usize;
        len.min(self.region.geometry.slot_bytes)
    }

    fn filled_front(&self) -> &[u8] {
        self.region.access[self.region.slot_index(self.head)].reading();
        let len = self.posted_len(self.head);
        // SAFETY: slot `head` was published by the sender (the acquire load of the tail
        // ordered its writes before this), len is within the slot, and the sender does not
        // write it again until this receiver releases it, which needs `&mut self`.
        unsafe { std::slice::from_raw_parts(self.region.slot_ptr(self.head), len) }
    }
}

/// Spin, then yield, then sleep in growing steps, checking abort, deadline and the peer.
struct Backoff {
    what: &'static str,
    started: Instant,
    deadline: Instant,
    rounds: u32,
    sleep: Duration,
    next_peer_check: Instant,
}

/// Rounds of busy spinning: a peer that is running answers within a few microseconds.
const SPIN_ROUNDS: u32 = 200;
/// Then rounds of yielding, which costs little when the peer shares our core.
const YIELD_ROUNDS: u32 = 200;
/// Sleeps then grow up to this, which bounds the latency added to a long wait.
const LONGEST_SLEEP: Duration = Duration::from_micros(500);
/// How often a sleeping waiter asks whether the peer process still exists.
const PEER_CHECK_INTERVAL: Duration = Duration::from_millis(10);

impl Backoff {
    fn new(deadline: Instant, what: &'static str) -> Backoff {
        let started = Instant::now();
        Backoff { what, started, deadline, rounds: 0, sleep: Duration::from_micros(10), next_peer_check: started }
    }

    /// One pause between two polls; an error ends the wait.
    fn pause(&mut self, abort: &AtomicBool, exited_peer: impl FnOnce() -> Option<u32>) -> Result<()> {
        if abort.load(Ordering::Acquire) {
            return Err(Error::Aborted { what: self.what });
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Err(Error::Timeout { what: self.what, waited: now - self.started });
        }
        self.rounds = self.rounds.saturating_add(1);
        if self.rounds <= SPIN_ROUNDS {
            spin_hint();
            return Ok(());
        }
        if now >= self.next_peer_check {
            if let Some(pid) = exited_peer() {
                return Err(Error::PeerExited { pid, what: self.what });
            }
            self.next_peer_check = now + PEER_CHECK_INTERVAL;
        }
        if self.rounds <= SPIN_ROUNDS + YIELD_ROUNDS {
            std::thread::yield_now();
        } else {
            std::thread::sleep(self.sleep.min(self.deadline - now));
            self.sleep = (self.sleep * 2).min(LONGEST_SLEEP);
        }
        Ok(())
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
