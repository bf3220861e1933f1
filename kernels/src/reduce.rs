//! Elementwise reductions on byte buffers, for every datatype.
//!
//! Aligned buffers (the normal case: user allocations and FIFO slots) are viewed as typed
//! slices and reduced in plain loops that the compiler vectorizes; misaligned ones take an
//! element-at-a-time path with the same results.

use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};

use crate::fp8::Format;
use crate::{DataType, Error, Result};

/// A reduction as the user names it (`ncclRedOp_t` and PreMulSum ops).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ReduceOp {
    Sum,
    Prod,
    Max,
    Min,
    Avg,
    /// Sum of the inputs, each multiplied by the scalar first (ncclRedOpCreatePreMulSum).
    PreMulSum(f64),
}

/// The elementwise operation applied at each step of a collective.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    Sum,
    Prod,
    Max,
    Min,
}

impl ReduceOp {
    /// All ops nccl-tests knows, for test matrices (PreMulSum with scalar 2).
    pub const ALL: [ReduceOp; 6] = [ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg, ReduceOp::PreMulSum(2.0)];

    /// From an `ncclRedOp_t` value 0..=4.
    pub fn from_nccl(value: i32) -> Result<ReduceOp> {
        Ok(match value {
            0 => ReduceOp::Sum,
            1 => ReduceOp::Prod,
            2 => ReduceOp::Max,
            3 => ReduceOp::Min,
            4 => ReduceOp::Avg,
            v => return Err(Error::BadOp(v)),
        })
    }

    /// The name nccl-tests prints.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
            ReduceOp::PreMulSum(_) => "premulsum",
        }
    }

    /// Parses [`ReduceOp::name`] (premulsum takes scalar 2, as nccl-tests' does... use
    /// `PreMulSum(s)` directly for another scalar).
    pub fn parse(s: &str) -> Option<ReduceOp> {
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

    /// The factor each rank's input is multiplied by before it enters the reduction, if any.
    pub fn input_scale(self, dtype: DataType, nranks: usize) -> Option<f64> {
        match self {
            ReduceOp::PreMulSum(s) => Some(s),
            ReduceOp::Avg if dtype.is_float() => Some(1.0 / nranks as f64),
            _ => None,
        }
    }

    /// Whether the final result is divided by nranks (integer Avg).
    pub fn needs_final_division(self, dtype: DataType) -> bool {
        self == ReduceOp::Avg && !dtype.is_float()
    }
}

/// `acc[i] = acc[i] (op) src[i]`.
pub fn combine(dtype: DataType, op: Combine, acc: &mut [u8], src: &[u8]) -> Result<()> {
    check(dtype, acc.len(), src.len())?;
    dispatch!(dtype, T => typed_combine::<T>(op, acc, src));
    Ok(())
}

/// `dst[i] = a[i] (op) b[i]`.
pub fn combine_into(dtype: DataType, op: Combine, dst: &mut [u8], a: &[u8], b: &[u8]) -> Result<()> {
    check(dtype, dst.len(), a.len())?;
    check(dtype, dst.len(), b.len())?;
    dispatch!(dtype, T => typed_combine_into::<T>(op, dst, a, b));
    Ok(())
}

/// `dst[i] = src[i] * factor` (integers: the factor converted to the type, wrapping).
pub fn scale(dtype: DataType, factor: f64, dst: &mut [u8], src: &[u8]) -> Result<()> {
    check(dtype, dst.len(), src.len())?;
    dispatch!(dtype, T => typed_map::<T>(dst, src, |x| x.scale(factor)));
    Ok(())
}

/// `buf[i] /= n` (integers: truncating division).
pub fn divide(dtype: DataType, n: u64, buf: &mut [u8]) -> Result<()> {
    dtype.check_len(buf.len())?;
    let copy = buf.to_vec();
    dispatch!(dtype, T => typed_map::<T>(buf, &copy, |x| x.divide(n)));
    Ok(())
}

fn check(dtype: DataType, a: usize, b: usize) -> Result<()> {
    if a != b {
        return Err(Error::LengthMismatch(a, b));
    }
    dtype.check_len(a).map(drop)
}

macro_rules! dispatch {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DataType::Int8 => { type $t = i8; $body }
            DataType::Uint8 => { type $t = u8; $body }
            DataType::Int32 => { type $t = i32; $body }
            DataType::Uint32 => { type $t = u32; $body }
            DataType::Int64 => { type $t = i64; $body }
            DataType::Uint64 => { type $t = u64; $body }
            DataType::Float16 => { type $t = f16; $body }
            DataType::Float32 => { type $t = f32; $body }
            DataType::Float64 => { type $t = f64; $body }
            DataType::Bfloat16 => { type $t = bf16; $body }
            DataType::Float8E4M3 => { type $t = E4M3; $body }
            DataType::Float8E5M2 => { type $t = E5M2; $body }
        }
    };
}
use dispatch;

/// Element arithmetic.
trait Arith: Pod {
    fn combine(self, other: Self, op: Combine) -> Self;
    fn scale(self, factor: f64) -> Self;
    fn divide(self, n: u64) -> Self;
}

fn typed_combine<T: Arith>(op: Combine, acc: &mut [u8], src: &[u8]) {
    match (bytemuck::try_cast_slice_mut::<u8, T>(acc), bytemuck::try_cast_slice::<u8, T>(src)) {
        (Ok(acc), Ok(src)) => match op {
            // One loop per op keeps each loop body branch-free, so it vectorizes.
            Combine::Sum => acc.iter_mut().zip(src).for_each(|(a, &b)| *a = a.combine(b, Combine::Sum)),
            Combine::Prod => acc.iter_mut().zip(src).for_each(|(a, &b)| *a = a.combine(b, Combine::Prod)),
            Combine::Max => acc.iter_mut().zip(src).for_each(|(a, &b)| *a = a.combine(b, Combine::Max)),
            Combine::Min => acc.iter_mut().zip(src).for_each(|(a, &b)| *a = a.combine(b, Combine::Min)),
        },
        _ => {
            let size = std::mem::size_of::<T>();
            for (a, b) in acc.chunks_exact_mut(size).zip(src.chunks_exact(size)) {
                let v = bytemuck::pod_read_unaligned::<T>(a).combine(bytemuck::pod_read_unaligned(b), op);
                a.copy_from_slice(bytemuck::bytes_of(&v));
            }
        }
    }
}

fn typed_combine_into<T: Arith>(op: Combine, dst: &mut [u8], a: &[u8], b: &[u8]) {
    match (bytemuck::try_cast_slice_mut::<u8, T>(dst), bytemuck::try_cast_slice::<u8, T>(a), bytemuck::try_cast_slice::<u8, T>(b)) {
        (Ok(dst), Ok(a), Ok(b)) => match op {
            Combine::Sum => dst.iter_mut().zip(a.iter().zip(b)).for_each(|(d, (&x, &y))| *d = x.combine(y, Combine::Sum)),
            Combine::Prod => dst.iter_mut().zip(a.iter().zip(b)).for_each(|(d, (&x, &y))| *d = x.combine(y, Combine::Prod)),
            Combine::Max => dst.iter_mut().zip(a.iter().zip(b)).for_each(|(d, (&x, &y))| *d = x.combine(y, Combine::Max)),
            Combine::Min => dst.iter_mut().zip(a.iter().zip(b)).for_each(|(d, (&x, &y))| *d = x.combine(y, Combine::Min)),
        },
        _ => {
            let size = std::mem::size_of::<T>();
            for (d, (x, y)) in dst.chunks_exact_mut(size).zip(a.chunks_exact(size).zip(b.chunks_exact(size))) {
                let v = bytemuck::pod_read_unaligned::<T>(x).combine(bytemuck::pod_read_unaligned(y), op);
                d.copy_from_slice(bytemuck::bytes_of(&v));
            }
        }
    }
}

fn typed_map<T: Arith>(dst: &mut [u8], src: &[u8], f: impl Fn(T) -> T) {
    match (bytemuck::try_cast_slice_mut::<u8, T>(dst), bytemuck::try_cast_slice::<u8, T>(src)) {
        (Ok(dst), Ok(src)) => dst.iter_mut().zip(src).for_each(|(d, &s)| *d = f(s)),
        _ => {
            let size = std::mem::size_of::<T>();
            for (d, s) in dst.chunks_exact_mut(size).zip(src.chunks_exact(size)) {
                d.copy_from_slice(bytemuck::bytes_of(&f(bytemuck::pod_read_unaligned(s))));
            }
        }
    }
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn combine(self, o: Self, op: Combine) -> Self {
                match op {
                    Combine::Sum => self.wrapping_add(o),
                    Combine::Prod => self.wrapping_mul(o),
                    Combine::Max => self.max(o),
                    Combine::Min => self.min(o),
                }
            }
            fn scale(self, factor: f64) -> Self {
                self.wrapping_mul(factor as i128 as $t)
            }
            fn divide(self, n: u64) -> Self {
                (self as i128 / n as i128) as $t
            }
        }
    )*};
}
int_arith!(i8, u8, i32, u32, i64, u64);

macro_rules! float_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn combine(self, o: Self, op: Combine) -> Self {
                match op {
                    Combine::Sum => self + o,
                    Combine::Prod => self * o,
                    // NaN propagates from either side; written as selects so it vectorizes.
                    Combine::Max => { let m = if self >= o { self } else { o }; if self.is_nan() { self } else { m } }
                    Combine::Min => { let m = if self <= o { self } else { o }; if self.is_nan() { self } else { m } }
                }
            }
            fn scale(self, factor: f64) -> Self {
                (self as f64 * factor) as $t
            }
            fn divide(self, n: u64) -> Self {
                (self as f64 / n as f64) as $t
            }
        }
    )*};
}
float_arith!(f32, f64);

/// Types computed in f32 and rounded back once per step.
trait Narrow: Pod {
    fn widen(self) -> f32;
    fn narrow(x: f32) -> Self;
}

impl Narrow for f16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(x: f32) -> Self {
        f16::from_f32(x)
    }
}

impl Narrow for bf16 {
    fn widen(self) -> f32 {
        self.to_f32()
    }
    fn narrow(x: f32) -> Self {
        bf16::from_f32(x)
    }
}

/// An fp8 E4M3 element.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(transparent)]
pub struct E4M3(pub u8);

/// An fp8 E5M2 element.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(transparent)]
pub struct E5M2(pub u8);

impl Narrow for E4M3 {
    fn widen(self) -> f32 {
        Format::E4M3.decode(self.0)
    }
    fn narrow(x: f32) -> Self {
        E4M3(Format::E4M3.encode(x))
    }
}

impl Narrow for E5M2 {
    fn widen(self) -> f32 {
        Format::E5M2.decode(self.0)
    }
    fn narrow(x: f32) -> Self {
        E5M2(Format::E5M2.encode(x))
    }
}

macro_rules! narrow_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn combine(self, o: Self, op: Combine) -> Self {
                <$t>::narrow(self.widen().combine(o.widen(), op))
            }
            fn scale(self, factor: f64) -> Self {
                <$t>::narrow((self.widen() as f64 * factor) as f32)
            }
            fn divide(self, n: u64) -> Self {
                <$t>::narrow((self.widen() as f64 / n as f64) as f32)
            }
        }
    )*};
}
narrow_arith!(f16, bf16, E4M3, E5M2);

#[cfg(test)]
mod tests;
