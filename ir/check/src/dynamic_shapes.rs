//! Data-dependent-shape rejection: finds where dynamism (`<=N` / `?` dimensions,
//! `set-dimension-size`, `dynamic-reshape`, dynamic custom-calls, `shape_assertion`)
//! enters a module and reports each origin once, with the instructions it flows into and a
//! remedy (`../shared/design/passes.md` §a.3).
//!
//! **Origins.** One error each:
//! - `set-dimension-size` and `dynamic-reshape`, always (even when their operand is already
//!   dynamic, or their size is itself a run-time size: each is an op the program must lose);
//! - any instruction with a dynamic dimension (`<=N` or `?`, in an array or any tuple leaf)
//!   none of whose inputs has one: an entry parameter (or a parameter of a computation that
//!   nothing calls with its arguments, e.g. dead code), a custom-call returning a dynamic
//!   shape (`SliceToDynamic`, vendor targets), or any other op declaring one;
//! - the custom-calls `shape_assertion`, `SetBound`, `PadToStatic` and `SliceToDynamic`
//!   when nothing dynamic flows into them; when something does (jax.export's
//!   `shape_assertion(compare(get-dimension-size(x), ...))` on a `?` parameter), they are
//!   part of that origin's flow and are pointed at in its diagnostic.
//!
//! **Flow.** The inputs of a value are its operands, the root of the computation it calls
//! (`call`, `fusion`, `while` body, `conditional` branches, `async-start`), and, for a
//! parameter of a called computation, the argument at every call site (`while`: the initial
//! state and the body's result). A value *carries* an origin's dynamism when its own shape is
//! dynamic and one of its inputs carries it (a `get-tuple-element` that picks a static leaf
//! does not). Reading a carried dynamic dimension's size — `get-dimension-size` of that
//! dimension, `PadToStatic`, an assertion — yields a run-time *size* value, which taints
//! everything computed from it. The origin's flow is every instruction that reads a carrier
//! or a size value, including the first static consumers (a `reduce` over the dynamic
//! dimension), where the dynamism stops. A flow stops at another origin (listed, not
//! followed); a called computation's parameter is not listed (its call is). Flows are
//! listed in text order, the origin's own computation first. An instruction of a flow is
//! reported only if it is an origin itself (a `set-dimension-size` of an already dynamic
//! value): one diagnostic per origin, not one per use. In particular `get-dimension-size` of
//! a dynamic dimension is not an error of its own: it is pointed at in the diagnostic of the
//! origin whose size it reads (removing that origin removes it).
//!
//! **Accepted** (no diagnostic): data-dependent *values* with static shapes — `while` with a
//! data-dependent trip count, `dynamic-slice`/`dynamic-update-slice`/`gather`/`scatter`
//! with run-time indices, `nonzero(size=n)`-style padding with masks, and
//! `get-dimension-size` of a static dimension (a constant).
//!
//! **Diagnostics.** The primary span is the origin's name, labelled with its source location
//! from `metadata` (`source_file`/`source_line`, else the innermost frame of
//! `stack_frame_id` in the module's stack-frame tables, plus `op_name`). Notes point at: the
//! producer chain of the size operands of `set-dimension-size`/`dynamic-reshape` ("the size
//! comes from ..."), their operand when it is already dynamic, up to two
//! `get-dimension-size` reads and two assertion/plumbing consumers, and the first
//! instruction of the flow without a note of its own, labelled with the flow (the first six,
//! then "and N more"). A `help` gives the remedy for the kind of origin (pad to the bound
//! and pass a mask; refine jax.export shapes or bucket; static `size=` for
//! `jnp.nonzero`-style ops; static reshape sizes). The pass assumes a verified module and
//! never panics.

use std::collections::VecDeque;

use hlo_ir::op::Branches;
use hlo_ir::{
    CompId, Diagnostic, Diagnostics, Dim, Instr, Module, NodeIndex, Op, Opcode, Shape, Span,
};

/// Custom-call targets of XLA's dynamic-shape machinery.
const PLUMBING: &[&str] = &["SetBound", "PadToStatic", "SliceToDynamic"];
/// jax.export's shape-polymorphism checks.
const ASSERTION: &str = "shape_assertion";
/// How many flow entries a diagnostic names before "and N more".
const FLOW_SHOWN: usize = 6;
/// How many `get-dimension-size` / assertion consumers get their own note.
const SPECIAL_NOTES: usize = 2;

/// One error per origin of dynamism; empty when every shape is static.
pub fn check_module(m: &Module) -> Diagnostics {
    // Fast path: the flow graph is only needed when something can be an origin.
    let suspicious = m.comps().iter().flat_map(|c| c.graph().node_weights()).any(|i| {
        is_dynamic(&i.shape)
            || is_special_call(i)
            || matches!(kind_of(i), Kind::SetSize | Kind::DynReshape)
    });
    if !suspicious {
        return Diagnostics::new();
    }
    let g = FlowGraph::new(m);
    let origins = g.origins();
    let mut diags = Diagnostics::new();
    let mut marks = Marks::new(g.len());
    for &o in &origins.list {
        let flow = g.walk(o, &origins.is_origin, &mut marks);
        diags.push(g.diagnose(o, &flow));
        marks.reset();
    }
    diags
}

/// A value: one instruction of one computation, as a flat index.
type V = usize;

/// The module's values and the edges along which dynamism flows.
struct FlowGraph<'m> {
    m: &'m Module,
    /// First flat index of each computation.
    base: Vec<usize>,
    /// The instruction behind each flat index (`None` for holes of the stable graphs).
    at: Vec<Option<(CompId, NodeIndex)>>,
    /// Inputs of each value (see the module doc), deduplicated.
    preds: Vec<Vec<V>>,
    /// Users of each value, ordered by `seq` (text order).
    succs: Vec<Vec<V>>,
}

/// The origins, in text order, and a membership table.
struct Origins {
    list: Vec<V>,
    is_origin: Vec<bool>,
}

/// Per-value flags of a walk; `touched` lets [`Marks::reset`] clear only what was set.
struct Marks {
    /// The value's dynamic shape comes from the walked origin(s).
    dynamic: Vec<bool>,
    /// The value is computed from a run-time size of the walked origin(s).
    size: Vec<bool>,
    /// The value reads a dynamic or size value (it is in the flow).
    consumer: Vec<bool>,
    touched: Vec<V>,
}

impl Marks {
    fn new(n: usize) -> Marks {
        Marks {
            dynamic: vec![false; n],
            size: vec![false; n],
            consumer: vec![false; n],
            touched: Vec::new(),
        }
    }
    fn reset(&mut self) {
        for v in self.touched.drain(..) {
            self.dynamic[v] = false;
            self.size[v] = false;
            self.consumer[v] = false;
        }
    }
}

/// What introduces the dynamism.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    SetSize,
    DynReshape,
    Assertion,
    Plumbing,
    CustomCall,
    /// A parameter or any other instruction declaring a dynamic shape.
    Declared,
}

fn is_dynamic(s: &Shape) -> bool {
    let mut d = false;
    s.for_each_array(&mut |a| d |= !a.is_static());
    d
}

fn custom_call_target(i: &Instr) -> Option<&str> {
    match &i.op {
        Op::CustomCall(c) => Some(c.target.as_str()),
        _ => None,
    }
}

/// `shape_assertion` or XLA dynamic-shape plumbing.
fn is_special_call(i: &Instr) -> bool {
    custom_call_target(i).is_some_and(|t| t == ASSERTION || PLUMBING.contains(&t))
}

fn kind_of(i: &Instr) -> Kind {
    match &i.op {
        Op::SetDimensionSize { .. } => Kind::SetSize,
        Op::Plain(Opcode::DynamicReshape) => Kind::DynReshape,
        Op::CustomCall(c) if c.target == ASSERTION => Kind::Assertion,
        Op::CustomCall(c) if PLUMBING.contains(&c.target.as_str()) => Kind::Plumbing,
        Op::CustomCall(_) => Kind::CustomCall,
        _ => Kind::Declared,
    }
}

/// Whether `get-dimension-size` instruction `i` reads a dynamic dimension of `operand`.
fn reads_dynamic_dim(i: &Instr, operand: &Shape) -> bool {
    match (&i.op, operand) {
        (Op::GetDimensionSize { dimension }, Shape::Array(a)) => usize::try_from(*dimension)
            .ok()
            .and_then(|d| a.dims.get(d))
            .is_some_and(|d| !d.is_static()),
        _ => false,
    }
}

impl<'m> FlowGraph<'m> {
    fn new(m: &'m Module) -> FlowGraph<'m> {
        let mut base = Vec::with_capacity(m.comps().len());
        let mut total = 0;
        for c in m.comps() {
            base.push(total);
            total += c.graph().node_indices().map(|n| n.index() + 1).max().unwrap_or(0);
        }
        let mut at = vec![None; total];
        for id in m.comp_ids() {
            for n in m.comp(id).graph().node_indices() {
                at[base[id.index()] + n.index()] = Some((id, n));
            }
        }
        let mut g = FlowGraph {
            m,
            base,
            at,
            preds: vec![Vec::new(); total],
            succs: vec![Vec::new(); total],
        };
        g.build_edges();
        g
    }

    fn len(&self) -> usize {
        self.at.len()
    }

    fn idx(&self, c: CompId, n: NodeIndex) -> V {
        self.base[c.index()] + n.index()
    }

    fn instr(&self, v: V) -> &'m Instr {
        let (c, n) = self.at[v].expect("flat index of a live node");
        self.m.comp(c).instr(n)
    }

    fn callee_ok(&self, c: CompId) -> bool {
        c.index() < self.m.comps().len()
    }

    fn root(&self, c: CompId) -> Option<V> {
        let comp = self.m.comp(c);
        comp.root().filter(|r| comp.graph().contains_node(*r)).map(|r| self.idx(c, r))
    }

    fn param(&self, c: CompId, k: usize) -> Option<V> {
        self.m.comp(c).params().get(k).map(|&p| self.idx(c, p))
    }

    fn build_edges(&mut self) {
        let m = self.m;
        for id in m.comp_ids() {
            let comp = m.comp(id);
            for n in comp.graph().node_indices() {
                let v = self.idx(id, n);
                let ops: Vec<V> = comp.operands(n).into_iter().map(|o| self.idx(id, o)).collect();
                self.preds[v].extend(&ops);
                let pass_args = |g: &mut Self, callee: CompId, args: &[V]| {
                    for (k, &a) in args.iter().enumerate() {
                        if let Some(p) = g.param(callee, k) {
                            g.preds[p].push(a);
                        }
                    }
                };
                match &comp.instr(n).op {
                    Op::Call { to_apply: callee, .. }
                    | Op::Fusion { calls: callee, .. }
                    | Op::Async { opcode: Opcode::AsyncStart, calls: Some(callee), .. }
                        if self.callee_ok(*callee) =>
                    {
                        if let Some(r) = self.root(*callee) {
                            self.preds[v].push(r);
                        }
                        pass_args(self, *callee, &ops);
                    }
                    Op::While { condition, body }
                        if self.callee_ok(*condition) && self.callee_ok(*body) =>
                    {
                        let body_root = self.root(*body);
                        if let Some(r) = body_root {
                            self.preds[v].push(r);
                        }
                        let mut state: Vec<V> = ops.first().copied().into_iter().collect();
                        state.extend(body_root);
                        for c in [*condition, *body] {
                            if let Some(p) = self.param(c, 0) {
                                self.preds[p].extend(&state);
                            }
                        }
                    }
                    Op::Conditional(b) => {
                        let branches: Vec<CompId> = match b {
                            Branches::TrueFalse(t, f) => vec![*t, *f],
                            Branches::Indexed(b) => b.clone(),
                        };
                        for (k, &br) in branches.iter().enumerate() {
                            if !self.callee_ok(br) {
                                continue;
                            }
                            if let Some(r) = self.root(br) {
                                self.preds[v].push(r);
                            }
                            if let Some(&arg) = ops.get(k + 1) {
                                pass_args(self, br, &[arg]);
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
        for v in 0..self.len() {
            let mut p = std::mem::take(&mut self.preds[v]);
            p.sort_unstable();
            p.dedup();
            for &u in &p {
                self.succs[u].push(v);
            }
            self.preds[v] = p;
        }
        for v in 0..self.len() {
            let mut s = std::mem::take(&mut self.succs[v]);
            s.sort_unstable_by_key(|&u| (self.instr(u).seq, u));
            s.dedup();
            self.succs[v] = s;
        }
    }

    /// Values in a deterministic order: callees first, definitions before uses.
    fn ordered(&self) -> Vec<V> {
        let mut out = Vec::with_capacity(self.len());
        for id in self.m.post_order() {
            out.extend(self.m.comp(id).post_order().into_iter().map(|n| self.idx(id, n)));
        }
        out
    }

    /// Finds the origins: first those that are origins by construction (explicit dynamic
    /// ops, dynamic values without dynamic inputs); then, scanning in order, dynamic values
    /// no origin reaches (only possible on degenerate loops) and assertions/plumbing nothing
    /// dynamic flows into.
    fn origins(&self) -> Origins {
        let order = self.ordered();
        let mut is_origin = vec![false; self.len()];
        let mut list = Vec::new();
        for &v in &order {
            let i = self.instr(v);
            let explicit = matches!(kind_of(i), Kind::SetSize | Kind::DynReshape);
            if explicit
                || (is_dynamic(&i.shape)
                    && self.preds[v].iter().all(|&p| !is_dynamic(&self.instr(p).shape)))
            {
                is_origin[v] = true;
                list.push(v);
            }
        }
        let mut marks = Marks::new(self.len());
        for &o in &list {
            self.walk(o, &is_origin, &mut marks);
        }
        for &v in &order {
            if is_origin[v] {
                continue;
            }
            let i = self.instr(v);
            if (is_dynamic(&i.shape) && !marks.dynamic[v])
                || (is_special_call(i) && !marks.consumer[v])
            {
                is_origin[v] = true;
                list.push(v);
                self.walk(v, &is_origin, &mut marks);
            }
        }
        list.sort_by_key(|&v| (self.instr(v).span.start, self.instr(v).seq));
        Origins { list, is_origin }
    }

    /// Follows the dynamism of origin `from` (in addition to whatever `marks` already
    /// holds) and returns the values newly found to read it: those of the origin's
    /// computation first, each group in text order.
    fn walk(&self, from: V, is_origin: &[bool], marks: &mut Marks) -> Vec<V> {
        let mut flow: Vec<V> = Vec::new();
        let mut queue = VecDeque::new();
        let start = self.instr(from);
        if is_dynamic(&start.shape) {
            marks.dynamic[from] = true;
        } else {
            marks.size[from] = true;
        }
        marks.touched.push(from);
        queue.push_back(from);
        while let Some(v) = queue.pop_front() {
            let (dynamic, size) = (marks.dynamic[v], marks.size[v]);
            let v_shape = &self.instr(v).shape;
            for &u in &self.succs[v] {
                if u == from {
                    continue;
                }
                let i = self.instr(u);
                // A static leaf of a dynamic tuple, or the static dimension of a dynamic array,
                // does not read the dynamism.
                let ignores = match &i.op {
                    Op::GetTupleElement { .. } => !is_dynamic(&i.shape),
                    Op::GetDimensionSize { .. } => !reads_dynamic_dim(i, v_shape),
                    _ => false,
                };
                if (size || (dynamic && !ignores)) && !marks.consumer[u] {
                    marks.consumer[u] = true;
                    marks.touched.push(u);
                    // A callee's parameter is the call's argument seen from inside: the
                    // call is listed, the parameter is not.
                    if !matches!(i.op, Op::Parameter { .. }) {
                        flow.push(u);
                    }
                }
                if is_origin[u] {
                    continue;
                }
                let mut grew = false;
                if dynamic && is_dynamic(&i.shape) && !marks.dynamic[u] {
                    marks.dynamic[u] = true;
                    grew = true;
                }
                // Reading a dynamic dimension's size (`get-dimension-size`, `PadToStatic`'s size
                // outputs, an assertion's status) yields a run-time size value.
                let reads_size = dynamic && (reads_dynamic_dim(i, v_shape) || is_special_call(i));
                if (size || reads_size) && !marks.size[u] {
                    marks.size[u] = true;
                    grew = true;
                }
                if grew {
                    marks.touched.push(u);
                    queue.push_back(u);
                }
            }
        }
        // The origin's own computation first, then text order (`seq`).
        let home = self.at[from].map(|(c, _)| c);
        flow.sort_by_key(|&v| (self.at[v].map(|(c, _)| c) != home, self.instr(v).seq));
        flow
    }

    /// `` `y` (sine) ``, `` ROOT `t` (tuple) ``, `` `sin.1` (sine, in `f`) ``.
    fn describe(&self, v: V, home: CompId) -> String {
        let (c, n) = self.at[v].expect("live node");
        let comp = self.m.comp(c);
        let i = &comp.instr(n);
        let root = if comp.root() == Some(n) { "ROOT " } else { "" };
        let what = match &i.op {
            Op::Parameter { number, .. } => format!("parameter {number}"),
            Op::CustomCall(cc) => format!("custom-call `{}`", cc.target),
            op => op.opcode().name().to_string(),
        };
        if c == home {
            format!("{root}`{}` ({what})", i.name)
        } else {
            format!("{root}`{}` ({what}, in `{}`)", i.name, comp.name)
        }
    }

    /// Where the user wrote what produced `i`: `file:line` from `source_file`/`source_line`,
    /// else the innermost frame of `stack_frame_id`.
    fn place_of(&self, i: &Instr) -> Option<String> {
        let md = i.metadata.as_deref()?;
        match (md.source_file().filter(|f| !f.is_empty()), md.source_line()) {
            (Some(f), Some(l)) => Some(match md.get_int("source_column") {
                Some(c) if c > 0 => format!("{f}:{l}:{c}"),
                _ => format!("{f}:{l}"),
            }),
            (Some(f), None) => Some(f.to_string()),
            _ => {
                md.stack_frame_id().and_then(|id| self.m.frames.as_ref()?.location(id)).map(|loc| {
                    let mut s = format!("{}:{}", loc.file, loc.line);
                    if loc.column > 0 {
                        s.push_str(&format!(":{}", loc.column));
                    }
                    if !loc.function.is_empty() {
                        s.push_str(&format!(" in `{}`", loc.function));
                    }
                    s
                })
            }
        }
    }

    /// `, at file:line (`op_name`)`, `, at file:line`, ` (`op_name`)` or nothing.
    fn source_suffix(&self, i: &Instr) -> String {
        let op = i.metadata.as_deref().and_then(|md| md.op_name()).filter(|o| !o.is_empty());
        match (self.place_of(i), op) {
            (Some(p), Some(op)) => format!(", at {p} (`{op}`)"),
            (Some(p), None) => format!(", at {p}"),
            (None, Some(op)) => format!(" (`{op}`)"),
            (None, None) => String::new(),
        }
    }

    /// Where a run-time size operand comes from: `parameter `n``, or the chain of its
    /// producers (`` `c` (convert) <- `s` (reduce) <- parameter `mask` ``).
    fn size_source(&self, v: V) -> String {
        let mut parts = Vec::new();
        let mut cur = v;
        for _ in 0..4 {
            let (c, n) = self.at[cur].expect("live node");
            let comp = self.m.comp(c);
            let i = &comp.instr(n);
            match &i.op {
                Op::Parameter { number, .. } => {
                    if c == self.m.entry {
                        parts.push(format!("parameter `{}`", i.name));
                        return parts.join(" <- ");
                    }
                    parts.push(format!("parameter {number} (`{}`) of `{}`", i.name, comp.name));
                    // Called from one place: follow the argument into the caller.
                    match self.preds[cur].as_slice() {
                        [arg] => {
                            cur = *arg;
                            continue;
                        }
                        _ => return parts.join(" <- "),
                    }
                }
                Op::Constant(_) => {
                    parts.push(format!("constant `{}`", i.name));
                    return parts.join(" <- ");
                }
                Op::GetDimensionSize { dimension } => {
                    let of = comp
                        .operands(n)
                        .first()
                        .map(|&o| comp.instr(o).name.clone())
                        .unwrap_or_default();
                    parts.push(format!(
                        "`{}` (the run-time size of dimension {dimension} of `{of}`)",
                        i.name
                    ));
                    return parts.join(" <- ");
                }
                op => {
                    // Where the first computed step was written is where to look in the program.
                    let at = if parts.is_empty() {
                        self.place_of(i).map(|p| format!(" at {p}")).unwrap_or_default()
                    } else {
                        String::new()
                    };
                    parts.push(format!("`{}` ({}{at})", i.name, op.opcode().name()));
                }
            }
            // Follow the first operand that is not a constant.
            let ops = comp.operands(n);
            let next = ops
                .iter()
                .copied()
                .find(|&o| !matches!(comp.instr(o).op, Op::Constant(_)))
                .or(ops.first().copied());
            match next {
                Some(o) => cur = self.idx(c, o),
                None => return parts.join(" <- "),
            }
        }
        parts.push("...".into());
        parts.join(" <- ")
    }

    fn diagnose(&self, o: V, flow: &[V]) -> Diagnostic {
        let (home, n) = self.at[o].expect("live node");
        let comp = self.m.comp(home);
        let i = &comp.instr(n);
        let kind = kind_of(i);
        let dims = DynDims::of(&i.shape);
        let shape = show(&i.shape);
        let target = custom_call_target(i).unwrap_or("");
        let comp_ops = comp.operands(n);
        let const_sizes =
            comp_ops.iter().skip(1).all(|&s| matches!(comp.instr(s).op, Op::Constant(_)));
        let who = match &i.op {
            Op::Parameter { .. } if home == self.m.entry => format!("parameter `{}`", i.name),
            Op::Parameter { .. } => format!("parameter `{}` of `{}`", i.name, comp.name),
            op => format!("`{}` ({})", i.name, op.opcode().name()),
        };
        let message = match kind {
            Kind::SetSize => format!(
                "`{}` (set-dimension-size) sets the size of {} at run time, giving {shape}",
                i.name,
                dims.text()
            ),
            Kind::DynReshape if const_sizes => {
                format!(
                    "`{}` (dynamic-reshape) takes its output sizes from operands; static compilation needs a plain reshape",
                    i.name
                )
            }
            Kind::DynReshape => format!(
                "`{}` (dynamic-reshape) takes its output sizes from run-time values, giving {shape}",
                i.name
            ),
            Kind::Assertion => format!(
                "`{}` is a jax.export shape assertion (custom-call `{ASSERTION}`), not supported by static compilation",
                i.name
            ),
            Kind::Plumbing if dims.is_empty() => format!(
                "`{}` is XLA dynamic-shape plumbing (custom-call `{target}`), not supported by static compilation",
                i.name
            ),
            Kind::Plumbing | Kind::CustomCall => {
                format!(
                    "`{}` (custom-call `{target}`) returns the dynamic shape {shape}: {} {} sized at run time",
                    i.name,
                    dims.text(),
                    dims.verb()
                )
            }
            Kind::Declared => format!(
                "{who} has the dynamic shape {shape}: {} {} sized at run time",
                dims.text(),
                dims.verb()
            ),
        };
        let here = match kind {
            Kind::Assertion => "shape assertion here",
            Kind::Plumbing if dims.is_empty() => "dynamic-shape plumbing here",
            Kind::Declared if matches!(i.op, Op::Parameter { .. }) => {
                "dynamic parameter declared here"
            }
            Kind::DynReshape if dims.is_empty() => "dynamic-reshape here",
            _ => "dynamic shape introduced here",
        };
        let mut d = Diagnostic::error(i.span, message)
            .with_label(format!("{here}{}", self.source_suffix(i)));
        let mut notes: Vec<(Span, String)> = Vec::new();
        let origin_span = i.span;
        let note = |notes: &mut Vec<(Span, String)>, span: Span, text: String| {
            if span != Span::default()
                && span != origin_span
                && !notes.iter().any(|(s, _)| *s == span)
            {
                notes.push((span, text));
            }
        };

        // What the explicit ops read: the operand (if already dynamic) and the sizes.
        if matches!(kind, Kind::SetSize | Kind::DynReshape) {
            if let Some(&x) = comp_ops.first()
                && is_dynamic(&comp.instr(x).shape)
            {
                note(
                    &mut notes,
                    comp.instr(x).span,
                    format!("`{}` is already dynamic (reported separately)", comp.instr(x).name),
                );
            }
            let sizes: Vec<NodeIndex> = comp_ops.iter().skip(1).copied().collect();
            if let Some(&first) =
                sizes.iter().find(|&&s| !matches!(comp.instr(s).op, Op::Constant(_)))
            {
                let srcs: Vec<String> =
                    sizes.iter().map(|&s| self.size_source(self.idx(home, s))).collect();
                let text = if kind == Kind::SetSize {
                    format!("the size comes from {}", join_and(&srcs))
                } else {
                    format!("the output sizes come from {}", join_and(&srcs))
                };
                note(&mut notes, comp.instr(first).span, text);
            }
        }

        // Consumers worth pointing at: reads of the run-time size, assertions, plumbing.
        let mut special = Vec::new();
        let mut reads = 0;
        let mut calls = 0;
        let mut asserted = false;
        for &v in flow {
            let u = self.instr(v);
            if matches!(u.op, Op::GetDimensionSize { .. }) && reads < SPECIAL_NOTES {
                let (c, un) = self.at[v].expect("live node");
                let cc = self.m.comp(c);
                if cc
                    .operands(un)
                    .first()
                    .is_some_and(|&x| reads_dynamic_dim(u, &cc.instr(x).shape))
                {
                    reads += 1;
                    special.push(v);
                    note(
                        &mut notes,
                        u.span,
                        format!("`{}` reads the run-time size (get-dimension-size)", u.name),
                    );
                }
            } else if is_special_call(u) && calls < SPECIAL_NOTES {
                calls += 1;
                special.push(v);
                let t = custom_call_target(u).unwrap_or("");
                if t == ASSERTION {
                    asserted = true;
                    note(
                        &mut notes,
                        u.span,
                        format!(
                            "`{}` checks the run-time size (a jax.export shape assertion, custom-call `{t}`)",
                            u.name
                        ),
                    );
                } else {
                    note(
                        &mut notes,
                        u.span,
                        format!("`{}` is XLA dynamic-shape plumbing (custom-call `{t}`)", u.name),
                    );
                }
            }
        }

        // The flow, on the first instruction it reaches that has no note of its own
        // (preferably in the origin's computation).
        if !flow.is_empty() {
            let names: Vec<String> =
                flow.iter().take(FLOW_SHOWN).map(|&v| self.describe(v, home)).collect();
            let names = if flow.len() > FLOW_SHOWN {
                format!("{} and {} more", names.join(", "), flow.len() - FLOW_SHOWN)
            } else {
                join_and(&names)
            };
            let what = if dims.is_empty() { "its result" } else { "the dynamic shape" };
            let free = |v: &V| !special.contains(v) && self.instr(*v).span != Span::default();
            let anchor = flow
                .iter()
                .find(|&v| free(v) && self.at[*v].is_some_and(|(c, _)| c == home))
                .or_else(|| flow.iter().find(|&v| free(v)))
                .or(flow.first());
            if let Some(&a) = anchor {
                let text = format!("{what} flows into {names}");
                let span = self.instr(a).span;
                match notes.iter_mut().find(|(s, _)| *s == span) {
                    Some((_, t)) => *t = format!("{t}; {text}"),
                    None => note(&mut notes, span, text),
                }
            }
        }

        for (span, text) in notes {
            d = d.with_note(span, text);
        }
        d = d.with_help(self.remedy(o, kind, &dims));
        if asserted && kind != Kind::Assertion {
            d = d.with_help("the `shape_assertion` calls check jax.export's symbolic dimensions and go away once the shapes are concrete");
        }
        d
    }

    fn remedy(&self, o: V, kind: Kind, dims: &DynDims) -> String {
        let i = self.instr(o);
        const REFINE: &str = "refine the polymorphic shape (jax.export shape polymorphism) to concrete sizes before compiling, or bucket the batch size (compile one static shape per bucket)";
        let padded = static_bound(&i.shape).map(|s| show(&s));
        match kind {
            Kind::SetSize => {
                let bound = padded.map_or_else(String::new, |s| format!(" ({s})"));
                format!(
                    "pad to the static bound{bound} and carry a mask instead of setting the dimension size; for jnp.nonzero/unique/argwhere pass a static `size=` (and `fill_value=`)"
                )
            }
            Kind::DynReshape => {
                let (c, n) = self.at[o].expect("live node");
                let comp = self.m.comp(c);
                let all_const = comp.operands(n).iter().skip(1).all(|&s| matches!(comp.instr(s).op, Op::Constant(_)));
                match padded {
                    Some(s) if all_const => format!("its sizes are constants: use a static `reshape` to {s}"),
                    Some(s) => format!("pass static sizes: reshape to the static bound {s} and carry the valid sizes as a mask or valid-length argument"),
                    None => format!("pass static sizes (a plain `reshape`); {REFINE}"),
                }
            }
            Kind::Assertion => "shape assertions come from jax.export shape polymorphism: refine the symbolic shapes to concrete sizes (export or call with concrete input shapes) before compiling".to_string(),
            Kind::Plumbing => {
                "this is inserted by XLA's dynamic padder or by bounded dynamism in the exporter: compile the original program with static shapes (pad to the bound and pass a mask or valid-length argument)".to_string()
            }
            Kind::CustomCall => {
                let t = custom_call_target(i).unwrap_or("");
                match padded {
                    Some(s) => format!("make `{t}` return the static shape {s} (padded to the bound) and the valid length as a separate output"),
                    None => format!("make `{t}` return a static shape; {REFINE}"),
                }
            }
            Kind::Declared if dims.unbounded => REFINE.to_string(),
            Kind::Declared => {
                let s = padded.unwrap_or_default();
                if matches!(i.op, Op::Parameter { .. }) {
                    format!("compile with the static shape {s} (pad the input to the bound) and pass a mask or valid-length argument")
                } else {
                    format!("compile with the static shape {s} (pad to the bound) and pass a mask or valid-length argument")
                }
            }
        }
    }
}

/// The dynamic dimensions of a shape, for messages.
struct DynDims {
    /// `(tuple index path, dimension, dim)`.
    dims: Vec<(Vec<usize>, usize, Dim)>,
    unbounded: bool,
}

impl DynDims {
    fn of(s: &Shape) -> DynDims {
        fn go(s: &Shape, path: &mut Vec<usize>, out: &mut Vec<(Vec<usize>, usize, Dim)>) {
            match s {
                Shape::Array(a) => {
                    for (k, d) in a.dims.iter().enumerate() {
                        if !d.is_static() {
                            out.push((path.clone(), k, *d));
                        }
                    }
                }
                Shape::Tuple(t) => {
                    for (k, e) in t.iter().enumerate() {
                        path.push(k);
                        go(e, path, out);
                        path.pop();
                    }
                }
                Shape::Buffer(b) => go(b, path, out),
                Shape::Token | Shape::Opaque => {}
            }
        }
        let mut dims = Vec::new();
        go(s, &mut Vec::new(), &mut dims);
        let unbounded = dims.iter().any(|d| d.2 == Dim::Unbounded);
        DynDims { dims, unbounded }
    }
    fn is_empty(&self) -> bool {
        self.dims.is_empty()
    }
    fn verb(&self) -> &'static str {
        if self.dims.len() == 1 { "is" } else { "are" }
    }
    /// `dimension 0 (at most 16)`, `dimensions 0 (at most 2) and 1 (unbounded)`,
    /// `dimension 0 of tuple element {1} (at most 4)`.
    fn text(&self) -> String {
        let one = |(path, k, d): &(Vec<usize>, usize, Dim)| {
            let bound = match d {
                Dim::Bounded(n) => format!("at most {n}"),
                _ => "unbounded".to_string(),
            };
            let of = if path.is_empty() {
                String::new()
            } else {
                format!(
                    " of tuple element {{{}}}",
                    path.iter().map(|p| p.to_string()).collect::<Vec<_>>().join(",")
                )
            };
            format!("{k}{of} ({bound})")
        };
        let mut parts: Vec<String> = self.dims.iter().take(4).map(one).collect();
        if self.dims.len() > 4 {
            parts.push(format!("{} more", self.dims.len() - 4));
        }
        let noun = if self.dims.len() == 1 { "dimension" } else { "dimensions" };
        format!("{noun} {}", join_and(&parts))
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(parts: &[String]) -> String {
    match parts {
        [] => String::new(),
        [a] => a.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The shape with every `<=N` replaced by `N`; `None` if some dimension is unbounded.
fn static_bound(s: &Shape) -> Option<Shape> {
    Some(match s {
        Shape::Array(a) => {
            let mut a = a.clone();
            for d in &mut a.dims {
                *d = Dim::Static(d.bound()?);
            }
            Shape::Array(a)
        }
        Shape::Tuple(t) => Shape::Tuple(t.iter().map(static_bound).collect::<Option<_>>()?),
        Shape::Buffer(b) => Shape::Buffer(Box::new(static_bound(b)?)),
        other => other.clone(),
    })
}

/// A shape without layouts.
fn show(s: &Shape) -> String {
    let mut out = String::new();
    s.write(&mut out, false);
    out
}

#[cfg(test)]
mod tests {
    use super::check_module;

    /// This check alone, on a module parsed and structurally verified but not checked
    /// (`crate::parse` would reject the modules it is about).
    fn check(src: &str) -> hlo_ir::Diagnostics {
        let (m, mut diags) = hlo_ir::text::parse(src);
        if let Some(m) = &m {
            diags.extend(hlo_ir::verify::verify_source(m, src));
        }
        match m {
            Some(m) if !diags.has_errors() => check_module(&m),
            _ => panic!("{}", diags.render(src, "t.hlo", false)),
        }
    }

    fn corpus_dir() -> std::path::PathBuf {
        std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared/corpus"))
    }

    /// Every corpus module is accepted except the two that carry dynamic shapes, which get
    /// one error per origin: `dyn_bounded_hlo` has two set-dimension-size, and
    /// `dyn_unbounded_export` one `?` parameter (its get-dimension-size, shape_assertion and
    /// call are flow).
    #[test]
    fn corpus_verdicts() {
        let dir = corpus_dir();
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()));
        let mut seen = 0;
        for e in entries.flatten() {
            let path = e.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("").to_string();
            if !name.ends_with(".hlo") {
                continue;
            }
            let src = std::fs::read_to_string(&path).expect("corpus file is UTF-8");
            let diags = check(&src);
            let want = match name.as_str() {
                "dyn_bounded_hlo.hlo" => 2,
                "dyn_unbounded_export.hlo" => 1,
                _ => 0,
            };
            assert_eq!(diags.len(), want, "{name}:\n{}", diags.render(&src, &name, false));
            seen += 1;
        }
        assert!(seen > 100, "only {seen} corpus modules found");
    }

    #[test]
    fn dyn_bounded_flow_names_consumers_and_size() {
        let src =
            std::fs::read_to_string(corpus_dir().join("dyn_bounded_hlo.hlo")).expect("corpus file");
        let text = check(&src).render(&src, "d.hlo", false);
        assert!(text.contains("the size comes from parameter `n`"), "{text}");
        assert!(text.contains("flows into `y` (sine), `total` (reduce), `size` (get-dimension-size) and ROOT `t` (tuple)"), "{text}");
        assert!(text.contains("`size` reads the run-time size"), "{text}");
        assert!(text.contains("flows into `colsum` (reduce)"), "{text}");
    }

    /// Many uses, three origins: three diagnostics.
    #[test]
    fn one_diagnostic_per_origin() {
        let src = "HloModule m\n\n\
            add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n\
            ENTRY main {\n\
              p = f32[<=8]{0} parameter(0)\n\
              q = f32[8]{0} parameter(1)\n\
              n = s32[] parameter(2)\n\
              a = f32[<=8]{0} sine(p)\n\
              b = f32[<=8]{0} cosine(a)\n\
              c = f32[<=8]{0} add(a, b)\n\
              z = f32[] constant(0)\n\
              r = f32[] reduce(c, z), dimensions={0}, to_apply=add\n\
              d = f32[<=8]{0} set-dimension-size(q, n), dimensions={0}\n\
              e = f32[<=8]{0} multiply(d, d)\n\
              f = f32[<=8]{0} dynamic-reshape(q, n)\n\
              g = f32[<=8]{0} add(e, f)\n\
              ROOT t = (f32[], f32[<=8]{0}) tuple(r, g)\n\
            }\n";
        let diags = check(src);
        let names: Vec<&str> =
            diags.iter().map(|d| d.message.split('`').nth(1).unwrap_or("")).collect();
        assert_eq!(names, ["p", "d", "f"], "{}", diags.render(src, "m.hlo", false));
    }

    /// A computation nothing calls still declares its dynamic parameter: an origin.
    #[test]
    fn uncalled_computation_parameter_is_an_origin() {
        let src = "HloModule m\n\n\
            unused {\n  u = f32[<=4]{0} parameter(0)\n  ROOT v = f32[<=4]{0} negate(u)\n}\n\n\
            ENTRY main {\n  ROOT x = f32[4]{0} parameter(0)\n}\n";
        let diags = check(src);
        assert_eq!(diags.len(), 1);
        assert!(
            diags.0[0]
                .message
                .starts_with("parameter `u` of `unused` has the dynamic shape f32[<=4]"),
            "{}",
            diags.0[0].message
        );
    }

    #[test]
    fn static_modules_and_static_get_dimension_size_are_accepted() {
        let src = "HloModule m\n\nENTRY main {\n  x = f32[8,3]{1,0} parameter(0)\n  ROOT s = s32[] get-dimension-size(x), dimensions={1}\n}\n";
        assert!(check(src).is_empty());
    }

    /// Long flows are capped.
    #[test]
    fn flow_is_capped() {
        let mut body =
            String::from("  x = f32[<=4]{0} parameter(0)\n  v0 = f32[<=4]{0} negate(x)\n");
        for k in 1..20 {
            body.push_str(&format!("  v{k} = f32[<=4]{{0}} negate(v{})\n", k - 1));
        }
        body.push_str("  ROOT r = f32[<=4]{0} negate(v19)\n");
        let src = format!("HloModule m\n\nENTRY main {{\n{body}}}\n");
        let diags = check(&src);
        assert_eq!(diags.len(), 1);
        let flow = &diags.0[0].notes.last().expect("flow note").1;
        assert!(flow.ends_with("`v5` (negate) and 15 more"), "{flow}");
    }
}
