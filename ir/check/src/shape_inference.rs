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

use hlo_ir::op::{Branches, CmpType, ReplicaGroups, Window};
use hlo_ir::opcode::Category;
use hlo_ir::types::ElemClass;
use hlo_ir::{
    ArrayShape, CompId, Computation, Diagnostic, Diagnostics, Dim, ElemType, Instr, Module,
    NodeIndex, Op, Opcode, Shape,
};

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

/// The bits an array occupies under its layout's first tile (`T(8,128)` pads the two most
/// minor dimensions to multiples of 8 and 128); `None` without a tiled layout.
fn tiled_bits(s: &Shape) -> Option<i64> {
    let a = s.as_array()?;
    let n = i64::try_from(a.tiled_elements()?).ok()?;
    Some(n.saturating_mul(i64::from(a.elem.bits())))
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

/// Context of one inference: the operation, its operands' shapes, the declared shape (if
/// any) and the callees.
struct Cx<'a> {
    op: &'a Op,
    ops: &'a [&'a Shape],
    declared: Option<&'a Shape>,
    callees: &'a dyn Callees,
}

type R<T> = Result<T, String>;

fn mk(elem: ElemType, dims: &[i64]) -> Shape {
    Shape::Array(ArrayShape {
        elem,
        dims: dims.iter().map(|&d| Dim::Static(d as u64)).collect(),
        layout: None,
    })
}

/// `a`'s dimensions (static, checked by [`Cx::array`]) with element type `elem`, no layout:
/// what [`mk`] builds from the same dimensions, without the intermediate `Vec<i64>`.
fn like(a: &ArrayShape, elem: ElemType) -> Shape {
    Shape::Array(ArrayShape { elem, dims: a.dims.clone(), layout: None })
}

fn ignoring_fp(a: ElemType, b: ElemType) -> bool {
    a == b || (a.is_float() && b.is_float())
}

fn complex_component(e: ElemType) -> Option<ElemType> {
    match e {
        ElemType::C64 => Some(ElemType::F32),
        ElemType::C128 => Some(ElemType::F64),
        _ => None,
    }
}

impl<'a> Cx<'a> {
    fn err(&self, msg: impl Into<String>) -> String {
        msg.into()
    }
    fn name(&self) -> &'static str {
        self.op.opcode().name()
    }
    /// The declared result shape; an error when the caller gave none (text-decided opcodes).
    fn declared(&self) -> R<&'a Shape> {
        self.declared.ok_or_else(|| {
            self.err(format!(
                "the result shape of {} must be given: the text decides it",
                self.name()
            ))
        })
    }
    fn shape(&self, k: usize) -> R<&'a Shape> {
        match self.ops.get(k) {
            Some(&s) => Ok(s),
            None => Err(self.err(format!("{} has no operand {k}", self.name()))),
        }
    }
    /// Operand `k` as a static array (no allocation).
    fn array(&self, k: usize) -> R<&'a ArrayShape> {
        let s = self.shape(k)?;
        match s {
            Shape::Array(a) => {
                self.check_static(a)?;
                Ok(a)
            }
            _ => Err(self.err(format!(
                "{} operand {k} must be an array, got {}",
                self.name(),
                show(s)
            ))),
        }
    }
    fn arr(&self, k: usize) -> R<(ElemType, Vec<i64>)> {
        let a = self.array(k)?;
        Ok((a.elem, a.dims.iter().map(|d| d.bound().unwrap_or(0) as i64).collect()))
    }
    fn check_static(&self, a: &ArrayShape) -> R<()> {
        if a.is_static() {
            Ok(())
        } else {
            Err(self.err("dynamic dimensions are not inferred (static shapes only)"))
        }
    }
    /// The declared result as a static array (no allocation).
    fn declared_array(&self) -> R<&'a ArrayShape> {
        match self.declared()? {
            Shape::Array(a) => {
                self.check_static(a)?;
                Ok(a)
            }
            s => Err(self.err(format!(
                "{} must produce an array, declared {}",
                self.name(),
                show(s)
            ))),
        }
    }
    fn declared_arr(&self) -> R<(ElemType, Vec<i64>)> {
        let a = self.declared_array()?;
        Ok((a.elem, a.dims.iter().map(|d| d.bound().unwrap_or(0) as i64).collect()))
    }
    fn callee(&self, id: CompId) -> R<Callee<'a>> {
        self.callees.callee(id).ok_or_else(|| self.err("called computation does not exist"))
    }
    fn callee_root(&self, c: &Callee<'a>) -> R<&'a Shape> {
        c.result.ok_or_else(|| self.err(format!("computation `{}` has no root", c.name)))
    }
}

fn scalar(s: &Shape) -> Option<ElemType> {
    match s {
        Shape::Array(a) if a.dims.is_empty() => Some(a.elem),
        _ => None,
    }
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
        Op::Plain(op) if op.is_elementwise() && *op != Opcode::Convert => elementwise(&cx, *op),
        Op::Compare { kind, .. } => {
            let a = same_arrays(&cx)?;
            let e = a.elem;
            if e.is_float() && matches!(kind, Some(CmpType::Signed | CmpType::Unsigned)) {
                return Err(cx.err(format!(
                    "compare of floating-point {e} operands must use type FLOAT or TOTALORDER"
                )));
            }
            Ok(like(a, ElemType::Pred))
        }
        Op::ReducePrecision { exponent_bits, mantissa_bits } => {
            let (e, d) = cx.arr(0)?;
            if !e.is_float() {
                return Err(
                    cx.err(format!("reduce-precision expects a floating-point operand, got {e}"))
                );
            }
            if *exponent_bits < 1 {
                return Err(cx.err(format!(
                    "reduce-precision exponent_bits must be >= 1, got {exponent_bits}"
                )));
            }
            if *mantissa_bits < 0 {
                return Err(cx.err(format!(
                    "reduce-precision mantissa_bits must be >= 0, got {mantissa_bits}"
                )));
            }
            Ok(mk(e, &d))
        }
        Op::Plain(Opcode::Copy | Opcode::OptBarrier) | Op::Domain { .. } => {
            Ok(cx.shape(0)?.clone())
        }
        Op::Plain(Opcode::AddDependency) => {
            if !matches!(cx.shape(1)?, Shape::Token) {
                return Err(cx.err(format!(
                    "add-dependency operand 1 must be a token, got {}",
                    show(cx.shape(1)?)
                )));
            }
            Ok(cx.shape(0)?.clone())
        }
        Op::Plain(Opcode::AfterAll) => {
            for k in 0..cx.ops.len() {
                if !matches!(cx.shape(k)?, Shape::Token) {
                    return Err(cx.err(format!(
                        "after-all operand {k} must be a token, got {}",
                        show(cx.shape(k)?)
                    )));
                }
            }
            Ok(Shape::Token)
        }
        Op::Plain(Opcode::PartitionId | Opcode::ReplicaId) => Ok(Shape::scalar(ElemType::U32)),
        Op::GetDimensionSize { dimension } => {
            let (_, d) = cx.arr(0)?;
            dim_in_range(&cx, *dimension, d.len(), "get-dimension-size dimension")?;
            Ok(Shape::scalar(ElemType::S32))
        }
        Op::Plain(Opcode::Tuple) => {
            Ok(Shape::Tuple((0..cx.ops.len()).map(|k| cx.shape(k).cloned()).collect::<R<_>>()?))
        }
        Op::GetTupleElement { index } => match cx.shape(0)? {
            Shape::Tuple(t) => {
                if *index < 0 || *index as usize >= t.len() {
                    return Err(cx.err(format!("get-tuple-element index {index} is out of range for a tuple of {} elements", t.len())));
                }
                Ok(t[*index as usize].clone())
            }
            s => Err(cx.err(format!("get-tuple-element operand must be a tuple, got {}", show(s)))),
        },
        Op::Parameter { .. } | Op::Constant(_) => Ok(cx.declared()?.clone()),
        Op::Plain(Opcode::Bitcast) => {
            let (e, d) = cx.arr(0)?;
            let (te, td) = cx.declared_arr()?;
            let bits = |e: ElemType, d: &[i64]| d.iter().product::<i64>() * i64::from(e.bits());
            // A bitcast is physical: arrays with tiled layouts (a backend's) may differ in
            // logical size within the same tiles (`s32[576]` and `s32[575]` under `T(1024)`).
            let tiled = tiled_bits(cx.shape(0)?)
                .zip(tiled_bits(cx.declared()?))
                .is_some_and(|(a, b)| a == b);
            if bits(e, &d) != bits(te, &td) && !tiled {
                return Err(cx.err(format!(
                    "bitcast changes the size in bits: operand {} has {}, result {} has {}",
                    show(cx.shape(0)?),
                    bits(e, &d),
                    show(cx.declared()?),
                    bits(te, &td)
                )));
            }
            Ok(cx.declared()?.clone())
        }
        Op::RngGetAndUpdateState { .. } => Ok(mk(ElemType::U64, &[2])),
        Op::CopyStart { .. } => {
            let a = cx.shape(0)?;
            Ok(Shape::Tuple(vec![a.clone(), a.clone(), Shape::scalar(ElemType::U32)]))
        }
        Op::Plain(Opcode::CopyDone) => match cx.shape(0)? {
            Shape::Tuple(t) if t.len() == 3 && t[0].compatible(&t[1]) => Ok(t[0].clone()),
            s => Err(cx.err(format!(
                "copy-done operand must be a copy-start's (T, T, u32[]) tuple, got {}",
                show(s)
            ))),
        },
        Op::Iota { dimension } => {
            let (e, d) = cx.declared_arr()?;
            if d.is_empty() {
                return Err(cx.err("iota must produce an array of rank >= 1"));
            }
            if e == ElemType::Pred {
                return Err(
                    cx.err("iota element type must be integral, floating or complex, got pred")
                );
            }
            dim_in_range(&cx, *dimension, d.len(), "iota_dimension")?;
            Ok(cx.declared()?.clone())
        }
        Op::Plain(Opcode::Convert) => {
            let a = cx.array(0)?;
            let (e, te) = (a.elem, cx.declared_array()?.elem);
            if e.is_complex() && !te.is_complex() {
                return Err(cx.err(format!(
                    "convert from complex {e} to real {te} is not allowed (use real/imag)"
                )));
            }
            Ok(like(a, te))
        }
        Op::Plain(Opcode::BitcastConvert) => bitcast_convert(&cx),
        Op::Broadcast { dimensions } => broadcast(&cx, dimensions),
        Op::Reshape { .. } => {
            let (e, d) = cx.arr(0)?;
            let (te, td) = cx.declared_arr()?;
            if e != te {
                return Err(cx.err(format!("reshape changes the element type from {e} to {te}")));
            }
            let (a, b): (i64, i64) = (d.iter().product(), td.iter().product());
            if a != b {
                return Err(cx.err(format!(
                    "reshape changes the element count: operand has {a} elements, result has {b}"
                )));
            }
            Ok(cx.declared()?.clone())
        }
        Op::Transpose { dimensions } => {
            let (e, d) = cx.arr(0)?;
            check_permutation(&cx, dimensions, d.len(), "transpose dimensions")?;
            Ok(mk(e, &dimensions.iter().map(|&p| d[p as usize]).collect::<Vec<_>>()))
        }
        Op::Reverse { dimensions } => {
            let (e, d) = cx.arr(0)?;
            check_unique_in_range(&cx, dimensions, d.len(), "reverse dimensions", false)?;
            Ok(mk(e, &d))
        }
        Op::Slice { ranges } => {
            let (e, d) = cx.arr(0)?;
            if ranges.len() != d.len() {
                return Err(cx.err(format!(
                    "slice has {} ranges for an operand of rank {}",
                    ranges.len(),
                    d.len()
                )));
            }
            let mut out = Vec::new();
            for (i, (r, &dim)) in ranges.iter().zip(&d).enumerate() {
                if r.stride < 1 {
                    return Err(cx.err(format!(
                        "slice stride of dimension {i} must be >= 1, got {}",
                        r.stride
                    )));
                }
                if r.start < 0 || r.start > r.limit || r.limit > dim {
                    return Err(cx.err(format!(
                        "slice range [{}:{}] of dimension {i} is not within 0 <= start <= limit <= {dim}",
                        r.start, r.limit
                    )));
                }
                out.push((r.limit - r.start + r.stride - 1) / r.stride);
            }
            Ok(mk(e, &out))
        }
        Op::Concatenate { dimension } => concatenate(&cx, *dimension),
        Op::Pad { config } => pad(&cx, config),
        Op::DynamicSlice { sizes } => {
            let (e, d) = cx.arr(0)?;
            check_indices(&cx, 1, d.len())?;
            if sizes.len() != d.len() {
                return Err(cx.err(format!(
                    "dynamic-slice has {} sizes for an operand of rank {}",
                    sizes.len(),
                    d.len()
                )));
            }
            for (i, (&s, &dim)) in sizes.iter().zip(&d).enumerate() {
                if s < 0 || s > dim {
                    return Err(cx.err(format!(
                        "dynamic-slice size {s} of dimension {i} is not within 0..={dim}"
                    )));
                }
            }
            Ok(mk(e, sizes))
        }
        Op::Plain(Opcode::DynamicUpdateSlice) => {
            let (e, d) = cx.arr(0)?;
            let (ue, ud) = cx.arr(1)?;
            if ue != e {
                return Err(cx.err(format!("dynamic-update-slice update element type {ue} differs from operand element type {e}")));
            }
            if ud.len() != d.len() {
                return Err(cx.err(format!(
                    "dynamic-update-slice update rank {} differs from operand rank {}",
                    ud.len(),
                    d.len()
                )));
            }
            for (i, (&u, &o)) in ud.iter().zip(&d).enumerate() {
                if u > o {
                    return Err(cx.err(format!(
                        "dynamic-update-slice update dim {i} is {u}, larger than operand dim {o}"
                    )));
                }
            }
            check_indices(&cx, 2, d.len())?;
            Ok(mk(e, &d))
        }
        Op::Call { to_apply, .. } => call_like(&cx, *to_apply, 0),
        Op::Fusion { calls, .. } => call_like(&cx, *calls, 0),
        Op::While { condition, body } => {
            let init = cx.shape(0)?;
            let (c, b) = (cx.callee(*condition)?, cx.callee(*body)?);
            for (what, comp) in [("condition", &c), ("body", &b)] {
                let ps = &comp.params;
                if ps.len() != 1 || !ps[0].compatible(init) {
                    return Err(cx.err(format!(
                        "while {what} `{}` must take one parameter of the init shape {}, takes ({})",
                        comp.name,
                        show(init),
                        ps.iter().map(|s| show(s)).collect::<Vec<_>>().join(", ")
                    )));
                }
            }
            let cr = cx.callee_root(&c)?;
            if scalar(cr) != Some(ElemType::Pred) {
                return Err(cx.err(format!(
                    "while condition `{}` must return pred[], returns {}",
                    c.name,
                    show(cr)
                )));
            }
            let br = cx.callee_root(&b)?;
            if !br.compatible(init) {
                return Err(cx.err(format!(
                    "while body `{}` returns {}, not the init shape {}",
                    b.name,
                    show(br),
                    show(init)
                )));
            }
            Ok(init.clone())
        }
        Op::Conditional(branches) => conditional(&cx, branches),
        Op::Dot { opcode: Opcode::Dot, dims } => dot(&cx, dims),
        Op::Reduce { dimensions, to_apply } => reduce(&cx, dimensions, *to_apply),
        Op::ReduceWindow { window, to_apply } => reduce_window(&cx, window, *to_apply),
        Op::SelectAndScatter { window, select, scatter } => {
            select_and_scatter(&cx, window, *select, *scatter)
        }
        Op::Convolution(c) => convolution(&cx, c),
        Op::Gather(g) => gather(&cx, g),
        Op::Scatter(s) => scatter(&cx, s),
        Op::Sort { dimension, to_apply, .. } => sort(&cx, *dimension, *to_apply),
        Op::Map { to_apply, .. } => map(&cx, *to_apply),
        Op::Scan { dimension, num_carries, to_apply, .. } => {
            scan(&cx, *dimension, *num_carries, *to_apply)
        }
        Op::TopK { k, .. } => {
            let (e, mut d) = cx.arr(0)?;
            let Some(last) = d.last_mut() else {
                return Err(cx.err("topk operand must have rank >= 1"));
            };
            if *k < 0 || *k > *last {
                return Err(
                    cx.err(format!("topk k={k} is larger than the last dimension ({last})"))
                );
            }
            *last = *k;
            Ok(Shape::Tuple(vec![mk(e, &d), mk(ElemType::S32, &d)]))
        }
        Op::Collective { opcode, attrs } => collective(&cx, *opcode, attrs),
        Op::Cholesky { .. } => cholesky(&cx),
        Op::TriangularSolve { left_side, transpose_a, .. } => {
            triangular_solve(&cx, *left_side, transpose_a.as_deref())
        }
        Op::Fft { fft_type, fft_length } => fft(&cx, fft_type, fft_length),
        Op::RngBitGenerator { algorithm } => rng_bit_generator(&cx, *algorithm),
        Op::CustomCall(_) => Ok(cx.declared()?.clone()),
        Op::Rng { .. } => {
            let (e, _) = cx.declared_arr()?;
            for k in 0..2 {
                match scalar(cx.shape(k)?) {
                    Some(t) if t == e => {}
                    _ => {
                        return Err(cx.err(format!(
                            "rng operand {k} must be a {e}[] scalar, got {}",
                            show(cx.shape(k)?)
                        )));
                    }
                }
            }
            Ok(cx.declared()?.clone())
        }
        _ => Err(cx.err(format!("shape inference for `{}` is not yet implemented", opcode.name()))),
    }
}

fn dim_in_range(cx: &Cx, d: i64, rank: usize, what: &str) -> R<()> {
    if d < 0 || d as usize >= rank {
        return Err(cx.err(format!("{what} {d} is out of range for rank {rank}")));
    }
    Ok(())
}

fn check_unique_in_range(cx: &Cx, v: &[i64], rank: usize, what: &str, sorted: bool) -> R<()> {
    for (i, &d) in v.iter().enumerate() {
        dim_in_range(cx, d, rank, what)?;
        if v[..i].contains(&d) {
            return Err(cx.err(format!("{what} lists dimension {d} twice")));
        }
        if sorted && i > 0 && v[i - 1] > d {
            return Err(cx.err(format!("{what} must be sorted, got {v:?}")));
        }
    }
    Ok(())
}

fn check_permutation(cx: &Cx, p: &[i64], rank: usize, what: &str) -> R<()> {
    if p.len() != rank {
        return Err(cx.err(format!("{what} {p:?} has {} entries for rank {rank}", p.len())));
    }
    check_unique_in_range(cx, p, rank, what, false)
}

/// `rank` scalar integer index operands of one type starting at operand `first` (or the
/// legacy single rank-1 index vector).
fn check_indices(cx: &Cx, first: usize, rank: usize) -> R<()> {
    let n = cx.ops.len() - first.min(cx.ops.len());
    if n == 1 && rank != 1 {
        let (e, d) = cx.arr(first)?;
        if e.is_integer() && d.len() == 1 && d[0] as usize == rank {
            return Ok(());
        }
    }
    if n != rank {
        return Err(cx.err(format!("{} needs {rank} start index operands, got {n}", cx.name())));
    }
    let mut ty = None;
    for k in first..cx.ops.len() {
        let s = cx.shape(k)?;
        match scalar(s) {
            Some(e) if e.is_integer() => {
                if ty.is_some_and(|t| t != e) {
                    return Err(cx.err(format!(
                        "{} start indices must all have one type, got {} and {e}",
                        cx.name(),
                        ty.unwrap()
                    )));
                }
                ty = Some(e);
            }
            _ => {
                return Err(cx.err(format!(
                    "{} start index operand {k} must be an integer scalar, got {}",
                    cx.name(),
                    show(s)
                )));
            }
        }
    }
    Ok(())
}

/// Operands of identical static dimensions and element type; the first of them.
fn same_arrays<'a>(cx: &Cx<'a>) -> R<&'a ArrayShape> {
    let a = cx.array(0)?;
    let e = a.elem;
    for k in 1..cx.ops.len() {
        let a2 = cx.array(k)?;
        let e2 = a2.elem;
        if a2.dims != a.dims {
            return Err(cx.err(format!(
                "{} operands must have identical dimensions (no implicit broadcast in HLO): {} and {}",
                cx.name(),
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        if e2 != e {
            return Err(cx.err(format!(
                "{} operands must have the same element type: {e} and {e2}",
                cx.name()
            )));
        }
    }
    Ok(a)
}

fn elementwise(cx: &Cx, op: Opcode) -> R<Shape> {
    use Opcode::*;
    let name = op.name();
    let bad =
        |e: ElemType, want: &str| Err(cx.err(format!("{name} expects {want} operands, got {e}")));
    match op.category() {
        Category::Unary => {
            let a = cx.array(0)?;
            let e = a.elem;
            let c = e.class();
            let out = match op {
                Negate if c == ElemClass::Pred => {
                    return bad(e, "integer, floating-point or complex");
                }
                Abs => match c {
                    ElemClass::Signed | ElemClass::Float => e,
                    ElemClass::Complex => complex_component(e).unwrap_or(e),
                    _ => return bad(e, "signed integer, floating-point or complex"),
                },
                Sign if !matches!(c, ElemClass::Signed | ElemClass::Float | ElemClass::Complex) => {
                    return bad(e, "signed integer, floating-point or complex");
                }
                Exp | Expm1 | Log | Log1p | Logistic | Sqrt | Rsqrt | Tanh | Tan | Sin | Cos
                | Sinh | Cosh | Asin | Acos | Asinh | Acosh | Atanh
                    if !matches!(c, ElemClass::Float | ElemClass::Complex) =>
                {
                    return bad(e, "floating-point or complex");
                }
                Erf | Cbrt | Floor | Ceil | RoundNearestEven | RoundNearestAfz
                    if c != ElemClass::Float =>
                {
                    return bad(e, "floating-point");
                }
                IsFinite => {
                    if c != ElemClass::Float {
                        return bad(e, "floating-point");
                    }
                    ElemType::Pred
                }
                Not if !matches!(c, ElemClass::Pred | ElemClass::Signed | ElemClass::Unsigned) => {
                    return bad(e, "pred or integer");
                }
                Clz | PopCnt if !e.is_integer() => return bad(e, "integer"),
                Real | Imag => match c {
                    ElemClass::Complex => complex_component(e).unwrap_or(e),
                    ElemClass::Float => e,
                    _ => return bad(e, "complex or floating-point"),
                },
                _ => e,
            };
            Ok(like(a, out))
        }
        Category::Binary => {
            let a = same_arrays(cx)?;
            let e = a.elem;
            let c = e.class();
            let out = match op {
                Subtract | Divide | Remainder | Power if c == ElemClass::Pred => {
                    return bad(e, "integer, floating-point or complex");
                }
                Atan2 if !matches!(c, ElemClass::Float | ElemClass::Complex) => {
                    return bad(e, "floating-point or complex");
                }
                And | Or | Xor
                    if !matches!(c, ElemClass::Pred | ElemClass::Signed | ElemClass::Unsigned) =>
                {
                    return bad(e, "pred or integer");
                }
                ShiftLeft | ShiftRightArithmetic | ShiftRightLogical if !e.is_integer() => {
                    return bad(e, "integer");
                }
                Maximum | Minimum if c == ElemClass::Complex => return bad(e, "non-complex"),
                Complex => match e {
                    ElemType::F32 => ElemType::C64,
                    ElemType::F64 => ElemType::C128,
                    _ => return bad(e, "f32 or f64"),
                },
                _ => e,
            };
            Ok(like(a, out))
        }
        _ => {
            // select, clamp
            let (p, x, y) = (cx.array(0)?, cx.array(1)?, cx.array(2)?);
            let (pe, pd, xe, xd, ye, yd) = (p.elem, &p.dims, x.elem, &x.dims, y.elem, &y.dims);
            if op == Select {
                if pe != ElemType::Pred {
                    return Err(cx.err(format!(
                        "select predicate must be pred, got {}",
                        show(cx.shape(0)?)
                    )));
                }
                if xe != ye || xd != yd {
                    return Err(cx.err(format!(
                        "select on_true and on_false must have the same shape: {} and {}",
                        show(cx.shape(1)?),
                        show(cx.shape(2)?)
                    )));
                }
                if !pd.is_empty() && pd != xd {
                    return Err(cx.err(format!(
                        "select predicate {} must be a scalar or have the dimensions of {}",
                        show(cx.shape(0)?),
                        show(cx.shape(1)?)
                    )));
                }
                Ok(like(x, xe))
            } else {
                for (k, (e, d)) in [(0, (pe, pd)), (2, (ye, yd))] {
                    if e != xe {
                        return Err(cx.err(format!(
                            "clamp operand {k} has element type {e}, the clamped operand {xe}"
                        )));
                    }
                    if !d.is_empty() && d != xd {
                        return Err(cx.err(format!(
                            "clamp bound {} must be a scalar or have the dimensions of {}",
                            show(cx.shape(k)?),
                            show(cx.shape(1)?)
                        )));
                    }
                }
                Ok(like(x, xe))
            }
        }
    }
}

fn bitcast_convert(cx: &Cx) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (te, _) = cx.declared_arr()?;
    if e.is_complex() != te.is_complex() {
        return Err(
            cx.err(format!("bitcast-convert between complex and non-complex types ({e} to {te})"))
        );
    }
    let (b, tb) = (e.bits() as i64, te.bits() as i64);
    if b == tb {
        return Ok(mk(te, &d));
    }
    if b % tb != 0 && tb % b != 0 {
        return Err(cx.err(format!(
            "bitcast-convert bit widths {b} ({e}) and {tb} ({te}) do not divide each other"
        )));
    }
    if b > tb {
        let mut out = d;
        out.push(b / tb);
        Ok(mk(te, &out))
    } else {
        match d.last() {
            Some(&l) if l == tb / b => Ok(mk(te, &d[..d.len() - 1])),
            _ => Err(cx.err(format!(
                "bitcast-convert from {e} to {te} needs a last operand dimension of {}, operand is {}",
                tb / b,
                show(cx.shape(0)?)
            ))),
        }
    }
}

fn broadcast(cx: &Cx, dims: &[i64]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (te, td) = cx.declared_arr()?;
    if e != te {
        return Err(cx.err(format!("broadcast changes the element type from {e} to {te}")));
    }
    if dims.len() != d.len() {
        return Err(cx.err(format!(
            "broadcast dimensions {dims:?} must have one entry per operand dimension ({})",
            d.len()
        )));
    }
    for (i, &t) in dims.iter().enumerate() {
        dim_in_range(cx, t, td.len(), "broadcast dimension")?;
        if i > 0 && dims[i - 1] >= t {
            return Err(
                cx.err(format!("broadcast dimensions {dims:?} must be strictly increasing"))
            );
        }
        if td[t as usize] != d[i] {
            return Err(cx.err(format!(
                "broadcast maps operand dim {i} (size {}) to result dim {t} (size {}); sizes must match",
                d[i], td[t as usize]
            )));
        }
    }
    Ok(cx.declared()?.clone())
}

fn concatenate(cx: &Cx, dim: i64) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    dim_in_range(cx, dim, d.len(), "concatenate dimension")?;
    let mut out = d.clone();
    for k in 1..cx.ops.len() {
        let (e2, d2) = cx.arr(k)?;
        if e2 != e {
            return Err(
                cx.err(format!("concatenate operand {k} has element type {e2}, operand 0 has {e}"))
            );
        }
        if d2.len() != d.len() {
            return Err(cx.err(format!(
                "concatenate operand {k} has rank {}, operand 0 has rank {}",
                d2.len(),
                d.len()
            )));
        }
        for i in 0..d.len() {
            if i as i64 != dim && d2[i] != d[i] {
                return Err(cx.err(format!(
                    "concatenate operands differ outside dimension {dim}: operand 0 is {} and operand {k} is {}",
                    show(cx.shape(0)?),
                    show(cx.shape(k)?)
                )));
            }
        }
        out[dim as usize] += d2[dim as usize];
    }
    Ok(mk(e, &out))
}

fn pad(cx: &Cx, config: &[hlo_ir::op::PadDim]) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    match scalar(cx.shape(1)?) {
        Some(pe) if pe == e => {}
        _ => {
            return Err(
                cx.err(format!("pad value must be a {e}[] scalar, got {}", show(cx.shape(1)?)))
            );
        }
    }
    if config.len() != d.len() {
        return Err(cx.err(format!(
            "padding has {} dimensions for an operand of rank {}",
            config.len(),
            d.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (p, &n)) in config.iter().zip(&d).enumerate() {
        if p.interior < 0 {
            return Err(cx.err(format!(
                "interior padding of dimension {i} must be >= 0, got {}",
                p.interior
            )));
        }
        let r = p.lo + p.hi + n + (n - 1).max(0) * p.interior;
        if r < 0 {
            return Err(cx.err(format!(
                "padding {}_{}_{} of dimension {i} (size {n}) gives a negative size {r}",
                p.lo, p.hi, p.interior
            )));
        }
        out.push(r);
    }
    Ok(mk(e, &out))
}

fn call_like(cx: &Cx, id: hlo_ir::CompId, first: usize) -> R<Shape> {
    let c = cx.callee(id)?;
    let ps = &c.params;
    let args = &cx.ops[first..];
    if ps.len() != args.len() {
        return Err(cx.err(format!(
            "{} passes {} arguments to `{}`, which takes {}",
            cx.name(),
            args.len(),
            c.name,
            ps.len()
        )));
    }
    for (k, p) in ps.iter().enumerate() {
        let a = cx.shape(first + k)?;
        if !a.compatible(p) {
            return Err(cx.err(format!(
                "argument {k} is {} but parameter {k} of `{}` is {}",
                show(a),
                c.name,
                show(p)
            )));
        }
    }
    Ok(cx.callee_root(&c)?.clone())
}

fn conditional(cx: &Cx, branches: &Branches) -> R<Shape> {
    let sel = cx.shape(0)?;
    let comps: Vec<hlo_ir::CompId> = match branches {
        Branches::TrueFalse(t, f) => {
            if scalar(sel) != Some(ElemType::Pred) {
                return Err(cx.err(format!(
                    "conditional with true/false computations needs a pred[] selector, got {}",
                    show(sel)
                )));
            }
            vec![*t, *f]
        }
        Branches::Indexed(b) => {
            if scalar(sel) != Some(ElemType::S32) {
                return Err(cx.err(format!(
                    "conditional with branch_computations needs an s32[] selector, got {}",
                    show(sel)
                )));
            }
            b.clone()
        }
    };
    if cx.ops.len() != comps.len() + 1 {
        return Err(cx.err(format!(
            "conditional has {} branches but {} branch operands",
            comps.len(),
            cx.ops.len() - 1
        )));
    }
    let mut result: Option<&Shape> = None;
    for (k, id) in comps.iter().enumerate() {
        let c = cx.callee(*id)?;
        let ps = &c.params;
        let a = cx.shape(k + 1)?;
        if ps.len() != 1 || !ps[0].compatible(a) {
            return Err(cx.err(format!(
                "branch {k} `{}` must take one parameter of shape {}",
                c.name,
                show(a)
            )));
        }
        let r = cx.callee_root(&c)?;
        if let Some(r0) = result {
            if !r0.compatible(r) {
                return Err(cx.err(format!(
                    "conditional branches return different shapes: {} and {} (branch {k})",
                    show(r0),
                    show(r)
                )));
            }
        } else {
            result = Some(r);
        }
    }
    result.cloned().ok_or_else(|| cx.err("conditional has no branches"))
}

/// The result element type of `dot`/`convolution`: the declared one (the text decides it,
/// like XLA's `preferred_element_type`), or without a declared shape the operands' common
/// element type.
fn result_elem(cx: &Cx, lhs: ElemType, rhs: ElemType) -> R<ElemType> {
    match cx.declared {
        Some(_) => Ok(cx.declared_array()?.elem),
        None if lhs == rhs => Ok(lhs),
        None => Err(cx.err(format!(
            "the result shape of {} must be given: its operands have different element types ({lhs} and {rhs})",
            cx.name()
        ))),
    }
}

fn dot(cx: &Cx, dd: &hlo_ir::op::DotDims) -> R<Shape> {
    let (le, l) = cx.arr(0)?;
    let (re, r) = cx.arr(1)?;
    let te = result_elem(cx, le, re)?;
    for (side, dims, batch, contr) in [
        ("lhs", &l, &dd.lhs_batch, &dd.lhs_contracting),
        ("rhs", &r, &dd.rhs_batch, &dd.rhs_contracting),
    ] {
        let all: Vec<i64> = batch.iter().chain(contr.iter()).copied().collect();
        check_unique_in_range(
            cx,
            &all,
            dims.len(),
            &format!("dot {side} batch/contracting dimension"),
            false,
        )?;
    }
    if dd.lhs_contracting.len() != dd.rhs_contracting.len() {
        return Err(cx.err(format!(
            "dot has {} lhs contracting dimensions but {} rhs contracting dimensions",
            dd.lhs_contracting.len(),
            dd.rhs_contracting.len()
        )));
    }
    if dd.lhs_batch.len() != dd.rhs_batch.len() {
        return Err(cx.err(format!(
            "dot has {} lhs batch dimensions but {} rhs batch dimensions",
            dd.lhs_batch.len(),
            dd.rhs_batch.len()
        )));
    }
    for (what, ls, rs) in [
        ("contracting", &dd.lhs_contracting, &dd.rhs_contracting),
        ("batch", &dd.lhs_batch, &dd.rhs_batch),
    ] {
        for (&a, &b) in ls.iter().zip(rs.iter()) {
            if l[a as usize] != r[b as usize] {
                return Err(cx.err(format!(
                    "dot {what} dimension sizes differ: lhs dim {a} is {}, rhs dim {b} is {}",
                    l[a as usize], r[b as usize]
                )));
            }
        }
    }
    let mut out: Vec<i64> = dd.lhs_batch.iter().map(|&b| l[b as usize]).collect();
    let free = |dims: &[i64], batch: &[i64], contr: &[i64]| -> Vec<i64> {
        (0..dims.len() as i64)
            .filter(|i| !batch.contains(i) && !contr.contains(i))
            .map(|i| dims[i as usize])
            .collect()
    };
    out.extend(free(&l, &dd.lhs_batch, &dd.lhs_contracting));
    out.extend(free(&r, &dd.rhs_batch, &dd.rhs_contracting));
    Ok(mk(te, &out))
}

/// Checks a reducer over `inits.len()` values: `2N` scalar parameters (accumulators typed
/// like the inits, then values typed like the inputs) and `N` scalar results, result `k`
/// of exactly the type of accumulator parameter `k` (XLA's `VerifyReducerShape`). With
/// `exact`, parameter types must equal the operand types (XLA's verifier for `reduce`,
/// where mixed floating-point precision is not allowed); otherwise they may differ in
/// floating-point precision.
fn check_reducer(
    cx: &Cx,
    id: hlo_ir::CompId,
    inits: &[ElemType],
    inputs: &[ElemType],
    exact: bool,
) -> R<()> {
    let c = cx.callee(id)?;
    let n = inits.len();
    let ps = &c.params;
    if ps.len() != 2 * n {
        return Err(cx.err(format!(
            "reducer `{}` must take {} scalar parameters, takes {}",
            c.name,
            2 * n,
            ps.len()
        )));
    }
    for (k, p) in ps.iter().enumerate() {
        let want = if k < n { inits[k] } else { inputs[k - n] };
        match scalar(p) {
            Some(e) if e == want || (!exact && ignoring_fp(e, want)) => {}
            _ => {
                return Err(cx.err(format!(
                    "reducer `{}` parameter {k} is {}, expected {want}[]",
                    c.name,
                    show(p)
                )));
            }
        }
    }
    let root = cx.callee_root(&c)?;
    let outs: Vec<&Shape> = match root {
        Shape::Tuple(t) if n > 1 || t.len() == 1 => t.iter().collect(),
        s => vec![s],
    };
    if outs.len() != n {
        return Err(cx.err(format!(
            "reducer `{}` returns {}, expected {n} scalar(s)",
            c.name,
            show(root)
        )));
    }
    for (k, o) in outs.iter().enumerate() {
        match scalar(o) {
            Some(e) if scalar(ps[k]) == Some(e) => {}
            _ => {
                return Err(cx.err(format!(
                    "reducer `{}` result {k} is {}, but its accumulator parameter {k} is {}",
                    c.name,
                    show(o),
                    show(ps[k])
                )));
            }
        }
    }
    Ok(())
}

/// Splits the operands of reduce/reduce-window into inputs (same dims) and scalar inits.
fn inputs_and_inits(cx: &Cx) -> R<(Vec<ElemType>, Vec<i64>, Vec<ElemType>)> {
    let n = cx.ops.len() / 2;
    if n == 0 || !cx.ops.len().is_multiple_of(2) {
        return Err(cx.err(format!(
            "{} needs an even number (>= 2) of operands, got {}",
            cx.name(),
            cx.ops.len()
        )));
    }
    let (_, d) = cx.arr(0)?;
    let mut ins = Vec::new();
    let mut inits = Vec::new();
    for k in 0..n {
        let (e, dk) = cx.arr(k)?;
        if dk != d {
            return Err(cx.err(format!(
                "{} inputs must have the same dimensions: {} and {}",
                cx.name(),
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        ins.push(e);
        let s = cx.shape(n + k)?;
        match scalar(s) {
            Some(ie) if ignoring_fp(ie, e) => inits.push(ie),
            _ => {
                return Err(cx.err(format!(
                    "{} init value {k} must be a {e}[] scalar, got {}",
                    cx.name(),
                    show(s)
                )));
            }
        }
    }
    Ok((ins, d, inits))
}

fn tuple_if_many(shapes: Vec<Shape>) -> Shape {
    if shapes.len() == 1 { shapes.into_iter().next().expect("one") } else { Shape::Tuple(shapes) }
}

fn reduce(cx: &Cx, dims: &[i64], to_apply: hlo_ir::CompId) -> R<Shape> {
    let (ins, d, inits) = inputs_and_inits(cx)?;
    check_unique_in_range(cx, dims, d.len(), "reduce dimension", false)?;
    for (k, (&i, &x)) in inits.iter().zip(&ins).enumerate() {
        if i != x {
            return Err(cx.err(format!(
                "reduce init value {k} is {}[] but input {k} is {}: no mixed floating-point precision in reduce",
                i,
                show(cx.shape(k)?)
            )));
        }
    }
    check_reducer(cx, to_apply, &inits, &ins, true)?;
    let out: Vec<i64> =
        (0..d.len() as i64).filter(|i| !dims.contains(i)).map(|i| d[i as usize]).collect();
    Ok(tuple_if_many(inits.iter().map(|&e| mk(e, &out)).collect()))
}

fn window_out(cx: &Cx, window: &Window, d: &[i64], what: &str) -> R<Vec<i64>> {
    if window.dims.len() != d.len() {
        return Err(cx.err(format!(
            "{what} window has {} dimensions, operand has rank {}",
            window.dims.len(),
            d.len()
        )));
    }
    let mut out = Vec::new();
    for (i, (w, &n)) in window.dims.iter().zip(d).enumerate() {
        if w.size < 1 || w.stride < 1 || w.lhs_dilate < 1 || w.rhs_dilate < 1 {
            return Err(cx.err(format!(
                "window dimension {i} needs size, stride and dilations >= 1 (size={} stride={} lhs_dilate={} rhs_dilate={})",
                w.size, w.stride, w.lhs_dilate, w.rhs_dilate
            )));
        }
        out.push(window_dim(n, w));
    }
    Ok(out)
}

/// XLA's window formula: dilated base, padded, minus dilated window, by stride.
pub fn window_dim(n: i64, w: &hlo_ir::op::WindowDim) -> i64 {
    let b = if n == 0 { 0 } else { (n - 1) * w.lhs_dilate + 1 };
    let p = w.pad_lo + b + w.pad_hi;
    let ws = (w.size - 1) * w.rhs_dilate + 1;
    if ws > p { 0 } else { (p - ws) / w.stride + 1 }
}

fn reduce_window(cx: &Cx, window: &Window, to_apply: hlo_ir::CompId) -> R<Shape> {
    let (ins, d, inits) = inputs_and_inits(cx)?;
    check_reducer(cx, to_apply, &inits, &ins, false)?;
    let out = window_out(cx, window, &d, "reduce-window")?;
    Ok(tuple_if_many(inits.iter().map(|&e| mk(e, &out)).collect()))
}

fn select_and_scatter(
    cx: &Cx,
    window: &Window,
    select: hlo_ir::CompId,
    scatter: hlo_ir::CompId,
) -> R<Shape> {
    let (e, d) = cx.arr(0)?;
    let (se, sd) = cx.arr(1)?;
    let init = cx.shape(2)?;
    if se != e {
        return Err(cx.err(format!(
            "select-and-scatter source {} must have the element type of the operand {}",
            show(cx.shape(1)?),
            show(cx.shape(0)?)
        )));
    }
    if scalar(init) != Some(se) {
        return Err(
            cx.err(format!("select-and-scatter init must be a {se}[] scalar, got {}", show(init)))
        );
    }
    let c = cx.callee(select)?;
    let ps = &c.params;
    if ps.len() != 2 || ps.iter().any(|p| scalar(p).is_none_or(|pe| !ignoring_fp(pe, e))) {
        return Err(cx.err(format!("select computation `{}` must take two {e}[] scalars", c.name)));
    }
    if scalar(cx.callee_root(&c)?) != Some(ElemType::Pred) {
        return Err(cx.err(format!("select computation `{}` must return pred[]", c.name)));
    }
    check_reducer(cx, scatter, &[se], &[se], false)?;
    let w = window_out(cx, window, &d, "select-and-scatter")?;
    if w != sd {
        return Err(cx.err(format!(
            "select-and-scatter source is {} but the window over the operand gives dimensions {w:?}",
            show(cx.shape(1)?)
        )));
    }
    Ok(mk(e, &d))
}

fn convolution(cx: &Cx, c: &hlo_ir::op::Convolution) -> R<Shape> {
    let (le, l) = cx.arr(0)?;
    let (ke, k) = cx.arr(1)?;
    let te = result_elem(cx, le, ke)?;
    let dn = &c.dims;
    let ns = dn.input_spatial.len();
    let (g, b) = (c.feature_group_count, c.batch_group_count);
    if g < 1 || b < 1 {
        return Err(
            cx.err(format!("feature_group_count ({g}) and batch_group_count ({b}) must be >= 1"))
        );
    }
    if g > 1 && b > 1 {
        return Err(cx.err(format!(
            "feature_group_count ({g}) and batch_group_count ({b}) cannot both be > 1"
        )));
    }
    if dn.kernel_spatial.len() != ns || dn.output_spatial.len() != ns {
        return Err(cx.err(
            "dim_labels give different numbers of spatial dimensions to input, kernel and output",
        ));
    }
    for (what, rank, perm) in [
        (
            "input",
            l.len(),
            [&[dn.input_batch, dn.input_feature][..], &dn.input_spatial[..]].concat(),
        ),
        (
            "kernel",
            k.len(),
            [&[dn.kernel_input_feature, dn.kernel_output_feature][..], &dn.kernel_spatial[..]]
                .concat(),
        ),
        (
            "output",
            ns + 2,
            [&[dn.output_batch, dn.output_feature][..], &dn.output_spatial[..]].concat(),
        ),
    ] {
        if rank != ns + 2 {
            return Err(
                cx.err(format!("convolution {what} has rank {rank}, dim_labels need {}", ns + 2))
            );
        }
        check_permutation(cx, &perm, rank, &format!("convolution {what} dim_labels"))?;
    }
    if c.window.dims.len() != ns {
        return Err(cx.err(format!(
            "convolution window has {} dimensions, dim_labels have {ns} spatial dimensions",
            c.window.dims.len()
        )));
    }
    let in_f = l[dn.input_feature as usize];
    let in_b = l[dn.input_batch as usize];
    let k_in = k[dn.kernel_input_feature as usize];
    let k_out = k[dn.kernel_output_feature as usize];
    if in_f % g != 0 || in_f / g != k_in {
        return Err(cx.err(format!(
            "convolution input features ({in_f}) / feature_group_count ({g}) must equal kernel input features ({k_in})"
        )));
    }
    if k_out % g != 0 {
        return Err(cx.err(format!(
            "kernel output features ({k_out}) must be divisible by feature_group_count ({g})"
        )));
    }
    if k_out % b != 0 {
        return Err(cx.err(format!(
            "kernel output features ({k_out}) must be divisible by batch_group_count ({b})"
        )));
    }
    if in_b % b != 0 {
        return Err(
            cx.err(format!("input batch ({in_b}) must be divisible by batch_group_count ({b})"))
        );
    }
    let mut out = vec![0; ns + 2];
    out[dn.output_batch as usize] = in_b / b;
    out[dn.output_feature as usize] = k_out;
    for i in 0..ns {
        let w = &c.window.dims[i];
        let ks = k[dn.kernel_spatial[i] as usize];
        if w.size != ks {
            return Err(cx.err(format!("convolution window size {} of spatial dimension {i} differs from the kernel's size {ks}", w.size)));
        }
        if w.stride < 1 || w.lhs_dilate < 1 || w.rhs_dilate < 1 {
            return Err(
                cx.err(format!("convolution window dimension {i} needs stride and dilations >= 1"))
            );
        }
        out[dn.output_spatial[i] as usize] = window_dim(l[dn.input_spatial[i] as usize], w);
    }
    Ok(mk(te, &out))
}

/// Indices with the implicit trailing 1 when `index_vector_dim == rank`.
fn index_dims(cx: &Cx, k: usize, ivd: i64) -> R<Vec<i64>> {
    let (e, mut d) = cx.arr(k)?;
    if !e.is_integer() {
        return Err(cx.err(format!("{} indices must be integers, got {e}", cx.name())));
    }
    if ivd < 0 || ivd as usize > d.len() {
        return Err(cx.err(format!(
            "index_vector_dim {ivd} is out of range for indices of rank {}",
            d.len()
        )));
    }
    if ivd as usize == d.len() {
        d.push(1);
    }
    Ok(d)
}

/// The batching dimensions of gather/scatter, each with its attribute name: operand-side
/// and indices-side batching dims, collapsed (gather) / inserted (scatter) window dims,
/// and the start_index_map (gather) / scatter_dims_to_operand_dims (scatter).
struct Batching<'a> {
    operand: (&'static str, &'a [i64]),
    indices: (&'static str, &'a [i64]),
    collapsed: (&'static str, &'a [i64]),
    index_map: (&'static str, &'a [i64]),
}

/// XLA's pairing rules for batching dimensions: equal counts; indices-side dims unique, in
/// range and not `index_vector_dim`; paired dims of equal size; an operand batching dim is
/// neither collapsed/inserted nor indexed. `id` has the implicit trailing 1 when
/// `index_vector_dim == rank`, so range checks use the rank written in the text.
fn check_batching(
    cx: &Cx,
    b: Batching,
    od: &[i64],
    id: &[i64],
    ivd: usize,
    indices_operand: usize,
) -> R<()> {
    let op = cx.name();
    let ((on, ob), (inn, ib)) = (b.operand, b.indices);
    if ob.len() != ib.len() {
        return Err(cx.err(format!("{op} {on} {ob:?} and {inn} {ib:?} differ in length")));
    }
    let indices_rank = cx.arr(indices_operand)?.1.len();
    for &d in ib {
        if d == ivd as i64 {
            return Err(cx.err(format!("{op} {inn} must not contain index_vector_dim {ivd}")));
        }
    }
    check_unique_in_range(cx, ib, indices_rank, &format!("{op} {inn}"), false)?;
    for (k, (&o, &i)) in ob.iter().zip(ib).enumerate() {
        let (os, is) = (od[o as usize], id[i as usize]);
        if os != is {
            return Err(cx.err(format!(
                "{op} {on}[{k}] (operand dim {o}, size {os}) and {inn}[{k}] (indices dim {i}, size {is}) must have the same size: operand {} and indices {}",
                show(cx.shape(0)?),
                show(cx.shape(indices_operand)?)
            )));
        }
    }
    for (what, dims) in [b.collapsed, b.index_map] {
        if let Some(d) = dims.iter().find(|d| ob.contains(d)) {
            return Err(cx.err(format!("{op} operand dimension {d} is in both {what} and {on}")));
        }
    }
    Ok(())
}

fn gather(cx: &Cx, g: &hlo_ir::op::GatherDims) -> R<Shape> {
    let (e, od) = cx.arr(0)?;
    let id = index_dims(cx, 1, g.index_vector_dim)?;
    let ivd = g.index_vector_dim as usize;
    let batch_rank = id.len() - 1;
    let out_rank = g.offset_dims.len() + batch_rank;
    check_unique_in_range(cx, &g.offset_dims, out_rank, "gather offset_dims", true)?;
    check_unique_in_range(
        cx,
        &g.collapsed_slice_dims,
        od.len(),
        "gather collapsed_slice_dims",
        true,
    )?;
    check_unique_in_range(
        cx,
        &g.operand_batching_dims,
        od.len(),
        "gather operand_batching_dims",
        true,
    )?;
    check_unique_in_range(cx, &g.start_index_map, od.len(), "gather start_index_map", false)?;
    if g.start_index_map.len() as i64 != id[ivd] {
        return Err(cx.err(format!(
            "gather start_index_map has {} entries but the index vector dimension has size {}",
            g.start_index_map.len(),
            id[ivd]
        )));
    }
    check_batching(
        cx,
        Batching {
            operand: ("operand_batching_dims", &g.operand_batching_dims),
            indices: ("start_indices_batching_dims", &g.start_indices_batching_dims),
            collapsed: ("collapsed_slice_dims", &g.collapsed_slice_dims),
            index_map: ("start_index_map", &g.start_index_map),
        },
        &od,
        &id,
        ivd,
        1,
    )?;
    if g.slice_sizes.len() != od.len() {
        return Err(cx.err(format!(
            "gather has {} slice_sizes for an operand of rank {}",
            g.slice_sizes.len(),
            od.len()
        )));
    }
    if g.offset_dims.len() + g.collapsed_slice_dims.len() + g.operand_batching_dims.len()
        != od.len()
    {
        return Err(cx.err(format!(
            "gather offset_dims ({}) + collapsed_slice_dims ({}) + operand_batching_dims ({}) must equal the operand rank ({})",
            g.offset_dims.len(),
            g.collapsed_slice_dims.len(),
            g.operand_batching_dims.len(),
            od.len()
        )));
    }
    for (i, (&s, &n)) in g.slice_sizes.iter().zip(&od).enumerate() {
        if s < 0 || s > n {
            return Err(cx.err(format!(
                "gather slice size {s} of dimension {i} is not within 0..={n} (operand {})",
                show(cx.shape(0)?)
            )));
        }
        let i = i as i64;
        if (g.collapsed_slice_dims.contains(&i) || g.operand_batching_dims.contains(&i)) && s > 1 {
            return Err(cx.err(format!(
                "gather slice size of collapsed/batching dimension {i} must be <= 1, got {s}"
            )));
        }
    }
    let mut offs = (0..od.len() as i64)
        .filter(|i| !g.collapsed_slice_dims.contains(i) && !g.operand_batching_dims.contains(i))
        .map(|i| g.slice_sizes[i as usize]);
    let mut bats = (0..id.len()).filter(|&i| i != ivd).map(|i| id[i]);
    let out: Vec<i64> = (0..out_rank as i64)
        .map(|i| if g.offset_dims.contains(&i) { offs.next() } else { bats.next() }.unwrap_or(0))
        .collect();
    Ok(mk(e, &out))
}

fn scatter(cx: &Cx, s: &hlo_ir::op::ScatterDims) -> R<Shape> {
    let total = cx.ops.len();
    if total < 3 || total.is_multiple_of(2) {
        return Err(cx.err(format!("scatter needs 2N+1 operands, got {total}")));
    }
    let n = (total - 1) / 2;
    let (_, od) = cx.arr(0)?;
    let id = index_dims(cx, n, s.index_vector_dim)?;
    let ivd = s.index_vector_dim as usize;
    check_unique_in_range(
        cx,
        &s.inserted_window_dims,
        od.len(),
        "scatter inserted_window_dims",
        true,
    )?;
    check_unique_in_range(
        cx,
        &s.input_batching_dims,
        od.len(),
        "scatter input_batching_dims",
        true,
    )?;
    check_unique_in_range(
        cx,
        &s.scatter_dims_to_operand_dims,
        od.len(),
        "scatter scatter_dims_to_operand_dims",
        false,
    )?;
    if s.update_window_dims.len() + s.inserted_window_dims.len() + s.input_batching_dims.len()
        != od.len()
    {
        return Err(cx.err(format!(
            "scatter update_window_dims ({}) + inserted_window_dims ({}) + input_batching_dims ({}) must equal the operand rank ({})",
            s.update_window_dims.len(),
            s.inserted_window_dims.len(),
            s.input_batching_dims.len(),
            od.len()
        )));
    }
    if s.scatter_dims_to_operand_dims.len() as i64 != id[ivd] {
        return Err(cx.err(format!(
            "scatter scatter_dims_to_operand_dims has {} entries but the index vector dimension has size {}",
            s.scatter_dims_to_operand_dims.len(),
            id[ivd]
        )));
    }
    check_batching(
        cx,
        Batching {
            operand: ("input_batching_dims", &s.input_batching_dims),
            indices: ("scatter_indices_batching_dims", &s.scatter_indices_batching_dims),
            collapsed: ("inserted_window_dims", &s.inserted_window_dims),
            index_map: ("scatter_dims_to_operand_dims", &s.scatter_dims_to_operand_dims),
        },
        &od,
        &id,
        ivd,
        n,
    )?;
    let mut results = Vec::new();
    let mut elems = Vec::new();
    for k in 0..n {
        let (e, dk) = cx.arr(k)?;
        if dk != od {
            return Err(cx.err(format!(
                "scatter operands must have the same dimensions: {} and {}",
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        let (ue, ud) = cx.arr(n + 1 + k)?;
        if ue != e {
            return Err(cx.err(format!(
                "scatter update {k} {} must have the element type of operand {k} {} (no mixed floating-point precision)",
                show(cx.shape(n + 1 + k)?),
                show(cx.shape(k)?)
            )));
        }
        let want = id.len() - 1 + s.update_window_dims.len();
        if ud.len() != want {
            return Err(
                cx.err(format!("scatter update {k} has rank {}, expected {want}", ud.len()))
            );
        }
        check_unique_in_range(
            cx,
            &s.update_window_dims,
            ud.len(),
            "scatter update_window_dims",
            true,
        )?;
        let mut window_operand_dims = (0..od.len() as i64)
            .filter(|i| !s.inserted_window_dims.contains(i) && !s.input_batching_dims.contains(i));
        let mut scatter_index_dims = (0..id.len()).filter(|&i| i != ivd);
        for (u, &size) in ud.iter().enumerate() {
            if s.update_window_dims.contains(&(u as i64)) {
                let o = window_operand_dims.next().unwrap_or(0) as usize;
                if size > od[o] {
                    return Err(cx.err(format!(
                        "scatter update {k} window dim {u} is {size}, larger than operand dim {o} ({}): update {}, operand {}",
                        od[o],
                        show(cx.shape(n + 1 + k)?),
                        show(cx.shape(k)?)
                    )));
                }
            } else {
                let j = scatter_index_dims.next().unwrap_or(0);
                if size != id[j] {
                    return Err(cx.err(format!(
                        "scatter update {k} dim {u} is {size}, but indices dim {j} is {}",
                        id[j]
                    )));
                }
            }
        }
        results.push(mk(e, &od));
        elems.push(e);
    }
    let ups: Vec<ElemType> = (0..n).map(|k| cx.arr(n + 1 + k).map(|x| x.0)).collect::<R<_>>()?;
    check_reducer(cx, s.to_apply, &elems, &ups, false)?;
    Ok(tuple_if_many(results))
}

/// `map` (XLA's verifier: `InferMapShape` over every dimension, whatever `dimensions`
/// says, and operand element types equal to the parameters'): N arrays of the same dims
/// (element types may differ); `to_apply` takes N scalars of the operands' element types
/// and returns a scalar, whose element type is the result's. Scalar operands beside
/// arrays, which XLA's inference would broadcast, are refused: no engine broadcasts them.
fn map(cx: &Cx, to_apply: hlo_ir::CompId) -> R<Shape> {
    let a = cx.array(0)?;
    for k in 1..cx.ops.len() {
        if cx.array(k)?.dims != a.dims {
            return Err(cx.err(format!(
                "map operands must have the same dimensions: {} and {}",
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
    }
    let c = cx.callee(to_apply)?;
    if c.params.len() != cx.ops.len() {
        return Err(cx.err(format!(
            "map computation `{}` must take {} scalar parameters (one per operand), takes {}",
            c.name,
            cx.ops.len(),
            c.params.len()
        )));
    }
    for (k, p) in c.params.iter().enumerate() {
        let e = cx.array(k)?.elem;
        if scalar(p) != Some(e) {
            return Err(cx.err(format!(
                "map computation `{}` parameter {k} is {}, expected {e}[] (operand {k}'s element type)",
                c.name,
                show(p)
            )));
        }
    }
    let root = cx.callee_root(&c)?;
    let Some(e) = scalar(root) else {
        return Err(cx.err(format!(
            "map computation `{}` must return a scalar, returns {}",
            c.name,
            show(root)
        )));
    };
    Ok(like(a, e))
}

fn sort(cx: &Cx, dim: i64, to_apply: hlo_ir::CompId) -> R<Shape> {
    let (_, d) = cx.arr(0)?;
    dim_in_range(cx, dim, d.len(), "sort dimension")?;
    let mut shapes = Vec::new();
    let mut elems = Vec::new();
    for k in 0..cx.ops.len() {
        let (e, dk) = cx.arr(k)?;
        if dk != d {
            return Err(cx.err(format!(
                "sort operands must have the same dimensions: {} and {}",
                show(cx.shape(0)?),
                show(cx.shape(k)?)
            )));
        }
        shapes.push(mk(e, &d));
        elems.push(e);
    }
    let c = cx.callee(to_apply)?;
    let ps = &c.params;
    if ps.len() != 2 * elems.len() {
        return Err(cx.err(format!(
            "sort comparator `{}` must take {} scalar parameters, takes {}",
            c.name,
            2 * elems.len(),
            ps.len()
        )));
    }
    for (k, p) in ps.iter().enumerate() {
        if scalar(p) != Some(elems[k / 2]) {
            return Err(cx.err(format!(
                "sort comparator `{}` parameter {k} is {}, expected {}[]",
                c.name,
                show(p),
                elems[k / 2]
            )));
        }
    }
    if scalar(cx.callee_root(&c)?) != Some(ElemType::Pred) {
        return Err(cx.err(format!("sort comparator `{}` must return pred[]", c.name)));
    }
    Ok(tuple_if_many(shapes))
}

/// `scan` (XLA's HLO parser and verifier, and MHLO's `ScanOp` verifier that XLA runs
/// when it compiles): operands are `inputs ++ inits` (the last `num_carries` are the
/// inits); `to_apply` takes one slice of each input (the scan dimension removed) then
/// the carries, and returns `outputs ++ new carries` (a tuple, or one array when it
/// returns one value); each output is the per-step result stacked along the scan
/// dimension, the result `outputs ++ final carries` (one array when that is one value).
/// With no inputs the scan length is the declared first output's.
fn scan(cx: &Cx, dim: i64, carries: i64, to_apply: hlo_ir::CompId) -> R<Shape> {
    let n = cx.ops.len();
    if carries < 0 || carries as usize > n {
        return Err(cx.err(format!(
            "scan num_carries={carries} must be within 0..={n} (the number of operands)"
        )));
    }
    let carries = carries as usize;
    let inputs = n - carries;
    if dim < 0 {
        return Err(cx.err(format!("scan dimension {dim} is negative")));
    }
    let d = dim as usize;
    // Inputs: arrays of rank > dim, one length along dim.
    let mut len: Option<i64> = None;
    let mut slices = Vec::with_capacity(inputs);
    for k in 0..inputs {
        let (e, mut dk) = cx.arr(k)?;
        if d >= dk.len() {
            return Err(cx.err(format!(
                "scan dimension {dim} is out of bounds for input {k} of rank {}",
                dk.len()
            )));
        }
        let l = dk.remove(d);
        match len {
            Some(l0) if l0 != l => {
                return Err(cx.err(format!(
                    "scan inputs must have one length along dimension {dim}: input 0 has {l0}, input {k} has {l}"
                )))
            }
            _ => len = Some(l),
        }
        slices.push(mk(e, &dk));
    }
    let c = cx.callee(to_apply)?;
    let ps = &c.params;
    if ps.len() != n {
        return Err(cx.err(format!("scan passes {n} arguments to `{}` ({inputs} input slices, {carries} carries), which takes {}", c.name, ps.len())));
    }
    for (k, p) in ps.iter().enumerate() {
        let (want, what) = if k < inputs {
            (&slices[k], format!("a slice of input {k}"))
        } else {
            (cx.shape(k)?, format!("init {}", k - inputs))
        };
        if !want.compatible(p) {
            return Err(cx.err(format!(
                "parameter {k} of `{}` is {} but scan passes it {what}, {}",
                c.name,
                show(p),
                show(want)
            )));
        }
    }
    let root = cx.callee_root(&c)?;
    let results: Vec<&Shape> = match root {
        Shape::Tuple(t) => t.iter().collect(),
        s => vec![s],
    };
    if results.len() < carries {
        return Err(cx.err(format!(
            "`{}` returns {} values, fewer than the {carries} carries",
            c.name,
            results.len()
        )));
    }
    let outputs = results.len() - carries;
    if inputs == 0 && outputs == 0 {
        return Err(cx.err("scan needs at least one input or one output"));
    }
    for j in 0..carries {
        let (r, init) = (results[outputs + j], cx.shape(inputs + j)?);
        if !r.compatible(init) {
            return Err(cx.err(format!(
                "`{}` result {} is {} but init {j} is {}: a carry keeps its shape",
                c.name,
                outputs + j,
                show(r),
                show(init)
            )));
        }
    }
    // With no inputs the scan length is the one the text declares for output 0.
    let len = match len {
        Some(l) => l,
        None => {
            let declared = match cx.declared()? {
                Shape::Tuple(t) => t.first(),
                s => Some(s),
            };
            match declared {
                Some(Shape::Array(a)) if d < a.dims.len() => a.dims[d].bound().unwrap_or(0) as i64,
                _ => return Err(cx.err(format!("scan with no inputs takes its length from output 0's dimension {dim}, which the declared shape lacks"))),
            }
        }
    };
    let mut out = Vec::with_capacity(results.len());
    for (i, r) in results[..outputs].iter().enumerate() {
        let Shape::Array(a) = r else {
            return Err(cx.err(format!(
                "`{}` output {i} must be an array, got {}",
                c.name,
                show(r)
            )));
        };
        cx.check_static(a)?;
        if d > a.dims.len() {
            return Err(cx.err(format!(
                "scan dimension {dim} is out of bounds for output {i} of `{}`, {} (rank {})",
                c.name,
                show(r),
                a.dims.len()
            )));
        }
        let mut dims: Vec<i64> = a.dims.iter().map(|x| x.bound().unwrap_or(0) as i64).collect();
        dims.insert(d, len);
        out.push(mk(a.elem, &dims));
    }
    out.extend(results[outputs..].iter().map(|s| (*s).clone()));
    Ok(tuple_if_many(out))
}

/// Floating-point or complex (the linear-algebra ops' element types).
fn float_or_complex(e: ElemType) -> bool {
    e.is_float() || e.is_complex()
}

/// `cholesky` (XLA's `InferCholeskyShape`): a floating-point or complex operand of rank
/// >= 2 whose two minor dimensions are equal; the result is the operand's shape.
fn cholesky(cx: &Cx) -> R<Shape> {
    let a = cx.array(0)?;
    if !float_or_complex(a.elem) {
        return Err(cx.err(format!(
            "cholesky expects a floating-point or complex operand, got {}",
            show(cx.shape(0)?)
        )));
    }
    let d = &a.dims;
    if d.len() < 2 {
        return Err(
            cx.err(format!("cholesky's operand must have rank >= 2, got {}", show(cx.shape(0)?)))
        );
    }
    if d[d.len() - 1] != d[d.len() - 2] {
        return Err(cx.err(format!(
            "the two minor dimensions of cholesky's operand must be equal, got {}",
            show(cx.shape(0)?)
        )));
    }
    Ok(like(a, a.elem))
}

/// `triangular-solve` (XLA's `InferTriangularSolveShape`): `a` and `b` floating-point or
/// complex of one element type, equal ranks >= 2, `a` square in its minor dimensions,
/// `a`'s last dimension equal to `b`'s second-minor (`left_side`) or minor dimension, the
/// same batch dimensions, and `transpose_a` one of NO_TRANSPOSE, TRANSPOSE, ADJOINT
/// (XLA refuses a solve without it); the result is `b`'s shape.
fn triangular_solve(cx: &Cx, left_side: bool, transpose_a: Option<&str>) -> R<Shape> {
    let (a, b) = (cx.array(0)?, cx.array(1)?);
    let (sa, sb) = (show(cx.shape(0)?), show(cx.shape(1)?));
    if !float_or_complex(a.elem) || a.elem != b.elem {
        return Err(cx.err(format!("triangular-solve expects floating-point or complex operands of one element type, got {sa} and {sb}")));
    }
    let r = a.dims.len();
    if r < 2 {
        return Err(cx.err(format!("triangular-solve's `a` must have rank >= 2, got {sa}")));
    }
    if b.dims.len() != r {
        return Err(
            cx.err(format!("triangular-solve's operands must have equal ranks, got {sa} and {sb}"))
        );
    }
    if a.dims[r - 1] != a.dims[r - 2] {
        return Err(cx.err(format!(
            "the two minor dimensions of triangular-solve's `a` must be equal, got {sa}"
        )));
    }
    let shared = if left_side { r - 2 } else { r - 1 };
    if a.dims[r - 1] != b.dims[shared] {
        return Err(cx.err(format!(
            "triangular-solve's shared dimension does not match: `a` {sa} has {} columns, `b` {sb} has {} in dimension {shared} (left_side={left_side})",
            a.dims[r - 1].bound().unwrap_or(0),
            b.dims[shared].bound().unwrap_or(0)
        )));
    }
    if a.dims[..r - 2] != b.dims[..r - 2] {
        return Err(cx.err(format!("triangular-solve's batch dimensions differ: {sa} and {sb}")));
    }
    match transpose_a {
        Some("NO_TRANSPOSE" | "TRANSPOSE" | "ADJOINT") => {}
        Some(t) => return Err(cx.err(format!("transpose_a={t} is not one of NO_TRANSPOSE, TRANSPOSE, ADJOINT"))),
        None => return Err(cx.err("triangular-solve needs transpose_a= (NO_TRANSPOSE, TRANSPOSE or ADJOINT); XLA refuses a solve without it")),
    }
    Ok(like(b, b.elem))
}

/// `fft` (XLA's `InferFftShape`): 1 to 3 `fft_length` entries, at most the operand's
/// rank; FFT/IFFT take and give complex values; RFFT takes f32/f64 whose innermost
/// dimensions equal `fft_length` and gives c64/c128 with the last one `n/2+1` (0 stays
/// 0); IRFFT takes complex values whose innermost dimensions but the last equal
/// `fft_length` and whose last is `n/2+1`, and gives the real type with the last `n`.
fn fft(cx: &Cx, fft_type: &str, len: &[i64]) -> R<Shape> {
    let a = cx.array(0)?;
    let k = len.len();
    if !(1..=3).contains(&k) {
        return Err(cx.err(format!("fft supports 1 to 3 dimensions (fft_length entries), got {k}")));
    }
    if let Some(n) = len.iter().find(|&&n| n < 0) {
        return Err(cx.err(format!("fft_length entry {n} is negative")));
    }
    let r = a.dims.len();
    if r < k {
        return Err(cx.err(format!(
            "an fft of {k} dimensions needs an operand of rank >= {k}, got {}",
            show(cx.shape(0)?)
        )));
    }
    let dims: Vec<i64> = a.dims.iter().map(|d| d.bound().unwrap_or(0) as i64).collect();
    let inner = &dims[r - k..];
    match fft_type {
        "FFT" | "IFFT" => {
            if !a.elem.is_complex() {
                return Err(cx.err(format!(
                    "{fft_type} expects a complex operand, got {}",
                    show(cx.shape(0)?)
                )));
            }
            Ok(like(a, a.elem))
        }
        "RFFT" => {
            let out = match a.elem {
                ElemType::F32 => ElemType::C64,
                ElemType::F64 => ElemType::C128,
                _ => {
                    return Err(cx.err(format!(
                        "RFFT expects an f32 or f64 operand, got {}",
                        show(cx.shape(0)?)
                    )));
                }
            };
            for (i, (&d, &n)) in inner.iter().zip(len).enumerate() {
                if d != n {
                    return Err(cx.err(format!("RFFT needs the innermost dimensions to equal fft_length, but dimension {} is {d} and should be {n}", r - k + i)));
                }
            }
            let mut o = dims.clone();
            if len[k - 1] != 0 {
                o[r - 1] = len[k - 1] / 2 + 1;
            }
            Ok(mk(out, &o))
        }
        "IRFFT" => {
            let Some(out) = complex_component(a.elem) else {
                return Err(
                    cx.err(format!("IRFFT expects a complex operand, got {}", show(cx.shape(0)?)))
                );
            };
            for (i, (&d, &n)) in inner[..k - 1].iter().zip(len).enumerate() {
                if d != n {
                    return Err(cx.err(format!(
                        "IRFFT needs all but the last innermost dimension to equal fft_length, but dimension {} is {d} and should be {n}",
                        r - k + i
                    )));
                }
            }
            let (last, n) = (dims[r - 1], len[k - 1]);
            if (last != 0 || n != 0) && last != n / 2 + 1 {
                return Err(cx.err(format!("IRFFT needs the innermost dimension to be fft_length/2+1, but dimension {} is {last} and should be {}", r - 1, n / 2 + 1)));
            }
            let mut o = dims.clone();
            o[r - 1] = n;
            Ok(mk(out, &o))
        }
        t => Err(cx.err(format!("unknown fft_type `{t}` (FFT, IFFT, RFFT or IRFFT)"))),
    }
}

/// `rng-bit-generator` (XLA's verifier: a tuple result has two elements, the state and
/// the bits, and the state keeps the operand's shape; XLA compiles a non-tuple result
/// too, so that is left to the engines). XLA's CPU backend also refuses, when it
/// compiles, a state that is not `u64[2]` (`rng_three_fry`) or `u64[2]`/`u64[3]`
/// (`rng_philox`, the default) and `pred` bits (StableHLO's verifier); those are checked
/// here too. Which integer or float widths the bits may have is the engines' business.
fn rng_bit_generator(cx: &Cx, alg: hlo_ir::op::RngAlgorithm) -> R<Shape> {
    let declared = cx.declared()?;
    let Shape::Tuple(t) = declared else { return Ok(declared.clone()) };
    if t.len() != 2 {
        return Err(cx.err(format!(
            "rng-bit-generator produces a (state, bits) tuple of two elements, declared {}",
            show(declared)
        )));
    }
    let state = cx.array(0)?;
    if !t[0].compatible(cx.shape(0)?) {
        return Err(cx.err(format!(
            "rng-bit-generator's output state {} must have the input state's shape {}",
            show(&t[0]),
            show(cx.shape(0)?)
        )));
    }
    let n = match (state.elem, state.dims.as_slice()) {
        (ElemType::U64, [d]) => d.bound().unwrap_or(0),
        _ => {
            return Err(cx.err(format!(
                "rng-bit-generator's state must be a u64 vector, got {}",
                show(cx.shape(0)?)
            )));
        }
    };
    use hlo_ir::op::RngAlgorithm as A;
    match (alg, n) {
        (A::ThreeFry, 2) | (A::Philox | A::Default, 2 | 3) => {}
        (A::ThreeFry, _) => {
            return Err(
                cx.err(format!("rng_three_fry takes a u64[2] state (key, counter), got u64[{n}]"))
            );
        }
        _ => {
            return Err(cx.err(format!(
                "rng_philox (and rng_default on CPU) takes a u64[2] or u64[3] state, got u64[{n}]"
            )));
        }
    }
    match &t[1] {
        Shape::Array(b)
            if b.elem != ElemType::Pred && (b.elem.is_integer() || b.elem.is_float()) => {}
        s => {
            return Err(cx.err(format!(
                "rng-bit-generator produces integer or floating-point bits, declared {}",
                show(s)
            )));
        }
    }
    Ok(declared.clone())
}

fn group_size(groups: &Option<ReplicaGroups>) -> Option<i64> {
    match groups {
        Some(ReplicaGroups::Explicit(g)) => g.first().map(|g| g.len() as i64),
        Some(ReplicaGroups::Iota(l)) => l.dims.get(1).copied(),
        _ => None,
    }
}

fn collective(cx: &Cx, op: Opcode, attrs: &hlo_ir::op::CollectiveAttrs) -> R<Shape> {
    let n = group_size(&attrs.replica_groups);
    let shapes: Vec<&Shape> = (0..cx.ops.len()).map(|k| cx.shape(k)).collect::<R<_>>()?;
    if let (Some(r), Opcode::AllReduce | Opcode::ReduceScatter) = (attrs.to_apply, op) {
        // One binary reducer applied to every operand.
        for k in 0..shapes.len() {
            let (e, _) = cx.arr(k)?;
            check_reducer(cx, r, &[e], &[e], false)?;
        }
    }
    let declared_leaves: Vec<&Shape> = match cx.declared {
        Some(Shape::Tuple(t)) => t.iter().collect(),
        Some(s) => vec![s],
        None => Vec::new(),
    };
    match op {
        Opcode::AllReduce | Opcode::CollectiveBroadcast => {
            for k in 0..shapes.len() {
                cx.arr(k)?;
            }
            Ok(tuple_if_many(shapes.into_iter().cloned().collect()))
        }
        Opcode::CollectivePermute => {
            if let Some(pairs) = &attrs.source_target_pairs {
                for (i, (s, t)) in pairs.iter().enumerate() {
                    if pairs[..i].iter().any(|p| p.0 == *s) {
                        return Err(cx.err(format!("collective-permute source {s} appears twice")));
                    }
                    if pairs[..i].iter().any(|p| p.1 == *t) {
                        return Err(cx.err(format!("collective-permute target {t} appears twice")));
                    }
                }
            }
            Ok(tuple_if_many(shapes.into_iter().cloned().collect()))
        }
        Opcode::AllGather | Opcode::ReduceScatter | Opcode::AllToAll => {
            let dims = attrs.dimensions.clone();
            if op == Opcode::AllToAll && dims.is_none() {
                return Ok(Shape::Tuple(shapes.into_iter().cloned().collect()));
            }
            let Some(&[d]) = dims.as_deref() else {
                return Err(
                    cx.err(format!("{} needs dimensions={{d}} with one dimension", op.name()))
                );
            };
            let mut out = Vec::new();
            for k in 0..shapes.len() {
                let (e, mut dk) = cx.arr(k)?;
                dim_in_range(cx, d, dk.len(), &format!("{} dimension", op.name()))?;
                let x = dk[d as usize];
                match (op, n) {
                    (Opcode::AllGather, Some(n)) => dk[d as usize] = x * n,
                    (Opcode::ReduceScatter | Opcode::AllToAll, Some(n)) => {
                        if n == 0 || x % n != 0 {
                            return Err(cx.err(format!("{} dimension {d} of size {x} is not divisible by the group size {n}", op.name())));
                        }
                        if op == Opcode::ReduceScatter {
                            dk[d as usize] = x / n;
                        }
                    }
                    (Opcode::AllToAll, None) => {}
                    // Group size unknown: take the declared size of dimension d.
                    _ => {
                        cx.declared()?;
                        if let Some(Shape::Array(a)) = declared_leaves.get(k)
                            && let Some(Dim::Static(s)) = a.dims.get(d as usize)
                        {
                            dk[d as usize] = *s as i64;
                        }
                    }
                }
                out.push(mk(e, &dk));
            }
            Ok(tuple_if_many(out))
        }
        _ => Err(cx.err(format!("shape inference for `{}` is not yet implemented", op.name()))),
    }
}
