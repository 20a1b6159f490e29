//! The structural verifier.
//!
//! [`verify`] checks, and reports with the instruction's location, that:
//!
//! 1. computation names are unique in the module, instruction names in their computation
//!    (XLA's parser scopes names per computation; hand-written modules reuse `p0`);
//! 2. every instruction's operand slots are exactly `0..k` (no holes, no duplicates);
//! 3. every opcode has a legal number of operands ([`crate::Opcode::arity`]);
//! 4. each computation's dataflow graph is acyclic;
//! 5. each computation has a root, and the root belongs to it;
//! 6. parameter numbers are `0..k`, each used once;
//! 7. called computations exist, the entry computation is never called, and the call
//!    graph has no cycles (no recursion);
//! 8. callees fit their callers: `call`/`fusion`/`async-start` take one parameter per
//!    operand with the operand's shape; `while` condition and body take the loop state and
//!    the condition returns `pred[]`, the body the state; each `conditional` branch takes
//!    its operand and returns the result shape; reducers (`reduce`, `reduce-window`,
//!    `scatter`, `all-reduce`, `reduce-scatter`, `select-and-scatter`) take `2N`
//!    parameters, as do `sort` comparators; `map` takes `N`;
//! 9. `get-tuple-element` reads a tuple at an index it has, with the element's shape;
//! 10. a written computation signature returns the root's shape (XLA ignores its
//!     parameter list), and the module's
//!     `entry_computation_layout` has the entry's parameter count and dimensions (XLA uses
//!     only its layouts and tolerates other element types);
//! 11. `control-predecessors` name instructions of the same computation, and control
//!     edges together with operands form no cycle;
//! 12. shardings fit their shapes: a tuple sharding has one entry per tuple leaf, and a
//!     tiled sharding has one tile dimension per array dimension (plus subgroup dims),
//!     each at least 1;
//! 13. collectives' replica groups fit the device count the header states
//!     (`replica_count` x `num_partitions`): ids in range, each once, and all devices
//!     with `use_global_device_ids`. XLA's parser accepts such modules and its verifier
//!     refuses them; here it is the verifier too;
//! 14. `infeed` has a non-empty tuple shape ending in a token, `recv` the shape
//!     `(data, u32[], token[])` (XLA's parser refuses the first and aborts on the second);
//! 15. each computation is wrapped by one `async-start` at most, holding only its
//!     parameters and the wrapped op; the chain start -> updates -> done is well formed
//!     (see `Verifier::async_chain`: shapes, one user per link, the same computation and
//!     execution thread throughout).
//!
//! Layouts are ignored when shapes are compared ("compatible" shapes). Typing rules —
//! each opcode's result shape, reducers over scalars, matching element types — belong to
//! shape inference, a separate pass: XLA's parser accepts modules that break them (its
//! own tests contain such modules), and so does this verifier.

use std::collections::HashMap;

use crate::hash::FnvHashMap;

use petgraph::stable_graph::NodeIndex;
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};

use crate::computation::Computation;
use crate::diag::{Diagnostic, Diagnostics, Span};
use crate::halves::{self, PARALLEL_MIN_INSTRS};
use crate::instr::Instr;
use crate::module::{CompId, Module};
use crate::op::{Branches, Op};
use crate::opcode::Opcode;
use crate::sharding::Sharding;
use crate::types::{ElemType, Shape};

/// Checks the structural invariants listed in the module documentation. Diagnostics
/// point at instruction names; [`verify_source`] points at the offending attribute.
pub fn verify(m: &Module) -> Diagnostics {
    crate::counters::bump("verify");
    let mut v = Verifier::new(m, None);
    v.module();
    v.diags
}

/// [`verify`] for a module parsed from `src`: diagnostics point at the attribute or
/// operand list at fault, found by re-lexing the offending instruction.
pub fn verify_source(m: &Module, src: &str) -> Diagnostics {
    verify_with(m, Some(src), true)
}

/// The verifier, on one thread unless `threads` (tests compare the two).
pub(crate) fn verify_with(m: &Module, src: Option<&str>, threads: bool) -> Diagnostics {
    crate::counters::bump("verify");
    let mut v = Verifier::new(m, src);
    v.threads = threads;
    v.module();
    v.diags
}

struct Verifier<'m> {
    m: &'m Module,
    src: Option<&'m str>,
    diags: Diagnostics,
    /// The async-start that wraps each computation (one each).
    async_users: std::collections::HashMap<CompId, String>,
    /// When verifying on several threads: the async-starts met (computation, node, callee),
    /// checked against `async_users` afterwards in module order instead of on the spot.
    deferred_async: Option<Vec<(CompId, NodeIndex, CompId)>>,
    /// Whether a large module may be verified on two threads.
    threads: bool,
}

impl<'m> Verifier<'m> {
    /// A verifier of `m` (parsed from `src`, if given), free to use two threads.
    fn new(m: &'m Module, src: Option<&'m str>) -> Self {
        Verifier {
            m,
            src,
            diags: Diagnostics::new(),
            async_users: Default::default(),
            deferred_async: None,
            threads: true,
        }
    }
}

/// The part of an instruction a diagnostic is about.
#[derive(Clone, Copy)]
enum Anchor<'a> {
    /// The value of the attribute `name=`.
    Attr(&'a str),
    /// The word `item` inside the value of `name=`.
    AttrItem(&'a str, &'a str),
    /// The parenthesised operand list.
    Operands,
}

/// Where the value of attribute `attr` of `i` is written in `src` (the instruction's name
/// when the text is not at hand or has no such attribute). Passes use it to point
/// diagnostics at an attribute.
pub fn attr_span(src: Option<&str>, i: &Instr, attr: &str) -> Span {
    src.and_then(|src| locate(src, i.extent, Anchor::Attr(attr))).unwrap_or(i.span)
}

/// Finds `anchor` in the text of an instruction (`extent`), by lexing it again.
fn locate(src: &str, extent: Span, anchor: Anchor<'_>) -> Option<Span> {
    use crate::text::lexer::{Tok, lex};
    let text = src.get(extent.range())?;
    let (toks, _) = lex(text);
    let base = extent.start as usize;
    let at = |a: usize, b: usize| Some(Span::new(base + a, base + b));
    // The end of a value: the next `,` at bracket depth zero.
    let value_end = |from: usize| {
        let mut depth = 0i32;
        let mut k = from;
        while k < toks.len() {
            match toks[k].1 {
                Tok::Comma if depth == 0 => break,
                t => depth += t.depth_delta(),
            }
            k += 1;
        }
        k
    };
    match anchor {
        Anchor::Attr(name) | Anchor::AttrItem(name, _) => {
            let k = toks.iter().position(|t| {
                matches!(t.1, Tok::AttrName(n) if n == name) || t.1.text() == format!("{name}=")
            })?;
            let end = value_end(k + 1);
            if end <= k + 1 {
                return at(toks[k].0, toks[k].2);
            }
            if let Anchor::AttrItem(_, item) = anchor
                && let Some(t) = toks[k + 1..end]
                    .iter()
                    .find(|t| matches!(t.1, Tok::Ident(s) | Tok::PctIdent(s) if s == item))
            {
                return at(t.0, t.2);
            }
            at(toks[k + 1].0, toks[end - 1].2)
        }
        Anchor::Operands => {
            // The `(` right after the opcode (a tuple shape's `(` follows `=` instead).
            let k = (1..toks.len()).find(|&k| {
                toks[k].1 == Tok::LParen
                    && matches!(toks[k - 1].1, Tok::Ident(_) | Tok::CompName(_))
            })?;
            let mut depth = 0;
            for t in &toks[k..] {
                depth += t.1.depth_delta();
                if depth == 0 {
                    return at(toks[k].0, t.2);
                }
            }
            None
        }
    }
}

/// Same tuple structure and array dimensions; element types and layouts ignored.
fn same_dims(a: &Shape, b: &Shape) -> bool {
    match (a, b) {
        (Shape::Array(x), Shape::Array(y)) => x.dims == y.dims,
        (Shape::Tuple(x), Shape::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_dims(p, q))
        }
        _ => a.compatible(b),
    }
}

fn is_pred_scalar(s: &Shape) -> bool {
    s.as_array().is_some_and(|a| a.dims.is_empty() && a.elem == ElemType::Pred)
}

impl<'m> Verifier<'m> {
    fn err(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    /// Where to point for `anchor` of `i`: the precise place when the source is known,
    /// the instruction's name otherwise.
    fn at(&self, i: &Instr, anchor: Anchor<'_>) -> Span {
        self.src.and_then(|src| locate(src, i.extent, anchor)).unwrap_or(i.span)
    }

    fn module(&mut self) {
        let m = self.m;
        if m.entry.index() >= m.comps().len() {
            self.err(Diagnostic::error(None, "module has no entry computation"));
            return;
        }
        let mut comp_names: HashMap<&str, CompId> = HashMap::new();
        for id in m.comp_ids() {
            let c = m.comp(id);
            if let Some(prev) = comp_names.insert(&c.name, id) {
                self.err(
                    Diagnostic::error(c.span, format!("duplicate computation name `{}`", c.name))
                        .with_note(m.comp(prev).span, "first defined here"),
                );
            }
        }
        let total: usize = m.comp_ids().map(|id| m.comp(id).graph().node_count()).sum();
        if self.threads && total >= PARALLEL_MIN_INSTRS {
            self.computations_in_parallel();
        } else {
            for id in m.comp_ids() {
                self.computation(id);
                for n in m.comp(id).graph().node_indices() {
                    self.instr(id, n);
                }
            }
        }
        self.call_graph();
        self.entry_layout();
    }

    /// Verifies a large module's computations on two threads: the instructions of the
    /// whole module cut in the middle, and the per-computation checks (root, parameters,
    /// cycles, signature) cut between computations where half the nodes lie before (the
    /// cuts of [`halves`]). Each thread has
    /// a verifier of its own; the one-wrapper-per-computation rule for async-starts is then
    /// checked here in module order. The diagnostics are those of the one-thread order,
    /// sorted by position.
    fn computations_in_parallel(&mut self) {
        let m = self.m;
        let ids: Vec<CompId> = m.comp_ids().collect();
        let sizes: Vec<usize> = ids.iter().map(|&id| m.comp(id).graph().node_count()).collect();
        let cut = halves::group_cut(&sizes);
        // The per-computation checks cost about as much per node as the per-instruction
        // ones (measured on the largest external modules), so the halves balance when the
        // first checks as many instructions as the second half's computations hold.
        let before: usize = sizes[..cut].iter().sum();
        let (g, off) = halves::position(&sizes, sizes.iter().sum::<usize>() - before);
        let src = self.src;
        // Half `h` (0 or 1): its computations' checks and its instructions.
        let run = |h: usize| {
            let mut w = Verifier::new(m, src);
            (w.threads, w.deferred_async) = (false, Some(Vec::new()));
            let comps = if h == 0 { &ids[..cut] } else { &ids[cut..] };
            for &id in comps {
                w.computation(id);
            }
            for (k, &id) in ids.iter().enumerate() {
                let mine = halves::share(h, k, sizes[k], (g, off));
                for n in m.comp(id).graph().node_indices().skip(mine.start).take(mine.len()) {
                    w.instr(id, n);
                }
            }
            (w.diags, w.deferred_async.unwrap_or_default())
        };
        let ((da, aa), (db, ab)) = halves::both(|| run(0), || run(1));
        self.diags.extend(da);
        self.diags.extend(db);
        for (id, n, callee) in aa.into_iter().chain(ab) {
            self.async_wrapper(m.comp(id).instr(n), callee);
        }
        self.diags.sort();
    }

    /// The chain `async-start` -> `async-update`* -> `async-done` as XLA's parser and
    /// verifier define it: the start's shape is `((operands...), output, context...)` with
    /// its operands' shapes and the wrapped computation's result; the wrapped computation
    /// holds only its parameters and the root op; a start and an update have exactly one
    /// user; an update or done reads one start or update, an update keeps its shape, a done
    /// gives element 1; and an update or done naming a computation or an execution thread
    /// names its start's.
    fn async_chain(&mut self, c: &Computation, n: NodeIndex, edges: &[(u32, NodeIndex)]) {
        let i = c.instr(n);
        let Op::Async { opcode, calls, sugar } = &i.op else { return };
        // The thread written on an instruction; a start without one runs on "main".
        let thread = |x: &Instr| -> Option<String> {
            x.extras
                .as_ref()
                .and_then(|e| e.kept.iter().find(|(k, _)| k == "async_execution_thread"))
                .map(|(_, v)| v.trim_matches('"').to_string())
        };
        if *opcode != Opcode::AsyncDone {
            let users = c.users(n);
            if users.len() != 1 {
                let what =
                    if users.is_empty() { "none".to_string() } else { users.len().to_string() };
                self.err(
                    Diagnostic::error(
                        i.span,
                        format!("`{}` needs exactly one user (an async-update or async-done), found {what}", i.name),
                    )
                    .with_help("an async operation is one chain: start, updates, then one done"),
                );
            }
        }
        if *opcode == Opcode::AsyncStart {
            let Some(callee) = calls else { return };
            let wrapped = self.m.comp(*callee);
            let form = match &i.shape {
                Shape::Tuple(v) if v.len() >= 2 => match &v[0] {
                    Shape::Tuple(ops) => Some((ops, &v[1])),
                    _ => None,
                },
                _ => None,
            };
            let Some((ops, out)) = form else {
                self.err(
                    Diagnostic::error(
                        i.span,
                        format!("`{}` has shape {}, not `((operands...), output, context...)`", i.name, i.shape),
                    )
                    .with_help("an async-start's shape is a tuple: its operands' shapes as a tuple, the output, then the context"),
                );
                return;
            };
            if ops.len() != edges.len() {
                self.err(Diagnostic::error(
                    self.at(i, Anchor::Operands),
                    format!(
                        "`{}` lists {} operand shapes in its shape's element 0 but has {} operands",
                        i.name,
                        ops.len(),
                        edges.len()
                    ),
                ));
            } else {
                for (k, (s, e)) in ops.iter().zip(edges).enumerate() {
                    let got = &c.instr(e.1).shape;
                    if !s.compatible(got) {
                        self.err(Diagnostic::error(
                            self.at(i, Anchor::Operands),
                            format!("`{}` says operand {k} is {s} (its shape's element {{0}}), but operand {k} is {got}", i.name),
                        ));
                    }
                }
            }
            // The output (element 1) is what the wrapped computation returns.
            self.root_is(&Ctx { v_name: &i.name, instr: i }, Anchor::Attr("calls"), *callee, out);
            if let Some(r) = wrapped.root().filter(|r| wrapped.graph().contains_node(*r))
                && let Some(x) = wrapped
                    .nodes()
                    .filter(|&k| k != r)
                    .map(|k| wrapped.instr(k))
                    .find(|x| !matches!(x.op, Op::Parameter { .. }))
            {
                self.err(
                    Diagnostic::error(
                        x.span,
                        format!("`{}` is wrapped by async-start `{}`, so it may hold only its parameters and the root; `{}` is neither", wrapped.name, i.name, x.name),
                    )
                    .with_help("wrap one instruction per async-start; compute the rest outside"),
                );
            }
            return;
        }
        // Update and done: the operand is the previous link of the chain.
        let [(_, prev)] = edges else { return };
        let p = c.instr(*prev);
        if !matches!(p.op, Op::Async { opcode: Opcode::AsyncStart | Opcode::AsyncUpdate, .. }) {
            self.err(
                Diagnostic::error(
                    self.at(i, Anchor::Operands),
                    format!(
                        "`{}` reads `{}`, a {}, where an async-start or async-update must be",
                        i.name,
                        p.name,
                        p.op.opcode().name()
                    ),
                )
                .with_help("async-update and async-done continue the chain of one async-start"),
            );
            return;
        }
        // Walk back to the start.
        let mut start = *prev;
        for _ in 0..c.len() {
            match &c.instr(start).op {
                Op::Async { opcode: Opcode::AsyncUpdate, .. } => {
                    match c.graph().neighbors_directed(start, petgraph::Direction::Incoming).next()
                    {
                        Some(q) => start = q,
                        None => return,
                    }
                }
                _ => break,
            }
        }
        let s = c.instr(start);
        if let (Some(mine), Op::Async { opcode: Opcode::AsyncStart, calls: Some(theirs), .. }) =
            (calls, &s.op)
            && mine != theirs
        {
            self.err(Diagnostic::error(
                self.at(i, Anchor::Attr("calls")),
                format!(
                    "`{}` names `{}`, but its async-start `{}` wraps `{}`",
                    i.name,
                    self.m.comp(*mine).name,
                    s.name,
                    self.m.comp(*theirs).name
                ),
            ));
        }
        if let (Some(named), Op::Async { calls: Some(w), .. }) = (sugar, &s.op) {
            let wrapped = self.m.comp(*w);
            if let Some(r) = wrapped.root().filter(|r| wrapped.graph().contains_node(*r)) {
                let op = wrapped.instr(r).op.opcode();
                if op != *named {
                    self.err(
                        Diagnostic::error(
                            i.span,
                            format!(
                                "`{}` is written `{}-{}`, but its async-start `{}` wraps a {}",
                                i.name,
                                named.name(),
                                if *opcode == Opcode::AsyncUpdate { "update" } else { "done" },
                                s.name,
                                op.name()
                            ),
                        )
                        .with_help(format!(
                            "write `{}-{}` or `async-{}`",
                            op.name(),
                            if *opcode == Opcode::AsyncUpdate { "update" } else { "done" },
                            if *opcode == Opcode::AsyncUpdate { "update" } else { "done" }
                        )),
                    );
                }
            }
        }
        let theirs = thread(s).unwrap_or_else(|| "main".to_string());
        if let Some(mine) = thread(i)
            && mine != theirs
        {
            self.err(Diagnostic::error(
                self.at(i, Anchor::Attr("async_execution_thread")),
                format!(
                    "`{}` runs on thread \"{mine}\", but its async-start `{}` runs on \"{theirs}\"",
                    i.name, s.name
                ),
            ));
        }
        if *opcode == Opcode::AsyncUpdate {
            if !p.shape.compatible(&i.shape) {
                self.err(Diagnostic::error(
                    i.span,
                    format!(
                        "`{}` has shape {}, but an async-update keeps its operand's shape {}",
                        i.name, i.shape, p.shape
                    ),
                ));
            }
        } else if let Shape::Tuple(elems) = &p.shape
            && let Some(out) = elems.get(1)
            && !out.compatible(&i.shape)
        {
            self.err(
                Diagnostic::error(
                    i.span,
                    format!(
                        "`{}` has shape {} but its async-start produces {out}",
                        i.name, i.shape
                    ),
                )
                .with_label("not the wrapped computation's result"),
            );
        }
    }

    /// An async-start wrapping `callee`: no other may wrap it.
    fn async_wrapper(&mut self, i: &Instr, callee: CompId) {
        let name = &self.m.comp(callee).name;
        if let Some(first) = self.async_users.get(&callee) {
            let d = Diagnostic::error(
                self.at(i, Anchor::AttrItem("calls", name)),
                format!("`{}` wraps `{name}`, which async-start `{first}` already wraps", i.name),
            )
            .with_label("one async-start per wrapped computation")
            .with_help("give each async-start its own copy of the computation");
            self.err(d);
        } else {
            self.async_users.insert(callee, i.name.clone());
        }
    }

    fn computation(&mut self, id: CompId) {
        let m = self.m;
        let c = m.comp(id);
        let mut instr_names: FnvHashMap<&str, NodeIndex> =
            FnvHashMap::with_capacity_and_hasher(c.graph().node_count(), Default::default());
        for n in c.graph().node_indices() {
            let i = &c.instr(n);
            if let Some(prev) = instr_names.insert(&i.name, n) {
                self.err(
                    Diagnostic::error(
                        i.span,
                        format!(
                            "instruction name `{}` is used twice in computation `{}`",
                            i.name, c.name
                        ),
                    )
                    .with_note(c.instr(prev).span, "first defined here"),
                );
            }
        }
        match c.root() {
            None => self.err(Diagnostic::error(
                c.span,
                format!("computation `{}` has no root instruction", c.name),
            )),
            Some(r) if !c.graph().contains_node(r) => self.err(Diagnostic::error(
                c.span,
                format!("root of computation `{}` is not one of its instructions", c.name),
            )),
            Some(_) => {}
        }
        // Parameters.
        let mut numbers: HashMap<u32, NodeIndex> = HashMap::new();
        for n in c.graph().node_indices() {
            if let Op::Parameter { number, .. } = c.instr(n).op
                && let Some(prev) = numbers.insert(number, n)
            {
                self.err(
                    Diagnostic::error(
                        c.instr(n).span,
                        format!("parameter number {number} is used twice in `{}`", c.name),
                    )
                    .with_note(c.instr(prev).span, "first used here"),
                );
            }
        }
        for k in 0..numbers.len() as u32 {
            if !numbers.contains_key(&k) {
                let max = numbers.keys().max().copied().unwrap_or(0);
                self.err(
                    Diagnostic::error(
                        c.instr(numbers[&max]).span,
                        format!(
                            "computation `{}` has parameter({max}) but no parameter({k})",
                            c.name
                        ),
                    )
                    .with_help("parameter numbers must be 0, 1, ..., N-1"),
                );
                break;
            }
        }
        self.acyclic(c);
        // Signature.
        // XLA treats the signature's parameter list as informational (lit tests list fewer
        // parameters than the body has); only the result must match the root.
        if let Some(sig) = c.signature()
            && let Some(r) = c.root().filter(|r| c.graph().contains_node(*r))
            && !sig.result.compatible(&c.instr(r).shape)
        {
            self.err(
                Diagnostic::error(
                    sig.span,
                    format!("signature of `{}` returns {}", c.name, sig.result),
                )
                .with_note(c.instr(r).span, format!("but the root has shape {}", c.instr(r).shape)),
            );
        }
    }

    fn instr(&mut self, id: CompId, n: NodeIndex) {
        let m = self.m;
        let c = m.comp(id);
        let i = &c.instr(n);
        let opcode = i.op.opcode();
        // One pass over the incoming edges gives both the slots and the operands.
        let mut edges: Vec<(u32, NodeIndex)> = c
            .graph()
            .edges_directed(n, petgraph::Direction::Incoming)
            .map(|e| (*e.weight(), e.source()))
            .collect();
        edges.sort_unstable_by_key(|e| e.0);
        if edges.iter().enumerate().any(|(k, e)| e.0 != k as u32) {
            let slots: Vec<u32> = edges.iter().map(|e| e.0).collect();
            self.err(Diagnostic::error(
                i.span,
                format!("operand slots of `{}` are not 0..{}: {slots:?}", i.name, slots.len()),
            ));
        }
        let nops = edges.len();
        if !matches!(opcode, Opcode::Constant | Opcode::Parameter) && !opcode.arity().accepts(nops)
        {
            self.err(Diagnostic::error(
                self.at(i, Anchor::Operands),
                format!(
                    "`{}` is a {} with {nops} operand{}, but {} takes {}",
                    i.name,
                    opcode.name(),
                    if nops == 1 { "" } else { "s" },
                    opcode.name(),
                    opcode.arity().describe()
                ),
            ));
        }
        for p in i.extras.as_ref().map_or(&[][..], |e| &e.dangling_control_predecessors[..]) {
            if c.find(p).is_none() {
                let mut d = Diagnostic::error(
                    self.at(i, Anchor::AttrItem("control-predecessors", p)),
                    format!(
                        "control predecessor `{p}` of `{}` is not in computation `{}`",
                        i.name, c.name
                    ),
                )
                .with_label("no such instruction");
                let best = c
                    .instrs()
                    .map(|x| (crate::opcode::edit_distance(p, &x.name), x.name.as_str()))
                    .filter(|&(d, _)| d <= 2)
                    .min();
                d = match best {
                    Some((_, b)) => d.with_help(format!("did you mean `{b}`?")),
                    None => d.with_help(
                        "control-predecessors must name instructions of the same computation",
                    ),
                };
                self.err(d);
            }
        }
        if let Some(s) = &i.sharding {
            self.sharding(i, s);
        }
        let operand_shapes: Vec<&Shape> = edges.iter().map(|e| &c.instr(e.1).shape).collect();
        for (attr, callee) in i.op.called_computations() {
            if callee.index() >= m.comps().len() {
                self.err(Diagnostic::error(
                    self.at(i, Anchor::Attr(attr)),
                    format!("`{}` calls a computation that does not exist ({attr})", i.name),
                ));
                return;
            }
            if callee == m.entry {
                self.err(
                    Diagnostic::error(
                        self.at(i, Anchor::AttrItem(attr, &m.comp(callee).name)),
                        format!(
                            "`{}` calls the entry computation `{}`",
                            i.name,
                            m.comp(callee).name
                        ),
                    )
                    .with_help("the entry computation cannot be called; call a copy of it instead"),
                );
            }
        }
        let ctx = Ctx { v_name: &i.name, instr: i };
        match &i.op {
            Op::Call { to_apply: callee, .. } | Op::Fusion { calls: callee, .. } => {
                let attr = if matches!(i.op, Op::Call { .. }) { "to_apply" } else { "calls" };
                if self.params_match(&ctx, Anchor::Operands, *callee, &operand_shapes) {
                    self.root_is(&ctx, Anchor::Attr(attr), *callee, &i.shape);
                }
            }
            Op::Collective {
                opcode: op @ (Opcode::AllGather | Opcode::AllGatherStart | Opcode::ReduceScatter),
                attrs,
            } => {
                let n = attrs.dimensions.as_ref().map_or(0, Vec::len);
                if n != 1 {
                    self.err(Diagnostic::error(
                        self.at(i, Anchor::Attr("dimensions")),
                        format!(
                            "`{}`: {} takes exactly one dimension in `dimensions={{d}}`, got {n}",
                            i.name,
                            op.name()
                        ),
                    ));
                }
            }
            Op::Broadcast { dimensions } => {
                if let Some(rank) =
                    operand_shapes.first().and_then(|s| s.as_array()).map(|a| a.dims.len())
                    && dimensions.len() != rank
                {
                    self.err(
                        Diagnostic::error(
                            self.at(i, Anchor::Attr("dimensions")),
                            format!("`{}` maps {} operand dimensions, but its operand has rank {rank}", i.name, dimensions.len()),
                        )
                        .with_help("`dimensions={...}` names the result dimension of each operand dimension"),
                    );
                }
            }
            Op::CustomCall(cc) => {
                if let Some(want) = &cc.operand_layout_constraints {
                    let at = self.at(i, Anchor::Attr("operand_layout_constraints"));
                    if want.len() != operand_shapes.len() {
                        self.err(Diagnostic::error(
                            at,
                            format!(
                                "`{}` has {} operand{} but {} operand layout constraint{}",
                                i.name,
                                operand_shapes.len(),
                                if operand_shapes.len() == 1 { "" } else { "s" },
                                want.len(),
                                if want.len() == 1 { "" } else { "s" }
                            ),
                        ));
                    } else {
                        for (k, (w, got)) in want.iter().zip(&operand_shapes).enumerate() {
                            if !w.compatible(got) {
                                self.err(Diagnostic::error(
                                    at,
                                    format!("operand layout constraint {k} of `{}` is {w}, but operand {k} is {got}", i.name),
                                ));
                            }
                        }
                    }
                }
            }
            Op::Async { .. } => {
                if let Op::Async { opcode: Opcode::AsyncStart, calls: Some(callee), .. } = &i.op {
                    self.params_match(&ctx, Anchor::Operands, *callee, &operand_shapes);
                    match &mut self.deferred_async {
                        Some(later) => later.push((id, n, *callee)),
                        None => self.async_wrapper(i, *callee),
                    }
                }
                self.async_chain(c, n, &edges);
            }
            Op::While { condition, body } => {
                if let Some(state) = operand_shapes.first() {
                    self.params_match(&ctx, Anchor::Attr("condition"), *condition, &[state]);
                    if self.params_match(&ctx, Anchor::Attr("body"), *body, &[state]) {
                        self.root_is(&ctx, Anchor::Attr("body"), *body, state);
                    }
                    if !state.compatible(&i.shape) {
                        self.err(Diagnostic::error(
                            i.span,
                            format!(
                                "`{}` has shape {} but its loop state is {state}",
                                i.name, i.shape
                            ),
                        ));
                    }
                }
                self.root_pred(&ctx, Anchor::Attr("condition"), *condition);
            }
            Op::Conditional(b) => {
                let is_s32_scalar = |s: &Shape| {
                    s.as_array().is_some_and(|a| a.dims.is_empty() && a.elem == ElemType::S32)
                };
                // A selector of the other form's type is wrong for the branches written:
                // pointed at them (where XLA's parser refuses them); any other selector at
                // the operands.
                let selector = operand_shapes.first();
                let at = |attr| {
                    if selector.is_some_and(|s| is_pred_scalar(s) || is_s32_scalar(s)) {
                        Anchor::Attr(attr)
                    } else {
                        Anchor::Operands
                    }
                };
                let branches: Vec<CompId> = match b {
                    Branches::TrueFalse(t, f) => {
                        if selector.is_some_and(|s| !is_pred_scalar(s)) {
                            self.err(Diagnostic::error(self.at(i, at("true_computation")), format!("`{}` uses true/false computations, so its selector must be pred[]", i.name)));
                        }
                        vec![*t, *f]
                    }
                    Branches::Indexed(b) => {
                        if selector.is_some_and(|s| !is_s32_scalar(s)) {
                            self.err(
                                Diagnostic::error(
                                    self.at(i, at("branch_computations")),
                                    format!("`{}` lists branch_computations, so its selector must be s32[]", i.name),
                                )
                                .with_help("a pred[] selector takes true_computation= and false_computation="),
                            );
                        }
                        b.clone()
                    }
                };
                if branches.len() + 1 != nops {
                    self.err(Diagnostic::error(
                        self.at(i, Anchor::Operands),
                        format!(
                            "`{}` has {} branches but {} branch operands",
                            i.name,
                            branches.len(),
                            nops.saturating_sub(1)
                        ),
                    ));
                } else {
                    for (k, br) in branches.iter().enumerate() {
                        let name = &m.comp(*br).name;
                        let anchor = match b {
                            Branches::TrueFalse(..) => Anchor::Attr(if k == 0 {
                                "true_computation"
                            } else {
                                "false_computation"
                            }),
                            Branches::Indexed(_) => Anchor::AttrItem("branch_computations", name),
                        };
                        if self.params_match(&ctx, anchor, *br, &[operand_shapes[k + 1]]) {
                            self.root_is(&ctx, anchor, *br, &i.shape);
                        }
                    }
                }
            }
            Op::Reduce { to_apply, .. } | Op::ReduceWindow { to_apply, .. } => {
                self.reducer(&ctx, "to_apply", *to_apply, nops / 2)
            }
            Op::Scatter(s) => {
                self.reducer(&ctx, "to_apply", s.to_apply, nops.saturating_sub(1) / 2)
            }
            Op::Collective { attrs, .. } => {
                if let Some(r) = attrs.to_apply {
                    self.reducer(&ctx, "to_apply", r, 1);
                }
                self.replica_groups(m, i, attrs);
            }
            Op::Infeed { .. } if !matches!(&i.shape, Shape::Tuple(t) if !t.is_empty() && matches!(t.last(), Some(Shape::Token))) =>
            {
                self.err(Diagnostic::error(i.span, format!("`{}`: infeed must have a non-empty tuple shape (data, token[]), not {}", i.name, i.shape)).with_label("not a tuple ending in a token"));
            }
            Op::SendRecv { opcode: Opcode::Recv, .. } if !matches!(&i.shape, Shape::Tuple(t) if t.len() == 3 && matches!(t[2], Shape::Token)) =>
            {
                self.err(
                    Diagnostic::error(
                        i.span,
                        format!(
                            "`{}`: recv must have the shape (data, u32[], token[]), not {}",
                            i.name, i.shape
                        ),
                    )
                    .with_label("not a (data, context, token) tuple"),
                );
            }
            Op::SelectAndScatter { select, scatter, .. } => {
                self.reducer(&ctx, "select", *select, 1);
                self.reducer(&ctx, "scatter", *scatter, 1);
            }
            Op::Sort { to_apply, .. } => self.reducer(&ctx, "to_apply", *to_apply, nops),
            Op::Map { to_apply, .. } => {
                let k = m.comp(*to_apply).params().len();
                if k != nops {
                    self.err(Diagnostic::error(
                        i.span,
                        format!(
                            "`{}` maps {nops} operands with `{}`, which takes {k}",
                            i.name,
                            m.comp(*to_apply).name
                        ),
                    ));
                }
            }
            Op::GetTupleElement { index } => match operand_shapes.first() {
                Some(Shape::Tuple(elems)) => {
                    match usize::try_from(*index).ok().and_then(|k| elems.get(k)) {
                        Some(e) if !e.compatible(&i.shape) => self.err(Diagnostic::error(
                            self.at(i, Anchor::Attr("index")),
                            format!(
                                "`{}` has shape {} but element {index} of its operand is {e}",
                                i.name, i.shape
                            ),
                        )),
                        Some(_) => {}
                        None => self.err(
                            Diagnostic::error(
                                self.at(i, Anchor::Attr("index")),
                                format!(
                                    "`{}` reads element {index} of a tuple with {} elements",
                                    i.name,
                                    elems.len()
                                ),
                            )
                            .with_label("tuple index out of range"),
                        ),
                    }
                }
                Some(other) => self.err(Diagnostic::error(
                    i.span,
                    format!(
                        "`{}` reads a tuple element of a non-tuple value of shape {other}",
                        i.name
                    ),
                )),
                None => {}
            },
            _ => {}
        }
    }

    /// Checks `callee`'s parameters against `args`; false if it reported a mismatch.
    fn params_match(
        &mut self,
        ctx: &Ctx<'_>,
        anchor: Anchor<'_>,
        callee: CompId,
        args: &[&Shape],
    ) -> bool {
        let c = self.m.comp(callee);
        let params = c.params();
        let span = self.at(ctx.instr, anchor);
        if params.len() != args.len() {
            self.err(
                Diagnostic::error(
                    span,
                    format!(
                        "`{}` passes {} argument{} to `{}`, which takes {}",
                        ctx.v_name,
                        args.len(),
                        if args.len() == 1 { "" } else { "s" },
                        c.name,
                        params.len()
                    ),
                )
                .with_note(c.span, format!("`{}` is defined here", c.name)),
            );
            return false;
        }
        let mut ok = true;
        for (k, (&p, a)) in params.iter().zip(args).enumerate() {
            if !c.instr(p).shape.compatible(a) {
                self.err(
                    Diagnostic::error(
                        span,
                        format!(
                            "argument {k} of `{}` has shape {a}, but `{}` expects {}",
                            ctx.v_name,
                            c.name,
                            c.instr(p).shape
                        ),
                    )
                    .with_note(c.instr(p).span, "parameter declared here"),
                );
                ok = false;
            }
        }
        ok
    }

    fn root_shape(&self, callee: CompId) -> Option<&'m Shape> {
        let c = self.m.comp(callee);
        c.root().filter(|r| c.graph().contains_node(*r)).map(|r| &c.instr(r).shape)
    }

    fn root_is(&mut self, ctx: &Ctx<'_>, anchor: Anchor<'_>, callee: CompId, want: &Shape) {
        if let Some(got) = self.root_shape(callee)
            && !got.compatible(want)
        {
            let c = self.m.comp(callee);
            self.err(
                Diagnostic::error(
                    self.at(ctx.instr, anchor),
                    format!(
                        "`{}` expects `{}` to return {want}, but it returns {got}",
                        ctx.v_name, c.name
                    ),
                )
                .with_note(c.span, format!("`{}` is defined here", c.name)),
            );
        }
    }

    fn root_pred(&mut self, ctx: &Ctx<'_>, anchor: Anchor<'_>, callee: CompId) {
        if let Some(got) = self.root_shape(callee)
            && !is_pred_scalar(got)
        {
            let c = self.m.comp(callee);
            self.err(
                Diagnostic::error(
                    self.at(ctx.instr, anchor),
                    format!(
                        "`{}` needs `{}` to return pred[], but it returns {got}",
                        ctx.v_name, c.name
                    ),
                )
                .with_note(c.span, format!("`{}` is defined here", c.name)),
            );
        }
    }

    /// A reducer/comparator over `n` inputs takes `2n` parameters.
    /// Rule 13: replica groups fit the device count the module states
    /// (`replica_count` x `num_partitions`, when the header writes either): every id in
    /// range and used once; with `use_global_device_ids`, the groups cover exactly all
    /// devices (XLA's verifier: "in flattened-id mode, replica groups should contain N
    /// flattened IDs").
    fn replica_groups(&mut self, m: &Module, i: &Instr, attrs: &crate::op::CollectiveAttrs) {
        use crate::op::ReplicaGroups;
        if m.header.replica_count.is_none() && m.header.num_partitions.is_none() {
            return;
        }
        let total = m.header.replica_count.unwrap_or(1).max(1)
            * m.header.num_partitions.unwrap_or(1).max(1);
        let groups: Vec<Vec<i64>> = match &attrs.replica_groups {
            Some(ReplicaGroups::Explicit(g)) if !g.is_empty() => g.clone(),
            Some(ReplicaGroups::Iota(l)) => {
                let size = l.dims.get(1).copied().unwrap_or(1).max(1) as usize;
                l.devices().chunks(size).map(|c| c.to_vec()).collect()
            }
            _ => return,
        };
        let anchor = Anchor::Attr("replica_groups");
        let mut seen = std::collections::HashSet::new();
        for &d in groups.iter().flatten() {
            if d < 0 || d >= total {
                self.err(Diagnostic::error(self.at(i, anchor), format!("`{}`: device {d} in replica_groups is out of range: the module has {total} device{}", i.name, if total == 1 { "" } else { "s" })).with_label("replica_count x num_partitions"));
                return;
            }
            if !seen.insert(d) {
                self.err(Diagnostic::error(
                    self.at(i, anchor),
                    format!("`{}`: device {d} appears twice in replica_groups", i.name),
                ));
                return;
            }
        }
        if attrs.use_global_device_ids && seen.len() as i64 != total && seen.len() != 1 {
            self.err(
                Diagnostic::error(self.at(i, anchor), format!("`{}`: with use_global_device_ids the replica groups must cover all {total} devices, but they name {}", i.name, seen.len()))
                    .with_label("replica_count x num_partitions"),
            );
        }
    }

    fn reducer(&mut self, ctx: &Ctx<'_>, attr: &str, callee: CompId, n: usize) {
        let c = self.m.comp(callee);
        let params = c.params();
        if params.len() != 2 * n {
            self.err(
                Diagnostic::error(
                    self.at(ctx.instr, Anchor::Attr(attr)),
                    format!(
                        "`{}` needs `{}` to take {} parameters, but it takes {}",
                        ctx.v_name,
                        c.name,
                        2 * n,
                        params.len()
                    ),
                )
                .with_note(c.span, format!("`{}` is defined here", c.name)),
            );
        }
    }

    fn acyclic(&mut self, c: &Computation) {
        // Text in XLA's order (operands first) has every operand edge pointing one way
        // in node order: acyclic without a search.
        let g = c.graph();
        let ordered = g.edge_references().all(|e| e.source() < e.target())
            || g.edge_references().all(|e| e.source() > e.target());
        if !ordered && let Err(cycle) = petgraph::algo::toposort(g, None) {
            let start = cycle.node_id();
            // Walk back along operands inside the cycle's strongly connected component to name it.
            let sccs = petgraph::algo::kosaraju_scc(c.graph());
            let scc = sccs.into_iter().find(|s| s.contains(&start)).unwrap_or_else(|| vec![start]);
            let mut names: Vec<(u32, &str)> =
                scc.iter().map(|&n| (c.instr(n).seq, c.instr(n).name.as_str())).collect();
            names.sort_unstable();
            // Report at the first-written instruction of the cycle, whatever the graph order.
            let start = scc.iter().copied().min_by_key(|&n| c.instr(n).seq).unwrap_or(start);
            let list: Vec<String> = names.iter().map(|(_, n)| format!("`{n}`")).collect();
            let what = if list.len() == 1 {
                format!("{} uses itself as an operand", list[0])
            } else {
                format!("{} depend on each other", list.join(", "))
            };
            self.err(
                Diagnostic::error(
                    c.instr(start).span,
                    format!("cycle in computation `{}`: {what}", c.name),
                )
                .with_label("this instruction is (indirectly) its own operand")
                .with_help("HLO dataflow must be acyclic; use a `while` loop for iteration"),
            );
            return;
        }
        if c.has_control_edges() {
            // Kahn's order over operands and control edges must reach every instruction;
            // `post_order` appends the ones it cannot order, in `seq` order.
            let order = c.post_order();
            let mut placed = vec![false; c.graph().node_bound()];
            let mut stuck = None;
            for &n in &order {
                let ready = c
                    .operands(n)
                    .iter()
                    .chain(c.control_predecessors(n))
                    .all(|p| placed[p.index()]);
                if !ready {
                    stuck = Some(n);
                    break;
                }
                placed[n.index()] = true;
            }
            if let Some(n) = stuck {
                let i = c.instr(n);
                self.err(
                    Diagnostic::error(
                        self.at(i, Anchor::Attr("control-predecessors")),
                        format!(
                            "control edges of `{}` form a cycle in computation `{}`",
                            i.name, c.name
                        ),
                    )
                    .with_label("this instruction must run both before and after another")
                    .with_help("a control predecessor may not depend on the instruction it orders"),
                );
            }
        }
    }

    fn call_graph(&mut self) {
        let m = self.m;
        // Depth-first search for recursion.
        let n = m.comps().len();
        let mut state = vec![0u8; n];
        fn dfs(
            m: &Module,
            id: CompId,
            state: &mut [u8],
            stack: &mut Vec<CompId>,
        ) -> Option<Vec<CompId>> {
            state[id.index()] = 1;
            stack.push(id);
            let c = m.comp(id);
            for node in c.graph().node_indices() {
                for (_, callee) in c.instr(node).op.called_computations() {
                    if callee.index() >= m.comps().len() {
                        continue;
                    }
                    match state[callee.index()] {
                        1 => {
                            let pos = stack.iter().position(|&x| x == callee).unwrap_or(0);
                            return Some(stack[pos..].to_vec());
                        }
                        0 => {
                            if let Some(cyc) = dfs(m, callee, state, stack) {
                                return Some(cyc);
                            }
                        }
                        _ => {}
                    }
                }
            }
            stack.pop();
            state[id.index()] = 2;
            None
        }
        for id in m.comp_ids() {
            if state[id.index()] == 0
                && let Some(cyc) = dfs(m, id, &mut state, &mut Vec::new())
            {
                let names: Vec<String> =
                    cyc.iter().map(|&c| format!("`{}`", m.comp(c).name)).collect();
                self.err(
                    Diagnostic::error(
                        m.comp(cyc[0]).span,
                        format!("recursive computations: {} call each other", names.join(" -> ")),
                    )
                    .with_help("HLO computations cannot recurse; use a `while` loop"),
                );
                return;
            }
        }
    }

    fn entry_layout(&mut self) {
        let m = self.m;
        let Some((params, result)) = &m.header.entry_layout else { return };
        if m.entry().is_edited() {
            // Regenerated from the entry when printed (`Module::entry_layout`).
            return;
        }
        let c = m.entry();
        let actual = c.params();
        let at = m.header.entry_layout_span.unwrap_or(c.span);
        if params.len() != actual.len() {
            self.err(
                Diagnostic::error(at, format!("entry_computation_layout lists {} parameters, entry `{}` has {}", params.len(), c.name, actual.len()))
                    .with_note(c.span, "the entry computation")
                    .with_help("the module header's entry_computation_layout must describe the ENTRY computation"),
            );
            return;
        }
        // XLA reads only layouts from this attribute and accepts other element types, so
        // only the structure and the dimensions must agree.
        for (k, (want, &p)) in params.iter().zip(&actual).enumerate() {
            if !same_dims(want, &c.instr(p).shape) {
                self.err(Diagnostic::error(
                    c.instr(p).span,
                    format!(
                        "entry_computation_layout gives parameter {k} shape {want}, but it is {}",
                        c.instr(p).shape
                    ),
                ));
            }
        }
        if let Some(r) = c.root().filter(|r| c.graph().contains_node(*r))
            && !same_dims(result, &c.instr(r).shape)
        {
            self.err(Diagnostic::error(
                c.instr(r).span,
                format!(
                    "entry_computation_layout gives the result shape {result}, but the root is {}",
                    c.instr(r).shape
                ),
            ));
        }
    }

    fn sharding(&mut self, i: &Instr, s: &Sharding) {
        let (name, shape) = (&i.name, &i.shape);
        let span = || self.at(i, Anchor::Attr("sharding"));
        // Every tile dimension at least 1 (XLA's parser takes `devices=[0,1]<=[0]`; no
        // device holds a tile of it, and the partitioner divides by the tile counts).
        let singles: Vec<&crate::sharding::SingleSharding> = match s {
            Sharding::Single(one) => vec![one],
            Sharding::Tuple(v) => v.iter().collect(),
        };
        for one in singles {
            if let crate::sharding::ShardingKind::Tiled { tiles, .. } = &one.kind
                && let Some(&d) = tiles.dims().iter().find(|&&d| d < 1)
            {
                self.err(
                    Diagnostic::error(
                        span(),
                        format!("sharding of `{name}` has a tile dimension of {d}"),
                    )
                    .with_label("no device holds a tile of it")
                    .with_help("every tile dimension is at least 1: `devices=[2,1]<=[2]` splits the first dimension in two"),
                );
                return;
            }
        }
        match (s, shape) {
            // Side-effecting ops (outfeed, send, ...) shard their operands: a tuple sharding
            // on a non-tuple value is theirs to interpret.
            (Sharding::Tuple(leaves), Shape::Tuple(_)) => {
                let want = shape.leaf_count();
                if leaves.len() != want {
                    self.err(Diagnostic::error(
                        span(),
                        format!("`{name}` has a tuple sharding with {} entries for shape {shape} ({want} leaves)", leaves.len()),
                    ));
                }
            }
            (Sharding::Single(single), Shape::Array(a)) => {
                if let Some(r) = single.data_rank()
                    && r != a.rank()
                {
                    self.err(
                        Diagnostic::error(span(), format!("sharding of `{name}` tiles {r} dimensions, but its shape {shape} has rank {}", a.rank()))
                            .with_help("a tiled sharding has one tile dimension per array dimension, plus any subgroup dimensions"),
                    );
                }
            }
            _ => {}
        }
    }
}

/// The instruction being checked.
struct Ctx<'a> {
    v_name: &'a str,
    instr: &'a Instr,
}
