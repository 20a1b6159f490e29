//! The corpus comparison rule, so tests can check results without Python.
//!
//! An output passes iff, elementwise, `|actual - expected| <= atol + rtol * |expected|`;
//! NaN matches NaN (any payload or sign), an infinity matches only the same infinity, and
//! pred and integer outputs must be exactly equal (tolerances are ignored for them).
//! Complex outputs (`c64`, `c128`) use the same rule on complex magnitudes (numpy's
//! `abs`): a value with a NaN part matches any such value, one with an infinite part only
//! the same value. This
//! is `compare.py` of `shared/xla-oracle`; tolerances come per output from the case's
//! `NAME.json` ([`Tolerances::from_case_json`]).

use std::fmt;
use std::path::{Path, PathBuf};

use hlo_ir::{ElemType, Shape, Tensor};

/// Per-output tolerance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Tolerance {
    pub const EXACT: Tolerance = Tolerance { rtol: 0.0, atol: 0.0 };

    /// `compare.py`'s defaults without `--meta`: f32/f64 1e-5, bf16 2e-2, f16 1e-3; exact otherwise.
    pub fn default_for(elem: ElemType) -> Tolerance {
        let t = match elem {
            ElemType::BF16 => 2e-2,
            ElemType::F16 => 1e-3,
            ElemType::F32 | ElemType::F64 | ElemType::C64 | ElemType::C128 => 1e-5,
            _ => 0.0,
        };
        Tolerance { rtol: t, atol: t }
    }
}

/// A value in a mismatch report: floats as f64 (exact for every float type compared here),
/// pred and integers exactly.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    Float(f64),
    Int(i128),
    /// `(re, im)` of a complex value.
    Complex(f64, f64),
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Float(x) => write!(f, "{x}"),
            Value::Int(x) => write!(f, "{x}"),
            Value::Complex(re, im) => write!(
                f,
                "({re}{}{}j)",
                if *im < 0.0 || (*im == 0.0 && im.is_sign_negative()) { "-" } else { "+" },
                im.abs()
            ),
        }
    }
}

/// Why `actual` does not match `expected`.
#[derive(Debug, Clone, PartialEq)]
pub enum Mismatch {
    /// Different element types or dims: nothing is compared.
    Shape { actual: Shape, expected: Shape },
    /// `bad` of `total` elements are out of tolerance. The worst one is at `index` (row-major
    /// position `flat`): the largest `|diff| / allowed`, where a NaN or infinity mismatch or
    /// any difference under a zero allowance counts as infinitely bad; first on ties.
    Values {
        bad: usize,
        total: usize,
        index: Vec<u64>,
        flat: usize,
        actual: Value,
        expected: Value,
        allowed: f64,
    },
    /// An element type the rule has no arithmetic for.
    Unsupported(ElemType),
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Shape { actual, expected } => {
                write!(f, "shape differs: actual {actual}, expected {expected}")
            }
            Mismatch::Values { bad, total, index, actual, expected, allowed, .. } => {
                write!(f, "{bad} of {total} elements differ; worst at [")?;
                for (i, d) in index.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{d}")?;
                }
                write!(f, "]: actual {actual}, expected {expected}")?;
                match (actual, expected) {
                    (Value::Float(a), Value::Float(e)) if a.is_finite() && e.is_finite() => {
                        write!(f, " (|diff| {} > allowed {allowed})", (a - e).abs())
                    }
                    (Value::Complex(ar, ai), Value::Complex(er, ei))
                        if [ar, ai, er, ei].iter().all(|x| x.is_finite()) =>
                    {
                        write!(f, " (|diff| {} > allowed {allowed})", (ar - er).hypot(ai - ei))
                    }
                    _ => Ok(()),
                }
            }
            Mismatch::Unsupported(elem) => write!(f, "{elem} outputs cannot be compared"),
        }
    }
}

impl std::error::Error for Mismatch {}

/// Compares one output with the corpus rule (module doc). `tol` applies to float types only.
pub fn compare(actual: &Tensor, expected: &Tensor, tol: Tolerance) -> Result<(), Mismatch> {
    if actual.elem() != expected.elem() || actual.dims() != expected.dims() {
        return Err(Mismatch::Shape { actual: actual.shape(), expected: expected.shape() });
    }
    let total = expected.element_count();
    // (flat index, badness, actual, expected, allowed) of the worst element so far.
    let mut worst: Option<(usize, f64, Value, Value, f64)> = None;
    let mut bad = 0usize;
    let mut note = |i: usize, badness: f64, a: Value, e: Value, allowed: f64| {
        bad += 1;
        if worst.as_ref().is_none_or(|w| badness > w.1) {
            worst = Some((i, badness, a, e, allowed));
        }
    };
    if expected.elem().is_complex() {
        let (a, e) = (complex_values(actual)?, complex_values(expected)?);
        for (i, (&(xr, xi), &(yr, yi))) in a.iter().zip(&e).enumerate() {
            let allowed = tol.atol + tol.rtol * yr.hypot(yi);
            let nan = |r: f64, i: f64| r.is_nan() || i.is_nan();
            let inf = |r: f64, i: f64| r.is_infinite() || i.is_infinite();
            let badness = if nan(xr, xi) || nan(yr, yi) {
                if nan(xr, xi) && nan(yr, yi) { continue } else { f64::INFINITY }
            } else if inf(xr, xi) || inf(yr, yi) {
                if (xr, xi) == (yr, yi) { continue } else { f64::INFINITY }
            } else {
                let diff = (xr - yr).hypot(xi - yi);
                if diff <= allowed {
                    continue;
                }
                if allowed > 0.0 { diff / allowed } else { f64::INFINITY }
            };
            note(i, badness, Value::Complex(xr, xi), Value::Complex(yr, yi), allowed);
        }
    } else if expected.is_exact() {
        let (a, e) = (int_values(actual)?, int_values(expected)?);
        for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
            if x != y {
                note(i, x.abs_diff(y) as f64, Value::Int(x), Value::Int(y), 0.0);
            }
        }
    } else {
        let (a, e) = (float_values(actual)?, float_values(expected)?);
        for (i, (&x, &y)) in a.iter().zip(&e).enumerate() {
            let allowed = tol.atol + tol.rtol * y.abs();
            let badness = if x.is_nan() || y.is_nan() {
                if x.is_nan() && y.is_nan() { continue } else { f64::INFINITY }
            } else if x.is_infinite() || y.is_infinite() {
                if x == y { continue } else { f64::INFINITY }
            } else {
                let diff = (x - y).abs();
                if diff <= allowed {
                    continue;
                }
                if allowed > 0.0 { diff / allowed } else { f64::INFINITY }
            };
            note(i, badness, Value::Float(x), Value::Float(y), allowed);
        }
    }
    match worst {
        None => Ok(()),
        Some((flat, _, actual, expected_value, allowed)) => Err(Mismatch::Values {
            bad,
            total,
            index: unravel(flat, expected.dims()),
            flat,
            actual,
            expected: expected_value,
            allowed,
        }),
    }
}

fn int_values(t: &Tensor) -> Result<Vec<i128>, Mismatch> {
    t.to_i128_vec().map_err(|_| Mismatch::Unsupported(t.elem()))
}

/// `(re, im)` pairs of a c64 or c128 tensor.
fn complex_values(t: &Tensor) -> Result<Vec<(f64, f64)>, Mismatch> {
    let b = t.bytes();
    Ok(match t.elem() {
        ElemType::C64 => b
            .chunks_exact(8)
            .map(|c| {
                (
                    f32::from_le_bytes([c[0], c[1], c[2], c[3]]).into(),
                    f32::from_le_bytes([c[4], c[5], c[6], c[7]]).into(),
                )
            })
            .collect(),
        ElemType::C128 => b
            .chunks_exact(16)
            .map(|c| {
                (
                    f64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                    f64::from_le_bytes(c[8..].try_into().expect("8 bytes")),
                )
            })
            .collect(),
        e => return Err(Mismatch::Unsupported(e)),
    })
}

fn float_values(t: &Tensor) -> Result<Vec<f64>, Mismatch> {
    t.to_f64_vec().map_err(|_| Mismatch::Unsupported(t.elem()))
}

/// Row-major flat index → multi-index.
fn unravel(mut flat: usize, dims: &[u64]) -> Vec<u64> {
    let mut index = vec![0u64; dims.len()];
    for (slot, &d) in index.iter_mut().zip(dims).rev() {
        if d > 0 {
            *slot = flat as u64 % d;
            flat = (flat as u64 / d) as usize;
        }
    }
    index
}

/// The per-output tolerances of a corpus case, in output order (`o0`, `o1`, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Tolerances {
    pub outputs: Vec<(String, Tolerance)>,
}

/// A case JSON file that cannot be read or lacks the tolerances; `Display` names the file.
#[derive(Debug)]
pub struct CaseJsonError {
    pub path: PathBuf,
    pub message: String,
}

impl fmt::Display for CaseJsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for CaseJsonError {}

impl Tolerances {
    /// Reads `outputs[i].tolerance {rtol, atol}` from a corpus `NAME.json`.
    pub fn from_case_json(path: impl AsRef<Path>) -> Result<Tolerances, CaseJsonError> {
        let path = path.as_ref();
        let fail = |message: String| CaseJsonError { path: path.to_path_buf(), message };
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| fail(format!("invalid JSON: {e}")))?;
        let outputs = json
            .get("outputs")
            .and_then(|o| o.as_array())
            .ok_or_else(|| fail("no `outputs` list".into()))?;
        let mut result = Vec::with_capacity(outputs.len());
        for (i, out) in outputs.iter().enumerate() {
            let name = out
                .get("name")
                .and_then(|n| n.as_str())
                .map_or_else(|| format!("o{i}"), str::to_string);
            let field = |key: &str| {
                let v = out.get("tolerance").and_then(|t| t.get(key)).and_then(|v| v.as_f64());
                match v {
                    Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
                    Some(x) => Err(fail(format!(
                        "output {name}: tolerance {key} {x} is not a finite non-negative number"
                    ))),
                    None => Err(fail(format!("output {name}: no tolerance.{key}"))),
                }
            };
            let tol = Tolerance { rtol: field("rtol")?, atol: field("atol")? };
            result.push((name, tol));
        }
        Ok(Tolerances { outputs: result })
    }

    /// The tolerance of output `i`.
    pub fn get(&self, i: usize) -> Option<Tolerance> {
        self.outputs.get(i).map(|(_, t)| *t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOL: Tolerance = Tolerance { rtol: 1e-3, atol: 1e-6 };

    fn f32s(v: &[f32]) -> Tensor {
        Tensor::from_f32(&[v.len() as u64], v).unwrap()
    }

    #[test]
    fn float_rule() {
        let e = f32s(&[1.0, -2.0, 0.0, f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        assert_eq!(compare(&e, &e, Tolerance::EXACT), Ok(()));
        // Each inside atol + rtol*|e|; -NaN matches NaN.
        let ok = f32s(&[1.0009, -2.0019, 1e-6, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY]);
        assert_eq!(compare(&ok, &e, TOL), Ok(()));
        let bad = f32s(&[1.0011, -2.0, 0.0, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY]);
        let Err(Mismatch::Values { bad: n, total, index, actual, expected, .. }) =
            compare(&bad, &e, TOL)
        else {
            panic!()
        };
        assert_eq!((n, total), (3, 6));
        // NaN vs 0 and -inf vs +inf are both infinitely bad; the first one is reported.
        assert_eq!(index, vec![3]);
        assert_eq!(actual, Value::Float(0.0));
        assert!(matches!(expected, Value::Float(x) if x.is_nan()));
    }

    #[test]
    fn worst_is_relative_to_allowance() {
        let e = f32s(&[1000.0, 1.0]);
        let a = f32s(&[1002.0, 1.01]); // 2/1.000001 vs 0.01/0.001001
        let Err(m) = compare(&a, &e, TOL) else { panic!() };
        let Mismatch::Values { index, bad, .. } = &m else { panic!() };
        assert_eq!((index.as_slice(), *bad), (&[1u64][..], 2));
        assert!(
            m.to_string().starts_with("2 of 2 elements differ; worst at [1]: actual 1.00999999"),
            "{m}"
        );
    }

    #[test]
    fn integers_exact_and_index_unravelled() {
        let e = Tensor::from_i32(&[2, 3], &[1, 2, 3, 4, 5, 6]).unwrap();
        let a = Tensor::from_i32(&[2, 3], &[1, 2, 3, 4, 5, 7]).unwrap();
        let loose = Tolerance { rtol: 1.0, atol: 10.0 };
        let Err(m) = compare(&a, &e, loose) else { panic!() };
        assert_eq!(m.to_string(), "1 of 6 elements differ; worst at [1,2]: actual 7, expected 6");
        let u = Tensor::from_u64(&[1], &[u64::MAX]).unwrap();
        let u2 = Tensor::from_u64(&[1], &[u64::MAX - 1]).unwrap();
        assert!(compare(&u, &u2, loose).is_err(), "exact beyond 2^53");
        let p = Tensor::from_pred(&[2], &[true, false]).unwrap();
        assert_eq!(compare(&p, &p, Tolerance::EXACT), Ok(()));
        let q = Tensor::from_pred(&[2], &[true, true]).unwrap();
        assert!(compare(&q, &p, loose).is_err());
    }

    #[test]
    fn shapes_and_types_must_match() {
        let a = Tensor::from_f32(&[2, 3], &[0.0; 6]).unwrap();
        let b = Tensor::from_f32(&[3, 2], &[0.0; 6]).unwrap();
        assert_eq!(
            compare(&a, &b, TOL).unwrap_err().to_string(),
            "shape differs: actual f32[2,3], expected f32[3,2]"
        );
        let c = Tensor::from_f64(&[2, 3], &[0.0; 6]).unwrap();
        assert!(matches!(compare(&a, &c, TOL), Err(Mismatch::Shape { .. })));
        let empty = Tensor::zeros(ElemType::F32, &[0, 4]).unwrap();
        assert_eq!(compare(&empty, &empty, TOL), Ok(()));
    }

    #[test]
    fn complex_compared_by_magnitude() {
        let c64 = |v: &[(f32, f32)]| {
            Tensor::from_bytes(
                ElemType::C64,
                vec![v.len() as u64],
                v.iter().flat_map(|&(r, i)| [r.to_le_bytes(), i.to_le_bytes()]).flatten().collect(),
            )
            .unwrap()
        };
        let tol = Tolerance::default_for(ElemType::C64);
        let e = c64(&[(3.0, 4.0), (f32::NAN, 0.0), (f32::INFINITY, 1.0)]);
        // Allowed: 1e-5 + 1e-5·|3+4j| = 6e-5 on the magnitude of the difference.
        assert_eq!(
            compare(&c64(&[(3.0 + 3e-5, 4.0), (0.0, f32::NAN), (f32::INFINITY, 1.0)]), &e, tol),
            Ok(())
        );
        let Err(m) =
            compare(&c64(&[(3.0, 4.0 + 1e-4), (f32::NAN, 0.0), (f32::INFINITY, 1.0)]), &e, tol)
        else {
            panic!()
        };
        assert!(
            m.to_string().starts_with("1 of 3 elements differ; worst at [0]: actual (3+4.0001"),
            "{m}"
        );
        assert!(
            compare(&c64(&[(3.0, 4.0), (f32::NAN, 0.0), (f32::INFINITY, 2.0)]), &e, tol).is_err()
        );
        let z = Tensor::zeros(ElemType::C128, &[1]).unwrap();
        assert!(matches!(compare(&z, &e, tol), Err(Mismatch::Shape { .. })));
    }

    #[test]
    fn bf16_compared_as_its_exact_values() {
        // 0x3f80 = 1.0, 0x3f81 = 1.0078125: one bf16 ulp, inside 2e-2, outside 1e-3.
        let one = Tensor::from_u16(&[1], &[0x3f80]).unwrap().bitcast(ElemType::BF16).unwrap();
        let next = Tensor::from_u16(&[1], &[0x3f81]).unwrap().bitcast(ElemType::BF16).unwrap();
        assert_eq!(compare(&next, &one, Tolerance::default_for(ElemType::BF16)), Ok(()));
        assert!(compare(&next, &one, TOL).is_err());
    }

    #[test]
    fn unravel_row_major() {
        assert_eq!(unravel(0, &[]), Vec::<u64>::new());
        assert_eq!(unravel(23, &[2, 3, 4]), vec![1, 2, 3]);
        assert_eq!(unravel(5, &[2, 3, 4]), vec![0, 1, 1]);
    }
}
