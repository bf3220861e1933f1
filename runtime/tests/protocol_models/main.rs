//! Models of the GPU kernels' inbox protocols, each run over random interleavings of
//! ranks: the direct kernel's for collectives ([`direct`]) and the LL send/recv path's
//! ([`p2p`]). They need no GPU and nothing of the runtime, only the protocols' rules (and
//! oxccl-kernels' launch modes), so they run with every test suite; the GPU tests
//! (gpu_collectives/) run the kernels themselves.

mod direct;
mod p2p;

/// The seeded choices of a model's scheduler (xorshift): `next(bound)` is below `bound`.
fn scheduler(seed: u64) -> impl FnMut(usize) -> usize {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound as u64) as usize
    }
}
