//! The CUDA reduction kernel of every (datatype, op) against the CPU kernels, bit for bit
//! (NaN against NaN), on a GPU. Without a GPU the test says so and passes, unless
//! OXCCL_TEST_GPU=1 (the GPU runner, scripts/gpu-run.sh, sets it) makes a missing GPU a
//! failure.
#![cfg(feature = "cuda")]

use oxccl_kernels::cuda::{Gpu, Specialization};
use oxccl_kernels::{combine_into, DataType};

fn is_nan(dtype: DataType, e: &[u8]) -> bool {
    match dtype {
        DataType::Float16 => half::f16::from_ne_bytes([e[0], e[1]]).is_nan(),
        DataType::Bfloat16 => half::bf16::from_ne_bytes([e[0], e[1]]).is_nan(),
        DataType::Float32 => f32::from_ne_bytes(e.try_into().unwrap()).is_nan(),
        DataType::Float64 => f64::from_ne_bytes(e.try_into().unwrap()).is_nan(),
        DataType::Float8E4M3 => oxccl_kernels::fp8::Format::E4M3.is_nan(e[0]),
        DataType::Float8E5M2 => oxccl_kernels::fp8::Format::E5M2.is_nan(e[0]),
        _ => false,
    }
}

#[test]
fn gpu_kernels_match_the_cpu_kernels() {
    let gpu = match Gpu::open(0) {
        Ok(gpu) => gpu,
        Err(e) if std::env::var("OXCCL_TEST_GPU").as_deref() != Ok("1") => {
            eprintln!("skipped: {e}");
            return;
        }
        Err(e) => panic!("OXCCL_TEST_GPU=1 but {e}"),
    };
    eprintln!("GPU 0: {} ({})", gpu.name(), gpu.arch());
    // Every byte pattern shows up: random bytes give every fp8/half code, NaNs, infinities,
    // signed zeros and integer wraparounds. An odd length checks the tail.
    let n = (1 << 20) + 7;
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut random = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut checked = 0;
    for spec in Specialization::all() {
        let bytes = n * spec.dtype.size();
        let a: Vec<u8> = (0..bytes).map(|_| random() as u8).collect();
        let b: Vec<u8> = (0..bytes).map(|_| random() as u8).collect();
        let got = gpu.combine_into(spec.dtype, spec.op, &a, &b).unwrap();
        let mut expected = vec![0u8; bytes];
        combine_into(spec.dtype, spec.op, &mut expected, &a, &b).unwrap();
        let es = spec.dtype.size();
        let wrong: Vec<usize> = (0..n)
            .filter(|&i| {
                let (g, e) = (&got[i * es..(i + 1) * es], &expected[i * es..(i + 1) * es]);
                g != e && !(is_nan(spec.dtype, g) && is_nan(spec.dtype, e))
            })
            .collect();
        if let Some(&i) = wrong.first() {
            panic!(
                "{spec:?}: {} of {n} elements differ; first at {i}: a {:02x?} b {:02x?} gpu {:02x?} cpu {:02x?}",
                wrong.len(),
                &a[i * es..(i + 1) * es],
                &b[i * es..(i + 1) * es],
                &got[i * es..(i + 1) * es],
                &expected[i * es..(i + 1) * es]
            );
        }
        checked += 1;
    }
    eprintln!("{checked} kernels match the CPU kernels on {n} elements each");
}
