//! `while` and `conditional` (XLA's `HandleWhile`, `HandleConditional`): bodies,
//! conditions and branches are partitioned as computations of their own, their
//! parameters and roots in the loop's (branch's) sharding; the branch index of a
//! conditional is replicated. Calls are inlined before partitioning (`inline-calls`).

use std::collections::HashMap;

use hlo_ir::{CompId, Diagnostic, Instr, NodeIndex, Op};

use super::builder::{Builder, PV, err};
use crate::geometry::Placed;

impl Builder<'_> {
    /// Partitions computation `id` (a loop body, condition or branch) into a new one
    /// whose parameter leaves are in `param`'s shardings and whose root leaves are
    /// resharded to `root` (when given).
    fn lower_body(
        &mut self,
        id: CompId,
        param: &[Placed],
        root: Option<&[Placed]>,
    ) -> Result<CompId, Diagnostic> {
        let old = self.m.comp(id).clone();
        let fresh = self.m.new_computation(&old.name);
        let saved = (
            std::mem::replace(&mut self.c, fresh),
            self.pid.take(),
            std::mem::take(&mut self.tables),
            std::mem::take(&mut self.zeros),
            std::mem::take(&mut self.reshards),
        );
        let result = (|| -> Result<(), Diagnostic> {
            let mut vals: HashMap<NodeIndex, PV> = HashMap::new();
            for node in old.post_order() {
                let ins = old.instr(node);
                let v = if let Op::Parameter { number, .. } = ins.op {
                    let local = Self::local_shape(&ins.shape, &mut param.iter());
                    let p = self.add(
                        Instr::new(
                            ins.name.clone(),
                            Op::Parameter { number, replication: None },
                            local,
                        ),
                        &[],
                    );
                    self.unpack(p, &ins.shape, &mut param.iter())
                } else {
                    let ops: Vec<PV> = old.operands(node).iter().map(|o| vals[o].clone()).collect();
                    self.lower(ins, &ops)?
                };
                vals.insert(node, v);
            }
            let r = old.root().ok_or_else(|| {
                Diagnostic::error(old.span, format!("`{}` has no root", old.name))
            })?;
            let v = vals.remove(&r).expect("root lowered");
            let v = match root {
                Some(specs) => self.reshard_tree(&v, &mut specs.iter()),
                None => v,
            };
            let node = self.materialize(&v);
            self.c.set_root(node);
            Ok(())
        })();
        let c = std::mem::replace(&mut self.c, saved.0);
        (self.pid, self.tables, self.zeros, self.reshards) = (saved.1, saved.2, saved.3, saved.4);
        result?;
        Ok(self.m.add_computation(c))
    }

    /// A `while`: its state in the loop's sharding, body and condition partitioned on it.
    pub(super) fn lower_while(
        &mut self,
        ins: &Instr,
        condition: CompId,
        body: CompId,
        ops: &[PV],
    ) -> Result<PV, Diagnostic> {
        let specs = self.leaf_wants(ins)?;
        let init = self.reshard_tree(&ops[0], &mut specs.iter());
        let init = self.materialize(&init);
        let body = self.lower_body(body, &specs, Some(&specs))?;
        let cond = self.lower_body(condition, &specs, None)?;
        let shape = Self::local_shape(&ins.shape, &mut specs.iter());
        let mut w = Instr::new(ins.name.clone(), Op::While { condition: cond, body }, shape);
        w.metadata = ins.metadata.clone();
        let node = self.add(w, &[init]);
        Ok(self.unpack(node, &ins.shape, &mut specs.iter()))
    }

    /// A `conditional`: each branch partitioned on its operand in the branch parameter's
    /// sharding, its root resharded to the conditional's.
    pub(super) fn lower_conditional(
        &mut self,
        ins: &Instr,
        br: &hlo_ir::op::Branches,
        ops: &[PV],
    ) -> Result<PV, Diagnostic> {
        use hlo_ir::op::Branches;
        let specs = self.leaf_wants(ins)?;
        let comps: Vec<CompId> = match br {
            Branches::TrueFalse(t, f) => vec![*t, *f],
            Branches::Indexed(v) => v.clone(),
        };
        let sel = self.replicate(&ops[0]);
        let mut operands = vec![self.materialize(&sel)];
        let mut new = Vec::with_capacity(comps.len());
        for (k, &c) in comps.iter().enumerate() {
            let callee = self.m.comp(c);
            let p = callee.param(0).ok_or_else(|| err(ins, "a branch without a parameter"))?;
            let pspecs = self.leaf_wants(&callee.instr(p).clone())?;
            let arg = self.reshard_tree(&ops[k + 1], &mut pspecs.iter());
            operands.push(self.materialize(&arg));
            new.push(self.lower_body(c, &pspecs, Some(&specs))?);
        }
        let branches = match br {
            Branches::TrueFalse(..) => Branches::TrueFalse(new[0], new[1]),
            Branches::Indexed(_) => Branches::Indexed(new),
        };
        let shape = Self::local_shape(&ins.shape, &mut specs.iter());
        let mut c = Instr::new(ins.name.clone(), Op::Conditional(branches), shape);
        c.metadata = ins.metadata.clone();
        let node = self.add(c, &operands);
        Ok(self.unpack(node, &ins.shape, &mut specs.iter()))
    }
}
