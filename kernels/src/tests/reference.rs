//! An independent reference: elements decoded to i128 or f64 from their bit fields, combined
//! exactly there (or with one harmless f64 rounding), and rounded once per step to the datatype
//! by code written from the format definitions. It shares no code with the kernels.

use crate::{Combine, DataType, ReduceOp, Scalar};

/// A decoded element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    Int(i128),
    Float(f64),
}

/// A float format: exponent and mantissa bits, and how the all-ones exponent is used.
#[derive(Clone, Copy)]
struct Layout {
    exponent_bits: u32,
    mantissa_bits: u32,
    /// fp8 e4m3: no infinities, only S.1111.111 is NaN, and encoding saturates.
    e4m3: bool,
    /// fp8 conversions saturate at ±max instead of overflowing to ±inf.
    saturate: bool,
}

fn layout(dtype: DataType) -> Option<Layout> {
    let (exponent_bits, mantissa_bits, e4m3, saturate) = match dtype {
        DataType::Float16 => (5, 10, false, false),
        DataType::Bfloat16 => (8, 7, false, false),
        DataType::Float32 => (8, 23, false, false),
        DataType::Float8E4M3 => (4, 3, true, true),
        DataType::Float8E5M2 => (5, 2, false, true),
        _ => return None,
    };
    Some(Layout { exponent_bits, mantissa_bits, e4m3, saturate })
}

impl Layout {
    fn bias(self) -> i32 {
        (1 << (self.exponent_bits - 1)) - 1
    }

    fn top_exponent(self) -> u64 {
        (1 << self.exponent_bits) - 1
    }

    fn max(self) -> f64 {
        let m = f64::from(1u32 << self.mantissa_bits);
        let (top, mantissa) = if self.e4m3 { (self.top_exponent(), m - 2.0) } else { (self.top_exponent() - 1, m - 1.0) };
        (1.0 + mantissa / m) * 2f64.powi(top as i32 - self.bias())
    }

    fn decode(self, bits: u64) -> f64 {
        let m_bits = self.mantissa_bits;
        let sign = if bits >> (self.exponent_bits + m_bits) & 1 == 1 { -1.0 } else { 1.0 };
        let exponent = (bits >> m_bits) & self.top_exponent();
        let mantissa = bits & ((1 << m_bits) - 1);
        if self.e4m3 && exponent == self.top_exponent() && mantissa == (1 << m_bits) - 1 {
            return f64::NAN;
        }
        if !self.e4m3 && exponent == self.top_exponent() {
            return if mantissa == 0 { sign * f64::INFINITY } else { f64::NAN };
        }
        let m = mantissa as f64;
        if exponent == 0 {
            sign * m * 2f64.powi(1 - self.bias() - m_bits as i32)
        } else {
            sign * (m + f64::from(1u32 << m_bits)) * 2f64.powi(exponent as i32 - self.bias() - m_bits as i32)
        }
    }

    /// x rounded to this format: nearest, ties to even; overflow to ±inf, or to ±max when
    /// saturating (also for ±inf inputs).
    fn round(self, x: f64) -> f64 {
        if x.is_nan() || x == 0.0 {
            return x;
        }
        if x.is_infinite() {
            return if self.saturate { x.signum() * self.max() } else { x };
        }
        let a = x.abs();
        let exponent = (((a.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(1 - self.bias());
        let quantum = 2f64.powi(exponent - self.mantissa_bits as i32);
        let r = (a / quantum).round_ties_even() * quantum;
        let r = if r > self.max() { if self.saturate { self.max() } else { f64::INFINITY } } else { r };
        x.signum() * r
    }

    /// The bits of a value already representable in the format (or ±inf, or NaN).
    fn encode_exact(self, r: f64) -> u64 {
        let m_bits = self.mantissa_bits;
        let sign = u64::from(r.is_sign_negative()) << (self.exponent_bits + m_bits);
        if r.is_nan() {
            let quiet = if self.e4m3 { (1 << m_bits) - 1 } else { 1 << (m_bits - 1) };
            return self.top_exponent() << m_bits | quiet | if self.saturate { (1 << m_bits) - 1 } else { 0 };
        }
        if r.is_infinite() {
            return sign | self.top_exponent() << m_bits;
        }
        let a = r.abs();
        if a == 0.0 {
            return sign;
        }
        let exponent = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023;
        let fields = if exponent < 1 - self.bias() {
            (a / 2f64.powi(1 - self.bias() - m_bits as i32)) as u64
        } else {
            let mantissa = a / 2f64.powi(exponent - m_bits as i32) - f64::from(1u32 << m_bits);
            ((exponent + self.bias()) as u64) << m_bits | mantissa as u64
        };
        assert_eq!(self.decode(sign | fields), r, "{r} is not representable");
        sign | fields
    }
}

/// Decodes one element.
pub fn decode(dtype: DataType, bytes: &[u8]) -> Value {
    let mut raw = [0u8; 16];
    raw[..bytes.len()].copy_from_slice(bytes);
    let bits = u64::from_ne_bytes(raw[..8].try_into().unwrap()) & mask(dtype);
    // Native order: on little-endian the element's bits are the low bytes.
    const { assert!(cfg!(target_endian = "little"), "the reference reads little-endian elements") };
    match dtype {
        DataType::Int8 => Value::Int(i128::from(bits as u8 as i8)),
        DataType::Int32 => Value::Int(i128::from(bits as u32 as i32)),
        DataType::Int64 => Value::Int(i128::from(bits as i64)),
        DataType::Uint8 | DataType::Uint32 | DataType::Uint64 => Value::Int(i128::from(bits)),
        DataType::Float64 => Value::Float(f64::from_bits(bits)),
        _ => Value::Float(layout(dtype).unwrap().decode(bits)),
    }
}

/// Rounds (floats) or wraps (integers) a value to the datatype and encodes it.
pub fn encode(dtype: DataType, value: Value) -> Vec<u8> {
    let bits = match (dtype, value) {
        (DataType::Float64, Value::Float(x)) => x.to_bits(),
        (_, Value::Float(x)) => {
            let layout = layout(dtype).unwrap();
            layout.encode_exact(layout.round(x))
        }
        (_, Value::Int(i)) => i as u64 & mask(dtype),
    };
    bits.to_ne_bytes()[..dtype.size()].to_vec()
}

fn mask(dtype: DataType) -> u64 {
    u64::MAX >> (64 - 8 * dtype.size())
}

/// One exact (or once-rounded, in f64) step.
pub fn combine(op: Combine, a: Value, b: Value) -> Value {
    match (a, b) {
        (Value::Int(a), Value::Int(b)) => Value::Int(match op {
            Combine::Sum => a.wrapping_add(b),
            Combine::Prod => a.wrapping_mul(b),
            Combine::Max => a.max(b),
            Combine::Min => a.min(b),
        }),
        (Value::Float(a), Value::Float(b)) => Value::Float(match op {
            Combine::Sum => a + b,
            Combine::Prod => a * b,
            Combine::Max => max_number(a, b),
            Combine::Min => -max_number(-a, -b),
        }),
        _ => unreachable!("mixed values"),
    }
}

/// IEEE 754-2019 maximumNumber: NaN loses to a number; +0 beats -0.
pub fn max_number(a: f64, b: f64) -> f64 {
    if a.is_nan() {
        b
    } else if b.is_nan() {
        a
    } else if a == 0.0 && b == 0.0 {
        if a.is_sign_positive() { a } else { b }
    } else if a > b {
        a
    } else {
        b
    }
}

/// Whether two encoded elements are the same value: equal bits, or both NaN.
pub fn same(dtype: DataType, got: &[u8], want: &[u8]) -> bool {
    got == want || matches!((decode(dtype, got), decode(dtype, want)), (Value::Float(a), Value::Float(b)) if a.is_nan() && b.is_nan())
}

/// The scalar each rank's input is multiplied by, as a value of the datatype, or None.
pub fn premultiplier(op: ReduceOp, dtype: DataType, nranks: usize) -> Option<Value> {
    match op {
        ReduceOp::PreMulSum(Scalar::Raw { bytes, .. }) => Some(decode(dtype, &bytes[..dtype.size()])),
        ReduceOp::PreMulSum(Scalar::F64(_)) => panic!("the reference takes raw scalars"),
        ReduceOp::Avg if dtype.is_float() => {
            let inverse = 1.0 / nranks as f64;
            let inverse = if dtype == DataType::Float64 { inverse } else { f64::from(inverse as f32) };
            Some(decode(dtype, &encode(dtype, Value::Float(inverse))))
        }
        _ => None,
    }
}

/// A whole reduction: each rank's input premultiplied (by its own scalar), combined in rank
/// order rounding at every step, and integer Avg divided at the end.
pub fn collective(ops: &[ReduceOp], dtype: DataType, inputs: &[Vec<u8>]) -> Vec<u8> {
    let size = dtype.size();
    let nranks = inputs.len();
    let combine_op = ops[0].combine();
    let mut out = Vec::with_capacity(inputs[0].len());
    for j in 0..inputs[0].len() / size {
        // A rank's input enters as it is, unless premultiplied (and so rounded).
        let prepared = |rank: usize| {
            let bytes = &inputs[rank][j * size..][..size];
            match premultiplier(ops[rank], dtype, nranks) {
                Some(s) => encode(dtype, combine(Combine::Prod, decode(dtype, bytes), s)),
                None => bytes.to_vec(),
            }
        };
        let mut acc = prepared(0);
        for rank in 1..nranks {
            acc = encode(dtype, combine(combine_op, decode(dtype, &acc), decode(dtype, &prepared(rank))));
        }
        if ops[0] == ReduceOp::Avg && !dtype.is_float() {
            let Value::Int(sum) = decode(dtype, &acc) else { unreachable!() };
            acc = encode(dtype, Value::Int(sum / nranks as i128));
        }
        out.extend(acc);
    }
    out
}

/// A deterministic xorshift generator, so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `count` elements of random bit patterns (NaN, inf and subnormals included).
    pub fn bits(&mut self, dtype: DataType, count: usize) -> Vec<u8> {
        (0..count).flat_map(|_| self.next().to_ne_bytes()[..dtype.size()].to_vec()).collect()
    }

    /// `count` elements of moderate values: integers in -8..8 (0..16 unsigned), floats in
    /// (-4, 4) rounded to the type, so that sums and products stay meaningful.
    pub fn moderate(&mut self, dtype: DataType, count: usize) -> Vec<u8> {
        (0..count)
            .flat_map(|_| {
                let r = self.next();
                let value = if dtype.is_float() {
                    Value::Float((r % 8001) as f64 / 1000.0 - 4.0)
                } else if matches!(dtype, DataType::Uint8 | DataType::Uint32 | DataType::Uint64) {
                    Value::Int((r % 16) as i128)
                } else {
                    Value::Int((r % 16) as i128 - 8)
                };
                encode(dtype, value)
            })
            .collect()
    }
}

#[test]
fn the_reference_knows_the_formats() {
    let f16 = layout(DataType::Float16).unwrap();
    assert_eq!(f16.max(), 65504.0);
    assert_eq!(f16.round(65519.0), 65504.0);
    assert_eq!(f16.round(65520.0), f64::INFINITY);
    assert_eq!(layout(DataType::Float8E4M3).unwrap().max(), 448.0);
    assert_eq!(layout(DataType::Float8E5M2).unwrap().max(), 57344.0);
    assert_eq!(layout(DataType::Bfloat16).unwrap().max(), f64::from(half::bf16::MAX.to_f32()));
    assert_eq!(encode(DataType::Float16, Value::Float(1.0)), half::f16::ONE.to_ne_bytes().to_vec());
    assert_eq!(encode(DataType::Bfloat16, Value::Float(-2.0)), half::bf16::from_f32(-2.0).to_ne_bytes().to_vec());
    assert_eq!(encode(DataType::Float32, Value::Float(0.1)), 0.1f32.to_ne_bytes().to_vec());
    assert_eq!(encode(DataType::Int8, Value::Int(128)), vec![0x80]);
    assert_eq!(decode(DataType::Int8, &[0x80]), Value::Int(-128));
    assert_eq!(decode(DataType::Uint64, &u64::MAX.to_ne_bytes()), Value::Int(i128::from(u64::MAX)));
    // A midpoint that needs the sticky bits beyond f32's to round correctly.
    assert_eq!(f16.round(1024.5 + 2f64.powi(-11)), 1025.0);
}
