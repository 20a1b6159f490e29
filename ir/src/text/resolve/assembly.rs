//! Assembly: the module from its syntax trees. Computation names first, then each
//! computation's instructions built in statement order (nested operands hoisted, inline
//! bodies made computations of their own) and assembled into a graph (names to nodes,
//! operand order to edge slots, compact tuple indices, omitted shapes, control edges,
//! the root); large modules on two threads, with the module the one-thread order gives.
//! Last, the module header's attributes and the stack-frame tables.

use std::collections::{HashMap, HashSet};

use petgraph::stable_graph::NodeIndex;

use super::names::{CompTable, Resolver, closest, spells_a_type, unused_name};
use crate::computation::{Computation, Signature};
use crate::diag::{Diagnostic, Diagnostics, Span};
use crate::halves::{self, PARALLEL_MIN_INSTRS};
use crate::hash::FnvHashMap;
use crate::instr::Instr;
use crate::module::{CompId, FileLocation, FrameTables, Header, Module, StackFrame};
use crate::op::Op;
use crate::opcode::Opcode;
use crate::text::ast::{self, Arg, AttrValue, CompAst, ModuleAst, Tt};
use crate::text::attrs::{self as av, R};
use crate::text::lexer::{self, Tok};
use crate::text::syntax;
use crate::types::{ElemType, Shape};

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

impl<'a> Resolver<'a, '_, '_> {
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
                if !lexer::COMPUTATION_ATTRS.contains(&a.name) {
                    continue;
                }
                let (instrs, close) =
                    match syntax::inline_body(self.src, sp.start as usize, sp.end as usize) {
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
        // Parameter numbers taken so far, with where: XLA's parser refuses a repeated one
        // where it is written (the verifier says the same of modules built in memory).
        let mut params: HashMap<u32, Span> = HashMap::new();
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
            if let Op::Parameter { number, .. } = instr.op
                && let Some(first) = params.insert(number, instr.span)
            {
                self.diags.push(
                    Diagnostic::error(
                        instr.span,
                        format!(
                            "parameter number {number} is used twice in `{}`",
                            c.header.name.text
                        ),
                    )
                    .with_note(first, "first used here"),
                );
            }
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
                    // Debugging callbacks of newer XLA: checked as its parser checks them,
                    // then left out (the oracle's XLA refuses the attribute, and nothing
                    // here reads it).
                    "debug_attributes" => av::debug_attributes(tts)?,
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
