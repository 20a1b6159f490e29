//! Syntax trees → IR: names to graph nodes, operand order to edge slots, attribute token
//! trees to typed attributes. Reports every error it finds, each with a span.

use std::collections::{HashMap, HashSet};

use petgraph::stable_graph::NodeIndex;

use super::ast::{self, Arg, AttrValue, CompAst, ModuleAst, Tt};
use super::attrs::{self as av, R};
use super::lexer::Tok;
use crate::computation::{Computation, Signature};
use crate::diag::{Diagnostic, Diagnostics, Span};
use crate::halves::{self, PARALLEL_MIN_INSTRS};
use crate::hash::FnvHashMap;
use crate::instr::{Extras, Instr};
use crate::literal::{Literal, LiteralData};
use crate::module::{CompId, FileLocation, FrameTables, Header, Module, StackFrame};
use crate::op::*;
use crate::opcode::{Opcode, edit_distance};
use crate::types::{ElemClass, ElemType, Shape};

/// The module's computation names, known before any instruction is built and read-only
/// from then on (the threads that build a large computation's instructions share it).
struct CompTable<'a> {
    ids: HashMap<&'a str, CompId>,
    names: Vec<&'a str>,
}

struct Resolver<'a, 'd, 't> {
    src: &'a str,
    diags: &'d mut Diagnostics,
    table: &'t CompTable<'a>,
    seq: u32,
    /// Computations made explicit while resolving (async shorthand wrapped ops), with
    /// ids after the written ones.
    extra: Vec<Computation>,
    written_comps: usize,
    /// The computation being resolved: references must point before it.
    current: usize,
    /// Inline computation bodies resolved so far, by the offset of their `{` (or the
    /// syntax error in one, repeated to its user and merged with the first by `parse`).
    inline: HashMap<u32, Result<CompId, Diagnostic>>,
}

impl<'a, 'd, 't> Resolver<'a, 'd, 't> {
    /// A resolver at the start of computation 0, sequence number 0.
    fn new(
        src: &'a str,
        diags: &'d mut Diagnostics,
        table: &'t CompTable<'a>,
        written_comps: usize,
    ) -> Self {
        Resolver {
            src,
            diags,
            table,
            seq: 0,
            extra: Vec::new(),
            written_comps,
            current: 0,
            inline: HashMap::new(),
        }
    }
}

/// An instruction built from its statement (or the error already reported), and whether
/// its shape was written.
type Built = (Result<Instr, ()>, bool);

/// For a module resolved on two threads, the first sequence number of each computation
/// and, last, of what follows, in the one-thread order: one per instruction, then one
/// per compact tuple index (`%t#1` becomes a get-tuple-element). `None` for small
/// modules, and for modules using the async shorthand, nested operands or inline
/// computations, which add instructions and computations as they go (one thread).
fn parallel_plan(asts: &[CompAst<'_>]) -> Option<Vec<u32>> {
    let total: usize = asts.iter().map(|c| c.instrs.len()).sum();
    if total < PARALLEL_MIN_INSTRS {
        return None;
    }
    let mut bases = Vec::with_capacity(asts.len() + 1);
    let mut seq = 0u32;
    for c in asts {
        bases.push(seq);
        for i in &c.instrs {
            Opcode::from_name(i.opcode.text)?;
            seq += 1;
            for a in &i.args {
                match a {
                    Arg::Nested(_) => return None,
                    Arg::Ref { gte, .. } => seq += gte.len() as u32,
                    _ => {}
                }
            }
        }
    }
    bases.push(seq);
    Some(bases)
}

/// The module of the syntax trees `ast` of `src`, or `None` with the errors in `diags`;
/// `broken` names the statements that failed to parse. Large modules are resolved on two
/// threads when `threads` (tests compare the two).
pub(crate) fn resolve<'a>(
    src: &'a str,
    ast: ModuleAst<'a>,
    broken: &[&'a str],
    diags: &mut Diagnostics,
    threads: bool,
) -> Option<Module> {
    let ModuleAst { header, frames, comps: asts } = ast;
    let mut table = CompTable {
        ids: HashMap::with_capacity(asts.len()),
        names: Vec::with_capacity(asts.len()),
    };
    // Computation names first, so that a reference to a later one gets a precise error
    // (XLA needs callees defined first, as it prints them).
    let mut entry: Option<(CompId, Span)> = None;
    for (i, c) in asts.iter().enumerate() {
        let id = CompId(i as u32);
        let name = c.header.name;
        if let Some(prev) = table.ids.insert(name.text, id) {
            let prev_span = asts[prev.index()].header.name.span;
            diags.push(
                Diagnostic::error(name.span, format!("duplicate computation name `{}`", name.text))
                    .with_label("defined again here")
                    .with_note(prev_span, "first defined here"),
            );
        }
        table.names.push(name.text);
        if let Some(sp) = c.header.entry {
            if let Some((_, first)) = entry {
                diags.push(
                    Diagnostic::error(sp, "more than one ENTRY computation")
                        .with_note(first, "the first ENTRY is here")
                        .with_help("a module has exactly one entry computation"),
                );
            } else {
                entry = Some((id, sp));
            }
        }
    }
    let mut r = Resolver::new(src, diags, &table, asts.len());
    let mut asts = asts;
    // With two threads, the first id no instruction takes comes with the computations.
    let (mut comps, ids_taken) = match parallel_plan(&asts).filter(|_| threads) {
        Some(bases) => {
            let (comps, taken) = r.computations_in_parallel(&mut asts, &bases, broken);
            (comps, Some(taken))
        }
        None => {
            let mut comps = Vec::with_capacity(asts.len());
            for (i, c) in asts.iter_mut().enumerate() {
                r.current = i;
                comps.push(r.computation(c, broken));
            }
            (comps, None)
        }
    };
    comps.append(&mut r.extra);
    let name = header.as_ref().map_or("module", |h| h.name.text).to_string();
    let hdr = header.as_ref().map(|h| r.header(h)).unwrap_or_default();
    let frames = frames.map(|f| r.frames(&f));
    let entry = entry.map(|e| e.0).unwrap_or(CompId(asts.len().saturating_sub(1) as u32));
    if r.diags.has_errors() || comps.is_empty() {
        return None;
    }
    Some(match ids_taken {
        Some(first) => Module::from_parts_after(name, comps, entry, hdr, frames, first),
        None => Module::from_parts(name, comps, entry, hdr, frames),
    })
}

/// Attributes of XLA versions other than the oracle's (newer ones, and `original_value`
/// of the versions before it) that are accepted, carried verbatim (printed back) and
/// otherwise ignored, with the opcodes that may carry them (empty: any). The next
/// such attribute is one line here.
pub(crate) const KEPT_ATTRS: &[(&[Opcode], &str)] = &[
    (&[], "debug_attributes"),
    (&[], "original_value"),
    (&[Opcode::CollectivePermute, Opcode::CollectivePermuteStart], "slice_sizes"),
    (&[Opcode::CollectiveBroadcast], "has_dynamic_root"),
    (&[Opcode::AsyncStart], "output_to_operand_aliasing"),
    (&[Opcode::AsyncStart, Opcode::AsyncUpdate, Opcode::AsyncDone], "async_execution_thread"),
];

/// Names of the attributes every instruction may carry.
const COMMON_ATTRS: &[&str] = &[
    "sharding",
    "metadata",
    "frontend_attributes",
    "backend_config",
    "control-predecessors",
    "statistics",
    "result_accuracy",
    "origin",
];

/// The attributes of one instruction, taken one by one; leftovers are errors.
struct Attrs<'x, 'a> {
    list: Vec<Option<&'x ast::Attr<'a>>>,
    opcode: &'a str,
    opcode_span: Span,
    errors: Vec<Diagnostic>,
}

impl<'x, 'a> Attrs<'x, 'a> {
    fn take(&mut self, name: &str) -> Option<&'x ast::Attr<'a>> {
        self.list.iter_mut().find(|a| a.is_some_and(|a| a.name == name)).and_then(Option::take)
    }
    fn tts(&mut self, name: &str) -> Option<(&'x [Tt<'a>], Span)> {
        let a = self.take(name)?;
        match &a.value {
            AttrValue::Tts(t) => Some((t.as_slice(), a.span)),
            _ => {
                self.errors
                    .push(Diagnostic::error(a.span, format!("malformed `{name}` attribute")));
                None
            }
        }
    }
    /// Reads an optional attribute with `f`; a bad value is recorded as an error.
    fn opt<T>(&mut self, name: &str, f: impl FnOnce(&[Tt<'a>]) -> R<T>) -> Option<T> {
        let (tts, _) = self.tts(name)?;
        match f(tts) {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.push(e);
                None
            }
        }
    }
    /// Reads a required attribute; its absence is an error.
    fn req<T>(&mut self, name: &str, f: impl FnOnce(&[Tt<'a>]) -> R<T>) -> R<T> {
        let present = self.list.iter().any(|a| a.is_some_and(|a| a.name == name));
        if !present {
            return Err(Diagnostic::error(
                self.opcode_span,
                format!("`{}` needs the attribute `{name}=`", self.opcode),
            )
            .with_label(format!("missing `{name}=`")));
        }
        let (tts, _) = self
            .tts(name)
            .ok_or_else(|| Diagnostic::error(self.opcode_span, format!("malformed `{name}`")))?;
        f(tts)
    }
    fn flag(&mut self, name: &str) -> bool {
        self.opt(name, av::boolean).unwrap_or(false)
    }
    fn raw(&mut self, name: &str, src: &str) -> Option<String> {
        self.take(name).map(|a| src[a.value_span().range()].to_string())
    }
}

impl<'a> Resolver<'a, '_, '_> {
    fn comp_ref(&self, tts: &[Tt<'a>]) -> R<CompId> {
        let t = av::one(tts, "a computation name")?;
        let (name, sp) = match t {
            Tt::Tok(Tok::Ident(s) | Tok::PctIdent(s), sp) => (*s, *sp),
            Tt::Tok(Tok::RawBraced(_), sp) => {
                // Resolved before the instruction (`inline_bodies`).
                return self.inline.get(&sp.start).cloned().unwrap_or_else(|| {
                    Err(Diagnostic::error(*sp, "malformed inline computation"))
                });
            }
            Tt::Group { open: Tok::LBrace, span, .. } => {
                return Err(Diagnostic::error(
                    *span,
                    "a computation cannot be written inline here",
                )
                .with_help("define the computation separately and refer to it by name"));
            }
            t => return Err(Diagnostic::error(t.span(), "expected a computation name")),
        };
        if let Some(&id) = self.table.ids.get(name)
            && id.index() >= self.current
        {
            let what = if id.index() == self.current {
                "calls itself"
            } else {
                "is defined after its use"
            };
            return Err(Diagnostic::error(sp, format!("computation `{name}` {what}"))
                .with_label("not defined yet")
                .with_help("XLA's parser needs every computation defined before the computations that call it (callees first, as XLA prints them)"));
        }
        self.table.ids.get(name).copied().ok_or_else(|| {
            let d = Diagnostic::error(sp, format!("unknown computation `{name}`"))
                .with_label("no computation has this name");
            match closest(name, self.table.names.iter().copied()) {
                Some(best) => d.with_help(format!("did you mean `{best}`?")),
                None => d,
            }
        })
    }

    fn comp_list(&self, tts: &[Tt<'a>]) -> R<Vec<CompId>> {
        av::group_items(
            av::one(tts, "a list of computations")?,
            Tok::LBrace,
            "a list like `{%a, %b}`",
        )?
        .into_iter()
        .map(|t| self.comp_ref(std::slice::from_ref(t)))
        .collect()
    }

    /// Resolves one computation: its instructions built in statement order, then
    /// assembled into a graph.
    fn computation(&mut self, c: &mut CompAst<'a>, broken: &[&'a str]) -> Computation {
        // Names written in this computation, when nested instructions need fresh ones.
        let mut written_names: HashSet<&'a str> = HashSet::new();
        if c.instrs.iter().any(|i| i.args.iter().any(|a| matches!(a, Arg::Nested(_)))) {
            c.instrs = hoist_nested(std::mem::take(&mut c.instrs));
            written_names = c.instrs.iter().map(|i| i.name.text).collect();
        }
        self.inline_bodies(c, broken);
        let built: Vec<Built> = c.instrs.iter_mut().map(|ins| self.build(ins)).collect();
        self.assemble(c, built, &written_names, broken)
    }

    /// Resolves the inline computation bodies of `c`'s instructions (`to_apply={ ... }`)
    /// into computations of their own, as XLA's parser does: named `_` (then `_.1`, ...),
    /// defined before their caller (ids after the written ones, printed callees first).
    fn inline_bodies(&mut self, c: &CompAst<'a>, broken: &[&'a str]) {
        for ins in &c.instrs {
            for a in &ins.attrs {
                let AttrValue::Tts(v) = &a.value else { continue };
                let [Tt::Tok(Tok::RawBraced(_), sp)] = v.as_slice() else { continue };
                if !super::lexer::COMPUTATION_ATTRS.contains(&a.name) {
                    continue;
                }
                let (instrs, close) =
                    match super::parse::inline_body(self.src, sp.start as usize, sp.end as usize) {
                        Ok(b) => b,
                        Err(d) => {
                            self.diags.push(d.clone());
                            self.inline.insert(sp.start, Err(d));
                            continue;
                        }
                    };
                let header = Box::new(ast::CompHeader {
                    entry: None,
                    name: ast::Name { text: "_", span: *sp },
                    signature: None,
                });
                let mut body = CompAst { header, instrs, thread: None, close };
                let mut comp = self.computation(&mut body, broken);
                comp.name = unused_name("_", |n| {
                    self.table.ids.contains_key(n) || self.extra.iter().any(|c| c.name == n)
                });
                let id = CompId((self.written_comps + self.extra.len()) as u32);
                self.extra.push(comp);
                self.inline.insert(sp.start, Ok(id));
            }
        }
    }

    /// Builds one instruction from its statement, taking its shape and freeing its
    /// attributes (consumed); remembers whether the shape was written.
    fn build(&mut self, ins: &mut ast::Instr<'a>) -> Built {
        let written = ins.shape.is_some();
        // XLA infers no shape for an instruction that names its original values.
        if !written && ins.attrs.iter().any(|a| a.name == "original_value") {
            self.diags.push(
                Diagnostic::error(
                    ins.opcode.span,
                    format!("`{}` needs its result shape written", ins.name.text),
                )
                .with_label("no shape before the opcode")
                .with_help("an instruction with `original_value` states its shape, e.g. `v = f32[2,10] abs(a), original_value={{\"v\"}}`"),
            );
            drop(std::mem::take(&mut ins.attrs));
            return (Err(()), written);
        }
        let shape = ins.shape.take().map_or(Shape::Tuple(Vec::new()), |s| s.0);
        let r = self.instr(ins, shape);
        drop(std::mem::take(&mut ins.attrs));
        (r, written)
    }

    /// A computation's graph from its built instructions: nodes, names, operand edges,
    /// omitted shapes, control edges, root.
    fn assemble(
        &mut self,
        c: &mut CompAst<'a>,
        built: Vec<Built>,
        written_names: &HashSet<&'a str>,
        broken: &[&'a str],
    ) -> Computation {
        let edges: usize = c.instrs.iter().map(|i| i.args.len()).sum();
        let mut comp = Computation::with_capacity(c.header.name.text, c.instrs.len(), edges);
        comp.span = c.header.name.span;
        comp.execution_thread = c.thread.map(|t| av::unquote(t.0));
        // The signature's shapes move over (and nothing is left to free later, on one thread).
        if let Some(sig) = c.header.signature.take() {
            let (params, result, span) = *sig;
            comp.set_signature(Some(Signature {
                params: params.into_iter().map(|p| (p.name.text.to_string(), p.shape)).collect(),
                result,
                span,
            }));
        }
        let mut names: FnvHashMap<&'a str, (NodeIndex, Span)> =
            FnvHashMap::with_capacity_and_hasher(c.instrs.len(), Default::default());
        let mut anon_taken: HashSet<String> = HashSet::new();
        let mut nodes: Vec<Option<NodeIndex>> = Vec::with_capacity(c.instrs.len());
        let mut root: Option<(NodeIndex, Span)> = None;
        let mut omitted: Vec<NodeIndex> = Vec::new();
        let mut failed: Vec<&'a str> = Vec::new();
        for (ins, (result, written)) in c.instrs.iter().zip(built) {
            let instr = match result {
                Ok(mut i) if ins.name.text.is_empty() => {
                    // A hoisted nested instruction: named as XLA names it (`multiply.anon`,
                    // then `multiply.anon.1`, ...), clear of every name written here.
                    let name = unused_name(&format!("{}.anon", ins.opcode.text), |n| {
                        anon_taken.contains(n) || written_names.contains(n)
                    });
                    anon_taken.insert(name.clone());
                    i.name = name;
                    i
                }
                Ok(i) => i,
                Err(()) => {
                    // Already reported; uses of it are not reported again.
                    failed.push(ins.name.text);
                    nodes.push(None);
                    continue;
                }
            };
            let n = comp.insert(instr);
            nodes.push(Some(n));
            if !written {
                omitted.push(n);
            }
            if ins.name.text.is_empty() {
                continue;
            }
            if spells_a_type(ins.name.text) {
                self.diags.push(
                    Diagnostic::error(
                        ins.name.span,
                        format!("illegal instruction name `{}`: it spells a type", ins.name.text),
                    )
                    .with_label("XLA reads this as a type, not a name")
                    .with_help(format!("rename it, e.g. `{}_`", ins.name.text)),
                );
            }
            if let Some((_, first)) = names.insert(ins.name.text, (n, ins.name.span)) {
                self.diags.push(
                    Diagnostic::error(
                        ins.name.span,
                        format!("duplicate instruction name `{}`", ins.name.text),
                    )
                    .with_label("defined again here")
                    .with_note(first, "first defined here")
                    .with_help("instruction names must be unique"),
                );
            }
            if let Some(sp) = ins.root {
                if let Some((_, first)) = root {
                    self.diags.push(
                        Diagnostic::error(
                            sp,
                            format!("computation `{}` has more than one ROOT", c.header.name.text),
                        )
                        .with_note(first, "the first ROOT is here"),
                    );
                } else {
                    root = Some((n, sp));
                }
            }
        }
        // Operands, now that every name in the computation is known.
        let mut pending_gte: Vec<(NodeIndex, u32, NodeIndex, Vec<i64>)> = Vec::new();
        for (ins, node) in c.instrs.iter().zip(&nodes) {
            let Some(n) = *node else { continue };
            let mut slot = 0u32;
            for arg in &ins.args {
                if let Arg::Anon(k) = arg {
                    if let Some(src) = nodes[*k] {
                        comp.link(src, n, slot);
                    }
                    slot += 1;
                    continue;
                }
                let Arg::Ref { shape, name, gte } = arg else { continue };
                if matches!(comp.instr(n).op, Op::Constant(_)) {
                    continue;
                }
                match names.get(name.text) {
                    Some(&(src_node, _)) => {
                        if let Some(ws) = shape
                            && let (written, sp) = &**ws
                            && gte.is_empty()
                            && !written.compatible(&comp.instr(src_node).shape)
                        {
                            self.diags.push(
                                Diagnostic::error(
                                    *sp,
                                    format!(
                                        "operand `{}` is written with shape {written}",
                                        name.text
                                    ),
                                )
                                .with_label(format!(
                                    "but `{}` has shape {}",
                                    name.text,
                                    comp.instr(src_node).shape
                                )),
                            );
                        }
                        if gte.is_empty() {
                            comp.link(src_node, n, slot);
                        } else {
                            let idx: Vec<i64> = gte
                                .iter()
                                .map(|(s, sp)| av::int_tok(s, *sp).unwrap_or(-1))
                                .collect();
                            pending_gte.push((src_node, slot, n, idx));
                        }
                    }
                    None if broken.contains(&name.text) || failed.contains(&name.text) => {}
                    None => {
                        let mut d = Diagnostic::error(
                            name.span,
                            format!("use of undefined instruction `{}`", name.text),
                        )
                        .with_label(format!("not defined in computation `{}`", c.header.name.text));
                        if let Some(best) = closest(name.text, names.keys().copied()) {
                            d = d.with_help(format!("did you mean `{best}`?"));
                        }
                        self.diags.push(d);
                    }
                }
                slot += 1;
            }
        }
        for (src_node, slot, user, idx) in pending_gte {
            self.compact_gte(&mut comp, src_node, slot, user, &idx);
        }
        if !omitted.is_empty() {
            for n in comp.post_order() {
                if !omitted.contains(&n) {
                    continue;
                }
                match infer_omitted_shape(&comp, n) {
                    Some(s) => comp.instr_mut(n).shape = s,
                    None => {
                        let i = &comp.instr(n);
                        self.diags.push(
                            Diagnostic::error(
                                i.span,
                                format!("cannot infer the result shape of `{}`", i.name),
                            )
                            .with_label(format!(
                                "`{}` needs its result shape written",
                                i.op.opcode().name()
                            ))
                            .with_help(
                                "write the shape before the opcode, e.g. `x = f32[8,16] add(a, b)`",
                            ),
                        );
                    }
                }
            }
        }
        // Control predecessors become node references; names that resolve to nothing stay
        // as written for the verifier to report (with the source at hand).
        for n in nodes.iter().flatten().copied() {
            let Some(names_written) =
                comp.instr(n).extras.as_ref().map(|e| &e.dangling_control_predecessors)
            else {
                continue;
            };
            if names_written.is_empty() {
                continue;
            }
            let (found, dangling): (Vec<&String>, Vec<&String>) =
                names_written.iter().partition(|p| names.contains_key(p.as_str()));
            let preds: Vec<NodeIndex> = found.iter().map(|p| names[p.as_str()].0).collect();
            let dangling: Vec<String> = dangling.into_iter().cloned().collect();
            if let Some(e) = comp.instr_mut(n).extras.as_deref_mut() {
                e.dangling_control_predecessors = dangling;
            }
            comp.set_control_parsed(n, preds);
        }
        comp.set_root_parsed(
            root.map(|r| r.0).or_else(|| nodes.iter().rev().flatten().next().copied()),
        );
        // (Unless its instructions were all rejected already.)
        let body = c.header.name.span.to(c.close);
        let errors_inside = self.diags.iter().any(|d| {
            d.is_error() && d.span.is_some_and(|s| s.start >= body.start && s.end <= body.end)
        });
        if c.instrs.is_empty() && !errors_inside {
            self.diags.push(
                Diagnostic::error(
                    c.header.name.span,
                    format!("computation `{}` has no instructions", c.header.name.text),
                )
                .with_note(c.close, "the body ends here"),
            );
        }
        // The statements are spent: free them here (on this computation's thread).
        drop(std::mem::take(&mut c.instrs));
        comp
    }

    /// Resolves a large module's computations on two threads, in two phases: the
    /// instructions (the module's statements cut in the middle, wherever that falls), then
    /// the graphs (the computations cut where half the statements lie before). Each thread
    /// has a resolver of its own over the shared computation table; sequence numbers start
    /// where the one-thread order puts them (`bases`, from [`parallel_plan`]), so the module
    /// is the same either way. Diagnostics are merged; `parse` sorts them by position.
    /// Also returns the first id no instruction takes ([`Module::ids_taken_by`]), which
    /// the threads find as they build.
    fn computations_in_parallel(
        &mut self,
        asts: &mut [CompAst<'a>],
        bases: &[u32],
        broken: &[&'a str],
    ) -> (Vec<Computation>, u32) {
        type Segment<'s, 'a> = (usize, usize, &'s mut [Box<ast::Instr<'a>>]);
        let counts: Vec<usize> = asts.iter().map(|c| c.instrs.len()).collect();
        let (src, table, written_comps) = (self.src, self.table, self.written_comps);

        // Phase 1: build the instructions.
        let (mut first, mut second): (Vec<Segment<'_, 'a>>, Vec<Segment<'_, 'a>>) =
            (Vec::new(), Vec::new());
        let mid = halves::middle(&counts);
        for (i, c) in asts.iter_mut().enumerate() {
            let at = halves::share(0, i, c.instrs.len(), mid).end;
            let (x, y) = c.instrs.split_at_mut(at);
            if !x.is_empty() {
                first.push((i, 0, x));
            }
            if !y.is_empty() {
                second.push((i, at, y));
            }
        }
        // Each half also finds the ids its instructions take.
        let build =
            move |segments: Vec<Segment<'_, 'a>>| -> (Vec<(usize, Vec<Built>, Diagnostics)>, u32) {
                let mut taken = 0;
                let parts = segments
                    .into_iter()
                    .map(|(i, from, part)| {
                        let mut diags = Diagnostics::new();
                        let mut w = Resolver::new(src, &mut diags, table, written_comps);
                        (w.current, w.seq) = (i, bases[i] + from as u32);
                        let built = part
                            .iter_mut()
                            .map(|ins| {
                                let b = w.build(ins);
                                if let (Ok(i), _) = &b {
                                    taken = taken.max(Module::ids_taken_by(i));
                                }
                                b
                            })
                            .collect();
                        (i, built, diags)
                    })
                    .collect();
                (parts, taken)
            };
        let ((a, ta), (b, tb)) = halves::both(|| build(first), || build(second));
        // Compact tuple indices become get-tuple-elements named `<t>.gte<i>.<seq>`, with
        // sequence numbers below the last base.
        let ids_taken = ta.max(tb).max(bases[asts.len()]);
        let mut built: Vec<Vec<Built>> = (0..asts.len()).map(|_| Vec::new()).collect();
        let mut diags: Vec<Diagnostics> = (0..asts.len()).map(|_| Diagnostics::new()).collect();
        for (i, part, d) in a.into_iter().chain(b) {
            if built[i].is_empty() {
                built[i] = part;
            } else {
                built[i].extend(part);
            }
            diags[i].extend(d);
        }

        // Phase 2: assemble the graphs.
        let cut = halves::group_cut(&counts);
        let (lo, hi) = asts.split_at_mut(cut);
        let (hi_built, hi_diags) = (built.split_off(cut), diags.split_off(cut));
        let counts = &counts[..];
        let assemble = move |offset: usize,
                             asts: &mut [CompAst<'a>],
                             built: Vec<Vec<Built>>,
                             early: Vec<Diagnostics>| {
            let mut diags = Diagnostics::new();
            let mut w = Resolver::new(src, &mut diags, table, written_comps);
            let no_names = HashSet::new();
            let comps: Vec<Computation> = asts
                .iter_mut()
                .zip(built.into_iter().zip(early))
                .enumerate()
                .map(|(k, (c, (built, early)))| {
                    let i = offset + k;
                    w.current = i;
                    w.seq = bases[i] + counts[i] as u32;
                    w.diags.extend(early);
                    w.assemble(c, built, &no_names, broken)
                })
                .collect();
            (comps, diags)
        };
        let ((mut comps, da), (rest, db)) = halves::both(
            || assemble(0, lo, built, diags),
            || assemble(cut, hi, hi_built, hi_diags),
        );
        comps.extend(rest);
        self.diags.extend(da);
        self.diags.extend(db);
        self.seq = bases[asts.len()];
        (comps, ids_taken)
    }

    /// The async shorthand `X-start` / `X-update` / `X-done` of an op `X` that has no
    /// async opcode of its own (`custom-call-start(...)`): the start wraps `X`, with its
    /// attributes, in a computation of its own (named `<start>.wrapped`) and becomes
    /// `async-start(...), calls=` of it; update and done become `async-update` /
    /// `async-done`. `None` when the opcode is no such shorthand.
    fn async_shorthand(
        &mut self,
        ins: &ast::Instr<'a>,
        shape: &Shape,
    ) -> Option<Result<Instr, ()>> {
        let text = ins.opcode.text;
        let (base, kind) = [
            ("-start", Opcode::AsyncStart),
            ("-update", Opcode::AsyncUpdate),
            ("-done", Opcode::AsyncDone),
        ]
        .into_iter()
        .find_map(|(suffix, kind)| Some((text.strip_suffix(suffix)?, kind)))?;
        let base_op = Opcode::from_name(base)?;
        if matches!(
            base_op,
            Opcode::AsyncStart
                | Opcode::AsyncUpdate
                | Opcode::AsyncDone
                | Opcode::Parameter
                | Opcode::Constant
        ) {
            return None;
        }
        if kind != Opcode::AsyncStart {
            let mut i = Instr::new(
                ins.name.text,
                Op::Async { opcode: kind, calls: None, sugar: Some(base_op) },
                shape.clone(),
            );
            i.span = ins.name.span;
            i.extent = ins.span;
            i.seq = self.next_seq();
            // The thread it names is checked against its start's by the verifier.
            if let Some(a) = ins.attrs.iter().find(|a| a.name == "async_execution_thread") {
                let v = self.src[a.value_span().range()].to_string();
                i.extras_mut().kept.push(("async_execution_thread".to_string(), v));
            }
            return Some(Ok(i));
        }
        let parts = match shape {
            Shape::Tuple(v) if v.len() >= 2 && matches!(v[0], Shape::Tuple(_)) => v,
            _ => {
                self.diags.push(
                    Diagnostic::error(ins.opcode.span, format!("`{text}` needs the shape `((operands...), result, context...)`"))
                        .with_label(format!("the async start of `{base}`"))
                        .with_help("e.g. `s = ((f32[4]), f32[4], s32[]) custom-call-start(x), custom_call_target=\"foo\"`"),
                );
                return Some(Err(()));
            }
        };
        let Shape::Tuple(operand_shapes) = &parts[0] else { return None };
        // The wrapped op, built from the same statement with the base opcode; the thread
        // the async op runs on is the start's, not the wrapped op's.
        let mut inner_ast = ins.clone();
        inner_ast.opcode.text = base;
        inner_ast.attrs.retain(|a| a.name != "async_execution_thread");
        let thread = ins
            .attrs
            .iter()
            .find(|a| a.name == "async_execution_thread")
            .map(|a| self.src[a.value_span().range()].to_string());
        let mut inner = match self.instr(&inner_ast, parts[1].clone()) {
            Ok(i) => i,
            Err(()) => return Some(Err(())),
        };
        let name = unused_name(&format!("{}.wrapped", ins.name.text), |n| {
            self.table.ids.contains_key(n) || self.extra.iter().any(|c| c.name == n)
        });
        let mut wrapped = Computation::new(name);
        wrapped.span = ins.opcode.span;
        wrapped.execution_thread = thread.as_deref().map(|t| t.trim_matches('"').to_string());
        let params: Vec<NodeIndex> = operand_shapes
            .iter()
            .enumerate()
            .map(|(k, s)| {
                let mut p = Instr::new(
                    format!("param_{k}"),
                    Op::Parameter { number: k as u32, replication: None },
                    s.clone(),
                );
                p.span = ins.opcode.span;
                p.seq = self.next_seq();
                wrapped.insert(p)
            })
            .collect();
        inner.name = format!("{}.inner", ins.name.text);
        let root = wrapped.insert(inner);
        for (slot, &p) in params.iter().enumerate() {
            wrapped.link(p, root, slot as u32);
        }
        wrapped.set_root_parsed(Some(root));
        let id = CompId((self.written_comps + self.extra.len()) as u32);
        self.extra.push(wrapped);
        let mut i = Instr::new(
            ins.name.text,
            Op::Async { opcode: Opcode::AsyncStart, calls: Some(id), sugar: None },
            shape.clone(),
        );
        i.span = ins.name.span;
        i.extent = ins.span;
        i.seq = self.next_seq();
        if let Some(v) = thread {
            i.extras_mut().kept.push(("async_execution_thread".to_string(), v));
        }
        Some(Ok(i))
    }

    /// Materialises `%t#1#0` as get-tuple-element instructions.
    fn compact_gte(
        &mut self,
        comp: &mut Computation,
        mut src: NodeIndex,
        slot: u32,
        user: NodeIndex,
        idx: &[i64],
    ) {
        for &i in idx {
            let shape = match comp
                .instr(src)
                .shape
                .tuple_elements()
                .and_then(|t| t.get(usize::try_from(i).ok()?))
            {
                Some(s) => s.clone(),
                None => {
                    let name = comp.instr(src).name.clone();
                    let span = comp.instr(user).span;
                    self.diags.push(Diagnostic::error(
                        span,
                        format!("tuple index {i} is out of range for `{name}`"),
                    ));
                    return;
                }
            };
            let name = format!("{}.gte{}.{}", comp.instr(src).name, i, self.seq);
            let mut g = Instr::new(name, Op::GetTupleElement { index: i }, shape);
            g.seq = self.next_seq();
            let gn = comp.insert(g);
            comp.link(src, gn, 0);
            src = gn;
        }
        comp.link(src, user, slot);
    }

    fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq - 1
    }

    /// Builds an instruction; errors are recorded and reported as `Err(())`.
    fn instr(&mut self, ins: &ast::Instr<'a>, shape: Shape) -> Result<Instr, ()> {
        let Some(opcode) = Opcode::from_name(ins.opcode.text) else {
            if let Some(r) = self.async_shorthand(ins, &shape) {
                return r;
            }
            let mut d =
                Diagnostic::error(ins.opcode.span, format!("unknown opcode `{}`", ins.opcode.text))
                    .with_label("not an HLO opcode");
            if let Some(s) = Opcode::suggest(ins.opcode.text) {
                d = d.with_help(format!("did you mean `{}`?", s.name()));
            }
            self.diags.push(d);
            return Err(());
        };
        let mut attrs = Attrs {
            list: Vec::with_capacity(ins.attrs.len()),
            opcode: ins.opcode.text,
            opcode_span: ins.opcode.span,
            errors: Vec::new(),
        };
        for a in &ins.attrs {
            if let Some(prev) = attrs.list.iter().flatten().find(|p| p.name == a.name) {
                attrs.errors.push(
                    Diagnostic::error(a.name_span, format!("duplicate attribute `{}`", a.name))
                        .with_note(prev.name_span, "first given here"),
                );
                continue;
            }
            attrs.list.push(Some(a));
        }
        let refs = ins.args.iter().filter(|a| matches!(a, Arg::Ref { .. } | Arg::Anon(_))).count();
        let op = self.op(opcode, ins, &shape, &mut attrs);
        let mut instr = match op {
            Ok(op) => Instr::new(ins.name.text, op, shape),
            Err(e) => {
                attrs.errors.push(e);
                Instr::new(ins.name.text, Op::Plain(opcode), shape)
            }
        };
        if !matches!(opcode, Opcode::Constant | Opcode::Parameter) {
            if let Some(Arg::Lit(t)) = ins.args.iter().find(|a| matches!(a, Arg::Lit(_))) {
                attrs.errors.push(
                    Diagnostic::error(
                        t.span(),
                        format!("`{}` takes operand names, not literals", opcode.name()),
                    )
                    .with_help(
                        "only `constant(...)` and `parameter(N)` take a value in parentheses",
                    ),
                );
            }
            let arity = opcode.arity();
            let n = refs + ins.args.iter().filter(|a| matches!(a, Arg::Lit(_))).count();
            if !arity.accepts(n) {
                attrs.errors.push(
                    Diagnostic::error(
                        ins.args_span,
                        format!(
                            "`{}` takes {}, but {n} {} given",
                            opcode.name(),
                            arity.describe(),
                            if n == 1 { "was" } else { "were" }
                        ),
                    )
                    .with_label("wrong number of operands"),
                );
            }
        }
        self.common(&mut instr, &mut attrs);
        for a in attrs.list.iter().flatten() {
            attrs.errors.push(unexpected_attr(a, opcode));
        }
        instr.span = ins.name.span;
        instr.extent = ins.span;
        instr.seq = self.next_seq();
        let failed = !attrs.errors.is_empty();
        for e in attrs.errors {
            self.diags.push(e);
        }
        if failed { Err(()) } else { Ok(instr) }
    }

    fn common(&mut self, instr: &mut Instr, attrs: &mut Attrs<'_, 'a>) {
        let src = self.src;
        instr.sharding = attrs.opt("sharding", |t| av::sharding(t, src)).map(Box::new);
        if let Some(m) = attrs.opt("metadata", |t| match av::one(t, "metadata")? {
            Tt::Tok(Tok::RawBraced(raw), sp) => av::metadata_raw(raw, sp.start as usize, src),
            t => av::metadata(t, src),
        }) {
            instr.metadata = Some(Box::new(m));
        }
        let mut ex = Extras {
            frontend_attributes: attrs.raw("frontend_attributes", src),
            backend_config: attrs.raw("backend_config", src),
            dangling_control_predecessors: Vec::new(),
            statistics: attrs.raw("statistics", src),
            result_accuracy: attrs.take("result_accuracy").and_then(|a| {
                let text = src[a.value_span().range()].to_string();
                match result_accuracy_error(&instr.op, &text) {
                    Some(why) => {
                        attrs.errors.push(
                            Diagnostic::error(a.name_span, why).with_label("not accepted here"),
                        );
                        None
                    }
                    None => Some(text),
                }
            }),
            origin: attrs.raw("origin", src),
            kept: Vec::new(),
        };
        for &(ops, name) in KEPT_ATTRS {
            if (ops.is_empty() || ops.contains(&instr.op.opcode()))
                && let Some(v) = attrs.raw(name, src)
            {
                ex.kept.push((name.to_string(), v));
            }
        }
        if let Some(names) = attrs.opt("control-predecessors", |t| {
            av::group_items(
                av::one(t, "a list of instructions")?,
                Tok::LBrace,
                "a list like `{%a, %b}`",
            )?
            .into_iter()
            .map(|t| match t {
                Tt::Tok(Tok::Ident(s) | Tok::PctIdent(s), _) => Ok(s.to_string()),
                t => Err(Diagnostic::error(t.span(), "expected an instruction name")),
            })
            .collect::<R<Vec<_>>>()
        }) {
            ex.dangling_control_predecessors = names;
        }
        if ex != Extras::default() {
            instr.extras = Some(Box::new(ex));
        }
    }

    fn op(
        &mut self,
        opcode: Opcode,
        ins: &ast::Instr<'a>,
        shape: &Shape,
        a: &mut Attrs<'_, 'a>,
    ) -> R<Op> {
        use Opcode as O;
        let dims = av::int_list;
        Ok(match opcode {
            O::Parameter => {
                let number = match ins.args.as_slice() {
                    [Arg::Lit(Tt::Tok(Tok::Int(s), sp))] => {
                        let n = av::int_tok(s, *sp)?;
                        u32::try_from(n).map_err(|_| {
                            Diagnostic::error(*sp, format!("invalid parameter number {n}"))
                                .with_label("must be 0 or more")
                        })?
                    }
                    _ => {
                        return Err(Diagnostic::error(
                            ins.args_span,
                            "`parameter` takes its number in parentheses",
                        )
                        .with_help("write e.g. `p0 = f32[8] parameter(0)`"));
                    }
                };
                Op::Parameter { number, replication: a.opt("parameter_replication", av::bool_list) }
            }
            O::Constant => Op::Constant(self.constant(ins, shape)?),
            O::Iota => Op::Iota { dimension: a.req("iota_dimension", av::int)? },
            O::GetTupleElement => Op::GetTupleElement { index: a.req("index", av::int)? },
            O::Compare => Op::Compare {
                direction: a.req("direction", |t| {
                    av::keyword(t, &CmpDirection::ALL, "comparison direction")
                })?,
                kind: a.opt("type", |t| av::keyword(t, &CmpType::ALL, "comparison type")),
            },
            O::Broadcast => {
                Op::Broadcast { dimensions: a.opt("dimensions", dims).unwrap_or_default() }
            }
            O::Reshape => Op::Reshape { inferred_dimension: a.opt("inferred_dimension", av::int) },
            O::Transpose => Op::Transpose { dimensions: a.req("dimensions", dims)? },
            O::Reverse => Op::Reverse { dimensions: a.req("dimensions", dims)? },
            O::Concatenate => Op::Concatenate {
                dimension: single(a.req("dimensions", dims)?, ins.opcode.span, "concatenate")?,
            },
            O::Slice => Op::Slice { ranges: a.req("slice", av::slice_ranges)? },
            O::DynamicSlice => Op::DynamicSlice { sizes: a.req("dynamic_slice_sizes", dims)? },
            O::Pad => Op::Pad { config: a.req("padding", av::padding)? },
            O::ReducePrecision => Op::ReducePrecision {
                exponent_bits: a.req("exponent_bits", av::int)?,
                mantissa_bits: a.req("mantissa_bits", av::int)?,
            },
            O::Gather => Op::Gather(Box::new(GatherDims {
                offset_dims: a.req("offset_dims", dims)?,
                collapsed_slice_dims: a.req("collapsed_slice_dims", dims)?,
                start_index_map: a.req("start_index_map", dims)?,
                operand_batching_dims: a.opt("operand_batching_dims", dims).unwrap_or_default(),
                start_indices_batching_dims: a
                    .opt("start_indices_batching_dims", dims)
                    .unwrap_or_default(),
                index_vector_dim: a.req("index_vector_dim", av::int)?,
                slice_sizes: a.req("slice_sizes", dims)?,
                indices_are_sorted: a.flag("indices_are_sorted"),
            })),
            O::Scatter => Op::Scatter(Box::new(ScatterDims {
                update_window_dims: a.req("update_window_dims", dims)?,
                inserted_window_dims: a.req("inserted_window_dims", dims)?,
                scatter_dims_to_operand_dims: a.req("scatter_dims_to_operand_dims", dims)?,
                input_batching_dims: a.opt("input_batching_dims", dims).unwrap_or_default(),
                scatter_indices_batching_dims: a
                    .opt("scatter_indices_batching_dims", dims)
                    .unwrap_or_default(),
                index_vector_dim: a.req("index_vector_dim", av::int)?,
                indices_are_sorted: a.flag("indices_are_sorted"),
                unique_indices: a.flag("unique_indices"),
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
            })),
            O::Reduce => Op::Reduce {
                dimensions: a.req("dimensions", dims)?,
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
            },
            O::ReduceWindow => Op::ReduceWindow {
                window: a.opt("window", av::window).unwrap_or_default(),
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
            },
            O::SelectAndScatter => Op::SelectAndScatter {
                window: a.opt("window", av::window).unwrap_or_default(),
                select: a.req("select", |t| self.comp_ref(t))?,
                scatter: a.req("scatter", |t| self.comp_ref(t))?,
            },
            O::Map => Op::Map {
                dimensions: a.opt("dimensions", dims),
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
            },
            O::Sort => Op::Sort {
                dimension: single(a.req("dimensions", dims)?, ins.opcode.span, "sort")?,
                is_stable: a.flag("is_stable"),
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
            },
            O::TopK => Op::TopK {
                k: a.req("k", av::int)?,
                largest: a.opt("largest", av::boolean),
                is_stable: a.flag("is_stable"),
            },
            O::Scan => Op::Scan {
                dimension: single(a.req("dimensions", dims)?, ins.opcode.span, "scan")?,
                num_carries: a.req("num_carries", av::int)?,
                is_reverse: a.flag("is_reverse"),
                is_associative: a.opt("is_associative", av::boolean),
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
            },
            O::Dot | O::RaggedDot | O::ScaledDot => Op::Dot {
                opcode,
                dims: Box::new(DotDims {
                    lhs_batch: a.opt("lhs_batch_dims", dims).unwrap_or_default(),
                    lhs_contracting: a.opt("lhs_contracting_dims", dims).unwrap_or_default(),
                    rhs_batch: a.opt("rhs_batch_dims", dims).unwrap_or_default(),
                    rhs_contracting: a.opt("rhs_contracting_dims", dims).unwrap_or_default(),
                    lhs_ragged: a.opt("lhs_ragged_dims", dims).unwrap_or_default(),
                    rhs_group: a.opt("rhs_group_dims", dims).unwrap_or_default(),
                    precision: a.opt("operand_precision", precisions).unwrap_or_default(),
                    algorithm: a.opt("algorithm", |t| {
                        av::word(t, "a dot algorithm").map(|w| w.0.to_string())
                    }),
                }),
            },
            O::Convolution => Op::Convolution(Box::new(Convolution {
                window: a.opt("window", av::window).unwrap_or_default(),
                dims: a.req("dim_labels", av::dim_labels)?,
                feature_group_count: a.opt("feature_group_count", av::int).unwrap_or(1),
                batch_group_count: a.opt("batch_group_count", av::int).unwrap_or(1),
                precision: a.opt("operand_precision", precisions).unwrap_or_default(),
                kind: a.opt("convolution_kind", |t| {
                    av::word(t, "fprop, wgrad or dgrad").map(|w| w.0.to_string())
                }),
            })),
            O::BatchNormGrad | O::BatchNormInference | O::BatchNormTraining => Op::BatchNorm {
                opcode,
                epsilon: a.req("epsilon", av::float)?,
                feature_index: a.req("feature_index", av::int)?,
            },
            O::Cholesky => Op::Cholesky { lower: a.flag("lower") },
            O::TriangularSolve => Op::TriangularSolve {
                left_side: a.flag("left_side"),
                lower: a.flag("lower"),
                unit_diagonal: a.flag("unit_diagonal"),
                transpose_a: a.opt("transpose_a", |t| {
                    av::word(t, "NO_TRANSPOSE, TRANSPOSE or ADJOINT").map(|w| w.0.to_string())
                }),
            },
            O::Fft => Op::Fft {
                fft_type: a.req("fft_type", |t| {
                    av::word(t, "FFT, IFFT, RFFT or IRFFT").map(|w| w.0.to_string())
                })?,
                fft_length: a.req("fft_length", dims)?,
            },
            O::While => Op::While {
                condition: a.req("condition", |t| self.comp_ref(t))?,
                body: a.req("body", |t| self.comp_ref(t))?,
            },
            O::Conditional => {
                if let Some(b) = a.opt("branch_computations", |t| self.comp_list(t)) {
                    Op::Conditional(Branches::Indexed(b))
                } else {
                    Op::Conditional(Branches::TrueFalse(
                        a.req("true_computation", |t| self.comp_ref(t))?,
                        a.req("false_computation", |t| self.comp_ref(t))?,
                    ))
                }
            }
            O::Call => Op::Call {
                to_apply: a.req("to_apply", |t| self.comp_ref(t))?,
                is_composite: a.flag("is_composite"),
            },
            O::Fusion => Op::Fusion {
                kind: a.req("kind", |t| av::keyword(t, &FusionKind::ALL, "fusion kind"))?,
                calls: a.req("calls", |t| self.comp_ref(t))?,
                output_to_operand_aliasing: a
                    .opt("output_to_operand_aliasing", av::aliasing)
                    .unwrap_or_default(),
            },
            O::CustomCall => {
                let src = self.src;
                let mut cc = CustomCall {
                    target: a.req("custom_call_target", av::string)?,
                    api_version: a.opt("api_version", |t| {
                        const KNOWN: [&str; 5] = [
                            "API_VERSION_UNSPECIFIED",
                            "API_VERSION_ORIGINAL",
                            "API_VERSION_STATUS_RETURNING",
                            "API_VERSION_STATUS_RETURNING_UNIFIED",
                            "API_VERSION_TYPED_FFI",
                        ];
                        let (w, sp) = av::word(t, "an API version")?;
                        if w == "API_VERSION_UNSPECIFIED" {
                            return Err(Diagnostic::error(
                                sp,
                                "`API_VERSION_UNSPECIFIED` is not a version a custom-call may have",
                            )
                            .with_help("leave `api_version` out for the original API, or name one of the others"));
                        }
                        if !KNOWN.contains(&w) {
                            return Err(Diagnostic::error(
                                sp,
                                format!("unknown custom-call API version `{w}`"),
                            )
                            .with_help(format!("one of {}", KNOWN.join(", "))));
                        }
                        Ok(w.to_string())
                    }),
                    has_side_effect: a.flag("custom_call_has_side_effect"),
                    operand_layout_constraints: None,
                    output_to_operand_aliasing: a
                        .opt("output_to_operand_aliasing", av::aliasing)
                        .unwrap_or_default(),
                    called_computations: a
                        .opt("called_computations", |t| self.comp_list(t))
                        .unwrap_or_default(),
                    to_apply: a.opt("to_apply", |t| self.comp_ref(t)),
                    extra: Vec::new(),
                };
                if let Some(at) = a.take("operand_layout_constraints")
                    && let AttrValue::Shapes(s) = &at.value
                {
                    cc.operand_layout_constraints = Some(s.clone());
                }
                if let Some(at) = a.list.iter().flatten().find(|x| x.name == "literal")
                    && matches!(at.value, AttrValue::Tts(_))
                    && let Err(e) = check_tuple_literal(src, at.value_span())
                {
                    a.errors.push(e);
                }
                for name in [
                    "window",
                    "dim_labels",
                    "feature_group_count",
                    "batch_group_count",
                    "literal",
                    "schedule",
                    "padding_type",
                    "operand_precision",
                ] {
                    if let Some(v) = a.raw(name, src) {
                        cc.extra.push((name.to_string(), v));
                    }
                }
                Op::CustomCall(Box::new(cc))
            }
            O::AllReduce
            | O::AllReduceStart
            | O::AllGather
            | O::AllGatherStart
            | O::ReduceScatter
            | O::AllToAll
            | O::CollectivePermute
            | O::CollectivePermuteStart
            | O::CollectiveBroadcast
            | O::RaggedAllToAll => {
                let needs_dims =
                    matches!(opcode, O::AllGather | O::AllGatherStart | O::ReduceScatter);
                let needs_reducer =
                    matches!(opcode, O::AllReduce | O::AllReduceStart | O::ReduceScatter);
                let src = self.src;
                // `replica_groups=mesh[...], device_ids=(...) {...}`: XLA prints the device
                // list and the axis selection after a comma, as an attribute of their own.
                let mesh_ids = a.opt("device_ids", |t| av::mesh_device_ids(t, src));
                let mut replica_groups = a.opt("replica_groups", |t| match (&mesh_ids, t) {
                    (Some((_, sel)), [Tt::Tok(Tok::Ident("mesh"), _), axes]) => {
                        av::mesh_groups(axes, sel.clone())
                    }
                    _ => av::replica_groups(t, src),
                });
                if let (Some(crate::op::ReplicaGroups::Mesh { device_ids, .. }), Some((ids, _))) =
                    (&mut replica_groups, mesh_ids)
                {
                    *device_ids = Some(ids);
                }
                let c = CollectiveAttrs {
                    replica_groups,
                    channel_id: a.opt("channel_id", av::int),
                    use_global_device_ids: a.flag("use_global_device_ids"),
                    constrain_layout: a.flag("constrain_layout"),
                    dimensions: if needs_dims {
                        Some(a.req("dimensions", dims)?)
                    } else {
                        a.opt("dimensions", dims)
                    },
                    to_apply: if needs_reducer {
                        Some(a.req("to_apply", |t| self.comp_ref(t))?)
                    } else {
                        None
                    },
                    source_target_pairs: if matches!(
                        opcode,
                        O::CollectivePermute | O::CollectivePermuteStart
                    ) {
                        Some(a.req("source_target_pairs", av::source_target_pairs)?)
                    } else {
                        None
                    },
                };
                Op::Collective { opcode, attrs: Box::new(c) }
            }
            O::AsyncStart => Op::Async {
                opcode,
                calls: Some(a.req("calls", |t| self.comp_ref(t))?),
                sugar: None,
            },
            // `-update`/`-done` may leave `calls` out: it is their `async-start`'s.
            O::AsyncUpdate | O::AsyncDone => {
                Op::Async { opcode, calls: a.opt("calls", |t| self.comp_ref(t)), sugar: None }
            }
            O::CopyStart => Op::CopyStart {
                cross_program_prefetch_index: a.opt("cross_program_prefetch_index", av::int),
            },
            // XLA's parser requires the channel on every send/recv op.
            O::Send | O::Recv | O::SendDone | O::RecvDone => Op::SendRecv {
                opcode,
                channel_id: Some(a.req("channel_id", av::int)?),
                is_host_transfer: a.flag("is_host_transfer"),
            },
            O::Infeed => Op::Infeed { config: a.opt("infeed_config", av::string) },
            O::Outfeed => Op::Outfeed {
                config: a.opt("outfeed_config", av::string),
                shape: a.take("outfeed_shape").and_then(|at| {
                    if let AttrValue::Shape(s) = &at.value { Some((**s).clone()) } else { None }
                }),
            },
            O::Rng => Op::Rng {
                distribution: a.req("distribution", |t| {
                    av::keyword(
                        t,
                        &[
                            (RngDistribution::Uniform, "rng_uniform"),
                            (RngDistribution::Normal, "rng_normal"),
                        ],
                        "distribution",
                    )
                })?,
            },
            O::RngBitGenerator => Op::RngBitGenerator {
                algorithm: a.req("algorithm", |t| {
                    av::keyword(
                        t,
                        &[
                            (RngAlgorithm::Default, "rng_default"),
                            (RngAlgorithm::ThreeFry, "rng_three_fry"),
                            (RngAlgorithm::Philox, "rng_philox"),
                        ],
                        "RNG algorithm",
                    )
                })?,
            },
            O::RngGetAndUpdateState => Op::RngGetAndUpdateState { delta: a.req("delta", av::int)? },
            O::GetDimensionSize => Op::GetDimensionSize {
                dimension: single(
                    a.req("dimensions", dims)?,
                    ins.opcode.span,
                    "get-dimension-size",
                )?,
            },
            O::SetDimensionSize => Op::SetDimensionSize {
                dimension: single(
                    a.req("dimensions", dims)?,
                    ins.opcode.span,
                    "set-dimension-size",
                )?,
            },
            O::Domain => Op::Domain { raw: a.raw("domain", self.src).unwrap_or_default() },
            _ => Op::Plain(opcode),
        })
    }

    fn constant(&mut self, ins: &ast::Instr<'a>, shape: &Shape) -> R<Literal> {
        let tt: Tt<'a> = match ins.args.as_slice() {
            [Arg::Lit(t)] => t.clone(),
            [Arg::Ref { shape: None, name, gte }] if gte.is_empty() => {
                Tt::Tok(Tok::Ident(name.text), name.span)
            }
            _ => {
                return Err(Diagnostic::error(ins.args_span, "`constant` takes one literal")
                    .with_help(
                        "write e.g. `c = f32[2] constant({1, 2})` or `c = f32[] constant(0.5)`",
                    ));
            }
        };
        literal(&tt, shape)
    }

    fn header(&mut self, h: &ast::ModuleHeader<'a>) -> Header {
        let mut hdr = Header::default();
        let mut seen: Vec<&str> = Vec::new();
        for at in &h.attrs {
            if seen.contains(&at.name) {
                self.diags.push(Diagnostic::error(
                    at.name_span,
                    format!("duplicate module attribute `{}`", at.name),
                ));
                continue;
            }
            seen.push(at.name);
            let tts: &[Tt<'a>] = match &at.value {
                AttrValue::Tts(t) => t,
                AttrValue::EntryLayout(pr) => {
                    hdr.entry_layout = Some((pr.0.clone(), pr.1.clone()));
                    hdr.entry_layout_span = Some(at.name_span);
                    continue;
                }
                _ => {
                    self.diags.push(Diagnostic::error(
                        at.span,
                        format!("unexpected module attribute `{}`", at.name),
                    ));
                    continue;
                }
            };
            let raw = || self.src[at.value_span().range()].to_string();
            let res: R<()> = (|| {
                match at.name {
                    "is_scheduled" => hdr.is_scheduled = Some(av::boolean(tts)?),
                    "input_output_alias" => hdr.input_output_alias = Some(av::aliasing(tts)?),
                    "buffer_donor" => hdr.buffer_donor = Some(av::buffer_donors(tts)?),
                    "alias_passthrough_params" => {
                        hdr.alias_passthrough_params = Some(av::boolean(tts)?)
                    }
                    "replica_count" => hdr.replica_count = Some(av::int(tts)?),
                    "num_partitions" => hdr.num_partitions = Some(av::int(tts)?),
                    "allow_spmd_sharding_propagation_to_parameters" => {
                        hdr.allow_spmd_sharding_propagation_to_parameters =
                            Some(av::bool_list(tts)?)
                    }
                    "allow_spmd_sharding_propagation_to_output" => {
                        hdr.allow_spmd_sharding_propagation_to_output = Some(av::bool_list(tts)?)
                    }
                    "frontend_attributes" => hdr.frontend_attributes = Some(raw()),
                    "origin_recovery_table" => hdr.extra.push((at.name.to_string(), raw())),
                    other => {
                        return Err(Diagnostic::error(at.name_span, format!("unknown module attribute `{other}`")).with_help(
                            "module attributes are is_scheduled, input_output_alias, buffer_donor, entry_computation_layout, allow_spmd_sharding_propagation_to_parameters/_output, replica_count, num_partitions, frontend_attributes",
                        ));
                    }
                }
                Ok(())
            })();
            if let Err(e) = res {
                self.diags.push(e);
            }
        }
        hdr
    }

    fn frames(&mut self, f: &ast::FrameTables<'a>) -> FrameTables {
        let mut t = FrameTables {
            file_names: f.file_names.iter().map(|(s, _)| av::unquote(s)).collect(),
            function_names: f.function_names.iter().map(|(s, _)| av::unquote(s)).collect(),
            ..FrameTables::default()
        };
        let get = |row: &ast::Row<'a>, key: &str, diags: &mut Diagnostics| -> i64 {
            match row.1.iter().find(|(k, _, _)| *k == key) {
                Some((_, v, sp)) => v.parse().unwrap_or_else(|_| {
                    diags.push(Diagnostic::error(*sp, format!("bad `{key}` value")));
                    0
                }),
                None => 0,
            }
        };
        for row in &f.file_locations {
            t.file_locations.push(FileLocation {
                file_name_id: get(row, "file_name_id", self.diags),
                function_name_id: get(row, "function_name_id", self.diags),
                line: get(row, "line", self.diags),
                end_line: get(row, "end_line", self.diags),
                column: get(row, "column", self.diags),
                end_column: get(row, "end_column", self.diags),
            });
        }
        for row in &f.stack_frames {
            t.stack_frames.push(StackFrame {
                file_location_id: get(row, "file_location_id", self.diags),
                parent_frame_id: get(row, "parent_frame_id", self.diags),
            });
        }
        t
    }
}

/// The result shape of an instruction written without one, for the opcodes whose shape
/// follows directly from their operands (as XLA's parser does); `None` otherwise.
fn infer_omitted_shape(comp: &Computation, n: NodeIndex) -> Option<Shape> {
    let ops = comp.operands(n);
    let shape = |k: usize| ops.get(k).map(|&o| comp.instr(o).shape.clone());
    let op = &comp.instr(n).op;
    let with_elem = |s: Shape, e: ElemType| match s {
        Shape::Array(mut a) => {
            a.elem = e;
            Some(Shape::Array(a))
        }
        _ => None,
    };
    match op {
        Op::Compare { .. } => with_elem(shape(0)?, ElemType::Pred),
        Op::Plain(Opcode::IsFinite) => with_elem(shape(0)?, ElemType::Pred),
        Op::Plain(Opcode::Select | Opcode::Clamp) => shape(1),
        Op::Plain(Opcode::Tuple) => {
            Some(Shape::Tuple(ops.iter().map(|&o| comp.instr(o).shape.clone()).collect()))
        }
        Op::Plain(Opcode::AfterAll) => Some(Shape::Token),
        Op::GetTupleElement { index } => {
            shape(0)?.tuple_elements()?.get(usize::try_from(*index).ok()?).cloned()
        }
        Op::Plain(o)
            if o.is_elementwise()
                && !matches!(
                    o,
                    Opcode::Convert
                        | Opcode::StochasticConvert
                        | Opcode::Complex
                        | Opcode::Real
                        | Opcode::Imag
                ) =>
        {
            shape(0)
        }
        Op::Plain(Opcode::Copy | Opcode::OptBarrier) => shape(0),
        // The loop state keeps its shape.
        Op::While { .. } => shape(0),
        _ => None,
    }
}

fn single(v: Vec<i64>, span: Span, op: &str) -> R<i64> {
    match v.as_slice() {
        [d] => Ok(*d),
        _ => Err(Diagnostic::error(
            span,
            format!("`{op}` takes exactly one dimension in `dimensions={{d}}`"),
        )),
    }
}

fn precisions(tts: &[Tt<'_>]) -> R<Vec<Precision>> {
    av::group_items(
        av::one(tts, "a precision list")?,
        Tok::LBrace,
        "a list like `{default,highest}`",
    )?
    .into_iter()
    .map(|t| av::keyword(std::slice::from_ref(t), &Precision::ALL, "precision"))
    .collect()
}

fn unexpected_attr(a: &ast::Attr<'_>, opcode: Opcode) -> Diagnostic {
    let d = Diagnostic::error(
        a.name_span,
        format!("unexpected attribute `{}` for `{}`", a.name, opcode.name()),
    )
    .with_label("not an attribute of this opcode");
    if COMMON_ATTRS.contains(&a.name) {
        d
    } else {
        d.with_help(format!("`{}` does not take `{}=`; check the spelling", opcode.name(), a.name))
    }
}

fn closest<'n>(name: &str, candidates: impl Iterator<Item = &'n str>) -> Option<&'n str> {
    candidates
        .map(|c| (edit_distance(name, c), c))
        .filter(|&(d, c)| d <= 2.max(c.len() / 4) && d > 0)
        .min()
        .map(|(_, c)| c)
}

// ---------------------------------------------------------------- literals

fn literal(t: &Tt<'_>, shape: &Shape) -> R<Literal> {
    match shape {
        Shape::Tuple(elems) => {
            let items = av::group_items(t, Tok::LParen, "a tuple literal like `(1, {2, 3})`")?;
            if items.len() != elems.len() {
                return Err(Diagnostic::error(
                    t.span(),
                    format!(
                        "tuple literal has {} elements, shape {shape} has {}",
                        items.len(),
                        elems.len()
                    ),
                ));
            }
            Ok(Literal::Tuple(
                items.into_iter().zip(elems).map(|(t, s)| literal(t, s)).collect::<R<_>>()?,
            ))
        }
        Shape::Array(arr) => {
            if let Tt::Group { open: Tok::LBrace, items, .. } = t
                && matches!(items.as_slice(), [Tt::Tok(Tok::Ellipsis, _)])
            {
                return Ok(Literal::Elided);
            }
            let dims: Vec<u64> = arr
                .static_dims()
                .ok_or_else(|| Diagnostic::error(t.span(), "constants must have a static shape"))?;
            let count: u64 = dims.iter().product();
            let mut scalars: Vec<&Tt<'_>> = Vec::with_capacity(count as usize);
            collect_scalars(t, &dims, &mut Vec::new(), &mut scalars)?;
            let e = arr.elem;
            let data = match e.class() {
                ElemClass::Pred => {
                    LiteralData::Pred(scalars.iter().map(|s| pred_value(s)).collect::<R<_>>()?)
                }
                ElemClass::Signed | ElemClass::Unsigned => {
                    LiteralData::Int(scalars.iter().map(|s| int_value(s, e)).collect::<R<_>>()?)
                }
                ElemClass::Float => {
                    LiteralData::Float(scalars.iter().map(|s| float_value(s, e)).collect::<R<_>>()?)
                }
                ElemClass::Complex => LiteralData::Complex(
                    scalars
                        .iter()
                        .map(|s| {
                            let parts =
                                av::group_items(s, Tok::LParen, "a complex value like `(1, 0)`")?;
                            let part =
                                if e == ElemType::C128 { ElemType::F64 } else { ElemType::F32 };
                            match parts.as_slice() {
                                [re, im] => Ok((float_value(re, part)?, float_value(im, part)?)),
                                _ => Err(Diagnostic::error(
                                    s.span(),
                                    "expected a complex value like `(1, 0)`",
                                )),
                            }
                        })
                        .collect::<R<_>>()?,
                ),
            };
            Ok(Literal::Array(data))
        }
        _ => Err(Diagnostic::error(t.span(), format!("a constant cannot have shape {shape}"))),
    }
}

fn collect_scalars<'b, 'a>(
    t: &'b Tt<'a>,
    dims: &[u64],
    path: &mut Vec<usize>,
    out: &mut Vec<&'b Tt<'a>>,
) -> R<()> {
    let Some((&n, rest)) = dims.split_first() else {
        out.push(t);
        return Ok(());
    };
    let items = match t {
        Tt::Group { open: Tok::LBrace, items, .. } => items,
        t => {
            return Err(Diagnostic::error(
                t.span(),
                format!("expected a `{{...}}` list of {n} elements{}", at_index(path)),
            )
            .with_label("literal nesting does not match the shape's rank"));
        }
    };
    let items: Vec<&Tt<'a>> =
        items.iter().filter(|t| !matches!(t, Tt::Tok(Tok::Comma, _))).collect();
    if items.len() as u64 != n {
        return Err(Diagnostic::error(
            t.span(),
            format!(
                "literal has {} elements{} where the shape needs {n}",
                items.len(),
                at_index(path)
            ),
        )
        .with_label("wrong number of elements"));
    }
    for (i, it) in items.into_iter().enumerate() {
        path.push(i);
        collect_scalars(it, rest, path, out)?;
        path.pop();
    }
    Ok(())
}

/// ` at index [0, 2]` for nested literal positions; nothing at the top level.
fn at_index(path: &[usize]) -> String {
    if path.is_empty() { String::new() } else { format!(" at index {path:?}") }
}

fn pred_value(t: &Tt<'_>) -> R<bool> {
    match t {
        Tt::Tok(Tok::Ident("true"), _) | Tt::Tok(Tok::Int("1"), _) => Ok(true),
        Tt::Tok(Tok::Ident("false"), _) | Tt::Tok(Tok::Int("0"), _) => Ok(false),
        t => {
            Err(Diagnostic::error(t.span(), "expected a pred value (`true`, `false`, `1` or `0`)"))
        }
    }
}

fn int_value(t: &Tt<'_>, e: ElemType) -> R<i64> {
    let Tt::Tok(Tok::Int(s), sp) = t else {
        return Err(Diagnostic::error(
            t.span(),
            format!("expected an integer for a constant of type {e}"),
        ));
    };
    let v: i128 =
        s.parse().map_err(|_| Diagnostic::error(*sp, format!("integer `{s}` is too large")))?;
    let bits = e.bits();
    let (lo, hi): (i128, i128) = if e.class() == ElemClass::Signed {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    };
    if v < lo || v > hi {
        return Err(Diagnostic::error(*sp, format!("constant {v} is out of range for {e}"))
            .with_label(format!("{e} holds {lo}..={hi}")));
    }
    Ok(v as u64 as i64)
}

fn float_value(t: &Tt<'_>, e: ElemType) -> R<f64> {
    let (text, sp) = match t {
        Tt::Tok(Tok::Int(s) | Tok::Float(s) | Tok::NonFinite(s) | Tok::Ident(s), sp) => (*s, *sp),
        t => {
            return Err(Diagnostic::error(
                t.span(),
                format!("expected a number for a constant of type {e}"),
            ));
        }
    };
    let neg = text.starts_with('-');
    let body = text.trim_start_matches('-');
    let v = match body {
        "inf" => f64::INFINITY,
        "nan" => f64::NAN,
        b if b.starts_with("nan(0x") => {
            let written = u64::from_str_radix(&b[6..b.len() - 1], 16).unwrap_or(u64::MAX);
            // The payload must fit the type's mantissa; the f8/f4 types without an
            // infinity (`fn`, `fnuz`, `fnu`) have one NaN and no payload (as XLA says).
            let mantissa: u32 = match e {
                ElemType::F64 => 52,
                ElemType::F32 => 23,
                ElemType::F16 => 10,
                ElemType::BF16 => 7,
                ElemType::F8E5M2 => 2,
                ElemType::F8E4M3 => 3,
                ElemType::F8E3M4 => 4,
                _ => 0,
            };
            if mantissa == 0 {
                return Err(Diagnostic::error(sp, format!("{e} has no NaN payloads"))
                    .with_label("write `nan`"));
            }
            if written >= 1u64 << mantissa {
                return Err(Diagnostic::error(
                    sp,
                    format!(
                        "NaN payload `{}` does not fit {e} ({mantissa} mantissa bits)",
                        &b[4..b.len() - 1]
                    ),
                )
                .with_label("payload out of range"));
            }
            // Kept in the low bits of an f64 NaN, so that it prints back as written.
            let payload = written;
            if payload == 0 {
                return Err(Diagnostic::error(sp, "NaN payload must be non-zero"));
            }
            f64::from_bits(0x7ff0_0000_0000_0000 | payload)
        }
        // An integer token is an integer converted to the type, as XLA reads it: `-0` is +0.
        _ if matches!(t, Tt::Tok(Tok::Int(_), _)) && body.bytes().all(|b| b == b'0') => 0.0,
        _ => text.parse::<f64>().map_err(|_| {
            Diagnostic::error(
                sp,
                format!("expected a number for a constant of type {e}, found `{text}`"),
            )
        })?,
    };
    if v.is_infinite() && body != "inf" {
        // A written number past f64's range (`1e999`): XLA refuses it for every type.
        return Err(Diagnostic::error(sp, format!("constant `{text}` is out of range for {e}"))
            .with_label("beyond the largest finite f64 (1.79769e+308): write `inf` for infinity"));
    }
    let v = if neg && (v.is_nan() || v.is_infinite()) { -v } else { v };
    if v.is_nan() {
        return Ok(v);
    }
    let narrowed = match e {
        ElemType::F32 => v as f32 as f64,
        ElemType::BF16 => half::bf16::from_f64(v).to_f64(),
        ElemType::F16 => half::f16::from_f64(v).to_f64(),
        _ => v,
    };
    if v.is_finite() && narrowed.is_infinite() {
        return Err(Diagnostic::error(sp, format!("constant `{text}` is out of range for {e}"))
            .with_label("larger than the type's largest finite value"));
    }
    Ok(narrowed)
}

/// Why `result_accuracy=VALUE` is refused on `op` (XLA's parser: only unary transcendental
/// ops take it; `mode` is `default` or `highest`, else a `tolerance={...}`), or `None`.
fn result_accuracy_error(op: &Op, value: &str) -> Option<String> {
    use crate::opcode::Opcode as O;
    let allowed = matches!(
        op,
        Op::Plain(
            O::Exp
                | O::Expm1
                | O::Log
                | O::Log1p
                | O::Rsqrt
                | O::Sqrt
                | O::Cbrt
                | O::Tanh
                | O::Cos
                | O::Sin
                | O::Tan
                | O::Erf
                | O::Logistic
        )
    );
    if !allowed {
        return Some(format!(
            "`result_accuracy` applies to unary transcendental ops (exp, log, tanh, sqrt, ...), not `{}`",
            op.opcode().name()
        ));
    }
    let inner = value
        .trim()
        .trim_start_matches('=')
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    if let Some(mode) = inner.strip_prefix("mode") {
        let mode = mode.trim().trim_start_matches('=').trim().to_ascii_lowercase();
        if mode != "default" && mode != "highest" {
            return Some(format!(
                "unknown result_accuracy mode `{mode}` (expected `default` or `highest`)"
            ));
        }
    } else if !inner.starts_with("tolerance") {
        return Some(
            "result_accuracy must be `{mode=...}` or `{tolerance={atol=..,rtol=..,ulps=..}}`"
                .into(),
        );
    }
    None
}

/// Hoists nested anonymous instructions (`add(x, multiply(x, y))`) out of their users:
/// each comes right before the instruction that uses it (innermost first), and the use
/// becomes [`Arg::Anon`] with its position in the returned list.
fn hoist_nested<'a>(instrs: Vec<Box<ast::Instr<'a>>>) -> Vec<Box<ast::Instr<'a>>> {
    fn visit<'a>(mut ins: Box<ast::Instr<'a>>, out: &mut Vec<Box<ast::Instr<'a>>>) {
        for a in ins.args.iter_mut() {
            if let Arg::Nested(_) = a {
                let Arg::Nested(inner) = std::mem::replace(a, Arg::Anon(0)) else { unreachable!() };
                visit(inner, out);
                *a = Arg::Anon(out.len() - 1);
            }
        }
        out.push(ins);
    }
    let mut out = Vec::with_capacity(instrs.len() * 2);
    for i in instrs {
        visit(i, &mut out);
    }
    out
}

/// Checks a tuple literal written whole (`literal=(f32[] 1, (s32[2]{0} {3, 4}))`): every
/// element a shape and a literal of that shape, or a nested tuple. `span` covers the
/// parentheses (leading blanks allowed).
fn check_tuple_literal(src: &str, span: Span) -> R<()> {
    let text = &src[span.range()];
    let open = span.start as usize + (text.len() - text.trim_start().len());
    let close = span.end as usize - 1;
    // Top-level elements, cut at commas outside brackets and strings.
    let b = src.as_bytes();
    let (mut depth, mut in_str, mut from) = (0i32, false, open + 1);
    let mut elems: Vec<(usize, usize)> = Vec::new();
    let mut i = open + 1;
    while i < close {
        match (b[i], in_str) {
            (b'\\', true) => i += 1,
            (b'"', _) => in_str = !in_str,
            (b'(' | b'[' | b'{', false) => depth += 1,
            (b')' | b']' | b'}', false) => depth -= 1,
            (b',', false) if depth == 0 => {
                elems.push((from, i));
                from = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    if !src[from..close].trim().is_empty() || !elems.is_empty() {
        elems.push((from, close));
    }
    for (s, e) in elems {
        let lead = src[s..e].len() - src[s..e].trim_start().len();
        let s = s + lead;
        if s >= e {
            return Err(Diagnostic::error(
                Span::new(s.min(close), e.max(s.min(close) + 1)),
                "empty element in a tuple literal",
            ));
        }
        if b[s] == b'(' {
            let end = s + super::lexer::balanced(&src[s..e], b'(', b')').ok_or_else(|| {
                Diagnostic::error(Span::new(s, s + 1), "unclosed `(` in a tuple literal")
            })?;
            check_tuple_literal(src, Span::new(s, end))?;
            if !src[end..e].trim().is_empty() {
                return Err(Diagnostic::error(
                    Span::new(end, e),
                    "unexpected text after a nested tuple literal",
                ));
            }
            continue;
        }
        let (shape, tt) = super::parse::literal_elem(src, s, e)?;
        literal(&tt, &shape)?;
    }
    Ok(())
}

/// Whether `name` is a type keyword (`s2`, `f32`, `pred`, `token`, ...): XLA's lexer reads
/// it as a type, so it can never name an instruction.
fn spells_a_type(name: &str) -> bool {
    crate::types::ElemType::from_name(name).is_some() || matches!(name, "token" | "opaque")
}

/// `stem`, or `stem.1`, `stem.2`, ... : the first that `taken` does not hold (how XLA
/// names what its parser creates: `multiply.anon`, `multiply.anon.1`).
fn unused_name(stem: &str, taken: impl Fn(&str) -> bool) -> String {
    let mut name = stem.to_string();
    let mut k = 0;
    while taken(&name) {
        k += 1;
        name = format!("{stem}.{k}");
    }
    name
}
