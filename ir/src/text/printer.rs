//! The canonical printer: XLA's dump style (`%` names, computation signatures, metadata).
//!
//! Computations are printed callees first and instructions definitions first, ties broken
//! by creation order, so the output never depends on `NodeIndex` values and
//! `print(parse(print(parse(x)))) == print(parse(x))`.

use std::fmt::Write;

use crate::computation::Computation;
use crate::instr::{Instr, escape};
use crate::module::{CompId, Module};
use crate::op::*;
use crate::opcode::Opcode;
use crate::sharding::join;

/// Prints a module as HLO text.
pub fn print(m: &Module) -> String {
    let mut out = String::with_capacity(m.instr_count() * 96);
    print_header(&mut out, m);
    if let Some(f) = &m.frames {
        out.push_str("FileNames\n");
        for (i, n) in f.file_names.iter().enumerate() {
            let _ = writeln!(out, "{} {}", i + 1, quoted(n));
        }
        out.push_str("\nFunctionNames\n");
        for (i, n) in f.function_names.iter().enumerate() {
            let _ = writeln!(out, "{} {}", i + 1, quoted(n));
        }
        out.push_str("\nFileLocations\n");
        for (i, l) in f.file_locations.iter().enumerate() {
            let _ = writeln!(
                out,
                "{} {{file_name_id={} function_name_id={} line={} end_line={} column={} end_column={}}}",
                i + 1,
                l.file_name_id,
                l.function_name_id,
                l.line,
                l.end_line,
                l.column,
                l.end_column
            );
        }
        out.push_str("\nStackFrames\n");
        for (i, s) in f.stack_frames.iter().enumerate() {
            let _ = writeln!(
                out,
                "{} {{file_location_id={} parent_frame_id={}}}",
                i + 1,
                s.file_location_id,
                s.parent_frame_id
            );
        }
        out.push('\n');
    }
    for id in m.post_order() {
        out.push('\n');
        print_computation(&mut out, m, id);
    }
    out
}

fn quoted(s: &str) -> String {
    let mut e = String::with_capacity(s.len() + 2);
    e.push('"');
    escape(s, &mut e);
    e.push('"');
    e
}

fn bools(v: &[bool]) -> String {
    let s: Vec<&str> = v.iter().map(|b| if *b { "true" } else { "false" }).collect();
    format!("{{{}}}", s.join(","))
}

fn print_header(out: &mut String, m: &Module) {
    let h = &m.header;
    let _ = write!(out, "HloModule {}", m.name);
    if let Some(b) = h.is_scheduled {
        let _ = write!(out, ", is_scheduled={b}");
    }
    if let Some(a) = &h.input_output_alias {
        let _ = write!(out, ", input_output_alias={}", aliases(a));
    }
    if let Some(d) = &h.buffer_donor {
        let items: Vec<String> =
            d.iter().map(|(p, ix)| format!("({p}, {{{}}})", join(ix))).collect();
        let _ = write!(out, ", buffer_donor={{ {} }}", items.join(", "));
    }
    if let Some(b) = h.alias_passthrough_params {
        let _ = write!(out, ", alias_passthrough_params={b}");
    }
    if let Some((params, result)) = &m.entry_layout() {
        out.push_str(", entry_computation_layout={(");
        for (i, p) in params.iter().enumerate() {
            if i > 0 {
                out.push_str(", ");
            }
            p.write(out, true);
        }
        out.push_str(")->");
        result.write(out, true);
        out.push('}');
    }
    if let Some(v) = &h.allow_spmd_sharding_propagation_to_parameters {
        let _ = write!(out, ", allow_spmd_sharding_propagation_to_parameters={}", bools(v));
    }
    if let Some(v) = &h.allow_spmd_sharding_propagation_to_output {
        let _ = write!(out, ", allow_spmd_sharding_propagation_to_output={}", bools(v));
    }
    if let Some(n) = h.replica_count {
        let _ = write!(out, ", replica_count={n}");
    }
    if let Some(n) = h.num_partitions {
        let _ = write!(out, ", num_partitions={n}");
    }
    if let Some(f) = &h.frontend_attributes {
        let _ = write!(out, ", frontend_attributes={f}");
    }
    for (k, v) in &h.extra {
        let _ = write!(out, ", {k}={v}");
    }
    out.push_str("\n\n");
}

fn aliases(a: &[Alias]) -> String {
    let items: Vec<String> = a
        .iter()
        .map(|x| {
            let kind = x.kind.as_ref().map(|k| format!(", {k}")).unwrap_or_default();
            format!(
                "{{{}}}: ({}, {{{}}}{kind})",
                join(&x.output_index),
                x.operand,
                join(&x.operand_index)
            )
        })
        .collect();
    format!("{{ {} }}", items.join(", "))
}

fn print_computation(out: &mut String, m: &Module, id: CompId) {
    let c = m.comp(id);
    if id == m.entry {
        out.push_str("ENTRY ");
    }
    let _ = write!(out, "%{} (", c.name);
    for (i, p) in c.params().into_iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}: ", c.instr(p).name);
        c.instr(p).shape.write(out, false);
    }
    out.push_str(") -> ");
    match c.root() {
        Some(r) => c.instr(r).shape.write(out, false),
        None => out.push_str("()"),
    }
    out.push_str(" {\n");
    for n in c.post_order() {
        print_instr(out, m, c, n, Some(n) == c.root());
    }
    out.push('}');
    if let Some(t) = &c.execution_thread {
        let _ = write!(out, ", execution_thread={}", quoted(t));
    }
    out.push('\n');
}

fn print_instr(
    out: &mut String,
    m: &Module,
    c: &Computation,
    n: petgraph::stable_graph::NodeIndex,
    root: bool,
) {
    let i: &Instr = c.instr(n);
    out.push_str(if root { "  ROOT %" } else { "  %" });
    out.push_str(&i.name);
    out.push_str(" = ");
    i.shape.write(out, true);
    out.push(' ');
    out.push_str(i.op.opcode().name());
    out.push('(');
    match &i.op {
        Op::Parameter { number, .. } => {
            let _ = write!(out, "{number}");
        }
        Op::Constant(lit) => lit.write(out, &i.shape),
        _ => {
            for (k, o) in c.operands(n).into_iter().enumerate() {
                if k > 0 {
                    out.push_str(", ");
                }
                out.push('%');
                out.push_str(&c.instr(o).name);
            }
        }
    }
    out.push(')');
    print_op_attrs(out, m, &i.op);
    if let Some(s) = &i.sharding {
        let _ = write!(out, ", sharding={s}");
    }
    let ex = i.extras.as_deref();
    if let Some(f) = ex.and_then(|e| e.frontend_attributes.as_ref()) {
        let _ = write!(out, ", frontend_attributes={f}");
    }
    let dangling = ex.map_or(&[][..], |e| &e.dangling_control_predecessors[..]);
    if !c.control_predecessors(n).is_empty() || !dangling.is_empty() {
        let names: Vec<String> = c
            .control_predecessors(n)
            .iter()
            .map(|&p| format!("%{}", c.instr(p).name))
            .chain(dangling.iter().map(|p| format!("%{p}")))
            .collect();
        let _ = write!(out, ", control-predecessors={{{}}}", names.join(", "));
    }
    if let Some(s) = ex.and_then(|e| e.statistics.as_ref()) {
        let _ = write!(out, ", statistics={s}");
    }
    if let Some(s) = ex.and_then(|e| e.result_accuracy.as_ref()) {
        let _ = write!(out, ", result_accuracy={s}");
    }
    for (k, v) in ex.map(|e| e.kept.as_slice()).unwrap_or_default() {
        let _ = write!(out, ", {k}={v}");
    }
    if let Some(s) = ex.and_then(|e| e.origin.as_ref()) {
        let _ = write!(out, ", origin={s}");
    }
    if let Some(md) = &i.metadata {
        let _ = write!(out, ", metadata={md}");
    }
    if let Some(b) = ex.and_then(|e| e.backend_config.as_ref()) {
        let _ = write!(out, ", backend_config={b}");
    }
    out.push('\n');
}

fn comp_name(m: &Module, id: CompId) -> String {
    format!("%{}", m.comp(id).name)
}

fn list(v: &[i64]) -> String {
    format!("{{{}}}", join(v))
}

fn window(w: &Window) -> String {
    let x = |f: &dyn Fn(&WindowDim) -> i64| {
        w.dims.iter().map(|d| f(d).to_string()).collect::<Vec<_>>().join("x")
    };
    let mut s = format!("size={}", x(&|d| d.size));
    if w.dims.iter().any(|d| d.stride != 1) {
        let _ = write!(s, " stride={}", x(&|d| d.stride));
    }
    if w.dims.iter().any(|d| d.pad_lo != 0 || d.pad_hi != 0) {
        let p: Vec<String> = w.dims.iter().map(|d| format!("{}_{}", d.pad_lo, d.pad_hi)).collect();
        let _ = write!(s, " pad={}", p.join("x"));
    }
    if w.dims.iter().any(|d| d.lhs_dilate != 1) {
        let _ = write!(s, " lhs_dilate={}", x(&|d| d.lhs_dilate));
    }
    if w.dims.iter().any(|d| d.rhs_dilate != 1) {
        let _ = write!(s, " rhs_dilate={}", x(&|d| d.rhs_dilate));
    }
    if w.dims.iter().any(|d| d.reversal) {
        let _ = write!(s, " rhs_reversal={}", x(&|d| i64::from(d.reversal)));
    }
    format!("{{{s}}}")
}

fn dim_labels(d: &ConvDims) -> String {
    let part = |rank: usize, a: (i64, char), b: (i64, char), spatial: &[i64]| {
        let mut v = vec!['?'; rank];
        let mut put = |i: i64, c: char| {
            if let Some(slot) = usize::try_from(i).ok().and_then(|i| v.get_mut(i)) {
                *slot = c;
            }
        };
        put(a.0, a.1);
        put(b.0, b.1);
        for (k, &s) in spatial.iter().enumerate() {
            put(s, char::from_digit(k as u32 % 10, 10).unwrap_or('?'));
        }
        v.into_iter().collect::<String>()
    };
    let r = d.input_spatial.len() + 2;
    format!(
        "{}_{}->{}",
        part(r, (d.input_batch, 'b'), (d.input_feature, 'f'), &d.input_spatial),
        part(r, (d.kernel_input_feature, 'i'), (d.kernel_output_feature, 'o'), &d.kernel_spatial),
        part(r, (d.output_batch, 'b'), (d.output_feature, 'f'), &d.output_spatial)
    )
}

fn precision(p: &[Precision]) -> String {
    let names: Vec<&str> = p
        .iter()
        .map(|p| Precision::ALL.iter().find(|x| x.0 == *p).map_or("default", |x| x.1))
        .collect();
    format!("{{{}}}", names.join(","))
}

fn name_of<T: PartialEq + Copy>(table: &[(T, &'static str)], v: T) -> &'static str {
    table.iter().find(|x| x.0 == v).map_or("?", |x| x.1)
}

fn print_op_attrs(out: &mut String, m: &Module, op: &Op) {
    let mut a = |k: &str, v: String| {
        let _ = write!(out, ", {k}={v}");
    };
    match op {
        Op::Plain(_) | Op::Constant(_) => {}
        Op::Parameter { replication, .. } => {
            if let Some(r) = replication {
                a("parameter_replication", bools(r));
            }
        }
        Op::Iota { dimension } => a("iota_dimension", dimension.to_string()),
        Op::GetTupleElement { index } => a("index", index.to_string()),
        Op::Compare { direction, kind } => {
            a("direction", name_of(&CmpDirection::ALL, *direction).into());
            if let Some(k) = kind {
                a("type", name_of(&CmpType::ALL, *k).into());
            }
        }
        Op::Broadcast { dimensions }
        | Op::Transpose { dimensions }
        | Op::Reverse { dimensions } => a("dimensions", list(dimensions)),
        Op::Reshape { inferred_dimension } => {
            if let Some(d) = inferred_dimension {
                a("inferred_dimension", d.to_string());
            }
        }
        Op::Concatenate { dimension } => a("dimensions", list(&[*dimension])),
        Op::Slice { ranges } => {
            let r: Vec<String> = ranges
                .iter()
                .map(|r| {
                    if r.stride == 1 {
                        format!("[{}:{}]", r.start, r.limit)
                    } else {
                        format!("[{}:{}:{}]", r.start, r.limit, r.stride)
                    }
                })
                .collect();
            a("slice", format!("{{{}}}", r.join(", ")));
        }
        Op::DynamicSlice { sizes } => a("dynamic_slice_sizes", list(sizes)),
        Op::Pad { config } => {
            let interior = config.iter().any(|p| p.interior != 0);
            let p: Vec<String> = config
                .iter()
                .map(|p| {
                    if interior {
                        format!("{}_{}_{}", p.lo, p.hi, p.interior)
                    } else {
                        format!("{}_{}", p.lo, p.hi)
                    }
                })
                .collect();
            a("padding", p.join("x"));
        }
        Op::ReducePrecision { exponent_bits, mantissa_bits } => {
            a("exponent_bits", exponent_bits.to_string());
            a("mantissa_bits", mantissa_bits.to_string());
        }
        Op::Gather(g) => {
            a("offset_dims", list(&g.offset_dims));
            a("collapsed_slice_dims", list(&g.collapsed_slice_dims));
            a("start_index_map", list(&g.start_index_map));
            if !g.operand_batching_dims.is_empty() || !g.start_indices_batching_dims.is_empty() {
                a("operand_batching_dims", list(&g.operand_batching_dims));
                a("start_indices_batching_dims", list(&g.start_indices_batching_dims));
            }
            a("index_vector_dim", g.index_vector_dim.to_string());
            a("slice_sizes", list(&g.slice_sizes));
            if g.indices_are_sorted {
                a("indices_are_sorted", "true".into());
            }
        }
        Op::Scatter(s) => {
            a("update_window_dims", list(&s.update_window_dims));
            a("inserted_window_dims", list(&s.inserted_window_dims));
            a("scatter_dims_to_operand_dims", list(&s.scatter_dims_to_operand_dims));
            if !s.input_batching_dims.is_empty() || !s.scatter_indices_batching_dims.is_empty() {
                a("input_batching_dims", list(&s.input_batching_dims));
                a("scatter_indices_batching_dims", list(&s.scatter_indices_batching_dims));
            }
            a("index_vector_dim", s.index_vector_dim.to_string());
            if s.indices_are_sorted {
                a("indices_are_sorted", "true".into());
            }
            if s.unique_indices {
                a("unique_indices", "true".into());
            }
            a("to_apply", comp_name(m, s.to_apply));
        }
        Op::Reduce { dimensions, to_apply } => {
            a("dimensions", list(dimensions));
            a("to_apply", comp_name(m, *to_apply));
        }
        Op::ReduceWindow { window: w, to_apply } => {
            if !w.dims.is_empty() {
                a("window", window(w));
            }
            a("to_apply", comp_name(m, *to_apply));
        }
        Op::SelectAndScatter { window: w, select, scatter } => {
            if !w.dims.is_empty() {
                a("window", window(w));
            }
            a("select", comp_name(m, *select));
            a("scatter", comp_name(m, *scatter));
        }
        Op::Map { dimensions, to_apply } => {
            if let Some(d) = dimensions {
                a("dimensions", list(d));
            }
            a("to_apply", comp_name(m, *to_apply));
        }
        Op::Sort { dimension, is_stable, to_apply } => {
            a("dimensions", list(&[*dimension]));
            if *is_stable {
                a("is_stable", "true".into());
            }
            a("to_apply", comp_name(m, *to_apply));
        }
        // `is_stable` is not printed: the oracle's XLA refuses it on topk.
        Op::TopK { k, largest, .. } => {
            a("k", k.to_string());
            if let Some(l) = largest {
                a("largest", l.to_string());
            }
        }
        Op::Scan { dimension, num_carries, is_reverse, is_associative, to_apply } => {
            a("dimensions", list(&[*dimension]));
            a("num_carries", num_carries.to_string());
            if *is_reverse {
                a("is_reverse", "true".into());
            }
            if let Some(x) = is_associative {
                a("is_associative", x.to_string());
            }
            a("to_apply", comp_name(m, *to_apply));
        }
        Op::Dot { opcode, dims: d } => {
            if !d.lhs_batch.is_empty() {
                a("lhs_batch_dims", list(&d.lhs_batch));
            }
            a("lhs_contracting_dims", list(&d.lhs_contracting));
            if !d.rhs_batch.is_empty() {
                a("rhs_batch_dims", list(&d.rhs_batch));
            }
            a("rhs_contracting_dims", list(&d.rhs_contracting));
            if *opcode == Opcode::RaggedDot {
                a("lhs_ragged_dims", list(&d.lhs_ragged));
                if !d.rhs_group.is_empty() {
                    a("rhs_group_dims", list(&d.rhs_group));
                }
            }
            if !d.precision.is_empty() {
                a("operand_precision", precision(&d.precision));
            }
            if let Some(al) = &d.algorithm {
                a("algorithm", al.clone());
            }
        }
        Op::Convolution(c) => {
            if !c.window.dims.is_empty() {
                a("window", window(&c.window));
            }
            a("dim_labels", dim_labels(&c.dims));
            if c.feature_group_count != 1 {
                a("feature_group_count", c.feature_group_count.to_string());
            }
            if c.batch_group_count != 1 {
                a("batch_group_count", c.batch_group_count.to_string());
            }
            if !c.precision.is_empty() {
                a("operand_precision", precision(&c.precision));
            }
            if let Some(k) = &c.kind {
                a("convolution_kind", k.clone());
            }
        }
        Op::BatchNorm { epsilon, feature_index, .. } => {
            let mut e = String::new();
            crate::literal::write_float(&mut e, *epsilon, crate::types::ElemType::F32);
            a("epsilon", e);
            a("feature_index", feature_index.to_string());
        }
        Op::Cholesky { lower } => {
            if *lower {
                a("lower", "true".into());
            }
        }
        Op::TriangularSolve { left_side, lower, unit_diagonal, transpose_a } => {
            if *left_side {
                a("left_side", "true".into());
            }
            if *lower {
                a("lower", "true".into());
            }
            if *unit_diagonal {
                a("unit_diagonal", "true".into());
            }
            if let Some(t) = transpose_a {
                a("transpose_a", t.clone());
            }
        }
        Op::Fft { fft_type, fft_length } => {
            a("fft_type", fft_type.clone());
            a("fft_length", list(fft_length));
        }
        Op::While { condition, body } => {
            a("condition", comp_name(m, *condition));
            a("body", comp_name(m, *body));
        }
        Op::Conditional(Branches::TrueFalse(t, f)) => {
            a("true_computation", comp_name(m, *t));
            a("false_computation", comp_name(m, *f));
        }
        Op::Conditional(Branches::Indexed(b)) => {
            let names: Vec<String> = b.iter().map(|c| comp_name(m, *c)).collect();
            a("branch_computations", format!("{{{}}}", names.join(", ")));
        }
        Op::Call { to_apply, is_composite } => {
            a("to_apply", comp_name(m, *to_apply));
            if *is_composite {
                a("is_composite", "true".into());
            }
        }
        Op::Fusion { kind, calls, output_to_operand_aliasing } => {
            a("kind", name_of(&FusionKind::ALL, *kind).into());
            a("calls", comp_name(m, *calls));
            if !output_to_operand_aliasing.is_empty() {
                a("output_to_operand_aliasing", aliases(output_to_operand_aliasing));
            }
        }
        Op::CustomCall(c) => {
            a("custom_call_target", quoted(&c.target));
            if let Some(ol) = &c.operand_layout_constraints {
                let s: Vec<String> = ol.iter().map(|s| s.to_string()).collect();
                a("operand_layout_constraints", format!("{{{}}}", s.join(", ")));
            }
            if c.has_side_effect {
                a("custom_call_has_side_effect", "true".into());
            }
            if !c.output_to_operand_aliasing.is_empty() {
                a("output_to_operand_aliasing", aliases(&c.output_to_operand_aliasing));
            }
            for (k, v) in &c.extra {
                a(k, v.clone());
            }
            if let Some(t) = c.to_apply {
                a("to_apply", comp_name(m, t));
            }
            if !c.called_computations.is_empty() {
                let names: Vec<String> =
                    c.called_computations.iter().map(|x| comp_name(m, *x)).collect();
                a("called_computations", format!("{{{}}}", names.join(", ")));
            }
            if let Some(v) = &c.api_version {
                a("api_version", v.clone());
            }
        }
        Op::Collective { attrs: c, .. } => {
            if let Some(ch) = c.channel_id {
                a("channel_id", ch.to_string());
            }
            match &c.replica_groups {
                Some(ReplicaGroups::Explicit(g)) => {
                    let s: Vec<String> = g.iter().map(|g| list(g)).collect();
                    a("replica_groups", format!("{{{}}}", s.join(",")));
                }
                Some(ReplicaGroups::Iota(l)) => a("replica_groups", l.to_string()),
                Some(ReplicaGroups::Mesh { axes, selection, device_ids }) => {
                    let ax: Vec<String> = axes.iter().map(|(n, s)| format!("'{n}'={s}")).collect();
                    let ids = match device_ids {
                        Some((dims, perm)) if perm.is_empty() => {
                            format!(", device_ids=([{}])", join(dims))
                        }
                        Some((dims, perm)) => {
                            format!(", device_ids=([{}]T({}))", join(dims), join(perm))
                        }
                        None => String::new(),
                    };
                    a("replica_groups", format!("mesh[{}]{ids} {selection}", ax.join(",")));
                }
                None => {}
            }
            if let Some(d) = &c.dimensions {
                a("dimensions", list(d));
            }
            if c.constrain_layout {
                a("constrain_layout", "true".into());
            }
            if c.use_global_device_ids {
                a("use_global_device_ids", "true".into());
            }
            if let Some(p) = &c.source_target_pairs {
                let s: Vec<String> = p.iter().map(|(x, y)| format!("{{{x},{y}}}")).collect();
                a("source_target_pairs", format!("{{{}}}", s.join(",")));
            }
            if let Some(t) = c.to_apply {
                a("to_apply", comp_name(m, t));
            }
        }
        Op::Async { calls, .. } => {
            if let Some(c) = calls {
                a("calls", comp_name(m, *c));
            }
        }
        Op::CopyStart { cross_program_prefetch_index } => {
            if let Some(i) = cross_program_prefetch_index {
                a("cross_program_prefetch_index", i.to_string());
            }
        }
        Op::SendRecv { channel_id, is_host_transfer, .. } => {
            if let Some(c) = channel_id {
                a("channel_id", c.to_string());
            }
            if *is_host_transfer {
                a("is_host_transfer", "true".into());
            }
        }
        Op::Infeed { config } => {
            if let Some(c) = config {
                a("infeed_config", quoted(c));
            }
        }
        Op::Outfeed { config, shape } => {
            if let Some(s) = shape {
                a("outfeed_shape", s.to_string());
            }
            if let Some(c) = config {
                a("outfeed_config", quoted(c));
            }
        }
        Op::Rng { distribution } => a(
            "distribution",
            (if *distribution == RngDistribution::Uniform { "rng_uniform" } else { "rng_normal" })
                .into(),
        ),
        Op::RngBitGenerator { algorithm } => a(
            "algorithm",
            match algorithm {
                RngAlgorithm::Default => "rng_default",
                RngAlgorithm::ThreeFry => "rng_three_fry",
                RngAlgorithm::Philox => "rng_philox",
            }
            .into(),
        ),
        Op::RngGetAndUpdateState { delta } => a("delta", delta.to_string()),
        Op::GetDimensionSize { dimension } | Op::SetDimensionSize { dimension } => {
            a("dimensions", list(&[*dimension]))
        }
        Op::Domain { raw } => a("domain", raw.clone()),
    }
}
