//! `rng-bit-generator-expander`: rewrites `rng-bit-generator` into u32/u64 integer HLO
//! (iota counters, multiplies, shifts, xors, selects, slices and concatenates), the steps
//! of XLA's `RngBitGeneratorExpander` with the bit generators of its `prng.cc`, so the
//! JIT and the TPU model, which have no generator kernels, produce XLA's bits:
//!
//! - `rng_three_fry`: Threefry-2x32, 20 rounds (5 blocks of 4 rotations, key injections);
//!   32-bit and narrower outputs split the shape into two halves ([`Halves`]) and
//!   interleave the two words, 64-bit outputs join them;
//! - `rng_philox` and `rng_default` (Philox, as XLA's CPU backend): Philox-4x32, 10 rounds
//!   as u64 products split into high and low words, four words per 128-bit counter laid
//!   out round robin;
//! - other widths: the low bits of 32-bit words (8 and 16 bits). Signed and
//!   floating-point bits are refused at the instruction, as by the interpreter: XLA
//!   re-types them as unsigned (`interp::rng::generated_width`).
//!
//! The semantics (state layouts, counter updates) are documented in `interp::rng`, which
//! evaluates the op natively; tests check this pass against it. A state the algorithm
//! cannot take (Threefry: `u64[2]`; Philox: `u64[2]` or `u64[3]`) or an output type without
//! bits of 8 to 64 is an error at the instruction.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::{CmpDirection, RngAlgorithm, SliceRange};
use hlo_ir::{
    CompId, Computation, Diagnostic, ElemType, Instr, Module, NodeIndex, Op, Opcode, Shape,
};

use crate::expander::OpExpander;
use hlo_interp::rng::{self as sem, Halves};

pub struct RngBitGeneratorExpander;

impl OpExpander for RngBitGeneratorExpander {
    fn name(&self) -> &'static str {
        "rng-bit-generator-expander"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::RngBitGenerator { .. })
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        let comp = m.comp_mut(id);
        let i = comp.instr(n).clone();
        let Op::RngBitGenerator { algorithm } = i.op else { return Ok(None) };
        let span = i.span;
        let fail = |msg: String| {
            Diagnostic::error(span, format!("`{}` (rng-bit-generator): {msg}", i.name))
        };
        let Some(&state) = comp.operands(n).first() else { return Ok(None) };
        let state_shape = comp
            .instr(state)
            .shape
            .as_array()
            .filter(|a| a.elem == ElemType::U64)
            .and_then(|a| a.static_dims());
        let state_len = match state_shape {
            Some(d) if d.len() == 1 => d[0] as usize,
            _ => return Err(fail("the state must be a static u64 vector".into())),
        };
        let Some((elem, dims)) = (match &i.shape {
            Shape::Tuple(parts) => parts
                .get(1)
                .and_then(|s| s.as_array())
                .and_then(|a| Some((a.elem, a.static_dims()?))),
            _ => None,
        }) else {
            return Err(fail("the result must be a (state, bits) tuple of static arrays".into()));
        };
        sem::generated_width(elem).map_err(|e| fail(e.to_string()))?;
        match (algorithm, state_len) {
            (RngAlgorithm::ThreeFry, 2) | (RngAlgorithm::Philox | RngAlgorithm::Default, 2 | 3) => {
            }
            (RngAlgorithm::ThreeFry, k) => {
                return Err(fail(format!(
                    "rng_three_fry takes a u64[2] state (key, counter), not u64[{k}]"
                )));
            }
            (_, k) => {
                return Err(fail(format!(
                    "rng_philox takes a u64[2] or u64[3] state (key, counter), not u64[{k}]"
                )));
            }
        }
        let metadata = i.metadata.clone();
        let mut e = Emit { comp, metadata, span };
        let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let (new_state, bits) = e.bit_generator(algorithm, state, state_len, elem, &dims);
        Ok(Some(e.emit("tuple", Op::Plain(Opcode::Tuple), i.shape.clone(), &[new_state, bits])))
    }
}

fn unsigned(width: usize) -> ElemType {
    if width <= 8 { ElemType::U8 } else { ElemType::U16 }
}

fn shape(elem: ElemType, dims: &[usize]) -> Shape {
    Shape::array(elem, &dims.iter().map(|&d| d as u64).collect::<Vec<_>>())
}

/// Emits instructions into one computation with the metadata and span of the expanded
/// instruction (shared with `rng-expander`).
pub(crate) struct Emit<'c> {
    pub comp: &'c mut Computation,
    pub metadata: Option<Box<hlo_ir::instr::Metadata>>,
    pub span: hlo_ir::Span,
}

const U32: ElemType = ElemType::U32;
const U64: ElemType = ElemType::U64;

impl Emit<'_> {
    pub fn emit(&mut self, name: &str, op: Op, shape: Shape, operands: &[NodeIndex]) -> NodeIndex {
        let mut i = Instr::new(name, op, shape);
        i.metadata = self.metadata.clone();
        i.span = self.span;
        self.comp.add(i, operands)
    }
    fn dims(&self, x: NodeIndex) -> Vec<usize> {
        self.comp
            .instr(x)
            .shape
            .as_array()
            .and_then(|a| a.static_dims())
            .unwrap_or_default()
            .into_iter()
            .map(|d| d as usize)
            .collect()
    }
    pub fn elem(&self, x: NodeIndex) -> ElemType {
        self.comp.instr(x).shape.as_array().map_or(ElemType::U32, |a| a.elem)
    }
    pub fn int(&mut self, elem: ElemType, v: u64) -> NodeIndex {
        self.emit(
            "constant",
            Op::Constant(Literal::Array(LiteralData::Int(vec![v as i64]))),
            Shape::scalar(elem),
            &[],
        )
    }
    /// A scalar broadcast to `dims`.
    pub fn spread(&mut self, x: NodeIndex, dims: &[usize]) -> NodeIndex {
        let e = self.elem(x);
        self.emit("broadcast", Op::Broadcast { dimensions: Vec::new() }, shape(e, dims), &[x])
    }
    /// `op(a, b)` on operands of equal shape; the result has `a`'s shape.
    pub fn bin(&mut self, op: Opcode, a: NodeIndex, b: NodeIndex) -> NodeIndex {
        let s = self.comp.instr(a).shape.clone();
        self.emit(op.name(), Op::Plain(op), s, &[a, b])
    }
    /// `op(a, scalar)`, the scalar broadcast to `a`'s dims when `a` is not a scalar.
    pub fn bin_s(&mut self, op: Opcode, a: NodeIndex, scalar: NodeIndex) -> NodeIndex {
        let d = self.dims(a);
        let b = if d.is_empty() { scalar } else { self.spread(scalar, &d) };
        self.bin(op, a, b)
    }
    pub fn un(&mut self, op: Opcode, a: NodeIndex) -> NodeIndex {
        let s = self.comp.instr(a).shape.clone();
        self.emit(op.name(), Op::Plain(op), s, &[a])
    }
    pub fn convert(&mut self, a: NodeIndex, to: ElemType) -> NodeIndex {
        let d = self.dims(a);
        self.emit("convert", Op::Plain(Opcode::Convert), shape(to, &d), &[a])
    }
    pub fn bitcast_convert(&mut self, a: NodeIndex, to: ElemType) -> NodeIndex {
        let d = self.dims(a);
        self.emit("bitcast-convert", Op::Plain(Opcode::BitcastConvert), shape(to, &d), &[a])
    }
    pub fn reshape(&mut self, a: NodeIndex, dims: &[usize]) -> NodeIndex {
        let e = self.elem(a);
        self.emit("reshape", Op::Reshape { inferred_dimension: None }, shape(e, dims), &[a])
    }
    /// `a[starts..limits]` (stride 1).
    pub fn slice(&mut self, a: NodeIndex, starts: &[usize], limits: &[usize]) -> NodeIndex {
        let e = self.elem(a);
        let ranges = starts
            .iter()
            .zip(limits)
            .map(|(&s, &l)| SliceRange { start: s as i64, limit: l as i64, stride: 1 })
            .collect();
        let dims: Vec<usize> = starts.iter().zip(limits).map(|(&s, &l)| l - s).collect();
        self.emit("slice", Op::Slice { ranges }, shape(e, &dims), &[a])
    }
    pub fn concat(&mut self, parts: &[NodeIndex], dim: usize) -> NodeIndex {
        let e = self.elem(parts[0]);
        let mut dims = self.dims(parts[0]);
        dims[dim] = parts.iter().map(|&p| self.dims(p)[dim]).sum();
        self.emit("concatenate", Op::Concatenate { dimension: dim as i64 }, shape(e, &dims), parts)
    }
    /// Element `k` of a u64 vector as a scalar.
    fn element(&mut self, v: NodeIndex, k: usize) -> NodeIndex {
        let s = self.slice(v, &[k], &[k + 1]);
        self.reshape(s, &[])
    }
    fn lt(&mut self, a: NodeIndex, b: NodeIndex) -> NodeIndex {
        let d = self.dims(a);
        self.emit(
            "compare",
            Op::Compare { direction: CmpDirection::Lt, kind: None },
            shape(ElemType::Pred, &d),
            &[a, b],
        )
    }
    fn select(&mut self, p: NodeIndex, t: NodeIndex, f: NodeIndex) -> NodeIndex {
        let s = self.comp.instr(t).shape.clone();
        self.emit("select", Op::Plain(Opcode::Select), s, &[p, t, f])
    }
    /// The (low, high) 32-bit words of a u64 value.
    fn words(&mut self, x: NodeIndex) -> (NodeIndex, NodeIndex) {
        let lo = self.convert(x, U32);
        let c32 = self.int(U64, 32);
        let shifted = self.bin_s(Opcode::ShiftRightLogical, x, c32);
        let hi = self.convert(shifted, U32);
        (lo, hi)
    }
    /// `lo | hi << 32` as u64.
    fn join(&mut self, lo: NodeIndex, hi: NodeIndex) -> NodeIndex {
        let l = self.convert(lo, U64);
        let h = self.convert(hi, U64);
        let c32 = self.int(U64, 32);
        let h = self.bin_s(Opcode::ShiftLeft, h, c32);
        self.bin(Opcode::Or, l, h)
    }
    /// A 128-bit counter (lo, hi) plus a u64 value of `lo`'s dims (hi a scalar): the
    /// carry goes into the high word.
    fn add128(&mut self, lo: NodeIndex, hi: NodeIndex, x: NodeIndex) -> (NodeIndex, NodeIndex) {
        let d = self.dims(x);
        let lo_b = if d.is_empty() { lo } else { self.spread(lo, &d) };
        let sum = self.bin(Opcode::Add, lo_b, x);
        let carry = self.lt(sum, lo_b);
        let one = self.int(U64, 1);
        let hi1 = self.bin(Opcode::Add, hi, one);
        let (hi1, hi0) =
            if d.is_empty() { (hi1, hi) } else { (self.spread(hi1, &d), self.spread(hi, &d)) };
        let high = self.select(carry, hi1, hi0);
        (sum, high)
    }

    /// Expands `rng-bit-generator` on `state` (u64[state_len]) for `elem[dims]`; returns
    /// (new state, bits).
    pub fn bit_generator(
        &mut self,
        alg: RngAlgorithm,
        state: NodeIndex,
        state_len: usize,
        elem: ElemType,
        dims: &[usize],
    ) -> (NodeIndex, NodeIndex) {
        let width = elem.bits() as usize;
        let key = self.element(state, 0);
        let (new_state, raw) = match alg {
            RngAlgorithm::ThreeFry => {
                let counter = self.element(state, 1);
                self.threefry(key, counter, dims, width)
            }
            RngAlgorithm::Philox | RngAlgorithm::Default => {
                let lo = self.element(state, 1);
                let hi = if state_len >= 3 { self.element(state, 2) } else { key };
                let (bits, new_lo, new_hi) = self.philox(key, lo, hi, dims, width);
                let mut parts = vec![new_lo];
                if state_len >= 3 {
                    parts.push(new_hi);
                }
                (parts, bits)
            }
        };
        let mut pieces = vec![self.reshape(key, &[1])];
        for p in new_state {
            pieces.push(self.reshape(p, &[1]));
        }
        let st = self.concat(&pieces, 0);
        let unsigned = self.elem(raw);
        let bits = if unsigned == elem { raw } else { self.bitcast_convert(raw, elem) };
        (st, bits)
    }

    fn threefry(
        &mut self,
        key: NodeIndex,
        counter: NodeIndex,
        dims: &[usize],
        width: usize,
    ) -> (Vec<NodeIndex>, NodeIndex) {
        let (k0, k1) = self.words(key);
        let n: usize = dims.iter().product();
        let halves = Halves::of(dims);
        let count = if width == 64 { n } else { halves.half.iter().product() };
        let iota = self.emit("iota", Op::Iota { dimension: 0 }, shape(U64, &[count]), &[]);
        let ctr = self.bin_s(Opcode::Add, iota, counter);
        let (x0, x1) = self.words(ctr);
        let parity = self.int(U32, u64::from(sem::THREEFRY_PARITY));
        let k01 = self.bin(Opcode::Xor, k0, k1);
        let k2 = self.bin(Opcode::Xor, parity, k01);
        let ks = [k0, k1, k2];
        let mut v = [self.bin_s(Opcode::Add, x0, ks[0]), self.bin_s(Opcode::Add, x1, ks[1])];
        for block in 0..5usize {
            for r in 0..4 {
                let rot = sem::THREEFRY_ROTATIONS[(block % 2) * 4 + r];
                v[0] = self.bin(Opcode::Add, v[0], v[1]);
                let left = self.int(U32, u64::from(rot));
                let right = self.int(U32, u64::from(32 - rot));
                let l = self.bin_s(Opcode::ShiftLeft, v[1], left);
                let rr = self.bin_s(Opcode::ShiftRightLogical, v[1], right);
                let rotated = self.bin(Opcode::Or, l, rr);
                v[1] = self.bin(Opcode::Xor, v[0], rotated);
            }
            v[0] = self.bin_s(Opcode::Add, v[0], ks[(block + 1) % 3]);
            let inj = self.int(U32, block as u64 + 1);
            let k = self.bin(Opcode::Add, ks[(block + 2) % 3], inj);
            v[1] = self.bin_s(Opcode::Add, v[1], k);
        }
        let used = self.int(U64, count as u64);
        let new_counter = self.bin(Opcode::Add, counter, used);
        let bits = if width == 64 {
            let j = self.join(v[0], v[1]);
            self.reshape(j, dims)
        } else {
            let b = self.combine(v, &halves, dims);
            if width < 32 { self.convert(b, unsigned(width)) } else { b }
        };
        (vec![new_counter], bits)
    }

    /// XLA's `CombineShapePair`: the two halves (flat, in the half's row-major order)
    /// laid side by side along the new dimension, then back to `dims`.
    pub fn combine(&mut self, pair: [NodeIndex; 2], halves: &Halves, dims: &[usize]) -> NodeIndex {
        if dims.is_empty() {
            return self.reshape(pair[0], &[]);
        }
        let a = self.reshape(pair[0], &halves.half_unit);
        let b = self.reshape(pair[1], &halves.half_unit);
        let both = self.concat(&[a, b], halves.concat_dim);
        let mut rounded = dims.to_vec();
        rounded[halves.split] = dims[halves.split].div_ceil(2) * 2;
        let r = self.reshape(both, &rounded);
        if rounded == dims { r } else { self.slice(r, &vec![0; dims.len()], dims) }
    }

    fn philox(
        &mut self,
        key: NodeIndex,
        lo: NodeIndex,
        hi: NodeIndex,
        dims: &[usize],
        width: usize,
    ) -> (NodeIndex, NodeIndex, NodeIndex) {
        let n: usize = dims.iter().product();
        let words = if width == 64 { 2 * n } else { n };
        let m = words.div_ceil(4);
        let (k0, k1) = self.words(key);
        let iota = self.emit("iota", Op::Iota { dimension: 0 }, shape(U64, &[m]), &[]);
        let (c_lo, c_hi) = self.add128(lo, hi, iota);
        let (x0, x1) = self.words(c_lo);
        let (x2, x3) = self.words(c_hi);
        let mut x = [x0, x1, x2, x3];
        let (ma, mb) = (
            self.int(U64, u64::from(sem::PHILOX_M4X32A)),
            self.int(U64, u64::from(sem::PHILOX_M4X32B)),
        );
        for round in 0..10u32 {
            let (r0, r1) = if round == 0 {
                (k0, k1)
            } else {
                let a = self.int(U32, u64::from(sem::PHILOX_W32A.wrapping_mul(round)));
                let b = self.int(U32, u64::from(sem::PHILOX_W32B.wrapping_mul(round)));
                (self.bin(Opcode::Add, k0, a), self.bin(Opcode::Add, k1, b))
            };
            let mul = |e: &mut Self, v: NodeIndex, k: NodeIndex| {
                let w = e.convert(v, U64);
                let p = e.bin_s(Opcode::Multiply, w, k);
                e.words(p)
            };
            let (lo0, hi0) = mul(self, x[0], ma);
            let (lo1, hi1) = mul(self, x[2], mb);
            let a = self.bin(Opcode::Xor, hi1, x[1]);
            let y0 = self.bin_s(Opcode::Xor, a, r0);
            let b = self.bin(Opcode::Xor, hi0, x[3]);
            let y2 = self.bin_s(Opcode::Xor, b, r1);
            x = [y0, lo1, y2, lo0];
        }
        let used = self.int(U64, m as u64);
        let (new_lo, new_hi) = self.add128(lo, hi, used);
        let (cols, per) = if width == 64 {
            (vec![self.join(x[0], x[1]), self.join(x[2], x[3])], 2)
        } else {
            (x.to_vec(), 4)
        };
        let cols: Vec<NodeIndex> = cols.into_iter().map(|c| self.reshape(c, &[m, 1])).collect();
        let table = self.concat(&cols, 1);
        let flat = self.reshape(table, &[m * per]);
        let cut = if m * per == n { flat } else { self.slice(flat, &[0], &[n]) };
        let bits = self.reshape(cut, dims);
        let bits = if width < 32 { self.convert(bits, unsigned(width)) } else { bits };
        (bits, new_lo, new_hi)
    }
}
