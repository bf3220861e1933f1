//! all_to_all in place: [`all_to_all_in_place`]'s lanes on aliased buffers deliver every
//! block, with no race, on FIFOs of one slot and of eight, also beside ranks that run the
//! out-of-place plan on separate buffers; the out-of-place plan on aliased buffers does
//! not, which is what the in-place lanes are for.

use super::*;
use crate::algo::simulate::{run, Memory, Program};

/// Every rank's recv buffer after rank r ran `lanes(r)`, its send and recv buffers one
/// where `aliased(r)`; inputs from [`value`].
fn all_to_all(shape: Shape, lanes: &dyn Fn(usize) -> Vec<Lane>, aliased: &dyn Fn(usize) -> bool, slots: usize) -> Result<Vec<Vec<Option<i64>>>, ScheduleError> {
    let schedule = Schedule { shape, algorithm: Algorithm::Direct, ranks: (0..shape.nranks).map(lanes).collect() };
    let data = inputs(&shape, value);
    let memory = (0..shape.nranks).map(|r| Memory::for_collective(&shape, r, aliased(r), data[r].clone())).collect::<Result<Vec<_>, _>>()?;
    let options = Options { slots, in_place: false, check_races: true, grouped_receives: 1 };
    let out = run(&Program::from_schedule(&schedule), memory, &|a: &i64, b: &i64| a.wrapping_add(*b), &options)?;
    Ok(out.iter().map(|m| m.output(0)).collect())
}

#[test]
fn all_to_all_in_place_sends_each_chunk_before_receiving_over_it() {
    for nranks in 1..=5 {
        for (count, chunk, channels) in [(1, 1, 1), (7, 2, 3), (100, 16, 2), (4099, 64, 4), (0, 4, 2)] {
            let shape = Shape { collective: Collective::AllToAll, count, nranks, root: 0, chunk, channels, per_host: 1 };
            let want = expected(&shape, &inputs(&shape, value), &|a, _| *a);
            let in_place = |r: usize| all_to_all_in_place(&shape, r);
            let planned = |r: usize| plan_lanes(shape, Algorithm::Direct, r).unwrap();
            for slots in [1, 8] {
                let what = format!("{shape} slots={slots}");
                let schedule = Schedule { shape, algorithm: Algorithm::Direct, ranks: (0..nranks).map(in_place).collect() };
                validate(&schedule, slots).unwrap_or_else(|e| panic!("{what}: {e}"));
                let got = all_to_all(shape, &in_place, &|_| true, slots).unwrap_or_else(|e| panic!("{what}: {e}"));
                compare(&got, &want, &format!("{what} in place"), &schedule);
                // Beside ranks that run the out-of-place plan: the same messages, paired.
                let mixed = |r: usize| if r % 2 == 0 { in_place(r) } else { planned(r) };
                let got = all_to_all(shape, &mixed, &|r| r % 2 == 0, slots).unwrap_or_else(|e| panic!("{what} mixed: {e}"));
                compare(&got, &want, &format!("{what} mixed"), &schedule);
                // One lane per peer and channel, both ways; the rank's own block untouched.
                for r in 0..nranks {
                    let lanes = in_place(r);
                    assert!(lanes.iter().all(|l| matches!(l.role, Role::Exchange { peer, .. } if peer != r)), "{what}");
                    let moved: usize = lanes.iter().flat_map(|l| &l.steps).map(|s| s.count()).sum();
                    assert_eq!(moved, 2 * count * (nranks - 1), "{what} rank {r}");
                }
            }
            // The out-of-place plan reads a block in one lane while another writes it.
            if nranks > 1 && count > 0 {
                let aliased = all_to_all(shape, &planned, &|_| true, 8);
                assert!(aliased.map_or(true, |got| got.iter().zip(&want).any(|(g, w)| g.iter().zip(w).any(|(g, w)| g.as_ref() != Some(w)))), "{shape}: the out-of-place plan passed in place");
            }
        }
    }
}
