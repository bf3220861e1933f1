//! Every datatype × op × rank count: a collective run through the plan's three steps, against
//! the reference.

use super::reference::{self, Rng};
use crate::{reduce_in_place, reduce_into, DataType, ReduceOp, ReducePlan, Scalar};

/// Runs the plan's steps the way an executor does: prepare each rank's input, fold the ranks in
/// order (alternating in-place and out-of-place steps), finalize.
fn run(ops: &[ReduceOp], dtype: DataType, inputs: &[Vec<u8>]) -> Vec<u8> {
    let nranks = inputs.len();
    let plans: Vec<ReducePlan> = ops.iter().map(|&op| ReducePlan::new(op, dtype, nranks).unwrap()).collect();
    let prepared: Vec<Vec<u8>> = plans
        .iter()
        .zip(inputs)
        .map(|(plan, input)| {
            let mut out = vec![0u8; input.len()];
            plan.prepare_input(&mut out, input).unwrap();
            let mut in_place = input.clone();
            plan.prepare_in_place(&mut in_place).unwrap();
            assert_eq!(in_place, out, "prepare_in_place and prepare_input differ");
            out
        })
        .collect();
    let mut acc = prepared[0].clone();
    let mut scratch = vec![0u8; acc.len()];
    for (rank, input) in prepared.iter().enumerate().skip(1) {
        if rank % 2 == 1 {
            reduce_in_place(dtype, &plans[rank], &mut acc, input).unwrap();
        } else {
            reduce_into(dtype, &plans[rank], &mut scratch, input, &acc).unwrap();
            std::mem::swap(&mut acc, &mut scratch);
        }
    }
    plans[0].finalize(&mut acc).unwrap();
    acc
}

/// PreMulSum with a different raw scalar on each rank, as nccl-tests creates them.
fn premulsum_ops(dtype: DataType, nranks: usize, rng: &mut Rng) -> Vec<ReduceOp> {
    (0..nranks)
        .map(|rank| {
            let value = match rank % 3 {
                0 => reference::Value::Int(rank as i128 + 1),
                _ => reference::Value::Int((rng.next() % 7) as i128 - 3),
            };
            let value = if dtype.is_float() {
                let reference::Value::Int(i) = value else { unreachable!() };
                reference::Value::Float(i as f64 * 0.75)
            } else {
                value
            };
            ReduceOp::PreMulSum(Scalar::from_bytes(dtype, &reference::encode(dtype, value)).unwrap())
        })
        .collect()
}

fn assert_same(dtype: DataType, got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    let size = dtype.size();
    for (i, (g, w)) in got.chunks(size).zip(want.chunks(size)).enumerate() {
        assert!(reference::same(dtype, g, w), "{what}: element {i}: got {:?}, want {:?}", reference::decode(dtype, g), reference::decode(dtype, w));
    }
}

#[test]
fn every_dtype_op_and_rank_count_matches_the_reference() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut cases = 0;
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            for nranks in [1, 2, 3, 4, 7, 8] {
                for count in [0, 1, 7, 61] {
                    for moderate in [true, false] {
                        let inputs: Vec<Vec<u8>> =
                            (0..nranks).map(|_| if moderate { rng.moderate(dtype, count) } else { rng.bits(dtype, count) }).collect();
                        let ops = match op {
                            ReduceOp::PreMulSum(_) => premulsum_ops(dtype, nranks, &mut rng),
                            op => vec![op; nranks],
                        };
                        let what = format!("{dtype} {op} nranks={nranks} count={count} moderate={moderate}");
                        assert_same(dtype, &run(&ops, dtype, &inputs), &reference::collective(&ops, dtype, &inputs), &what);
                        cases += 1;
                    }
                }
            }
        }
    }
    assert_eq!(cases, 12 * 6 * 6 * 4 * 2);
}

#[test]
fn long_buffers_match_the_reference() {
    // Long enough for the vectorized loops' main bodies and remainders.
    let mut rng = Rng(7);
    for dtype in DataType::ALL {
        for op in ReduceOp::ALL {
            let ops = match op {
                ReduceOp::PreMulSum(_) => premulsum_ops(dtype, 3, &mut rng),
                op => vec![op; 3],
            };
            let inputs: Vec<Vec<u8>> = (0..3).map(|_| rng.moderate(dtype, 1001)).collect();
            assert_same(dtype, &run(&ops, dtype, &inputs), &reference::collective(&ops, dtype, &inputs), &format!("{dtype} {op} 1001"));
        }
    }
}

#[test]
fn avg_matches_nccl_on_known_values() {
    // Floats: inputs are scaled by 1/n first. f32: 1, 2, 4 over 3 ranks.
    let third = (1.0f64 / 3.0) as f32;
    let inputs: Vec<Vec<u8>> = [1f32, 2.0, 4.0].iter().map(|x| x.to_ne_bytes().to_vec()).collect();
    let got = run(&[ReduceOp::Avg; 3], DataType::Float32, &inputs);
    assert_eq!(got, ((1.0 * third + 2.0 * third) + 4.0 * third).to_ne_bytes());
    // Integers: the wrapped sum, divided truncating toward zero.
    let inputs: Vec<Vec<u8>> = [-3i32, -4].iter().map(|x| x.to_ne_bytes().to_vec()).collect();
    assert_eq!(run(&[ReduceOp::Avg; 2], DataType::Int32, &inputs), (-3i32).to_ne_bytes());
    let inputs: Vec<Vec<u8>> = [200u8, 100].iter().map(|x| vec![*x]).collect();
    assert_eq!(run(&[ReduceOp::Avg; 2], DataType::Uint8, &inputs), vec![22]); // (300 mod 256) / 2
}
