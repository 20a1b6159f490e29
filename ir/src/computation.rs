//! Computations: a petgraph dataflow graph of instructions.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, NodeIndexable};

use crate::diag::Span;
use crate::instr::Instr;
use crate::op::Op;

/// The operand position an edge feeds at its consumer (`add(x, y)`: x is slot 0).
pub type Slot = u32;

/// The graph of one computation. An edge `a -> b` with weight `k` means "`a` is operand
/// `k` of `b`". Parallel edges are allowed (`add(x, x)`).
pub type Graph = StableDiGraph<Instr, Slot>;

#[derive(Debug, Clone)]
pub struct Computation {
    pub name: String,
    pub graph: Graph,
    /// The `ROOT` instruction (or the last one written when none is marked).
    pub root: Option<NodeIndex>,
    /// `execution_thread="..."` when written.
    pub execution_thread: Option<String>,
    /// Where the computation's name was written.
    pub span: Span,
    /// The `(p: shape, ...) -> shape` signature as written, for the verifier to check.
    pub signature: Option<Signature>,
}

/// A computation signature as written in dump-style text.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub params: Vec<(String, crate::types::Shape)>,
    pub result: crate::types::Shape,
    pub span: Span,
}

impl Computation {
    pub fn new(name: impl Into<String>) -> Computation {
        Computation {
            name: name.into(),
            graph: Graph::default(),
            root: None,
            execution_thread: None,
            span: Span::default(),
            signature: None,
        }
    }

    pub fn instr(&self, n: NodeIndex) -> &Instr {
        &self.graph[n]
    }

    pub fn instr_mut(&mut self, n: NodeIndex) -> &mut Instr {
        &mut self.graph[n]
    }

    pub fn add_instr(&mut self, instr: Instr) -> NodeIndex {
        self.graph.add_node(instr)
    }

    /// Makes `operand` the operand in `slot` of `user`.
    pub fn add_operand(&mut self, operand: NodeIndex, user: NodeIndex, slot: Slot) {
        self.graph.add_edge(operand, user, slot);
    }

    /// Operands of `n` in slot order.
    pub fn operands(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut v: Vec<(Slot, NodeIndex)> =
            self.graph.edges_directed(n, Direction::Incoming).map(|e| (*e.weight(), e.source())).collect();
        v.sort_unstable_by_key(|&(s, _)| s);
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// Distinct users of `n`, in creation order.
    pub fn users(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut v: Vec<NodeIndex> = self.graph.neighbors_directed(n, Direction::Outgoing).collect();
        v.sort_unstable_by_key(|&u| self.graph[u].seq);
        v.dedup();
        v
    }

    /// Parameter instructions ordered by parameter number.
    pub fn params(&self) -> Vec<NodeIndex> {
        let mut v: Vec<(u32, NodeIndex)> = self
            .graph
            .node_indices()
            .filter_map(|n| match self.graph[n].op {
                Op::Parameter { number, .. } => Some((number, n)),
                _ => None,
            })
            .collect();
        v.sort_unstable();
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// Finds an instruction by name.
    pub fn find(&self, name: &str) -> Option<NodeIndex> {
        self.graph.node_indices().find(|&n| self.graph[n].name == name)
    }

    /// Every instruction, definitions before uses (operands and control predecessors),
    /// ties broken by `seq`: deterministic and independent of `NodeIndex` values. On a
    /// cyclic graph the instructions on or behind the cycle are appended in `seq` order.
    pub fn post_order(&self) -> Vec<NodeIndex> {
        let by_name: HashMap<&str, NodeIndex> = if self.graph.node_weights().any(|i| !i.control_predecessors().is_empty()) {
            self.graph.node_indices().map(|n| (self.graph[n].name.as_str(), n)).collect()
        } else {
            HashMap::new()
        };
        let control_preds = |n: NodeIndex| {
            self.graph[n].control_predecessors().iter().filter_map(|p| by_name.get(p.as_str()).copied()).collect::<Vec<_>>()
        };
        let bound = self.graph.node_bound();
        let mut indegree = vec![0usize; bound];
        let mut control_succs: HashMap<NodeIndex, Vec<NodeIndex>> = HashMap::new();
        for n in self.graph.node_indices() {
            indegree[n.index()] = self.graph.edges_directed(n, Direction::Incoming).count();
            for p in control_preds(n) {
                indegree[n.index()] += 1;
                control_succs.entry(p).or_default().push(n);
            }
        }
        let mut ready: BinaryHeap<Reverse<(u32, NodeIndex)>> = self
            .graph
            .node_indices()
            .filter(|n| indegree[n.index()] == 0)
            .map(|n| Reverse((self.graph[n].seq, n)))
            .collect();
        let mut order = Vec::with_capacity(self.graph.node_count());
        let mut done = vec![false; bound];
        while let Some(Reverse((_, n))) = ready.pop() {
            order.push(n);
            done[n.index()] = true;
            let succs = self.graph.neighbors_directed(n, Direction::Outgoing).chain(control_succs.get(&n).into_iter().flatten().copied());
            for u in succs {
                indegree[u.index()] -= 1;
                if indegree[u.index()] == 0 {
                    ready.push(Reverse((self.graph[u].seq, u)));
                }
            }
        }
        if order.len() < self.graph.node_count() {
            let mut rest: Vec<NodeIndex> = self.graph.node_indices().filter(|n| !done[n.index()]).collect();
            rest.sort_unstable_by_key(|&n| self.graph[n].seq);
            order.extend(rest);
        }
        order
    }
}
