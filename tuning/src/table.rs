//! The cost table a choice is made from: predicted µs per algorithm × protocol, or nothing
//! where the pair cannot run. Its first seven rows are NCCL's `float[7][3]` as tuner
//! plugins see it (-1.0 for "ignore"); the eighth and ninth are oxccl's Direct and
//! Doubling, which NCCL's ABI has no rows for.

use crate::names::{Algorithm, Protocol};

/// NCCL's `NCCL_ALGO_PROTO_IGNORE`.
pub const IGNORE: f32 = -1.0;

/// Predicted time (µs) of each algorithm × protocol; negative: cannot or may not run.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
pub struct CostTable {
    /// `entries[algorithm][protocol]`, in NCCL's order; the first 7 rows are the plugin ABI's table.
    pub entries: [[f32; 3]; 9],
}

impl Default for CostTable {
    fn default() -> CostTable {
        CostTable { entries: [[IGNORE; 3]; 9] }
    }
}

impl CostTable {
    /// The time of a pair, if it may run.
    pub fn get(&self, algorithm: Algorithm, protocol: Protocol) -> Option<f32> {
        let t = self.entries[algorithm as usize][protocol as usize];
        (t >= 0.0).then_some(t)
    }

    /// Sets a pair's time (None: ignore it).
    pub fn set(&mut self, algorithm: Algorithm, protocol: Protocol, time: Option<f32>) {
        self.entries[algorithm as usize][protocol as usize] = time.unwrap_or(IGNORE);
    }

    /// Every pair that may run, with its time.
    pub fn runnable(&self) -> impl Iterator<Item = (Algorithm, Protocol, f32)> + '_ {
        Algorithm::ALL.into_iter().flat_map(move |a| Protocol::ALL.into_iter().filter_map(move |p| self.get(a, p).map(|t| (a, p, t))))
    }

    /// The cheapest pair, scanning in NCCL's order (the first of equal times wins).
    pub fn best(&self) -> Option<(Algorithm, Protocol, f32)> {
        let mut best: Option<(Algorithm, Protocol, f32)> = None;
        for (a, p, t) in self.runnable() {
            if best.is_none_or(|(_, _, b)| t < b) {
                best = Some((a, p, t));
            }
        }
        best
    }

    /// The rows a tuner plugin sees, as NCCL lays them out (`float[7][3]`, contiguous).
    pub fn nccl_rows_mut(&mut self) -> &mut [[f32; 3]; 7] {
        let (head, _) = self.entries.split_at_mut(7);
        head.try_into().expect("7 of 9 rows")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_runnable_pair_wins_first_on_ties() {
        let mut t = CostTable::default();
        assert_eq!(t.best(), None);
        t.set(Algorithm::Ring, Protocol::Simple, Some(5.0));
        t.set(Algorithm::Direct, Protocol::Simple, Some(3.0));
        assert_eq!(t.best(), Some((Algorithm::Direct, Protocol::Simple, 3.0)));
        t.set(Algorithm::Tree, Protocol::Ll, Some(3.0));
        assert_eq!(t.best(), Some((Algorithm::Tree, Protocol::Ll, 3.0)), "NCCL's order: Tree before Direct");
        t.nccl_rows_mut()[0][0] = IGNORE;
        assert_eq!(t.get(Algorithm::Tree, Protocol::Ll), None);
    }
}
