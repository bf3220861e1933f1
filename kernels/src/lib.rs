//! oxccl-kernels: the arithmetic of collectives.
//!
//! CPU reductions for every datatype and op, on raw byte buffers as the executors hold
//! them. They are the reference semantics the GPU kernels are checked against.
//!
//! # How each op is computed
//!
//! - **Sum, Prod, Max, Min** combine elementwise at every step of a collective.
//!   Integers wrap (two's complement), as in NCCL. Max and Min on floats propagate NaN
//!   (if either side is NaN the result is NaN), as CUDA's `fmaxf`-free comparisons in
//!   NCCL do not guarantee otherwise; documented so results can be compared.
//! - **Avg**: floating types multiply every rank's input by 1/nranks before it enters the
//!   sum ([`ReduceOp::input_scale`]); integer types sum and then divide the final result by
//!   nranks with truncating division ([`ReduceOp::needs_final_division`]). NCCL does the same.
//! - **PreMulSum(s)**: every rank's input is multiplied by `s` once, before it enters the
//!   sum. For integer types `s` is converted to the type (`as`), and the product wraps.
//! - **f16, bf16, fp8 (e4m3, e5m2)** are widened to f32, combined in f32 and rounded back
//!   (round to nearest even) once per step: a ring all-reduce over n ranks rounds n-1
//!   times, so expect the error of n-1 roundings of the low-precision type. fp8 conversions
//!   saturate to the largest finite value (CUDA's `__NV_SATFINITE`): overflow and ±inf become
//!   ±448 (e4m3) or ±57344 (e5m2); NaN stays NaN.

mod dtype;
pub mod fp8;
mod reduce;

pub use dtype::DataType;
pub use reduce::{combine, combine_into, scale, divide, Combine, ReduceOp};

/// The kernels' one error type.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("invalid datatype {0} (ncclDataType_t values are 0..=11)")]
    BadDataType(i32),
    #[error("invalid reduction op {0} (ncclRedOp_t values are 0..=4, or a PreMulSum op)")]
    BadOp(i32),
    #[error("buffer of {len} bytes is not a whole number of {dtype} elements")]
    Ragged { len: usize, dtype: DataType },
    #[error("buffer lengths differ: {0} and {1} bytes")]
    LengthMismatch(usize, usize),
}

/// The kernels' result alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;
