//! Element arithmetic for each datatype: the one place the semantics of a single element live.
//!
//! Integers wrap; f32 and f64 use their own IEEE arithmetic; f16, bf16 and the fp8 formats are
//! widened to f32, computed there and rounded back once (see the crate docs for why that is
//! exact for one sum, product or quotient). Max and min follow IEEE 754-2019
//! maximumNumber/minimumNumber: a NaN loses to a number, and -0 < +0.

use bytemuck::{Pod, Zeroable};
use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::fp8::Format;
use crate::plan::Combine;

/// The arithmetic of one element type, as every kernel applies it.
pub(crate) trait Element: Pod {
    fn add(self, other: Self) -> Self;
    fn mul(self, other: Self) -> Self;
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    /// `self / n` for Avg: integers truncate toward zero (the sign of a signed value is kept).
    fn divide(self, n: u64) -> Self;
    /// Converts a scalar given as f64: integers truncate toward zero and wrap; floats round to
    /// nearest even through f32 (as NCCL converts its Avg scalar); fp8 saturates.
    fn from_f64(x: f64) -> Self;
    /// The value as f64 (exact for floats, and for integers up to 2^53).
    fn to_f64(self) -> f64;

    /// `acc[i] = acc[i] (op) src[i]` on typed slices of equal length. Plain loops, one per op,
    /// so each body is branch-free and vectorizes; narrow types override this.
    #[inline(always)]
    fn zip_in_place(op: Combine, acc: &mut [Self], src: &[Self]) {
        fn each<T: Copy>(acc: &mut [T], src: &[T], f: impl Fn(T, T) -> T) {
            for (a, &b) in acc.iter_mut().zip(src) {
                *a = f(*a, b);
            }
        }
        match op {
            Combine::Sum => each(acc, src, Self::add),
            Combine::Prod => each(acc, src, Self::mul),
            Combine::Max => each(acc, src, Self::max),
            Combine::Min => each(acc, src, Self::min),
        }
    }

    /// `dst[i] = a[i] (op) b[i]` on typed slices of equal length.
    #[inline(always)]
    fn zip_into(op: Combine, dst: &mut [Self], a: &[Self], b: &[Self]) {
        fn each<T: Copy>(dst: &mut [T], a: &[T], b: &[T], f: impl Fn(T, T) -> T) {
            for (d, (&x, &y)) in dst.iter_mut().zip(a.iter().zip(b)) {
                *d = f(x, y);
            }
        }
        match op {
            Combine::Sum => each(dst, a, b, Self::add),
            Combine::Prod => each(dst, a, b, Self::mul),
            Combine::Max => each(dst, a, b, Self::max),
            Combine::Min => each(dst, a, b, Self::min),
        }
    }

    /// `dst[i] = src[i] * s` on typed slices of equal length.
    #[inline(always)]
    fn scale_into(dst: &mut [Self], src: &[Self], s: Self) {
        for (d, &x) in dst.iter_mut().zip(src) {
            *d = x.mul(s);
        }
    }

    /// `buf[i] = buf[i] * s`.
    #[inline(always)]
    fn scale_in_place(buf: &mut [Self], s: Self) {
        for x in buf.iter_mut() {
            *x = x.mul(s);
        }
    }
}

/// Calls `$body` with `$t` bound to the element type of `$dtype`.
macro_rules! dispatch {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            DataType::Int8 => { type $t = i8; $body }
            DataType::Uint8 => { type $t = u8; $body }
            DataType::Int32 => { type $t = i32; $body }
            DataType::Uint32 => { type $t = u32; $body }
            DataType::Int64 => { type $t = i64; $body }
            DataType::Uint64 => { type $t = u64; $body }
            DataType::Float16 => { type $t = half::f16; $body }
            DataType::Float32 => { type $t = f32; $body }
            DataType::Float64 => { type $t = f64; $body }
            DataType::Bfloat16 => { type $t = half::bf16; $body }
            DataType::Float8E4M3 => { type $t = $crate::element::E4M3; $body }
            DataType::Float8E5M2 => { type $t = $crate::element::E5M2; $body }
        }
    };
}
pub(crate) use dispatch;

macro_rules! integer_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)]
            fn add(self, other: Self) -> Self { self.wrapping_add(other) }
            #[inline(always)]
            fn mul(self, other: Self) -> Self { self.wrapping_mul(other) }
            #[inline(always)]
            fn max(self, other: Self) -> Self { Ord::max(self, other) }
            #[inline(always)]
            fn min(self, other: Self) -> Self { Ord::min(self, other) }
            #[inline]
            fn divide(self, n: u64) -> Self {
                match <$t>::try_from(n) {
                    // n > 0, so neither truncating division can overflow.
                    Ok(d) => self / d,
                    // n is beyond the type's range: only i8::MIN / 128 style cases are nonzero.
                    Err(_) => (i128::from(self) / i128::from(n)) as $t,
                }
            }
            fn from_f64(x: f64) -> Self { x as i128 as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
integer_element!(i8, u8, i32, u32, i64, u64);

macro_rules! float_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)]
            fn add(self, other: Self) -> Self { self + other }
            #[inline(always)]
            fn mul(self, other: Self) -> Self { self * other }
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                // `max` returns the number when one side is NaN; the `==` branch orders zeros
                // (+0 & -0 = +0 bitwise). Both are selects, so the loop still vectorizes.
                if self == other { <$t>::from_bits(self.to_bits() & other.to_bits()) } else { <$t>::max(self, other) }
            }
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                if self == other { <$t>::from_bits(self.to_bits() | other.to_bits()) } else { <$t>::min(self, other) }
            }
            #[inline]
            fn divide(self, n: u64) -> Self { self / n as $t }
            fn from_f64(x: f64) -> Self { x as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
float_element!(f32, f64);

/// Types computed in f32 and rounded back once per operation.
pub(crate) trait Narrow: Pod {
    fn widen(self) -> f32;
    fn narrow(x: f32) -> Self;

    /// `dst[i] = src[i].widen()`; types with faster bulk conversions override it.
    #[inline(always)]
    fn widen_slice(src: &[Self], dst: &mut [f32]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = s.widen();
        }
    }

    /// `dst[i] = narrow(src[i])`.
    #[inline(always)]
    fn narrow_slice(src: &[f32], dst: &mut [Self]) {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = Self::narrow(s);
        }
    }
}

impl Narrow for f16 {
    #[inline(always)]
    fn widen(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        f16::from_f32(x)
    }
    // half converts slices eight at a time with F16C where the CPU has it (checked at run
    // time), and in software elsewhere; one element at a time it is several times slower.
    #[inline(always)]
    fn widen_slice(src: &[Self], dst: &mut [f32]) {
        src.convert_to_f32_slice(dst);
    }
    #[inline(always)]
    fn narrow_slice(src: &[f32], dst: &mut [Self]) {
        dst.convert_from_f32_slice(src);
    }
}

impl Narrow for bf16 {
    // bf16 is the top half of an f32, so both directions are a few integer operations; written
    // here without branches (half's own have them) so the loops vectorize. Same results as
    // `bf16::to_f32`/`bf16::from_f32` (tested), except that a signalling NaN widens unquieted.
    #[inline(always)]
    fn widen(self) -> f32 {
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        let bits = x.to_bits();
        let rounded = bits.wrapping_add(0x7fff + ((bits >> 16) & 1)) >> 16;
        let nan = (bits >> 16) | 0x40;
        bf16::from_bits(if x.is_nan() { nan } else { rounded } as u16)
    }
}

/// An fp8 E4M3 value (raw code), the element of [`crate::DataType::Float8E4M3`] here and in the
/// runtime's collectives; convert with [`crate::fp8::Format::E4M3`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(transparent)]
pub struct E4M3(pub u8);

/// An fp8 E5M2 value (raw code), the element of [`crate::DataType::Float8E5M2`] here and in the
/// runtime's collectives; convert with [`crate::fp8::Format::E5M2`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(transparent)]
pub struct E5M2(pub u8);

impl Narrow for E4M3 {
    #[inline(always)]
    fn widen(self) -> f32 {
        Format::E4M3.decode(self.0)
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        E4M3(Format::E4M3.encode(x))
    }
}

impl Narrow for E5M2 {
    #[inline(always)]
    fn widen(self) -> f32 {
        Format::E5M2.decode(self.0)
    }
    #[inline(always)]
    fn narrow(x: f32) -> Self {
        E5M2(Format::E5M2.encode(x))
    }
}

/// Elements per block when f16 is widened to f32 on the stack (two 2 KiB arrays).
const BLOCK: usize = 512;

/// Runs `f` over f32 blocks widened from `a` and `b`, narrowing the results into `dst`.
#[inline(always)]
fn blocks<T: Narrow>(dst: &mut [T], a: Option<&[T]>, b: &[T], f: impl Fn(f32, f32) -> f32) {
    let (mut x, mut y) = ([0f32; BLOCK], [0f32; BLOCK]);
    for (start, chunk) in (0..).step_by(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        let n = chunk.len();
        // In place, `dst` itself is the first operand.
        T::widen_slice(a.map_or(&*chunk, |a| &a[start..start + n]), &mut x[..n]);
        T::widen_slice(&b[start..start + n], &mut y[..n]);
        for (p, &q) in x[..n].iter_mut().zip(&y[..n]) {
            *p = f(*p, q);
        }
        T::narrow_slice(&x[..n], chunk);
    }
}

/// Maps `f` over f32 blocks widened from `src` (or from `dst` itself), narrowing into `dst`.
#[inline(always)]
fn blocks_map<T: Narrow>(dst: &mut [T], src: Option<&[T]>, f: impl Fn(f32) -> f32) {
    let mut x = [0f32; BLOCK];
    for (start, chunk) in (0..).step_by(BLOCK).zip(dst.chunks_mut(BLOCK)) {
        let n = chunk.len();
        T::widen_slice(src.map_or(&*chunk, |s| &s[start..start + n]), &mut x[..n]);
        for p in &mut x[..n] {
            *p = f(*p);
        }
        T::narrow_slice(&x[..n], chunk);
    }
}

macro_rules! narrow_element {
    ($($t:ty),*) => {$(
        impl Element for $t {
            #[inline(always)]
            fn add(self, other: Self) -> Self { Self::narrow(self.widen() + other.widen()) }
            #[inline(always)]
            fn mul(self, other: Self) -> Self { Self::narrow(self.widen() * other.widen()) }
            #[inline(always)]
            fn max(self, other: Self) -> Self { Self::narrow(Element::max(self.widen(), other.widen())) }
            #[inline(always)]
            fn min(self, other: Self) -> Self { Self::narrow(Element::min(self.widen(), other.widen())) }
            #[inline]
            fn divide(self, n: u64) -> Self { Self::narrow(self.widen() / n as f32) }
            fn from_f64(x: f64) -> Self { Self::narrow(x as f32) }
            fn to_f64(self) -> f64 { f64::from(self.widen()) }
        }
    )*};
}
// bf16 and fp8 convert with inlined, branch-free bit arithmetic, so the default element loops
// vectorize as they are.
narrow_element!(bf16, E4M3, E5M2);

// f16 converts fastest in bulk (F16C, detected at run time), so it works in f32 blocks.
impl Element for f16 {
    #[inline(always)]
    fn add(self, other: Self) -> Self {
        Self::narrow(self.widen() + other.widen())
    }
    #[inline(always)]
    fn mul(self, other: Self) -> Self {
        Self::narrow(self.widen() * other.widen())
    }
    #[inline(always)]
    fn max(self, other: Self) -> Self {
        Self::narrow(Element::max(self.widen(), other.widen()))
    }
    #[inline(always)]
    fn min(self, other: Self) -> Self {
        Self::narrow(Element::min(self.widen(), other.widen()))
    }
    #[inline]
    fn divide(self, n: u64) -> Self {
        Self::narrow(self.widen() / n as f32)
    }
    fn from_f64(x: f64) -> Self {
        Self::narrow(x as f32)
    }
    fn to_f64(self) -> f64 {
        f64::from(self.widen())
    }

    fn zip_in_place(op: Combine, acc: &mut [Self], src: &[Self]) {
        match op {
            Combine::Sum => blocks(acc, None, src, |x, y| x + y),
            Combine::Prod => blocks(acc, None, src, |x, y| x * y),
            Combine::Max => blocks(acc, None, src, <f32 as Element>::max),
            Combine::Min => blocks(acc, None, src, <f32 as Element>::min),
        }
    }

    fn zip_into(op: Combine, dst: &mut [Self], a: &[Self], b: &[Self]) {
        match op {
            Combine::Sum => blocks(dst, Some(a), b, |x, y| x + y),
            Combine::Prod => blocks(dst, Some(a), b, |x, y| x * y),
            Combine::Max => blocks(dst, Some(a), b, <f32 as Element>::max),
            Combine::Min => blocks(dst, Some(a), b, <f32 as Element>::min),
        }
    }

    fn scale_into(dst: &mut [Self], src: &[Self], s: Self) {
        let s = s.widen();
        blocks_map(dst, Some(src), |x| x * s);
    }

    fn scale_in_place(buf: &mut [Self], s: Self) {
        let s = s.widen();
        blocks_map(buf, None, |x| x * s);
    }
}
