//! The elemental emitter: CLIF that computes the value of one instruction at one
//! multi-index, pulling its operands' values at the indices the opcode maps to (as XLA's
//! elemental IR emitter does). Buffers are read only at the leaves, so a whole fused
//! computation becomes one loop body with no intermediate arrays.
//!
//! - Index values are `i64`, one per dimension of the instruction's shape.
//! - Data movement (broadcast, reshape, transpose, slice, reverse, pad, concatenate,
//!   dynamic-slice, dynamic-update-slice, gather, iota) is index arithmetic; out-of-range
//!   reads are clamped and the result selected, so the loop body stays one basic block
//!   except where a reduction needs an inner loop (`reduce`, `reduce-window`).
//! - Results are memoized per (instruction, index) so a diamond computes a value once.

use std::collections::HashMap;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use cranelift_jit::JITModule;
use hlo_ir::{CompId, Computation, ElemType, Module, NodeIndex, Op, Opcode, Shape};

use super::ty::{self, Repr};
use super::{CgError, scalar_ops};

/// A loop body that receives a multi-index.
pub type IndexBody<'a, 'e, 'f> =
    dyn FnMut(&mut Emitter<'e, 'f>, &[Value]) -> Result<(), CgError> + 'a;

/// A window tap's body: the tap's position as values, and as numbers when they are
/// constants ([`Emitter::for_window_taps`]).
pub type TapBody<'a, 'e, 'f> =
    dyn Fn(&mut Emitter<'e, 'f>, &[Value], Option<&[i64]>) -> Result<(), CgError> + 'a;

/// Where a leaf's values come from.
#[derive(Clone, Copy, Debug)]
pub enum Leaf {
    /// A row-major buffer of the leaf's shape.
    Buffer(Value),
    /// A row-major buffer the kernel only reads, and that nothing writes while it runs (a
    /// loop kernel's operand: the planner never places an operand over a result of the
    /// same step). Its loads are pure for Cranelift (`readonly`, `can_move`), so the ones
    /// a loop does not vary leave the loop with everything computed from them (see
    /// [`Emitter::for_values`]): layer norm's `rsqrt(var / n + eps)` of a row runs once
    /// per row instead of once per four elements.
    Input(Value),
    /// A scalar already computed (a reducer's parameter).
    Scalar(Value),
}

pub struct Emitter<'e, 'f> {
    pub b: &'e mut FunctionBuilder<'f>,
    pub jm: &'e mut JITModule,
    pub m: &'e Module,
    pub comp: &'e Computation,
    pub leaves: HashMap<NodeIndex, Vec<Leaf>>,
    memo: HashMap<(NodeIndex, Vec<Value>), Vec<Value>>,
    /// Vector values (see [`super::vector`]): (instruction, lane-0 index, lane dimension).
    pub(crate) vmemo: HashMap<(NodeIndex, Vec<Value>, Option<usize>), Value>,
    /// Instructions whose values the current chunk has computed ahead (see
    /// [`super::staged`]).
    pub(crate) staged: HashMap<NodeIndex, StagedAt>,
    /// f32x4 values that hold bf16 values exactly (rounded, or loaded from bf16): a bf16
    /// store of one keeps its high halves instead of rounding it again.
    pub(crate) bf16_exact: std::collections::HashSet<Value>,
}

/// A staged instruction's values for the current chunk ([`super::staged`] computes them
/// ahead of a chunk's loop; the vector emitter reads them from the chunk's array).
#[derive(Clone, Debug)]
pub struct StagedAt {
    /// The chunk's result array.
    pub buf: Value,
    /// The lane index of the chunk's first element.
    pub base: Value,
    /// The lane dimension.
    pub lane: usize,
    /// The index the loop evaluates the root at (the lane component is ignored).
    pub at: Vec<Value>,
}

impl StagedAt {
    /// Whether the value at `idx` with lanes along `lane` is in this chunk's array.
    pub fn covers(&self, idx: &[Value], lane: Option<usize>) -> bool {
        lane == Some(self.lane)
            && idx.len() == self.at.len()
            && idx.iter().zip(&self.at).enumerate().all(|(k, (a, b))| k == self.lane || a == b)
    }
}

pub fn static_dims(s: &Shape) -> Result<Vec<i64>, CgError> {
    match s {
        Shape::Array(a) => a
            .static_dims()
            .map(|d| d.into_iter().map(|x| x as i64).collect())
            .ok_or_else(|| CgError::unsupported(crate::Unsupported::DynamicShape(s.clone()))),
        _ => Err(CgError::new(format!("expected an array shape, found {s}"))),
    }
}

pub fn elem_of(s: &Shape) -> Result<ElemType, CgError> {
    match s {
        Shape::Array(a) => Ok(a.elem),
        _ => Err(CgError::new(format!("expected an array shape, found {s}"))),
    }
}

/// The array shapes a value of shape `s` consists of, flattened (a tuple's leaves in order).
pub fn flat_arrays(s: &Shape) -> Vec<&Shape> {
    match s {
        Shape::Tuple(items) => items.iter().flat_map(flat_arrays).collect(),
        other => vec![other],
    }
}

pub fn row_major_strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * dims[d + 1];
    }
    s
}

impl<'e, 'f> Emitter<'e, 'f> {
    pub fn new(
        b: &'e mut FunctionBuilder<'f>,
        jm: &'e mut JITModule,
        m: &'e Module,
        comp: &'e Computation,
        leaves: HashMap<NodeIndex, Vec<Leaf>>,
    ) -> Emitter<'e, 'f> {
        Emitter {
            b,
            jm,
            m,
            comp,
            leaves,
            memo: HashMap::new(),
            vmemo: HashMap::new(),
            staged: HashMap::new(),
            bf16_exact: Default::default(),
        }
    }

    pub fn iconst(&mut self, v: i64) -> Value {
        self.b.ins().iconst(types::I64, v)
    }

    pub(crate) fn shape(&self, n: NodeIndex) -> &'e Shape {
        &self.comp.instr(n).shape
    }

    /// Forgets memoized values (after leaving a block whose values no longer dominate).
    pub fn forget(&mut self) {
        self.memo.clear();
        self.vmemo.clear();
    }

    /// The value of single-array instruction `n` at `idx`.
    pub fn at(&mut self, n: NodeIndex, idx: &[Value]) -> Result<Value, CgError> {
        let v = self.at_all(n, idx)?;
        v.first().copied().ok_or_else(|| {
            CgError::new(format!("`{}` has no array value", self.comp.instr(n).name))
        })
    }

    /// The values of `n` at `idx`: one per array of a tuple-shaped instruction (variadic
    /// reduce), else one.
    pub fn at_all(&mut self, n: NodeIndex, idx: &[Value]) -> Result<Vec<Value>, CgError> {
        let key = (n, idx.to_vec());
        if let Some(v) = self.memo.get(&key) {
            return Ok(v.clone());
        }
        let v = self.compute(n, idx)?;
        self.memo.insert(key, v.clone());
        Ok(v)
    }

    pub(crate) fn load_leaf(
        &mut self,
        n: NodeIndex,
        leaf: &[Leaf],
        idx: &[Value],
    ) -> Result<Vec<Value>, CgError> {
        let shapes: Vec<Shape> = flat_arrays(self.shape(n)).into_iter().cloned().collect();
        let mut out = Vec::new();
        for (l, s) in leaf.iter().zip(&shapes) {
            match *l {
                Leaf::Scalar(v) => out.push(v),
                Leaf::Buffer(base) => {
                    let e = elem_of(s)?;
                    let dims = static_dims(s)?;
                    let addr = self.address(base, &dims, e, idx);
                    out.push(ty::load(self.b, e, addr)?);
                }
                Leaf::Input(base) => {
                    let e = elem_of(s)?;
                    let dims = static_dims(s)?;
                    let addr = self.address(base, &dims, e, idx);
                    out.push(ty::load_with(self.b, e, addr, ty::input_flags())?);
                }
            }
        }
        Ok(out)
    }

    /// `base + (Σ idx·stride)·size`.
    pub fn address(&mut self, base: Value, dims: &[i64], e: ElemType, idx: &[Value]) -> Value {
        let strides = row_major_strides(dims);
        let mut off: Option<Value> = None;
        for (d, &i) in idx.iter().enumerate() {
            if dims[d] == 1 {
                continue;
            }
            let t = if strides[d] == 1 { i } else { self.b.ins().imul_imm_s(i, strides[d]) };
            off = Some(match off {
                None => t,
                Some(o) => self.b.ins().iadd(o, t),
            });
        }
        match off {
            None => base,
            Some(o) => {
                let o = self.b.ins().imul_imm_s(o, ty::size_of(e));
                self.b.ins().iadd(base, o)
            }
        }
    }

    fn clamp(&mut self, v: Value, lo: i64, hi: i64) -> Value {
        let lo = self.iconst(lo);
        let hi = self.iconst(hi.max(0));
        let v = self.b.ins().smax(v, lo);
        self.b.ins().smin(v, hi)
    }

    /// A scalar index operand as i64 (sign- or zero-extended by its type).
    fn scalar_index(&mut self, n: NodeIndex) -> Result<Value, CgError> {
        let v = self.at(n, &[])?;
        let e = elem_of(self.shape(n))?;
        Ok(match Repr::of(e)? {
            Repr::Int { ty, signed } if ty != types::I64 => {
                if signed {
                    self.b.ins().sextend(types::I64, v)
                } else {
                    self.b.ins().uextend(types::I64, v)
                }
            }
            Repr::Int { .. } => v,
            _ => return Err(CgError::new(format!("index operand of type {e}"))),
        })
    }

    fn compute(&mut self, n: NodeIndex, idx: &[Value]) -> Result<Vec<Value>, CgError> {
        if let Some(leaf) = self.leaves.get(&n).cloned() {
            return self.load_leaf(n, &leaf, idx);
        }
        let comp = self.comp;
        let ins = comp.instr(n);
        let ops = comp.operands(n);
        let out_shape = &ins.shape;
        let one = |v: Value| Ok(vec![v]);
        match &ins.op {
            Op::Parameter { .. } => {
                Err(CgError::new(format!("parameter `{}` has no buffer", ins.name)))
            }
            Op::Constant(lit) => {
                let e = elem_of(out_shape)?;
                let dims = static_dims(out_shape)?;
                if dims.iter().product::<i64>() != 1 {
                    return Err(CgError::new(format!(
                        "non-scalar constant `{}` without a buffer",
                        ins.name
                    )));
                }
                let bytes = lit.encode(e, 1).map_err(|e| CgError::new(e.to_string()))?;
                let v = match Repr::of(e)? {
                    Repr::F32 => {
                        let f = if e == ElemType::BF16 {
                            f32::from_bits((u16::from_le_bytes([bytes[0], bytes[1]]) as u32) << 16)
                        } else if e == ElemType::F16 {
                            half::f16::from_le_bytes([bytes[0], bytes[1]]).to_f32()
                        } else if let Some(v) = hlo_ir::narrow::to_f32(e, bytes[0]) {
                            v
                        } else {
                            f32::from_le_bytes(bytes[..4].try_into().unwrap())
                        };
                        self.b.ins().f32const(f)
                    }
                    Repr::F64 => {
                        self.b.ins().f64const(f64::from_le_bytes(bytes[..8].try_into().unwrap()))
                    }
                    Repr::Pred => self.b.ins().iconst(types::I8, bytes[0] as i64),
                    Repr::Int { ty, .. } => {
                        let mut buf = [0u8; 8];
                        buf[..bytes.len()].copy_from_slice(&bytes);
                        self.b.ins().iconst(ty, i64::from_le_bytes(buf))
                    }
                };
                one(v)
            }
            Op::Iota { dimension } => {
                let e = elem_of(out_shape)?;
                let i = idx[*dimension as usize];
                let v = match Repr::of(e)? {
                    Repr::Int { ty, .. } if ty != types::I64 => {
                        let v = self.b.ins().ireduce(ty, i);
                        ty::wrap_int(self.b, e, v)
                    }
                    Repr::Int { .. } => i,
                    Repr::F32 => {
                        let f = self.b.ins().fcvt_from_sint(types::F32, i);
                        ty::round_to(self.b, e, f)
                    }
                    Repr::F64 => self.b.ins().fcvt_from_sint(types::F64, i),
                    Repr::Pred => self.b.ins().ireduce(types::I8, i),
                };
                one(v)
            }
            Op::GetTupleElement { index } => {
                let all = self.at_all(ops[0], idx)?;
                // Only variadic reduces produce tuples element-wise; their leaves are arrays.
                let v = all
                    .get(*index as usize)
                    .copied()
                    .ok_or_else(|| CgError::new(format!("tuple index {index} out of range")))?;
                one(v)
            }
            Op::Compare { direction, kind } => {
                let e = elem_of(self.shape(ops[0]))?;
                let x = self.at(ops[0], idx)?;
                let y = self.at(ops[1], idx)?;
                one(scalar_ops::compare(self.b, *direction, *kind, e, x, y)?)
            }
            Op::Broadcast { dimensions } => {
                let sub: Vec<Value> = dimensions.iter().map(|&d| idx[d as usize]).collect();
                self.at_all(ops[0], &sub)
            }
            Op::Reshape { .. } | Op::Plain(Opcode::Bitcast) => {
                let from = static_dims(self.shape(ops[0]))?;
                let to = static_dims(out_shape)?;
                let (fe, te) = (elem_of(self.shape(ops[0]))?, elem_of(out_shape)?);
                if fe != te && fe.bits() != te.bits() {
                    return Err(CgError::unsupported(crate::Unsupported::BitcastWidth {
                        from: fe,
                        to: te,
                    }));
                }
                let sub = self.reshape_index(&from, &to, idx);
                let v = self.at(ops[0], &sub)?;
                // A bitcast may also change the element type (same width): the bits stay.
                one(if fe != te { scalar_ops::bitcast(self.b, fe, te, v)? } else { v })
            }
            Op::Transpose { dimensions } => {
                let mut sub = vec![idx[0]; dimensions.len()];
                for (i, &d) in dimensions.iter().enumerate() {
                    sub[d as usize] = idx[i];
                }
                self.at_all(ops[0], &sub)
            }
            Op::Slice { ranges } => {
                let sub = self.slice_index(ranges, idx);
                self.at_all(ops[0], &sub)
            }
            Op::Reverse { dimensions } => {
                let dims = static_dims(out_shape)?;
                let mut sub = idx.to_vec();
                for &d in dimensions {
                    let d = d as usize;
                    let last = self.iconst(dims[d] - 1);
                    sub[d] = self.b.ins().isub(last, idx[d]);
                }
                self.at_all(ops[0], &sub)
            }
            Op::Concatenate { dimension } => {
                let d = *dimension as usize;
                let mut result: Option<Value> = None;
                let mut offset = 0i64;
                let mut pieces = Vec::new();
                for &o in &ops {
                    let size = static_dims(self.shape(o))?[d];
                    pieces.push((o, offset, size));
                    offset += size;
                }
                // Last piece first, so earlier pieces win the select chain.
                for &(o, off, size) in pieces.iter().rev() {
                    if size == 0 {
                        continue;
                    }
                    let mut sub = idx.to_vec();
                    let local = self.b.ins().iadd_imm_s(idx[d], -off);
                    sub[d] = self.clamp(local, 0, size - 1);
                    let v = self.at(o, &sub)?;
                    result = Some(match result {
                        None => v,
                        Some(r) => {
                            let inside =
                                self.b.ins().icmp_imm_s(IntCC::SignedLessThan, idx[d], off + size);
                            self.b.ins().select(inside, v, r)
                        }
                    });
                }
                result
                    .map(|v| vec![v])
                    .ok_or_else(|| CgError::new("concatenate of empty operands".into()))
            }
            Op::Pad { config } => {
                let in_dims = static_dims(self.shape(ops[0]))?;
                let mut valid: Option<Value> = None;
                let mut sub = Vec::with_capacity(idx.len());
                for (d, p) in config.iter().enumerate() {
                    let j = self.b.ins().iadd_imm_s(idx[d], -p.lo);
                    let (k, ok) = self.dilated_position(j, p.interior + 1, in_dims[d]);
                    sub.push(self.clamp(k, 0, in_dims[d] - 1));
                    valid = Some(match valid {
                        None => ok,
                        Some(v) => self.b.ins().band(v, ok),
                    });
                }
                let padv = self.at(ops[1], &[])?;
                if in_dims.contains(&0) {
                    return one(padv);
                }
                let v = self.at(ops[0], &sub)?;
                one(match valid {
                    None => v,
                    Some(ok) => self.b.ins().select(ok, v, padv),
                })
            }
            Op::DynamicSlice { sizes } => {
                let in_dims = static_dims(self.shape(ops[0]))?;
                let mut sub = Vec::with_capacity(idx.len());
                for d in 0..idx.len() {
                    let s = self.scalar_index(ops[1 + d])?;
                    let s = self.clamp(s, 0, in_dims[d] - sizes[d]);
                    sub.push(self.b.ins().iadd(s, idx[d]));
                }
                self.at_all(ops[0], &sub)
            }
            Op::Plain(Opcode::DynamicUpdateSlice) => {
                let in_dims = static_dims(out_shape)?;
                let up_dims = static_dims(self.shape(ops[1]))?;
                let mut inside: Option<Value> = None;
                let mut sub = Vec::with_capacity(idx.len());
                for d in 0..idx.len() {
                    let s = self.scalar_index(ops[2 + d])?;
                    let s = self.clamp(s, 0, in_dims[d] - up_dims[d]);
                    let local = self.b.ins().isub(idx[d], s);
                    let ge = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, local, 0);
                    let lt = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, local, up_dims[d]);
                    let ok = self.b.ins().band(ge, lt);
                    inside = Some(match inside {
                        None => ok,
                        Some(v) => self.b.ins().band(v, ok),
                    });
                    sub.push(self.clamp(local, 0, up_dims[d] - 1));
                }
                let base = self.at(ops[0], idx)?;
                if up_dims.contains(&0) {
                    return one(base);
                }
                let upd = self.at(ops[1], &sub)?;
                one(match inside {
                    None => upd,
                    Some(ok) => self.b.ins().select(ok, upd, base),
                })
            }
            Op::Plain(Opcode::Select) => {
                let p_scalar = static_dims(self.shape(ops[0]))?.is_empty() && !idx.is_empty();
                let p = if p_scalar { self.at(ops[0], &[])? } else { self.at(ops[0], idx)? };
                let x = self.at(ops[1], idx)?;
                let y = self.at(ops[2], idx)?;
                one(self.b.ins().select(p, x, y))
            }
            Op::Plain(Opcode::Clamp) => {
                let e = elem_of(out_shape)?;
                let scalar = |s: &Shape| static_dims(s).map(|d| d.is_empty());
                let lo_idx: Vec<Value> =
                    if scalar(self.shape(ops[0]))? { vec![] } else { idx.to_vec() };
                let hi_idx: Vec<Value> =
                    if scalar(self.shape(ops[2]))? { vec![] } else { idx.to_vec() };
                let lo = self.at(ops[0], &lo_idx)?;
                let x = self.at(ops[1], idx)?;
                let hi = self.at(ops[2], &hi_idx)?;
                let t = scalar_ops::binary(self.jm, self.b, Opcode::Maximum, e, x, lo)?;
                one(scalar_ops::binary(self.jm, self.b, Opcode::Minimum, e, t, hi)?)
            }
            Op::Plain(Opcode::Convert) => {
                let from = elem_of(self.shape(ops[0]))?;
                let to = elem_of(out_shape)?;
                let x = self.at(ops[0], idx)?;
                one(scalar_ops::convert(self.b, from, to, x)?)
            }
            Op::Plain(Opcode::BitcastConvert) => {
                let from = elem_of(self.shape(ops[0]))?;
                let to = elem_of(out_shape)?;
                let (fb, tb) = (from.bits() as i64, to.bits() as i64);
                if fb == tb {
                    let x = self.at(ops[0], idx)?;
                    return one(scalar_ops::bitcast(self.b, from, to, x)?);
                }
                // Sub-byte elements (one per byte, see `ty`) pack into the low bits first.
                let int_of = |bits: i64| match bits {
                    1 | 2 | 4 | 8 => Ok(types::I8),
                    16 => Ok(types::I16),
                    32 => Ok(types::I32),
                    64 => Ok(types::I64),
                    _ => Err(CgError::unsupported(crate::Unsupported::BitcastConvertBits(bits))),
                };
                let (fty, tty) = (int_of(fb)?, int_of(tb)?);
                let uint = |bits: i64| match bits {
                    1 => ElemType::U1,
                    2 => ElemType::U2,
                    4 => ElemType::U4,
                    8 => ElemType::U8,
                    16 => ElemType::U16,
                    32 => ElemType::U32,
                    _ => ElemType::U64,
                };
                if fb > tb {
                    // Narrower: the last result dimension picks the piece (little-endian).
                    let (last, outer) = idx.split_last().ok_or_else(|| {
                        CgError::new("bitcast-convert to a narrower type of a scalar".into())
                    })?;
                    let x = self.at(ops[0], outer)?;
                    let bits = scalar_ops::bitcast(self.b, from, uint(fb), x)?;
                    let sh = self.b.ins().imul_imm_s(*last, tb);
                    let sh = if fty == types::I64 { sh } else { self.b.ins().ireduce(fty, sh) };
                    let piece = self.b.ins().ushr(bits, sh);
                    let piece = if tty == fty { piece } else { self.b.ins().ireduce(tty, piece) };
                    one(scalar_ops::bitcast(self.b, uint(tb), to, piece)?)
                } else {
                    // Wider: the operand's last dimension holds the pieces.
                    let mut acc: Option<Value> = None;
                    for k in 0..tb / fb {
                        let mut sub = idx.to_vec();
                        sub.push(self.iconst(k));
                        let x = self.at(ops[0], &sub)?;
                        let bits = scalar_ops::bitcast(self.b, from, uint(fb), x)?;
                        let w = if tty == fty { bits } else { self.b.ins().uextend(tty, bits) };
                        let w = if k == 0 { w } else { self.b.ins().ishl_imm_u(w, k * fb) };
                        acc = Some(match acc {
                            None => w,
                            Some(a) => self.b.ins().bor(a, w),
                        });
                    }
                    let acc = acc.ok_or_else(|| CgError::new("empty bitcast-convert".into()))?;
                    one(scalar_ops::bitcast(self.b, uint(tb), to, acc)?)
                }
            }
            Op::ReducePrecision { exponent_bits, mantissa_bits } => {
                let e = elem_of(out_shape)?;
                let x = self.at(ops[0], idx)?;
                one(scalar_ops::reduce_precision(self.b, e, x, *exponent_bits, *mantissa_bits)?)
            }
            Op::Reduce { dimensions, to_apply } => self.reduce(&ops, dimensions, *to_apply, idx),
            Op::ReduceWindow { window, to_apply } => {
                self.reduce_window(n, &ops, window, *to_apply, idx)
            }
            Op::Gather(g) => self.gather(n, &ops, g, idx),
            Op::Plain(op) if ops.len() == 1 => {
                let e = elem_of(self.shape(ops[0]))?;
                let x = self.at(ops[0], idx)?;
                one(scalar_ops::unary(self.jm, self.b, *op, e, x)?)
            }
            Op::Plain(op) if ops.len() == 2 => {
                let e = elem_of(self.shape(ops[0]))?;
                let x = self.at(ops[0], idx)?;
                let y = self.at(ops[1], idx)?;
                one(scalar_ops::binary(self.jm, self.b, *op, e, x, y)?)
            }
            Op::Call { to_apply, .. } => {
                let args: Vec<Value> =
                    ops.iter().map(|&o| self.at(o, idx)).collect::<Result<_, _>>()?;
                self.apply(*to_apply, &args)
            }
            Op::Map { to_apply, .. } => {
                let args: Vec<Value> =
                    ops.iter().map(|&o| self.at(o, idx)).collect::<Result<_, _>>()?;
                self.apply(*to_apply, &args)
            }
            other => Err(CgError::unsupported(crate::Unsupported::NoElementalForm(other.opcode()))
                .in_instruction(&ins.name)),
        }
    }

    /// Maps an index of the reshape's result to an index of its operand: dims are grouped
    /// where the products agree; inside a group the index is linearized and re-split.
    pub(crate) fn reshape_index(&mut self, from: &[i64], to: &[i64], idx: &[Value]) -> Vec<Value> {
        if from == to {
            return idx.to_vec();
        }
        let zero = self.iconst(0);
        let mut sub = vec![zero; from.len()];
        if from.contains(&0) || to.contains(&0) {
            return sub; // no element is ever read
        }
        let (mut i, mut j) = (0usize, 0usize);
        while i < from.len() || j < to.len() {
            // A group: dims [i0, i) of `from` and [j0, j) of `to` with equal products.
            let (i0, j0) = (i, j);
            let (mut pf, mut pt) = (1i64, 1i64);
            if i < from.len() {
                pf *= from[i];
                i += 1;
            }
            if j < to.len() {
                pt *= to[j];
                j += 1;
            }
            while pf != pt {
                if pf < pt && i < from.len() {
                    pf *= from[i];
                    i += 1;
                } else if j < to.len() {
                    pt *= to[j];
                    j += 1;
                } else {
                    break;
                }
            }
            if i == i0 + 1 && j == j0 + 1 {
                sub[i0] = idx[j0];
                continue;
            }
            // Linearize the `to` part of the group, then split it over the `from` part.
            let mut lin: Option<Value> = None;
            for k in j0..j {
                lin = Some(match lin {
                    None => idx[k],
                    Some(l) => {
                        let t = self.b.ins().imul_imm_s(l, to[k]);
                        self.b.ins().iadd(t, idx[k])
                    }
                });
            }
            let mut rest = lin.unwrap_or(zero);
            for k in (i0..i).rev() {
                if k == i0 {
                    sub[k] = rest;
                } else if from[k] == 1 {
                    sub[k] = zero;
                } else {
                    sub[k] = self.b.ins().urem_imm_u(rest, from[k]);
                    rest = self.b.ins().udiv_imm_u(rest, from[k]);
                }
            }
        }
        sub
    }

    /// Position `j` in an array of `n` elements dilated by `step` (elements `step` apart,
    /// holes between): the element index `j / step` and whether `j` hits an element
    /// (`0 ≤ j`, `j % step == 0`, `j / step < n`).
    pub(crate) fn dilated_position(&mut self, j: Value, step: i64, n: i64) -> (Value, Value) {
        if step <= 1 {
            let ge = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, j, 0);
            let lt = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, j, n);
            return (j, self.b.ins().band(ge, lt));
        }
        let nonneg = self.b.ins().icmp_imm_s(IntCC::SignedGreaterThanOrEqual, j, 0);
        let jc = self.clamp(j, 0, i64::MAX);
        let q = self.b.ins().udiv_imm_u(jc, step);
        let r = self.b.ins().urem_imm_u(jc, step);
        let on = self.b.ins().icmp_imm_s(IntCC::Equal, r, 0);
        let lt = self.b.ins().icmp_imm_s(IntCC::SignedLessThan, q, n);
        let ok = self.b.ins().band(nonneg, on);
        (q, self.b.ins().band(ok, lt))
    }

    /// The operand index of a `slice` at result index `idx`: `start + i·stride`.
    pub(crate) fn slice_index(
        &mut self,
        ranges: &[hlo_ir::op::SliceRange],
        idx: &[Value],
    ) -> Vec<Value> {
        let mut sub = Vec::with_capacity(idx.len());
        for (d, r) in ranges.iter().enumerate() {
            let mut i = idx[d];
            if r.stride != 1 {
                i = self.b.ins().imul_imm_s(i, r.stride);
            }
            if r.start != 0 {
                i = self.b.ins().iadd_imm_s(i, r.start);
            }
            sub.push(i);
        }
        sub
    }

    /// Emits scalar computation `id` on `args`, returning its root's values.
    pub fn apply(&mut self, id: CompId, args: &[Value]) -> Result<Vec<Value>, CgError> {
        let comp = self.m.comp(id);
        let mut leaves = HashMap::new();
        for p in comp.params() {
            if let Op::Parameter { number, .. } = comp.instr(p).op {
                let v = *args.get(number as usize).ok_or_else(|| {
                    CgError::new(format!(
                        "computation `{}` takes more arguments than given",
                        comp.name
                    ))
                })?;
                leaves.insert(p, vec![Leaf::Scalar(v)]);
            }
        }
        let root = comp
            .root()
            .ok_or_else(|| CgError::new(format!("computation `{}` has no root", comp.name)))?;
        let mut sub = Emitter::new(self.b, self.jm, self.m, comp, leaves);
        if let Op::Plain(Opcode::Tuple) = comp.instr(root).op {
            comp.operands(root).iter().map(|&o| sub.at(o, &[])).collect()
        } else {
            sub.at_all(root, &[])
        }
    }

    /// Emits `for i in 0..n { body(i) }` and leaves the builder after the loop.
    pub fn for_loop(
        &mut self,
        n: i64,
        body: impl FnMut(&mut Self, Value) -> Result<(), CgError>,
    ) -> Result<(), CgError> {
        self.for_range(0, n, 1, body)
    }

    /// Emits `for i in max(lo, 0)..min(hi, n) { body(i) }` with run-time bounds.
    pub fn for_dyn(
        &mut self,
        lo: Value,
        hi: Value,
        n: i64,
        body: impl FnMut(&mut Self, Value) -> Result<(), CgError>,
    ) -> Result<(), CgError> {
        let zero = self.iconst(0);
        let nn = self.iconst(n);
        let lo = self.b.ins().smax(lo, zero);
        let hi = self.b.ins().smin(hi, nn);
        self.for_values(lo, hi, 1, body)
    }

    /// Emits `for i in (start..end).step_by(step) { body(i) }` with run-time bounds.
    ///
    /// The loop is rotated: a guard, then the body in the loop's header block with the
    /// test at its end (`if start < end { do { body(i) } while i + step < end }`).
    /// Cranelift's optimizer moves loop-invariant pure values (and loads of
    /// [`Leaf::Input`] buffers) out of a loop only from its header block: with the test
    /// first and the body in a block of its own, nothing left the loop. Rotated, layer
    /// norm's per-row `rsqrt(var / n + eps)` is computed once per row instead of once per
    /// four elements, and address arithmetic of the outer indices leaves inner loops
    /// (measured: see the README).
    pub fn for_values(
        &mut self,
        start: Value,
        end: Value,
        step: i64,
        mut body: impl FnMut(&mut Self, Value) -> Result<(), CgError>,
    ) -> Result<(), CgError> {
        let head = self.b.create_block();
        let exit = self.b.create_block();
        self.b.append_block_param(head, types::I64);
        let any = self.b.ins().icmp(IntCC::SignedLessThan, start, end);
        self.b.ins().brif(any, head, &[start.into()], exit, &[]);
        self.b.switch_to_block(head);
        let i = self.b.block_params(head)[0];
        let saved = self.memo.clone();
        let vsaved = self.vmemo.clone();
        body(self, i)?;
        self.memo = saved;
        self.vmemo = vsaved;
        let next = self.b.ins().iadd_imm_s(i, step);
        let more = self.b.ins().icmp(IntCC::SignedLessThan, next, end);
        self.b.ins().brif(more, head, &[next.into()], exit, &[]);
        self.b.switch_to_block(exit);
        Ok(())
    }

    /// Emits `for i in (start..end).step_by(step) { body(i) }`.
    pub fn for_range(
        &mut self,
        start: i64,
        end: i64,
        step: i64,
        body: impl FnMut(&mut Self, Value) -> Result<(), CgError>,
    ) -> Result<(), CgError> {
        if start >= end {
            return Ok(());
        }
        let (s, e) = (self.iconst(start), self.iconst(end));
        self.for_values(s, e, step, body)
    }

    /// Emits `if cond { body }` and leaves the builder after it.
    pub fn if_then(
        &mut self,
        cond: Value,
        body: impl FnOnce(&mut Self) -> Result<(), CgError>,
    ) -> Result<(), CgError> {
        let then = self.b.create_block();
        let after = self.b.create_block();
        self.b.ins().brif(cond, then, &[], after, &[]);
        self.b.switch_to_block(then);
        let saved = self.memo.clone();
        let vsaved = self.vmemo.clone();
        body(self)?;
        self.memo = saved;
        self.vmemo = vsaved;
        self.b.ins().jump(after, &[]);
        self.b.switch_to_block(after);
        Ok(())
    }

    /// Loads element `idx` of leaf `n` (a buffer) without memoizing (the buffer may have
    /// been written since).
    pub fn load_fresh(&mut self, n: NodeIndex, idx: &[Value]) -> Result<Value, CgError> {
        let leaf = self.leaves.get(&n).cloned().ok_or_else(|| CgError::new("not a leaf".into()))?;
        Ok(self.load_leaf(n, &leaf, idx)?[0])
    }

    /// A reduction at output index `idx`: accumulators in variables, an inner loop nest
    /// over the reduced dimensions in row-major order (the interpreter's order).
    /// The combine of a reducer that is one f32 or bf16 `add`, `maximum`, `minimum` or
    /// `multiply` of its two parameters (callers check the types they vectorize).
    pub(crate) fn simple_reducer(&self, id: CompId) -> Option<Opcode> {
        let c = self.m.comp(id);
        let root = c.root()?;
        let ops = c.operands(root);
        let params = c.params();
        let ok = params.len() == 2
            && ops.len() == 2
            && ops.iter().all(|o| params.contains(o))
            && ops[0] != ops[1];
        match &c.instr(root).op {
            Op::Plain(
                op @ (Opcode::Add | Opcode::Maximum | Opcode::Minimum | Opcode::Multiply),
            ) if ok
                && matches!(
                    elem_of(&c.instr(root).shape).ok()?,
                    ElemType::F32 | ElemType::BF16
                ) =>
            {
                Some(*op)
            }
            _ => None,
        }
    }

    fn reduce(
        &mut self,
        ops: &[NodeIndex],
        dimensions: &[i64],
        to_apply: CompId,
        idx: &[Value],
    ) -> Result<Vec<Value>, CgError> {
        let k = ops.len() / 2;
        let last_in = static_dims(self.shape(ops[0]))?.len().wrapping_sub(1);
        if let (1, Some(op)) = (k, self.simple_reducer(to_apply))
            && dimensions.contains(&(last_in as i64))
            && elem_of(self.shape(ops[0]))? == ElemType::F32
            && static_dims(self.shape(ops[0]))?[last_in] >= 8
        {
            return self.reduce_rows(ops, dimensions, op, idx).map(|v| vec![v]);
        }
        let in_dims = static_dims(self.shape(ops[0]))?;
        let elems: Vec<ElemType> =
            (0..k).map(|i| elem_of(self.shape(ops[i]))).collect::<Result<_, _>>()?;
        let vars: Vec<_> = elems
            .iter()
            .map(|&e| Repr::of(e).map(|r| self.b.declare_var(r.ty())))
            .collect::<Result<_, _>>()?;
        for i in 0..k {
            let init = self.at(ops[k + i], &[])?;
            self.b.def_var(vars[i], init);
        }
        let reduced: Vec<usize> = {
            let mut d: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
            d.sort_unstable();
            d
        };
        let kept: Vec<usize> = (0..in_dims.len()).filter(|d| !reduced.contains(d)).collect();
        let mut full = vec![idx.first().copied().unwrap_or_else(|| self.iconst(0)); in_dims.len()];
        for (j, &d) in kept.iter().enumerate() {
            full[d] = idx[j];
        }
        self.reduce_nest(&reduced, 0, &in_dims, &mut full, &mut |em, full| {
            let xs: Vec<Value> = (0..k).map(|i| em.at(ops[i], full)).collect::<Result<_, _>>()?;
            let mut args: Vec<Value> = vars.iter().map(|&v| em.b.use_var(v)).collect();
            args.extend(xs);
            let r = em.apply(to_apply, &args)?;
            for i in 0..k {
                em.b.def_var(vars[i], r[i]);
            }
            Ok(())
        })?;
        Ok(vars.iter().map(|&v| self.b.use_var(v)).collect())
    }

    pub(crate) fn reduce_nest(
        &mut self,
        reduced: &[usize],
        level: usize,
        in_dims: &[i64],
        full: &mut [Value],
        body: &mut IndexBody<'_, 'e, 'f>,
    ) -> Result<(), CgError> {
        if level == reduced.len() {
            return body(self, full);
        }
        let d = reduced[level];
        let mut inner = full.to_vec();
        self.for_loop(in_dims[d], |em, i| {
            inner[d] = i;
            em.reduce_nest(reduced, level + 1, in_dims, &mut inner, body)
        })
    }

    fn reduce_window(
        &mut self,
        n: NodeIndex,
        ops: &[NodeIndex],
        window: &hlo_ir::op::Window,
        to_apply: CompId,
        idx: &[Value],
    ) -> Result<Vec<Value>, CgError> {
        let k = ops.len() / 2;
        let in_dims = static_dims(self.shape(ops[0]))?;
        let out_dims = static_dims(flat_arrays(self.shape(n))[0])?;
        let mut vars = Vec::with_capacity(k);
        for i in 0..k {
            let e = elem_of(self.shape(ops[i]))?;
            let var = self.b.declare_var(Repr::of(e)?.ty());
            let init = self.at(ops[k + i], &[])?;
            self.b.def_var(var, init);
            vars.push(var);
        }
        let rank = in_dims.len();
        let win: Vec<i64> = (0..rank).map(|d| window.dims.get(d).map_or(1, |w| w.size)).collect();
        let wd = window.dims.clone();
        let outer = idx.to_vec();
        let tap = |em: &mut Self, w: &[Value], wc: Option<&[i64]>| -> Result<(), CgError> {
            // Position in the (dilated, padded) input: out·stride + w·rhs_dilate − pad_lo.
            let mut ok: Option<Value> = None;
            let mut sub = Vec::with_capacity(rank);
            for d in 0..rank {
                let dim = wd.get(d).copied().unwrap_or_default();
                let a = em.b.ins().imul_imm_s(outer[d], dim.stride);
                let bw = em.b.ins().imul_imm_s(w[d], dim.rhs_dilate);
                let p = em.b.ins().iadd(a, bw);
                let p = em.b.ins().iadd_imm_s(p, -dim.pad_lo);
                // A tap known at compile time that is inside the input for every output
                // needs no check.
                if wc.is_some_and(|wc| tap_always_inside(&dim, wc[d], out_dims[d], in_dims[d])) {
                    sub.push(p);
                    continue;
                }
                let (q, valid) = em.dilated_position(p, dim.lhs_dilate, in_dims[d]);
                sub.push(em.clamp(q, 0, in_dims[d] - 1));
                ok = Some(match ok {
                    None => valid,
                    Some(o) => em.b.ins().band(o, valid),
                });
            }
            let mut args: Vec<Value> = vars.iter().map(|&v| em.b.use_var(v)).collect();
            for &o in &ops[..k] {
                args.push(em.at(o, &sub)?);
            }
            let r = em.apply(to_apply, &args)?;
            for i in 0..k {
                let acc = args[i];
                let v = match ok {
                    None => r[i],
                    Some(ok) => em.b.ins().select(ok, r[i], acc),
                };
                em.b.def_var(vars[i], v);
            }
            Ok(())
        };
        self.for_window_taps(&win, &tap)?;
        Ok(vars.iter().map(|&v| self.b.use_var(v)).collect())
    }

    /// Calls `tap` at every position of a window of sizes `win`, in row-major order:
    /// straight-line code with constant positions (also given to `tap` as numbers) for
    /// windows of at most [`UNROLLED_TAPS`] positions, loops (and `None`) for bigger ones.
    pub(crate) fn for_window_taps(
        &mut self,
        win: &[i64],
        tap: &TapBody<'_, 'e, 'f>,
    ) -> Result<(), CgError> {
        if let Some(taps) = small_window_taps(win) {
            for wc in taps {
                let w: Vec<Value> = wc.iter().map(|&c| self.iconst(c)).collect();
                tap(self, &w, Some(&wc))?;
            }
            return Ok(());
        }
        let all: Vec<usize> = (0..win.len()).collect();
        let zero = self.iconst(0);
        let mut w = vec![zero; win.len()];
        self.reduce_nest(&all, 0, win, &mut w, &mut |em, w| tap(em, w, None))
    }

    fn gather(
        &mut self,
        n: NodeIndex,
        ops: &[NodeIndex],
        g: &hlo_ir::op::GatherDims,
        idx: &[Value],
    ) -> Result<Vec<Value>, CgError> {
        let operand_dims = static_dims(self.shape(ops[0]))?;
        let ind_dims = static_dims(self.shape(ops[1]))?;
        let out_rank = static_dims(self.shape(n))?.len();
        let ivd = g.index_vector_dim as usize;
        // Batch dims of the output: those not in offset_dims, in order.
        let batch_out: Vec<usize> =
            (0..out_rank).filter(|d| !g.offset_dims.contains(&(*d as i64))).collect();
        // Index into start_indices for the batch position (index_vector_dim inserted).
        let mut ind_idx: Vec<Value> = Vec::with_capacity(ind_dims.len());
        {
            let mut bi = batch_out.iter();
            for d in 0..ind_dims.len() {
                if d == ivd {
                    ind_idx.push(idx[0]); // placeholder, set per component
                } else {
                    let od = *bi
                        .next()
                        .ok_or_else(|| CgError::new("gather: batch dims mismatch".into()))?;
                    ind_idx.push(idx[od]);
                }
            }
        }
        // Operand dims that are windows (not collapsed, not batching) map to offset_dims in order.
        let window_dims: Vec<usize> = (0..operand_dims.len())
            .filter(|d| {
                !g.collapsed_slice_dims.contains(&(*d as i64))
                    && !g.operand_batching_dims.contains(&(*d as i64))
            })
            .collect();
        let zero = self.iconst(0);
        let mut sub = vec![zero; operand_dims.len()];
        for (k, &od) in window_dims.iter().enumerate() {
            sub[od] = idx[g.offset_dims[k] as usize];
        }
        for (k, &od) in g.start_index_map.iter().enumerate() {
            let od = od as usize;
            let mut ii = ind_idx.clone();
            if ivd < ind_dims.len() {
                ii[ivd] = self.iconst(k as i64);
            }
            let e = elem_of(self.shape(ops[1]))?;
            let s = self.at(ops[1], &ii)?;
            let s = match Repr::of(e)? {
                Repr::Int { ty, signed } if ty != types::I64 => {
                    if signed {
                        self.b.ins().sextend(types::I64, s)
                    } else {
                        self.b.ins().uextend(types::I64, s)
                    }
                }
                _ => s,
            };
            let s = self.clamp(s, 0, operand_dims[od] - g.slice_sizes[od]);
            sub[od] = self.b.ins().iadd(sub[od], s);
        }
        // Batching dims: operand_batching_dims[k] takes the batch index of
        // start_indices_batching_dims[k].
        for (k, &obd) in g.operand_batching_dims.iter().enumerate() {
            let sbd = g.start_indices_batching_dims[k] as usize;
            sub[obd as usize] = ind_idx[sbd];
        }
        self.at_all(ops[0], &sub)
    }
}

/// `op(x, y)` for the combine of a simple reducer ([`Emitter::simple_reducer`]): IEEE
/// `fmax`/`fmin` for maximum/minimum, on scalars or vectors alike (vector code calls
/// [`super::vector::combine_v`], the same values in fewer instructions).
pub(crate) fn combine(b: &mut FunctionBuilder, op: Opcode, x: Value, y: Value) -> Value {
    match op {
        Opcode::Add => b.ins().fadd(x, y),
        Opcode::Multiply => b.ins().fmul(x, y),
        Opcode::Maximum => b.ins().fmax(x, y),
        _ => b.ins().fmin(x, y),
    }
}

/// The taps of a window of at most [`UNROLLED_TAPS`] positions, row-major (the order the
/// window loops visit them), or `None` for a bigger window.
pub(crate) fn small_window_taps(win: &[i64]) -> Option<Vec<Vec<i64>>> {
    let count = win.iter().try_fold(1i64, |a, &w| a.checked_mul(w))?;
    if count > UNROLLED_TAPS {
        return None;
    }
    let mut taps = vec![Vec::new()];
    for &w in win {
        taps = taps
            .into_iter()
            .flat_map(|t| (0..w).map(move |i| [t.clone(), vec![i]].concat()))
            .collect();
    }
    Some(taps)
}

/// Windows up to this many taps are emitted as straight-line code.
pub(crate) const UNROLLED_TAPS: i64 = 16;

/// Whether window tap `w` of a dim reads inside the input (no padding, no dilation hole)
/// for every one of the `out` output positions: `o·stride + w·rhs_dilate − pad_lo` in
/// `0..input` for `o` in `0..out`, with no lhs dilation.
pub(crate) fn tap_always_inside(dim: &hlo_ir::op::WindowDim, w: i64, out: i64, input: i64) -> bool {
    if dim.lhs_dilate > 1 || out <= 0 {
        return false;
    }
    let first = w * dim.rhs_dilate - dim.pad_lo;
    let last = (out - 1) * dim.stride + first;
    first >= 0 && last < input
}
