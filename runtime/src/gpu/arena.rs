//! Where plans live on the GPU: pieces of a few large allocations, freed together.

use super::driver::DeviceMemory;
use crate::error::Result;

/// GPU memory handed out in 16-byte aligned pieces from blocks of [`Arena::BLOCK`]
/// bytes (a larger piece gets a block of its own); everything is freed together.
#[derive(Default)]
pub(crate) struct Arena {
    blocks: Vec<DeviceMemory>,
    used: usize,
}

impl Arena {
    const BLOCK: usize = 4 << 20;

    /// Allocates a block now, if there is none.
    pub fn reserve(&mut self) -> Result<()> {
        if self.blocks.is_empty() {
            self.blocks.push(DeviceMemory::zeroed(Self::BLOCK)?);
            self.used = 0;
        }
        Ok(())
    }

    /// Bytes allocated.
    pub fn bytes(&self) -> usize {
        self.blocks.iter().map(|b| b.bytes).sum()
    }

    /// Copies `image` into the arena; its device address.
    pub fn place(&mut self, image: &[u8]) -> Result<u64> {
        let bytes = image.len().next_multiple_of(16);
        let fits = self.blocks.last().is_some_and(|b| self.used + bytes <= b.bytes);
        if !fits {
            self.blocks.push(DeviceMemory::zeroed(bytes.max(Self::BLOCK))?);
            self.used = 0;
        }
        let block = self.blocks.last().expect("a block was just pushed");
        let at = block.ptr + self.used as u64;
        block.upload_at(self.used, image)?;
        self.used += bytes;
        Ok(at)
    }
}

