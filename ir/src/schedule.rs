//! One linearization and liveness analysis of a computation, shared by every engine that
//! executes a module (the interpreter, the JIT executor, the TPU lowering): instructions in
//! dependency order (`Computation::post_order`), operands as positions in that order, and
//! for each position the values whose last use it is.

use crate::{Computation, NodeIndex, Op};

/// One computation, flattened for execution: instructions in dependency order with
/// operands as positions in that order.
pub struct Schedule {
    pub nodes: Vec<NodeIndex>,
    pub operands: Vec<Vec<usize>>,
    /// `(parameter number, position)`.
    pub params: Vec<(usize, usize)>,
    pub root: usize,
    /// Positions whose value is dead after the step at this position.
    pub dead_after: Vec<Vec<usize>>,
}

impl Schedule {
    pub fn new(comp: &Computation) -> Schedule {
        let nodes = comp.post_order();
        let mut pos =
            vec![usize::MAX; comp.graph().node_indices().map(|n| n.index() + 1).max().unwrap_or(0)];
        for (i, n) in nodes.iter().enumerate() {
            pos[n.index()] = i;
        }
        let operands: Vec<Vec<usize>> = nodes
            .iter()
            .map(|&n| comp.operands(n).iter().map(|o| pos[o.index()]).collect())
            .collect();
        let params = nodes
            .iter()
            .enumerate()
            .filter_map(|(i, &n)| match comp.instr(n).op {
                Op::Parameter { number, .. } => Some((number as usize, i)),
                _ => None,
            })
            .collect();
        let root = comp.root().map_or(nodes.len().saturating_sub(1), |r| pos[r.index()]);
        let mut last_use = vec![None; nodes.len()];
        for (i, ops) in operands.iter().enumerate() {
            for &o in ops {
                last_use[o] = Some(i);
            }
        }
        let mut dead_after = vec![Vec::new(); nodes.len()];
        for (v, last) in last_use.iter().enumerate() {
            if let Some(l) = last
                && v != root
            {
                dead_after[*l].push(v);
            }
        }
        Schedule { nodes, operands, params, root, dead_after }
    }
}
