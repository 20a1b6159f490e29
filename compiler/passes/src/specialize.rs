//! Specializing a shape-polymorphic module (entry parameters with unbounded `?` dims, as
//! `jax.export` prints) to concrete argument shapes: every `?` is bound from the
//! arguments, shapes are re-inferred through the module (into called computations),
//! `get-dimension-size` becomes a constant, and every `shape_assertion` custom-call must
//! then fold to `true` (else the call is refused with the assertion's message) and is
//! removed. The result has static shapes only.
//!
//! A `?` that the operands do not determine (the batch dimension of a `broadcast` of a
//! bias or of an `iota`) takes the value bound to the entry's `?` dims when they were all
//! bound to one value: the common case of a single symbolic batch dimension.
//!
//! Value-dependent dims (`<=N` bounds from data) are not polymorphism: they stay rejected
//! by the checks.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{CompId, Dim, ElemType, Module, NodeIndex, Op, Shape};

use hlo_check::shape_inference::infer_shape;

/// Whether any entry parameter has an unbounded dimension.
pub fn is_polymorphic(m: &Module) -> bool {
    m.entry_param_shapes().iter().any(has_unbounded)
}

fn has_unbounded(s: &Shape) -> bool {
    match s {
        Shape::Array(a) => a.dims.iter().any(|d| matches!(d, Dim::Unbounded)),
        Shape::Tuple(v) => v.iter().any(has_unbounded),
        _ => false,
    }
}

fn dims_of(s: &Shape) -> Option<Vec<u64>> {
    s.as_array()?.static_dims()
}

/// `m` specialized to arguments of shapes `args`.
pub fn specialize(m: &Module, args: &[Shape]) -> Result<Module, hlo_ir::Diagnostic> {
    let params = m.entry_param_shapes();
    if params.len() != args.len() {
        return Err(hlo_ir::Diagnostic::from(format!(
            "the program takes {} arguments, {} given",
            params.len(),
            args.len()
        )));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let (pa, aa) = (
            p.as_array().ok_or(format!("parameter {i} is not an array"))?,
            a.as_array().ok_or(format!("argument {i} is not an array"))?,
        );
        let ad = aa.static_dims().ok_or(format!("argument {i} has no static shape"))?;
        let ok = pa.elem == aa.elem
            && pa.dims.len() == ad.len()
            && pa
                .dims
                .iter()
                .zip(&ad)
                .all(|(d, &n)| matches!(d, Dim::Unbounded) || *d == Dim::Static(n));
        if !ok {
            return Err(hlo_ir::Diagnostic::from(format!(
                "parameter {i}: expected {p}, given {a}"
            )));
        }
    }
    let mut out = m.clone();
    let entry = out.entry;
    let arg_shapes: Vec<Shape> = args.iter().map(|s| s.clone().with_default_layouts()).collect();
    let mut bound: Vec<u64> = Vec::new();
    for (p, a) in params.iter().zip(args) {
        if let (Some(pa), Some(ad)) = (p.as_array(), dims_of(a)) {
            bound.extend(
                pa.dims
                    .iter()
                    .zip(&ad)
                    .filter(|(d, _)| matches!(d, Dim::Unbounded))
                    .map(|(_, &n)| n),
            );
        }
    }
    bound.sort_unstable();
    bound.dedup();
    let symbol = if bound.len() == 1 { Some(bound[0]) } else { None };
    refine(&mut out, entry, &arg_shapes, symbol)?;
    // Fold what the bound dims made constant, then check the assertions.
    let mut p = hlo_pipeline::Pipeline::new(vec![
        hlo_pipeline::Step::Pass(crate::make_pass("inline-calls").ok_or("no inline-calls pass")?),
        hlo_pipeline::Step::Pass(
            crate::make_pass("constant-folding").ok_or("no constant-folding pass")?,
        ),
        hlo_pipeline::Step::Pass(
            crate::make_pass("algebraic-simplifier").ok_or("no algebraic-simplifier pass")?,
        ),
        hlo_pipeline::Step::Pass(
            crate::make_pass("constant-folding").ok_or("no constant-folding pass")?,
        ),
    ]);
    p.verify_each = false;
    p.run(&mut out)
        .map_err(|d| d.iter().map(|d| d.message.clone()).collect::<Vec<_>>().join("; "))?;
    for id in out.comp_ids() {
        let comp = out.comp(id);
        let asserts: Vec<NodeIndex> = comp.nodes().filter(|&n| matches!(&comp.instr(n).op, Op::CustomCall(cc) if cc.target == "shape_assertion")).collect();
        for n in asserts {
            let comp = out.comp(id);
            let pred = comp.operand(n, 0).ok_or("shape_assertion without a predicate")?;
            let holds = match &comp.instr(pred).op {
                Op::Constant(Literal::Array(LiteralData::Pred(v))) => v.iter().all(|&b| b),
                _ => {
                    return Err(hlo_ir::Diagnostic::from(format!(
                        "shape assertion `{}` does not fold to a constant for these shapes",
                        comp.instr(n).name
                    )));
                }
            };
            if !holds {
                let msg = comp
                    .instr(n)
                    .extras
                    .as_ref()
                    .and_then(|e| e.backend_config.clone())
                    .unwrap_or_default();
                let dims: Vec<String> = args.iter().map(|s| s.to_string()).collect();
                return Err(hlo_ir::Diagnostic::from(format!(
                    "shape assertion `{}` fails for arguments ({}){}",
                    comp.instr(n).name,
                    dims.join(", "),
                    if msg.is_empty() { String::new() } else { format!(": {msg}") }
                )));
            }
            out.comp_mut(id).remove(n).map_err(|e| format!("{e:?}"))?;
        }
        out.comp_mut(id)
            .remove_dead(|i| !matches!(&i.op, Op::Parameter { .. }) && !i.op.has_side_effects());
    }
    Ok(out)
}

/// Sets the parameters of computation `id` to `params` and re-infers every shape in it.
fn refine(m: &mut Module, id: CompId, params: &[Shape], symbol: Option<u64>) -> Result<(), String> {
    let order = m.comp(id).post_order();
    for n in order {
        let (op, declared, operands) = {
            let c = m.comp(id);
            let ops: Vec<Shape> = c.operands(n).iter().map(|&o| c.instr(o).shape.clone()).collect();
            (c.instr(n).op.clone(), c.instr(n).shape.clone(), ops)
        };
        let new = match &op {
            Op::Parameter { number, .. } => {
                params.get(*number as usize).cloned().ok_or_else(|| {
                    format!("parameter {number} of `{}` is not bound", m.comp(id).name)
                })?
            }
            Op::GetDimensionSize { dimension } => {
                let d = dims_of(&operands[0]).ok_or("get-dimension-size of a dynamic operand")?;
                let v =
                    *d.get(*dimension as usize).ok_or("get-dimension-size: no such dimension")?;
                m.comp_mut(id).instr_mut(n).op =
                    Op::Constant(Literal::Array(LiteralData::Int(vec![v as i64])));
                Shape::array(ElemType::S32, &[])
            }
            Op::Call { to_apply, .. } => {
                if operands.iter().any(|s| !has_unbounded(s)) {
                    let callee_params: Vec<Shape> = operands.clone();
                    refine(m, *to_apply, &callee_params, symbol)?;
                }
                let c = m.comp(*to_apply);
                c.root()
                    .map(|r| c.instr(r).shape.clone())
                    .ok_or("called computation without a root")?
            }
            _ if !has_unbounded(&declared) => declared.clone(),
            Op::Reshape { .. } => {
                let total: u64 =
                    dims_of(&operands[0]).ok_or("reshape of a dynamic operand")?.iter().product();
                let a = declared.as_array().ok_or("reshape to a non-array")?;
                let known: u64 = a
                    .dims
                    .iter()
                    .filter_map(|d| if let Dim::Static(n) = d { Some(*n) } else { None })
                    .product();
                let unknown = a.dims.iter().filter(|d| !d.is_static()).count();
                if unknown != 1 || known == 0 {
                    return Err(format!(
                        "reshape to {declared}: cannot solve {unknown} unknown dims"
                    ));
                }
                let dims: Vec<u64> = a
                    .dims
                    .iter()
                    .map(|d| if let Dim::Static(n) = d { *n } else { total / known })
                    .collect();
                Shape::array(a.elem, &dims).with_default_layouts()
            }
            Op::Broadcast { dimensions } => {
                let od = dims_of(&operands[0]).ok_or("broadcast of a dynamic operand")?;
                let a = declared.as_array().ok_or("broadcast to a non-array")?;
                let mut dims = Vec::with_capacity(a.dims.len());
                for (i, d) in a.dims.iter().enumerate() {
                    dims.push(match d {
                        Dim::Static(n) => *n,
                        _ => match dimensions.iter().position(|&x| x as usize == i) {
                            Some(k) => od[k],
                            None => symbol.ok_or(format!(
                                "broadcast to {declared}: dimension {i} is unknown"
                            ))?,
                        },
                    });
                }
                Shape::array(a.elem, &dims).with_default_layouts()
            }
            _ => {
                let refs: Vec<&Shape> = operands.iter().collect();
                let substituted = symbol.map(|v| bind_unbounded(&declared, v));
                let decl = substituted.as_ref().unwrap_or(&declared);
                let mut s = infer_shape(&op, &refs, None, &*m)
                    .or_else(|_| infer_shape(&op, &refs, Some(decl), &*m))
                    .map_err(|e| format!("`{}`: {e}", m.comp(id).instr(n).name))?;
                if has_unbounded(&s) {
                    return Err(format!("`{}`: shape {s} stays dynamic", m.comp(id).instr(n).name));
                }
                s = s.with_default_layouts();
                s
            }
        };
        m.comp_mut(id).instr_mut(n).shape = new;
    }
    Ok(())
}

/// `s` with every `?` replaced by `v`.
fn bind_unbounded(s: &Shape, v: u64) -> Shape {
    match s {
        Shape::Array(a) => {
            let mut a = a.clone();
            for d in &mut a.dims {
                if matches!(d, Dim::Unbounded) {
                    *d = Dim::Static(v);
                }
            }
            Shape::Array(a)
        }
        Shape::Tuple(items) => Shape::Tuple(items.iter().map(|i| bind_unbounded(i, v)).collect()),
        other => other.clone(),
    }
}
