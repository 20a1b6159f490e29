//! The TPU engine: runs an optimized module on the TPU model, timing and values.
//!
//! - [`run`] computes the outputs and the cycles together: the reference interpreter
//!   evaluates the module with [`Hooks`] that (a) hand every executed top-level
//!   instruction's kernel to the chip simulator ([`hlo_chip::chip::Sim`]), so loops are
//!   timed as many times as they run and only a conditional's taken branch counts, and
//!   (b) evaluate every dot and convolution as the MXU does: operands split into bf16
//!   parts, one exact product per pass, f32 accumulation ([`mxu_passes`]). The vector
//!   unit computes in f32, as the interpreter does.
//! - [`simulate`] times the program without values when its control flow is static (no
//!   `while` or `conditional` whose trip count or branch is unknown), in time linear in
//!   the kernels executed; otherwise it runs on the given (or seeded) inputs.
//! - [`run_chips`], [`simulate_chips`]: the same on the N chips of a partitioned program.
//!
//! Every function takes the program already lowered (`hlo-driver` sequences the phases:
//! partition, optimize, lower); the engine only executes and times it.

use std::sync::{Arc, Mutex};

use hlo_ir::op::Precision;
use hlo_ir::{CompId, Diagnostic, ElemType, Module, NodeIndex, Op, Tensor};

use crate::lower::{Lowered, Passes, passes_for, precision_of};
use hlo_chip::chip::Sim;
use hlo_chip::config::TpuConfig;
use hlo_chip::program::Item;
use hlo_interp::{Array, Data, Failure, Hooks, Interpreter};

/// What the engine runs on and how f32 matmuls multiply.
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    pub cfg: TpuConfig,
    pub passes: Passes,
    /// Ticked as kernels execute (long simulations).
    pub progress: Option<hlo_chip::chip::Progress>,
}

impl Options {
    pub fn new(cfg: TpuConfig, passes: Passes) -> Options {
        Options { cfg, passes, progress: None }
    }
}

/// A finished run: the simulator with every executed kernel, and the outputs when values
/// were computed. Chips timed from shapes alone share one simulation.
pub struct Run {
    pub sim: Arc<Sim>,
    pub outputs: Option<Vec<Tensor>>,
    /// How control flow was resolved: `static` or `executed`.
    pub control: &'static str,
}

/// Simulator ids of every kernel, per block and item.
fn register(l: &Lowered, sim: &mut Sim) -> Vec<Vec<Option<usize>>> {
    sim.in_order = l.program.scheduled;
    l.program
        .blocks
        .iter()
        .map(|b| {
            b.items
                .iter()
                .map(|i| match i {
                    Item::Kernel(k) => Some(sim.add_kernel(k.clone())),
                    _ => None,
                })
                .collect()
        })
        .collect()
}

struct TpuHooks<'a> {
    m: &'a Module,
    l: &'a Lowered,
    ids: &'a [Vec<Option<usize>>],
    sim: Mutex<&'a mut Sim>,
    passes: Passes,
    /// This chip and the fabric of a multi-chip run.
    device: Option<(usize, &'a hlo_fabric::Fabric)>,
}

impl Hooks for TpuHooks<'_> {
    fn executed(&self, comp: CompId, node: NodeIndex) {
        if self.l.blocks_of[comp.index()].is_none() {
            return;
        }
        if let Some(&(b, i)) = self.l.kernel_of.get(&(comp, node))
            && let Some(id) = self.ids[b][i]
        {
            self.sim.lock().unwrap_or_else(|e| e.into_inner()).run_kernel(id);
        }
    }

    fn multiply(
        &self,
        comp: CompId,
        node: NodeIndex,
        lhs: &Array,
        rhs: &Array,
        exact: &dyn Fn(&Array, &Array) -> Result<Array, Failure>,
    ) -> Result<Array, Failure> {
        let instr = self.m.comp(comp).instr(node);
        let written: &[Precision] = match &instr.op {
            Op::Dot { dims, .. } => &dims.precision,
            Op::Convolution(c) => &c.precision,
            _ => &[],
        };
        let passes = passes_for(lhs.elem.max_float(rhs.elem), precision_of(written, self.passes));
        mxu_passes(lhs, rhs, passes, exact)
    }

    fn device(&self) -> Option<(usize, &hlo_fabric::Fabric)> {
        self.device
    }
}

trait Wider {
    fn max_float(self, o: ElemType) -> ElemType;
}

impl Wider for ElemType {
    /// f32 if either operand is f32 (the MXU then runs f32 passes), else the lhs type.
    fn max_float(self, o: ElemType) -> ElemType {
        if self == ElemType::F32 || o == ElemType::F32 { ElemType::F32 } else { self }
    }
}

/// Rounds to bf16 (nearest, ties to even; NaN stays NaN).
fn bf16(x: f32) -> f32 {
    half::bf16::from_f32(x).to_f32()
}

/// The bf16 parts of an f32 array: `x = hi + mid + lo` (each part the bf16 rounding of
/// what the previous ones leave; exact for normal f32 values; NaN below an infinite or NaN
/// `hi`).
fn split(a: &Array, parts: usize) -> Vec<Array> {
    let Data::F32(v) = &a.data else { return vec![a.clone()] };
    let mut rest = v.clone();
    let mut out = vec![];
    for _ in 0..parts {
        let part: Vec<f32> = rest.iter().map(|&x| bf16(x)).collect();
        for (r, p) in rest.iter_mut().zip(&part) {
            // An infinity or NaN leaves NaN for the lower parts (`inf - inf`, as the
            // decompositions compute it): every smaller pass an infinite operand takes
            // part in is then NaN, and dropped whole before `hi·hi` (see `mxu_passes`).
            *r = if r.is_finite() { *r - p } else { f32::NAN };
        }
        out.push(Array::new(a.elem, a.dims.clone(), Data::F32(part)));
    }
    out
}

/// A product as a bf16 MXU computes it with `passes` passes: 1 (`hi·hi`), 3 (bf16_3x:
/// `hi·lo + lo·hi + hi·hi` on a two-way split) or 6 (bf16_6x: `hi·lo + lo·hi + mid·mid +
/// mid·hi + hi·mid + hi·hi` on a three-way split). Each pass multiplies bf16 values exactly
/// and accumulates in f32 (`exact` on bf16-valued f32 arrays); the pass results are
/// summed in f32, smallest terms first, a NaN of the smaller terms dropped before `hi·hi`
/// (an infinite operand). Non-f32 operands take one pass as they are.
pub fn mxu_passes(
    lhs: &Array,
    rhs: &Array,
    passes: u32,
    exact: &dyn Fn(&Array, &Array) -> Result<Array, Failure>,
) -> Result<Array, Failure> {
    // c64: four real products of the f32 parts, each as above (`re = rr - ii`,
    // `im = ri + ir`), as the MXU multiplies complex values.
    if let (Data::C64(l), Data::C64(r)) = (&lhs.data, &rhs.data) {
        let part = |v: &[hlo_interp::value::Complex32],
                    dims: &[usize],
                    f: fn(&hlo_interp::value::Complex32) -> f32| {
            Array::new(ElemType::F32, dims.to_vec(), Data::F32(v.iter().map(f).collect()))
        };
        let (lr, li) = (part(l, &lhs.dims, |c| c.re), part(l, &lhs.dims, |c| c.im));
        let (rr, ri) = (part(r, &rhs.dims, |c| c.re), part(r, &rhs.dims, |c| c.im));
        // `exact` computes in the instruction's c64: on real parts its imaginary part is 0.
        let real_exact = |a: &Array, b: &Array| -> Result<Array, Failure> {
            let p = exact(a, b)?;
            match &p.data {
                Data::C64(v) => Ok(Array::new(
                    ElemType::F32,
                    p.dims.clone(),
                    Data::F32(v.iter().map(|c| c.re).collect()),
                )),
                _ => Ok(p),
            }
        };
        let prod = |a: &Array, b: &Array| -> Result<(Vec<f32>, Vec<usize>), Failure> {
            let p = mxu_passes(a, b, passes, &real_exact)?;
            match &p.data {
                Data::F32(v) => Ok((v.clone(), p.dims.clone())),
                _ => Err(Failure::Here("complex MXU product: a part is not f32".into())),
            }
        };
        let ((re_re, dims), (im_im, _)) = (prod(&lr, &rr)?, prod(&li, &ri)?);
        let ((re_im, _), (im_re, _)) = (prod(&lr, &ri)?, prod(&li, &rr)?);
        let v = (0..re_re.len())
            .map(|i| hlo_interp::value::Complex32::new(re_re[i] - im_im[i], re_im[i] + im_re[i]))
            .collect();
        return Ok(Array::new(ElemType::C64, dims, Data::C64(v)));
    }
    let is_f32 = |a: &Array| matches!(a.data, Data::F32(_)) && a.elem == ElemType::F32;
    if !(is_f32(lhs) || is_f32(rhs)) {
        return exact(lhs, rhs);
    }
    let parts = match passes {
        1 => 1,
        3 => 2,
        _ => 3,
    };
    // A non-float operand beside an f32 one (pred or integer weights) is widened to f32
    // first, so it splits like the other (its lower parts are zero); left unsplit, every
    // pass would multiply it whole.
    let widen = |a: &Array| -> Result<Array, Failure> {
        if matches!(a.data, Data::F32(_)) {
            Ok(a.clone())
        } else {
            Ok(hlo_interp::elementwise::convert(a, ElemType::F32)?)
        }
    };
    let (lhs, rhs) = (&widen(lhs)?, &widen(rhs)?);
    let (l, r) = (split(lhs, parts), split(rhs, parts));
    let pairs: &[(usize, usize)] = match passes {
        1 => &[(0, 0)],
        3 => &[(0, 1), (1, 0), (0, 0)],
        _ => &[(0, 2), (2, 0), (1, 1), (1, 0), (0, 1), (0, 0)],
    };
    let mut acc: Option<Array> = None;
    for &(i, j) in pairs {
        // The lower parts of an infinite value are NaN, and a finite lower part times an
        // infinite `hi` is an infinity of either sign: the smaller passes' sum is NaN or
        // wrong wherever an operand is not finite. As the bf16_3x/6x decompositions do
        // (Triton's `BF16DotTC`, XLA's dot_algorithm_rewriter), a NaN of that sum is
        // dropped before the `hi·hi` pass, which carries every infinity and NaN itself.
        if (i, j) == (0, 0)
            && let Some(Array { data: Data::F32(x), .. }) = &mut acc
        {
            x.iter_mut().filter(|x| x.is_nan()).for_each(|x| *x = 0.0);
        }
        let p = exact(&l[i.min(l.len() - 1)], &r[j.min(r.len() - 1)])?;
        acc = Some(match acc {
            None => p,
            Some(mut a) => {
                if let (Data::F32(x), Data::F32(y)) = (&mut a.data, &p.data) {
                    for (x, y) in x.iter_mut().zip(y) {
                        *x += *y;
                    }
                }
                a
            }
        });
    }
    acc.ok_or_else(|| Failure::Here("no MXU pass".into()))
}

/// Runs `m` (lowered as `lowered`) on `inputs` on the TPU model: outputs and timing.
pub fn run(
    m: &Module,
    lowered: &Lowered,
    inputs: &[Tensor],
    opts: &Options,
) -> Result<Run, Diagnostic> {
    let mut sim = Sim::new(opts.cfg.clone());
    sim.progress = opts.progress.clone();
    let ids = register(lowered, &mut sim);
    let outputs = {
        let hooks = TpuHooks {
            m,
            l: lowered,
            ids: &ids,
            sim: Mutex::new(&mut sim),
            passes: opts.passes,
            device: None,
        };
        // The interpreter's arrays are copies: the caller's inputs come out of its budget.
        let held = inputs.iter().fold(0u64, |a, t| a.saturating_add(t.bytes().len() as u64));
        let budget = hlo_interp::default_memory_budget().saturating_sub(held);
        Interpreter::new(m).with_hooks(&hooks).with_memory_budget(budget).run(inputs)?
    };
    Ok(Run { sim: Arc::new(sim), outputs: Some(outputs), control: "executed" })
}

/// Runs a partitioned (SPMD) module on N chips, one thread each: chip `d` computes on
/// `per_chip[d]`, collectives meet on a fabric and are timed on each chip's ICI
/// ([`hlo_chip::ici`]); each chip's interpreter holds at most `budget` bytes
/// ([`hlo_spmd::devices::Plan::device_budget`]). Returns every chip's run (values and timing).
pub fn run_chips(
    m: &Module,
    lowered: &Lowered,
    per_chip: &[Vec<Tensor>],
    budget: u64,
    opts: &Options,
) -> Result<Vec<Run>, Diagnostic> {
    hlo_fabric::on_devices(per_chip.len(), |d, fabric| {
        let mut sim = Sim::new(opts.cfg.clone());
        let ids = register(lowered, &mut sim);
        let outputs = {
            let hooks = TpuHooks {
                m,
                l: lowered,
                ids: &ids,
                sim: Mutex::new(&mut sim),
                passes: opts.passes,
                device: Some((d, fabric)),
            };
            Interpreter::new(m).with_hooks(&hooks).with_memory_budget(budget).run(&per_chip[d])?
        };
        Ok(Run { sim: Arc::new(sim), outputs: Some(outputs), control: "executed" })
    })
}

/// Times the per-chip program `m` of `plan` on `plan.devices` chips linked by the ICI of
/// `opts.cfg`: statically when `inputs` (global) is `None` and control flow allows (SPMD
/// chips run the same kernels, so one timeline stands for all), else executed on every
/// chip's shards of `inputs` (or of seeded inputs).
pub fn simulate_chips(
    plan: &hlo_spmd::devices::Plan,
    global_params: &[hlo_ir::Shape],
    m: &Module,
    lowered: &Lowered,
    inputs: Option<&[Tensor]>,
    opts: &Options,
) -> Result<Vec<Run>, Diagnostic> {
    if let Some(inputs) = inputs {
        let per = hlo_spmd::devices::shard_inputs(plan, inputs)?;
        return run_chips(m, lowered, &per, plan.device_budget(), opts);
    }
    let mut sim = Sim::new(opts.cfg.clone());
    sim.progress = opts.progress.clone();
    let ids = register(lowered, &mut sim);
    if let Err(blocked) = walk(lowered, &ids, lowered.program.entry, &mut sim, &mut Budget(BUDGET))
    {
        // Every chip's shards come on top of the global inputs: all of them must fit.
        if let Err(e) = plan.check_inputs_fit() {
            return Err(blocked_error(m, &blocked, e.message));
        }
        let seeded = seeded_for(m, global_params, &blocked)?;
        let per = hlo_spmd::devices::shard_inputs(plan, &seeded)?;
        return run_chips(m, lowered, &per, plan.device_budget(), opts);
    }
    // Every chip runs the same program on the same shapes: one simulation, shared (a copy
    // per chip cost 6.9 GB on 6144 chips).
    let sim = Arc::new(sim);
    Ok((0..plan.devices)
        .map(|_| Run { sim: Arc::clone(&sim), outputs: None, control: "static" })
        .collect())
}

/// Times `m` without computing values when its control flow is static; otherwise runs it
/// on `inputs` (or seeded inputs when `None`) and times it as executed.
pub fn simulate(
    m: &Module,
    lowered: &Lowered,
    inputs: Option<&[Tensor]>,
    opts: &Options,
) -> Result<Run, Diagnostic> {
    let mut sim = Sim::new(opts.cfg.clone());
    sim.progress = opts.progress.clone();
    let ids = register(lowered, &mut sim);
    let blocked = match walk(lowered, &ids, lowered.program.entry, &mut sim, &mut Budget(BUDGET)) {
        Ok(()) => return Ok(Run { sim: Arc::new(sim), outputs: None, control: "static" }),
        Err(b) => b,
    };
    let owned;
    let inputs = match inputs {
        Some(i) => i,
        None => {
            owned = seeded_for(m, &m.entry_param_shapes(), &blocked)?;
            &owned
        }
    };
    let mut r = run(m, lowered, inputs, opts)?;
    r.outputs = None;
    Ok(r)
}

/// Items a static walk may visit (loops unrolled) before it runs on values instead.
const BUDGET: u64 = 1 << 26;

struct Budget(u64);

/// Why a program cannot be timed without values: the loop or conditional whose trip count
/// or branch depends on data (or a walk longer than the budget).
#[derive(Debug, Clone, PartialEq)]
enum Blocked {
    Loop(String),
    Branch(String),
    TooLong,
    Unregistered,
}

/// Walks block `b` statically; `Err` names what depends on values.
fn walk(
    l: &Lowered,
    ids: &[Vec<Option<usize>>],
    b: usize,
    sim: &mut Sim,
    budget: &mut Budget,
) -> Result<(), Blocked> {
    for (i, item) in l.program.blocks[b].items.iter().enumerate() {
        budget.0 = budget.0.checked_sub(1).ok_or(Blocked::TooLong)?;
        match item {
            Item::Kernel(_) => sim.run_kernel(ids[b][i].ok_or(Blocked::Unregistered)?),
            Item::Call { block, .. } => walk(l, ids, *block, sim, budget)?,
            Item::While { cond, body, trip_count, name } => {
                let t = trip_count.ok_or_else(|| Blocked::Loop(name.clone()))?;
                for _ in 0..t {
                    walk(l, ids, *cond, sim, budget)?;
                    walk(l, ids, *body, sim, budget)?;
                }
                walk(l, ids, *cond, sim, budget)?;
            }
            Item::Cond { branches, taken, name } => {
                let k = taken.ok_or_else(|| Blocked::Branch(name.clone()))?;
                walk(l, ids, branches[k], sim, budget)?
            }
        }
    }
    Ok(())
}

/// Seeded inputs for a program that `blocked` keeps from being timed without values; when
/// they cannot be had (too large for the memory budget), a located error that names the
/// loop or conditional and says how to time it.
fn seeded_for(
    m: &Module,
    params: &[hlo_ir::Shape],
    blocked: &Blocked,
) -> Result<Vec<Tensor>, Diagnostic> {
    hlo_interp::seeded::seeded_inputs(params, 0).map_err(|e| blocked_error(m, blocked, e))
}

/// The located error for a program that `blocked` keeps from being timed without values
/// when inputs cannot be made up (`why`).
fn blocked_error(m: &Module, blocked: &Blocked, why: impl std::fmt::Display) -> Diagnostic {
    let (what, name) = match blocked {
        Blocked::Loop(n) => ("while loop", n.as_str()),
        Blocked::Branch(n) => ("conditional", n.as_str()),
        Blocked::TooLong | Blocked::Unregistered => {
            return Diagnostic::error(m.entry().span, why.to_string());
        }
    };
    let span = m
        .comp_ids()
        .find_map(|c| m.comp(c).find(name).map(|n| m.comp(c).instr(n).span))
        .unwrap_or(m.entry().span);
    let hint = if what == "while loop" {
        format!("give --inputs to time it on real values, or its trip count: --trip-count {name}=N")
    } else {
        "give --inputs to time it on real values".to_string()
    };
    Diagnostic::error(
        span,
        format!("{what} `{name}` depends on values, and the values cannot be made up: {why}"),
    )
    .with_help(hint)
}

/// The outputs of `m` on the interpreter alone (the reference the TPU values are
/// compared with in tests).
pub fn reference(m: &Module, inputs: &[Tensor]) -> Result<Vec<Tensor>, Diagnostic> {
    hlo_interp::run(m, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hlo_interp::value::Complex32;

    /// Elementwise products stand in for a dot: `mxu_passes` only splits and sums.
    fn times(a: &Array, b: &Array) -> Result<Array, Failure> {
        let (Data::F32(x), Data::F32(y)) = (&a.data, &b.data) else {
            return Err(Failure::Here("f32 only".into()));
        };
        Ok(Array::new(
            ElemType::F32,
            a.dims.clone(),
            Data::F32(x.iter().zip(y).map(|(p, q)| p * q).collect()),
        ))
    }

    fn c64(v: &[(f32, f32)]) -> Array {
        Array::new(
            ElemType::C64,
            vec![v.len()],
            Data::C64(v.iter().map(|&(r, i)| Complex32::new(r, i)).collect()),
        )
    }

    #[test]
    fn complex_products_are_four_real_mxu_products() {
        let (l, r) = ([(1.1f32, 2.3f32), (-0.7, 3.3)], [(0.3f32, -1.9f32), (2.2, 0.01)]);
        let (lhs, rhs) = (c64(&l), c64(&r));
        let got = |passes| match &mxu_passes(&lhs, &rhs, passes, &times).expect("product").data {
            Data::C64(v) => v.clone(),
            _ => panic!("not c64"),
        };
        // Six passes: f32-accurate.
        for (k, z) in got(6).iter().enumerate() {
            let (a, b) = (Complex32::new(l[k].0, l[k].1), Complex32::new(r[k].0, r[k].1));
            let want = a * b;
            assert!((z - want).norm() <= 1e-5 * want.norm(), "[{k}] {z} vs {want}");
        }
        // One pass: the parts rounded to bf16 first, as one bf16 pass multiplies them.
        for (k, z) in got(1).iter().enumerate() {
            let (a, b) = (
                Complex32::new(bf16(l[k].0), bf16(l[k].1)),
                Complex32::new(bf16(r[k].0), bf16(r[k].1)),
            );
            assert_eq!(
                *z,
                Complex32::new(a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re),
                "[{k}]"
            );
            assert_ne!(
                *z,
                Complex32::new(l[k].0, l[k].1) * Complex32::new(r[k].0, r[k].1),
                "[{k}] one pass must lose precision"
            );
        }
    }

    #[test]
    fn infinite_operands_stay_infinite_in_every_pass_count() {
        let f = |v: &[f32]| Array::new(ElemType::F32, vec![v.len()], Data::F32(v.to_vec()));
        let (lhs, rhs) = (
            // 1.8184464 rounds up to its bf16 `hi`: its lower parts are negative, and
            // times +inf they made -inf beside `hi·hi`'s +inf.
            f(&[f32::INFINITY, 3.0, f32::NAN, 0.0, 1.818_446_4]),
            f(&[2.0, f32::NEG_INFINITY, 1.0, f32::INFINITY, f32::INFINITY]),
        );
        for passes in [1, 3, 6] {
            let Data::F32(v) = &mxu_passes(&lhs, &rhs, passes, &times).expect("product").data
            else {
                panic!("not f32")
            };
            assert_eq!(v[..2], [f32::INFINITY, f32::NEG_INFINITY], "{passes} passes");
            assert_eq!(v[4], f32::INFINITY, "{passes} passes");
            // NaN in, NaN out; 0·inf is NaN in the exact product too.
            assert!(v[2].is_nan() && v[3].is_nan(), "{passes} passes: {v:?}");
        }
    }
}
