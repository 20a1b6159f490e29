//! The skeleton every op-expanding pass shares, as XLA's `OpExpanderPass`: an
//! [`OpExpander`] says which instructions it rewrites and builds each one's replacement;
//! [`Expand`] makes it a [`Pass`] that visits every computation, expands every matching
//! instruction, moves its uses to the replacement and removes it.
//!
//! The expanders: `scan-expander`, `rng-expander`, `rng-bit-generator-expander`,
//! `batch-norm-expander`, `cholesky-expander`, `triangular-solve-expander`.

use hlo_ir::{CompId, Diagnostic, Instr, Module, NodeIndex, Op, Shape, Span};

use hlo_pipeline::{Pass, PassContext};

/// What one op-expanding pass rewrites, and into what.
pub trait OpExpander {
    /// The pass's kebab-case name.
    fn name(&self) -> &'static str;

    /// Whether an instruction with this op is one to expand (a cheap test of the op).
    fn matches(&self, op: &Op) -> bool;

    /// Called once at the start of every run (per-module caches start empty).
    fn begin(&mut self) {}

    /// Builds the replacement of instruction `n` of computation `id` in that computation
    /// (new computations may be added to `m`) and returns it, or `None` to leave the
    /// instruction as it is (an engine with a kernel for it, or none, decides then). An
    /// error is located at the instruction.
    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic>;
}

/// An [`OpExpander`] run as a pass.
pub struct Expand<E>(pub E);

impl<E: OpExpander> Pass for Expand<E> {
    fn name(&self) -> &'static str {
        self.0.name()
    }

    fn run(&mut self, m: &mut Module, _cx: &mut PassContext) -> Result<bool, Diagnostic> {
        self.0.begin();
        let mut changed = false;
        for id in m.comp_ids() {
            // Each expansion is independent of the others: storage order will do (and
            // costs one sweep, not a post order, on modules without the op).
            let todo: Vec<NodeIndex> = {
                let c = m.comp(id);
                c.nodes().filter(|&n| self.0.matches(&c.instr(n).op)).collect()
            };
            for n in todo {
                let span = m.comp(id).instr(n).span;
                let Some(new) = self.0.expand(m, id, n)? else { continue };
                let comp = m.comp_mut(id);
                comp.replace_all_uses(n, new);
                comp.remove(n).map_err(|err| {
                    Diagnostic::error(span, format!("{}: {err:?}", self.0.name()))
                })?;
                changed = true;
            }
        }
        Ok(changed)
    }
}

/// A `call` of `callee` on `operands`, added to computation `id` where the expanded
/// instruction was (its `span` and `metadata`): what an expander that builds one
/// computation per shape (`cholesky`, `triangular-solve`) replaces each instruction with.
pub(crate) fn call(
    m: &mut Module,
    id: CompId,
    callee: CompId,
    shape: Shape,
    at: (Span, Option<Box<hlo_ir::instr::Metadata>>),
    operands: &[NodeIndex],
) -> NodeIndex {
    let mut call = Instr::new("call", Op::Call { to_apply: callee, is_composite: false }, shape);
    (call.span, call.metadata) = at;
    m.comp_mut(id).add(call, operands)
}
