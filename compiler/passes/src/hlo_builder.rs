//! A small instruction builder for the expander passes (`cholesky-expander`,
//! `triangular-solve-expander`): each method adds one instruction to a computation with
//! its result shape worked out from the operands (arrays with static dims only), and
//! stamps it with the expanded instruction's span and metadata.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::{CmpDirection, DotDims, PadDim, Precision, SliceRange};
use hlo_ir::{CompId, Computation, ElemType, Instr, NodeIndex, Op, Opcode, Shape, Span};

pub struct Builder<'c> {
    pub c: &'c mut Computation,
    pub span: Span,
    pub metadata: Option<Box<hlo_ir::instr::Metadata>>,
}

pub type N = NodeIndex;

impl Builder<'_> {
    pub fn emit(&mut self, name: &str, op: Op, shape: Shape, operands: &[N]) -> N {
        let mut i = Instr::new(name, op, shape);
        i.metadata = self.metadata.clone();
        i.span = self.span;
        self.c.add(i, operands)
    }
    pub fn param(&mut self, name: &str, shape: Shape) -> N {
        let p = self.c.add_param(name, shape);
        self.c.instr_mut(p).span = self.span;
        p
    }
    pub fn shape(&self, x: N) -> Shape {
        self.c.instr(x).shape.clone()
    }
    pub fn dims(&self, x: N) -> Vec<u64> {
        self.c.instr(x).shape.as_array().and_then(|a| a.static_dims()).unwrap_or_default()
    }
    pub fn elem(&self, x: N) -> ElemType {
        self.c.instr(x).shape.as_array().map_or(ElemType::F32, |a| a.elem)
    }
    /// A scalar float constant of `elem`.
    pub fn float(&mut self, elem: ElemType, v: f64) -> N {
        self.emit(
            "constant",
            Op::Constant(Literal::Array(LiteralData::Float(vec![v]))),
            Shape::scalar(elem),
            &[],
        )
    }
    pub fn s32(&mut self, v: i64) -> N {
        self.emit(
            "constant",
            Op::Constant(Literal::Array(LiteralData::Int(vec![v]))),
            Shape::scalar(ElemType::S32),
            &[],
        )
    }
    pub fn pred(&mut self, v: bool) -> N {
        self.emit(
            "constant",
            Op::Constant(Literal::Array(LiteralData::Pred(vec![v]))),
            Shape::scalar(ElemType::Pred),
            &[],
        )
    }
    /// `x` broadcast to `dims`, its dimensions landing on `mapping`.
    pub fn broadcast(&mut self, x: N, dims: &[u64], mapping: &[usize]) -> N {
        let e = self.elem(x);
        self.emit(
            "broadcast",
            Op::Broadcast { dimensions: mapping.iter().map(|&d| d as i64).collect() },
            Shape::array(e, dims),
            &[x],
        )
    }
    /// A scalar broadcast to `dims`.
    pub fn splat(&mut self, x: N, dims: &[u64]) -> N {
        self.broadcast(x, dims, &[])
    }
    pub fn full(&mut self, elem: ElemType, v: f64, dims: &[u64]) -> N {
        let s = self.float(elem, v);
        self.splat(s, dims)
    }
    pub fn binary(&mut self, op: Opcode, a: N, b: N) -> N {
        let s = self.shape(a);
        self.emit(op.name(), Op::Plain(op), s, &[a, b])
    }
    pub fn unary(&mut self, op: Opcode, a: N) -> N {
        let s = self.shape(a);
        self.emit(op.name(), Op::Plain(op), s, &[a])
    }
    pub fn compare(&mut self, a: N, b: N, direction: CmpDirection) -> N {
        let d = self.dims(a);
        self.emit(
            "compare",
            Op::Compare { direction, kind: None },
            Shape::array(ElemType::Pred, &d),
            &[a, b],
        )
    }
    pub fn select(&mut self, p: N, a: N, b: N) -> N {
        let s = self.shape(a);
        self.emit("select", Op::Plain(Opcode::Select), s, &[p, a, b])
    }
    pub fn iota(&mut self, dims: &[u64], dimension: usize) -> N {
        self.emit(
            "iota",
            Op::Iota { dimension: dimension as i64 },
            Shape::array(ElemType::S32, dims),
            &[],
        )
    }
    pub fn reshape(&mut self, x: N, dims: &[u64]) -> N {
        let e = self.elem(x);
        self.emit("reshape", Op::Reshape { inferred_dimension: None }, Shape::array(e, dims), &[x])
    }
    /// Swaps the two minor dimensions.
    pub fn transpose_minor(&mut self, x: N) -> N {
        let d = self.dims(x);
        let r = d.len();
        let mut perm: Vec<usize> = (0..r).collect();
        perm.swap(r - 2, r - 1);
        let out: Vec<u64> = perm.iter().map(|&p| d[p]).collect();
        let e = self.elem(x);
        self.emit(
            "transpose",
            Op::Transpose { dimensions: perm.iter().map(|&p| p as i64).collect() },
            Shape::array(e, &out),
            &[x],
        )
    }
    /// A static slice, `[lo, hi)` per dimension.
    pub fn slice(&mut self, x: N, ranges: &[(u64, u64)]) -> N {
        let e = self.elem(x);
        let out: Vec<u64> = ranges.iter().map(|&(lo, hi)| hi - lo).collect();
        let ranges = ranges
            .iter()
            .map(|&(lo, hi)| SliceRange { start: lo as i64, limit: hi as i64, stride: 1 })
            .collect();
        self.emit("slice", Op::Slice { ranges }, Shape::array(e, &out), &[x])
    }
    /// Rows `r` and columns `c` of every batch matrix of `x`.
    pub fn slice_minor(&mut self, x: N, r: (u64, u64), c: (u64, u64)) -> N {
        let d = self.dims(x);
        let mut ranges: Vec<(u64, u64)> = d[..d.len() - 2].iter().map(|&s| (0, s)).collect();
        ranges.push(r);
        ranges.push(c);
        self.slice(x, &ranges)
    }
    pub fn dynamic_slice(&mut self, x: N, starts: &[N], sizes: &[u64]) -> N {
        let e = self.elem(x);
        let mut ops = vec![x];
        ops.extend_from_slice(starts);
        self.emit(
            "dynamic-slice",
            Op::DynamicSlice { sizes: sizes.iter().map(|&s| s as i64).collect() },
            Shape::array(e, sizes),
            &ops,
        )
    }
    pub fn dynamic_update_slice(&mut self, x: N, update: N, starts: &[N]) -> N {
        let s = self.shape(x);
        let mut ops = vec![x, update];
        ops.extend_from_slice(starts);
        self.emit("dynamic-update-slice", Op::Plain(Opcode::DynamicUpdateSlice), s, &ops)
    }
    pub fn pad(&mut self, x: N, value: N, config: &[(u64, u64)]) -> N {
        let d = self.dims(x);
        let e = self.elem(x);
        let out: Vec<u64> = d.iter().zip(config).map(|(&s, &(lo, hi))| s + lo + hi).collect();
        let config = config
            .iter()
            .map(|&(lo, hi)| PadDim { lo: lo as i64, hi: hi as i64, interior: 0 })
            .collect();
        self.emit("pad", Op::Pad { config }, Shape::array(e, &out), &[x, value])
    }
    pub fn concat(&mut self, xs: &[N], dim: usize) -> N {
        let mut d = self.dims(xs[0]);
        d[dim] = xs.iter().map(|&x| self.dims(x)[dim]).sum();
        let e = self.elem(xs[0]);
        self.emit("concatenate", Op::Concatenate { dimension: dim as i64 }, Shape::array(e, &d), xs)
    }
    /// A batched matrix product `op(x)·op(y)` over the leading batch dimensions, at
    /// HIGHEST precision (as XLA's expanders ask for).
    pub fn batch_dot(&mut self, x: N, tx: bool, y: N, ty: bool) -> N {
        let (xd, yd) = (self.dims(x), self.dims(y));
        let r = xd.len();
        let batch: Vec<i64> = (0..r as i64 - 2).collect();
        let xc = if tx { r - 2 } else { r - 1 };
        let yc = if ty { r - 1 } else { r - 2 };
        let mut out: Vec<u64> = xd[..r - 2].to_vec();
        out.push(xd[if tx { r - 1 } else { r - 2 }]);
        out.push(yd[if ty { r - 2 } else { r - 1 }]);
        let dims = DotDims {
            lhs_batch: batch.clone(),
            rhs_batch: batch,
            lhs_contracting: vec![xc as i64],
            rhs_contracting: vec![yc as i64],
            precision: vec![Precision::Highest, Precision::Highest],
            ..Default::default()
        };
        let e = self.elem(x);
        self.emit(
            "dot",
            Op::Dot { opcode: Opcode::Dot, dims: Box::new(dims) },
            Shape::array(e, &out),
            &[x, y],
        )
    }
    pub fn tuple(&mut self, xs: &[N]) -> N {
        let shapes = xs.iter().map(|&x| self.shape(x)).collect();
        self.emit("tuple", Op::Plain(Opcode::Tuple), Shape::Tuple(shapes), xs)
    }
    pub fn gte(&mut self, t: N, index: usize) -> N {
        let s = self
            .c
            .instr(t)
            .shape
            .tuple_elements()
            .map(|e| e[index].clone())
            .unwrap_or(Shape::Token);
        self.emit("get-tuple-element", Op::GetTupleElement { index: index as i64 }, s, &[t])
    }
    pub fn while_loop(&mut self, init: N, condition: CompId, body: CompId) -> N {
        let s = self.shape(init);
        self.emit("while", Op::While { condition, body }, s, &[init])
    }
    /// A `[batch.., 1, 1]` value broadcast over `dims` (`[batch.., r, c]`).
    pub fn spread_scalar_per_matrix(&mut self, x: N, dims: &[u64]) -> N {
        let nb = dims.len() - 2;
        let flat = self.reshape(x, &dims[..nb]);
        let mapping: Vec<usize> = (0..nb).collect();
        self.broadcast(flat, dims, &mapping)
    }
}

/// A scalar binary computation (`add` for reductions) of `elem`.
pub fn scalar_binary(m: &mut hlo_ir::Module, op: Opcode, elem: ElemType, base: &str) -> CompId {
    let mut c = m.new_computation(base);
    let s = Shape::scalar(elem);
    let x = c.add_param("x", s.clone());
    let y = c.add_param("y", s.clone());
    let r = c.add(Instr::new(op.name(), Op::Plain(op), s), &[x, y]);
    c.set_root(r);
    m.add_computation(c)
}
