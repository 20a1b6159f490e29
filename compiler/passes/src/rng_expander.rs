//! `rng-expander`: rewrites `rng` (distribution `rng_uniform` or `rng_normal`) into the
//! steps of XLA's `RngExpander`: a u64 key constant and `rng-get-and-update-state` (delta
//! = 32-bit words drawn) give a Philox `rng-bit-generator` state `(key, counter low,
//! high)`; its bits become
//!
//! - uniform floats: `convert(bits >> (w - mantissa)) * 2^-mantissa * (b - a) + a`;
//! - uniform integers: `d = bits % (b - a)` (unsigned), `a + (d >> 1) + (d - (d >> 1))`;
//! - normal: uniform [0, 1) draws on the halves-split shape, Box-Muller
//!   (`sqrt(-2 log(max(u0, 1e-7))) * sin|cos(2 pi u1)`), interleaved, then `a + b * z`;
//!
//! f16 and bf16 draws are computed in f32 and converted. `rng-bit-generator-expander`,
//! which runs next in the default pipeline, expands the generator.
//!
//! The key: XLA draws it from a process-wide random generator at compile time, so its
//! numbers are not a function of the module; here it is `interp::rng::rng_key` of the
//! instruction's name, which the interpreter uses when it evaluates `rng` natively, so the
//! engines agree. See `interp::rng` for the semantics and what repeated executions see.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::{RngAlgorithm, RngDistribution};
use hlo_ir::{CompId, Diagnostic, ElemType, Module, NodeIndex, Op, Opcode, Shape};

use super::rng_bit_generator_expander::Emit;
use crate::expander::OpExpander;
use hlo_interp::rng::{self as sem, Halves};

pub struct RngExpander;

impl OpExpander for RngExpander {
    fn name(&self) -> &'static str {
        "rng-expander"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::Rng { .. })
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        let comp = m.comp_mut(id);
        let i = comp.instr(n).clone();
        let Op::Rng { distribution } = i.op else { return Ok(None) };
        let fail = |msg: String| Diagnostic::error(i.span, format!("`{}` (rng): {msg}", i.name));
        let Some((elem, dims)) = i.shape.as_array().and_then(|a| Some((a.elem, a.static_dims()?)))
        else {
            return Err(fail("the result must be a static array".into()));
        };
        let dims: Vec<usize> = dims.iter().map(|&d| d as usize).collect();
        let (compute, delta) =
            sem::rng_plan(distribution, elem, &dims).map_err(|e| fail(e.to_string()))?;
        let ops = comp.operands(n);
        let [a, b] = ops[..] else {
            return Err(fail(format!("rng takes 2 operands, not {}", ops.len())));
        };
        let mut e = Emit { comp, metadata: i.metadata.clone(), span: i.span };
        Ok(Some(expand(
            &mut e,
            distribution,
            sem::rng_key(&i.name),
            delta,
            a,
            b,
            elem,
            compute,
            &dims,
        )))
    }
}

/// A float constant of `elem` (the value rounded to it first, as literals are stored).
fn float(e: &mut Emit, elem: ElemType, v: f64) -> NodeIndex {
    let v = if elem == ElemType::F64 { v } else { f64::from(v as f32) };
    e.emit(
        "constant",
        Op::Constant(Literal::Array(LiteralData::Float(vec![v]))),
        Shape::scalar(elem),
        &[],
    )
}

#[allow(clippy::too_many_arguments)]
fn expand(
    e: &mut Emit,
    dist: RngDistribution,
    key: u64,
    delta: i64,
    a: NodeIndex,
    b: NodeIndex,
    elem: ElemType,
    compute: ElemType,
    dims: &[usize],
) -> NodeIndex {
    let (a, b) =
        if compute != elem { (e.convert(a, compute), e.convert(b, compute)) } else { (a, b) };
    let unsigned = if compute.bits() == 64 { ElemType::U64 } else { ElemType::U32 };
    let k = e.int(ElemType::U64, key);
    let k1 = e.reshape(k, &[1]);
    let counter = e.emit(
        "rng-get-and-update-state",
        Op::RngGetAndUpdateState { delta },
        Shape::array(ElemType::U64, &[2]),
        &[],
    );
    let state = e.concat(&[k1, counter], 0);
    let bits = |e: &mut Emit, d: &[usize]| {
        let gen_shape = Shape::Tuple(vec![
            Shape::array(ElemType::U64, &[3]),
            Shape::array(unsigned, &d.iter().map(|&x| x as u64).collect::<Vec<_>>()),
        ]);
        let g = e.emit(
            "rng-bit-generator",
            Op::RngBitGenerator { algorithm: RngAlgorithm::Philox },
            gen_shape.clone(),
            &[state],
        );
        let Shape::Tuple(parts) = gen_shape else { unreachable!("built as a tuple") };
        e.emit("get-tuple-element", Op::GetTupleElement { index: 1 }, parts[1].clone(), &[g])
    };
    let out = match dist {
        RngDistribution::Uniform if compute.is_float() => {
            let bits = bits(e, dims);
            uniform_float(e, bits, a, b, compute)
        }
        RngDistribution::Uniform => {
            let bits = bits(e, dims);
            let bu = e.bitcast_convert(b, unsigned);
            let au = e.bitcast_convert(a, unsigned);
            let range = e.bin(Opcode::Subtract, bu, au);
            let d = e.bin_s(Opcode::Remainder, bits, range);
            let one = e.int(unsigned, 1);
            let half = e.bin_s(Opcode::ShiftRightLogical, d, one);
            let rest = e.bin(Opcode::Subtract, d, half);
            let a_b = e.spread(a, dims);
            let half_t = e.bitcast_convert(half, compute);
            let sum = e.bin(Opcode::Add, a_b, half_t);
            let rest_t = e.bitcast_convert(rest, compute);
            e.bin(Opcode::Add, sum, rest_t)
        }
        RngDistribution::Normal => {
            let halves = Halves::of(dims);
            let bits = bits(e, &halves.concat);
            let zero = float(e, compute, 0.0);
            let one = float(e, compute, 1.0);
            let u = uniform_float(e, bits, zero, one, compute);
            let mut limits = halves.concat.clone();
            limits[halves.concat_dim] = 1;
            let x0 = e.slice(u, &vec![0; limits.len()], &limits);
            let mut starts = vec![0; limits.len()];
            starts[halves.concat_dim] = 1;
            let x1 = e.slice(u, &starts, &halves.concat);
            let tiny = float(e, compute, f64::from(1.0e-7f32));
            let u1 = e.bin_s(Opcode::Maximum, x0, tiny);
            let two_pi = float(e, compute, 2.0 * std::f64::consts::PI);
            let x1_dims =
                e.comp.instr(x1).shape.as_array().and_then(|s| s.static_dims()).unwrap_or_default();
            let two_pi = e.spread(two_pi, &x1_dims.iter().map(|&d| d as usize).collect::<Vec<_>>());
            let v1 = e.bin(Opcode::Multiply, two_pi, x1);
            let minus_two = float(e, compute, -2.0);
            let log = e.un(Opcode::Log, u1);
            let t = e.bin_s(Opcode::Multiply, log, minus_two);
            let u2 = e.un(Opcode::Sqrt, t);
            let sin = e.un(Opcode::Sin, v1);
            let z0 = e.bin(Opcode::Multiply, sin, u2);
            let cos = e.un(Opcode::Cos, v1);
            let z1 = e.bin(Opcode::Multiply, cos, u2);
            let z = e.combine([z0, z1], &halves, dims);
            let b_b = e.spread(b, dims);
            let scaled = e.bin(Opcode::Multiply, b_b, z);
            let a_b = e.spread(a, dims);
            e.bin(Opcode::Add, a_b, scaled)
        }
    };
    if compute != elem { e.convert(out, elem) } else { out }
}

/// `convert(bits >> (w - mantissa)) * 2^-mantissa * (b - a) + a` in `elem` (f32 or f64).
fn uniform_float(
    e: &mut Emit,
    bits: NodeIndex,
    a: NodeIndex,
    b: NodeIndex,
    elem: ElemType,
) -> NodeIndex {
    let width = elem.bits() as u64;
    let mantissa = if elem == ElemType::F64 { 52 } else { 23 };
    let ue = e.elem(bits);
    let shift = e.int(ue, width - mantissa);
    let shifted = e.bin_s(Opcode::ShiftRightLogical, bits, shift);
    let v = e.convert(shifted, elem);
    let scale = float(e, elem, (-(mantissa as f64)).exp2());
    let v = e.bin_s(Opcode::Multiply, v, scale);
    let range = e.bin(Opcode::Subtract, b, a);
    let v = e.bin_s(Opcode::Multiply, v, range);
    e.bin_s(Opcode::Add, v, a)
}
