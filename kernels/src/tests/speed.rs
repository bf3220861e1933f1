//! A timing probe, run by hand in release:
//! `cargo test -p oxccl-kernels --release -- --ignored --nocapture speed`

use std::time::Instant;

use super::reference::Rng;
use crate::{combine, combine_into, Combine, DataType};

/// Seconds per call: the best of five rounds of about 40 ms each.
fn time(mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    f();
    let calls = (0.04 / start.elapsed().as_secs_f64()).clamp(1.0, 10_000.0) as usize;
    let mut best = f64::MAX;
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..calls {
            f();
        }
        best = best.min(start.elapsed().as_secs_f64() / calls as f64);
    }
    best
}

#[test]
#[ignore = "timing; run by hand in release"]
fn speed() {
    for bytes in [1 << 20, 64 << 20] {
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        let copy = time(|| dst.copy_from_slice(std::hint::black_box(&src)));
        println!("{:>3} MiB: memcpy {:.1} GB/s of data (reads 1x, writes 1x)", bytes >> 20, bytes as f64 / copy / 1e9);
        let cases = [
            (DataType::Float32, Combine::Sum),
            (DataType::Float32, Combine::Max),
            (DataType::Float64, Combine::Sum),
            (DataType::Int32, Combine::Sum),
            (DataType::Int8, Combine::Max),
            (DataType::Bfloat16, Combine::Sum),
            (DataType::Float16, Combine::Sum),
            (DataType::Float8E4M3, Combine::Sum),
        ];
        for (dtype, op) in cases {
            // Ordinary values of the type (no subnormals or NaNs to take slow paths).
            let mut rng = Rng(1);
            let src = rng.moderate(dtype, bytes / dtype.size());
            let mut acc = rng.moderate(dtype, bytes / dtype.size());
            let in_place = time(|| combine(dtype, op, &mut acc, std::hint::black_box(&src)).unwrap());
            let into = time(|| combine_into(dtype, op, &mut dst, std::hint::black_box(&src), &acc).unwrap());
            println!(
                "{:>3} MiB {dtype:>8} {:<4}: in place {:6.1} GB/s, into {:6.1} GB/s of output (memory traffic 3x that)",
                bytes >> 20,
                op.name(),
                bytes as f64 / in_place / 1e9,
                bytes as f64 / into / 1e9
            );
        }
    }
}
