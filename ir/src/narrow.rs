//! The narrow float types (`f8e4m3fn`, `f8e5m2`, `f8e4m3`, `f8e4m3fnuz`, `f8e5m2fnuz`,
//! `f8e4m3b11fnuz`, `f8e3m4`, `f8e8m0fnu`, `f4e2m1fn`): bit patterns ↔ values, with XLA's
//! rounding. Every engine computes these types in f32 and rounds with the functions here.
//!
//! Formats (ml_dtypes'/XLA's definitions; `bias`, mantissa bits, specials):
//!
//! | type            | bias | m | inf | NaN                 | max    | overflow |
//! |-----------------|------|---|-----|---------------------|--------|----------|
//! | f8e5m2          | 15   | 2 | yes | exp all ones, m≠0   | 57344  | ±inf     |
//! | f8e4m3          | 7    | 3 | yes | exp all ones, m≠0   | 240    | ±inf     |
//! | f8e3m4          | 3    | 4 | yes | exp all ones, m≠0   | 15.5   | ±inf     |
//! | f8e4m3fn        | 7    | 3 | no  | `S.1111.111`        | 448    | NaN      |
//! | f8e4m3fnuz      | 8    | 3 | no  | `0x80` (no -0)      | 240    | NaN      |
//! | f8e5m2fnuz      | 16   | 2 | no  | `0x80` (no -0)      | 57344  | NaN      |
//! | f8e4m3b11fnuz   | 11   | 3 | no  | `0x80` (no -0)      | 30     | NaN      |
//! | f4e2m1fn        | 1    | 1 | no  | none                | 6      | ±6       |
//! | f8e8m0fnu       | 127  | 0 | no  | `0xff` (no sign, no zero) | 2^127 | NaN |
//!
//! Conversions to these types round to nearest even, once, from the exact source value
//! ([`from_f32`], [`from_f64`]); subnormals of the narrow type are kept. Infinity becomes
//! NaN on the types without infinity (±6 on f4e2m1fn, which saturates); NaN becomes NaN,
//! and on f4e2m1fn, which has none, -0 (what XLA's CPU code gives for any NaN).
//! f8e8m0fnu follows ml_dtypes bit for bit, as XLA does: zero, negatives, NaN and infinity
//! are NaN; a normal f32 rounds its mantissa half up (`(bits + 2^22) >> 23`); an f32
//! subnormal gives 2^-127 up to 2^-127 itself and 2^-126 above.
//!
//! Arithmetic ([`round_op`]): XLA's CPU backend runs every operation on the fp8/fp4 types
//! in f16 (FloatNormalization; f8e8m0fnu in f32) and converts the result back, so a result
//! is rounded twice, f32 → f16 → narrow type. Checked against XLA with the oracle
//! (`tools/interp-cases/fp8_*.hlo`): add/subtract/multiply/divide/exp/sqrt/tanh on random
//! bit patterns agree with f16-then-narrow rounding and not with one rounding from f32.

use half::f16;

use crate::ElemType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Special {
    /// IEEE-like: infinities and NaNs in the all-ones exponent.
    Ieee,
    /// `fn`: no infinity; NaN is the all-ones pattern (either sign).
    Fn,
    /// `fnuz`: no infinity, no negative zero; NaN is `0x80`.
    Fnuz,
    /// f4e2m1fn: neither infinity nor NaN; overflow saturates.
    None,
}

#[derive(Debug, Clone, Copy)]
struct Format {
    /// Total bits (8, or 4 for f4e2m1fn).
    bits: u32,
    mbits: u32,
    ebits: u32,
    bias: i32,
    special: Special,
}

fn format(e: ElemType) -> Option<Format> {
    use ElemType::*;
    let f = |bits, ebits, mbits, bias, special| Some(Format { bits, mbits, ebits, bias, special });
    match e {
        F8E5M2 => f(8, 5, 2, 15, Special::Ieee),
        F8E4M3 => f(8, 4, 3, 7, Special::Ieee),
        F8E3M4 => f(8, 3, 4, 3, Special::Ieee),
        F8E4M3FN => f(8, 4, 3, 7, Special::Fn),
        F8E4M3FNUZ => f(8, 4, 3, 8, Special::Fnuz),
        F8E5M2FNUZ => f(8, 5, 2, 16, Special::Fnuz),
        F8E4M3B11FNUZ => f(8, 4, 3, 11, Special::Fnuz),
        F4E2M1FN => f(4, 2, 1, 1, Special::None),
        _ => None,
    }
}

/// Whether `e` is one of the narrow float types of this module (fp8 and f4e2m1fn).
pub fn is_narrow_float(e: ElemType) -> bool {
    e == ElemType::F8E8M0FNU || format(e).is_some()
}

/// Every narrow float type, in a fixed order (`kind` indices of the JIT's host calls).
pub const TYPES: [ElemType; 9] = [
    ElemType::F8E5M2,
    ElemType::F8E4M3,
    ElemType::F8E3M4,
    ElemType::F8E4M3FN,
    ElemType::F8E4M3FNUZ,
    ElemType::F8E5M2FNUZ,
    ElemType::F8E4M3B11FNUZ,
    ElemType::F4E2M1FN,
    ElemType::F8E8M0FNU,
];

/// Position of `e` in [`TYPES`].
pub fn kind(e: ElemType) -> Option<usize> {
    TYPES.iter().position(|&t| t == e)
}

impl Format {
    fn sign_bit(self) -> u8 {
        1 << (self.bits - 1)
    }
    fn nan(self, negative: bool) -> u8 {
        let s = if negative { self.sign_bit() } else { 0 };
        match self.special {
            Special::Ieee => {
                s | (((1u8 << self.ebits) - 1) << self.mbits) | (1 << (self.mbits - 1))
            }
            Special::Fn => s | (self.sign_bit() - 1),
            Special::Fnuz => 0x80,
            Special::None => self.sign_bit(),
        }
    }
    /// The largest finite magnitude's bits.
    fn max_mag(self) -> u32 {
        let all = (1u32 << (self.bits - 1)) - 1;
        match self.special {
            Special::Ieee => all - (1 << self.mbits),
            Special::Fn => all - 1,
            Special::Fnuz | Special::None => all,
        }
    }
    fn encode(self, x: f64) -> u8 {
        let neg = x.is_sign_negative();
        if x.is_nan() {
            return self.nan(neg);
        }
        let s = if neg { self.sign_bit() } else { 0 };
        let overflow = || match self.special {
            Special::Ieee => s | (((1u8 << self.ebits) - 1) << self.mbits),
            Special::Fn | Special::Fnuz => self.nan(neg),
            Special::None => s | self.max_mag() as u8,
        };
        let a = x.abs();
        if a.is_infinite() {
            return overflow();
        }
        let emin = 1 - self.bias;
        let m = self.mbits as i32;
        let mag = if a == 0.0 {
            0
        } else {
            let e = ((a.to_bits() >> 52) as i32 - 1023).max(emin);
            // Exact: a power-of-two scaling into [0, 2^(m+1)).
            let scaled = a * 2f64.powi(m - e);
            let r = scaled.round_ties_even() as u32;
            let (mut e, mut r) = (e, r);
            if r == 1 << (m + 1) {
                r >>= 1;
                e += 1;
            }
            if r < 1 << m {
                r
            } else {
                let field = e + self.bias;
                if field >= 1 << self.ebits {
                    return overflow();
                }
                ((field as u32) << m) | (r - (1 << m))
            }
        };
        if mag > self.max_mag() {
            return overflow();
        }
        if mag == 0 && self.special == Special::Fnuz {
            return 0;
        }
        s | mag as u8
    }
    fn decode(self, bits: u8) -> f32 {
        let bits = bits & (((1u16 << self.bits) - 1) as u8);
        let neg = bits & self.sign_bit() != 0;
        let mag = u32::from(bits & (self.sign_bit() - 1));
        let field = (mag >> self.mbits) as i32;
        let mant = mag & ((1 << self.mbits) - 1);
        let all_ones = (1 << self.ebits) - 1;
        match self.special {
            Special::Ieee if field == all_ones => {
                let v = if mant == 0 { f32::INFINITY } else { f32::NAN };
                return if neg { -v } else { v };
            }
            Special::Fn if mag == (1 << (self.bits - 1)) - 1 => {
                return if neg { -f32::NAN } else { f32::NAN };
            }
            Special::Fnuz if bits == 0x80 => return f32::NAN,
            _ => {}
        }
        let m = self.mbits as i32;
        let v = if field == 0 {
            f64::from(mant) * 2f64.powi(1 - self.bias - m)
        } else {
            f64::from((1 << m) + mant) * 2f64.powi(field - self.bias - m)
        };
        let v = v as f32;
        if neg { -v } else { v }
    }
}

/// f8e8m0fnu from an f32 (ml_dtypes' rule; see the module doc).
fn e8m0_from_f32(x: f32) -> u8 {
    let u = x.to_bits();
    if x.is_nan() || x.is_infinite() || u & 0x8000_0000 != 0 || u == 0 {
        return 0xff;
    }
    let field = if u <= 0x0040_0000 {
        0
    } else if u < 0x0080_0000 {
        1
    } else {
        (u + 0x0040_0000) >> 23
    };
    if field >= 0xff { 0xff } else { field as u8 }
}

fn e8m0_to_f32(bits: u8) -> f32 {
    match bits {
        0xff => f32::NAN,
        0 => f32::from_bits(0x0040_0000),
        b => f32::from_bits(u32::from(b) << 23),
    }
}

/// The bits of `x` rounded to narrow float type `e` (one rounding; `None` for other types).
/// f4e2m1fn uses the low four bits.
pub fn from_f32(e: ElemType, x: f32) -> Option<u8> {
    if e == ElemType::F8E8M0FNU {
        return Some(e8m0_from_f32(x));
    }
    Some(format(e)?.encode(f64::from(x)))
}

/// The bits of `x` rounded once to `e` (f8e8m0fnu goes through f32).
pub fn from_f64(e: ElemType, x: f64) -> Option<u8> {
    if e == ElemType::F8E8M0FNU {
        return Some(e8m0_from_f32(x as f32));
    }
    Some(format(e)?.encode(x))
}

/// The value of bit pattern `bits` of `e`, exactly, as f32 (`None` for other types).
pub fn to_f32(e: ElemType, bits: u8) -> Option<f32> {
    if e == ElemType::F8E8M0FNU {
        return Some(e8m0_to_f32(bits));
    }
    Some(format(e)?.decode(bits))
}

/// `x` converted to `e` and back (XLA's `convert` to a narrow float, as an f32 value).
pub fn convert_f32(e: ElemType, x: f32) -> f32 {
    from_f32(e, x).and_then(|b| to_f32(e, b)).unwrap_or(x)
}

/// `x` (an f32 result computed from values of type `e`) rounded as XLA rounds the result
/// of an operation on `e`: to f16, then to `e` (f8e8m0fnu: from f32 directly).
pub fn round_op(e: ElemType, x: f32) -> f32 {
    if e == ElemType::F8E8M0FNU {
        return convert_f32(e, x);
    }
    convert_f32(e, f16::from_f32(x).to_f32())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ElemType::*;

    fn bits(e: ElemType, xs: &[f32]) -> Vec<u8> {
        xs.iter().map(|&x| from_f32(e, x).unwrap()).collect()
    }

    // Expected bits from ml_dtypes 0.6.0 (`np.array(xs, np.float32).astype(t).view(np.uint8)`),
    // which XLA's CPU conversions match (checked with the oracle on ~139k values per type).
    #[test]
    fn rounding_tables_match_ml_dtypes() {
        let z = [
            448.0,
            464.0,
            465.0,
            480.0,
            1e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -0.0,
            2f32.powi(-10),
            2f32.powi(-9) * 1.5,
            2f32.powi(-10) * 1.01,
        ];
        assert_eq!(
            bits(F8E4M3FN, &z),
            [0x7e, 0x7e, 0x7f, 0x7f, 0x7f, 0x7f, 0xff, 0x80, 0x0, 0x2, 0x1]
        );
        assert_eq!(
            bits(F8E4M3FNUZ, &z),
            [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x0, 0x1, 0x3, 0x1]
        );
        assert_eq!(
            bits(F8E4M3B11FNUZ, &z),
            [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x0, 0x8, 0x14, 0x8]
        );
        assert_eq!(
            bits(F8E5M2, &z),
            [0x5f, 0x5f, 0x5f, 0x60, 0x7c, 0x7c, 0xfc, 0x80, 0x14, 0x1a, 0x14]
        );
        assert_eq!(
            bits(F8E5M2FNUZ, &z),
            [0x63, 0x63, 0x63, 0x64, 0x80, 0x80, 0x80, 0x0, 0x18, 0x1e, 0x18]
        );
        assert_eq!(
            bits(F8E4M3, &z),
            [0x78, 0x78, 0x78, 0x78, 0x78, 0x78, 0xf8, 0x80, 0x0, 0x2, 0x1]
        );
        assert_eq!(
            bits(F8E3M4, &z),
            [0x70, 0x70, 0x70, 0x70, 0x70, 0x70, 0xf0, 0x80, 0x0, 0x0, 0x0]
        );
        let y = [
            0.0,
            -0.0,
            0.25,
            0.26,
            0.75,
            1.25,
            1.75,
            2.5,
            3.5,
            5.0,
            5.5,
            6.0,
            7.0,
            100.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            -7.0,
        ];
        assert_eq!(
            bits(F4E2M1FN, &y),
            [0x0, 0x8, 0x0, 0x1, 0x2, 0x2, 0x4, 0x4, 0x6, 0x6, 0x7, 0x7, 0x7, 0x7, 0x7, 0xf, 0xf]
        );
        // XLA gives -0 for any NaN (ml_dtypes differs on the sign).
        assert_eq!(bits(F4E2M1FN, &[f32::NAN, -f32::NAN]), [0x8, 0x8]);
        let x = [
            1.5,
            3.0,
            6.0,
            12.0,
            0.75,
            0.0,
            -0.0,
            -1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1e-40,
            2f32.powi(-127),
            f32::from_bits(0x0020_0000),
            f32::from_bits(0x0030_0000),
            3.0 * 2f32.powi(126),
            1.7e38,
            5.9e-39,
        ];
        assert_eq!(
            bits(F8E8M0FNU, &x),
            [
                0x80, 0x81, 0x82, 0x83, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0, 0x0, 0x0,
                0x0, 0xff, 0xfe, 0x1
            ]
        );
    }

    #[test]
    fn every_pattern_round_trips() {
        for e in TYPES {
            let n = if e == F4E2M1FN { 16 } else { 256 };
            for b in 0..n as u16 {
                let b = b as u8;
                let v = to_f32(e, b).unwrap();
                let back = from_f32(e, v).unwrap();
                if v.is_nan() {
                    assert!(to_f32(e, back).unwrap().is_nan(), "{e} {b:#x}");
                } else {
                    assert_eq!(back, b, "{e} {b:#x} = {v}");
                }
            }
        }
        assert_eq!(to_f32(F8E4M3FN, 0x7e), Some(448.0));
        assert_eq!(to_f32(F8E5M2, 0x01), Some(2f32.powi(-16)));
        assert_eq!(to_f32(F8E5M2FNUZ, 0x01), Some(2f32.powi(-17)));
        assert_eq!(to_f32(F8E4M3B11FNUZ, 0x7f), Some(30.0));
        assert_eq!(to_f32(F4E2M1FN, 0xf), Some(-6.0));
        assert_eq!(to_f32(F8E8M0FNU, 0x00), Some(2f32.powi(-127)));
        assert_eq!(to_f32(F8E8M0FNU, 0xfe), Some(2f32.powi(127)));
    }

    #[test]
    fn ties_go_to_even_and_ops_round_through_f16() {
        // 1 + 2^-4 is halfway between e4m3 neighbours 1 and 1.125: even is 1.
        assert_eq!(convert_f32(F8E4M3FN, 1.0625), 1.0);
        assert_eq!(convert_f32(F8E4M3FN, 1.1875), 1.25);
        // Just above the halfway point by less than an f16 ulp: one rounding from f32 goes
        // up, the f16 step first lands on the tie and goes to even (down).
        let x = 1.0625 + 2f32.powi(-20);
        assert_eq!(convert_f32(F8E4M3FN, x), 1.125);
        assert_eq!(round_op(F8E4M3FN, x), 1.0);
    }
}
