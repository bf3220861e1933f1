//! Where a FIFO's bytes live: a heap allocation, or a mapped file under /dev/shm, and the
//! naming, handle and cleanup rules of those files.

use std::alloc::Layout;
use std::ptr::NonNull;

use super::{Geometry, Header};
#[cfg(not(loom))]
use super::HEADER_BYTES;
use crate::{Error, Result};

#[cfg(not(loom))]
use std::fs::OpenOptions;
#[cfg(not(loom))]
use std::os::unix::fs::OpenOptionsExt;
#[cfg(not(loom))]
use std::path::PathBuf;

const SHM_DIR: &str = "/dev/shm";
const SHM_PREFIX: &str = "oxccl-";
/// Slots start page-aligned in both kinds of memory.
const PAGE: usize = 4096;

/// The owner of a FIFO's memory; frees (or unmaps, and unlinks where it should) on drop.
pub(super) enum Memory {
    /// Header and slots as two allocations: the header as a real `Header` value, so that
    /// loom's atomics (which are not plain bytes) work in it.
    Heap { header: NonNull<Header>, slots: NonNull<u8>, layout: Layout },
    #[cfg(not(loom))]
    Segment { map: memmap2::MmapMut, name: String, unlink_on_drop: bool, tail_bytes: usize },
    /// Memory the caller lent (pinned host memory mapped into a GPU, say): freed when
    /// `owner` is dropped, after the region is.
    #[cfg(not(loom))]
    Lent { header: NonNull<u8>, slots: NonNull<u8>, owner: Box<dyn std::any::Any + Send + Sync> },
}

impl Memory {
    pub(super) fn heap(geometry: Geometry, header: Header) -> Result<Memory> {
        let bytes = geometry.slots * geometry.stride();
        let layout = Layout::from_size_align(bytes, PAGE).map_err(|e| Error::InvalidArgument(format!("FIFO of {bytes} bytes: {e}")))?;
        // SAFETY: the layout has a non-zero size (geometry.check: at least 2 slots of >= 1 byte).
        let slots = unsafe { std::alloc::alloc_zeroed(layout) };
        let slots = NonNull::new(slots).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        let header = NonNull::from(Box::leak(Box::new(header)));
        Ok(Memory::Heap { header, slots, layout })
    }

    /// A new segment, zero-filled, named after this process and a random number.
    #[cfg(not(loom))]
    pub(super) fn create_segment(geometry: Geometry, tail_bytes: usize) -> Result<Memory> {
        let mut random = [0u8; 8];
        getrandom::fill(&mut random).map_err(|e| Error::io("choosing a segment name", std::io::Error::other(e.to_string())))?;
        let name = format!("{SHM_PREFIX}{}-{:016x}", std::process::id(), u64::from_le_bytes(random));
        let path = PathBuf::from(SHM_DIR).join(&name);
        // create_new (O_EXCL) never follows a planted symlink; 0600 keeps other users out.
        let file = OpenOptions::new().read(true).write(true).create_new(true).mode(0o600).open(&path).map_err(|e| Error::io(format!("creating {}", path.display()), e))?;
        // From here on, an early return must not leave the name behind.
        let unlink = UnlinkOnDrop(Some(path.clone()));
        file.set_len((geometry.region_bytes() + tail_bytes) as u64).map_err(|e| Error::io(format!("sizing {}", path.display()), e))?;
        // SAFETY: the file is ours (just created, 0600) and sized above; the mapping is owned
        // by the Memory and outlives every pointer into it (Region holds both).
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        std::mem::forget(unlink); // Memory's Drop takes over.
        Ok(Memory::Segment { map, name, unlink_on_drop: true, tail_bytes })
    }

    /// Maps an existing segment, checks its size, and removes its name.
    #[cfg(not(loom))]
    pub(super) fn open_segment(name: &str, geometry: Geometry, tail_bytes: usize) -> Result<Memory> {
        let path = PathBuf::from(SHM_DIR).join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
        let len = file.metadata().map_err(|e| Error::io(format!("stat of {}", path.display()), e))?.len();
        let expected = geometry.region_bytes() + tail_bytes;
        if len != expected as u64 {
            return Err(Error::Malformed { what: "shared-memory segment", reason: format!("{name} has {len} bytes, its geometry and tail need {expected}") });
        }
        // SAFETY: the mapping covers the whole file (size checked above; segments are never
        // truncated after creation) and is owned by the Memory, which outlives every pointer
        // into it.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(|e| Error::io(format!("mapping {}", path.display()), e))?;
        // Both ends have it mapped now: the name has done its job.
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(target: "oxccl::transports", "could not remove {}: {e}", path.display());
        }
        Ok(Memory::Segment { map, name: name.to_string(), unlink_on_drop: false, tail_bytes })
    }

    /// Where the header and the slots start.
    pub(super) fn parts(&self) -> (NonNull<Header>, NonNull<u8>) {
        match self {
            Memory::Heap { header, slots, .. } => (*header, *slots),
            #[cfg(not(loom))]
            Memory::Segment { map, .. } => {
                let base = NonNull::new(map.as_ptr().cast_mut()).expect("a mapping is never at address 0");
                // SAFETY: the segment holds HEADER_BYTES of header before the slots
                // (region_bytes), and the mapping is page-aligned, hence aligned for Header.
                let slots = unsafe { base.add(HEADER_BYTES) };
                (base.cast(), slots)
            }
            #[cfg(not(loom))]
            Memory::Lent { header, slots, .. } => (header.cast(), *slots),
        }
    }

    /// Bytes after the slots (a segment's caller-laid-out tail; none elsewhere).
    pub(super) fn tail_bytes(&self) -> usize {
        match self {
            #[cfg(not(loom))]
            Memory::Segment { tail_bytes, .. } => *tail_bytes,
            _ => 0,
        }
    }

    pub(super) fn segment_name(&self) -> Option<&str> {
        match self {
            Memory::Heap { .. } => None,
            #[cfg(not(loom))]
            Memory::Lent { .. } => None,
            #[cfg(not(loom))]
            Memory::Segment { name, .. } => Some(name),
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        match self {
            Memory::Heap { header, slots, layout } => {
                // SAFETY: both came from the allocations in Memory::heap, with this layout,
                // and are freed only here.
                unsafe {
                    drop(Box::from_raw(header.as_ptr()));
                    std::alloc::dealloc(slots.as_ptr(), *layout);
                }
            }
            #[cfg(not(loom))]
            Memory::Segment { name, unlink_on_drop, .. } => {
                if *unlink_on_drop {
                    // Usually gone already (the opener removed it); NotFound is the normal case.
                    let _ = std::fs::remove_file(PathBuf::from(SHM_DIR).join(name.as_str()));
                }
            }
            // The owner's own drop frees the memory.
            #[cfg(not(loom))]
            Memory::Lent { owner, .. } => {
                let _ = owner;
            }
        }
    }
}

#[cfg(not(loom))]
struct UnlinkOnDrop(Option<PathBuf>);

#[cfg(not(loom))]
impl Drop for UnlinkOnDrop {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Handle bytes: segment name, NUL, slots (u32 LE), slot bytes (u32 LE), bytes after the
/// slots (u32 LE; `tail_bytes` fits, the caller checked).
#[cfg(not(loom))]
pub(super) fn encode_handle(name: &str, geometry: Geometry, tail_bytes: usize) -> Vec<u8> {
    let mut handle = name.as_bytes().to_vec();
    handle.push(0);
    handle.extend_from_slice(&(geometry.slots as u32).to_le_bytes());
    handle.extend_from_slice(&(geometry.slot_bytes as u32).to_le_bytes());
    handle.extend_from_slice(&(tail_bytes as u32).to_le_bytes());
    handle
}

/// The inverse of [`encode_handle`]; refuses names that are not ours or that leave /dev/shm.
#[cfg(not(loom))]
pub(super) fn decode_handle(handle: &[u8]) -> Result<(String, Geometry, usize)> {
    let bad = |reason: &str| Error::Malformed { what: "shared-memory handle", reason: reason.into() };
    let nul = handle.iter().position(|&b| b == 0).ok_or_else(|| bad("no NUL after the name"))?;
    let name = std::str::from_utf8(&handle[..nul]).map_err(|_| bad("name is not UTF-8"))?;
    if parse_segment_name(name).is_none() {
        return Err(bad(&format!("{name:?} is not an oxccl segment name")));
    }
    let rest: [u8; 12] = handle[nul + 1..].try_into().map_err(|_| bad("geometry and tail are not 12 bytes"))?;
    let word = |i: usize| u32::from_le_bytes([rest[i], rest[i + 1], rest[i + 2], rest[i + 3]]) as usize;
    Ok((name.to_string(), Geometry { slots: word(0), slot_bytes: word(4) }, word(8)))
}

/// The pid in a name of the form `oxccl-<pid>-<16 hex digits>`, the only names we make.
fn parse_segment_name(name: &str) -> Option<u32> {
    let (pid, random) = name.strip_prefix(SHM_PREFIX)?.split_once('-')?;
    let pid_ok = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    let random_ok = random.len() == 16 && random.bytes().all(|b| b.is_ascii_hexdigit());
    if !(pid_ok && random_ok) {
        return None;
    }
    pid.parse::<u32>().ok().filter(|&pid| pid > 0)
}

/// Whether a process with this pid exists (a zombie still counts until it is reaped).
pub(super) fn process_exists(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 sends nothing; kill only checks that the process exists and that we
    // may signal it. pid > 0, so it never addresses a process group.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Removes /dev/shm segments that oxccl processes which no longer exist left behind (a
/// receiver killed before its sender opened the segment). Returns how many it removed.
///
/// Pids are those of this pid namespace: a container with its own /dev/shm is consistent.
pub fn cleanup_stale() -> usize {
    let Ok(entries) = std::fs::read_dir(SHM_DIR) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(parse_segment_name) else { continue };
        if pid == std::process::id() || process_exists(pid) {
            continue;
        }
        match std::fs::remove_file(entry.path()) {
            Ok(()) => {
                tracing::info!(target: "oxccl::transports", "removed stale segment {} of exited process {pid}", entry.path().display());
                removed += 1;
            }
            // Another process cleaning at the same time got it first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(target: "oxccl::transports", "could not remove stale segment {}: {e}", entry.path().display()),
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_names_parse() {
        assert_eq!(parse_segment_name("oxccl-42-00000000deadbeef"), Some(42));
        assert_eq!(parse_segment_name("oxccl-0-00000000deadbeef"), None);
        assert_eq!(parse_segment_name("oxccl--1-00000000deadbeef"), None);
        assert_eq!(parse_segment_name("oxccl-42-deadbeef"), None);
        assert_eq!(parse_segment_name("nccl-42-00000000deadbeef"), None);
        assert_eq!(parse_segment_name("oxccl-42-00000000deadbeef/../x"), None);
    }
}
