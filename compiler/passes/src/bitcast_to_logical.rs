//! `bitcast-to-logical`: rewrites every `bitcast` whose operand or result has a
//! non-default layout into the logical operations it stands for, so that engines which
//! keep every array in row-major order (the interpreter, the JIT) run layout-assigned
//! modules (XLA's `.opt.hlo`) correctly.
//!
//! A bitcast reinterprets the physical bytes: with `mtm(L)` the major-to-minor dimension
//! order of layout `L`, `bitcast(x: A{LA}) -> B{LB}` equals
//! `transpose(reshape(transpose(x, mtm(LA)), dims_B in mtm(LB) order), inverse(mtm(LB)))`;
//! identity transposes and reshapes are omitted. Every other opcode's meaning does not
//! depend on layouts (`copy` between layouts is a logical identity), so the rewritten
//! module means the same for any choice of physical layouts. Layouts themselves are kept.

use hlo_ir::{Diagnostic, Instr, Module, NodeIndex, Op, Opcode, Shape};

use hlo_pipeline::{Pass, PassContext};

pub struct BitcastToLogical;

/// Major-to-minor dimension order of an array shape (row-major when it has no layout).
fn major_to_minor(s: &Shape) -> Option<Vec<usize>> {
    let a = s.as_array()?;
    Some(match &a.layout {
        Some(l) if l.minor_to_major.len() == a.dims.len() => {
            l.minor_to_major.iter().rev().map(|&d| d as usize).collect()
        }
        _ => (0..a.dims.len()).collect(),
    })
}

fn is_identity(p: &[usize]) -> bool {
    p.iter().enumerate().all(|(i, &d)| i == d)
}

impl Pass for BitcastToLogical {
    fn name(&self) -> &'static str {
        "bitcast-to-logical"
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        let mut changed = false;
        for id in m.comp_ids() {
            let comp = m.comp_mut(id);
            let targets: Vec<NodeIndex> = comp
                .nodes()
                .filter(|&n| matches!(comp.instr(n).op, Op::Plain(Opcode::Bitcast)))
                .collect();
            for n in targets {
                let Some(x) = comp.operand(n, 0) else { continue };
                let (src, dst) = (comp.instr(x).shape.clone(), comp.instr(n).shape.clone());
                let (Some(a), Some(b)) = (src.as_array().cloned(), dst.as_array().cloned()) else {
                    continue;
                };
                let (Some(ma), Some(mb)) = (major_to_minor(&src), major_to_minor(&dst)) else {
                    continue;
                };
                if is_identity(&ma) && is_identity(&mb) {
                    continue; // a plain row-major reshape already
                }
                let (Some(ad), Some(bd)) = (a.static_dims(), b.static_dims()) else { continue };
                let name = comp.instr(n).name.clone();
                let mut cur = x;
                if !is_identity(&ma) {
                    let dims: Vec<u64> = ma.iter().map(|&d| ad[d]).collect();
                    let t = Instr::new(
                        format!("{name}.phys"),
                        Op::Transpose { dimensions: ma.iter().map(|&d| d as i64).collect() },
                        Shape::array(a.elem, &dims).with_default_layouts(),
                    );
                    cur = comp.add(t, &[cur]);
                }
                let phys_b: Vec<u64> = mb.iter().map(|&d| bd[d]).collect();
                let r = Instr::new(
                    format!("{name}.reshape"),
                    Op::Reshape { inferred_dimension: None },
                    Shape::array(b.elem, &phys_b).with_default_layouts(),
                );
                cur = comp.add(r, &[cur]);
                let result = if is_identity(&mb) {
                    cur
                } else {
                    // Result dim i is physical position pos(i).
                    let mut inv = vec![0i64; mb.len()];
                    for (p, &d) in mb.iter().enumerate() {
                        inv[d] = p as i64;
                    }
                    let t = Instr::new(
                        format!("{name}.logical"),
                        Op::Transpose { dimensions: inv },
                        dst.clone(),
                    );
                    comp.add(t, &[cur])
                };
                comp.replace_all_uses(n, result);
                let _ = comp.remove(n);
                changed = true;
            }
        }
        Ok(changed)
    }
}
