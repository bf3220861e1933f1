//! Every datatype × op against a reference computed element by element from decoded values.

use super::*;
use proptest::prelude::*;

/// Encodes small integer values exactly in every type.
fn encode(dtype: DataType, v: f64) -> Vec<u8> {
    match dtype {
        DataType::Int8 => vec![v as i8 as u8],
        DataType::Uint8 => vec![v as u8],
        DataType::Int32 => (v as i32).to_le_bytes().to_vec(),
        DataType::Uint32 => (v as u32).to_le_bytes().to_vec(),
        DataType::Int64 => (v as i64).to_le_bytes().to_vec(),
        DataType::Uint64 => (v as u64).to_le_bytes().to_vec(),
        DataType::Float16 => f16::from_f64(v).to_le_bytes().to_vec(),
        DataType::Bfloat16 => bf16::from_f64(v).to_le_bytes().to_vec(),
        DataType::Float32 => (v as f32).to_le_bytes().to_vec(),
        DataType::Float64 => v.to_le_bytes().to_vec(),
        DataType::Float8E4M3 => vec![Format::E4M3.encode(v as f32)],
        DataType::Float8E5M2 => vec![Format::E5M2.encode(v as f32)],
    }
}

fn buffer(dtype: DataType, values: &[f64]) -> Vec<u8> {
    values.iter().flat_map(|&v| encode(dtype, v)).collect()
}

/// Small values every type holds exactly (fp8 e4m3 holds integers up to 16 exactly).
fn small_values(n: usize, seed: u64, signed: bool) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = ((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 97) % 7) as f64;
            if signed && i % 3 == 0 { -x } else { x }
        })
        .collect()
}

fn reference(op: Combine, a: f64, b: f64) -> f64 {
    match op {
        Combine::Sum => a + b,
        Combine::Prod => a * b,
        Combine::Max => a.max(b),
        Combine::Min => a.min(b),
    }
}

#[test]
fn every_dtype_and_op_matches_the_reference() {
    for dtype in DataType::ALL {
        let signed = !matches!(dtype, DataType::Uint8 | DataType::Uint32 | DataType::Uint64);
        for op in [Combine::Sum, Combine::Prod, Combine::Max, Combine::Min] {
            for n in [0usize, 1, 7, 64, 1001] {
                let (av, bv) = (small_values(n, 1, signed), small_values(n, 2, signed));
                // Products of two values in 0..7 stay below 49; e4m3 holds them only
                // approximately, so compare after encoding the exact result the same way.
                let expected: Vec<u8> = av.iter().zip(&bv).flat_map(|(&a, &b)| encode(dtype, reference(op, a, b))).collect();
                let (a, b) = (buffer(dtype, &av), buffer(dtype, &bv));
                let mut acc = a.clone();
                combine(dtype, op, &mut acc, &b).unwrap();
                assert_eq!(acc, expected, "{dtype} {op:?} n={n} in place");
                let mut dst = vec![0u8; a.len()];
                combine_into(dtype, op, &mut dst, &a, &b).unwrap();
                assert_eq!(dst, expected, "{dtype} {op:?} n={n} into");
            }
        }
    }
}

#[test]
fn misaligned_buffers_give_the_same_results() {
    for dtype in [DataType::Float32, DataType::Int64, DataType::Float16, DataType::Float64] {
        let (av, bv) = (small_values(33, 3, true), small_values(33, 4, true));
        let (a, b) = (buffer(dtype, &av), buffer(dtype, &bv));
        let mut aligned = a.clone();
        combine(dtype, Combine::Sum, &mut aligned, &b).unwrap();
        let mut storage = vec![0u8; a.len() + 1];
        storage[1..].copy_from_slice(&a);
        let mut src = vec![0u8; b.len() + 1];
        src[1..].copy_from_slice(&b);
        combine(dtype, Combine::Sum, &mut storage[1..], &src[1..]).unwrap();
        assert_eq!(&storage[1..], &aligned[..], "{dtype}");
    }
}

#[test]
fn integers_wrap() {
    let mut acc = buffer(DataType::Int8, &[127.0, -128.0]);
    combine(DataType::Int8, Combine::Sum, &mut acc, &buffer(DataType::Int8, &[1.0, -1.0])).unwrap();
    assert_eq!(acc, vec![0x80, 0x7f]);
    let mut acc = u32::MAX.to_le_bytes().to_vec();
    combine(DataType::Uint32, Combine::Prod, &mut acc, &2u32.to_le_bytes()).unwrap();
    assert_eq!(acc, (u32::MAX - 1).to_le_bytes());
}

#[test]
fn float_max_and_min_propagate_nan() {
    for op in [Combine::Max, Combine::Min] {
        for (a, b) in [(f32::NAN, 1.0f32), (1.0, f32::NAN)] {
            let mut acc = a.to_le_bytes().to_vec();
            combine(DataType::Float32, op, &mut acc, &b.to_le_bytes()).unwrap();
            assert!(f32::from_le_bytes(acc.try_into().unwrap()).is_nan(), "{op:?} {a} {b}");
        }
    }
}

#[test]
fn avg_and_premulsum_plans() {
    assert_eq!(ReduceOp::Avg.input_scale(DataType::Float32, 4), Some(0.25));
    assert_eq!(ReduceOp::Avg.input_scale(DataType::Int32, 4), None);
    assert!(ReduceOp::Avg.needs_final_division(DataType::Int32));
    assert_eq!(ReduceOp::PreMulSum(3.0).input_scale(DataType::Int8, 4), Some(3.0));
    let mut out = vec![0u8; 12];
    scale(DataType::Int32, 3.0, &mut out, &buffer(DataType::Int32, &[1.0, -2.0, 5.0])).unwrap();
    assert_eq!(out, buffer(DataType::Int32, &[3.0, -6.0, 15.0]));
    let mut buf = buffer(DataType::Int64, &[-7.0, 9.0]);
    divide(DataType::Int64, 2, &mut buf).unwrap();
    assert_eq!(buf, buffer(DataType::Int64, &[-3.0, 4.0]));
    let mut buf = buffer(DataType::Bfloat16, &[3.0]);
    divide(DataType::Bfloat16, 2, &mut buf).unwrap();
    assert_eq!(buf, buffer(DataType::Bfloat16, &[1.5]));
}

#[test]
fn bad_input_is_named() {
    assert_eq!(DataType::from_nccl(12), Err(Error::BadDataType(12)));
    assert_eq!(ReduceOp::from_nccl(-1), Err(Error::BadOp(-1)));
    let mut acc = vec![0u8; 6];
    assert!(matches!(combine(DataType::Float32, Combine::Sum, &mut acc, &[0u8; 6]), Err(Error::Ragged { len: 6, .. })));
    assert!(matches!(combine(DataType::Int8, Combine::Sum, &mut acc, &[0u8; 5]), Err(Error::LengthMismatch(6, 5))));
    assert_eq!(DataType::parse("bf16"), Some(DataType::Bfloat16));
    assert_eq!(DataType::parse("float"), Some(DataType::Float32));
}

#[test]
#[ignore = "timing, run by hand: cargo test -p oxccl-kernels --release -- --ignored"]
fn sum_speed() {
    let n = 1 << 20;
    let src = vec![1u8; n];
    let mut acc = vec![1u8; n];
    let start = std::time::Instant::now();
    for _ in 0..1000 {
        combine(DataType::Float32, Combine::Sum, &mut acc, &src).unwrap();
    }
    let s = start.elapsed().as_secs_f64();
    println!("f32 sum of 1 MiB: {:.1} GB/s (read 2 MiB, write 1 MiB per call)", 1000.0 * n as f64 / s / 1e9);
}

proptest! {
    #[test]
    fn f32_sum_matches_scalar_loop(a in proptest::collection::vec(-1e6f32..1e6, 0..300)) {
        let b: Vec<f32> = a.iter().rev().copied().collect();
        let mut acc: Vec<u8> = a.iter().flat_map(|x| x.to_le_bytes()).collect();
        let src: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
        combine(DataType::Float32, Combine::Sum, &mut acc, &src).unwrap();
        for (i, c) in acc.chunks(4).enumerate() {
            prop_assert_eq!(f32::from_le_bytes(c.try_into().unwrap()), a[i] + b[i]);
        }
    }
}
