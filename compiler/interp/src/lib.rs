//! `hlo-interp`: the reference interpreter: plain, direct evaluation of a checked module with XLA's
//! semantics. It is the semantic oracle that the JIT runtime and the simulator's numerics
//! are checked against, so every kernel favours being obviously right over being fast
//! (while staying fast enough for whole training steps).
//!
//! - [`value`]: values and their storage classes (integers wrap at their width, bf16/f16
//!   round to nearest even after every operation).
//! - [`elementwise`], [`data_movement`], [`compute`]: the kernels; [`batch_norm`] and
//!   [`rng`] (`rng`, `rng-bit-generator`, `rng-get-and-update-state`) evaluate ops the
//!   other engines get from expander passes.
//! - [`Interpreter`]: evaluates computations instruction by instruction in dependency
//!   order, calling computations for `call`/`fusion`/`while`/`conditional` and applying
//!   reducers (a single binary opcode runs as a kernel; anything else is evaluated on
//!   scalars).
//! - `collectives`: the interpreter's side of the device fabric ([`hlo_fabric`]), which
//!   gives collectives their meaning on N devices for every engine.
//! - [`seeded`]: seeded pseudo-random inputs for a module's parameters.
//!
//! Dead code is not evaluated: an instruction whose value never reaches the root and
//! that has no side effects (through its callees) is skipped, as XLA removes it (DCE)
//! before running a module; so a dead instruction the interpreter could not evaluate
//! (the `Pin` custom-call of XLA's `types.hlo`) does not stop a run, while a live `Pin`
//! is refused, as XLA's CPU backend refuses it.
//!
//! Precondition: the module passed [`hlo_check::check`] (structure, shapes, static
//! dims). Runtime problems (an elided constant, an unsupported opcode or element type)
//! are errors at the instruction concerned, never panics.
//!
//! Guards, so that the interpreter stays a trustworthy oracle even on a module a pass
//! got wrong:
//! - **Shape check.** Every argument of a call and every instruction's result is
//!   compared with its declared shape (element type, dims, tuple structure; metadata
//!   only, never the elements); a mismatch is an error at the instruction naming both
//!   shapes. `map` checks its operands' dims and its computation's results, and the
//!   identity custom-calls (`Sharding`, ...), which shape inference does not cover,
//!   their operand.
//! - **Kernel preconditions.** Kernels check cheaply what they index by (storage
//!   classes, operand dims, dimension numbers, slice/pad/window bounds, scalar index
//!   operands) and return an error on an unchecked module; the attributes of `gather`,
//!   `scatter` and `convolution` are left to shape inference.
//! - **Memory budget.** Before an instruction that allocates runs, its result's bytes
//!   (from the declared shape, [`shape_bytes`], overflow = refused) and the bytes of
//!   all live arrays ([`live_bytes`]) must fit the budget
//!   ([`Interpreter::with_memory_budget`], default [`default_memory_budget`]: 16 GiB, or
//!   3/4 of the physical memory when that is less). Inputs and outputs are counted
//!   too. Sizes count the interpreter's storage: 1 byte per `pred`, 4 per f32/bf16/f16,
//!   8 per integer and f64.

pub mod batch_norm;
mod collectives;
pub mod complex;
pub mod compute;
pub mod data_movement;
pub mod elementwise;
pub mod fft;
pub mod linalg;
pub mod rng;
pub mod seeded;
pub mod value;

use hlo_ir::op::{Branches, CustomCall};
use hlo_ir::tensor::format_bytes;
use hlo_ir::{CompId, Computation, Diagnostic, Module, NodeIndex, Op, Opcode, Shape, Tensor};

use compute::Reducer;
use hlo_ir::schedule::Schedule as Plan;
pub use value::{Array, Data, Failure, Value, live_bytes, shape_bytes};
use value::{describe, dims_of, mismatch, shape_text};

/// An evaluation failure at one instruction.
pub type EvalError = Diagnostic;

/// Evaluates computations of one module.
pub struct Interpreter<'m> {
    m: &'m Module,
    plans: Vec<Plan>,
    /// Per computation, per plan position: whether the instruction is evaluated (its
    /// value reaches the root, or it has side effects); see [`live_positions`].
    live: Vec<Vec<bool>>,
    /// Per computation: `Some(op)` when it is `ROOT op(p0, p1)` on scalars.
    binary: Vec<Option<Opcode>>,
    /// Bytes of array storage the interpreter may hold at once (see [`Interpreter::with_memory_budget`]).
    budget: u64,
    hooks: Option<&'m dyn Hooks>,
    /// The `rng-get-and-update-state` and `rng` counters; they persist across runs.
    rng: rng::Counters,
}

/// Observes and adjusts an evaluation ([`Interpreter::with_hooks`]): a hardware model
/// follows the instructions as they execute (whiles as many times as they run, the
/// conditional's taken branch only) and supplies its own multiplier numerics.
pub trait Hooks: Sync {
    /// Called after instruction `node` of computation `comp` evaluated, in execution order
    /// (instructions of fused and called computations too, each time they run).
    fn executed(&self, _comp: CompId, _node: NodeIndex) {}

    /// Evaluates `dot` or `convolution` instruction `node` of `comp` on its operands.
    /// `exact` is the interpreter's own evaluation (products and sums in the result's
    /// precision); a hook may call it on transformed operands, e.g. the bf16 parts of an
    /// f32 operand, once per pass of a bf16 multiplier.
    fn multiply(
        &self,
        _comp: CompId,
        _node: NodeIndex,
        lhs: &Array,
        rhs: &Array,
        exact: &dyn Fn(&Array, &Array) -> Result<Array, Failure>,
    ) -> Result<Array, Failure> {
        exact(lhs, rhs)
    }

    /// The device this evaluation is, among the devices of an SPMD run: its index (the
    /// value of `partition-id`) and the fabric its collectives rendezvous on. `None`
    /// (the default) is a single device, where collectives over one device are copies.
    fn device(&self) -> Option<(usize, &hlo_fabric::Fabric)> {
        None
    }
}

pub use hlo_ir::tensor::memory_budget as default_memory_budget;

/// `n` bytes for people: `1.5 GiB (1610612736 bytes)`.
fn human(n: u64) -> String {
    let short = format_bytes(n);
    if short.ends_with(" bytes") { short } else { format!("{short} ({n} bytes)") }
}

/// Whether evaluating `op` allocates its result. The others forward (parts of) their
/// operands or the value a called computation returned (whose own instructions were
/// checked as they ran), so they cost no new storage.
fn allocates(op: &Op) -> bool {
    use Opcode::*;
    !matches!(
        op,
        Op::Parameter { .. }
            | Op::GetTupleElement { .. }
            | Op::Call { .. }
            | Op::Fusion { .. }
            | Op::While { .. }
            | Op::Conditional(_)
            | Op::CustomCall(_)
            | Op::Collective { .. }
            | Op::Domain { .. }
            | Op::Plain(Tuple | Copy | OptBarrier | AddDependency | AfterAll)
    )
}

const BUDGET_HELP: &str = "the interpreter holds pred in 1 byte, f32/bf16/f16 in 4 and every integer type and f64 in 8 bytes per element; \
                           the budget (16 GiB, or 3/4 of the physical memory if less) is set with `Interpreter::with_memory_budget`";

/// Runs the entry computation on host tensors once; see [`Interpreter::run`] (build an
/// [`Interpreter`] once to run the same module many times).
pub fn run(m: &Module, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
    Interpreter::new(m).run(inputs)
}

/// The opcode of a reducer computation of the form `ROOT op(p0, p1)` (the fabric's, whose
/// collectives reduce with it).
pub use hlo_fabric::binary_reducer;

impl<'m> Interpreter<'m> {
    /// An interpreter for `m` with the [`default_memory_budget`].
    pub fn new(m: &'m Module) -> Interpreter<'m> {
        let plans: Vec<Plan> = m.comps().iter().map(Plan::new).collect();
        let mut effects = hlo_ir::op_props::SideEffects::new();
        let live = m
            .comps()
            .iter()
            .zip(&plans)
            .map(|(c, p)| live_positions(m, c, p, &mut effects))
            .collect();
        Interpreter {
            m,
            plans,
            live,
            binary: m.comps().iter().map(binary_reducer).collect(),
            budget: default_memory_budget(),
            hooks: None,
            rng: rng::Counters::default(),
        }
    }

    /// Evaluates with `hooks` observing every executed instruction and evaluating every
    /// `dot` and `convolution`.
    pub fn with_hooks(mut self, hooks: &'m dyn Hooks) -> Interpreter<'m> {
        self.hooks = Some(hooks);
        self
    }

    /// Sets the memory budget: the bytes of array storage ([`live_bytes`]) the interpreter
    /// may hold at once. Before an instruction allocates its result, the result's size
    /// (from its declared shape, in checked arithmetic) plus the live bytes must fit, or
    /// the instruction is refused with an error; inputs and outputs are counted the same
    /// way. Kernels' temporary index lists (proportional to their operands and result)
    /// are not counted.
    pub fn with_memory_budget(mut self, bytes: u64) -> Interpreter<'m> {
        self.budget = bytes;
        self
    }

    /// The memory budget in bytes.
    pub fn memory_budget(&self) -> u64 {
        self.budget
    }

    /// Runs the entry computation on host tensors (in parameter order) and returns the
    /// result's leaves (the root tuple flattened). Inputs must match the entry parameters
    /// ([`hlo_io::npz::read_inputs`] checks that when reading them; so does the
    /// interpreter, as for every call).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, EvalError> {
        let entry = self.m.comp(self.m.entry);
        let params = &self.plans[self.m.entry.index()].params;
        if params.len() != inputs.len() {
            return Err(Diagnostic::error(
                entry.span,
                format!(
                    "`{}` takes {} parameters but {} inputs were given",
                    entry.name,
                    params.len(),
                    inputs.len()
                ),
            ));
        }
        let mut args = Vec::with_capacity(inputs.len());
        for (k, t) in inputs.iter().enumerate() {
            let param = params
                .iter()
                .find(|p| p.0 == k)
                .map(|p| comp_instr(entry, &self.plans[self.m.entry.index()], p.1));
            let span = param.map_or(entry.span, |p| p.span);
            let width = value::store(t.elem())
                .map_err(|e| Diagnostic::error(span, format!("input {k}: {e}")))?
                .bytes();
            let bytes = t.dims().iter().try_fold(width, |acc, &d| acc.checked_mul(d));
            self.fits(bytes, || format!("input {k} ({}{:?})", t.elem(), t.dims()))
                .map_err(|d| Diagnostic { span: Some(span), ..d })?;
            args.push(
                Array::from_tensor(t)
                    .map(Value::array)
                    .map_err(|e| Diagnostic::error(span, format!("input {k}: {e}")))?,
            );
        }
        let out = self.call(self.m.entry, args)?;
        let root_span = entry.root().map_or(entry.span, |r| entry.instr(r).span);
        let leaves = out.leaves();
        let bytes = leaves.iter().try_fold(0u64, |acc, a| {
            acc.checked_add((a.len() as u64).checked_mul((a.elem.bits() as u64).div_ceil(8))?)
        });
        self.fits(bytes, || "the output tensors".into())
            .map_err(|d| Diagnostic { span: Some(root_span), ..d })?;
        leaves
            .into_iter()
            .map(|a| {
                a.to_tensor().map_err(|e| Diagnostic::error(root_span, format!("output: {e}")))
            })
            .collect()
    }

    /// Refuses an allocation of `bytes` (`None`: the size overflows 64 bits) that does
    /// not fit in the budget beside the live arrays. The error has no location yet.
    fn fits(&self, bytes: Option<u64>, what: impl FnOnce() -> String) -> Result<(), EvalError> {
        let live = live_bytes();
        match bytes {
            None => Err(Diagnostic::error(None, format!("{}: its size in bytes overflows 64 bits", what()))
                .with_label("too large for any machine")
                .with_help(BUDGET_HELP)),
            Some(b) if b > self.budget => Err(Diagnostic::error(
                None,
                format!("{} needs {}, more than the interpreter's memory budget of {}", what(), human(b), human(self.budget)),
            )
            .with_label(format!("needs {}", format_bytes(b)))
            .with_help(BUDGET_HELP)),
            Some(b) if b.saturating_add(live) > self.budget => Err(Diagnostic::error(
                None,
                format!("{} needs {} while {} are live: more than the interpreter's memory budget of {}", what(), human(b), human(live), human(self.budget)),
            )
            .with_label(format!("needs {} beside {} live", format_bytes(b), format_bytes(live)))
            .with_help(BUDGET_HELP)),
            Some(_) => Ok(()),
        }
    }

    /// Evaluates computation `id` on `args` (one value per parameter, in order). Every
    /// argument must have its parameter's declared shape, every instruction's result its
    /// declared shape (element type, dims, tuple structure); a mismatch is an error at
    /// the instruction, so a value never silently differs from what the module says.
    pub fn call(&self, id: CompId, args: Vec<Value>) -> Result<Value, EvalError> {
        let comp = self.m.comp(id);
        let plan = &self.plans[id.index()];
        let mut env: Vec<Option<Value>> = vec![None; plan.nodes.len()];
        let mut args: Vec<Option<Value>> = args.into_iter().map(Some).collect();
        for &(number, pos) in &plan.params {
            let v = args.get_mut(number).and_then(Option::take).ok_or_else(|| {
                Diagnostic::error(
                    comp.span,
                    format!("computation `{}` called without argument {number}", comp.name),
                )
            })?;
            let p = comp_instr(comp, plan, pos);
            if let Some(why) = mismatch(&v, &p.shape) {
                return Err(Diagnostic::error(
                    p.span,
                    format!("computation `{}` called with argument {number} of shape {}, but parameter `{}` is declared {}", comp.name, describe(&v), p.name, shape_text(&p.shape)),
                )
                .with_label(format!("declared {}", shape_text(&p.shape)))
                .with_help(format!("the argument differs: {why}")));
            }
            env[pos] = Some(v);
        }
        let live = &self.live[id.index()];
        for (i, &n) in plan.nodes.iter().enumerate() {
            if env[i].is_none() && live[i] {
                let instr = comp.instr(n);
                let internal = || {
                    Diagnostic::error(
                        instr.span,
                        format!("internal error: an operand of `{}` was not evaluated", instr.name),
                    )
                };
                let ops: Vec<&Value> = plan.operands[i]
                    .iter()
                    .map(|&o| env[o].as_ref().ok_or_else(internal))
                    .collect::<Result<_, _>>()?;
                if allocates(&instr.op) {
                    self.fits(shape_bytes(&instr.shape), || {
                        format!(
                            "`{}` ({}) of shape {}",
                            instr.name,
                            instr.op.opcode().name(),
                            shape_text(&instr.shape)
                        )
                    })
                    .map_err(|d| Diagnostic { span: Some(instr.span), ..d })?;
                }
                let v = self.eval(id, comp, n, &ops).map_err(|e| match e {
                    Failure::Here(msg) => Diagnostic::error(
                        instr.span,
                        format!(
                            "cannot evaluate `{}` ({}): {msg}",
                            instr.name,
                            instr.op.opcode().name()
                        ),
                    ),
                    Failure::Nested(d) => d,
                })?;
                if let Some(why) = mismatch(&v, &instr.shape) {
                    return Err(Diagnostic::error(
                        instr.span,
                        format!("`{}` ({}) produced a value of shape {}, but its declared shape is {}", instr.name, instr.op.opcode().name(), describe(&v), shape_text(&instr.shape)),
                    )
                    .with_label(format!("declared {}", shape_text(&instr.shape)))
                    .with_note(instr.span, format!("the value differs: {why}"))
                    .with_help("every result must have its declared shape; `hloc check` (shape inference) finds instructions whose declared shape is wrong"));
                }
                env[i] = Some(v);
                if let Some(h) = self.hooks {
                    h.executed(id, n);
                }
            }
            for &d in &plan.dead_after[i] {
                env[d] = None;
            }
        }
        env.get_mut(plan.root).and_then(Option::take).ok_or_else(|| {
            Diagnostic::error(
                comp.span,
                format!("internal error: the root of `{}` was not evaluated", comp.name),
            )
        })
    }

    /// Calls computation `id` from inside a kernel: errors stay located in the callee.
    fn sub_call(&self, id: CompId, args: Vec<Value>) -> Result<Value, Failure> {
        self.call(id, args).map_err(Failure::Nested)
    }

    fn eval(
        &self,
        comp_id: CompId,
        comp: &Computation,
        n: NodeIndex,
        ops: &[&Value],
    ) -> Result<Value, Failure> {
        use Opcode::*;
        let instr = comp.instr(n);
        if let Some(a) = instr.unimplemented_kept_attr() {
            return Err(format!(
                "`{a}=` on {} is not supported by the interpreter",
                instr.op.opcode().name()
            )
            .into());
        }
        let shape = &instr.shape;
        let arr = |k: usize| -> Result<&Array, Failure> {
            ops.get(k)
                .and_then(|v| v.as_array())
                .ok_or_else(|| Failure::Here(format!("operand {k} is not an array")))
        };
        let out = || -> Result<(hlo_ir::ElemType, Vec<usize>), Failure> {
            dims_of(shape).ok_or_else(|| Failure::Here("the result is not a static array".into()))
        };
        let one = |a: Array| Ok(Value::array(a));
        let many = |v: Vec<Array>| -> Result<Value, Failure> {
            Ok(if v.len() == 1 {
                Value::array(v.into_iter().next().expect("one"))
            } else {
                Value::Tuple(v.into_iter().map(Value::array).collect())
            })
        };
        let arrays =
            |r: std::ops::Range<usize>| -> Result<Vec<&Array>, Failure> { r.map(arr).collect() };
        // Scalar integer index operands from position `from` (or one rank-1 vector).
        let starts = |from: usize| -> Result<Vec<i64>, Failure> {
            let first = arr(from)?;
            if ops.len() == from + 1 && first.dims.len() == 1 {
                return Ok((0..first.len()).map(|i| first.int_at(i)).collect());
            }
            (from..ops.len()).map(|k| arr(k).and_then(|a| scalar_index(a, k))).collect()
        };
        let multiply =
            |exact: &dyn Fn(&Array, &Array) -> Result<Array, Failure>| -> Result<Array, Failure> {
                match self.hooks {
                    Some(h) => h.multiply(comp_id, n, arr(0)?, arr(1)?, exact),
                    None => exact(arr(0)?, arr(1)?),
                }
            };
        match &instr.op {
            Op::Parameter { number, .. } => {
                Err(format!("parameter {number} has no argument").into())
            }
            Op::Constant(lit) => constant(lit, shape).map_err(Failure::Here),
            Op::Iota { dimension } => {
                let (e, d) = out()?;
                one(data_movement::iota(e, d, *dimension as usize)?)
            }
            Op::GetTupleElement { index } => match ops[0] {
                Value::Tuple(t) => {
                    t.get(*index as usize).cloned().ok_or_else(|| "tuple index out of range".into())
                }
                _ => Err("get-tuple-element of a non-tuple".into()),
            },
            Op::Compare { direction, kind } => {
                one(elementwise::compare(*direction, *kind, arr(0)?, arr(1)?)?)
            }
            Op::Broadcast { dimensions } => {
                one(data_movement::broadcast(arr(0)?, out()?.1, dimensions)?)
            }
            Op::Reshape { .. } => {
                let a = arr(0)?;
                let d = out()?.1;
                same_count(a, &d)?;
                one(Array::new(a.elem, d, a.data.clone()))
            }
            Op::Transpose { dimensions } => one(data_movement::transpose(arr(0)?, dimensions)?),
            Op::Reverse { dimensions } => one(data_movement::reverse(arr(0)?, dimensions)?),
            Op::Concatenate { dimension } => one(data_movement::concatenate(
                &arrays(0..ops.len())?,
                *dimension as usize,
                &out()?.1,
            )?),
            Op::Slice { ranges } => one(data_movement::slice(arr(0)?, ranges, &out()?.1)?),
            Op::DynamicSlice { sizes } => {
                let sizes: Vec<usize> =
                    sizes.iter().map(|&s| usize::try_from(s).unwrap_or(usize::MAX)).collect();
                one(data_movement::dynamic_slice(arr(0)?, &starts(1)?, &sizes)?)
            }
            Op::Pad { config } => one(data_movement::pad(arr(0)?, arr(1)?, config, &out()?.1)?),
            Op::ReducePrecision { exponent_bits, mantissa_bits } => {
                one(elementwise::reduce_precision(arr(0)?, *exponent_bits, *mantissa_bits)?)
            }
            Op::Gather(g) => one(data_movement::gather(arr(0)?, arr(1)?, g, out()?.1)),
            Op::Scatter(sd) => {
                let k = ops.len().saturating_sub(1) / 2;
                let f = |args: Vec<Value>| self.sub_call(sd.to_apply, args);
                let r = self.reducer_or(sd.to_apply, &f);
                many(compute::scatter(&arrays(0..k)?, arr(k)?, &arrays(k + 1..ops.len())?, sd, &r)?)
            }
            Op::Reduce { dimensions, to_apply } => {
                let k = ops.len() / 2;
                let f = |args: Vec<Value>| self.sub_call(*to_apply, args);
                let r = self.reducer_or(*to_apply, &f);
                many(compute::reduce(&arrays(0..k)?, &arrays(k..ops.len())?, dimensions, &r)?)
            }
            Op::ReduceWindow { window, to_apply } => {
                let k = ops.len() / 2;
                let f = |args: Vec<Value>| self.sub_call(*to_apply, args);
                let r = self.reducer_or(*to_apply, &f);
                let out_dims = match shape {
                    Shape::Tuple(t) => t.first().and_then(dims_of).map(|d| d.1),
                    s => dims_of(s).map(|d| d.1),
                }
                .ok_or("the result is not a static array")?;
                many(compute::reduce_window(
                    &arrays(0..k)?,
                    &arrays(k..ops.len())?,
                    window,
                    &out_dims,
                    &r,
                )?)
            }
            Op::SelectAndScatter { window, select, scatter } => {
                let sel = |a: &Array, b: &Array| -> Result<bool, Failure> {
                    let v = self.sub_call(
                        *select,
                        vec![Value::array(a.clone()), Value::array(b.clone())],
                    )?;
                    predicate(&v)
                };
                let f = |args: Vec<Value>| self.sub_call(*scatter, args);
                let r = self.reducer_or(*scatter, &f);
                one(compute::select_and_scatter(arr(0)?, arr(1)?, arr(2)?, window, &sel, &r)?)
            }
            Op::Map { to_apply, .. } => {
                // Checked here too (shape inference covers `map`): the module may be unchecked.
                let inputs = arrays(0..ops.len())?;
                let (e, d) = out()?;
                for (k, a) in inputs.iter().enumerate() {
                    if a.dims != d {
                        let dims = |d: &[usize]| {
                            d.iter().map(|x| x.to_string()).collect::<Vec<_>>().join(",")
                        };
                        return Err(format!(
                            "operand {k} has dims [{}] but the result has dims [{}]",
                            dims(&a.dims),
                            dims(&d)
                        )
                        .into());
                    }
                }
                let n = d.iter().product();
                let mut data = Array::zeros(e, Vec::new())?.data.empty_like(n);
                for i in 0..n {
                    let args = inputs
                        .iter()
                        .map(|a| Value::array(Array::new(a.elem, Vec::new(), a.data.scalar_at(i))))
                        .collect();
                    let v = self.sub_call(*to_apply, args)?;
                    match v.as_array() {
                        Some(r) if r.elem == e && r.dims.is_empty() && r.len() == 1 => {
                            data.push_range(&r.data, 0..1)?
                        }
                        _ => {
                            return Err(format!(
                                "its computation `{}` returned {}, but a map of {} must compute {e}[] scalars",
                                self.m.comp(*to_apply).name,
                                describe(&v),
                                shape_text(shape)
                            )
                            .into());
                        }
                    }
                }
                one(Array::new(e, d, data))
            }
            Op::Sort { dimension, to_apply, .. } => {
                let less = |args: Vec<Value>| -> Result<bool, Failure> {
                    predicate(&self.sub_call(*to_apply, args)?)
                };
                many(compute::sort(&arrays(0..ops.len())?, *dimension as usize, &less)?)
            }
            Op::Scan { dimension, num_carries, is_reverse, to_apply, .. } => {
                self.scan(ops, *dimension, *num_carries, *is_reverse, *to_apply, shape)
            }
            Op::TopK { k, largest, .. } => {
                let (v, i) = compute::topk(arr(0)?, *k as usize, largest.unwrap_or(true))?;
                Ok(Value::Tuple(vec![Value::array(v), Value::array(i)]))
            }
            Op::Dot { opcode: Dot, dims } => {
                let (e, d) = out()?;
                one(multiply(&|l, r| compute::dot(l, r, dims, e, &d))?)
            }
            Op::Convolution(c) => {
                let (e, d) = out()?;
                one(multiply(&|l, r| compute::convolution(l, r, c, d.clone(), e))?)
            }
            Op::While { condition, body } => {
                let mut state = ops[0].clone();
                loop {
                    let go = predicate(&self.sub_call(*condition, vec![state.clone()])?)?;
                    if !go {
                        return Ok(state);
                    }
                    state = self.sub_call(*body, vec![state])?;
                }
            }
            Op::Conditional(branches) => {
                // Branch i takes operand i + 1; an out-of-range index takes the last branch.
                let sel = scalar_index(arr(0)?, 0)?;
                let (i, branch) = match branches {
                    Branches::TrueFalse(t, f) => {
                        if sel != 0 {
                            (0, *t)
                        } else {
                            (1, *f)
                        }
                    }
                    Branches::Indexed(b) => {
                        let last =
                            b.len().checked_sub(1).ok_or("a conditional without branches")?;
                        let i = if sel < 0 || sel as usize > last { last } else { sel as usize };
                        (i, b[i])
                    }
                };
                self.sub_call(
                    branch,
                    vec![ops.get(i + 1).map(|v| (*v).clone()).ok_or("missing branch operand")?],
                )
            }
            Op::Call { to_apply: c, .. } | Op::Fusion { calls: c, .. } => {
                self.sub_call(*c, ops.iter().map(|v| (*v).clone()).collect())
            }
            Op::CustomCall(cc) => self.custom_call(cc, shape, ops),
            Op::Collective { opcode, attrs }
                if let Some((d, fabric)) = self.hooks.and_then(|h| h.device()) =>
            {
                let operands: Vec<Array> = ops
                    .iter()
                    .map(|v| match v {
                        Value::Array(a) => Ok((**a).clone()),
                        _ => Err("collective operands must be arrays"),
                    })
                    .collect::<Result<_, _>>()?;
                let reducer = attrs.to_apply.and_then(|c| self.binary[c.index()]);
                let mut out =
                    crate::collectives::execute(fabric, d, *opcode, attrs, reducer, operands)?;
                Ok(if out.len() == 1 && !shape.is_tuple() {
                    Value::array(out.remove(0))
                } else {
                    Value::Tuple(out.into_iter().map(Value::array).collect())
                })
            }
            Op::Collective { opcode, attrs } => {
                let devices = self
                    .m
                    .header
                    .num_partitions
                    .unwrap_or(1)
                    .max(self.m.header.replica_count.unwrap_or(1));
                if hlo_fabric::alone(*opcode, attrs, devices.max(1) as usize).is_err() {
                    return Err(format!("{} across {devices} devices needs the SPMD runtime; the interpreter runs one device", opcode.name()).into());
                }
                match opcode {
                    AllReduce | AllGather | ReduceScatter | AllToAll | CollectivePermute
                    | CollectiveBroadcast => Ok(if ops.len() == 1 {
                        ops[0].clone()
                    } else {
                        Value::Tuple(ops.iter().map(|v| (*v).clone()).collect())
                    }),
                    _ => Err("this collective is not supported by the interpreter".into()),
                }
            }
            Op::BatchNorm { opcode, epsilon, feature_index } => match opcode {
                BatchNormTraining => {
                    many(batch_norm::training(arr(0)?, arr(1)?, arr(2)?, *epsilon, *feature_index)?)
                }
                BatchNormInference => one(batch_norm::inference(
                    arr(0)?,
                    arr(1)?,
                    arr(2)?,
                    arr(3)?,
                    arr(4)?,
                    *epsilon,
                    *feature_index,
                )?),
                _ => many(batch_norm::grad(
                    arr(0)?,
                    arr(1)?,
                    arr(2)?,
                    arr(3)?,
                    arr(4)?,
                    *epsilon,
                    *feature_index,
                )?),
            },
            Op::Fft { fft_type, fft_length } => {
                let (e, d) = out()?;
                one(fft::fft(arr(0)?, fft_type, fft_length, (e, &d))?)
            }
            Op::Cholesky { lower } => one(linalg::eval_cholesky(arr(0)?, *lower)?),
            Op::TriangularSolve { left_side, lower, unit_diagonal, transpose_a } => {
                let t = linalg::Transpose::parse(transpose_a.as_deref())?;
                let o = linalg::Solve {
                    left_side: *left_side,
                    lower: *lower,
                    unit_diagonal: *unit_diagonal,
                    transpose_a: t.transposed(),
                };
                one(linalg::eval_triangular_solve(arr(0)?, arr(1)?, o)?)
            }
            Op::RngBitGenerator { algorithm } => {
                let Some(Shape::Tuple(parts)) = Some(shape) else {
                    return Err("the result is not a tuple".into());
                };
                let (e, d) = parts
                    .get(1)
                    .and_then(dims_of)
                    .ok_or("the result is not a (state, bits) tuple of static arrays")?;
                let (state, bits) = rng::bit_generator_array(*algorithm, arr(0)?, e, &d)?;
                Ok(Value::Tuple(vec![Value::array(state), Value::array(bits)]))
            }
            Op::RngGetAndUpdateState { delta } => {
                one(rng::state_array(self.rng.get_and_update(&instr.name, *delta)))
            }
            Op::Rng { distribution } => {
                let (e, d) = out()?;
                let (_, delta) = rng::rng_plan(*distribution, e, &d)?;
                let state = self.rng.get_and_update(&instr.name, delta);
                one(rng::rng(
                    *distribution,
                    rng::rng_key(&instr.name),
                    state,
                    arr(0)?,
                    arr(1)?,
                    e,
                    &d,
                )?)
            }
            Op::GetDimensionSize { dimension } => {
                let a = arr(0)?;
                let d = a.dims.get(*dimension as usize).ok_or("dimension out of range")?;
                one(Array::new(hlo_ir::ElemType::S32, Vec::new(), Data::Int(vec![*d as i64])))
            }
            Op::Domain { .. } => Ok(ops[0].clone()),
            Op::Plain(op) => match op {
                Tuple => Ok(Value::Tuple(ops.iter().map(|v| (*v).clone()).collect())),
                Copy | OptBarrier | AddDependency => Ok(ops[0].clone()),
                AfterAll => Ok(Value::Token),
                PartitionId | ReplicaId => {
                    let d = self.hooks.and_then(|h| h.device()).map_or(0, |x| x.0);
                    one(Array::new(hlo_ir::ElemType::U32, Vec::new(), Data::Int(vec![d as i64])))
                }
                Select => one(elementwise::select(arr(0)?, arr(1)?, arr(2)?)?),
                Clamp => one(elementwise::clamp(arr(0)?, arr(1)?, arr(2)?)?),
                Convert => one(elementwise::convert(arr(0)?, out()?.0)?),
                BitcastConvert => {
                    let (e, d) = out()?;
                    one(elementwise::bitcast_convert(arr(0)?, e, d)?)
                }
                Bitcast => {
                    let a = arr(0)?;
                    let (e, d) = out()?;
                    let row_major = |s: &Shape| {
                        s.as_array().is_none_or(|x| {
                            x.layout.as_ref().is_none_or(|l| {
                                l.minor_to_major
                                    .iter()
                                    .rev()
                                    .map(|&d| d as usize)
                                    .eq(0..x.dims.len())
                            })
                        })
                    };
                    let operand_shape = &comp.instr(comp.operands(n)[0]).shape;
                    if e != a.elem || !row_major(shape) || !row_major(operand_shape) {
                        return Err("a bitcast between different layouts or element types (only row-major reshapes are interpreted)".into());
                    }
                    same_count(a, &d)?;
                    one(Array::new(e, d, a.data.clone()))
                }
                DynamicUpdateSlice => {
                    one(data_movement::dynamic_update_slice(arr(0)?, arr(1)?, &starts(2)?)?)
                }
                op if op.category() == hlo_ir::opcode::Category::Unary => {
                    one(elementwise::unary(*op, arr(0)?)?)
                }
                op if op.category() == hlo_ir::opcode::Category::Binary => {
                    one(elementwise::binary(*op, arr(0)?, arr(1)?)?)
                }
                op => Err(format!("{} is not supported by the interpreter", op.name()).into()),
            },
            op => Err(format!("{} is not supported by the interpreter", op.opcode().name()).into()),
        }
    }

    /// The reducer for computation `id`: a kernel when it is a plain binary opcode,
    /// otherwise `general` (which evaluates the computation).
    fn reducer_or<'a>(
        &self,
        id: CompId,
        general: &'a dyn Fn(Vec<Value>) -> Result<Value, Failure>,
    ) -> Reducer<'a> {
        match self.binary[id.index()] {
            Some(op) => Reducer::Binary(op),
            None => Reducer::General(general),
        }
    }

    /// `scan` as XLA's `ScanExpander` lowers it: step `i` (index `L-1-i` when reversed)
    /// calls `to_apply` on the slices of the inputs at that index along `dim` (the
    /// dimension dropped) and the carries; the first results are that index's outputs,
    /// the rest the next carries. The result is the stacked outputs then the final
    /// carries (one array when that is one value).
    fn scan(
        &self,
        ops: &[&Value],
        dim: i64,
        carries: i64,
        reverse: bool,
        to_apply: CompId,
        shape: &Shape,
    ) -> Result<Value, Failure> {
        let carries = usize::try_from(carries)
            .ok()
            .filter(|&c| c <= ops.len())
            .ok_or("num_carries does not fit the operands")?;
        let inputs = ops.len() - carries;
        let d = usize::try_from(dim).map_err(|_| "negative scan dimension")?;
        let arrays: Vec<&Array> = ops[..inputs]
            .iter()
            .map(|v| v.as_array().ok_or("scan inputs must be arrays"))
            .collect::<Result<_, _>>()?;
        let declared: Vec<&Shape> = match shape {
            Shape::Tuple(t) => t.iter().collect(),
            s => vec![s],
        };
        let outputs = declared
            .len()
            .checked_sub(carries)
            .ok_or("the result has fewer values than carries")?;
        // The scan length: the inputs' extent along `d`, else the declared output 0's.
        let len = match arrays.first() {
            Some(a) => *a.dims.get(d).ok_or("the scan dimension is out of bounds for input 0")?,
            None => declared
                .first()
                .and_then(|s| dims_of(s))
                .and_then(|(_, dd)| dd.get(d).copied())
                .ok_or("a scan without inputs needs its length from output 0")?,
        };
        if let Some((k, a)) = arrays.iter().enumerate().find(|(_, a)| a.dims.get(d) != Some(&len)) {
            return Err(format!(
                "input {k} has dims {:?}, not length {len} along the scan dimension {d}",
                a.dims
            )
            .into());
        }
        let tuple_root = self
            .m
            .comp(to_apply)
            .root()
            .is_some_and(|r| self.m.comp(to_apply).instr(r).shape.is_tuple());
        let mut carry: Vec<Value> = ops[inputs..].iter().map(|v| (*v).clone()).collect();
        let mut steps: Vec<Vec<Option<Array>>> = vec![vec![None; len]; outputs];
        for i in 0..len {
            let at = if reverse { len - 1 - i } else { i };
            let mut args = Vec::with_capacity(ops.len());
            for a in &arrays {
                let mut starts = vec![0i64; a.dims.len()];
                starts[d] = at as i64;
                let mut sizes = a.dims.clone();
                sizes[d] = 1;
                let s = data_movement::dynamic_slice(a, &starts, &sizes)?;
                sizes.remove(d);
                args.push(Value::array(Array::new(s.elem, sizes, s.data.clone())));
            }
            args.append(&mut carry);
            let r = self.sub_call(to_apply, args)?;
            let mut results = match r {
                Value::Tuple(t) if tuple_root => t,
                v => vec![v],
            };
            if results.len() != outputs + carries {
                return Err(format!("`{}` returned {} values; the result declares {outputs} outputs and {carries} carries", self.m.comp(to_apply).name, results.len()).into());
            }
            carry = results.split_off(outputs);
            for (k, v) in results.into_iter().enumerate() {
                let a = v.as_array().ok_or("a scan output must be an array")?;
                let mut dims = a.dims.clone();
                if d > dims.len() {
                    return Err(format!(
                        "the scan dimension {d} is out of bounds for output {k} of rank {}",
                        dims.len()
                    )
                    .into());
                }
                dims.insert(d, 1);
                steps[k][at] = Some(Array::new(a.elem, dims, a.data.clone()));
            }
        }
        let mut out = Vec::with_capacity(outputs + carries);
        for (k, parts) in steps.into_iter().enumerate() {
            let (e, dd) = dims_of(declared[k]).ok_or("a scan output must be a static array")?;
            let parts: Vec<Array> = parts
                .into_iter()
                .map(|p| p.ok_or("internal error: a scan step was not evaluated"))
                .collect::<Result<_, _>>()?;
            out.push(Value::array(if parts.is_empty() {
                Array::zeros(e, dd)?
            } else {
                data_movement::concatenate(&parts.iter().collect::<Vec<_>>(), d, &dd)?
            }));
        }
        out.extend(carry);
        Ok(if out.len() == 1 && !shape.is_tuple() { out.remove(0) } else { Value::Tuple(out) })
    }

    fn custom_call(
        &self,
        cc: &CustomCall,
        shape: &Shape,
        ops: &[&Value],
    ) -> Result<Value, Failure> {
        match cc.target.as_str() {
            // Sharding annotations are identities on one device: one operand, whose shape
            // the result must have (shape inference lets the text decide a custom-call's
            // shape, so this is the only check).
            t if cc.is_single_device_identity() => {
                let [v] = ops else {
                    return Err(format!("custom-call `{t}` is an identity and takes one operand, not {}", ops.len()).into());
                };
                if mismatch(v, shape).is_some() {
                    return Err(format!(
                        "custom-call `{t}` is an identity on one device, so its declared shape {} must be its operand's shape {}",
                        shape_text(shape),
                        describe(v)
                    )
                    .into());
                }
                Ok((*v).clone())
            }
            // Buffer markers (`b(...)` shapes): XLA's CPU backend has no handler for them
            // and refuses a module whose result depends on one; dead ones are never
            // evaluated (see `live_positions`), as XLA removes them.
            t @ ("Pin" | "Unpin" | "CreateBuffer") => Err(format!(
                "custom-call target `{t}` (a buffer marker) is not supported by the interpreter; XLA's CPU backend refuses it too \
                 (\"No FFI handler registered for {t} on a platform Host\") unless nothing uses its result"
            )
            .into()),
            // XLA's TopK custom-call (what its CPU backend calls for `topk`): the k largest
            // along the last dimension, largest first, and their indices; k is the
            // result's last dimension (the JIT and the TPU model read it the same way).
            "TopK" => {
                let ([v], Shape::Tuple(parts)) = (ops, shape) else {
                    return Err("custom-call `TopK` takes one operand and gives a (values, indices) tuple".into());
                };
                let k = parts.first().and_then(|p| p.as_array()).and_then(|a| a.static_dims()).and_then(|d| d.last().copied());
                let (Some(k), Some(a)) = (k, v.as_array()) else {
                    return Err("custom-call `TopK` needs an array operand and static result dims".into());
                };
                let (values, indices) = compute::topk(a, k as usize, true)?;
                Ok(Value::Tuple(vec![Value::array(values), Value::array(indices)]))
            }
            t => Err(format!("custom-call target `{t}` is not supported by the interpreter").into()),
        }
    }
}

/// Which positions of `plan` the interpreter evaluates: the root, every instruction with
/// side effects (through its callees), and everything they use. XLA removes the rest
/// (DCE) before it runs a module, so an instruction nothing uses neither runs nor fails
/// there (a dead `Pin` custom-call, say), and neither does it here.
fn live_positions(
    m: &Module,
    comp: &Computation,
    plan: &Plan,
    effects: &mut hlo_ir::op_props::SideEffects,
) -> Vec<bool> {
    let mut live = vec![false; plan.nodes.len()];
    if let Some(r) = live.get_mut(plan.root) {
        *r = true;
    }
    for i in (0..plan.nodes.len()).rev() {
        if !live[i] && effects.op(m, &comp.instr(plan.nodes[i]).op) {
            live[i] = true;
        }
        if live[i] {
            for &o in &plan.operands[i] {
                live[o] = true;
            }
        }
    }
    live
}

/// The instruction at position `pos` of `plan`.
fn comp_instr<'c>(comp: &'c Computation, plan: &Plan, pos: usize) -> &'c hlo_ir::Instr {
    comp.instr(plan.nodes[pos])
}

/// The value of a scalar index operand (operand `k`).
fn scalar_index(a: &Array, k: usize) -> Result<i64, Failure> {
    if a.len() != 1 {
        return Err(format!(
            "operand {k} is an index and must be a scalar, not {}",
            describe(&Value::array(a.clone()))
        )
        .into());
    }
    Ok(a.int_at(0))
}

/// A reshape/bitcast keeps the element count.
fn same_count(a: &Array, d: &[usize]) -> Result<(), Failure> {
    let n = d.iter().try_fold(1usize, |acc, &x| acc.checked_mul(x));
    if n != Some(a.len()) {
        return Err(format!("{} elements cannot be reshaped to dims {:?}", a.len(), d).into());
    }
    Ok(())
}

/// The value of a `pred[]` result.
fn predicate(v: &Value) -> Result<bool, Failure> {
    match v.as_array().map(|a| &a.data) {
        Some(Data::Pred(p)) if p.len() == 1 => Ok(p[0]),
        _ => Err("a predicate computation must return pred[]".into()),
    }
}

/// A constant's value (arrays and tuples).
fn constant(lit: &hlo_ir::literal::Literal, shape: &Shape) -> Result<Value, String> {
    match (lit, shape) {
        (hlo_ir::literal::Literal::Tuple(items), Shape::Tuple(shapes)) => Ok(Value::Tuple(
            items.iter().zip(shapes).map(|(l, s)| constant(l, s)).collect::<Result<_, _>>()?,
        )),
        (_, s) => {
            let (e, d) = dims_of(s).ok_or("the constant's shape is not a static array")?;
            Ok(Value::array(Array::from_literal(lit, e, d).map_err(|f| f.to_string())?))
        }
    }
}
