//! The two 8-bit float formats of `ncclFloat8e4m3` and `ncclFloat8e5m2`, to and from f32.
//!
//! - **E4M3** (OCP "e4m3fn", CUDA `__nv_fp8_e4m3`): 1 sign, 4 exponent (bias 7) and 3 mantissa
//!   bits; no infinities; `S.1111.111` is NaN; largest finite value 448; smallest subnormal 2^-9.
//! - **E5M2** (CUDA `__nv_fp8_e5m2`): 1 sign, 5 exponent (bias 15) and 2 mantissa bits;
//!   IEEE-like, with infinities (`S.11111.00`) and NaNs (`S.11111.{01,10,11}`); largest finite
//!   value 57344; smallest subnormal 2^-16.
//!
//! Decoding is exact (every fp8 value is an f32). Encoding rounds to nearest, ties to even,
//! and **saturates to the largest finite value**: anything at or beyond ±max, ±infinity
//! included, becomes ±448 (E4M3) or ±57344 (E5M2). This is CUDA's
//! `__nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)`, which is also what the
//! `__nv_fp8_e4m3`/`__nv_fp8_e5m2` constructors used by NCCL's kernels do; so an E5M2 infinity
//! never survives a reduction step. NaN encodes as the positive canonical NaN, `0x7F` in both
//! formats. The sign of zero is kept, also when a tiny value rounds to zero.
//!
//! Both directions are branch-free bit arithmetic, so loops over them vectorize; on baseline
//! x86-64 (SSE2) an fp8 reduce still runs at only about 1 GB/s, bound by instruction count.

/// One fp8 format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    E4M3,
    E5M2,
}

/// The code every NaN encodes to (both formats).
pub const NAN_CODE: u8 = 0x7f;

impl Format {
    /// Decodes a code to f32; exact.
    ///
    /// Bit arithmetic without branches, so loops over it vectorize (a 256-entry table does
    /// not); the tests check all 256 codes against the format's definition.
    #[inline(always)]
    pub fn decode(self, code: u8) -> f32 {
        let Params { mantissa_bits: m, bias, .. } = self.params();
        let code = u32::from(code);
        let sign = (code & 0x80) << 24;
        let magnitude = code & 0x7f;
        // Normal codes: move exponent:mantissa into place and re-bias the exponent.
        let normal = (magnitude << (23 - m)) + (((127 - bias) as u32) << 23);
        // Subnormal codes are a count of the smallest subnormal 2^(1-bias-m); exact in f32.
        let unit = f32::from_bits(((127 + 1 - bias - m as i32) as u32) << 23);
        let subnormal = ((magnitude as i32) as f32 * unit).to_bits();
        let finite = if magnitude < 1 << m { subnormal } else { normal };
        let bits = match self {
            // S.1111.111 is NaN; everything else is finite.
            Format::E4M3 => if magnitude == 0x7f { 0x7fc0_0000 } else { finite },
            // S.11111.xx: re-biasing to f32's all-ones exponent gives ±inf or a NaN.
            Format::E5M2 => if magnitude >= 0x7c { (magnitude << 21) + ((255 - 31) << 23) } else { finite },
        };
        f32::from_bits(sign | bits)
    }

    /// Encodes an f32: round to nearest even, saturate to ±max, NaN to [`NAN_CODE`].
    ///
    /// Written without branches (both ranges computed, then selected) so loops over it
    /// vectorize.
    #[inline(always)]
    pub fn encode(self, x: f32) -> u8 {
        let Params { mantissa_bits: m, bias, max_code, .. } = self.params();
        let bits = x.to_bits();
        let sign = (bits >> 24) as u8 & 0x80;
        let abs = bits & 0x7fff_ffff;
        // Normal range: round the f32 exponent:mantissa field to `m` mantissa bits, ties to
        // even (a carry out of the mantissa correctly bumps the exponent), then re-bias;
        // beyond max (±inf included) saturate.
        let shift = 23 - m;
        let rounded = (abs + (1 << (shift - 1)) - 1 + ((abs >> shift) & 1)) >> shift;
        // (Signed compares: SSE2 has no unsigned ones. Lanes where this wraps are the
        // subnormal ones, which the select below discards.)
        let normal = (rounded.wrapping_sub(((127 - bias) as u32) << m) as i32).min(i32::from(max_code)) as u32;
        // Subnormal range: adding 2^(24-bias-m), whose f32 ulp is the smallest fp8 subnormal,
        // makes the FPU round to a multiple of it (to nearest even); the difference of the bit
        // patterns is that multiple, up to 2^m (the smallest normal code, still right).
        let magic = f32::from_bits(((127 + 24 - bias - m as i32) as u32) << 23);
        let subnormal = (f32::from_bits(abs) + magic).to_bits().wrapping_sub(magic.to_bits());
        let min_normal = ((127 + 1 - bias) as u32) << 23;
        let code = if (abs as i32) < min_normal as i32 { subnormal } else { normal };
        if abs as i32 > 0x7f80_0000 {
            NAN_CODE
        } else {
            sign | code as u8
        }
    }

    /// Encodes an f64 the same way, rounding once (no detour through f32); for scalars.
    pub fn encode_f64(self, x: f64) -> u8 {
        if x.is_nan() {
            return NAN_CODE;
        }
        let Params { mantissa_bits: m, bias, max_code, .. } = self.params();
        let bits = x.to_bits();
        let sign = ((bits >> 56) & 0x80) as u8;
        let abs = bits & !(1u64 << 63);
        // The smallest normal fp8 value, 2^(1-bias), as f64 bits.
        let min_normal = ((1023 + 1 - bias) as u64) << 52;
        let magnitude = if abs >= min_normal {
            // Round the f64 exponent:mantissa field to `m` mantissa bits, ties to even; a carry
            // out of the mantissa correctly bumps the exponent. Then re-bias the exponent.
            let shift = 52 - m;
            let odd = (abs >> shift) & 1;
            let rounded = (abs + (1u64 << (shift - 1)) - 1 + odd) >> shift;
            let rebias = ((1023 - bias) as u64) << m;
            (rounded - rebias).min(u64::from(max_code))
        } else {
            // Subnormal range: a count of the smallest subnormal 2^(1-bias-m). Scaling by a power
            // of two is exact, so one round_ties_even is the only rounding. The count may reach
            // 2^m, which is the code of the smallest normal: the encoding stays right.
            let unit_inverse = f64::from_bits(((1023 + bias - 1 + m as i32) as u64) << 52);
            (f64::from_bits(abs) * unit_inverse).round_ties_even() as u64
        };
        sign | magnitude as u8
    }

    /// The largest finite value: 448 (E4M3) or 57344 (E5M2).
    pub fn max(self) -> f32 {
        self.decode(self.params().max_code)
    }

    /// The code of the largest finite value: 0x7E (E4M3) or 0x7B (E5M2).
    pub fn max_code(self) -> u8 {
        self.params().max_code
    }

    /// Whether `code` is a NaN.
    pub fn is_nan(self, code: u8) -> bool {
        match self {
            Format::E4M3 => code & 0x7f == 0x7f,
            Format::E5M2 => code & 0x7f > 0x7c,
        }
    }

    #[inline(always)]
    const fn params(self) -> Params {
        match self {
            Format::E4M3 => Params { mantissa_bits: 3, bias: 7, max_code: 0x7e },
            Format::E5M2 => Params { mantissa_bits: 2, bias: 15, max_code: 0x7b },
        }
    }
}

struct Params {
    mantissa_bits: u32,
    bias: i32,
    max_code: u8,
}

#[cfg(test)]
mod tests;
