//! One-way FIFOs of slots in memory both ends can see.
//!
//! Layout (`#[repr(C)]`, checked at compile time): a header with the geometry, the tail
//! (slots posted by the sender) and the head (slots released by the receiver), each on its
//! own cache line, and each slot's byte count; then the slots, page-aligned. The sender
//! writes slot `tail % nslots` in place and publishes it by advancing the tail (release);
//! the receiver reads slot `head % nslots` in place and frees it by advancing the head.
//! Neither side blocks here: the executor polls, so that one rank progresses many
//! connections and watches its abort flag and deadline.
//!
//! Memory is a mapping of a file under /dev/shm (two processes on one host) or a heap
//! allocation (one process, or the local half of a network connection). A shared segment
//! is created by the receiver; the sender opens it and removes its name at once, so that a
//! crash leaves nothing behind in /dev/shm; the receiver also removes it on drop, and
//! [`cleanup_stale`] removes segments of dead processes.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use crate::{Error, Result};

/// Most slots a FIFO may have.
pub const MAX_SLOTS: usize = 16;
const MAGIC: u64 = 0x4f58_4649_464f_0001; // "OXFIFO" v1
const SLOT_ALIGN: usize = 4096;
const SHM_DIR: &str = "/dev/shm";
const SHM_PREFIX: &str = "oxccl-";

#[repr(C, align(64))]
struct CacheLine<T>(T);

#[repr(C)]
struct Header {
    magic: AtomicU64,
    nslots: AtomicU32,
    slot_bytes: AtomicU32,
    _pad: [u8; 48],
    tail: CacheLine<AtomicU64>,
    head: CacheLine<AtomicU64>,
    sizes: CacheLine<[AtomicU32; MAX_SLOTS]>,
}

const _: () = assert!(std::mem::size_of::<Header>() == 256);
const _: () = assert!(std::mem::offset_of!(Header, tail) == 64);
const _: () = assert!(std::mem::offset_of!(Header, head) == 128);
const _: () = assert!(std::mem::offset_of!(Header, sizes) == 192);

/// Bytes a FIFO of this geometry takes.
pub fn region_bytes(nslots: usize, slot_bytes: usize) -> usize {
    SLOT_ALIGN + nslots * slot_bytes.next_multiple_of(64)
}

enum Backing {
    Heap(#[allow(dead_code)] Vec<AlignedPage>),
    Shm { _map: memmap2::MmapMut, path: Option<PathBuf> },
}

#[repr(C, align(4096))]
#[derive(Clone, Copy)]
struct AlignedPage([u8; 4096]);

/// The memory of one FIFO, shared by its two ends.
pub struct Region {
    base: *mut u8,
    nslots: usize,
    slot_bytes: usize,
    stride: usize,
    backing: Backing,
}

// SAFETY: the region is plain memory; concurrent access is coordinated through the header's
// atomics (one sender, one receiver, each touching only the slots the protocol gives it).
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// A FIFO on the heap, for two ends in one process.
    pub fn heap(nslots: usize, slot_bytes: usize) -> Result<Arc<Region>> {
        check_geometry(nslots, slot_bytes)?;
        let pages = region_bytes(nslots, slot_bytes).div_ceil(SLOT_ALIGN);
        let mut memory = vec![AlignedPage([0; 4096]); pages];
        let base = memory.as_mut_ptr().cast::<u8>();
        let region = Region { base, nslots, slot_bytes, stride: slot_bytes.next_multiple_of(64), backing: Backing::Heap(memory) };
        region.init();
        Ok(Arc::new(region))
    }

    /// A FIFO in a new shared-memory segment; returns it and the handle the other end opens.
    pub fn create_shared(nslots: usize, slot_bytes: usize) -> Result<(Arc<Region>, Vec<u8>)> {
        check_geometry(nslots, slot_bytes)?;
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| Error::io("random name", std::io::Error::other(e.to_string())))?;
        let name = format!("{SHM_PREFIX}{}-{:016x}", std::process::id(), u64::from_le_bytes(random));
        let path = PathBuf::from(SHM_DIR).join(&name);
        let bytes = region_bytes(nslots, slot_bytes);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        let guard = Unlink(Some(path.clone()));
        file.set_len(bytes as u64).map_err(|e| Error::io(format!("sizing {}", path.display()), e))?;
        // SAFETY: the file is ours, sized above; the mapping lives as long as the Region.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        let base = map.as_mut_ptr();
        std::mem::forget(guard);
        let region = Region { base, nslots, slot_bytes, stride: slot_bytes.next_multiple_of(64), backing: Backing::Shm { _map: map, path: Some(path) } };
        region.init();
        let mut handle = name.into_bytes();
        handle.push(0);
        handle.extend_from_slice(&(nslots as u32).to_le_bytes());
        handle.extend_from_slice(&(slot_bytes as u32).to_le_bytes());
        Ok((Arc::new(region), handle))
    }

    /// Opens the segment another process created, and removes its name.
    pub fn open_shared(handle: &[u8]) -> Result<Arc<Region>> {
        let bad = |reason: &str| Error::Malformed { what: "shared-memory handle", reason: reason.into() };
        let nul = handle.iter().position(|&b| b == 0).ok_or_else(|| bad("no name"))?;
        let name = std::str::from_utf8(&handle[..nul]).map_err(|_| bad("name is not UTF-8"))?;
        if !name.starts_with(SHM_PREFIX) || name.contains('/') {
            return Err(bad("not an oxccl segment name"));
        }
        let rest = &handle[nul + 1..];
        if rest.len() != 8 {
            return Err(bad("wrong length"));
        }
        let nslots = u32::from_le_bytes(rest[..4].try_into().expect("4 bytes")) as usize;
        let slot_bytes = u32::from_le_bytes(rest[4..].try_into().expect("4 bytes")) as usize;
        check_geometry(nslots, slot_bytes)?;
        let path = PathBuf::from(SHM_DIR).join(name);
        let file = OpenOptions::new().read(true).write(true).open(&path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let len = file.metadata().map_err(|e| Error::io("stat", e))?.len() as usize;
        if len != region_bytes(nslots, slot_bytes) {
            return Err(bad("segment size does not match its geometry"));
        }
        // SAFETY: the mapping covers the whole file, checked above, and lives with the Region.
        let mut map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        let _ = std::fs::remove_file(&path);
        let base = map.as_mut_ptr();
        let region = Region { base, nslots, slot_bytes, stride: slot_bytes.next_multiple_of(64), backing: Backing::Shm { _map: map, path: None } };
        if region.header().magic.load(Ordering::Acquire) != MAGIC
            || region.header().nslots.load(Ordering::Relaxed) as usize != nslots
            || region.header().slot_bytes.load(Ordering::Relaxed) as usize != slot_bytes
        {
            return Err(bad("header does not match"));
        }
        Ok(Arc::new(region))
    }

    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    pub fn nslots(&self) -> usize {
        self.nslots
    }

    fn init(&self) {
        let h = self.header();
        h.nslots.store(self.nslots as u32, Ordering::Relaxed);
        h.slot_bytes.store(self.slot_bytes as u32, Ordering::Relaxed);
        h.head.0.store(0, Ordering::Relaxed);
        h.tail.0.store(0, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
    }

    fn header(&self) -> &Header {
        // SAFETY: every region starts with a page holding the header, page-aligned.
        unsafe { &*self.base.cast::<Header>() }
    }

    fn slot_ptr(&self, index: u64) -> *mut u8 {
        let i = (index % self.nslots as u64) as usize;
        // SAFETY: i < nslots, and the region holds nslots strides after the header page.
        unsafe { self.base.add(SLOT_ALIGN + i * self.stride) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Backing::Shm { path: Some(path), .. } = &self.backing {
            let _ = std::fs::remove_file(path);
        }
    }
}

struct Unlink(Option<PathBuf>);

impl Drop for Unlink {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn check_geometry(nslots: usize, slot_bytes: usize) -> Result<()> {
    if !(2..=MAX_SLOTS).contains(&nslots) || slot_bytes == 0 || slot_bytes > u32::MAX as usize / 2 {
        return Err(Error::InvalidArgument(format!("FIFO of {nslots} slots of {slot_bytes} bytes (2..={MAX_SLOTS} slots, positive size)")));
    }
    Ok(())
}

/// The sending end of a FIFO.
pub struct Sender {
    region: Arc<Region>,
    tail: u64,
    head_seen: u64,
}

/// The receiving end of a FIFO.
pub struct Receiver {
    region: Arc<Region>,
    head: u64,
    tail_seen: u64,
}

impl Sender {
    pub fn new(region: Arc<Region>) -> Sender {
        let tail = region.header().tail.0.load(Ordering::Acquire);
        Sender { head_seen: region.header().head.0.load(Ordering::Acquire), region, tail }
    }

    /// The next free slot, if there is one.
    pub fn try_reserve(&mut self) -> Option<&mut [u8]> {
        if self.tail - self.head_seen >= self.region.nslots as u64 {
            self.head_seen = self.region.header().head.0.load(Ordering::Acquire);
            if self.tail - self.head_seen >= self.region.nslots as u64 {
                return None;
            }
        }
        // SAFETY: slot `tail` is free (the receiver released it: head > tail - nslots), and
        // only this sender writes free slots.
        Some(unsafe { std::slice::from_raw_parts_mut(self.region.slot_ptr(self.tail), self.region.slot_bytes) })
    }

    /// Publishes the reserved slot holding `len` bytes.
    pub fn post(&mut self, len: usize) {
        assert!(len <= self.region.slot_bytes, "posted {len} bytes into a {}-byte slot", self.region.slot_bytes);
        let h = self.region.header();
        h.sizes.0[(self.tail % self.region.nslots as u64) as usize].store(len as u32, Ordering::Relaxed);
        self.tail += 1;
        h.tail.0.store(self.tail, Ordering::Release);
    }

    /// How many slots are free now (the proxy engine fills several at once).
    pub fn free(&mut self) -> usize {
        self.head_seen = self.region.header().head.0.load(Ordering::Acquire);
        self.region.nslots - (self.tail - self.head_seen) as usize
    }

    /// The address of the `i`-th free slot after the tail (`i < free()`): it stays free
    /// until posted, so it may be filled asynchronously (by a network receive).
    pub fn free_slot_ptr(&self, i: usize) -> *mut u8 {
        assert!((self.tail + i as u64 - self.head_seen) < self.region.nslots as u64, "slot {i} is not known to be free");
        self.region.slot_ptr(self.tail + i as u64)
    }

    /// Whether every posted slot has been released by the receiver.
    pub fn drained(&mut self) -> bool {
        self.head_seen = self.region.header().head.0.load(Ordering::Acquire);
        self.head_seen == self.tail
    }

    pub fn slot_bytes(&self) -> usize {
        self.region.slot_bytes
    }
}

impl Receiver {
    pub fn new(region: Arc<Region>) -> Receiver {
        let head = region.header().head.0.load(Ordering::Acquire);
        Receiver { tail_seen: region.header().tail.0.load(Ordering::Acquire), region, head }
    }

    /// The next filled slot, if there is one.
    pub fn try_peek(&mut self) -> Option<&[u8]> {
        if self.head == self.tail_seen {
            self.tail_seen = self.region.header().tail.0.load(Ordering::Acquire);
            if self.head == self.tail_seen {
                return None;
            }
        }
        let len = self.region.header().sizes.0[(self.head % self.region.nslots as u64) as usize].load(Ordering::Relaxed) as usize;
        let len = len.min(self.region.slot_bytes);
        // SAFETY: slot `head` was published by the sender (tail > head, acquire) and is not
        // written again until this receiver releases it.
        Some(unsafe { std::slice::from_raw_parts(self.region.slot_ptr(self.head), len) })
    }

    /// How many slots are filled now.
    pub fn filled(&mut self) -> usize {
        self.tail_seen = self.region.header().tail.0.load(Ordering::Acquire);
        (self.tail_seen - self.head) as usize
    }

    /// The `i`-th filled slot after the head (`i < filled()`), as address and length: it
    /// stays unchanged until released, so it may be read asynchronously (by a network send).
    pub fn filled_slot(&self, i: usize) -> (*const u8, usize) {
        assert!(self.head + (i as u64) < self.tail_seen, "slot {i} is not known to be filled");
        let index = self.head + i as u64;
        let len = self.region.header().sizes.0[(index % self.region.nslots as u64) as usize].load(Ordering::Relaxed) as usize;
        (self.region.slot_ptr(index), len.min(self.region.slot_bytes))
    }

    /// Frees the slot returned by `try_peek`.
    pub fn release(&mut self) {
        debug_assert!(self.head < self.tail_seen, "release without a filled slot");
        self.head += 1;
        self.region.header().head.0.store(self.head, Ordering::Release);
    }

    pub fn slot_bytes(&self) -> usize {
        self.region.slot_bytes
    }
}

/// Removes /dev/shm segments left by oxccl processes that no longer exist.
pub fn cleanup_stale() -> usize {
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(SHM_PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: kill with signal 0 only checks whether the process exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

#[cfg(test)]
mod tests;
