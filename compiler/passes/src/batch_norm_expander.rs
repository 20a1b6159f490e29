//! `batch-norm-expander`: rewrites `batch-norm-training`, `batch-norm-inference` and
//! `batch-norm-grad` into reduce, broadcast and elementwise instructions, the steps XLA's
//! `BatchNormExpander` takes (so the JIT and the TPU model, which have no batch-norm
//! kernels, compute what XLA's CPU backend computes):
//!
//! - training: `mean = Sum[X] / N`, `var = Sum[X^2] / N - mean^2`,
//!   `out = (X - mean) * rsqrt(var + eps) * scale + offset`;
//! - inference: `k = scale * rsqrt(var + eps)`, `out = X * k + (offset - mean * k)`;
//! - grad: `grad_offset = Sum[dY]`, `grad_scale = Sum[dY * (X - mean)] * rsqrt(var + eps)`,
//!   `grad_X = scale * rsqrt(var + eps) / N * (N * dY - grad_offset - (X - mean) *
//!   Sum[dY * (X - mean)] / (var + eps))`,
//!
//! with sums over every dimension but `feature_index`, `N` an s32 count converted to the
//! element type, and `eps` the f32 epsilon converted to it. The interpreter evaluates
//! the three ops natively with the same steps (`interp::batch_norm`); tests check this
//! pass against it and both against XLA.

use std::collections::HashMap;

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{
    CompId, Computation, Diagnostic, ElemType, Instr, Module, NodeIndex, Op, Opcode, Shape,
};

use crate::expander::OpExpander;

/// `batch-norm-expander`; the per-element-type adders it made this run.
#[derive(Default)]
pub struct BatchNormExpander {
    adders: HashMap<ElemType, CompId>,
}

impl OpExpander for BatchNormExpander {
    fn name(&self) -> &'static str {
        "batch-norm-expander"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::BatchNorm { .. })
    }

    fn begin(&mut self) {
        self.adders.clear();
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        let c = m.comp(id);
        let i = c.instr(n);
        let Op::BatchNorm { opcode, epsilon, feature_index } = i.op else { return Ok(None) };
        let ops = c.operands(n);
        let Some(x) = ops.first().copied() else { return Ok(None) };
        let Some(xa) = c.instr(x).shape.as_array() else { return Ok(None) };
        let Some(dims) = xa.static_dims() else { return Ok(None) };
        let elem = xa.elem;
        let feature = match usize::try_from(feature_index) {
            Ok(f) if f < dims.len() => f,
            _ => {
                return Err(Diagnostic::error(
                    i.span,
                    format!("`{}`: feature_index {feature_index} is out of range", i.name),
                ));
            }
        };
        let span = i.span;
        let metadata = i.metadata.clone();
        let add = *self.adders.entry(elem).or_insert_with(|| adder(m, elem));
        let comp = m.comp_mut(id);
        let mut e = Emit { comp, elem, dims, feature, add, metadata, span };
        Ok(Some(match opcode {
            Opcode::BatchNormTraining => e.training(&ops, epsilon),
            Opcode::BatchNormInference => e.inference(&ops, epsilon),
            _ => e.grad(&ops, epsilon),
        }))
    }
}

/// A scalar `add` computation for the reductions.
fn adder(m: &mut Module, elem: ElemType) -> CompId {
    let mut c = m.new_computation(&format!("batch_norm_sum.{}", elem.name()));
    let s = Shape::scalar(elem);
    let x = c.add_param("x", s.clone());
    let y = c.add_param("y", s.clone());
    let r = c.add(Instr::new("add", Op::Plain(Opcode::Add), s), &[x, y]);
    c.set_root(r);
    m.add_computation(c)
}

struct Emit<'c> {
    comp: &'c mut Computation,
    elem: ElemType,
    dims: Vec<u64>,
    feature: usize,
    add: CompId,
    metadata: Option<Box<hlo_ir::instr::Metadata>>,
    span: hlo_ir::Span,
}

impl Emit<'_> {
    fn emit(&mut self, name: &str, op: Op, shape: Shape, operands: &[NodeIndex]) -> NodeIndex {
        let mut i = Instr::new(name, op, shape);
        i.metadata = self.metadata.clone();
        i.span = self.span;
        self.comp.add(i, operands)
    }
    fn x_shape(&self) -> Shape {
        Shape::array(self.elem, &self.dims)
    }
    fn f_shape(&self) -> Shape {
        Shape::array(self.elem, &[self.dims[self.feature]])
    }
    fn bin(&mut self, op: Opcode, a: NodeIndex, b: NodeIndex, on_x: bool) -> NodeIndex {
        let s = if on_x { self.x_shape() } else { self.f_shape() };
        self.emit(op.name(), Op::Plain(op), s, &[a, b])
    }
    fn rsqrt(&mut self, a: NodeIndex, on_x: bool) -> NodeIndex {
        let s = if on_x { self.x_shape() } else { self.f_shape() };
        self.emit("rsqrt", Op::Plain(Opcode::Rsqrt), s, &[a])
    }
    /// A per-feature vector broadcast to the operand's shape.
    fn spread(&mut self, v: NodeIndex) -> NodeIndex {
        let s = self.x_shape();
        self.emit("broadcast", Op::Broadcast { dimensions: vec![self.feature as i64] }, s, &[v])
    }
    /// A scalar broadcast to the operand's (or the feature vector's) shape.
    fn fill(&mut self, v: NodeIndex, on_x: bool) -> NodeIndex {
        let s = if on_x { self.x_shape() } else { self.f_shape() };
        self.emit("broadcast", Op::Broadcast { dimensions: Vec::new() }, s, &[v])
    }
    /// An f32 value as a constant of the element type.
    fn scalar(&mut self, v: f32) -> NodeIndex {
        let s = Shape::scalar(self.elem);
        self.emit(
            "constant",
            Op::Constant(Literal::Array(LiteralData::Float(vec![f64::from(v)]))),
            s,
            &[],
        )
    }
    /// N, the elements per feature: an s32 constant converted to the element type.
    fn count(&mut self) -> NodeIndex {
        let n: u64 = self
            .dims
            .iter()
            .enumerate()
            .filter(|&(d, _)| d != self.feature)
            .map(|(_, &s)| s)
            .product();
        let c = self.emit(
            "constant",
            Op::Constant(Literal::Array(LiteralData::Int(vec![n as i64]))),
            Shape::scalar(ElemType::S32),
            &[],
        );
        let s = Shape::scalar(self.elem);
        self.emit("convert", Op::Plain(Opcode::Convert), s, &[c])
    }
    /// `Sum` over every dimension but the feature's.
    fn sum(&mut self, a: NodeIndex) -> NodeIndex {
        let zero = self.scalar(0.0);
        let dims: Vec<i64> =
            (0..self.dims.len()).filter(|&d| d != self.feature).map(|d| d as i64).collect();
        let s = self.f_shape();
        self.emit("reduce", Op::Reduce { dimensions: dims, to_apply: self.add }, s, &[a, zero])
    }
    fn tuple(&mut self, parts: [NodeIndex; 3]) -> NodeIndex {
        let shapes = parts.iter().map(|&p| self.comp.instr(p).shape.clone()).collect();
        self.emit("tuple", Op::Plain(Opcode::Tuple), Shape::Tuple(shapes), &parts)
    }

    fn training(&mut self, ops: &[NodeIndex], epsilon: f64) -> NodeIndex {
        use Opcode::*;
        let (x, scale, offset) = (ops[0], ops[1], ops[2]);
        let count = self.count();
        let n = self.fill(count, false);
        let eps_s = self.scalar(epsilon as f32);
        let eps = self.fill(eps_s, true);
        let sum = self.sum(x);
        let xx = self.bin(Multiply, x, x, true);
        let squared_sum = self.sum(xx);
        let mean = self.bin(Divide, sum, n, false);
        let square_mean = self.bin(Divide, squared_sum, n, false);
        let mean_square = self.bin(Multiply, mean, mean, false);
        let var = self.bin(Subtract, square_mean, mean_square, false);
        let var_b = self.spread(var);
        let var_eps = self.bin(Add, var_b, eps, true);
        let rsqrt = self.rsqrt(var_eps, true);
        let mean_b = self.spread(mean);
        let centered = self.bin(Subtract, x, mean_b, true);
        let normalized = self.bin(Multiply, centered, rsqrt, true);
        let scale_b = self.spread(scale);
        let scaled = self.bin(Multiply, normalized, scale_b, true);
        let offset_b = self.spread(offset);
        let out = self.bin(Add, scaled, offset_b, true);
        self.tuple([out, mean, var])
    }

    fn inference(&mut self, ops: &[NodeIndex], epsilon: f64) -> NodeIndex {
        use Opcode::*;
        let (x, scale, offset, mean, var) = (ops[0], ops[1], ops[2], ops[3], ops[4]);
        let eps_s = self.scalar(epsilon as f32);
        let eps = self.fill(eps_s, false);
        let var_eps = self.bin(Add, var, eps, false);
        let rsqrt = self.rsqrt(var_eps, false);
        let true_scale = self.bin(Multiply, scale, rsqrt, false);
        let mean_scaled = self.bin(Multiply, mean, true_scale, false);
        let true_shift = self.bin(Subtract, offset, mean_scaled, false);
        let k = self.spread(true_scale);
        let scaled = self.bin(Multiply, x, k, true);
        let shift = self.spread(true_shift);
        self.bin(Add, scaled, shift, true)
    }

    fn grad(&mut self, ops: &[NodeIndex], epsilon: f64) -> NodeIndex {
        use Opcode::*;
        let (x, scale, mean, var, dy) = (ops[0], ops[1], ops[2], ops[3], ops[4]);
        let count = self.count();
        let eps_s = self.scalar(epsilon as f32);
        let eps_x = self.fill(eps_s, true);
        let eps_f = self.fill(eps_s, false);
        let var_b = self.spread(var);
        let var_eps_x = self.bin(Add, var_b, eps_x, true);
        let rsqrt_x = self.rsqrt(var_eps_x, true);
        let var_eps_f = self.bin(Add, var, eps_f, false);
        let rsqrt_f = self.rsqrt(var_eps_f, false);
        let mean_b = self.spread(mean);
        let centered = self.bin(Subtract, x, mean_b, true);
        let dy_centered = self.bin(Multiply, dy, centered, true);
        let sum_dy_centered = self.sum(dy_centered);
        let grad_offset = self.sum(dy);
        let grad_scale = self.bin(Multiply, sum_dy_centered, rsqrt_f, false);
        let i2 = self.spread(grad_offset);
        let i3 = self.spread(sum_dy_centered);
        let i4 = self.bin(Multiply, i3, centered, true);
        let i5 = self.bin(Divide, i4, var_eps_x, true);
        let scale_b = self.spread(scale);
        let scale_rsqrt = self.bin(Multiply, scale_b, rsqrt_x, true);
        let n_x = self.fill(count, true);
        let scale_rsqrt_n = self.bin(Divide, scale_rsqrt, n_x, true);
        let i1 = self.bin(Multiply, dy, n_x, true);
        let i12 = self.bin(Subtract, i1, i2, true);
        let i6 = self.bin(Subtract, i12, i5, true);
        let grad_x = self.bin(Multiply, scale_rsqrt_n, i6, true);
        self.tuple([grad_x, grad_scale, grad_offset])
    }
}
