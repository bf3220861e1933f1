//! The two 8-bit float formats, converted to and from f32.
//!
//! - **E4M3** (OCP "e4m3fn", CUDA `__nv_fp8_e4m3`): 1 sign, 4 exponent (bias 7), 3 mantissa
//!   bits; no infinities; `S.1111.111` is NaN; largest finite 448.
//! - **E5M2** (CUDA `__nv_fp8_e5m2`): 1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like
//!   with infinities (`S.11111.00`) and NaNs; largest finite 57344.
//!
//! Encoding rounds to nearest, ties to even, and saturates to the largest finite value
//! (overflow and ±inf become ±max), as CUDA's conversion with `__NV_SATFINITE`. NaN encodes
//! as the positive canonical NaN (0x7F for both formats).

use std::sync::OnceLock;

/// One fp8 format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    E4M3,
    E5M2,
}

const NAN_CODE: u8 = 0x7f;

impl Format {
    /// Decodes a code to f32 (exact: every fp8 value is an f32).
    pub fn decode(self, code: u8) -> f32 {
        self.table().decode[code as usize]
    }

    /// Encodes an f32, rounding to nearest even and saturating.
    pub fn encode(self, x: f32) -> u8 {
        if x.is_nan() {
            return NAN_CODE;
        }
        let sign = if x.is_sign_negative() { 0x80 } else { 0 };
        let magnitude = self.encode_magnitude(x.abs());
        sign | magnitude
    }

    fn encode_magnitude(self, a: f32) -> u8 {
        let finite = &self.table().positive; // increasing values of codes 0..=max_code
        let max_code = finite.len() - 1;
        if a >= finite[max_code] {
            return max_code as u8;
        }
        // Largest code whose value is <= a.
        let below = finite.partition_point(|&v| v <= a) - 1;
        let (lo, hi) = (finite[below], finite[below + 1]);
        let (d_lo, d_hi) = (a - lo, hi - a);
        let code = if d_lo < d_hi || (d_lo == d_hi && below % 2 == 0) { below } else { below + 1 };
        code as u8
    }

    fn raw_decode(self, code: u8) -> f32 {
        let (exp_bits, man_bits, bias) = match self {
            Format::E4M3 => (4u32, 3u32, 7i32),
            Format::E5M2 => (5, 2, 15),
        };
        let sign = if code & 0x80 != 0 { -1.0f32 } else { 1.0 };
        let exp = ((code as u32) >> man_bits) & ((1 << exp_bits) - 1);
        let man = (code as u32) & ((1 << man_bits) - 1);
        let max_exp = (1 << exp_bits) - 1;
        match self {
            Format::E4M3 if exp == max_exp && man == (1 << man_bits) - 1 => return f32::NAN,
            Format::E5M2 if exp == max_exp => return if man == 0 { sign * f32::INFINITY } else { f32::NAN },
            _ => {}
        }
        let fraction = man as f32 / (1 << man_bits) as f32;
        let value = if exp == 0 {
            fraction * 2f32.powi(1 - bias)
        } else {
            (1.0 + fraction) * 2f32.powi(exp as i32 - bias)
        };
        sign * value
    }

    fn table(self) -> &'static Table {
        static E4M3: OnceLock<Table> = OnceLock::new();
        static E5M2: OnceLock<Table> = OnceLock::new();
        let cell = match self {
            Format::E4M3 => &E4M3,
            Format::E5M2 => &E5M2,
        };
        cell.get_or_init(|| {
            let decode: Vec<f32> = (0..=255u8).map(|c| self.raw_decode(c)).collect();
            let positive: Vec<f32> = decode[..128].iter().copied().take_while(|v| v.is_finite()).collect();
            Table { decode: decode.try_into().expect("256 codes"), positive }
        })
    }

    /// The largest finite value.
    pub fn max(self) -> f32 {
        *self.table().positive.last().expect("finite codes exist")
    }
}

struct Table {
    decode: [f32; 256],
    /// Values of the positive finite codes 0, 1, ... in increasing order.
    positive: Vec<f32>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(Format::E4M3.max(), 448.0);
        assert_eq!(Format::E5M2.max(), 57344.0);
        assert_eq!(Format::E4M3.decode(0x38), 1.0);
        assert_eq!(Format::E5M2.decode(0x3c), 1.0);
        assert_eq!(Format::E4M3.decode(0x01), 2f32.powi(-9)); // smallest subnormal
        assert_eq!(Format::E5M2.decode(0x01), 2f32.powi(-16));
        assert!(Format::E4M3.decode(0x7f).is_nan() && Format::E4M3.decode(0xff).is_nan());
        assert_eq!(Format::E5M2.decode(0x7c), f32::INFINITY);
        assert_eq!(Format::E5M2.decode(0xfc), f32::NEG_INFINITY);
    }

    #[test]
    fn every_code_round_trips() {
        for format in [Format::E4M3, Format::E5M2] {
            for code in 0..=255u8 {
                let v = format.decode(code);
                if v.is_nan() {
                    assert!(format.decode(format.encode(v)).is_nan());
                } else if v.is_infinite() {
                    assert_eq!(format.decode(format.encode(v)), v.signum() * format.max());
                } else if code == 0x80 {
                    assert_eq!(format.encode(v), 0x80); // -0
                } else {
                    assert_eq!(format.encode(v), code, "{format:?} code {code:#x} value {v}");
                }
            }
        }
    }

    #[test]
    fn rounding_is_nearest_even_and_saturating() {
        // Between 1.0 (0x38) and 1.125 (0x39) in E4M3: the midpoint goes to the even code.
        assert_eq!(Format::E4M3.encode(1.0625), 0x38);
        assert_eq!(Format::E4M3.encode(1.07), 0x39);
        // Between 1.125 (0x39) and 1.25 (0x3a): midpoint 1.1875 goes to 0x3a (even).
        assert_eq!(Format::E4M3.encode(1.1875), 0x3a);
        assert_eq!(Format::E4M3.encode(1e9), 0x7e);
        assert_eq!(Format::E4M3.encode(-1e9), 0xfe);
        assert_eq!(Format::E5M2.encode(f32::INFINITY), 0x7b);
        assert_eq!(Format::E4M3.encode(1e-20), 0x00);
    }
}
