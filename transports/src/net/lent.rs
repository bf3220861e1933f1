//! Caller memory lent to a net request: the raw addresses of `isend` and `irecv` turned into
//! values whose construction is the one `unsafe` step. The `unsafe` entry points hand over
//! the caller's promise (valid and untouched until the request completes) by constructing
//! these; the rest of a net implementation uses them as ordinary slices.

use crate::{Error, Result};

/// Bytes lent for reading (a send).
pub(crate) struct LentBytes {
    data: *const u8,
    len: usize,
}

/// Bytes lent for writing (a receive).
pub(crate) struct LentBuffer {
    data: *mut u8,
    len: usize,
}

// SAFETY: the memory is the caller's, lent to this value alone until it is dropped (the
// construction contract), so using it from another thread is like moving a `&[u8]`.
unsafe impl Send for LentBytes {}
// SAFETY: as above, like moving a `&mut [u8]`.
unsafe impl Send for LentBuffer {}

impl LentBytes {
    /// # Safety
    /// Unless `len` is 0, `data..data+len` must be readable, and written by nobody, until
    /// this value is dropped.
    pub(crate) unsafe fn new(data: *const u8, len: usize) -> Result<LentBytes> {
        check(data.is_null(), len)?;
        Ok(LentBytes { data, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Cuts this loan into consecutive loans of `piece` bytes (the last one shorter), each
    /// covering its own part of the same memory.
    pub(crate) fn split(self, piece: usize) -> Vec<LentBytes> {
        let piece = piece.max(1);
        (0..self.len).step_by(piece).map(|at| LentBytes { data: self.data.wrapping_add(at), len: piece.min(self.len - at) }).collect()
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: non-null (checked in new), and readable and unchanging while self lives
        // (the contract of new).
        unsafe { std::slice::from_raw_parts(self.data, self.len) }
    }
}

impl LentBuffer {
    /// # Safety
    /// Unless `len` is 0, `data..data+len` must be writable, and accessed by nobody else,
    /// until this value is dropped.
    pub(crate) unsafe fn new(data: *mut u8, len: usize) -> Result<LentBuffer> {
        check(data.is_null(), len)?;
        Ok(LentBuffer { data, len })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// A loan of nothing, left behind where a buffer was taken out of a request.
    pub(crate) fn empty() -> LentBuffer {
        LentBuffer { data: std::ptr::null_mut(), len: 0 }
    }

    /// Cuts the first `len` bytes of this loan (the rest is given back) into consecutive
    /// loans of `piece` bytes (the last one shorter), each covering its own part of the
    /// same memory: `&mut` slices of disjoint ranges, which may go to different threads.
    pub(crate) fn split(self, len: usize, piece: usize) -> Vec<LentBuffer> {
        let (len, piece) = (len.min(self.len), piece.max(1));
        (0..len).step_by(piece).map(|at| LentBuffer { data: self.data.wrapping_add(at), len: piece.min(len - at) }).collect()
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: non-null (checked in new), writable and ours alone while self lives (the
        // contract of new); `&mut self` keeps two slices from coexisting.
        unsafe { std::slice::from_raw_parts_mut(self.data, self.len) }
    }
}

fn check(null: bool, len: usize) -> Result<()> {
    if null && len > 0 {
        return Err(Error::InvalidArgument(format!("null buffer of {len} bytes")));
    }
    Ok(())
}
