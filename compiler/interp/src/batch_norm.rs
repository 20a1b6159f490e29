//! `batch-norm-training`, `batch-norm-inference` and `batch-norm-grad`, evaluated step by
//! step with XLA's definitions (its `BatchNormExpander`, which XLA's CPU and GPU backends
//! run): every intermediate is rounded to the operand's element type, the mean and
//! variance come from `Sum[X] / N` and `Sum[X^2] / N - mean^2`, and reductions run over
//! every dimension but `feature_index`. The compiler's `batch-norm-expander` pass writes
//! the same steps as HLO for the other engines; tests check it against this.

use hlo_ir::{ElemType, Opcode};

use super::compute::{self, Reducer};
use super::data_movement::broadcast;
use super::elementwise::{binary, convert, unary};
use super::value::{Array, Data, Failure};

type R<T> = Result<T, Failure>;

/// What every variant needs: the dimensions reduced over, broadcasting back and forth,
/// and constants in the operand's element type.
struct Frame<'a> {
    x: &'a Array,
    feature: usize,
}

impl Frame<'_> {
    fn new(x: &Array, feature_index: i64) -> R<Frame<'_>> {
        let feature =
            usize::try_from(feature_index).ok().filter(|&f| f < x.dims.len()).ok_or_else(|| {
                Failure::from(format!(
                    "feature_index {feature_index} is out of range for an operand of rank {}",
                    x.dims.len()
                ))
            })?;
        if !matches!(x.elem, ElemType::F32 | ElemType::F64 | ElemType::BF16 | ElemType::F16) {
            return Err(format!("batch norm of {} values (floating point only)", x.elem).into());
        }
        Ok(Frame { x, feature })
    }
    fn elem(&self) -> ElemType {
        self.x.elem
    }
    fn reduced_dims(&self) -> Vec<i64> {
        (0..self.x.dims.len()).filter(|&d| d != self.feature).map(|d| d as i64).collect()
    }
    /// `Sum` over every dimension but the feature's.
    fn sum(&self, a: &Array) -> R<Array> {
        let zero = self.scalar(0.0)?;
        let mut out =
            compute::reduce(&[a], &[&zero], &self.reduced_dims(), &Reducer::Binary(Opcode::Add))?;
        Ok(out.remove(0))
    }
    /// A per-feature vector broadcast to the operand's dims.
    fn spread(&self, v: &Array) -> R<Array> {
        broadcast(v, self.x.dims.clone(), &[self.feature as i64])
    }
    /// A scalar broadcast to `dims`.
    fn fill(&self, s: &Array, dims: &[usize]) -> R<Array> {
        broadcast(s, dims.to_vec(), &[])
    }
    /// An f32 value converted to the element type (as XLA builds its literals).
    fn scalar(&self, v: f32) -> R<Array> {
        convert(&Array::new(ElemType::F32, Vec::new(), Data::F32(vec![v])), self.elem())
    }
    /// N, the elements per feature: an s32 product converted to the element type.
    fn count(&self) -> R<Array> {
        let n: i64 = self
            .x
            .dims
            .iter()
            .enumerate()
            .filter(|&(d, _)| d != self.feature)
            .map(|(_, &s)| s as i64)
            .product();
        let n = i64::from(
            i32::try_from(n)
                .map_err(|_| Failure::from("more than 2^31 elements per feature".to_string()))?,
        );
        convert(&Array::new(ElemType::S32, Vec::new(), Data::Int(vec![n])), self.elem())
    }
    fn feature_dims(&self) -> Vec<usize> {
        vec![self.x.dims[self.feature]]
    }
}

fn b(op: Opcode, a: &Array, c: &Array) -> R<Array> {
    binary(op, a, c)
}

fn rsqrt(a: &Array) -> R<Array> {
    unary(Opcode::Rsqrt, a)
}

/// `(normalized, batch_mean, batch_var)`.
pub fn training(
    x: &Array,
    scale: &Array,
    offset: &Array,
    epsilon: f64,
    feature_index: i64,
) -> R<Vec<Array>> {
    use Opcode::*;
    let f = Frame::new(x, feature_index)?;
    let fd = f.feature_dims();
    let n = f.fill(&f.count()?, &fd)?;
    let eps = f.fill(&f.scalar(epsilon as f32)?, &x.dims)?;
    let sum = f.sum(x)?;
    let squared_sum = f.sum(&b(Multiply, x, x)?)?;
    let mean = b(Divide, &sum, &n)?;
    let square_mean = b(Divide, &squared_sum, &n)?;
    let var = b(Subtract, &square_mean, &b(Multiply, &mean, &mean)?)?;
    let rsqrt_var = rsqrt(&b(Add, &f.spread(&var)?, &eps)?)?;
    let normalized = b(Multiply, &b(Subtract, x, &f.spread(&mean)?)?, &rsqrt_var)?;
    let out = b(Add, &b(Multiply, &normalized, &f.spread(scale)?)?, &f.spread(offset)?)?;
    Ok(vec![out, mean, var])
}

/// The normalized operand, from the given mean and variance.
pub fn inference(
    x: &Array,
    scale: &Array,
    offset: &Array,
    mean: &Array,
    var: &Array,
    epsilon: f64,
    feature_index: i64,
) -> R<Array> {
    use Opcode::*;
    let f = Frame::new(x, feature_index)?;
    let eps = f.fill(&f.scalar(epsilon as f32)?, &f.feature_dims())?;
    let true_scale = b(Multiply, scale, &rsqrt(&b(Add, var, &eps)?)?)?;
    let true_shift = b(Subtract, offset, &b(Multiply, mean, &true_scale)?)?;
    b(Add, &b(Multiply, x, &f.spread(&true_scale)?)?, &f.spread(&true_shift)?)
}

/// `(grad_operand, grad_scale, grad_offset)`.
pub fn grad(
    x: &Array,
    scale: &Array,
    mean: &Array,
    var: &Array,
    grad_out: &Array,
    epsilon: f64,
    feature_index: i64,
) -> R<Vec<Array>> {
    use Opcode::*;
    let f = Frame::new(x, feature_index)?;
    let count = f.count()?;
    let eps_scalar = f.scalar(epsilon as f32)?;
    let eps_x = f.fill(&eps_scalar, &x.dims)?;
    let eps_f = f.fill(&eps_scalar, &f.feature_dims())?;
    let var_b = f.spread(var)?;
    let rsqrt_var_b = rsqrt(&b(Add, &var_b, &eps_x)?)?;
    let rsqrt_var = rsqrt(&b(Add, var, &eps_f)?)?;
    let x_minus_mean = b(Subtract, x, &f.spread(mean)?)?;
    let sum_dy_xmm = f.sum(&b(Multiply, grad_out, &x_minus_mean)?)?;
    let grad_offset = f.sum(grad_out)?;
    let grad_scale = b(Multiply, &sum_dy_xmm, &rsqrt_var)?;
    let i2 = f.spread(&grad_offset)?;
    let i3 = f.spread(&sum_dy_xmm)?;
    let i4 = b(Multiply, &i3, &x_minus_mean)?;
    let i5 = b(Divide, &i4, &b(Add, &var_b, &eps_x)?)?;
    let scale_rsqrt = b(Multiply, &f.spread(scale)?, &rsqrt_var_b)?;
    let scale_rsqrt_over_n = b(Divide, &scale_rsqrt, &f.fill(&count, &x.dims)?)?;
    let i1 = b(Multiply, grad_out, &f.fill(&count, &x.dims)?)?;
    let i6 = b(Subtract, &b(Subtract, &i1, &i2)?, &i5)?;
    let grad_x = b(Multiply, &scale_rsqrt_over_n, &i6)?;
    Ok(vec![grad_x, grad_scale, grad_offset])
}
