//! Rejects `while` loops that provably never exit: the condition computation always
//! returns `true`.
//!
//! XLA has no `break`: a `while` stops only when its condition returns `false`, so a
//! condition that is `true` whatever the loop state makes the loop run forever (the
//! interpreter would hang, compiled code would spin). The analysis is deliberately
//! simple and sound — it reports only when the condition's root is *provably* all true:
//!
//! - a `pred` constant whose values are all `true`;
//! - `copy`, `reshape`, `bitcast`, `broadcast` of such a value (they keep every element);
//! - `and` of two such values; `or` where either operand is such a value.
//!
//! Anything else (parameters, comparisons, calls, ...) counts as unknown, so a loop is
//! never rejected because of an imprecise analysis.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::{Computation, Diagnostic, Diagnostics, ElemType, Module, NodeIndex, Op, Opcode};

/// Forwarding chains longer than this are not followed (the answer is then "unknown").
const MAX_DEPTH: usize = 64;

/// One error per `while` whose condition always returns `true`.
pub fn check_module(m: &Module) -> Diagnostics {
    let mut diags = Diagnostics::new();
    for comp in m.comps() {
        for n in comp.nodes() {
            let instr = comp.instr(n);
            let Op::While { condition, .. } = instr.op else { continue };
            let cond = m.comp(condition);
            let Some(root) = cond.root() else { continue };
            let Some(origin) = always_true(cond, root, 0) else { continue };
            let root_instr = cond.instr(root);
            let mut d = Diagnostic::error(
                instr.span,
                format!(
                    "`{}` never terminates: its condition `{}` always returns true",
                    instr.name, cond.name
                ),
            )
            .with_label("this while loop runs forever")
            .with_note(
                root_instr.span,
                format!("the condition's result `{}` is always true", root_instr.name),
            );
            if origin != root {
                let o = cond.instr(origin);
                d = d.with_note(
                    o.span,
                    format!("`{}` is the constant `true` it comes from", o.name),
                );
            }
            diags.push(d.with_help(
                "a while loop exits only when its condition returns false; make the condition depend on the loop state \
                 (e.g. compare an induction variable with the trip count)",
            ));
        }
    }
    diags
}

/// `Some(constant)` when every element of the value of `n` is provably `true`: the
/// constant it comes from (for `or`, the operand that decides).
fn always_true(comp: &Computation, n: NodeIndex, depth: usize) -> Option<NodeIndex> {
    if depth > MAX_DEPTH {
        return None;
    }
    let instr = comp.instr(n);
    // Only `pred` values: `and`/`or` are bitwise on integers.
    if !matches!(instr.shape.as_array(), Some(a) if a.elem == ElemType::Pred) {
        return None;
    }
    let ops = comp.operands(n);
    match &instr.op {
        Op::Constant(Literal::Array(LiteralData::Pred(v))) => v.iter().all(|&b| b).then_some(n),
        Op::Constant(Literal::Array(LiteralData::Int(v))) => v.iter().all(|&x| x != 0).then_some(n),
        Op::Plain(Opcode::Copy | Opcode::Bitcast) | Op::Reshape { .. } | Op::Broadcast { .. } => {
            always_true(comp, *ops.first()?, depth + 1)
        }
        Op::Plain(Opcode::And) => {
            let mut first = None;
            for &o in &ops {
                let c = always_true(comp, o, depth + 1)?;
                first.get_or_insert(c);
            }
            first
        }
        Op::Plain(Opcode::Or) => ops.iter().find_map(|&o| always_true(comp, o, depth + 1)),
        _ => None,
    }
}
