//! `fft`: discrete Fourier transforms over the last `len(fft_length)` dimensions (1 to 3),
//! as XLA defines them:
//!
//! - `FFT`: complex → complex, `X[k] = Σ x[j]·e^{−2πi·jk/n}` along each transformed
//!   dimension;
//! - `IFFT`: complex → complex, the inverse (`e^{+2πi·jk/n}`) scaled by `1/N`, `N` the
//!   product of `fft_length`;
//! - `RFFT`: real (`f32`/`f64`) → complex (`c64`/`c128`); the innermost transformed
//!   dimension keeps its `n/2 + 1` non-negative frequencies;
//! - `IRFFT`: complex → real; the innermost dimension holds `n/2 + 1` frequencies of a
//!   Hermitian spectrum (the imaginary parts of the zero frequency and, for even `n`, of
//!   the Nyquist frequency are ignored, as pocketfft does) and the result has
//!   `fft_length` elements there; scaled by `1/N`.
//!
//! The transformed dimensions of the operand must equal `fft_length` (`n/2 + 1` for the
//! innermost one of `IRFFT`). Any length works: rustfft plans mixed-radix, Rader and
//! Bluestein transforms in O(n log n). Every transform runs in `f64` whatever the element
//! type, so a `c64` result is the exact transform rounded once to `f32` parts; XLA's CPU
//! backend (DUCC's pocketfft) computes `c64` in `f32`, so the two differ by its own
//! rounding, a few ulps of the largest output magnitude (`tools/interp-cases/fft_*.hlo`
//! measure it against XLA).

use std::collections::HashMap;
use std::sync::Arc;

use hlo_ir::ElemType;
use num_complex::Complex64;
use rustfft::{Fft, FftDirection, FftPlanner};

use super::complex::{complex_type, part_type};
use super::value::dims_text;
use super::value::{Array, Complex32, Data, Failure, strides};

type R<T> = Result<T, Failure>;

/// The four transforms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FftType {
    Fft,
    Ifft,
    Rfft,
    Irfft,
}

impl FftType {
    /// From the `fft_type=` attribute.
    pub fn parse(s: &str) -> R<FftType> {
        Ok(match s {
            "FFT" => FftType::Fft,
            "IFFT" => FftType::Ifft,
            "RFFT" => FftType::Rfft,
            "IRFFT" => FftType::Irfft,
            _ => return Err(format!("unknown fft_type `{s}` (FFT, IFFT, RFFT or IRFFT)").into()),
        })
    }
}

/// Plans by length and direction, shared across the lines of one transform.
struct Plans {
    planner: FftPlanner<f64>,
    plans: HashMap<(usize, bool), Arc<dyn Fft<f64>>>,
    scratch: Vec<Complex64>,
}

impl Plans {
    fn new() -> Plans {
        Plans { planner: FftPlanner::new(), plans: HashMap::new(), scratch: Vec::new() }
    }

    /// Transforms `line` in place (forward: `e^{−2πi·jk/n}`; inverse: unscaled `e^{+…}`).
    fn run(&mut self, line: &mut [Complex64], inverse: bool) {
        let n = line.len();
        if n <= 1 {
            return;
        }
        let planner = &mut self.planner;
        let plan = self
            .plans
            .entry((n, inverse))
            .or_insert_with(|| {
                planner.plan_fft(
                    n,
                    if inverse { FftDirection::Inverse } else { FftDirection::Forward },
                )
            })
            .clone();
        let need = plan.get_inplace_scratch_len();
        if self.scratch.len() < need {
            self.scratch.resize(need, Complex64::new(0.0, 0.0));
        }
        plan.process_with_scratch(line, &mut self.scratch[..need]);
    }
}

/// Transforms every line along dimension `axis` of `data` (row-major, `dims`) in place.
fn along(plans: &mut Plans, data: &mut [Complex64], dims: &[usize], axis: usize, inverse: bool) {
    let n = dims[axis];
    if n <= 1 || data.is_empty() {
        return;
    }
    let st = strides(dims)[axis];
    let outer: usize = dims[..axis].iter().product();
    let mut line = vec![Complex64::new(0.0, 0.0); n];
    for o in 0..outer {
        for i in 0..st {
            let base = o * n * st + i;
            for (k, x) in line.iter_mut().enumerate() {
                *x = data[base + k * st];
            }
            plans.run(&mut line, inverse);
            for (k, x) in line.iter().enumerate() {
                data[base + k * st] = *x;
            }
        }
    }
}

/// The operand's elements as `f64` complex numbers (real operands get zero imaginary parts).
fn widen(a: &Array) -> R<Vec<Complex64>> {
    Ok(match &a.data {
        Data::C64(v) => v.iter().map(|z| Complex64::new(z.re.into(), z.im.into())).collect(),
        Data::C128(v) => v.clone(),
        Data::F32(v) if a.elem == ElemType::F32 => {
            v.iter().map(|&x| Complex64::new(x.into(), 0.0)).collect()
        }
        Data::F64(v) => v.iter().map(|&x| Complex64::new(x, 0.0)).collect(),
        _ => return Err(format!("fft is not defined on {} values", a.elem).into()),
    })
}

/// `fft` of `a` with `fft_type` and `fft_length`; `declared` is the result's declared
/// element type and dims, checked against what the transform gives.
pub fn fft(
    a: &Array,
    fft_type: &str,
    fft_length: &[i64],
    declared: (ElemType, &[usize]),
) -> R<Array> {
    let ty = FftType::parse(fft_type)?;
    let k = fft_length.len();
    let rank = a.dims.len();
    if !(1..=3).contains(&k) || k > rank {
        return Err(format!(
            "fft_length has {k} entries; it needs 1 to 3, at most the operand's rank {rank}"
        )
        .into());
    }
    let lengths: Vec<usize> = fft_length
        .iter()
        .map(|&n| usize::try_from(n).map_err(|_| format!("fft_length entry {n} is negative")))
        .collect::<Result<_, _>>()?;
    let first = rank - k;
    let inner = rank - 1;
    // The operand's transformed dims and the result type.
    let complex_in = matches!(a.data, Data::C64(_) | Data::C128(_));
    let (want_in, out_elem) = match ty {
        FftType::Fft | FftType::Ifft => (complex_in, a.elem),
        FftType::Rfft => (!complex_in, complex_type(a.elem).unwrap_or(a.elem)),
        FftType::Irfft => (complex_in, part_type(a.elem)),
    };
    if !want_in || (ty == FftType::Rfft && complex_type(a.elem).is_none()) {
        let kind = if ty == FftType::Rfft { "an f32 or f64" } else { "a c64 or c128" };
        return Err(format!("{fft_type} takes {kind} operand, not {}", a.elem).into());
    }
    let mut expect_in: Vec<usize> = a.dims[..first].to_vec();
    expect_in.extend(&lengths);
    let mut out_dims = expect_in.clone();
    match ty {
        FftType::Rfft => out_dims[inner] = lengths[k - 1] / 2 + 1,
        FftType::Irfft => expect_in[inner] = lengths[k - 1] / 2 + 1,
        _ => {}
    }
    if a.dims != expect_in {
        return Err(format!(
            "{fft_type} with fft_length={{{}}} needs an operand of dims {}, not {}",
            fft_length.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(","),
            dims_text(&expect_in),
            dims_text(&a.dims)
        )
        .into());
    }
    if declared.0 != out_elem || declared.1 != out_dims.as_slice() {
        return Err(format!(
            "{fft_type} of {}{} gives {out_elem}{}, but the result is declared {}{}",
            a.elem,
            dims_text(&a.dims),
            dims_text(&out_dims),
            declared.0,
            dims_text(declared.1)
        )
        .into());
    }
    let mut plans = Plans::new();
    let total: f64 = lengths.iter().map(|&n| n as f64).product();
    let data: Vec<Complex64> = match ty {
        FftType::Fft | FftType::Ifft => {
            let inverse = ty == FftType::Ifft;
            let mut x = widen(a)?;
            for axis in first..rank {
                along(&mut plans, &mut x, &a.dims, axis, inverse);
            }
            if inverse && total > 0.0 {
                x.iter_mut().for_each(|z| *z /= total);
            }
            x
        }
        FftType::Rfft => {
            let mut x = widen(a)?;
            for axis in first..rank {
                along(&mut plans, &mut x, &a.dims, axis, false);
            }
            // Keep the non-negative frequencies of the innermost dimension.
            let (n, m) = (a.dims[inner], out_dims[inner]);
            let rows = x.len().checked_div(n).unwrap_or(0);
            (0..rows).flat_map(|r| x[r * n..r * n + m].to_vec()).collect()
        }
        FftType::Irfft => {
            let mut x = widen(a)?;
            for axis in first..inner {
                along(&mut plans, &mut x, &a.dims, axis, true);
            }
            // The innermost dimension: the Hermitian spectrum made whole, inverted, real.
            let (m, n) = (a.dims[inner], out_dims[inner]);
            let rows = x.len().checked_div(m).unwrap_or(0);
            let mut out = Vec::with_capacity(rows * n);
            let mut line = vec![Complex64::new(0.0, 0.0); n];
            for r in 0..rows {
                let half = &x[r * m..(r + 1) * m];
                for (j, z) in line.iter_mut().enumerate() {
                    *z = if j < m { half[j] } else { half[n - j].conj() };
                }
                if n > 0 {
                    line[0].im = 0.0;
                    if n % 2 == 0 {
                        line[n / 2].im = 0.0;
                    }
                }
                plans.run(&mut line, true);
                out.extend(line.iter().map(|z| Complex64::new(z.re / total, 0.0)));
            }
            out
        }
    };
    let data = match out_elem {
        ElemType::C64 => {
            Data::C64(data.into_iter().map(|z| Complex32::new(z.re as f32, z.im as f32)).collect())
        }
        ElemType::C128 => Data::C128(data),
        ElemType::F32 => Data::F32(data.into_iter().map(|z| z.re as f32).collect()),
        _ => Data::F64(data.into_iter().map(|z| z.re).collect()),
    };
    Ok(Array::new(out_elem, out_dims, data))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f64::consts::PI;

    fn c128(dims: &[usize], v: Vec<Complex64>) -> Array {
        Array::new(ElemType::C128, dims.to_vec(), Data::C128(v))
    }

    /// The DFT by its definition along the last axis of rows of length n.
    fn naive(x: &[Complex64], n: usize, sign: f64) -> Vec<Complex64> {
        x.chunks(n)
            .flat_map(|row| {
                (0..n).map(move |k| {
                    (0..n)
                        .map(|j| {
                            row[j]
                                * Complex64::from_polar(
                                    1.0,
                                    sign * 2.0 * PI * (j * k) as f64 / n as f64,
                                )
                        })
                        .sum()
                })
            })
            .collect()
    }

    fn signal(n: usize, seed: u64) -> Vec<Complex64> {
        let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
        };
        (0..n).map(|_| Complex64::new(next(), next())).collect()
    }

    fn close(a: &[Complex64], b: &[Complex64], tol: f64) {
        assert_eq!(a.len(), b.len());
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!((x - y).norm() <= tol * (1.0 + y.norm()), "element {i}: {x} vs {y}");
        }
    }

    #[test]
    fn known_signals() {
        // An impulse has a flat spectrum; a constant, a single DC bin.
        let mut imp = vec![Complex64::new(0.0, 0.0); 8];
        imp[0] = Complex64::new(1.0, 0.0);
        let r = fft(&c128(&[8], imp), "FFT", &[8], (ElemType::C128, &[8])).unwrap();
        assert!(r.data.as_c128().iter().all(|z| (z - Complex64::new(1.0, 0.0)).norm() < 1e-15));
        let r = fft(
            &c128(&[5], vec![Complex64::new(2.0, 0.0); 5]),
            "FFT",
            &[5],
            (ElemType::C128, &[5]),
        )
        .unwrap();
        close(
            r.data.as_c128(),
            &[Complex64::new(10.0, 0.0), 0.0.into(), 0.0.into(), 0.0.into(), 0.0.into()],
            1e-14,
        );
        // A cosine of frequency 3 over 16 samples: bins 3 and 13 hold n/2.
        let cos: Vec<f32> =
            (0..16).map(|j| (2.0 * PI * 3.0 * j as f64 / 16.0).cos() as f32).collect();
        let r = fft(
            &Array::new(ElemType::F32, vec![16], Data::F32(cos)),
            "RFFT",
            &[16],
            (ElemType::C64, &[9]),
        )
        .unwrap();
        for (k, z) in r.data.as_c64().iter().enumerate() {
            let want = if k == 3 { 8.0 } else { 0.0 };
            assert!((z.re - want).abs() < 1e-5 && z.im.abs() < 1e-5, "bin {k}: {z}");
        }
    }

    #[test]
    fn matches_the_definition_for_odd_and_prime_lengths() {
        for n in [1usize, 2, 3, 7, 12, 17, 97, 100, 101] {
            let x = signal(2 * n, n as u64);
            let f = fft(&c128(&[2, n], x.clone()), "FFT", &[n as i64], (ElemType::C128, &[2, n]))
                .unwrap();
            close(f.data.as_c128(), &naive(&x, n, -1.0), 1e-12);
            let back = fft(&f, "IFFT", &[n as i64], (ElemType::C128, &[2, n])).unwrap();
            close(back.data.as_c128(), &x, 1e-13);
        }
    }

    #[test]
    fn two_and_three_dimensions() {
        // 2-D: the 1-D transform of the rows, then of the columns.
        let (r, c) = (3, 5);
        let x = signal(r * c, 9);
        let f =
            fft(&c128(&[r, c], x.clone()), "FFT", &[r as i64, c as i64], (ElemType::C128, &[r, c]))
                .unwrap();
        let rows = naive(&x, c, -1.0);
        let t: Vec<Complex64> =
            (0..c).flat_map(|j| (0..r).map(|i| rows[i * c + j]).collect::<Vec<_>>()).collect();
        let cols = naive(&t, r, -1.0);
        let want: Vec<Complex64> =
            (0..r).flat_map(|i| (0..c).map(|j| cols[j * r + i]).collect::<Vec<_>>()).collect();
        close(f.data.as_c128(), &want, 1e-12);
        // 3-D roundtrip with a batch dimension.
        let x = signal(2 * 3 * 4 * 5, 3);
        let f = fft(
            &c128(&[2, 3, 4, 5], x.clone()),
            "FFT",
            &[3, 4, 5],
            (ElemType::C128, &[2, 3, 4, 5]),
        )
        .unwrap();
        let back = fft(&f, "IFFT", &[3, 4, 5], (ElemType::C128, &[2, 3, 4, 5])).unwrap();
        close(back.data.as_c128(), &x, 1e-13);
    }

    #[test]
    fn real_transforms_roundtrip() {
        for (dims, lens) in [
            (vec![4usize, 10], vec![10i64]),
            (vec![7], vec![7]),
            (vec![2, 6, 9], vec![6, 9]),
            (vec![3, 4, 5], vec![3, 4, 5]),
        ] {
            let n: usize = dims.iter().product();
            let x: Vec<f64> = signal(n, 5).iter().map(|z| z.re).collect();
            let a = Array::new(ElemType::F64, dims.clone(), Data::F64(x.clone()));
            let mut half = dims.clone();
            *half.last_mut().unwrap() = *dims.last().unwrap() / 2 + 1;
            let f = fft(&a, "RFFT", &lens, (ElemType::C128, &half)).unwrap();
            // RFFT is the FFT of the real signal, cut to n/2 + 1 bins.
            let full = fft(
                &c128(&dims, x.iter().map(|&v| v.into()).collect()),
                "FFT",
                &lens,
                (ElemType::C128, &dims),
            )
            .unwrap();
            let last = *dims.last().unwrap();
            let cut: Vec<Complex64> =
                full.data.as_c128().chunks(last).flat_map(|r| r[..last / 2 + 1].to_vec()).collect();
            close(f.data.as_c128(), &cut, 1e-13);
            let back = fft(&f, "IRFFT", &lens, (ElemType::F64, &dims)).unwrap();
            for (p, q) in back.data.as_f64().iter().zip(&x) {
                assert!((p - q).abs() < 1e-13, "{p} vs {q}");
            }
        }
    }

    #[test]
    fn bad_operands_are_errors() {
        let a = c128(&[4], signal(4, 1));
        let msg = |r: R<Array>| match r {
            Err(Failure::Here(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(
            msg(fft(&a, "FFT", &[5], (ElemType::C128, &[4])))
                .contains("needs an operand of dims [5]")
        );
        assert!(msg(fft(&a, "DCT", &[4], (ElemType::C128, &[4]))).contains("unknown fft_type"));
        assert!(
            msg(fft(&a, "RFFT", &[4], (ElemType::C128, &[3])))
                .contains("takes an f32 or f64 operand")
        );
        assert!(msg(fft(&a, "FFT", &[1, 1, 1, 4], (ElemType::C128, &[4]))).contains("1 to 3"));
        assert!(msg(fft(&a, "IFFT", &[4], (ElemType::C64, &[4]))).contains("declared c64[4]"));
        assert!(
            msg(fft(&a, "IRFFT", &[4], (ElemType::F64, &[4])))
                .contains("needs an operand of dims [3]")
        );
    }
}
