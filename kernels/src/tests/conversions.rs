//! The kernels' own bf16 and bulk f16 conversions against `half`'s element conversions.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};
use proptest::prelude::*;

use crate::element::Narrow;

/// Every f32 whose low 16 bits are one of a few patterns (all exponents, every bf16 value, and
/// each bf16 rounding case: exact, just below, at and just above the midpoint, odd and even).
fn f32_sweep() -> impl Iterator<Item = f32> {
    (0..=u16::MAX).flat_map(|high| [0u32, 1, 0x7fff, 0x8000, 0x8001, 0xffff].map(|low| f32::from_bits(u32::from(high) << 16 | low)))
}

fn same_bf16(a: bf16, b: bf16) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

#[test]
fn bf16_matches_half() {
    for bits in 0..=u16::MAX {
        let x = bf16::from_bits(bits);
        let (ours, theirs) = (x.widen(), x.to_f32());
        assert!(ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan()), "{bits:#06x}");
    }
    for x in f32_sweep() {
        assert!(same_bf16(bf16::narrow(x), bf16::from_f32(x)), "{x:e} ({:#010x})", x.to_bits());
    }
}

#[test]
fn f16_bulk_conversions_match_one_at_a_time() {
    let all: Vec<f16> = (0..=u16::MAX).map(f16::from_bits).collect();
    let mut wide = vec![0f32; all.len()];
    f16::widen_slice(&all, &mut wide);
    for (h, w) in all.iter().zip(&wide) {
        assert!(w.to_bits() == h.to_f32().to_bits() || (w.is_nan() && h.is_nan()), "{:#06x}", h.to_bits());
    }
    let sweep: Vec<f32> = f32_sweep().collect();
    let mut narrow = vec![f16::ZERO; sweep.len()];
    f16::narrow_slice(&sweep, &mut narrow);
    let mut one_by_one = vec![f16::ZERO; sweep.len()];
    one_by_one.iter_mut().zip(&sweep).for_each(|(h, &x)| *h = f16::from_f32(x));
    for ((a, b), x) in narrow.iter().zip(&one_by_one).zip(&sweep) {
        assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()), "{x:e}");
    }
    // And the slice conversion round-trips the finite halves.
    let mut back = vec![f16::ZERO; all.len()];
    back.convert_from_f32_slice(&wide);
    assert!(all.iter().zip(&back).all(|(a, b)| a.to_bits() == b.to_bits() || a.is_nan()));
}

proptest! {
    #[test]
    fn bf16_narrow_matches_half(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        prop_assert!(same_bf16(bf16::narrow(x), bf16::from_f32(x)), "{:e}", x);
    }
}
