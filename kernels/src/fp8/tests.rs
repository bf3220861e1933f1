//! fp8 conversions against a reference written from the format definitions.

use super::*;
use proptest::prelude::*;

const FORMATS: [Format; 2] = [Format::E4M3, Format::E5M2];

/// The value of a code from the definition: (-1)^s * 2^(e-bias) * (1 + m/2^M), subnormals
/// 2^(1-bias) * m/2^M; computed in f64 with powi, independently of the bit-building decoder.
fn defined_value(format: Format, code: u8) -> f64 {
    let (e_bits, m_bits, bias) = match format {
        Format::E4M3 => (4, 3, 7),
        Format::E5M2 => (5, 2, 15),
    };
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((code & 0x7f) >> m_bits);
    let m = f64::from(code & ((1 << m_bits) - 1));
    let top = (1 << e_bits) - 1;
    match format {
        Format::E4M3 if e == top && m == 7.0 => return f64::NAN,
        Format::E5M2 if e == top => return if m == 0.0 { sign * f64::INFINITY } else { f64::NAN },
        _ => {}
    }
    let scale = f64::from(1u32 << m_bits);
    if e == 0 {
        sign * 2f64.powi(1 - bias) * (m / scale)
    } else {
        sign * 2f64.powi(e - bias) * (1.0 + m / scale)
    }
}

/// The correctly rounded, saturating code by exhaustive search: the finite code nearest to x,
/// ties to the code with an even mantissa; beyond max, max.
fn nearest_code(format: Format, x: f64) -> u8 {
    nearest_in(&finite_values(format), x)
}

/// The values of the positive finite codes 0..=max_code, in code order.
fn finite_values(format: Format) -> Vec<f64> {
    (0..=format.max_code()).map(|code| defined_value(format, code)).collect()
}

fn nearest_in(values: &[f64], x: f64) -> u8 {
    if x.is_nan() {
        return NAN_CODE;
    }
    let sign = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    let max_code = values.len() - 1;
    if a >= values[max_code] {
        return sign | max_code as u8; // saturate (and keep huge distances from tying)
    }
    let mut best = 0usize;
    for (code, v) in values.iter().enumerate() {
        let (d, best_d) = ((v - a).abs(), (values[best] - a).abs());
        if d < best_d || (d == best_d && code % 2 == 0) {
            best = code;
        }
    }
    sign | best as u8
}

#[test]
fn known_values() {
    assert_eq!(Format::E4M3.max(), 448.0);
    assert_eq!(Format::E5M2.max(), 57344.0);
    assert_eq!(Format::E4M3.decode(0x38), 1.0);
    assert_eq!(Format::E5M2.decode(0x3c), 1.0);
    assert_eq!(Format::E4M3.decode(0x01), 2f32.powi(-9));
    assert_eq!(Format::E5M2.decode(0x01), 2f32.powi(-16));
    assert_eq!(Format::E4M3.decode(0x08), 2f32.powi(-6)); // smallest normal
    assert!(Format::E4M3.decode(0x7f).is_nan() && Format::E4M3.decode(0xff).is_nan());
    assert_eq!(Format::E5M2.decode(0x7c), f32::INFINITY);
    assert_eq!(Format::E5M2.decode(0xfc), f32::NEG_INFINITY);
    assert!(Format::E5M2.decode(0x7d).is_nan() && Format::E5M2.decode(0xfe).is_nan());
}

#[test]
fn decode_table_matches_the_definition_for_all_256_codes() {
    for format in FORMATS {
        for code in 0..=255u8 {
            let (got, want) = (format.decode(code), defined_value(format, code));
            assert_eq!(got.is_nan(), want.is_nan(), "{format:?} {code:#04x}");
            assert_eq!(format.is_nan(code), want.is_nan(), "{format:?} {code:#04x}");
            if !want.is_nan() {
                assert_eq!(f64::from(got), want, "{format:?} {code:#04x}");
                assert_eq!(got.is_sign_negative(), code & 0x80 != 0, "{format:?} {code:#04x} sign");
            }
        }
    }
}

#[test]
fn every_code_round_trips() {
    for format in FORMATS {
        for code in 0..=255u8 {
            let v = format.decode(code);
            let back = format.encode(v);
            if v.is_nan() {
                assert_eq!(back, NAN_CODE, "{format:?} {code:#04x}");
            } else if v.is_infinite() {
                // Saturating: ±inf becomes ±max.
                assert_eq!(back, (code & 0x80) | format.max_code(), "{format:?} {code:#04x}");
            } else {
                assert_eq!(back, code, "{format:?} {code:#04x} ({v})");
            }
            assert_eq!(format.encode_f64(f64::from(v)), back);
        }
    }
}

#[test]
fn every_midpoint_rounds_to_even_and_neighbours_round_to_nearest() {
    for format in FORMATS {
        for code in 0..format.max_code() {
            let (lo, hi) = (f64::from(format.decode(code)), f64::from(format.decode(code + 1)));
            let mid = (lo + hi) / 2.0;
            let even = if code % 2 == 0 { code } else { code + 1 };
            assert_eq!(format.encode_f64(mid), even, "{format:?} midpoint of {code:#04x}");
            assert_eq!(format.encode_f64(-mid), 0x80 | even, "{format:?} -midpoint of {code:#04x}");
            let nudge = (hi - lo) / 1024.0;
            assert_eq!(format.encode_f64(mid - nudge), code, "{format:?} below midpoint of {code:#04x}");
            assert_eq!(format.encode_f64(mid + nudge), code + 1, "{format:?} above midpoint of {code:#04x}");
            // f32 inputs too, one ulp of f32 either side of the midpoint.
            let mid32 = mid as f32; // exact: fp8 midpoints need at most 5 significant bits
            assert_eq!(format.encode(f32::from_bits(mid32.to_bits() - 1)), code);
            assert_eq!(format.encode(f32::from_bits(mid32.to_bits() + 1)), code + 1);
        }
    }
}

#[test]
fn saturates_to_the_largest_finite_value() {
    for format in FORMATS {
        let max = format.max_code();
        for x in [f64::from(format.max()) * 1.0001, 1e6, 1e300, f64::INFINITY, f64::MAX] {
            assert_eq!(format.encode_f64(x), max, "{format:?} {x}");
            assert_eq!(format.encode_f64(-x), 0x80 | max, "{format:?} -{x}");
        }
    }
    // Between 448 and the next E4M3 step (which would be 480, the NaN code), all saturate.
    assert_eq!(Format::E4M3.encode(464.0), 0x7e);
    assert_eq!(Format::E4M3.encode(479.0), 0x7e);
    assert_eq!(Format::E5M2.encode(61440.0), 0x7b);
    assert_eq!(Format::E5M2.encode(f32::INFINITY), 0x7b);
    assert_eq!(Format::E5M2.encode(f32::NEG_INFINITY), 0xfb);
}

#[test]
fn tiny_values_and_zero_keep_their_sign() {
    for format in FORMATS {
        assert_eq!(format.encode(0.0), 0x00);
        assert_eq!(format.encode(-0.0), 0x80);
        assert_eq!(format.encode(1e-30), 0x00);
        assert_eq!(format.encode(-1e-30), 0x80);
        assert_eq!(format.encode(f32::from_bits(1)), 0x00); // an f32 subnormal
        assert_eq!(format.encode(f32::NAN), NAN_CODE);
        assert_eq!(format.encode(-f32::NAN), NAN_CODE);
    }
    // Half the smallest subnormal is a tie between 0 and 1 units: to even, 0.
    assert_eq!(Format::E4M3.encode(2f32.powi(-10)), 0x00);
    assert_eq!(Format::E4M3.encode(1.5 * 2f32.powi(-9)), 0x02);
}

#[test]
fn encode_matches_exhaustive_search_on_a_sweep_of_f32() {
    // Every f32 whose low 16 bits are zero or 0x8000 or 0x7fff (131072*3 values), covering all
    // exponents and the neighbourhoods of every fp8 value and midpoint.
    for format in FORMATS {
        let values = finite_values(format);
        for high in 0..=u16::MAX {
            for low in [0u32, 0x7fff, 0x8000] {
                let x = f32::from_bits(u32::from(high) << 16 | low);
                let want = nearest_in(&values, f64::from(x));
                let got = format.encode(x);
                if x.is_nan() {
                    assert_eq!(got, NAN_CODE);
                } else {
                    assert_eq!(got, want, "{format:?} {x:e} ({:#010x})", x.to_bits());
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn encode_matches_exhaustive_search(bits in any::<u32>()) {
        let x = f32::from_bits(bits);
        for format in FORMATS {
            prop_assert_eq!(format.encode(x), nearest_code(format, f64::from(x)), "{:?} {:e}", format, x);
        }
    }

    #[test]
    fn encode_f64_matches_exhaustive_search(x in -1e5f64..1e5) {
        for format in FORMATS {
            prop_assert_eq!(format.encode_f64(x), nearest_code(format, x), "{:?} {:e}", format, x);
        }
    }
}
