//! Shape inference: re-derives the result shape of every instruction from its operands'
//! shapes and its attributes (XLA's `shape_inference.cc` rules under the strict HLO
//! discipline of `../shared/design/hlo-ops.md`: no implicit broadcast, no mixed float
//! precision inside one elementwise op, nor, as XLA's verifier has it by default, between
//! the inputs, inits and reducer of `reduce` or the operands and updates of `scatter` and
//! `select-and-scatter`) and compares it with the declared shape.
//!
//! The core is pure: [`infer_shape`] takes an operation, its operands' shapes, the
//! declared result shape if any and a [`Callees`] lookup for the computations it calls
//! ([`NoCallees`] when it calls none, or a [`Module`]), and returns the result shape or a
//! plain error message. It reads no graph, so a pass can compute the shape of an
//! instruction before creating it. Only opcodes whose result the text decides
//! (`parameter`, `constant`, `iota`, `convert`'s and `bitcast-convert`'s target type,
//! `reshape`, `broadcast`, `bitcast`, `custom-call`, `rng`, and `all-gather`/`reduce-scatter`
//! when the group size is unknown) need the declared shape: they check the invariants
//! hlo-ops.md gives and return it, or, given none, fail saying the result shape must be
//! given. `dot` and `convolution` take the declared element type when there is one, else
//! their operands' common one.
//!
//! [`infer`] is the same for an instruction already in a computation, with errors located
//! at it and prefixed with its name; [`check_module`] checks a whole module (layouts
//! ignored, [`Shape::compatible`]).
//!
//! Dynamic dimensions (`<=N`, `?`) are not inferred: the data-dependent-shape rejection
//! pass owns them, and [`check_module`] skips any instruction whose result or operands
//! have a dynamic dimension.
//!
//! **Covered** ([`covers`]):
//! - elementwise unary: `abs`, `negate`, `sign`, `exponential`, `exponential-minus-one`,
//!   `log`, `log-plus-one`, `logistic`, `sqrt`, `rsqrt`, `cbrt`, `tanh`, `tan`, `sine`,
//!   `cosine`, `sinh`, `cosh`, `asin`, `acos`, `asinh`, `acosh`, `atanh`, `erf`, `floor`,
//!   `ceil`, `round-nearest-even`, `round-nearest-afz`, `is-finite`, `not`,
//!   `count-leading-zeros`, `popcnt`, `real`, `imag`, `convert`, `bitcast-convert`,
//!   `reduce-precision`;
//! - elementwise binary/ternary: `add`, `subtract`, `multiply`, `divide`, `remainder`,
//!   `power`, `atan2`, `maximum`, `minimum`, `and`, `or`, `xor`, `shift-left`,
//!   `shift-right-logical`, `shift-right-arithmetic`, `compare`, `complex`, `select`,
//!   `clamp`;
//! - structure: `parameter`, `constant`, `copy`, `opt-barrier`, `domain`,
//!   `add-dependency`, `after-all`, `partition-id`, `replica-id`, `get-dimension-size`,
//!   `tuple`, `get-tuple-element`, `call`, `fusion`, `while`, `conditional`,
//!   `custom-call`, `rng`, `rng-get-and-update-state`, `copy-start`, `copy-done`,
//!   `bitcast` (text decides; element count times element width must be preserved);
//! - data movement: `iota`, `broadcast`, `reshape`, `transpose`, `slice`, `concatenate`,
//!   `pad`, `reverse`, `dynamic-slice`, `dynamic-update-slice`, `gather`, `scatter`;
//! - compute: `dot`, `convolution`, `reduce`, `reduce-window`, `select-and-scatter`,
//!   `sort`, `topk`, `scan`, `map` (over every dimension, as XLA's verifier: `dimensions`
//!   is not read);
//! - linear algebra, fft and random bits: `cholesky`, `triangular-solve`, `fft` (XLA's
//!   `InferCholeskyShape`, `InferTriangularSolveShape`, `InferFftShape`),
//!   `rng-bit-generator` (XLA's verifier, plus the state sizes and `pred` bits XLA
//!   refuses when it compiles);
//! - collectives: `all-reduce`, `all-gather`, `reduce-scatter`, `all-to-all`,
//!   `collective-permute`, `collective-broadcast`.
//!
//! **Not yet inferred** (accepted by [`check_module`] without any check; [`infer_shape`] returns
//! an error saying so): `stochastic-convert`, `ragged-dot`,
//! `scaled-dot`, `batch-norm-training`, `batch-norm-inference`, `batch-norm-grad`,
//! `dynamic-reshape`, `set-dimension-size`, `async-start`,
//! `async-update`, `async-done`, `all-reduce-start`,
//! `all-reduce-done`, `all-gather-start`, `all-gather-done`, `collective-permute-start`,
//! `collective-permute-done`, `ragged-all-to-all`, `send`, `send-done`, `recv`, `recv-done`,
//! `infeed`, `outfeed`.
//!
//! Collectives: the group size comes from `replica_groups` (explicit or iota form); when
//! the groups are empty or given as a mesh, the size-changing checks of `all-gather`,
//! `reduce-scatter` and `all-to-all` are skipped (the declared size of the gathered or
//! scattered dimension is taken as is).
//!
//! The rules are grouped by op family, as XLA's `shape_inference.cc` groups its functions,
//! one private module each: `elementwise`, `data_movement`, `reduction`, `contraction`
//! (dot and convolution), `collectives`, `control_flow`, `structure` (tuples, tokens,
//! bitcasts, asynchronous copies), `linalg` (and fft) and `random`; `context` holds the
//! inference context they share. [`infer_shape`] dispatches on the operation.

mod collectives;
mod context;
mod contraction;
mod control_flow;
mod data_movement;
mod elementwise;
mod linalg;
mod random;
mod reduction;
mod structure;

use hlo_ir::{
    CompId, Computation, Diagnostic, Diagnostics, ElemType, Instr, Module, NodeIndex, Op, Opcode,
    Shape,
};

use context::{Cx, mk};

pub use context::window_dim;

/// Whether [`infer`] derives (or, for text-decided opcodes, checks) this opcode's shape.
pub fn covers(op: Opcode) -> bool {
    use Opcode::*;
    !matches!(
        op,
        StochasticConvert
            | RaggedDot
            | ScaledDot
            | BatchNormTraining
            | BatchNormInference
            | BatchNormGrad
            | DynamicReshape
            | SetDimensionSize
            | AsyncStart
            | AsyncUpdate
            | AsyncDone
            | AllGatherStart
            | AllGatherDone
            | AllReduceStart
            | AllReduceDone
            | CollectivePermuteStart
            | CollectivePermuteDone
            | RaggedAllToAll
            | Send
            | SendDone
            | Recv
            | RecvDone
            | Infeed
            | Outfeed
    )
}

/// Prints a shape without layouts.
pub fn show(s: &Shape) -> String {
    let mut out = String::new();
    s.write(&mut out, false);
    out
}

fn has_dynamic(s: &Shape) -> bool {
    let mut dynamic = false;
    s.for_each_array(&mut |a| dynamic |= !a.is_static());
    dynamic
}

/// The signature of a called computation, as shape inference needs it.
#[derive(Debug, Clone)]
pub struct Callee<'a> {
    /// The computation's name, for messages.
    pub name: &'a str,
    /// Parameter shapes, by parameter number.
    pub params: Vec<&'a Shape>,
    /// The result (root) shape; `None` when the computation has no root.
    pub result: Option<&'a Shape>,
}

/// Where [`infer_shape`] looks up the computations an operation calls (`to_apply`,
/// `calls`, `condition`/`body`, branches, ...).
pub trait Callees {
    /// The signature of computation `id`, or `None` when it does not exist.
    fn callee(&self, id: CompId) -> Option<Callee<'_>>;
}

impl Callees for Module {
    fn callee(&self, id: CompId) -> Option<Callee<'_>> {
        let c = self.get_comp(id)?;
        Some(Callee {
            name: &c.name,
            params: c.params().into_iter().map(|p| &c.instr(p).shape).collect(),
            result: c.root().map(|r| &c.instr(r).shape),
        })
    }
}

/// Whether `m` is a module a backend has compiled and printed (XLA TPU's per-chip
/// program): scheduled, with tiled layouts, which only a backend's layout assignment
/// writes (`{1,0:T(8,128)(2,1)}`). XLA's TPU compiler verifies such modules with mixed
/// precision allowed (`HloVerifier`'s `allow_mixed_precision`): a fusion parameter may
/// be bf16 where the op it feeds took f32, a reduction may accumulate in f32 and store
/// bf16.
pub fn mixed_precision(m: &Module) -> bool {
    m.header.is_scheduled == Some(true)
        && m.comps().iter().any(|c| {
            c.nodes().any(|n| {
                let mut tiled = false;
                c.instr(n).shape.for_each_array(&mut |a| {
                    tiled |= !a.layout_fields().tiles.is_empty();
                });
                tiled
            })
        })
}

/// `s` with every floating-point element type read as f32.
fn as_f32(s: &Shape) -> Shape {
    match s {
        Shape::Array(a) if a.elem.is_float() => {
            let mut a = a.clone();
            a.elem = hlo_ir::ElemType::F32;
            Shape::Array(a)
        }
        Shape::Tuple(t) => Shape::Tuple(t.iter().map(as_f32).collect()),
        s => s.clone(),
    }
}

/// [`Callees`] for operations that call no computation: every lookup fails.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoCallees;

impl Callees for NoCallees {
    fn callee(&self, _: CompId) -> Option<Callee<'_>> {
        None
    }
}

/// Checks every instruction of every computation: the inferred shape must be compatible
/// with the declared one. Opcodes not [`covers`]ed and instructions touching dynamic
/// dimensions are skipped.
///
/// A module a backend has already compiled ([`mixed_precision`]) is checked as XLA's
/// verifier checks it there: floating-point types may differ between an instruction and
/// its operands (every float type is compared as f32), as long as the dimensions agree.
pub fn check_module(m: &Module) -> Diagnostics {
    hlo_ir::counters::bump("shape inference");
    let mixed = mixed_precision(m);
    let mut diags = Diagnostics::new();
    for comp in m.comps() {
        for n in comp.post_order() {
            let instr = comp.instr(n);
            let opcode = instr.op.opcode();
            if !covers(opcode) {
                continue;
            }
            let ops: Vec<&Shape> =
                comp.operands(n).into_iter().map(|o| &comp.instr(o).shape).collect();
            if has_dynamic(&instr.shape) || ops.iter().any(|s| has_dynamic(s)) {
                continue;
            }
            // Bit-level ops keep their types: only value-level ones may mix precisions.
            if mixed && !matches!(opcode, Opcode::BitcastConvert | Opcode::ReducePrecision) {
                let owned: Vec<Shape> = ops.iter().map(|s| as_f32(s)).collect();
                let refs: Vec<&Shape> = owned.iter().collect();
                let declared = as_f32(&instr.shape);
                if infer_shape(&instr.op, &refs, Some(&declared), m)
                    .is_ok_and(|s| as_f32(&s).compatible(&declared))
                {
                    continue;
                }
            }
            match infer_shape(&instr.op, &ops, Some(&instr.shape), m) {
                Ok(s) if s.compatible(&instr.shape) => {}
                Ok(s) if mixed && as_f32(&s).compatible(&as_f32(&instr.shape)) => {}
                Ok(s) => {
                    let operand_shapes: Vec<String> = ops.iter().map(|s| show(s)).collect();
                    let of = match operand_shapes.len() {
                        0 => String::new(),
                        1 => format!(" of {}", operand_shapes[0]),
                        k => format!(
                            " of {} and {}",
                            operand_shapes[..k - 1].join(", "),
                            operand_shapes[k - 1]
                        ),
                    };
                    diags.push(
                        Diagnostic::error(
                            instr.span,
                            format!(
                                "`{}` is declared {} but {}{} gives {}",
                                instr.name,
                                show(&instr.shape),
                                opcode.name(),
                                of,
                                show(&s)
                            ),
                        )
                        .with_label(format!("inferred {}", show(&s))),
                    );
                }
                Err(d) => diags.push(at(instr, d.message)),
            }
        }
    }
    diags
}

/// An [`infer_shape`] error located at the instruction: `` `name`: message ``.
fn at(instr: &Instr, msg: String) -> Diagnostic {
    Diagnostic::error(instr.span, format!("`{}`: {}", instr.name, msg))
}

/// The result shape of instruction `n` of `comp`, from its operands' shapes and its
/// attributes; for text-decided opcodes, the declared shape once its invariants hold.
/// That is [`infer_shape`] with the instruction's operands, declared shape and the module's
/// computations; errors are located at the instruction and name it.
pub fn infer(m: &Module, comp: &Computation, n: NodeIndex) -> Result<Shape, Diagnostic> {
    let instr = comp.instr(n);
    let ops: Vec<&Shape> = comp.operands(n).into_iter().map(|o| &comp.instr(o).shape).collect();
    infer_shape(&instr.op, &ops, Some(&instr.shape), m).map_err(|d| at(instr, d.message))
}

/// The result shape of `op` applied to operands of shapes `operands`, before (or without)
/// any instruction: the pure core of [`infer`]. No graph or module is read; called
/// computations are looked up in `callees` ([`NoCallees`] for operations that call none,
/// a [`Module`] otherwise).
///
/// `declared` is the result shape the text gives. Only opcodes whose result the text
/// decides read it (`parameter`, `constant`, `iota`, `convert` and `bitcast-convert` for
/// the target type, `reshape`, `broadcast`, `bitcast`, `custom-call`, `rng`, and
/// `all-gather`/`reduce-scatter` with an unknown group size); for them `None` is an error
/// saying the result shape must be given, and `Some` is checked and returned. `dot` and
/// `convolution` take their result element type from `declared`, or, when it is `None`,
/// from their operands (which must then agree). Every other opcode ignores `declared`.
///
/// Errors are plain messages (no location, no instruction name).
pub fn infer_shape(
    op: &Op,
    operands: &[&Shape],
    declared: Option<&Shape>,
    callees: &dyn Callees,
) -> Result<Shape, hlo_ir::Diagnostic> {
    infer_shape_unlocated(op, operands, declared, callees).map_err(hlo_ir::Diagnostic::from)
}

fn infer_shape_unlocated(
    op: &Op,
    operands: &[&Shape],
    declared: Option<&Shape>,
    callees: &dyn Callees,
) -> Result<Shape, String> {
    let cx = Cx { op, ops: operands, declared, callees };
    let opcode = op.opcode();
    if !covers(opcode) {
        return Err(
            cx.err(format!("shape inference for `{}` is not yet implemented", opcode.name()))
        );
    }
    match op {
        Op::Plain(op) if op.is_elementwise() && *op != Opcode::Convert => {
            elementwise::elementwise(&cx, *op)
        }
        Op::Compare { kind, .. } => elementwise::compare(&cx, *kind),
        Op::ReducePrecision { exponent_bits, mantissa_bits } => {
            elementwise::reduce_precision(&cx, *exponent_bits, *mantissa_bits)
        }
        Op::Plain(Opcode::Copy | Opcode::OptBarrier) | Op::Domain { .. } => {
            Ok(cx.shape(0)?.clone())
        }
        Op::Plain(Opcode::AddDependency) => structure::add_dependency(&cx),
        Op::Plain(Opcode::AfterAll) => structure::after_all(&cx),
        Op::Plain(Opcode::PartitionId | Opcode::ReplicaId) => Ok(Shape::scalar(ElemType::U32)),
        Op::GetDimensionSize { dimension } => structure::get_dimension_size(&cx, *dimension),
        Op::Plain(Opcode::Tuple) => structure::tuple(&cx),
        Op::GetTupleElement { index } => structure::get_tuple_element(&cx, *index),
        Op::Parameter { .. } | Op::Constant(_) => Ok(cx.declared()?.clone()),
        Op::Plain(Opcode::Bitcast) => structure::bitcast(&cx),
        Op::RngGetAndUpdateState { .. } => Ok(mk(ElemType::U64, &[2])),
        Op::CopyStart { .. } => structure::copy_start(&cx),
        Op::Plain(Opcode::CopyDone) => structure::copy_done(&cx),
        Op::Iota { dimension } => data_movement::iota(&cx, *dimension),
        Op::Plain(Opcode::Convert) => elementwise::convert(&cx),
        Op::Plain(Opcode::BitcastConvert) => elementwise::bitcast_convert(&cx),
        Op::Broadcast { dimensions } => data_movement::broadcast(&cx, dimensions),
        Op::Reshape { .. } => data_movement::reshape(&cx),
        Op::Transpose { dimensions } => data_movement::transpose(&cx, dimensions),
        Op::Reverse { dimensions } => data_movement::reverse(&cx, dimensions),
        Op::Slice { ranges } => data_movement::slice(&cx, ranges),
        Op::Concatenate { dimension } => data_movement::concatenate(&cx, *dimension),
        Op::Pad { config } => data_movement::pad(&cx, config),
        Op::DynamicSlice { sizes } => data_movement::dynamic_slice(&cx, sizes),
        Op::Plain(Opcode::DynamicUpdateSlice) => data_movement::dynamic_update_slice(&cx),
        Op::Call { to_apply, .. } => control_flow::call_like(&cx, *to_apply, 0),
        Op::Fusion { calls, .. } => control_flow::call_like(&cx, *calls, 0),
        Op::While { condition, body } => control_flow::while_loop(&cx, *condition, *body),
        Op::Conditional(branches) => control_flow::conditional(&cx, branches),
        Op::Dot { opcode: Opcode::Dot, dims } => contraction::dot(&cx, dims),
        Op::Reduce { dimensions, to_apply } => reduction::reduce(&cx, dimensions, *to_apply),
        Op::ReduceWindow { window, to_apply } => reduction::reduce_window(&cx, window, *to_apply),
        Op::SelectAndScatter { window, select, scatter } => {
            reduction::select_and_scatter(&cx, window, *select, *scatter)
        }
        Op::Convolution(c) => contraction::convolution(&cx, c),
        Op::Gather(g) => data_movement::gather(&cx, g),
        Op::Scatter(s) => data_movement::scatter(&cx, s),
        Op::Sort { dimension, to_apply, .. } => data_movement::sort(&cx, *dimension, *to_apply),
        Op::Map { to_apply, .. } => elementwise::map(&cx, *to_apply),
        Op::Scan { dimension, num_carries, to_apply, .. } => {
            reduction::scan(&cx, *dimension, *num_carries, *to_apply)
        }
        Op::TopK { k, .. } => data_movement::topk(&cx, *k),
        Op::Collective { opcode, attrs } => collectives::collective(&cx, *opcode, attrs),
        Op::Cholesky { .. } => linalg::cholesky(&cx),
        Op::TriangularSolve { left_side, transpose_a, .. } => {
            linalg::triangular_solve(&cx, *left_side, transpose_a.as_deref())
        }
        Op::Fft { fft_type, fft_length } => linalg::fft(&cx, fft_type, fft_length),
        Op::RngBitGenerator { algorithm } => random::rng_bit_generator(&cx, *algorithm),
        Op::CustomCall(_) => Ok(cx.declared()?.clone()),
        Op::Rng { .. } => random::rng(&cx),
        _ => Err(cx.err(format!("shape inference for `{}` is not yet implemented", opcode.name()))),
    }
}
