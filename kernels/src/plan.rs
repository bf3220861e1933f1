//! Reduction ops as the user names them, and the plan an executor follows for one collective.

use std::fmt;

use crate::reduce::{finalize_avg, premultiply, premultiply_in_place};
use crate::{DataType, Error, Result, Scalar};

/// A reduction as the user names it: `ncclRedOp_t`, or a PreMulSum op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    /// Sum divided by the number of ranks.
    Avg,
    /// Sum of the inputs, each first multiplied by its rank's scalar
    /// (`ncclRedOpCreatePreMulSum`).
    PreMulSum(Scalar),
}

/// The elementwise operation each step of a collective applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combine {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceOp {
    /// The ops nccl-tests runs, for test matrices (PreMulSum with scalar 2).
    pub const ALL: [ReduceOp; 6] =
        [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg, ReduceOp::PreMulSum(Scalar::F64(2.0))];

    /// From an `ncclRedOp_t` value 0..=4. Values from 5 up name PreMulSum ops created on a
    /// communicator; the C API resolves those to [`ReduceOp::PreMulSum`] itself.
    pub fn from_nccl(value: i32) -> Result<ReduceOp> {
        Ok(match value {
            0 => ReduceOp::Sum,
            1 => ReduceOp::Prod,
            2 => ReduceOp::Max,
            3 => ReduceOp::Min,
            4 => ReduceOp::Avg,
            value => return Err(Error::BadOp { value }),
        })
    }

    /// The name nccl-tests prints in its `redop` column: sum, prod, max, min, avg, mulsum.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum(_) => "mulsum",
        }
    }

    /// Parses [`ReduceOp::name`] (and `premulsum`); PreMulSum gets scalar 2.
    pub fn parse(s: &str) -> Option<ReduceOp> {
        if s.eq_ignore_ascii_case("premulsum") {
            return Some(ReduceOp::PreMulSum(Scalar::F64(2.0)));
        }
        ReduceOp::ALL.iter().copied().find(|op| op.name().eq_ignore_ascii_case(s))
    }

    /// What each step combines with.
    pub fn combine(self) -> Combine {
        match self {
            ReduceOp::Sum | ReduceOp::Avg | ReduceOp::PreMulSum(_) => Combine::Sum,
            ReduceOp::Prod => Combine::Prod,
            ReduceOp::Max => Combine::Max,
            ReduceOp::Min => Combine::Min,
        }
    }

    /// The factor each rank's input is multiplied by before it enters the reduction, as an f64
    /// for [`crate::premultiply`] (`Scalar::F64`): PreMulSum's scalar, or float Avg's
    /// 1/nranks (rounded to f32, as NCCL does). Prefer [`ReducePlan`], which keeps integer
    /// scalars exact.
    pub fn input_scale(self, dtype: DataType, nranks: usize) -> Option<f64> {
        match self {
            ReduceOp::PreMulSum(s) => Some(s.to_f64()),
            ReduceOp::Avg if dtype.is_float() => Some(avg_scalar(dtype, nranks.max(1)).to_f64()),
            _ => None,
        }
    }

    /// Whether the final result is divided by nranks (integer Avg). Prefer [`ReducePlan`].
    pub fn needs_final_division(self, dtype: DataType) -> bool {
        self == ReduceOp::Avg && !dtype.is_float()
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Combine {
    /// The name, as [`ReduceOp::name`] spells it.
    pub fn name(self) -> &'static str {
        match self {
            Combine::Sum => "sum",
            Combine::Prod => "prod",
            Combine::Max => "max",
            Combine::Min => "min",
        }
    }
}

/// How one collective reduces, in three steps an executor applies at fixed places.
///
/// Built once per collective with [`ReducePlan::new`]`(op, dtype, nranks)`:
///
/// 1. **Prepare** — [`prepare_input`](ReducePlan::prepare_input) (or `prepare_in_place`),
///    once per rank, on that rank's *own input*, before any of it is sent or combined:
///    `x * scalar` for PreMulSum (this rank's scalar) and for float Avg (scalar = 1/nranks
///    rounded to the datatype, NCCL's `float(1.0/nRanks)` converted); a plain copy otherwise
///    ([`needs_prepare`](ReducePlan::needs_prepare) says whether it is more than a copy). Never
///    apply it to received data or partial results: they already hold prepared inputs.
/// 2. **Combine** — [`reduce_in_place`](crate::reduce_in_place) /
///    [`reduce_into`](crate::reduce_into) at every reducing step (recv-reduce-send,
///    recv-reduce-copy, local reduce), any number of times, in any order of ranks.
/// 3. **Finalize** — [`finalize`](ReducePlan::finalize), once, on the fully reduced result, by
///    each rank that holds it (all_reduce: every rank's output; reduce_scatter: every rank's
///    block; reduce: the root), after the schedule has finished — partial results in an output
///    buffer must not be finalized. Integer Avg divides by nranks here (truncating toward
///    zero); every other op does nothing ([`needs_finalize`](ReducePlan::needs_finalize)).
///
/// So `Avg` on floats is `sum(x_i * (1/n))` and on integers `sum(x_i) / n`, exactly NCCL's
/// split (its `ncclDevPreMulSum` and `ncclDevSumPostDiv`); `PreMulSum(s)` is `sum(x_i * s_i)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReducePlan {
    dtype: DataType,
    combine: Combine,
    premultiplier: Option<Scalar>,
    divisor: Option<u64>,
}

impl ReducePlan {
    /// The plan for `op` on `dtype` over `nranks` ranks (this rank's PreMulSum scalar in `op`).
    pub fn new(op: ReduceOp, dtype: DataType, nranks: usize) -> Result<ReducePlan> {
        if nranks == 0 {
            return Err(Error::NoRanks);
        }
        let (premultiplier, divisor) = match op {
            ReduceOp::PreMulSum(scalar) => (Some(scalar.to_element(dtype)?), None),
            ReduceOp::Avg if dtype.is_float() => (Some(avg_scalar(dtype, nranks).to_element(dtype)?), None),
            ReduceOp::Avg => (None, Some(nranks as u64)),
            ReduceOp::Sum | ReduceOp::Prod | ReduceOp::Max | ReduceOp::Min => (None, None),
        };
        Ok(ReducePlan { dtype, combine: op.combine(), premultiplier, divisor })
    }

    /// A plan with just a combine (no prepare, no finalize).
    pub fn combine_only(dtype: DataType, combine: Combine) -> ReducePlan {
        ReducePlan { dtype, combine, premultiplier: None, divisor: None }
    }

    /// The datatype the plan was built for.
    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// What each step combines with.
    pub fn combine(&self) -> Combine {
        self.combine
    }

    /// The scalar the prepare step multiplies by, as an element of the plan's datatype
    /// (`Scalar::Raw`), if any.
    pub fn premultiplier(&self) -> Option<Scalar> {
        self.premultiplier
    }

    /// What the finalize step divides by (integer Avg: nranks), if anything.
    pub fn divisor(&self) -> Option<u64> {
        self.divisor
    }

    /// Whether step 1 does more than copy.
    pub fn needs_prepare(&self) -> bool {
        self.premultiplier.is_some()
    }

    /// Whether step 3 does anything.
    pub fn needs_finalize(&self) -> bool {
        self.divisor.is_some()
    }

    /// Step 1: `dst = src * scalar`, or `dst = src` when the plan has no scalar.
    pub fn prepare_input(&self, dst: &mut [u8], src: &[u8]) -> Result<()> {
        match self.premultiplier {
            Some(scalar) => premultiply(self.dtype, scalar, dst, src),
            None => {
                crate::reduce::check_pair(self.dtype, dst.len(), src.len())?;
                dst.copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// Step 1 on a buffer that holds this rank's input and may be overwritten.
    pub fn prepare_in_place(&self, buf: &mut [u8]) -> Result<()> {
        match self.premultiplier {
            Some(scalar) => premultiply_in_place(self.dtype, scalar, buf),
            None => self.dtype.check_len(buf.len()).map(drop),
        }
    }

    /// Step 3, on the fully reduced result.
    pub fn finalize(&self, buf: &mut [u8]) -> Result<()> {
        match self.divisor {
            Some(n) => finalize_avg(self.dtype, n as usize, buf),
            None => self.dtype.check_len(buf.len()).map(drop),
        }
    }
}

/// Float Avg's scalar: 1/n rounded to f32, as NCCL computes it (f64 keeps the f64 quotient).
fn avg_scalar(dtype: DataType, nranks: usize) -> Scalar {
    let inverse = 1.0 / nranks as f64;
    Scalar::F64(if dtype == DataType::Float64 { inverse } else { f64::from(inverse as f32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_follow_nccl_values_and_names() {
        for (value, op) in [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg].into_iter().enumerate() {
            assert_eq!(ReduceOp::from_nccl(value as i32), Ok(op));
            assert_eq!(ReduceOp::parse(op.name()), Some(op));
        }
        for value in [-1, 5, 1000] {
            let err = ReduceOp::from_nccl(value).unwrap_err();
            assert_eq!(err, Error::BadOp { value });
            assert!(err.to_string().contains(&value.to_string()), "{err}");
        }
        assert_eq!(ReduceOp::parse("mulsum"), Some(ReduceOp::PreMulSum(Scalar::F64(2.0))));
        assert_eq!(ReduceOp::parse("PreMulSum"), Some(ReduceOp::PreMulSum(Scalar::F64(2.0))));
        assert_eq!(ReduceOp::parse("xor"), None);
        assert_eq!(ReduceOp::Avg.to_string(), "avg");
    }

    #[test]
    fn avg_splits_like_nccl() {
        let float = ReducePlan::new(ReduceOp::Avg, DataType::Float32, 3).unwrap();
        assert_eq!(float.combine(), Combine::Sum);
        assert_eq!(float.premultiplier().unwrap().to_f64(), f64::from((1.0f64 / 3.0) as f32));
        assert!(float.needs_prepare() && !float.needs_finalize());
        let double = ReducePlan::new(ReduceOp::Avg, DataType::Float64, 3).unwrap();
        assert_eq!(double.premultiplier().unwrap().to_f64(), 1.0 / 3.0);
        let fp8 = ReducePlan::new(ReduceOp::Avg, DataType::Float8E4M3, 3).unwrap();
        assert_eq!(fp8.premultiplier().unwrap().element_bytes(), Some(&[0x2b][..]));
        let int = ReducePlan::new(ReduceOp::Avg, DataType::Int32, 3).unwrap();
        assert_eq!((int.premultiplier(), int.divisor()), (None, Some(3)));
        assert!(!int.needs_prepare() && int.needs_finalize());
        assert_eq!(ReduceOp::Avg.input_scale(DataType::Float32, 4), Some(0.25));
        assert_eq!(ReduceOp::Avg.input_scale(DataType::Int32, 4), None);
        assert!(ReduceOp::Avg.needs_final_division(DataType::Uint8));
    }

    #[test]
    fn plans_refuse_what_cannot_work() {
        assert_eq!(ReducePlan::new(ReduceOp::Sum, DataType::Int8, 0), Err(Error::NoRanks));
        let scalar = Scalar::from_bytes(DataType::Float32, &2f32.to_ne_bytes()).unwrap();
        let err = ReducePlan::new(ReduceOp::PreMulSum(scalar), DataType::Float16, 2).unwrap_err();
        assert_eq!(err, Error::ScalarMismatch { scalar: DataType::Float32, reduction: DataType::Float16 });
        assert!(err.to_string().contains("float") && err.to_string().contains("half"), "{err}");
        let plan = ReducePlan::new(ReduceOp::PreMulSum(scalar), DataType::Float32, 2).unwrap();
        assert_eq!(plan.premultiplier(), Some(scalar));
        let mut out = [0u8; 3];
        assert!(matches!(plan.prepare_input(&mut out, &[0u8; 3]), Err(Error::NotWholeElements { bytes: 3, .. })));
        assert!(matches!(plan.finalize(&mut out), Err(Error::NotWholeElements { bytes: 3, .. })));
    }
}
