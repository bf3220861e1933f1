//! NaN and signed zeros, integer wrap and division, odd lengths and misaligned buffers, errors,
//! and the runtime host path's scale-then-divide against the plan.

use half::{bf16, f16};

use super::reference::{self, Rng, Value};
use crate::{
    combine, combine_into, finalize_avg, premultiply, reduce_in_place, reduce_into, Combine, DataType, Error, ReduceOp,
    ReducePlan, Scalar,
};

fn float(dtype: DataType, x: f64) -> Vec<u8> {
    reference::encode(dtype, Value::Float(x))
}

fn one(dtype: DataType, op: Combine, a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut acc = a.to_vec();
    combine(dtype, op, &mut acc, b).unwrap();
    let mut dst = vec![0u8; a.len()];
    combine_into(dtype, op, &mut dst, a, b).unwrap();
    assert_eq!(acc, dst, "{dtype} {op:?}: in place and into differ");
    acc
}

fn is_nan(dtype: DataType, bytes: &[u8]) -> bool {
    matches!(reference::decode(dtype, bytes), Value::Float(x) if x.is_nan())
}

const FLOATS: [DataType; 6] =
    [DataType::Float16, DataType::Float32, DataType::Float64, DataType::Bfloat16, DataType::Float8E4M3, DataType::Float8E5M2];

#[test]
fn max_and_min_let_a_number_beat_nan() {
    for dtype in FLOATS {
        let (nan, one_) = (float(dtype, f64::NAN), float(dtype, 1.0));
        for op in [Combine::Max, Combine::Min] {
            assert_eq!(one(dtype, op, &nan, &one_), one_, "{dtype} {op:?} (NaN, 1)");
            assert_eq!(one(dtype, op, &one_, &nan), one_, "{dtype} {op:?} (1, NaN)");
            assert!(is_nan(dtype, &one(dtype, op, &nan, &nan)), "{dtype} {op:?} (NaN, NaN)");
        }
        for op in [Combine::Sum, Combine::Prod] {
            assert!(is_nan(dtype, &one(dtype, op, &nan, &one_)), "{dtype} {op:?} propagates NaN");
            assert!(is_nan(dtype, &one(dtype, op, &one_, &nan)), "{dtype} {op:?} propagates NaN");
        }
    }
    // Every fp8 NaN code, either sign, loses to a number.
    assert_eq!(one(DataType::Float8E4M3, Combine::Max, &[0xff], &[0xb8]), vec![0xb8]);
    assert_eq!(one(DataType::Float8E5M2, Combine::Min, &[0x7d], &[0x3c]), vec![0x3c]);
}

#[test]
fn max_and_min_order_signed_zeros() {
    for dtype in FLOATS {
        let (plus, minus) = (float(dtype, 0.0), float(dtype, -0.0));
        assert_ne!(plus, minus, "{dtype}");
        for (a, b) in [(&plus, &minus), (&minus, &plus)] {
            assert_eq!(one(dtype, Combine::Max, a, b), plus, "{dtype} max");
            assert_eq!(one(dtype, Combine::Min, a, b), minus, "{dtype} min");
        }
    }
}

#[test]
fn infinities_follow_each_format() {
    // f16 overflows to inf; fp8 saturates, and an e5m2 infinity becomes max after a step.
    let big = f16::from_f32(60000.0).to_ne_bytes();
    assert_eq!(one(DataType::Float16, Combine::Sum, &big, &big), f16::INFINITY.to_ne_bytes());
    assert_eq!(one(DataType::Float8E4M3, Combine::Sum, &[0x7e], &[0x7e]), vec![0x7e]);
    assert_eq!(one(DataType::Float8E5M2, Combine::Max, &[0x7c], &[0x3c]), vec![0x7b]);
    assert_eq!(one(DataType::Float8E5M2, Combine::Sum, &[0xfc], &[0x3c]), vec![0xfb]);
    assert!(is_nan(DataType::Float8E5M2, &one(DataType::Float8E5M2, Combine::Sum, &[0x7c], &[0xfc])));
    assert_eq!(one(DataType::Bfloat16, Combine::Prod, &bf16::MAX.to_ne_bytes(), &bf16::from_f32(2.0).to_ne_bytes()), bf16::INFINITY.to_ne_bytes());
}

#[test]
fn integers_wrap() {
    assert_eq!(one(DataType::Int8, Combine::Sum, &[127, 0x80], &[1, 0xff]), vec![0x80, 0x7f]);
    assert_eq!(one(DataType::Uint8, Combine::Sum, &[255], &[1]), vec![0]);
    assert_eq!(one(DataType::Uint8, Combine::Prod, &[16], &[16]), vec![0]);
    let i32s = |v: &[i32]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
    assert_eq!(one(DataType::Int32, Combine::Sum, &i32s(&[i32::MAX]), &i32s(&[1])), i32s(&[i32::MIN]));
    assert_eq!(one(DataType::Int32, Combine::Prod, &i32s(&[i32::MAX]), &i32s(&[2])), i32s(&[-2]));
    let u64s = |v: u64| v.to_ne_bytes().to_vec();
    assert_eq!(one(DataType::Uint64, Combine::Prod, &u64s(u64::MAX), &u64s(u64::MAX)), u64s(1));
    assert_eq!(one(DataType::Int64, Combine::Sum, &(i64::MIN).to_ne_bytes(), &(-1i64).to_ne_bytes()), i64::MAX.to_ne_bytes());
    // Signed and unsigned compare differently.
    assert_eq!(one(DataType::Int8, Combine::Max, &[0xff], &[1]), vec![1]);
    assert_eq!(one(DataType::Uint8, Combine::Max, &[0xff], &[1]), vec![0xff]);
    // PreMulSum's product wraps too, and a negative f64 scalar wraps onto unsigned types.
    let mut out = vec![0u8; 2];
    premultiply(DataType::Uint8, Scalar::F64(-1.0), &mut out, &[1, 2]).unwrap();
    assert_eq!(out, vec![255, 254]);
    premultiply(DataType::Int8, Scalar::F64(2.0), &mut out, &[100, 0x9c]).unwrap();
    assert_eq!(out, vec![200u8, 0x38]); // 200 wraps to -56; -100 * 2 = -200 wraps to 56
}

#[test]
fn integer_avg_divides_truncating_toward_zero() {
    let check = |dtype: DataType, n: usize, input: Value, want: Value| {
        let mut buf = reference::encode(dtype, input);
        finalize_avg(dtype, n, &mut buf).unwrap();
        assert_eq!(reference::decode(dtype, &buf), want, "{dtype} {input:?} / {n}");
    };
    check(DataType::Int32, 2, Value::Int(-7), Value::Int(-3));
    check(DataType::Int32, 2, Value::Int(7), Value::Int(3));
    check(DataType::Int64, 3, Value::Int(i128::from(i64::MIN)), Value::Int(i128::from(i64::MIN / 3)));
    check(DataType::Uint64, 2, Value::Int(i128::from(u64::MAX)), Value::Int(i128::from(u64::MAX / 2)));
    check(DataType::Uint8, 2, Value::Int(255), Value::Int(127));
    // nranks beyond the type's range.
    check(DataType::Int8, 128, Value::Int(-128), Value::Int(-1));
    check(DataType::Int8, 129, Value::Int(-128), Value::Int(0));
    check(DataType::Uint8, 300, Value::Int(255), Value::Int(0));
    // Floats divide (rounded once) if asked directly.
    check(DataType::Float32, 3, Value::Float(1.0), Value::Float(f64::from(1.0f32 / 3.0)));
    check(DataType::Float8E4M3, 2, Value::Float(3.0), Value::Float(1.5));
}

#[test]
fn empty_and_odd_length_buffers() {
    for dtype in DataType::ALL {
        let plan = ReducePlan::new(ReduceOp::Sum, dtype, 2).unwrap();
        reduce_in_place(dtype, &plan, &mut [], &[]).unwrap();
        reduce_into(dtype, &plan, &mut [], &[], &[]).unwrap();
        let mut rng = Rng(dtype as u64 + 1);
        for count in [1, 3, 5, 17, 31, 33, 63, 65, 127] {
            let (a, b) = (rng.moderate(dtype, count), rng.moderate(dtype, count));
            let got = one(dtype, Combine::Sum, &a, &b);
            let want = reference::collective(&[ReduceOp::Sum; 2], dtype, &[a, b]);
            assert_eq!(got, want, "{dtype} count {count}");
        }
    }
}

#[test]
fn misaligned_buffers_give_the_same_results() {
    let mut rng = Rng(99);
    for dtype in DataType::ALL {
        for op in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
            let (a, b) = (rng.bits(dtype, 37), rng.bits(dtype, 37));
            let aligned = one(dtype, op, &a, &b);
            for (offset_acc, offset_src) in [(1, 1), (1, 0), (0, 3), (3, 5)] {
                let mut acc = vec![0u8; a.len() + 8];
                let mut src = vec![0u8; b.len() + 8];
                acc[offset_acc..][..a.len()].copy_from_slice(&a);
                src[offset_src..][..b.len()].copy_from_slice(&b);
                combine(dtype, op, &mut acc[offset_acc..][..a.len()], &src[offset_src..][..b.len()]).unwrap();
                let got = &acc[offset_acc..][..a.len()];
                assert!(got.chunks(dtype.size()).zip(aligned.chunks(dtype.size())).all(|(g, w)| reference::same(dtype, g, w)), "{dtype} {op:?}");
                let mut dst = vec![0u8; a.len() + 8];
                combine_into(dtype, op, &mut dst[2..][..a.len()], &a, &src[offset_src..][..b.len()]).unwrap();
                assert_eq!(&dst[2..][..a.len()], &aligned[..], "{dtype} {op:?} into");
            }
            // Premultiply and finalize misaligned.
            let scalar = Scalar::F64(3.0);
            let mut want = vec![0u8; a.len()];
            premultiply(dtype, scalar, &mut want, &a).unwrap();
            let mut dst = vec![0u8; a.len() + 1];
            premultiply(dtype, scalar, &mut dst[1..], &a).unwrap();
            assert!(dst[1..].chunks(dtype.size()).zip(want.chunks(dtype.size())).all(|(g, w)| reference::same(dtype, g, w)), "{dtype} premultiply");
            let mut shifted = vec![0u8; a.len() + 1];
            shifted[1..].copy_from_slice(&a);
            finalize_avg(dtype, 3, &mut shifted[1..]).unwrap();
            let mut aligned_div = a.clone();
            finalize_avg(dtype, 3, &mut aligned_div).unwrap();
            assert!(shifted[1..].chunks(dtype.size()).zip(aligned_div.chunks(dtype.size())).all(|(g, w)| reference::same(dtype, g, w)), "{dtype} divide");
        }
    }
}

#[test]
fn bad_input_is_named() {
    let plan = ReducePlan::new(ReduceOp::Max, DataType::Float32, 4).unwrap();
    let mut acc = vec![0u8; 6];
    let err = reduce_in_place(DataType::Float32, &plan, &mut acc, &[0u8; 6]).unwrap_err();
    assert_eq!(err, Error::NotWholeElements { bytes: 6, dtype: DataType::Float32 });
    assert_eq!(err.to_string(), "a buffer of 6 bytes is not a whole number of float elements (4 bytes each)");
    let err = reduce_in_place(DataType::Float32, &plan, &mut [0u8; 8], &[0u8; 4]).unwrap_err();
    assert_eq!(err, Error::LengthMismatch { dst: 8, src: 4 });
    assert!(err.to_string().contains("8 bytes") && err.to_string().contains('4'), "{err}");
    let err = reduce_into(DataType::Float32, &plan, &mut [0u8; 8], &[0u8; 8], &[0u8; 12]).unwrap_err();
    assert_eq!(err, Error::LengthMismatch { dst: 8, src: 12 });
    let err = reduce_into(DataType::Int32, &plan, &mut [0u8; 8], &[0u8; 8], &[0u8; 8]).unwrap_err();
    assert_eq!(err, Error::PlanMismatch { plan: DataType::Float32, given: DataType::Int32 });
    assert!(err.to_string().contains("float") && err.to_string().contains("int32"), "{err}");
    assert_eq!(finalize_avg(DataType::Int8, 0, &mut [1]), Err(Error::NoRanks));
    let raw = Scalar::from_bytes(DataType::Int8, &[2]).unwrap();
    assert_eq!(premultiply(DataType::Uint8, raw, &mut [0], &[1]), Err(Error::ScalarMismatch { scalar: DataType::Int8, reduction: DataType::Uint8 }));
    assert!(Error::BadDataType { value: 12 }.to_string().contains("12"));
}

/// The runtime's host path (a premultiply by `input_scale`, the reduction, a division when
/// `needs_final_division`) gives what the plan gives.
#[test]
fn op_scale_and_division_agree_with_the_plan() {
    let mut rng = Rng(5);
    for dtype in DataType::ALL {
        let input = rng.moderate(dtype, 9);
        for nranks in [1, 3, 8] {
            let plan = ReducePlan::new(ReduceOp::Avg, dtype, nranks).unwrap();
            let mut by_plan = input.clone();
            plan.prepare_in_place(&mut by_plan).unwrap();
            plan.finalize(&mut by_plan).unwrap();
            let mut by_steps = input.clone();
            if let Some(factor) = ReduceOp::Avg.input_scale(dtype, nranks) {
                premultiply(dtype, Scalar::F64(factor), &mut by_steps, &input).unwrap();
            }
            if ReduceOp::Avg.needs_final_division(dtype) {
                finalize_avg(dtype, nranks, &mut by_steps).unwrap();
            }
            assert_eq!(by_plan, by_steps, "{dtype} avg over {nranks}");
        }
    }
}
