//! Computations: a petgraph dataflow graph of instructions, edited only through methods.
//!
//! A [`Computation`] owns its graph, a name→node map, its control edges (as node
//! references) and a handle on its module's [`IdSource`]. Every edit goes through a
//! method that keeps these in step:
//!
//! - [`Computation::add`] gives the new instruction a fresh `seq` and a fresh name unique
//!   in the whole module (`<stem>.<id>`, see [`IdSource`]);
//! - [`Computation::set_operand`], [`Computation::replace_operand`],
//!   [`Computation::replace_all_uses`] (operands, the root and control edges),
//!   [`Computation::remove`] (dead instructions only), [`Computation::set_root`];
//! - parameters: [`Computation::add_param`], [`Computation::remove_param`] (renumbers the
//!   rest), [`Computation::renumber_params`].
//!
//! After any edit the computation is *edited*: source-only state (the signature as written)
//! is no longer reported, so nothing stale is ever printed or checked.
//!
//! A `NodeIndex` is meaningful only inside one pass (petgraph's `StableGraph` reuses freed
//! indices); anything persistent names instructions by `name` or `seq`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use petgraph::Direction;
use petgraph::stable_graph::{NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};

use crate::diag::Span;
use crate::hash::FnvHashMap;
use crate::instr::Instr;
use crate::op::Op;
use crate::types::Shape;

/// The operand position an edge feeds at its consumer (`add(x, y)`: x is slot 0).
pub type Slot = u32;

/// The graph of one computation. An edge `a -> b` with weight `k` means "`a` is operand
/// `k` of `b`". Parallel edges are allowed (`add(x, x)`).
pub type Graph = StableDiGraph<Instr, Slot>;

/// The module-wide source of fresh ids: every instruction added after parsing gets the
/// next id as its `seq`, and names built by [`IdSource::fresh_name`] end in it. The first
/// id is above every `seq` and every numeric name suffix (`add.41`) in the parsed module,
/// so `<stem>.<id>` can never collide with an existing name or with another fresh one.
/// Shared (`Arc`) by the module and its computations, like XLA's module-level uniquer.
#[derive(Debug, Default)]
pub struct IdSource(AtomicU32);

impl IdSource {
    pub fn starting_at(first: u32) -> IdSource {
        IdSource(AtomicU32::new(first))
    }
    pub fn next(&self) -> u32 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
    pub fn peek(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
    /// Makes the next id at least `n`.
    pub fn bump_to(&self, n: u32) {
        self.0.fetch_max(n, Ordering::Relaxed);
    }
    /// `<stem>.<id>` with a fresh id; a numeric suffix of `base` is dropped first
    /// (`add.5` → `add.<id>`), and an empty base becomes `instr`.
    pub fn fresh_name(&self, base: &str) -> (String, u32) {
        let id = self.next();
        (format!("{}.{id}", name_stem(base)), id)
    }
}

/// `base` without a trailing `.<digits>` (`add.5` → `add`; `add` and `a.b` are kept).
pub fn name_stem(base: &str) -> &str {
    let stem = match base.rsplit_once('.') {
        Some((stem, digits))
            if !stem.is_empty()
                && !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            stem
        }
        _ => base,
    };
    if stem.is_empty() { "instr" } else { stem }
}

/// The numeric suffix of a name (`add.41` → 41), if any.
pub fn name_suffix(name: &str) -> Option<u32> {
    let (stem, digits) = name.rsplit_once('.')?;
    if stem.is_empty() || digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A set of small integers with a cheap "take the least": one bit per member, one
/// summary bit per non-empty word, and the first summary word that may be non-empty.
struct RankSet {
    words: Vec<u64>,
    summary: Vec<u64>,
    low: usize,
}

impl RankSet {
    fn new(n: usize) -> RankSet {
        let words = n.div_ceil(64);
        RankSet { words: vec![0; words], summary: vec![0; words.div_ceil(64)], low: 0 }
    }
    fn insert(&mut self, r: usize) {
        self.words[r / 64] |= 1 << (r % 64);
        self.summary[r / 4096] |= 1 << ((r / 64) % 64);
        self.low = self.low.min(r / 4096);
    }
    fn pop_min(&mut self) -> Option<usize> {
        let s = self.low + self.summary[self.low..].iter().position(|&x| x != 0)?;
        self.low = s;
        let w = s * 64 + self.summary[s].trailing_zeros() as usize;
        let b = self.words[w].trailing_zeros() as usize;
        self.words[w] &= self.words[w] - 1;
        if self.words[w] == 0 {
            self.summary[s] &= !(1 << (w % 64));
        }
        Some(w * 64 + b)
    }
}

/// Why an edit was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The instruction still has users (or control successors).
    HasUsers(String),
    /// The instruction is the computation's root.
    IsRoot(String),
    /// The node is not in this computation.
    NoSuchNode,
    /// The instruction is (or is not) a parameter where the edit needs the opposite.
    Parameter(String),
    /// An operand slot out of range.
    NoSuchSlot { instr: String, slot: Slot },
    /// Another instruction of the computation already has this name.
    NameTaken(String),
}

impl std::fmt::Display for EditError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EditError::HasUsers(n) => write!(f, "`{n}` still has users"),
            EditError::IsRoot(n) => write!(f, "`{n}` is the root of its computation"),
            EditError::NoSuchNode => write!(f, "no such instruction in this computation"),
            EditError::Parameter(m) => f.write_str(m),
            EditError::NoSuchSlot { instr, slot } => write!(f, "`{instr}` has no operand {slot}"),
            EditError::NameTaken(n) => write!(f, "the name `{n}` is taken"),
        }
    }
}

impl std::error::Error for EditError {}

#[derive(Debug, Clone)]
pub struct Computation {
    pub name: String,
    /// `execution_thread="..."` when written.
    pub execution_thread: Option<String>,
    /// Where the computation's name was written.
    pub span: Span,
    graph: Graph,
    /// The `ROOT` instruction (or the last one written when none is marked).
    root: Option<NodeIndex>,
    names: FnvHashMap<String, NodeIndex>,
    /// Control predecessors of each node that has any, in the order written.
    control: FnvHashMap<NodeIndex, Vec<NodeIndex>>,
    /// The `(p: shape, ...) -> shape` signature as written, for the verifier to check.
    signature: Option<Signature>,
    ids: Arc<IdSource>,
    edited: bool,
}

/// A computation signature as written in dump-style text.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub params: Vec<(String, crate::types::Shape)>,
    pub result: crate::types::Shape,
    pub span: Span,
}

impl Computation {
    /// An empty computation with its own id source; [`crate::Module::add_computation`]
    /// renames its instructions into the module's namespace. Passes building a computation
    /// for a module use [`crate::Module::new_computation`] instead (no renaming needed).
    pub fn new(name: impl Into<String>) -> Computation {
        Computation::with_ids(name, Arc::new(IdSource::default()))
    }

    /// An empty computation with room for `nodes` instructions and `edges` operand edges
    /// (the parser knows both: one allocation instead of a doubling series).
    pub(crate) fn with_capacity(
        name: impl Into<String>,
        nodes: usize,
        edges: usize,
    ) -> Computation {
        let mut c = Computation::new(name);
        c.graph = Graph::with_capacity(nodes, edges);
        c.names.reserve(nodes);
        c
    }

    pub(crate) fn with_ids(name: impl Into<String>, ids: Arc<IdSource>) -> Computation {
        Computation {
            name: name.into(),
            execution_thread: None,
            span: Span::default(),
            graph: Graph::default(),
            root: None,
            names: FnvHashMap::default(),
            control: FnvHashMap::default(),
            signature: None,
            ids,
            edited: false,
        }
    }

    pub(crate) fn ids(&self) -> &Arc<IdSource> {
        &self.ids
    }

    pub(crate) fn set_ids(&mut self, ids: Arc<IdSource>) {
        self.ids = ids;
    }

    // ---- reading ----

    pub fn instr(&self, n: NodeIndex) -> &Instr {
        &self.graph[n]
    }

    pub fn get(&self, n: NodeIndex) -> Option<&Instr> {
        self.graph.node_weight(n)
    }

    pub fn contains(&self, n: NodeIndex) -> bool {
        self.graph.contains_node(n)
    }

    /// The graph, read-only (for petgraph algorithms).
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    pub fn root(&self) -> Option<NodeIndex> {
        self.root
    }

    /// Number of instructions.
    pub fn len(&self) -> usize {
        self.graph.node_count()
    }

    pub fn is_empty(&self) -> bool {
        self.graph.node_count() == 0
    }

    /// Every node, in index order (not a meaningful order: use [`Self::post_order`] for one).
    pub fn nodes(&self) -> impl Iterator<Item = NodeIndex> + '_ {
        self.graph.node_indices()
    }

    /// Every instruction, in index order.
    pub fn instrs(&self) -> impl Iterator<Item = &Instr> + '_ {
        self.graph.node_weights()
    }

    /// Operands of `n` in slot order.
    pub fn operands(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut v: Vec<(Slot, NodeIndex)> = self
            .graph
            .edges_directed(n, Direction::Incoming)
            .map(|e| (*e.weight(), e.source()))
            .collect();
        v.sort_unstable_by_key(|&(s, _)| s);
        v.into_iter().map(|(_, n)| n).collect()
    }

    /// The operand in `slot` of `n`.
    pub fn operand(&self, n: NodeIndex, slot: Slot) -> Option<NodeIndex> {
        self.graph
            .edges_directed(n, Direction::Incoming)
            .find(|e| *e.weight() == slot)
            .map(|e| e.source())
    }

    pub fn operand_count(&self, n: NodeIndex) -> usize {
        self.graph.edges_directed(n, Direction::Incoming).count()
    }

    /// Distinct users of `n`, in creation (`seq`) order.
    pub fn users(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut v: Vec<NodeIndex> = self.graph.neighbors_directed(n, Direction::Outgoing).collect();
        v.sort_unstable_by_key(|&u| (self.graph[u].seq, u.index()));
        v.dedup();
        v
    }

    /// The one instruction that uses `n` (in any number of operand slots), if exactly one
    /// does. Stops at the second distinct user: O(1) for a node with many users, without
    /// the allocation and sort of [`Self::users`].
    pub fn sole_user(&self, n: NodeIndex) -> Option<NodeIndex> {
        let mut users = self.graph.neighbors_directed(n, Direction::Outgoing);
        let first = users.next()?;
        users.all(|u| u == first).then_some(first)
    }

    /// Every user of `n` in no particular order, possibly repeated (one entry per operand
    /// slot): for questions whose answer does not depend on order.
    pub fn users_unordered(&self, n: NodeIndex) -> impl Iterator<Item = NodeIndex> + '_ {
        self.graph.neighbors_directed(n, Direction::Outgoing)
    }

    /// Whether `n` is used as an operand anywhere.
    pub fn has_users(&self, n: NodeIndex) -> bool {
        self.graph.neighbors_directed(n, Direction::Outgoing).next().is_some()
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

    /// The parameter with number `number`.
    pub fn param(&self, number: u32) -> Option<NodeIndex> {
        self.graph
            .node_indices()
            .find(|&n| matches!(self.graph[n].op, Op::Parameter { number: k, .. } if k == number))
    }

    /// Parameter shapes in parameter-number order.
    pub fn param_shapes(&self) -> Vec<&Shape> {
        self.params().into_iter().map(|p| &self.graph[p].shape).collect()
    }

    /// The root's shape.
    pub fn result_shape(&self) -> Option<&Shape> {
        self.root.map(|r| &self.graph[r].shape)
    }

    /// Finds an instruction by name.
    pub fn find(&self, name: &str) -> Option<NodeIndex> {
        self.names.get(name).copied()
    }

    /// Control predecessors of `n` (instructions that must run before it), in order.
    pub fn control_predecessors(&self, n: NodeIndex) -> &[NodeIndex] {
        self.control.get(&n).map_or(&[], Vec::as_slice)
    }

    /// Instructions that have `n` as a control predecessor, in `seq` order.
    pub fn control_successors(&self, n: NodeIndex) -> Vec<NodeIndex> {
        let mut v: Vec<NodeIndex> =
            self.control.iter().filter(|(_, p)| p.contains(&n)).map(|(&s, _)| s).collect();
        v.sort_unstable_by_key(|&s| self.graph[s].seq);
        v
    }

    /// Whether any instruction has control predecessors.
    pub fn has_control_edges(&self) -> bool {
        !self.control.is_empty()
    }

    /// The signature as written in the text; `None` once the computation was edited.
    pub fn signature(&self) -> Option<&Signature> {
        if self.edited { None } else { self.signature.as_ref() }
    }

    /// Whether the computation was changed since it was parsed (or built).
    pub fn is_edited(&self) -> bool {
        self.edited
    }

    /// Every instruction, definitions before uses (operands and control predecessors),
    /// ties broken by `seq`: deterministic and independent of `NodeIndex` values. On a
    /// cyclic graph the instructions on or behind the cycle are appended in `seq` order.
    pub fn post_order(&self) -> Vec<NodeIndex> {
        // One sequential sweep over the edge and node arrays builds the successor lists
        // (CSR) and in-degrees, so the ordering loop never walks petgraph's per-node
        // linked lists (random memory accesses that dominate on large graphs).
        let bound = self.graph.node_bound();
        let mut indegree = vec![0u32; bound];
        let mut start = vec![0u32; bound + 1];
        let mut seq = vec![0u32; bound];
        for (n, i) in self.graph.node_indices().zip(self.graph.node_weights()) {
            seq[n.index()] = i.seq;
        }
        let edges = || {
            self.graph.edge_references().map(|e| (e.source(), e.target())).chain(
                self.control
                    .iter()
                    .flat_map(|(&succ, preds)| preds.iter().map(move |&p| (p, succ))),
            )
        };
        let mut seq_is_topological = true;
        for (src, dst) in edges() {
            start[src.index() + 1] += 1;
            indegree[dst.index()] += 1;
            seq_is_topological &= seq[src.index()] < seq[dst.index()];
        }
        let mut by_seq: Vec<NodeIndex> = self.graph.node_indices().collect();
        by_seq.sort_unstable_by_key(|n| seq[n.index()]);
        if seq_is_topological {
            // Every edge goes from a lower to a higher `seq` (a parsed module, or edits
            // that only added consumers): Kahn's order with `seq` tie-breaks is then the
            // `seq` order itself (the least unplaced `seq` always has all its
            // predecessors placed).
            return by_seq;
        }
        for k in 0..bound {
            start[k + 1] += start[k];
        }
        let mut fill = start.clone();
        let mut succ = vec![NodeIndex::end(); start[bound] as usize];
        for (src, dst) in edges() {
            succ[fill[src.index()] as usize] = dst;
            fill[src.index()] += 1;
        }
        // Kahn's algorithm; the ready set is a two-level bitset over `seq` ranks, so
        // taking the least `seq` costs a few word scans instead of a heap operation.
        let mut rank = vec![0u32; bound];
        for (r, n) in by_seq.iter().enumerate() {
            rank[n.index()] = r as u32;
        }
        let mut ready = RankSet::new(by_seq.len());
        for n in self.graph.node_indices() {
            if indegree[n.index()] == 0 {
                ready.insert(rank[n.index()] as usize);
            }
        }
        let mut order = Vec::with_capacity(self.graph.node_count());
        let mut done = vec![false; bound];
        while let Some(r) = ready.pop_min() {
            let n = by_seq[r];
            let k = n.index();
            order.push(n);
            done[k] = true;
            for &u in &succ[start[k] as usize..start[k + 1] as usize] {
                indegree[u.index()] -= 1;
                if indegree[u.index()] == 0 {
                    ready.insert(rank[u.index()] as usize);
                }
            }
        }
        if order.len() < self.graph.node_count() {
            let mut rest: Vec<NodeIndex> =
                self.graph.node_indices().filter(|n| !done[n.index()]).collect();
            rest.sort_unstable_by_key(|&n| seq[n.index()]);
            order.extend(rest);
        }
        order
    }

    // ---- editing ----

    fn touch(&mut self) {
        self.edited = true;
    }

    /// The instruction, for changing its op, shape, sharding, metadata or extras. Its
    /// `name` and `seq` must not be changed here (use [`Self::rename`]): the name map would
    /// go stale.
    pub fn instr_mut(&mut self, n: NodeIndex) -> &mut Instr {
        self.touch();
        &mut self.graph[n]
    }

    /// Adds `instr` with `operands` (slot order). It gets a fresh `seq` and a fresh name
    /// built from its own name (or its opcode's when empty): `multiply.3` → `multiply.<id>`.
    pub fn add(&mut self, mut instr: Instr, operands: &[NodeIndex]) -> NodeIndex {
        let base = if instr.name.is_empty() {
            instr.op.opcode().name().to_string()
        } else {
            std::mem::take(&mut instr.name)
        };
        let (name, id) = self.ids.fresh_name(&base);
        instr.name = name;
        instr.seq = id;
        self.touch();
        let n = self.insert(instr);
        for (slot, &o) in operands.iter().enumerate() {
            self.graph.add_edge(o, n, slot as Slot);
        }
        n
    }

    /// Inserts `instr` keeping its name and `seq` (the parser; module insertion). A name
    /// already taken in this computation keeps mapping to the first instruction.
    pub(crate) fn insert(&mut self, instr: Instr) -> NodeIndex {
        let name = instr.name.clone();
        let n = self.graph.add_node(instr);
        self.names.entry(name).or_insert(n);
        n
    }

    /// Makes `operand` the operand in `slot` of `user` (the parser; builders).
    pub(crate) fn link(&mut self, operand: NodeIndex, user: NodeIndex, slot: Slot) {
        self.graph.add_edge(operand, user, slot);
    }

    pub(crate) fn set_signature(&mut self, sig: Option<Signature>) {
        self.signature = sig;
    }

    pub(crate) fn set_control_parsed(&mut self, n: NodeIndex, preds: Vec<NodeIndex>) {
        if !preds.is_empty() {
            self.control.insert(n, preds);
        }
    }

    pub(crate) fn set_root_parsed(&mut self, root: Option<NodeIndex>) {
        self.root = root;
    }

    pub(crate) fn mark_pristine(&mut self) {
        self.edited = false;
    }

    /// Gives `n` a fresh name from `stem` (`<stem>.<id>`); returns it.
    pub fn rename(&mut self, n: NodeIndex, stem: &str) -> &str {
        let (name, _) = self.ids.fresh_name(stem);
        self.touch();
        let old = std::mem::replace(&mut self.graph[n].name, name.clone());
        if self.names.get(&old) == Some(&n) {
            self.names.remove(&old);
        }
        self.names.insert(name, n);
        &self.graph[n].name
    }

    /// Names `n` exactly `name` (where [`Self::rename`] adds a fresh suffix); refused when
    /// another instruction of this computation has that name. Names must stay unique in
    /// the module: the caller picks a name no other computation uses. A numeric suffix
    /// (`x.7`) moves the module's fresh ids above it.
    pub fn set_name(&mut self, n: NodeIndex, name: &str) -> Result<(), EditError> {
        if !self.contains(n) {
            return Err(EditError::NoSuchNode);
        }
        match self.names.get(name) {
            Some(&m) if m == n => return Ok(()),
            Some(_) => return Err(EditError::NameTaken(name.to_string())),
            None => {}
        }
        if let Some(suffix) = name_suffix(name) {
            self.ids.bump_to(suffix.saturating_add(1));
        }
        self.touch();
        let old = std::mem::replace(&mut self.graph[n].name, name.to_string());
        if self.names.get(&old) == Some(&n) {
            self.names.remove(&old);
        }
        self.names.insert(name.to_string(), n);
        Ok(())
    }

    /// Makes `new` the operand in `slot` of `user`.
    pub fn set_operand(
        &mut self,
        user: NodeIndex,
        slot: Slot,
        new: NodeIndex,
    ) -> Result<(), EditError> {
        let e = self
            .graph
            .edges_directed(user, Direction::Incoming)
            .find(|e| *e.weight() == slot)
            .map(|e| e.id())
            .ok_or_else(|| EditError::NoSuchSlot { instr: self.graph[user].name.clone(), slot })?;
        self.touch();
        self.graph.remove_edge(e);
        self.graph.add_edge(new, user, slot);
        Ok(())
    }

    /// Replaces every use of `old` as an operand of `user` by `new`; returns how many slots.
    pub fn replace_operand(&mut self, user: NodeIndex, old: NodeIndex, new: NodeIndex) -> usize {
        let edges: Vec<_> =
            self.graph.edges_connecting(old, user).map(|e| (e.id(), *e.weight())).collect();
        if !edges.is_empty() {
            self.touch();
        }
        for &(e, slot) in &edges {
            self.graph.remove_edge(e);
            self.graph.add_edge(new, user, slot);
        }
        edges.len()
    }

    /// Replaces every use of `old` by `new`: as an operand (every slot of every user but
    /// `new` itself, which may be built on `old`, as in XLA), as the root, and as a control
    /// predecessor (instructions ordered after `old` are ordered after `new`). `old` keeps
    /// its own operands and control predecessors. Returns the number of operand uses
    /// replaced.
    pub fn replace_all_uses(&mut self, old: NodeIndex, new: NodeIndex) -> usize {
        if old == new {
            return 0;
        }
        self.touch();
        let edges: Vec<_> = self
            .graph
            .edges_directed(old, Direction::Outgoing)
            .filter(|e| e.target() != new)
            .map(|e| (e.id(), e.target(), *e.weight()))
            .collect();
        for &(e, user, slot) in &edges {
            self.graph.remove_edge(e);
            self.graph.add_edge(new, user, slot);
        }
        if self.root == Some(old) {
            self.root = Some(new);
        }
        for (&succ, preds) in self.control.iter_mut() {
            if preds.contains(&old) {
                preds.retain(|&p| p != old);
                if succ != new && !preds.contains(&new) {
                    preds.push(new);
                }
            }
        }
        self.control.retain(|_, p| !p.is_empty());
        edges.len()
    }

    /// Replaces the uses of `old` by `new` in the users `keep` says yes to (operand uses
    /// only). Returns the number of slots replaced.
    pub fn replace_uses_where(
        &mut self,
        old: NodeIndex,
        new: NodeIndex,
        mut keep: impl FnMut(NodeIndex) -> bool,
    ) -> usize {
        let users: Vec<NodeIndex> =
            self.users(old).into_iter().filter(|&u| u != new && keep(u)).collect();
        users.into_iter().map(|u| self.replace_operand(u, old, new)).sum()
    }

    /// Removes a dead instruction: no users, not the root, not a parameter (see
    /// [`Self::remove_param`]). Its control predecessors become those of its control
    /// successors, so the ordering it imposed survives. Returns the instruction.
    pub fn remove(&mut self, n: NodeIndex) -> Result<Instr, EditError> {
        let i = self.graph.node_weight(n).ok_or(EditError::NoSuchNode)?;
        if matches!(i.op, Op::Parameter { .. }) {
            return Err(EditError::Parameter(format!(
                "`{}` is a parameter: use remove_param",
                i.name
            )));
        }
        self.remove_node(n)
    }

    fn remove_node(&mut self, n: NodeIndex) -> Result<Instr, EditError> {
        let i = &self.graph[n];
        if self.root == Some(n) {
            return Err(EditError::IsRoot(i.name.clone()));
        }
        if self.has_users(n) {
            return Err(EditError::HasUsers(i.name.clone()));
        }
        self.touch();
        let preds = self.control.remove(&n).unwrap_or_default();
        for (&succ, ps) in self.control.iter_mut() {
            if ps.contains(&n) {
                ps.retain(|&p| p != n);
                for &p in &preds {
                    if p != succ && !ps.contains(&p) {
                        ps.push(p);
                    }
                }
            }
        }
        self.control.retain(|_, p| !p.is_empty());
        let instr = self.graph.remove_node(n).expect("checked above");
        if self.names.get(&instr.name) == Some(&n) {
            self.names.remove(&instr.name);
        }
        Ok(instr)
    }

    /// Sets the root.
    pub fn set_root(&mut self, n: NodeIndex) {
        self.touch();
        self.root = Some(n);
    }

    /// Adds parameter number `params().len()` with `shape`, named from `base`.
    pub fn add_param(&mut self, base: &str, shape: Shape) -> NodeIndex {
        let number = self.params().len() as u32;
        self.add(Instr::new(base, Op::Parameter { number, replication: None }, shape), &[])
    }

    /// Removes an unused parameter; the parameters after it move down by one.
    pub fn remove_param(&mut self, n: NodeIndex) -> Result<Instr, EditError> {
        let Some(Op::Parameter { number, .. }) = self.graph.node_weight(n).map(|i| &i.op) else {
            return Err(EditError::Parameter("not a parameter".into()));
        };
        let removed = *number;
        let instr = self.remove_node(n)?;
        for p in self.params() {
            if let Op::Parameter { number, .. } = &mut self.graph[p].op
                && *number > removed
            {
                *number -= 1;
            }
        }
        Ok(instr)
    }

    /// Renumbers the parameters: `order[k]` becomes parameter `k`. `order` must list every
    /// parameter exactly once.
    pub fn renumber_params(&mut self, order: &[NodeIndex]) -> Result<(), EditError> {
        let mut params = self.params();
        let mut given = order.to_vec();
        params.sort_unstable();
        given.sort_unstable();
        if params != given {
            return Err(EditError::Parameter(
                "renumber_params needs every parameter exactly once".into(),
            ));
        }
        self.touch();
        for (k, &p) in order.iter().enumerate() {
            if let Op::Parameter { number, .. } = &mut self.graph[p].op {
                *number = k as u32;
            }
        }
        Ok(())
    }

    /// Orders `succ` after `pred` (a control edge).
    pub fn add_control_edge(&mut self, pred: NodeIndex, succ: NodeIndex) {
        self.touch();
        let preds = self.control.entry(succ).or_default();
        if !preds.contains(&pred) {
            preds.push(pred);
        }
    }

    /// Drops every control edge into and out of `n`.
    pub fn remove_control_edges(&mut self, n: NodeIndex) {
        self.touch();
        self.control.remove(&n);
        for ps in self.control.values_mut() {
            ps.retain(|&p| p != n);
        }
        self.control.retain(|_, p| !p.is_empty());
    }

    /// Removes every instruction that no root, user or control edge needs and that
    /// `removable` allows (dead-code elimination's sweep). Returns how many were removed.
    pub fn remove_dead(&mut self, mut removable: impl FnMut(&Instr) -> bool) -> usize {
        let mut live = vec![false; self.graph.node_bound()];
        let mut stack: Vec<NodeIndex> = Vec::new();
        for n in self.graph.node_indices() {
            let i = &self.graph[n];
            if Some(n) == self.root
                || matches!(i.op, Op::Parameter { .. })
                || !removable(i)
                || self.control.contains_key(&n)
            {
                stack.push(n);
            }
        }
        for preds in self.control.values() {
            stack.extend(preds.iter().copied());
        }
        while let Some(n) = stack.pop() {
            if std::mem::replace(&mut live[n.index()], true) {
                continue;
            }
            stack.extend(self.graph.neighbors_directed(n, Direction::Incoming));
            stack.extend(self.control_predecessors(n).iter().copied());
        }
        let dead: Vec<NodeIndex> = self.graph.node_indices().filter(|n| !live[n.index()]).collect();
        if !dead.is_empty() {
            self.touch();
        }
        for &n in &dead {
            let instr = self.graph.remove_node(n).expect("a node of this graph");
            if self.names.get(&instr.name) == Some(&n) {
                self.names.remove(&instr.name);
            }
        }
        dead.len()
    }
}
