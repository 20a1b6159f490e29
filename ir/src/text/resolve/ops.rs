//! Instructions: one statement to one [`Instr`], its opcode and attributes to a typed
//! [`Op`] (every attribute taken once, leftovers and duplicates reported), the
//! attributes every instruction may carry, the ones of newer XLA kept verbatim
//! ([`KEPT_ATTRS`]), and the async shorthand of ops without async opcodes of their own.

use petgraph::stable_graph::NodeIndex;

use super::literals::{check_tuple_literal, constant};
use super::names::{Resolver, unused_name};
use crate::computation::Computation;
use crate::diag::{Diagnostic, Span};
use crate::instr::{Extras, Instr};
use crate::module::CompId;
use crate::op::*;
use crate::opcode::Opcode;
use crate::text::ast::{self, Arg, AttrValue, Tt};
use crate::text::attrs::{self as av, R};
use crate::text::lexer::Tok;
use crate::types::Shape;

/// Attributes of XLA versions other than the oracle's (newer ones, and `original_value`
/// of the versions before it) that are accepted, carried verbatim (printed back) and
/// otherwise ignored, with the opcodes that may carry them (empty: any). The next
/// such attribute is one line here.
pub(crate) const KEPT_ATTRS: &[(&[Opcode], &str)] = &[
    (&[], "debug_attributes"),
    (&[], "original_value"),
    (&[Opcode::CollectivePermute, Opcode::CollectivePermuteStart], "slice_sizes"),
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
    /// Attributes of newer XLA that `op` read and keeps, printed back after [`KEPT_ATTRS`].
    kept: Vec<(&'static str, String)>,
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

    /// Builds an instruction; errors are recorded and reported as `Err(())`.
    pub(super) fn instr(&mut self, ins: &ast::Instr<'a>, shape: Shape) -> Result<Instr, ()> {
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
            kept: Vec::new(),
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
        ex.kept.extend(attrs.kept.drain(..).map(|(k, v)| (k.to_string(), v)));
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
            O::Constant => Op::Constant(constant(ins, shape)?),
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
            // Newer XLA's `is_stable` (true when left out, as there); never printed.
            O::TopK => Op::TopK {
                k: a.req("k", av::int)?,
                largest: a.opt("largest", av::boolean),
                is_stable: a.opt("is_stable", av::boolean).unwrap_or(true),
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
                let mesh_ids = a.opt("device_ids", av::mesh_device_ids);
                let mut replica_groups = a.opt("replica_groups", |t| match (&mesh_ids, t) {
                    (Some((_, sel)), [Tt::Tok(Tok::Ident("mesh"), _), axes]) => {
                        av::mesh_groups(axes, sel, src)
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
                // Newer XLA's `has_dynamic_root` (its root a second operand when true):
                // `false`, what the oracle's XLA reads in its absence, is left out; `true`,
                // which no engine here computes, is kept and printed back.
                if opcode == O::CollectiveBroadcast
                    && a.opt("has_dynamic_root", av::boolean) == Some(true)
                {
                    a.kept.push(("has_dynamic_root", "true".to_string()));
                }
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
            // The channel may be left out: XLA's parser (the oracle's too) reads send/recv
            // without one.
            O::Send | O::Recv | O::SendDone | O::RecvDone => Op::SendRecv {
                opcode,
                channel_id: a.opt("channel_id", av::int),
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
