//! Four lanes at a time: the vector form of the elemental emitter, used for the innermost
//! loop of f32/bf16 loop kernels (f32x4 main loop, scalar tail).
//!
//! `at_v(n, idx, lane)` gives the values of instruction `n` at `idx` and the three next
//! positions along dimension `lane` of `n`'s index (`None`: the same position in every
//! lane, a splat). Float values are `f32x4`, pred values `i32x4` masks (all ones or zero).
//! The lane dimension is mapped through data movement the way indices are: a broadcast
//! drops it or moves it, a transpose permutes it, a reshape keeps it when the innermost
//! sizes agree. Loads are one vector load when the lane dimension is a buffer's last (or a
//! splat when there is none). Anything without a vector form (integer arithmetic, gathers,
//! reductions, a reshape that splits the lanes, math functions) is computed per lane with
//! the scalar emitter and assembled, so every kernel can take this path and stays exact:
//! each lane computes exactly what the scalar code computes.

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlagsData, Value, types};
use hlo_ir::{ElemType, NodeIndex, Op, Opcode};

use super::CgError;
use super::elemental::{Emitter, Leaf, elem_of, static_dims};
use super::ty::{self, Repr};

pub(crate) fn vflags() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// `maxps`/`minps` of `acc` and `x` (`x > acc ? x : acc`, `x < acc ? x : acc`): one
/// instruction, which Cranelift emits for exactly this pattern; IEEE max/min except for a
/// NaN `x` (kept out) and ties of `+0` and `-0`.
pub(crate) fn pminmax(
    b: &mut cranelift_frontend::FunctionBuilder,
    max: bool,
    acc: Value,
    x: Value,
) -> Value {
    use cranelift_codegen::ir::condcodes::FloatCC;
    let take = if max {
        b.ins().fcmp(FloatCC::LessThan, acc, x)
    } else {
        b.ins().fcmp(FloatCC::LessThan, x, acc)
    };
    let take = b.ins().bitcast(types::F32X4, vflags(), take);
    b.ins().bitselect(take, x, acc)
}

/// IEEE 754-2019 `maximum` (`max`) or `minimum` of two f32x4 vectors, exactly as Cranelift's
/// `fmax`/`fmin` and the interpreter compute them (NaN if either is NaN, the canonical
/// quiet NaN; `+0` above `-0`), in five instructions instead of `fmax`'s eight: `maxps` both
/// ways round (they agree but on ties of `+0` and `-0`, where each returns its second
/// operand, and on NaNs), their AND (OR for min: the preferred zero's sign), and a blend of
/// the NaN lanes. Measured (release, this 2-core host, one thread, `hloc run --repeat
/// 300`, three alternating runs): `max(min(y, max(x, 0)), x)` over `256 x 4096` went from
/// 652-654 to 414 µs.
pub(crate) fn ieee_minmax(
    b: &mut cranelift_frontend::FunctionBuilder,
    max: bool,
    x: Value,
    y: Value,
) -> Value {
    let one = pminmax(b, max, x, y);
    let other = pminmax(b, max, y, x);
    let both = if max { b.ins().band(one, other) } else { b.ins().bor(one, other) };
    let nan = b.ins().fcmp(FloatCC::Unordered, x, y);
    let nan = b.ins().bitcast(types::F32X4, vflags(), nan);
    let canonical = b.ins().f32const(f32::NAN);
    let canonical = b.ins().splat(types::F32X4, canonical);
    b.ins().bitselect(nan, canonical, both)
}

/// [`super::elemental::combine`] for f32x4 vectors: maximum and minimum by [`ieee_minmax`].
pub(crate) fn combine_v(
    b: &mut cranelift_frontend::FunctionBuilder,
    op: Opcode,
    x: Value,
    y: Value,
) -> Value {
    match op {
        Opcode::Maximum | Opcode::Minimum => ieee_minmax(b, op == Opcode::Maximum, x, y),
        _ => super::elemental::combine(b, op, x, y),
    }
}

/// Whether a node's values can be vectors: f32/bf16 (as f32x4) and pred (as masks).
fn vector_elem(e: ElemType) -> bool {
    matches!(e, ElemType::F32 | ElemType::BF16 | ElemType::Pred)
}

impl Emitter<'_, '_> {
    fn splat_f32(&mut self, x: f32) -> Value {
        let s = self.b.ins().f32const(x);
        self.b.ins().splat(types::F32X4, s)
    }

    /// A scalar compute value of type `e` as a vector lane value.
    fn lane_value(&mut self, e: ElemType, v: Value) -> Value {
        if e == ElemType::Pred {
            // 0/1 → 0/-1 (a mask lane).
            let w = self.b.ins().uextend(types::I32, v);
            self.b.ins().ineg(w)
        } else {
            v
        }
    }

    fn vtype(e: ElemType) -> types::Type {
        if e == ElemType::Pred { types::I32X4 } else { types::F32X4 }
    }

    /// Per-lane fallback: the scalar emitter at each lane's index, assembled.
    fn lanes(
        &mut self,
        n: NodeIndex,
        idx: &[Value],
        lane: Option<usize>,
    ) -> Result<Value, CgError> {
        let e = elem_of(self.shape(n))?;
        let vt = Self::vtype(e);
        let Some(d) = lane else {
            let s = self.at(n, idx)?;
            let s = self.lane_value(e, s);
            return Ok(self.b.ins().splat(vt, s));
        };
        let mut v: Option<Value> = None;
        for k in 0..4u8 {
            let mut ik = idx.to_vec();
            if k > 0 {
                ik[d] = self.b.ins().iadd_imm_s(idx[d], k as i64);
            }
            let s = self.at(n, &ik)?;
            let s = self.lane_value(e, s);
            v = Some(match v {
                None => self.b.ins().splat(vt, s),
                Some(v) => self.b.ins().insertlane(v, s, k),
            });
        }
        Ok(v.expect("four lanes"))
    }

    /// The vector value of `n` (see the module documentation).
    pub fn at_v(
        &mut self,
        n: NodeIndex,
        idx: &[Value],
        lane: Option<usize>,
    ) -> Result<Value, CgError> {
        let key = (n, idx.to_vec(), lane);
        if let Some(&v) = self.vmemo.get(&key) {
            return Ok(v);
        }
        let v = self.compute_v(n, idx, lane)?;
        self.vmemo.insert(key, v);
        Ok(v)
    }

    fn compute_v(
        &mut self,
        n: NodeIndex,
        idx: &[Value],
        lane: Option<usize>,
    ) -> Result<Value, CgError> {
        let shape = self.shape(n);
        let e = elem_of(shape)?;
        if !vector_elem(e) {
            return Err(CgError::new(format!("a vector of {e} values")));
        }
        if lane.is_none() {
            // The same in every lane: computed once.
            return self.lanes(n, idx, None);
        }
        if let Some(st) = self.staged.get(&n)
            && st.covers(idx, lane)
        {
            // Computed ahead for this chunk by the host's vector entry point.
            let (buf, base, d) = (st.buf, st.base, st.lane);
            let off = self.b.ins().isub(idx[d], base);
            let off = self.b.ins().ishl_imm_u(off, 2);
            let addr = self.b.ins().iadd(buf, off);
            let v = self.b.ins().load(types::F32X4, ty::flags(), addr, 0);
            return Ok(self.round_v(e, v));
        }
        if let Some(leaf) = self.leaves.get(&n).cloned() {
            return self.load_v(n, &leaf, idx, lane);
        }
        let comp = self.comp;
        let ins = comp.instr(n);
        let ops = comp.operands(n);
        let op_elem = |em: &Self, i: usize| elem_of(em.shape(ops[i]));
        match &ins.op {
            Op::Constant(_) => self.lanes(n, idx, None),
            Op::Reduce { dimensions, to_apply } if ops.len() == 2 && e == ElemType::F32 => {
                // Lanes along a kept dimension: one vector accumulator, the same order per
                // lane as the scalar code.
                let in_dims = static_dims(self.shape(ops[0]))?;
                let kept: Vec<usize> =
                    (0..in_dims.len()).filter(|d| !dimensions.contains(&(*d as i64))).collect();
                let (Some(op), Some(d)) = (self.simple_reducer(*to_apply), lane) else {
                    return self.lanes(n, idx, lane);
                };
                let mut reduced: Vec<usize> = dimensions.iter().map(|&d| d as usize).collect();
                reduced.sort_unstable();
                let zero = self.iconst(0);
                let mut full = vec![zero; in_dims.len()];
                for (j, &kd) in kept.iter().enumerate() {
                    full[kd] = idx[j];
                }
                let in_lane = kept[d];
                let vacc = self.b.declare_var(types::F32X4);
                let init = self.at_v(ops[1], &[], None)?;
                self.b.def_var(vacc, init);
                let input = ops[0];
                self.reduce_nest(&reduced, 0, &in_dims, &mut full, &mut |em, full| {
                    let x = em.at_v(input, full, Some(in_lane))?;
                    let a = em.b.use_var(vacc);
                    let r = combine_v(em.b, op, a, x);
                    em.b.def_var(vacc, r);
                    Ok(())
                })?;
                Ok(self.b.use_var(vacc))
            }
            Op::ReduceWindow { window, to_apply }
                if lane.is_some_and(|d| self.reduce_window_lanes(n, d)) =>
            {
                // Lanes along a dimension the window does not span: each tap is one vector
                // of the input, combined in the scalar code's order.
                let d = lane.expect("checked");
                let op = self.simple_reducer(*to_apply).expect("checked");
                let in_dims = static_dims(self.shape(ops[0]))?;
                let win: Vec<i64> =
                    (0..in_dims.len()).map(|k| window.dims.get(k).map_or(1, |w| w.size)).collect();
                let mut acc = self.at_v(ops[1], &[], None)?;
                for wc in super::elemental::small_window_taps(&win).expect("checked") {
                    let mut sub = Vec::with_capacity(in_dims.len());
                    for (k, &w) in wc.iter().enumerate() {
                        let dim = window.dims.get(k).copied().unwrap_or_default();
                        let a = self.b.ins().imul_imm_s(idx[k], dim.stride);
                        sub.push(self.b.ins().iadd_imm_s(a, w * dim.rhs_dilate - dim.pad_lo));
                    }
                    sub[d] = idx[d];
                    let x = self.at_v(ops[0], &sub, Some(d))?;
                    acc = combine_v(self.b, op, acc, x);
                }
                Ok(acc)
            }
            Op::Iota { dimension } if e != ElemType::Pred => {
                let i = idx[*dimension as usize];
                let f = self.b.ins().fcvt_from_sint(types::F32, i);
                let base = self.b.ins().splat(types::F32X4, f);
                if lane == Some(*dimension as usize) {
                    let mut steps = self.splat_f32(0.0);
                    for k in 1..4u8 {
                        let c = self.b.ins().f32const(k as f32);
                        steps = self.b.ins().insertlane(steps, c, k);
                    }
                    let v = self.b.ins().fadd(base, steps);
                    Ok(self.round_v(e, v))
                } else {
                    Ok(self.round_v(e, base))
                }
            }
            Op::Broadcast { dimensions } => {
                let sub: Vec<Value> = dimensions.iter().map(|&d| idx[d as usize]).collect();
                let l = lane.and_then(|d| dimensions.iter().position(|&x| x as usize == d));
                if vector_elem(op_elem(self, 0)?) {
                    self.at_v(ops[0], &sub, l)
                } else {
                    self.lanes(n, idx, lane)
                }
            }
            Op::Transpose { dimensions } => {
                let mut sub = vec![idx[0]; dimensions.len()];
                for (i, &d) in dimensions.iter().enumerate() {
                    sub[d as usize] = idx[i];
                }
                self.at_v(ops[0], &sub, lane.map(|d| dimensions[d] as usize))
            }
            Op::Reshape { .. } | Op::Plain(Opcode::Bitcast) if op_elem(self, 0)? == e => {
                let from = static_dims(self.shape(ops[0]))?;
                let to = static_dims(shape)?;
                // The lanes stay inside one row of both shapes when the innermost sizes
                // agree (the loop only vectorizes the last dimension in groups of four).
                if lane == Some(to.len() - 1) && !from.is_empty() && from.last() == to.last() {
                    let sub = self.reshape_index(&from, &to, idx);
                    self.at_v(ops[0], &sub, Some(from.len() - 1))
                } else {
                    self.lanes(n, idx, lane)
                }
            }
            Op::Slice { ranges } if lane.is_none_or(|d| ranges[d].stride == 1) => {
                let sub = self.slice_index(ranges, idx);
                self.at_v(ops[0], &sub, lane)
            }
            Op::Compare { direction, kind }
                if kind.is_none_or(|k| k == hlo_ir::op::CmpType::Float)
                    && matches!(op_elem(self, 0)?, ElemType::F32 | ElemType::BF16) =>
            {
                let x = self.at_v(ops[0], idx, lane)?;
                let y = self.at_v(ops[1], idx, lane)?;
                let cc = match direction {
                    hlo_ir::op::CmpDirection::Eq => FloatCC::Equal,
                    hlo_ir::op::CmpDirection::Ne => FloatCC::NotEqual,
                    hlo_ir::op::CmpDirection::Lt => FloatCC::LessThan,
                    hlo_ir::op::CmpDirection::Le => FloatCC::LessThanOrEqual,
                    hlo_ir::op::CmpDirection::Gt => FloatCC::GreaterThan,
                    hlo_ir::op::CmpDirection::Ge => FloatCC::GreaterThanOrEqual,
                };
                Ok(self.b.ins().fcmp(cc, x, y))
            }
            Op::Plain(Opcode::Select) if e != ElemType::Pred => {
                let p_scalar = static_dims(self.shape(ops[0]))?.is_empty() && !idx.is_empty();
                let p = if p_scalar {
                    self.at_v(ops[0], &[], None)?
                } else {
                    self.at_v(ops[0], idx, lane)?
                };
                let x = self.at_v(ops[1], idx, lane)?;
                let y = self.at_v(ops[2], idx, lane)?;
                let m = self.b.ins().bitcast(types::F32X4, vflags(), p);
                let v = self.b.ins().bitselect(m, x, y);
                if self.bf16_exact.contains(&x) && self.bf16_exact.contains(&y) {
                    self.bf16_exact.insert(v);
                }
                Ok(v)
            }
            Op::Plain(Opcode::Convert)
                if matches!(op_elem(self, 0)?, ElemType::F32 | ElemType::BF16)
                    && e != ElemType::Pred =>
            {
                let x = self.at_v(ops[0], idx, lane)?;
                Ok(self.round_v(e, x))
            }
            Op::Plain(Opcode::Convert)
                if op_elem(self, 0)? == ElemType::Pred && e != ElemType::Pred =>
            {
                let m = self.at_v(ops[0], idx, lane)?;
                let one = self.splat_f32(1.0);
                let zero = self.splat_f32(0.0);
                let m = self.b.ins().bitcast(types::F32X4, vflags(), m);
                Ok(self.b.ins().bitselect(m, one, zero))
            }
            Op::Plain(op) if ops.len() == 1 && e != ElemType::Pred && op_elem(self, 0)? == e => {
                let x = self.at_v(ops[0], idx, lane)?;
                let v = match op {
                    Opcode::Negate => self.b.ins().fneg(x),
                    Opcode::Abs => self.b.ins().fabs(x),
                    Opcode::Sqrt => self.b.ins().sqrt(x),
                    Opcode::Rsqrt => {
                        let s = self.b.ins().sqrt(x);
                        let one = self.splat_f32(1.0);
                        self.b.ins().fdiv(one, s)
                    }
                    Opcode::Floor => self.b.ins().floor(x),
                    Opcode::Ceil => self.b.ins().ceil(x),
                    Opcode::RoundNearestEven => self.b.ins().nearest(x),
                    Opcode::Copy | Opcode::OptBarrier | Opcode::Real => x,
                    Opcode::Imag => self.splat_f32(0.0),
                    Opcode::Exp => super::math::exp(self.b, x),
                    Opcode::Expm1 => super::math::expm1(self.b, x),
                    Opcode::Log => super::math::log(self.b, x),
                    Opcode::Log1p => super::math::log1p(self.b, x),
                    Opcode::Tanh => super::math::tanh(self.b, x),
                    Opcode::Logistic => super::math::logistic(self.b, x),
                    Opcode::Erf => super::math::erf(self.b, x),
                    Opcode::Sin => super::math::sin(self.b, x),
                    Opcode::Cos => super::math::cos(self.b, x),
                    Opcode::Cbrt => super::math::cbrt(self.b, x),
                    _ => return self.lanes(n, idx, lane),
                };
                Ok(self.round_v(e, v))
            }
            Op::Plain(op) if ops.len() == 2 && e != ElemType::Pred && op_elem(self, 0)? == e => {
                let x = self.at_v(ops[0], idx, lane)?;
                let y = self.at_v(ops[1], idx, lane)?;
                let v = match op {
                    Opcode::Add => self.b.ins().fadd(x, y),
                    Opcode::Subtract => self.b.ins().fsub(x, y),
                    Opcode::Multiply => self.b.ins().fmul(x, y),
                    Opcode::Divide => self.b.ins().fdiv(x, y),
                    Opcode::Maximum => ieee_minmax(self.b, true, x, y),
                    Opcode::Minimum => ieee_minmax(self.b, false, x, y),
                    Opcode::Power => super::math::pow(self.b, x, y),
                    Opcode::Atan2 => super::math::atan2(self.b, x, y),
                    _ => return self.lanes(n, idx, lane),
                };
                // The larger or smaller of two bf16 values (or the canonical NaN) is one.
                if matches!(op, Opcode::Maximum | Opcode::Minimum)
                    && self.bf16_exact.contains(&x)
                    && self.bf16_exact.contains(&y)
                {
                    self.bf16_exact.insert(v);
                }
                Ok(self.round_v(e, v))
            }
            Op::Plain(op)
                if ops.len() == 2
                    && e == ElemType::Pred
                    && op_elem(self, 0)? == ElemType::Pred
                    && matches!(op, Opcode::And | Opcode::Or | Opcode::Xor) =>
            {
                let x = self.at_v(ops[0], idx, lane)?;
                let y = self.at_v(ops[1], idx, lane)?;
                Ok(match op {
                    Opcode::And => self.b.ins().band(x, y),
                    Opcode::Or => self.b.ins().bor(x, y),
                    _ => self.b.ins().bxor(x, y),
                })
            }
            _ => self.lanes(n, idx, lane),
        }
    }

    /// Whether reduce-window `n` vectorizes with lanes along dimension `d`: one f32 operand,
    /// a simple reducer, a small window that spans one element of `d` with stride 1 and no
    /// padding there, and every tap inside the input for every output (no checks).
    pub(crate) fn reduce_window_lanes(&self, n: NodeIndex, d: usize) -> bool {
        let Op::ReduceWindow { window, to_apply } = &self.comp.instr(n).op else { return false };
        let ops = self.comp.operands(n);
        if ops.len() != 2
            || elem_of(self.shape(n)).ok() != Some(ElemType::F32)
            || elem_of(self.shape(ops[0])).ok() != Some(ElemType::F32)
            || self.simple_reducer(*to_apply).is_none()
        {
            return false;
        }
        let (Ok(in_dims), Ok(out_dims)) =
            (static_dims(self.shape(ops[0])), static_dims(self.shape(n)))
        else {
            return false;
        };
        let dim = |k: usize| window.dims.get(k).copied().unwrap_or_default();
        let lane = dim(d);
        if d >= in_dims.len() || lane.size != 1 || lane.stride != 1 || lane.pad_lo != 0 {
            return false;
        }
        let win: Vec<i64> = (0..in_dims.len()).map(|k| dim(k).size).collect();
        let Some(taps) = super::elemental::small_window_taps(&win) else { return false };
        taps.iter().all(|wc| {
            wc.iter().enumerate().all(|(k, &w)| {
                super::elemental::tap_always_inside(&dim(k), w, out_dims[k], in_dims[k])
            })
        })
    }

    /// bf16 results are rounded to bf16 precision after every operation, as in scalar code.
    pub(crate) fn round_v(&mut self, e: ElemType, v: Value) -> Value {
        if e != ElemType::BF16 || self.bf16_exact.contains(&v) {
            return v;
        }
        let w = self.bf16_rounded_bits(v);
        let r = self.b.ins().bitcast(types::F32X4, vflags(), w);
        self.bf16_exact.insert(r);
        r
    }

    /// f32x4 → each lane rounded to bf16 (to nearest even, NaN kept quiet), as f32 bits
    /// whose low 16 are zero: `(bits + 0x7fff + lsb) & 0xffff0000`, or `(bits | quiet) &
    /// 0xffff0000` for a NaN. Written so that the rounded value is five instructions after
    /// `v` (the bias is added beside the shift and mask of the lsb) instead of seven (a
    /// shift down and up again): a chain of bf16 operations is bound by this latency.
    /// Measured (release, this 2-core host, one thread, `hloc run --repeat 50`): eight bf16
    /// operations over 1M elements went from 4287-4305 to 3360-3370 µs, the bf16 stores
    /// no longer rounding what is already rounded included.
    fn bf16_rounded_bits(&mut self, v: Value) -> Value {
        let splat = |b: &mut cranelift_frontend::FunctionBuilder, x: i64| {
            let c = b.ins().iconst(types::I32, x);
            b.ins().splat(types::I32X4, c)
        };
        let bits = self.b.ins().bitcast(types::I32X4, vflags(), v);
        let hi = self.b.ins().ushr_imm_u(bits, 16);
        let one = splat(self.b, 1);
        let lsb = self.b.ins().band(hi, one);
        let bias = splat(self.b, 0x7fff);
        let biased = self.b.ins().iadd(bits, bias);
        let r = self.b.ins().iadd(biased, lsb);
        let q = splat(self.b, 0x0040_0000);
        let quiet = self.b.ins().bor(bits, q);
        let nan = self.b.ins().fcmp(FloatCC::Unordered, v, v);
        let r = self.b.ins().bitselect(nan, quiet, r);
        let high = splat(self.b, 0xffff_0000_u32 as i32 as i64);
        self.b.ins().band(r, high)
    }

    /// f32x4 → the bf16 bits of each lane (rounded, [`Self::bf16_rounded_bits`], unless the
    /// value is a bf16 already) in the low 16 bits of an i32x4.
    fn f32x4_to_bf16_bits(&mut self, v: Value) -> Value {
        let w = if self.bf16_exact.contains(&v) {
            self.b.ins().bitcast(types::I32X4, vflags(), v)
        } else {
            self.bf16_rounded_bits(v)
        };
        self.b.ins().ushr_imm_u(w, 16)
    }

    fn load_v(
        &mut self,
        n: NodeIndex,
        leaf: &[Leaf],
        idx: &[Value],
        lane: Option<usize>,
    ) -> Result<Value, CgError> {
        let shape = self.shape(n).clone();
        let e = elem_of(&shape)?;
        let dims = static_dims(&shape)?;
        match (leaf.first(), lane) {
            (Some(&(Leaf::Buffer(base) | Leaf::Input(base))), Some(d))
                if d + 1 == dims.len() && e != ElemType::Pred =>
            {
                let flags = match leaf[0] {
                    Leaf::Input(_) => ty::input_flags(),
                    _ => ty::flags(),
                };
                let addr = self.address(base, &dims, e, idx);
                Ok(if e == ElemType::BF16 {
                    let w = self.b.ins().uload16x4(flags, addr, 0);
                    let w = self.b.ins().ishl_imm_u(w, 16);
                    let v = self.b.ins().bitcast(types::F32X4, vflags(), w);
                    self.bf16_exact.insert(v);
                    v
                } else {
                    self.b.ins().load(types::F32X4, flags, addr, 0)
                })
            }
            _ => self.lanes(n, idx, lane),
        }
    }

    /// Stores four lanes of an f32/bf16 result at `addr`.
    pub fn store_v(&mut self, e: ElemType, v: Value, addr: Value) -> Result<(), CgError> {
        match Repr::of(e)? {
            Repr::F32 if e == ElemType::BF16 => {
                let bits = self.f32x4_to_bf16_bits(v);
                let halves = self.b.ins().unarrow(bits, bits);
                let wide = self.b.ins().bitcast(types::I64X2, vflags(), halves);
                let lo = self.b.ins().extractlane(wide, 0);
                self.b.ins().store(ty::flags(), lo, addr, 0);
            }
            Repr::F32 => {
                self.b.ins().store(ty::flags(), v, addr, 0);
            }
            _ => return Err(CgError::new(format!("a vector store of {e}"))),
        }
        Ok(())
    }
}
