//! Seeded pseudo-random values for a module's entry parameters, so a module can be run
//! (and two versions of it compared) without an inputs file. Floats are uniform in
//! [-2, 2) rounded to their type; integers are in [0, 4) so that they are valid indices
//! into any dimension of size 4 or more; `pred` is a fair coin. The generator is
//! splitmix64: the same seed gives the same tensors on every machine.

use hlo_ir::types::ElemType;
use hlo_ir::{Shape, Tensor};

use crate::Failure;

/// splitmix64: a tiny generator whose sequence is the same on every machine.
pub struct SplitMix(pub u64);

impl SplitMix {
    #[allow(clippy::should_implement_trait)] // an endless stream, not an `Iterator`
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-2, 2).
    fn float(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 4.0 - 2.0
    }
}

/// One tensor per shape (arrays only), from `seed`. All of them together must fit the
/// interpreter's memory budget ([`crate::default_memory_budget`]): a parameter of
/// terabytes is refused at once instead of being filled for hours.
pub fn seeded_inputs(shapes: &[Shape], seed: u64) -> Result<Vec<Tensor>, Failure> {
    let mut rng = SplitMix(seed);
    let budget = crate::default_memory_budget();
    // Every shape sized first: nothing is filled unless all of them fit together.
    let mut total: u64 = 0;
    let mut sized = Vec::with_capacity(shapes.len());
    for (k, s) in shapes.iter().enumerate() {
        let a = s.as_array().ok_or_else(|| format!("parameter {k} is not an array ({s})"))?;
        let dims =
            a.static_dims().ok_or_else(|| format!("parameter {k} has a dynamic shape ({s})"))?;
        let count =
            hlo_ir::tensor::element_count(&dims).map_err(|e| format!("parameter {k}: {e}"))?;
        let size = hlo_ir::tensor::elem_size(a.elem).map_err(|e| format!("parameter {k}: {e}"))?;
        let need =
            count.checked_mul(size).ok_or_else(|| format!("parameter {k} ({s}) is too large"))?;
        total = total.saturating_add(need as u64);
        if total > budget {
            return Err(Failure::from(format!(
                "seeded inputs up to parameter {k} ({s}) take {}, more than the memory budget of {} (16 GiB, or 3/4 of the physical memory if less): give --inputs, or a smaller shape",
                hlo_ir::tensor::format_bytes(total),
                hlo_ir::tensor::format_bytes(budget)
            )));
        }
        sized.push((a, dims, count, size, need));
    }
    sized
        .into_iter()
        .enumerate()
        .map(|(k, (a, dims, count, size, need))| {
            let mut bytes = Vec::with_capacity(need);
            for _ in 0..count {
                match a.elem {
                    ElemType::Pred => bytes.push((rng.next() & 1) as u8),
                    ElemType::F32 => bytes.extend_from_slice(&(rng.float() as f32).to_le_bytes()),
                    ElemType::F64 => bytes.extend_from_slice(&rng.float().to_le_bytes()),
                    ElemType::C64 => {
                        bytes.extend_from_slice(&(rng.float() as f32).to_le_bytes());
                        bytes.extend_from_slice(&(rng.float() as f32).to_le_bytes());
                    }
                    ElemType::C128 => {
                        bytes.extend_from_slice(&rng.float().to_le_bytes());
                        bytes.extend_from_slice(&rng.float().to_le_bytes());
                    }
                    ElemType::BF16 => {
                        bytes.extend_from_slice(&half::bf16::from_f64(rng.float()).to_le_bytes())
                    }
                    ElemType::F16 => {
                        bytes.extend_from_slice(&half::f16::from_f64(rng.float()).to_le_bytes())
                    }
                    // Sub-byte integers: one byte holding the value wrapped to the type.
                    e if e.is_integer() && e.bits() < 8 => {
                        bytes.push(crate::value::wrap(e, (rng.next() % 4) as i64) as u8)
                    }
                    e if e.is_integer() => {
                        let v = rng.next() % 4;
                        bytes.extend_from_slice(&v.to_le_bytes()[..size]);
                    }
                    // fp8/f4 bit patterns of the same uniform values (f8e8m0fnu: their magnitudes).
                    e if hlo_ir::narrow::is_narrow_float(e) => {
                        let x =
                            if e == ElemType::F8E8M0FNU { rng.float().abs() } else { rng.float() };
                        bytes.push(hlo_ir::narrow::from_f64(e, x).expect("narrow float"));
                    }
                    e => {
                        return Err(Failure::from(format!(
                            "parameter {k}: no seeded values for {}",
                            e.name()
                        )));
                    }
                }
            }
            Tensor::from_bytes(a.elem, dims, bytes)
                .map_err(|e| Failure::Here(format!("parameter {k}: {e}")))
        })
        .collect()
}
