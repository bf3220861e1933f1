//! Our fp8 arithmetic (f32, one rounding) against NCCL's sm_90 path (`__hadd`, `__hmul`,
//! `__hmax`, `__hmin` on half-precision copies, then the saturating fp8 constructor), and
//! against the reference, for all 65536 pairs of codes.

use half::f16;

use super::reference;
use crate::fp8::Format;
use crate::{combine, Combine, DataType, ReducePlan, Scalar};

/// NCCL's path: widen to half (exact), operate in half (correctly rounded: the f32 result of one
/// operation on halves rounds to half without double-rounding error), convert to fp8.
fn via_half(format: Format, op: Combine, a: u8, b: u8) -> u8 {
    let (x, y) = (f16::from_f32(format.decode(a)), f16::from_f32(format.decode(b)));
    let (xf, yf) = (x.to_f32(), y.to_f32());
    let h = match op {
        Combine::Sum => f16::from_f32(xf + yf),
        Combine::Prod => f16::from_f32(xf * yf),
        // __hmax/__hmin: the number wins over NaN.
        Combine::Max => f16::from_f32(if xf.is_nan() { yf } else if yf.is_nan() || xf >= yf { xf } else { yf }),
        Combine::Min => f16::from_f32(if xf.is_nan() { yf } else if yf.is_nan() || xf <= yf { xf } else { yf }),
    };
    format.encode(h.to_f32())
}

#[test]
fn fp8_matches_the_half_path_and_the_reference_for_every_pair() {
    for (dtype, format) in [(DataType::Float8E4M3, Format::E4M3), (DataType::Float8E5M2, Format::E5M2)] {
        let all: Vec<u8> = (0..=255).collect();
        for op in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
            for a in 0..=255u8 {
                let mut acc = vec![a; 256];
                combine(dtype, op, &mut acc, &all).unwrap();
                for (b, &got) in all.iter().zip(&acc) {
                    let want = reference::encode(dtype, reference::combine(op, reference::decode(dtype, &[a]), reference::decode(dtype, &[*b])));
                    assert!(reference::same(dtype, &[got], &want), "{dtype} {op:?} {a:#04x} {b:#04x}: got {got:#04x}, reference {:#04x}", want[0]);
                    let half = via_half(format, op, a, *b);
                    // Zeros of either sign compare equal under __hmax; we order them.
                    let zeros = format.decode(got) == 0.0 && format.decode(half) == 0.0;
                    assert!(reference::same(dtype, &[got], &[half]) || zeros, "{dtype} {op:?} {a:#04x} {b:#04x}: got {got:#04x}, half path {half:#04x}");
                }
            }
        }
    }
}

#[test]
fn fp8_premultiply_matches_the_reference_for_every_scalar() {
    for dtype in [DataType::Float8E4M3, DataType::Float8E5M2] {
        let all: Vec<u8> = (0..=255).collect();
        for s in 0..=255u8 {
            let plan = ReducePlan::new(crate::ReduceOp::PreMulSum(Scalar::from_bytes(dtype, &[s]).unwrap()), dtype, 2).unwrap();
            let mut out = vec![0u8; 256];
            plan.prepare_input(&mut out, &all).unwrap();
            for (x, &got) in all.iter().zip(&out) {
                let want = reference::encode(dtype, reference::combine(Combine::Prod, reference::decode(dtype, &[*x]), reference::decode(dtype, &[s])));
                assert!(reference::same(dtype, &[got], &want), "{dtype} {x:#04x} * {s:#04x}");
            }
        }
    }
}
