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
