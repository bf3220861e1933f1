//! Where plans live on the GPU: pieces of a few large allocations, freed together.

use super::driver::DeviceMemory;
use crate::error::Result;

/// GPU memory handed out in 16-byte aligned pieces from blocks of [`Arena::BLOCK`]
/// bytes (a larger piece gets a block of its own); everything is freed together, or
/// handed out again from the start after [`Arena::reset`].
#[derive(Default)]
pub(crate) struct Arena {
    blocks: Vec<DeviceMemory>,
    /// The block pieces come from, and the bytes of it handed out.
    current: usize,
    used: usize,
}

impl Arena {
    const BLOCK: usize = 4 << 20;

    /// Allocates a block now, if there is none.
    pub fn reserve(&mut self) -> Result<()> {
        if self.blocks.is_empty() {
            self.blocks.push(DeviceMemory::zeroed(Self::BLOCK)?);
            self.current = 0;
            self.used = 0;
        }
        Ok(())
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.bytes).sum()
    }

    /// Hands the blocks out again from the start: nothing may read what was placed before.
    pub fn reset(&mut self) {
        self.current = 0;
        self.used = 0;
    }

    /// Copies `image` into the arena; its device address.
    pub fn place(&mut self, image: &[u8]) -> Result<u64> {
        let bytes = image.len().next_multiple_of(16);
        let fits = |arena: &Arena| arena.blocks.get(arena.current).is_some_and(|b| arena.used + bytes <= b.bytes);
        if !fits(self) {
            // The next block, if one was kept and is large enough; else a new one there.
            self.current = if self.blocks.is_empty() { 0 } else { self.current + 1 };
            self.used = 0;
            if !fits(self) {
                self.blocks.insert(self.current.min(self.blocks.len()), DeviceMemory::zeroed(bytes.max(Self::BLOCK))?);
            }
        }
        let block = &self.blocks[self.current];
        let at = block.ptr + self.used as u64;
        block.upload_at(self.used, image)?;
        self.used += bytes;
        Ok(at)
    }
}
