//! The planner: an optimized module turned into the [plan](super::plan) an
//! [`Executable`] runs, its kernels compiled on the way ([`Executable::compile`]).
//!
//! It walks each computation in the order of [`hlo_ir::schedule::Schedule`] (the
//! linearization the interpreter uses), decides which instructions get buffers and which
//! become steps (see the [module documentation](super)), orders the parallel copies of
//! loop states and branch results ([`Planner::parallel_copy`]), groups row chains
//! ([`crate::row_chain`]) and gives every arena buffer its offset from the live
//! intervals ([`Planner::assign`]).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use hlo_ir::schedule::Schedule;
use hlo_ir::{CompId, Computation, ElemType, Module, NodeIndex, Op, Opcode, Shape};

use super::Executable;
use super::plan::{Buffer, ChainKernel, KernelKind, Moves, Place, Slot, Step, Val};
use crate::Unsupported;
use crate::codegen::elemental::{elem_of, flat_arrays, static_dims};
use crate::codegen::kernel::{DefinedLoop, LoopKernel, define_loop_kernel, vector_dims};
use crate::codegen::{CgError, ty};
use crate::jit::JitModule;
use crate::row_chain;

impl Executable {
    /// Plans and compiles `m` (already optimized and checked; static shapes).
    pub fn compile(m: &Module) -> Result<Executable, CgError> {
        let mut p = Planner {
            m,
            jit: JitModule::new()?,
            bufs: Vec::new(),
            consts: Vec::new(),
            clock: 0,
            kernels: 0,
            rng_counters: 0,
            at: None,
        };
        let mut params = Vec::new();
        let mut param_vals = Vec::new();
        let mut param_slots = Vec::new();
        let pshapes = m.entry_param_shapes();
        for s in &pshapes {
            let v = p.new_val(s)?;
            for slot in v.flat() {
                p.bufs[slot].place = Some(Place::Param(param_slots.len()));
                param_slots.push(slot);
            }
            params.push(s.clone());
            param_vals.push(v);
        }
        let mut steps = Vec::new();
        let root = p.plan(m.entry, &param_vals, false, &mut steps)?;
        let outputs = root.flat();
        let output_shapes: Vec<Shape> = flat_arrays(
            &m.entry()
                .instr(m.entry().root().ok_or_else(|| CgError::new("entry has no root".into()))?)
                .shape,
        )
        .into_iter()
        .cloned()
        .collect();
        let end = p.tick();
        for &o in &outputs {
            p.bufs[o].last = end;
        }
        // Results computed by the program go straight into the output tensors; parameters,
        // constants and views returned as results are copied at the end.
        for (k, &o) in outputs.iter().enumerate() {
            let b = &mut p.bufs[o];
            if b.place.is_none() && b.alias.is_none() {
                b.place = Some(Place::Output(k));
            }
        }
        let steps = p.row_chains(steps);
        let arena_bytes = p.assign();
        p.check_fits_host(arena_bytes)?;
        let kernel_count = p.kernels;
        let code = p.jit.finish()?;
        let in_pool = super::plan::parallel_steps(&steps, &p.bufs) >= super::plan::IN_POOL_STEPS;
        Ok(Executable {
            code,
            consts: p.consts,
            bufs: p.bufs,
            arena_bytes,
            steps,
            params,
            param_slots,
            outputs,
            output_shapes,
            arenas: Mutex::new(Vec::new()),
            rng: Mutex::default(),
            kernel_count,
            in_pool,
        })
    }
}

struct Planner<'m> {
    m: &'m Module,
    jit: JitModule,
    bufs: Vec<Buffer>,
    consts: Vec<Vec<u64>>,
    clock: usize,
    kernels: usize,
    /// `rng-get-and-update-state` instructions planned so far (each owns a counter).
    rng_counters: usize,
    /// The instruction being planned (its name and span), which new buffers record.
    at: Option<(String, hlo_ir::Span)>,
}

fn cg(e: CgError, comp: &Computation, n: NodeIndex) -> CgError {
    let i = comp.instr(n);
    let mut e = e.in_instruction(&i.name);
    e.span = e.span.or((i.span != hlo_ir::Span::default()).then_some(i.span));
    e
}

/// Whether `n` converts f32 to bf16 for one `dot` only (its one user), which then reads
/// the f32 operand and rounds it itself ([`Step::Dot`]'s `round`).
fn rounds_for_one_dot(comp: &Computation, n: NodeIndex) -> bool {
    let ins = comp.instr(n);
    let (Some(&src), Some(user)) = (comp.operands(n).first(), comp.sole_user(n)) else {
        return false;
    };
    elem_of(&ins.shape).ok() == Some(ElemType::BF16)
        && elem_of(&comp.instr(src).shape).ok() == Some(ElemType::F32)
        && comp.root() != Some(n)
        && matches!(comp.instr(user).op, Op::Dot { opcode: Opcode::Dot, .. })
}

/// The outputs of a multi-output loop fusion (root `tuple`) that one loop computes: at
/// least two distinct elementwise-computed arrays with the same
/// [`vector_dims`] (f32/bf16, last dimension of four
/// or more, not reductions or windows), whose values no other kernel of the fusion reads
/// (they are computed only when the last of them is scheduled). Empty when that is not
/// the case.
fn output_group(
    comp: &Computation,
    root: NodeIndex,
    materialize: &HashSet<NodeIndex>,
) -> Vec<NodeIndex> {
    if comp.instr(root).op != Op::Plain(Opcode::Tuple) {
        return Vec::new();
    }
    let mut group: Vec<NodeIndex> = Vec::new();
    for o in comp.operands(root) {
        if !group.contains(&o) {
            group.push(o);
        }
    }
    let first = group.first().and_then(|&g| vector_dims(comp, g));
    let ok = group.len() >= 2
        && first.is_some()
        && group.iter().all(|&g| {
            let op = &comp.instr(g).op;
            elemental(op)
                && !matches!(op, Op::Constant(_) | Op::GetTupleElement { .. } | Op::Map { .. })
                && vector_dims(comp, g) == first
        });
    if !ok {
        return Vec::new();
    }
    // Every value a member feeds must end in members or the root: a kernel of its own
    // (materialized) reading it would run before the group is computed.
    let mut stack: Vec<NodeIndex> = group.clone();
    let mut seen = HashSet::new();
    while let Some(x) = stack.pop() {
        if !seen.insert(x) {
            continue;
        }
        for u in comp.users(x) {
            if u == root || group.contains(&u) {
                continue;
            }
            if materialize.contains(&u) {
                return Vec::new();
            }
            stack.push(u);
        }
    }
    group
}

/// Whether `op` can be computed element by element inside a loop kernel.
fn elemental(op: &Op) -> bool {
    match op {
        Op::Plain(o) => !matches!(
            o,
            Opcode::Tuple
                | Opcode::AfterAll
                | Opcode::AddDependency
                | Opcode::PartitionId
                | Opcode::ReplicaId
        ),
        Op::Iota { .. }
        | Op::Compare { .. }
        | Op::Broadcast { .. }
        | Op::Reshape { .. }
        | Op::Transpose { .. }
        | Op::Reverse { .. }
        | Op::Concatenate { .. }
        | Op::Slice { .. }
        | Op::DynamicSlice { .. }
        | Op::Pad { .. }
        | Op::ReducePrecision { .. }
        | Op::Gather(_)
        | Op::Reduce { .. }
        | Op::ReduceWindow { .. }
        | Op::Map { .. }
        | Op::Constant(_)
        | Op::GetTupleElement { .. } => true,
        _ => false,
    }
}

/// `steps` with the chains [`row_chain::group`] finds (see [`Planner::row_chains`]).
fn chain_steps(
    steps: Vec<Step>,
    bufs: &row_chain::Buffers,
    widen: &mut Vec<row_chain::Widen>,
) -> Vec<Step> {
    let steps: Vec<Step> = steps
        .into_iter()
        .map(|st| match st {
            Step::While { cond, pred, body, write_back } => Step::While {
                cond: chain_steps(cond, bufs, widen),
                pred,
                body: chain_steps(body, bufs, widen),
                write_back,
            },
            Step::Conditional { selector, is_pred, branches } => Step::Conditional {
                selector,
                is_pred,
                branches: branches
                    .into_iter()
                    .map(|(b, m)| (chain_steps(b, bufs, widen), m))
                    .collect(),
            },
            st => st,
        })
        .collect();
    let views: Vec<Option<row_chain::Kernel>> = steps
        .iter()
        .map(|st| match st {
            Step::Kernel { args, inputs, rows, split, at, .. } => Some(row_chain::Kernel {
                reads: args[..*inputs].iter().map(|&s| bufs.root[s]).collect(),
                writes: args[*inputs..].iter().map(|&s| bufs.root[s]).collect(),
                by_rows: rows.as_deref().map(|r| (r, *split)),
                at: *at,
            }),
            _ => None,
        })
        .collect();
    let groups = row_chain::group(&views, bufs, widen);
    drop(views);
    let mut steps: Vec<Option<Step>> = steps.into_iter().map(Some).collect();
    let mut out = Vec::with_capacity(steps.len());
    for g in groups {
        if g.steps.len() == 1 {
            out.push(steps[g.steps[0]].take().expect("each step in one group"));
            continue;
        }
        let (mut kernels, mut args, mut names, mut work, mut rows) =
            (Vec::new(), Vec::new(), Vec::new(), 0, 0);
        for k in g.steps {
            let Some(Step::Kernel { f, args: a, kind, name, split, work: w, .. }) = steps[k].take()
            else {
                unreachable!("chains hold kernels")
            };
            kernels.push(ChainKernel { f, at: args.len(), kind });
            args.extend(a);
            names.push(name);
            work += w;
            rows = split;
        }
        out.push(Step::Chain {
            kernels,
            args,
            rows,
            block: g.block,
            work,
            name: names.join(" » "),
        });
    }
    out
}

impl<'m> Planner<'m> {
    fn tick(&mut self) -> usize {
        self.clock += 1;
        self.clock
    }

    fn new_buf(&mut self, s: &Shape) -> Result<Slot, CgError> {
        let e = elem_of(s)?;
        let dims = static_dims(s)?;
        let n: i64 = dims.iter().product();
        let bytes = (n.max(0) as usize)
            .checked_mul(ty::size_of(e) as usize)
            .ok_or_else(|| CgError::new(format!("{s} is too large")))?;
        let t = self.clock;
        let at = self.at.clone();
        self.bufs.push(Buffer {
            bytes,
            elem: e,
            dims,
            place: None,
            alias: None,
            def: t,
            last: t,
            at,
        });
        Ok(self.bufs.len() - 1)
    }

    fn new_val(&mut self, s: &Shape) -> Result<Val, CgError> {
        Ok(match s {
            Shape::Tuple(items) => {
                Val::T(items.iter().map(|i| self.new_val(i)).collect::<Result<_, _>>()?)
            }
            Shape::Token => Val::T(vec![]),
            _ => Val::A(self.new_buf(s)?),
        })
    }

    fn use_val(&mut self, v: &Val) {
        let t = self.clock;
        for mut s in v.flat() {
            loop {
                let b = &mut self.bufs[s];
                b.last = b.last.max(t);
                match b.alias {
                    Some(a) => s = a,
                    None => break,
                }
            }
        }
    }

    fn constant(&mut self, lit: &hlo_ir::literal::Literal, s: &Shape) -> Result<Val, CgError> {
        if let (hlo_ir::literal::Literal::Tuple(items), Shape::Tuple(shapes)) = (lit, s) {
            return Ok(Val::T(
                items
                    .iter()
                    .zip(shapes)
                    .map(|(l, s)| self.constant(l, s))
                    .collect::<Result<_, _>>()?,
            ));
        }
        let e = elem_of(s)?;
        let dims = static_dims(s)?;
        let count = dims.iter().map(|&d| d as usize).product();
        let bytes = lit.encode(e, count).map_err(|e| CgError::new(e.to_string()))?;
        let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
        // SAFETY: `words` has at least `bytes.len()` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                words.as_mut_ptr() as *mut u8,
                bytes.len(),
            )
        };
        self.consts.push(words);
        let slot = self.new_buf(s)?;
        self.bufs[slot].place = Some(Place::Const(self.consts.len() - 1));
        Ok(Val::A(slot))
    }

    /// Whether a collective with these operand and result buffers runs on one device
    /// (without a fabric): as the interpreter decides it ([`hlo_fabric::alone`]), and
    /// each result must be its operand (a growing all-gather without groups is not).
    fn alone(
        &self,
        opcode: Opcode,
        attrs: &hlo_ir::op::CollectiveAttrs,
        operands: &[Slot],
        outs: &[Slot],
    ) -> Result<(), hlo_fabric::FabricError> {
        let h = &self.m.header;
        let declared = h.num_partitions.unwrap_or(1).max(h.replica_count.unwrap_or(1)).max(1);
        hlo_fabric::alone(opcode, attrs, declared as usize)?;
        let shape = |s: Slot| {
            let b = &self.bufs[s];
            let dims: Vec<u64> = b.dims.iter().map(|&d| d as u64).collect();
            Shape::array(b.elem, &dims)
        };
        let same = |&(&a, &r): &(&Slot, &Slot)| {
            let (a, r) = (&self.bufs[a], &self.bufs[r]);
            a.elem == r.elem && a.dims == r.dims
        };
        if operands.len() == outs.len() && operands.iter().zip(outs).all(|p| same(&p)) {
            return Ok(());
        }
        let list = |slots: &[Slot]| {
            let shapes: Vec<String> = slots.iter().map(|&s| shape(s).to_string()).collect();
            shapes.join(", ")
        };
        Err(hlo_fabric::FabricError::Malformed(format!(
            "{} of {} into {} on one device: with one participant each result is its operand",
            opcode.name(),
            list(operands),
            list(outs)
        )))
    }

    /// Plans computation `id` with its parameters bound to `params`; `fused` computations
    /// materialize only their root and library-call operands. Returns the root's value.
    fn plan(
        &mut self,
        id: CompId,
        params: &[Val],
        fused: bool,
        steps: &mut Vec<Step>,
    ) -> Result<Val, CgError> {
        let m = self.m;
        let comp = m.comp(id);
        let sched = Schedule::new(comp);
        let root = sched.nodes[sched.root];
        // Which instructions get a buffer inside a fused computation.
        let mut materialize: HashSet<NodeIndex> = HashSet::new();
        if fused {
            materialize.insert(root);
            if let Op::Plain(Opcode::Tuple) = comp.instr(root).op {
                materialize.extend(comp.operands(root));
            }
            for &n in &sched.nodes {
                if !elemental(&comp.instr(n).op) {
                    materialize.insert(n);
                    materialize.extend(comp.operands(n));
                }
            }
        }
        // The outputs of a multi-output loop fusion computed by one loop (see
        // `output_group`); planned together where the last of them is scheduled.
        let group = if fused { output_group(comp, root, &materialize) } else { Vec::new() };
        let group_last =
            group.iter().copied().max_by_key(|&g| sched.nodes.iter().position(|&x| x == g));
        let mut vals: HashMap<NodeIndex, Val> = HashMap::new();
        // Converts to bf16 a dot does itself: the convert's f32 operand buffer.
        let mut rounded: HashMap<NodeIndex, Slot> = HashMap::new();
        for (pos, &n) in sched.nodes.iter().enumerate() {
            let ins = comp.instr(n);
            self.at = Some((ins.name.clone(), ins.span));
            let ops = &sched.operands[pos];
            let opn: Vec<NodeIndex> = ops.iter().map(|&o| sched.nodes[o]).collect();
            self.tick();
            let v = match &ins.op {
                Op::Parameter { number, .. } => {
                    params.get(*number as usize).cloned().ok_or_else(|| {
                        CgError::new(format!("parameter {number} of `{}` is not bound", comp.name))
                    })?
                }
                Op::Constant(lit)
                    if !fused
                        || materialize.contains(&n)
                        || static_dims(&ins.shape)
                            .map_or(true, |d| d.iter().product::<i64>() != 1) =>
                {
                    self.constant(lit, &ins.shape).map_err(|e| cg(e, comp, n))?
                }
                _ if fused && !materialize.contains(&n) => continue,
                _ if group.contains(&n) => {
                    if Some(n) != group_last {
                        continue;
                    }
                    let outs = self
                        .loop_kernel(comp, &group, &vals, &materialize, fused, steps)
                        .map_err(|e| cg(e, comp, n))?;
                    vals.extend(group.iter().copied().zip(outs));
                    vals[&n].clone()
                }
                Op::Plain(Opcode::Tuple) => Val::T(opn.iter().map(|o| vals[o].clone()).collect()),
                Op::GetTupleElement { index } => match &vals[&opn[0]] {
                    Val::T(items) => items.get(*index as usize).cloned().ok_or_else(|| {
                        cg(CgError::new("tuple index out of range".into()), comp, n)
                    })?,
                    Val::A(_) => {
                        return Err(cg(
                            CgError::new("get-tuple-element of an array".into()),
                            comp,
                            n,
                        ));
                    }
                },
                Op::Reshape { .. }
                | Op::Plain(Opcode::Bitcast | Opcode::Copy | Opcode::OptBarrier)
                    if !fused || opn.iter().all(|o| vals.contains_key(o)) =>
                {
                    let v = vals[&opn[0]].clone();
                    self.use_val(&v);
                    match (&v, &ins.shape) {
                        (Val::A(src), Shape::Array(_))
                            if static_dims(&ins.shape)? != self.bufs[*src].dims
                                || elem_of(&ins.shape)? != self.bufs[*src].elem =>
                        {
                            let a = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                            if self.bufs[a].bytes != self.bufs[*src].bytes {
                                return Err(cg(
                                    CgError::unsupported(Unsupported::BitcastSize),
                                    comp,
                                    n,
                                ));
                            }
                            self.bufs[a].alias = Some(*src);
                            Val::A(a)
                        }
                        _ => v,
                    }
                }
                Op::CustomCall(cc) if cc.is_single_device_identity() && !opn.is_empty() => {
                    let v = vals[&opn[0]].clone();
                    self.use_val(&v);
                    v
                }
                Op::Plain(Opcode::AfterAll) => Val::T(vec![]),
                Op::Fusion { calls, .. } => {
                    let args: Vec<Val> = opn.iter().map(|o| vals[o].clone()).collect();
                    for a in &args {
                        self.use_val(a);
                    }
                    let v = self.plan(*calls, &args, true, steps)?;
                    self.tick();
                    for a in &args {
                        self.use_val(a);
                    }
                    v
                }
                Op::Call { to_apply, .. } => {
                    let args: Vec<Val> = opn.iter().map(|o| vals[o].clone()).collect();
                    self.plan(*to_apply, &args, false, steps)?
                }
                Op::Plain(Opcode::Convert) if !fused && rounds_for_one_dot(comp, n) => {
                    // f32 values converted to bf16 only for one dot (mixed-precision
                    // weights): the dot reads the f32 buffer and rounds as it widens, the
                    // bf16 copy is never written.
                    let src = self.slot_of(&vals, opn[0], comp, n)?;
                    rounded.insert(n, src);
                    continue;
                }
                Op::Dot { opcode: Opcode::Dot, dims } => {
                    let mut round = [false; 2];
                    let mut operand = |i: usize| match rounded.get(&opn[i]) {
                        Some(&src) => {
                            round[i] = true;
                            Ok(src)
                        }
                        None => self.slot_of(&vals, opn[i], comp, n),
                    };
                    let (lhs, rhs) = (operand(0)?, operand(1)?);
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    self.use_val(&Val::A(lhs));
                    self.use_val(&Val::A(rhs));
                    steps.push(Step::Dot {
                        lhs,
                        rhs,
                        out,
                        round,
                        dims: dims.clone(),
                        name: ins.name.clone(),
                    });
                    Val::A(out)
                }
                Op::Convolution(c) => {
                    let (lhs, rhs) = (
                        self.slot_of(&vals, opn[0], comp, n)?,
                        self.slot_of(&vals, opn[1], comp, n)?,
                    );
                    let (le, re, oe) =
                        (self.bufs[lhs].elem, self.bufs[rhs].elem, elem_of(&ins.shape)?);
                    let ints =
                        [le, re, oe].iter().filter(|&&e| crate::library::is_int_or_pred(e)).count();
                    let f64s = [le, re, oe].iter().filter(|&&e| e == ElemType::F64).count();
                    // Integers and pred into integers, f64 into f64, the rest into f32, bf16
                    // or f16 (see `Unsupported::Convolution`).
                    if (ints != 0 && ints != 3)
                        || (ints == 0
                            && f64s == 0
                            && !matches!(oe, ElemType::F32 | ElemType::BF16 | ElemType::F16))
                        || (f64s != 0 && f64s != 3)
                    {
                        return Err(cg(
                            CgError::unsupported(Unsupported::Convolution {
                                lhs: le,
                                rhs: re,
                                out: oe,
                            }),
                            comp,
                            n,
                        ));
                    }
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    self.use_val(&Val::A(lhs));
                    self.use_val(&Val::A(rhs));
                    steps.push(Step::Conv {
                        lhs,
                        rhs,
                        out,
                        conv: c.clone(),
                        name: ins.name.clone(),
                    });
                    Val::A(out)
                }
                Op::Scatter(_) | Op::SelectAndScatter { .. } => {
                    let mut args = Vec::new();
                    let mut operand_slots = Vec::new();
                    for &o in &opn {
                        let s = self.slot_of(&vals, o, comp, n)?;
                        if !operand_slots.iter().any(|&(x, _)| x == o) {
                            operand_slots.push((o, args.len()));
                            args.push(s);
                        }
                        self.use_val(&Val::A(s));
                    }
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let out_slots: Vec<usize> =
                        (args.len()..args.len() + out.flat().len()).collect();
                    args.extend(out.flat());
                    self.kernels += 1;
                    let kname = format!(
                        "k{}_{}",
                        self.kernels,
                        ins.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                    );
                    let (f, split) = crate::codegen::scatter::define(
                        &mut self.jit,
                        m,
                        &kname,
                        comp,
                        n,
                        &operand_slots,
                        &out_slots,
                    )
                    .map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::Kernel {
                        f,
                        inputs: operand_slots.len(),
                        args,
                        rows: None,
                        at: self.clock,
                        kind: KernelKind::Scatter,
                        name: ins.name.clone(),
                        split,
                        // Each part copies its rows and walks every update (applying its
                        // own): the result's and the operands' elements.
                        work: if split > 1 {
                            elements(&ins.shape)
                                + opn.iter().map(|&o| elements(&comp.instr(o).shape)).sum::<u64>()
                        } else {
                            0
                        },
                    });
                    out
                }
                Op::Sort { dimension, to_apply, .. } => {
                    let operands: Vec<Slot> = opn
                        .iter()
                        .map(|&o| self.slot_of(&vals, o, comp, n))
                        .collect::<Result<_, _>>()?;
                    for &s in &operands {
                        self.use_val(&Val::A(s));
                    }
                    let elems: Vec<ElemType> =
                        operands.iter().map(|&s| self.bufs[s].elem).collect();
                    self.kernels += 1;
                    let kname = format!(
                        "k{}_cmp_{}",
                        self.kernels,
                        ins.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
                    );
                    let cmp = crate::codegen::sort::define_comparator(
                        &mut self.jit,
                        m,
                        &kname,
                        *to_apply,
                        &elems,
                    )
                    .map_err(|e| cg(e, comp, n))?;
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::Sort {
                        cmp,
                        operands,
                        outs: out.flat(),
                        dim: *dimension as usize,
                        name: ins.name.clone(),
                    });
                    out
                }
                Op::CustomCall(cc) if cc.target == "TopK" => {
                    // XLA's TopK custom-call: k is the result's last dimension, largest first.
                    let operand = self.slot_of(&vals, opn[0], comp, n)?;
                    self.use_val(&Val::A(operand));
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let f = out.flat();
                    if f.len() != 2 {
                        return Err(cg(
                            CgError::new("TopK must give values and indices".into()),
                            comp,
                            n,
                        ));
                    }
                    let k = *self.bufs[f[0]].dims.last().unwrap_or(&0) as usize;
                    steps.push(Step::TopK {
                        operand,
                        values: f[0],
                        indices: f[1],
                        k,
                        largest: true,
                        name: ins.name.clone(),
                    });
                    out
                }
                Op::TopK { k, largest, .. } => {
                    let operand = self.slot_of(&vals, opn[0], comp, n)?;
                    self.use_val(&Val::A(operand));
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let f = out.flat();
                    if f.len() != 2 {
                        return Err(cg(
                            CgError::new("topk must give values and indices".into()),
                            comp,
                            n,
                        ));
                    }
                    steps.push(Step::TopK {
                        operand,
                        values: f[0],
                        indices: f[1],
                        k: *k as usize,
                        largest: largest.unwrap_or(true),
                        name: ins.name.clone(),
                    });
                    out
                }
                Op::While { condition, body } => {
                    let init = vals[&opn[0]].clone();
                    self.use_val(&init);
                    let state_val = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let state = state_val.flat();
                    let moves = self.parallel_copy(&init.flat(), &state);
                    steps.push(Step::Copy { moves });
                    let mut cond_steps = Vec::new();
                    let pv = self.plan(
                        *condition,
                        std::slice::from_ref(&state_val),
                        false,
                        &mut cond_steps,
                    )?;
                    let pred = match pv {
                        Val::A(s) => s,
                        _ => {
                            return Err(cg(
                                CgError::new("while condition returns a tuple".into()),
                                comp,
                                n,
                            ));
                        }
                    };
                    let mut body_steps = Vec::new();
                    let out =
                        self.plan(*body, std::slice::from_ref(&state_val), false, &mut body_steps)?;
                    self.tick();
                    self.use_val(&out);
                    self.use_val(&Val::A(pred));
                    self.use_val(&state_val);
                    let write_back = self.parallel_copy(&out.flat(), &state);
                    steps.push(Step::While {
                        cond: cond_steps,
                        pred,
                        body: body_steps,
                        write_back,
                    });
                    state_val
                }
                Op::Conditional(br) => {
                    let selector = self.slot_of(&vals, opn[0], comp, n)?;
                    let is_pred = elem_of(&comp.instr(opn[0]).shape)? == ElemType::Pred;
                    let result = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let comps: Vec<CompId> = match br {
                        hlo_ir::op::Branches::TrueFalse(t, f) => vec![*t, *f],
                        hlo_ir::op::Branches::Indexed(v) => v.clone(),
                    };
                    let mut branches = Vec::new();
                    for (k, c) in comps.iter().enumerate() {
                        let arg = vals[&opn[k + 1]].clone();
                        let mut bs = Vec::new();
                        let out = self.plan(*c, std::slice::from_ref(&arg), false, &mut bs)?;
                        self.tick();
                        self.use_val(&out);
                        self.use_val(&arg);
                        let moves = self.parallel_copy(&out.flat(), &result.flat());
                        branches.push((bs, moves));
                    }
                    self.use_val(&Val::A(selector));
                    steps.push(Step::Conditional { selector, is_pred, branches });
                    result
                }
                Op::Plain(Opcode::PartitionId | Opcode::ReplicaId) => {
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::DeviceId { out });
                    Val::A(out)
                }
                Op::RngGetAndUpdateState { delta } => {
                    let out = self.new_buf(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    steps.push(Step::RngState { out, counter: self.rng_counters, delta: *delta });
                    self.rng_counters += 1;
                    Val::A(out)
                }
                Op::Collective { opcode, attrs } => {
                    if let Some(a) = ins.unimplemented_kept_attr() {
                        return Err(cg(
                            CgError::unsupported(Unsupported::Attribute {
                                attribute: a.to_string(),
                                opcode: *opcode,
                            }),
                            comp,
                            n,
                        ));
                    }
                    let operands: Vec<Slot> = opn
                        .iter()
                        .map(|&o| self.slot_of(&vals, o, comp, n))
                        .collect::<Result<_, _>>()?;
                    for &s in &operands {
                        self.use_val(&Val::A(s));
                    }
                    let reducer =
                        attrs.to_apply.and_then(|c| hlo_interp::binary_reducer(m.comp(c)));
                    let out = self.new_val(&ins.shape).map_err(|e| cg(e, comp, n))?;
                    let alone = self.alone(*opcode, attrs, &operands, &out.flat());
                    steps.push(Step::Collective {
                        opcode: *opcode,
                        attrs: attrs.clone(),
                        reducer,
                        operands,
                        outs: out.flat(),
                        alone,
                        name: ins.name.clone(),
                    });
                    out
                }
                op if elemental(op) => self
                    .loop_kernel(comp, &[n], &vals, &materialize, fused, steps)
                    .map_err(|e| cg(e, comp, n))?
                    .remove(0),
                Op::CustomCall(cc) => {
                    return Err(cg(
                        CgError::unsupported(Unsupported::CustomCall(cc.target.clone())),
                        comp,
                        n,
                    ));
                }
                other => {
                    return Err(cg(
                        CgError::unsupported(Unsupported::Opcode(other.opcode())),
                        comp,
                        n,
                    ));
                }
            };
            vals.insert(n, v);
        }
        let root_val = vals
            .get(&root)
            .cloned()
            .ok_or_else(|| CgError::new(format!("root of `{}` not computed", comp.name)))?;
        self.tick();
        self.use_val(&root_val);
        Ok(root_val)
    }

    /// The buffer whose bytes `s` names (`s` itself unless it is a view).
    fn root(&self, mut s: Slot) -> Slot {
        while let Some(a) = self.bufs[s].alias {
            s = a;
        }
        s
    }

    /// Orders the parallel copy `to[i] := from[i]` (every source read as it was before any
    /// destination is written) into a sequence of plain copies, run one after the other.
    ///
    /// Buffers are compared by the bytes they name ([`Self::root`]): a source may be a view
    /// (reshape, bitcast, copy) of a destination, and a destination may be read by several
    /// sources. A copy runs once no other pending copy still reads its destination; when
    /// every pending copy's destination is still read (the sources form cycles, e.g. a
    /// swap), one source is saved in a temporary buffer first, live only at this point of
    /// the plan. A copy whose source names its destination's bytes is no copy at all.
    /// Destinations must be distinct buffers.
    fn parallel_copy(&mut self, from: &[Slot], to: &[Slot]) -> Moves {
        debug_assert_eq!(from.len(), to.len());
        let mut pending: Vec<(Slot, Slot)> = from
            .iter()
            .zip(to)
            .filter(|&(&f, &t)| self.root(f) != self.root(t) && self.bufs[t].bytes > 0)
            .map(|(&f, &t)| (f, t))
            .collect();
        let mut moves = Vec::with_capacity(pending.len());
        while !pending.is_empty() {
            let free = (0..pending.len()).find(|&k| {
                let dst = self.root(pending[k].1);
                !pending.iter().enumerate().any(|(i, &(f, _))| i != k && self.root(f) == dst)
            });
            if let Some(k) = free {
                moves.push(pending.remove(k));
                continue;
            }
            // Cycles only: save the first source and read the saved bytes instead.
            let saved = self.root(pending[0].0);
            let b = &self.bufs[saved];
            let t = self.clock;
            let tmp = Buffer { place: None, alias: None, def: t, last: t, ..b.clone() };
            self.bufs.push(tmp);
            let tmp = self.bufs.len() - 1;
            moves.push((saved, tmp));
            for p in &mut pending {
                if self.root(p.0) == saved {
                    p.0 = tmp;
                }
            }
        }
        moves
    }

    fn slot_of(
        &self,
        vals: &HashMap<NodeIndex, Val>,
        o: NodeIndex,
        comp: &Computation,
        n: NodeIndex,
    ) -> Result<Slot, CgError> {
        match vals.get(&o) {
            Some(Val::A(s)) => Ok(*s),
            _ => Err(cg(CgError::new("operand is not an array buffer".into()), comp, n)),
        }
    }

    /// The leaves a kernel over `roots` reads (the instructions `is_leaf` accepts, reached
    /// from the roots through operands), in program order: the kernel's argument slots and
    /// each leaf's positions among them.
    fn leaf_args(
        &mut self,
        comp: &Computation,
        roots: &[NodeIndex],
        vals: &HashMap<NodeIndex, Val>,
        is_leaf: impl Fn(NodeIndex) -> bool,
    ) -> (Vec<Slot>, Vec<(NodeIndex, Vec<usize>)>) {
        let mut leaves: Vec<NodeIndex> = Vec::new();
        let mut seen = HashSet::new();
        let mut stack = roots.to_vec();
        while let Some(x) = stack.pop() {
            if !seen.insert(x) {
                continue;
            }
            if is_leaf(x) {
                leaves.push(x);
                continue;
            }
            stack.extend(comp.operands(x));
        }
        leaves.sort_by_key(|x| comp.instr(*x).seq);
        let mut args: Vec<Slot> = Vec::new();
        let mut leaf_slots = Vec::new();
        for &l in &leaves {
            let v = &vals[&l];
            let flat = v.flat();
            let idx: Vec<usize> = (args.len()..args.len() + flat.len()).collect();
            args.extend(flat);
            leaf_slots.push((l, idx));
            self.use_val(v);
        }
        (args, leaf_slots)
    }

    /// One loop kernel computing `outs` (one instruction, or the same-dims outputs of a
    /// multi-output fusion, see [`output_group`], computed together at each index); its
    /// leaves are the buffers reached first when walking up from the outputs (every
    /// operand at top level; inside a fusion, parameters and materialized instructions).
    fn loop_kernel(
        &mut self,
        comp: &Computation,
        outs: &[NodeIndex],
        vals: &HashMap<NodeIndex, Val>,
        materialize: &HashSet<NodeIndex>,
        fused: bool,
        steps: &mut Vec<Step>,
    ) -> Result<Vec<Val>, CgError> {
        let is_leaf = |x: NodeIndex| {
            !outs.contains(&x)
                && vals.contains_key(&x)
                && (!fused
                    || materialize.contains(&x)
                    || matches!(comp.instr(x).op, Op::Parameter { .. })
                    || matches!(vals.get(&x), Some(Val::A(_))))
        };
        let (mut args, leaf_slots) = self.leaf_args(comp, outs, vals, is_leaf);
        let inputs = args.len();
        let mut outputs = Vec::new();
        let mut results = Vec::new();
        for &n in outs {
            let out = self.new_val(&comp.instr(n).shape)?;
            let flat = out.flat();
            outputs.push((n, (args.len()..args.len() + flat.len()).collect::<Vec<usize>>()));
            args.extend(flat);
            results.push(out);
        }
        let first = comp.instr(outs[0]);
        let kind = match &first.op {
            _ if fused => KernelKind::Fusion,
            Op::Reduce { .. } | Op::ReduceWindow { .. } => KernelKind::Reduce,
            Op::Plain(o) if !matches!(o, Opcode::DynamicUpdateSlice) => KernelKind::Elementwise,
            Op::Compare { .. } => KernelKind::Elementwise,
            _ => KernelKind::DataMovement,
        };
        self.kernels += 1;
        let name = format!(
            "k{}_{}",
            self.kernels,
            first.name.replace(|c: char| !c.is_ascii_alphanumeric(), "_")
        );
        let spec = LoopKernel { comp, leaves: leaf_slots, outputs };
        let DefinedLoop { index: f, extent: split, rows } =
            define_loop_kernel(&mut self.jit, self.m, &name, &spec)?;
        // A reduction's work is its input, not its result.
        let work = outs
            .iter()
            .map(|&n| match &comp.instr(n).op {
                Op::Reduce { .. } => {
                    comp.operands(n).first().map_or(0, |&o| elements(&comp.instr(o).shape))
                }
                _ => elements(&comp.instr(n).shape),
            })
            .sum();
        let label: Vec<&str> = outs.iter().map(|&n| comp.instr(n).name.as_str()).collect();
        steps.push(Step::Kernel {
            f,
            args,
            inputs,
            rows,
            at: self.clock,
            kind,
            name: label.join("+"),
            split,
            work,
        });
        Ok(results)
    }

    /// Groups loop kernels over the same rows into chains ([`crate::row_chain`]), inside
    /// loops and conditionals too, and keeps the buffers they use live over each chain's
    /// span.
    fn row_chains(&mut self, steps: Vec<Step>) -> Vec<Step> {
        let root = (0..self.bufs.len()).map(|s| self.root(s)).collect();
        let bytes = self.bufs.iter().map(|b| b.bytes).collect();
        let bufs = row_chain::Buffers { root, bytes };
        let mut widen = Vec::new();
        let steps = chain_steps(steps, &bufs, &mut widen);
        for w in widen {
            for s in w.slots {
                let b = &mut self.bufs[s];
                b.def = b.def.min(w.from);
                b.last = b.last.max(w.to);
            }
        }
        steps
    }

    /// Gives every arena buffer an offset: intervals sorted by definition, first fit over
    /// the buffers still live.
    /// An error when the arena (`arena_bytes`) and the output tensors together exceed
    /// this host's physical memory: such a program cannot run here, and allocating it would
    /// abort the process or wake the out-of-memory killer. (Below that the allocation is
    /// made at run time, fallibly: [`RunError::Arena`].)
    fn check_fits_host(&self, arena_bytes: usize) -> Result<(), CgError> {
        let Some(physical) = hlo_ir::tensor::physical_memory() else { return Ok(()) };
        let outputs = self
            .bufs
            .iter()
            .filter(|b| matches!(b.place, Some(Place::Output(_))))
            .fold(0u64, |a, b| a.saturating_add(b.bytes as u64));
        let need = (arena_bytes as u64).saturating_add(outputs);
        if need <= physical {
            return Ok(());
        }
        let format = hlo_ir::tensor::format_bytes;
        let largest = self
            .bufs
            .iter()
            .filter(|b| {
                b.alias.is_none() && !matches!(b.place, Some(Place::Param(_) | Place::Const(_)))
            })
            .max_by_key(|b| b.bytes);
        let what = largest.map_or(String::new(), |b| {
            format!("; the largest, {}{:?}, takes {}", b.elem, b.dims, format(b.bytes as u64))
        });
        let mut e = CgError::new(format!(
            "the program needs {} of buffers at once ({} of working buffers, {} of outputs), more than this host's {} of memory{what}",
            format(need),
            format(arena_bytes as u64),
            format(outputs),
            format(physical)
        ));
        // At the largest buffer's instruction: its source line, else its name.
        match largest.and_then(|b| b.at.clone()) {
            Some((_, span)) if span != hlo_ir::Span::default() => e.span = Some(span),
            Some((name, _)) => e = e.in_instruction(&name),
            None => {}
        }
        Err(e)
    }

    fn assign(&mut self) -> usize {
        let mut order: Vec<Slot> = (0..self.bufs.len())
            .filter(|&s| self.bufs[s].place.is_none() && self.bufs[s].alias.is_none())
            .collect();
        order.sort_by_key(|&s| (self.bufs[s].def, s));
        let mut live: Vec<(usize, usize, usize)> = Vec::new(); // (offset, end, last)
        let mut top = 0usize;
        for s in order {
            let (def, last, bytes) =
                (self.bufs[s].def, self.bufs[s].last, self.bufs[s].bytes.div_ceil(64) * 64);
            live.retain(|&(_, _, l)| l >= def);
            live.sort_unstable();
            let mut off = 0usize;
            for &(o, e, _) in &live {
                if off + bytes <= o {
                    break;
                }
                off = off.max(e);
            }
            live.push((off, off + bytes, last));
            top = top.max(off + bytes);
            self.bufs[s].place = Some(Place::Arena(off));
        }
        top
    }
}

/// Elements of the arrays in `s` (a kernel's work).
fn elements(s: &Shape) -> u64 {
    flat_arrays(s)
        .iter()
        .map(|a| static_dims(a).map_or(0, |d| d.iter().product::<i64>() as u64))
        .sum()
}
