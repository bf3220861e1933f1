//! oxccl-kernels: the arithmetic of collectives.
//!
//! The CUDA kernels (feature `cuda`, on by default) live in `kernels/cuda/*.cu` and in
//! [`cuda`]: NVRTC compilation per (datatype, op) with a disk cache, and launching on a GPU.
//!
//! CPU reductions for every datatype × op on raw byte buffers (native byte order), as the host
//! executor holds them. They are also the reference semantics the GPU kernels are checked
//! against, so each choice below follows what NCCL's kernels compute.
//!
//! # Calling them from an executor
//!
//! Build a [`ReducePlan`] once per collective from `(op, dtype, nranks)` and apply its three
//! steps at fixed places (the type's docs say exactly where):
//!
//! 1. [`ReducePlan::prepare_input`]: once per rank, on its own input (PreMulSum, float Avg);
//! 2. [`reduce_in_place`] / [`reduce_into`]: at every reducing step;
//! 3. [`ReducePlan::finalize`]: once, on the finished result (integer Avg).
//!
//! Buffers are raw bytes in native byte order, any alignment (aligned ones take typed,
//! vectorized loops; misaligned ones a slower element-at-a-time path with the same results);
//! lengths must be whole elements and equal. Nothing allocates.
//!
//! The same steps as free functions: [`premultiply`] (step 1), [`combine`] /
//! [`combine_into`] (step 2 with a bare [`Combine`]), [`finalize_avg`] (step 3).
//!
//! # Semantics
//!
//! - **Sum, Prod** — integers wrap (two's complement), as in NCCL; floats use IEEE arithmetic
//!   with round to nearest even.
//! - **Max, Min** — integers compare as signed or unsigned per their type. Floats follow C's
//!   `fmaxf`/`fminf`, which NCCL's kernels call (and `__hmax`/`__hmin` for half types): if one
//!   side is NaN the other side wins, so a result is NaN only where every rank had NaN. We also
//!   order -0 < +0 (IEEE 754-2019 maximumNumber), so the sign of a zero result does not depend
//!   on the order ranks are combined in.
//! - **Avg** — floats: every rank's input is multiplied by 1/nranks *before* the sum, with the
//!   scalar rounded as NCCL rounds it (`float(1.0/n)`, then converted to half, bfloat16 or fp8;
//!   f64 keeps `1.0/n`). Integers: the wrapped sum is divided by nranks *after* the reduction,
//!   truncating toward zero (-7 / 2 = -3). This is NCCL's split between `ncclDevPreMulSum` and
//!   `ncclDevSumPostDiv`: combined in the same order, results match NCCL's bit for bit, which
//!   "sum, then divide" would not.
//! - **PreMulSum(s)** — each rank's input times that rank's scalar, in the datatype's
//!   arithmetic (integers wrap), then a plain sum. See [`Scalar`] for how the scalar is held.
//!
//! # Precision of f16, bf16 and fp8
//!
//! These are widened to f32, combined in f32 and rounded back to the type (round to nearest
//! even) once per operation. For one sum, product, quotient or premultiply this equals the
//! correctly rounded result in the type (f32's 24 bits are at least 2p+2 for each of these
//! p-bit types, so rounding twice is harmless), which is what NCCL's `__hadd`/`__hmul` give,
//! and for fp8 what its half-precision path gives (a test checks all 65536 pairs). Across a
//! collective, though, each step rounds: a ring all-reduce over n ranks rounds n-1 times, so
//! expect up to about (n-1)/2 units in the last place of the type (bf16: 2^-8 relative per
//! step; f16: 2^-11; e4m3: 2^-4; e5m2: 2^-3), and a result that depends on the order of the
//! ranks, as on GPUs. fp8 encoding saturates: overflow and ±inf become ±max (448 for e4m3,
//! 57344 for e5m2), NaN stays NaN (see [`fp8`]). f16 and bf16 overflow to ±inf as IEEE does.

// Unsafe code only in `cuda` (FFI to the CUDA driver).
#![deny(unsafe_code)]

#[cfg(feature = "cuda")]
pub mod cuda;
pub mod device;
mod dtype;
mod element;
pub mod fp8;
mod plan;
mod reduce;
mod scalar;

pub use dtype::DataType;
pub use element::{E4M3, E5M2};
pub use plan::{Combine, ReduceOp, ReducePlan};
pub use reduce::{combine, combine_into, finalize_avg, premultiply, premultiply_in_place, reduce_in_place, reduce_into};
pub use scalar::Scalar;

/// The kernels' one error type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid datatype value {value}: ncclDataType_t values are 0..=11")]
    BadDataType { value: i32 },
    #[error("invalid reduction op value {value}: ncclRedOp_t values are 0..=4 (sum, prod, max, min, avg); PreMulSum ops are resolved by the C API")]
    BadOp { value: i32 },
    #[error("a buffer of {bytes} bytes is not a whole number of {dtype} elements ({} bytes each)", dtype.size())]
    NotWholeElements { bytes: usize, dtype: DataType },
    #[error("buffer lengths differ: the destination has {dst} bytes, a source has {src}")]
    LengthMismatch { dst: usize, src: usize },
    #[error("a reduce plan built for {plan} was given {given} buffers")]
    PlanMismatch { plan: DataType, given: DataType },
    #[error("a PreMulSum scalar of type {scalar} cannot scale {reduction} data; create the op with the collective's datatype")]
    ScalarMismatch { scalar: DataType, reduction: DataType },
    #[error("a {dtype} scalar is {} bytes, got {bytes}", dtype.size())]
    ScalarSize { dtype: DataType, bytes: usize },
    #[error("the number of ranks must be at least 1")]
    NoRanks,
    /// The CUDA driver, NVRTC or a kernel failed, or is missing; the message says which.
    #[error("CUDA: {0}")]
    Cuda(String),
}

/// The kernels' result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests;
