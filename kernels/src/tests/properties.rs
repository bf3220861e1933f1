//! Properties over random datatypes, ops, bit patterns and lengths.

use proptest::prelude::*;

use super::reference::{self, Value};
use crate::{combine, combine_into, finalize_avg, premultiply, Combine, DataType, Scalar};

fn dtype() -> impl Strategy<Value = DataType> {
    proptest::sample::select(DataType::ALL.to_vec())
}

fn op() -> impl Strategy<Value = Combine> {
    proptest::sample::select(vec![Combine::Sum, Combine::Prod, Combine::Max, Combine::Min])
}

/// A datatype and two buffers of the same number of its elements (random bit patterns).
fn operands() -> impl Strategy<Value = (DataType, Vec<u8>, Vec<u8>)> {
    (dtype(), 0usize..70).prop_flat_map(|(dtype, count)| {
        let bytes = count * dtype.size();
        (Just(dtype), proptest::collection::vec(any::<u8>(), bytes), proptest::collection::vec(any::<u8>(), bytes))
    })
}

fn all_same(dtype: DataType, got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && got.chunks(dtype.size()).zip(want.chunks(dtype.size())).all(|(g, w)| reference::same(dtype, g, w))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn one_step_matches_the_reference((dtype, a, b) in operands(), op in op()) {
        let mut acc = a.clone();
        combine(dtype, op, &mut acc, &b).unwrap();
        let mut dst = vec![0u8; a.len()];
        combine_into(dtype, op, &mut dst, &a, &b).unwrap();
        // In place and out of place alike, bit for bit but for NaN payloads: two signalling
        // NaNs' product is either one quietened, whichever operand the machine takes first
        // (f32 0x7f810000 × 0x7f820000 gave 0x7fc10000 one way and 0x7fc20000 the other).
        prop_assert!(all_same(dtype, &acc, &dst), "{} {:?}: in place {:?}, out of place {:?}", dtype, op, acc, dst);
        let size = dtype.size();
        let want: Vec<u8> = a.chunks(size).zip(b.chunks(size))
            .flat_map(|(x, y)| reference::encode(dtype, reference::combine(op, reference::decode(dtype, x), reference::decode(dtype, y))))
            .collect();
        prop_assert!(all_same(dtype, &acc, &want), "{} {:?}", dtype, op);
    }

    #[test]
    fn every_op_is_commutative((dtype, a, b) in operands(), op in op()) {
        let (mut ab, mut ba) = (vec![0u8; a.len()], vec![0u8; a.len()]);
        combine_into(dtype, op, &mut ab, &a, &b).unwrap();
        combine_into(dtype, op, &mut ba, &b, &a).unwrap();
        // Bit for bit, signed zeros included; NaNs only up to payload.
        prop_assert!(all_same(dtype, &ab, &ba), "{} {:?}", dtype, op);
    }

    #[test]
    fn premultiply_matches_the_reference((dtype, a, s) in operands().prop_filter("a scalar", |(_, _, s)| !s.is_empty())) {
        let scalar = Scalar::from_bytes(dtype, &s[..dtype.size()]).unwrap();
        let mut out = vec![0u8; a.len()];
        premultiply(dtype, scalar, &mut out, &a).unwrap();
        let sv = reference::decode(dtype, &s[..dtype.size()]);
        let want: Vec<u8> = a.chunks(dtype.size())
            .flat_map(|x| reference::encode(dtype, reference::combine(Combine::Prod, reference::decode(dtype, x), sv)))
            .collect();
        prop_assert!(all_same(dtype, &out, &want), "{}", dtype);
    }

    #[test]
    fn finalize_avg_matches_the_reference((dtype, a, _b) in operands(), nranks in 1usize..300) {
        let mut buf = a.clone();
        finalize_avg(dtype, nranks, &mut buf).unwrap();
        let want: Vec<u8> = a.chunks(dtype.size())
            .flat_map(|x| reference::encode(dtype, match reference::decode(dtype, x) {
                Value::Int(i) => Value::Int(i / nranks as i128),
                Value::Float(f) => Value::Float(f / nranks as f64),
            }))
            .collect();
        prop_assert!(all_same(dtype, &buf, &want), "{} / {}", dtype, nranks);
    }

    #[test]
    fn f32_sum_matches_a_scalar_loop(a in proptest::collection::vec(-1e6f32..1e6, 0..300)) {
        let b: Vec<f32> = a.iter().rev().copied().collect();
        let mut acc: Vec<u8> = a.iter().flat_map(|x| x.to_ne_bytes()).collect();
        let src: Vec<u8> = b.iter().flat_map(|x| x.to_ne_bytes()).collect();
        combine(DataType::Float32, Combine::Sum, &mut acc, &src).unwrap();
        for (i, c) in acc.chunks(4).enumerate() {
            prop_assert_eq!(f32::from_ne_bytes(c.try_into().unwrap()), a[i] + b[i]);
        }
    }
}
