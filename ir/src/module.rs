//! Modules: computations, the entry, the header and the stack-frame tables.

use std::fmt;
use std::sync::Arc;

use crate::computation::{Computation, IdSource, name_stem, name_suffix};
use crate::hash::FnvHashMap;
use crate::op::Alias;
use crate::types::Shape;

pub use crate::ids::CompId;

/// An HLO module: computations (callees and the entry), the header and the stack-frame
/// tables. Computations are added, cloned and removed through methods that keep names
/// unique and every [`CompId`] reference valid. `Clone` is deep: the clone gets its own
/// [`IdSource`].
#[derive(Debug)]
pub struct Module {
    pub name: String,
    comps: Vec<Computation>,
    pub entry: CompId,
    pub header: Header,
    pub frames: Option<FrameTables>,
    ids: Arc<IdSource>,
}

impl Clone for Module {
    fn clone(&self) -> Module {
        let ids = Arc::new(IdSource::starting_at(self.ids.peek()));
        let comps = self
            .comps
            .iter()
            .map(|c| {
                let mut c = c.clone();
                c.set_ids(ids.clone());
                c
            })
            .collect();
        Module {
            name: self.name.clone(),
            comps,
            entry: self.entry,
            header: self.header.clone(),
            frames: self.frames.clone(),
            ids,
        }
    }
}

/// Why a computation could not be removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoveCompError {
    IsEntry,
    /// Still called by an instruction of another computation (`(caller, instruction)`).
    Called {
        caller: String,
        instr: String,
    },
}

impl fmt::Display for RemoveCompError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoveCompError::IsEntry => f.write_str("the entry computation cannot be removed"),
            RemoveCompError::Called { caller, instr } => {
                write!(f, "still called by `{instr}` in `{caller}`")
            }
        }
    }
}

impl std::error::Error for RemoveCompError {}

/// Module-level attributes of the `HloModule` line.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Header {
    pub is_scheduled: Option<bool>,
    /// `entry_computation_layout={(params)->result}`.
    pub entry_layout: Option<(Vec<Shape>, Shape)>,
    /// Where `entry_computation_layout` was written, for diagnostics.
    pub entry_layout_span: Option<crate::diag::Span>,
    /// `input_output_alias={ {out}: (param, {index}, kind) }` (JAX donation).
    pub input_output_alias: Option<Vec<Alias>>,
    /// `buffer_donor={ (param, {index}), ... }`.
    pub buffer_donor: Option<Vec<(i64, Vec<i64>)>>,
    pub alias_passthrough_params: Option<bool>,
    pub replica_count: Option<i64>,
    pub num_partitions: Option<i64>,
    pub allow_spmd_sharding_propagation_to_parameters: Option<Vec<bool>>,
    pub allow_spmd_sharding_propagation_to_output: Option<Vec<bool>>,
    /// `frontend_attributes={...}` verbatim.
    pub frontend_attributes: Option<String>,
    /// Other debug-only header attributes (`origin_recovery_table`), verbatim.
    pub extra: Vec<(String, String)>,
}

/// The `FileNames`/`FunctionNames`/`FileLocations`/`StackFrames` tables that
/// `metadata={... stack_frame_id=N}` refers to. Ids are 1-based, as printed.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FrameTables {
    pub file_names: Vec<String>,
    pub function_names: Vec<String>,
    pub file_locations: Vec<FileLocation>,
    pub stack_frames: Vec<StackFrame>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FileLocation {
    pub file_name_id: i64,
    pub function_name_id: i64,
    pub line: i64,
    pub end_line: i64,
    pub column: i64,
    pub end_column: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StackFrame {
    pub file_location_id: i64,
    /// As printed: the parent's id plus one, 1 meaning "no parent".
    pub parent_frame_id: i64,
}

/// A resolved source position of a stack frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLoc {
    pub file: String,
    pub function: String,
    pub line: i64,
    pub column: i64,
}

impl FrameTables {
    /// The innermost source location of stack frame `id` (1-based).
    pub fn location(&self, id: i64) -> Option<SourceLoc> {
        let frame = self.stack_frames.get(usize::try_from(id).ok()?.checked_sub(1)?)?;
        let loc = self
            .file_locations
            .get(usize::try_from(frame.file_location_id).ok()?.checked_sub(1)?)?;
        let file = self.file_names.get(usize::try_from(loc.file_name_id).ok()?.checked_sub(1)?)?;
        let function = self
            .function_names
            .get(usize::try_from(loc.function_name_id).ok()?.checked_sub(1)?)
            .cloned()
            .unwrap_or_default();
        Some(SourceLoc { file: file.clone(), function, line: loc.line, column: loc.column })
    }
}

impl Module {
    /// Assembles a parsed module. Every computation shares one [`IdSource`] that starts
    /// above every `seq` and numeric name suffix, so fresh names never collide; the
    /// computations count as unedited.
    pub fn from_parts(
        name: String,
        comps: Vec<Computation>,
        entry: CompId,
        header: Header,
        frames: Option<FrameTables>,
    ) -> Module {
        let first =
            comps.iter().flat_map(|c| c.instrs()).map(Module::ids_taken_by).max().unwrap_or(0);
        Module::from_parts_after(name, comps, entry, header, frames, first)
    }

    /// The ids an instruction takes: fresh ones start above its `seq` and its name's
    /// numeric suffix.
    pub(crate) fn ids_taken_by(i: &crate::instr::Instr) -> u32 {
        i.seq.saturating_add(1).max(name_suffix(&i.name).map_or(0, |s| s.saturating_add(1)))
    }

    /// [`Module::from_parts`] when the largest [`Module::ids_taken_by`] of the
    /// instructions, `first`, is known already (the parser finds it on two threads).
    pub(crate) fn from_parts_after(
        name: String,
        comps: Vec<Computation>,
        entry: CompId,
        header: Header,
        frames: Option<FrameTables>,
        mut first: u32,
    ) -> Module {
        for c in &comps {
            first = first.max(name_suffix(&c.name).map_or(0, |s| s.saturating_add(1)));
        }
        let ids = Arc::new(IdSource::starting_at(first));
        let comps = comps
            .into_iter()
            .map(|mut c| {
                c.set_ids(ids.clone());
                c.mark_pristine();
                c
            })
            .collect();
        Module { name, comps, entry, header, frames, ids }
    }

    /// A module with one empty entry computation named `entry_name` (for builders and tests).
    pub fn new(name: impl Into<String>, entry_name: &str) -> Module {
        let ids = Arc::new(IdSource::default());
        let entry = Computation::with_ids(entry_name, ids.clone());
        Module {
            name: name.into(),
            comps: vec![entry],
            entry: CompId(0),
            header: Header::default(),
            frames: None,
            ids,
        }
    }

    /// Every computation, indexed by [`CompId`].
    pub fn comps(&self) -> &[Computation] {
        &self.comps
    }

    /// The computation `id`, if it exists.
    pub fn get_comp(&self, id: CompId) -> Option<&Computation> {
        self.comps.get(id.index())
    }

    /// A fresh name unique in the module, from `base` (`fused_computation.<id>`).
    pub fn fresh_name(&self, base: &str) -> String {
        self.ids.fresh_name(base).0
    }

    /// An empty computation in this module's namespace, named from `base`; add it with
    /// [`Self::add_computation`].
    pub fn new_computation(&self, base: &str) -> Computation {
        Computation::with_ids(self.fresh_name(base), self.ids.clone())
    }

    /// Adds a computation. One built by [`Self::new_computation`] (or taken from this
    /// module) keeps its names; any other gets fresh module-unique names for its
    /// instructions and, when its name is taken, for itself.
    pub fn add_computation(&mut self, mut comp: Computation) -> CompId {
        if !Arc::ptr_eq(comp.ids(), &self.ids) {
            comp.set_ids(self.ids.clone());
            for n in comp.post_order() {
                let stem = name_stem(&comp.instr(n).name).to_string();
                comp.rename(n, &stem);
            }
            if self.find_comp(&comp.name).is_some() {
                comp.name = self.fresh_name(&comp.name);
            }
        }
        self.comps.push(comp);
        CompId(self.comps.len() as u32 - 1)
    }

    /// Clones computation `id` under a fresh name and returns the clone. With `deep`, every
    /// computation it calls (transitively) is cloned once too and the clones call each
    /// other (references remapped through [`crate::Op::map_computations`]).
    pub fn clone_computation(&mut self, id: CompId, deep: bool) -> CompId {
        let mut order = vec![id];
        if deep {
            let mut k = 0;
            while k < order.len() {
                let c = &self.comps[order[k].index()];
                for i in c.instrs() {
                    for (_, callee) in i.op.called_computations() {
                        if !order.contains(&callee) && callee.index() < self.comps.len() {
                            order.push(callee);
                        }
                    }
                }
                k += 1;
            }
        }
        let base = self.comps.len() as u32;
        let remap: FnvHashMap<CompId, CompId> =
            order.iter().enumerate().map(|(k, &c)| (c, CompId(base + k as u32))).collect();
        for &old in &order {
            let mut c = self.comps[old.index()].clone();
            c.name = self.fresh_name(&c.name);
            for n in c.post_order() {
                let stem = name_stem(&c.instr(n).name).to_string();
                c.rename(n, &stem);
                c.instr_mut(n).op.map_computations(&mut |x| remap.get(&x).copied().unwrap_or(x));
            }
            self.comps.push(c);
        }
        CompId(base)
    }

    /// Removes computation `id` when nothing calls it; later ids move down by one and
    /// every reference is remapped.
    pub fn remove_computation(&mut self, id: CompId) -> Result<Computation, RemoveCompError> {
        if id == self.entry {
            return Err(RemoveCompError::IsEntry);
        }
        for c in &self.comps {
            for i in c.instrs() {
                if i.op.called_computations().iter().any(|&(_, x)| x == id) {
                    return Err(RemoveCompError::Called {
                        caller: c.name.clone(),
                        instr: i.name.clone(),
                    });
                }
            }
        }
        let mut removed = self.retain_computations(|c| c == id);
        Ok(removed.pop().expect("one computation removed"))
    }

    /// Removes every computation unreachable from the entry; returns how many.
    pub fn remove_unreachable_computations(&mut self) -> usize {
        let mut reachable = vec![false; self.comps.len()];
        let mut stack = vec![self.entry];
        while let Some(id) = stack.pop() {
            if id.index() >= reachable.len() || std::mem::replace(&mut reachable[id.index()], true)
            {
                continue;
            }
            for i in self.comps[id.index()].instrs() {
                stack.extend(i.op.called_computations().into_iter().map(|(_, c)| c));
            }
        }
        self.retain_computations(|c| !reachable[c.index()]).len()
    }

    /// Removes the computations `drop` selects (none may be called by a kept one, nor be
    /// the entry) and remaps every reference; returns the removed ones.
    fn retain_computations(&mut self, mut drop: impl FnMut(CompId) -> bool) -> Vec<Computation> {
        let mut remap = Vec::with_capacity(self.comps.len());
        let mut kept = Vec::with_capacity(self.comps.len());
        let mut removed = Vec::new();
        for (k, c) in std::mem::take(&mut self.comps).into_iter().enumerate() {
            let id = CompId(k as u32);
            if id != self.entry && drop(id) {
                remap.push(None);
                removed.push(c);
            } else {
                remap.push(Some(CompId(kept.len() as u32)));
                kept.push(c);
            }
        }
        self.comps = kept;
        if !removed.is_empty() {
            self.entry = remap[self.entry.index()].expect("the entry is kept");
            for c in &mut self.comps {
                let nodes: Vec<_> = c.nodes().collect();
                for n in nodes {
                    if !c.instr(n).op.called_computations().is_empty() {
                        c.instr_mut(n).op.map_computations(&mut |x| {
                            remap.get(x.index()).copied().flatten().unwrap_or(x)
                        });
                    }
                }
            }
        }
        removed
    }

    /// `entry_computation_layout`: as written while the entry is unedited; derived from
    /// the entry's parameters and root once it was edited (never printed stale).
    pub fn entry_layout(&self) -> Option<(Vec<Shape>, Shape)> {
        let written = self.header.entry_layout.as_ref()?;
        let entry = self.entry();
        if !entry.is_edited() {
            return Some(written.clone());
        }
        let params = entry.param_shapes().into_iter().map(Shape::with_default_layouts).collect();
        Some((params, entry.result_shape()?.with_default_layouts()))
    }

    /// Whether any computation was edited since parsing.
    pub fn is_edited(&self) -> bool {
        self.comps.iter().any(Computation::is_edited)
    }

    pub fn entry(&self) -> &Computation {
        &self.comps[self.entry.index()]
    }
    pub fn comp(&self, id: CompId) -> &Computation {
        &self.comps[id.index()]
    }
    pub fn comp_mut(&mut self, id: CompId) -> &mut Computation {
        &mut self.comps[id.index()]
    }
    pub fn comp_ids(&self) -> impl Iterator<Item = CompId> + use<> {
        (0..self.comps.len() as u32).map(CompId)
    }
    pub fn find_comp(&self, name: &str) -> Option<CompId> {
        self.comps.iter().position(|c| c.name == name).map(|i| CompId(i as u32))
    }
    /// Entry parameter shapes in parameter-number order (the program's inputs).
    pub fn entry_param_shapes(&self) -> Vec<Shape> {
        self.entry().param_shapes().into_iter().cloned().collect()
    }
    /// The entry result's array leaves in order, tuples flattened (the program's outputs,
    /// `o0..oM` in an `.npz`).
    pub fn entry_output_shapes(&self) -> Vec<Shape> {
        let entry = self.entry();
        let mut leaves = Vec::new();
        if let Some(r) = entry.root() {
            entry.instr(r).shape.for_each_array(&mut |a| leaves.push(Shape::Array(a.clone())));
        }
        leaves
    }
    /// Total number of instructions in all computations.
    pub fn instr_count(&self) -> usize {
        self.comps.iter().map(Computation::len).sum()
    }

    /// Computations ordered callees before callers (as XLA prints them), ties by
    /// definition order; the entry last. Computations on a call cycle keep their order.
    pub fn post_order(&self) -> Vec<CompId> {
        let n = self.comps.len();
        let mut state = vec![0u8; n]; // 0 new, 1 in progress, 2 done
        let mut out = Vec::with_capacity(n);
        fn visit(m: &Module, id: CompId, state: &mut [u8], out: &mut Vec<CompId>) {
            if state[id.index()] != 0 {
                return;
            }
            state[id.index()] = 1;
            let comp = m.comp(id);
            for node in comp.post_order() {
                for (_, callee) in comp.instr(node).op.called_computations() {
                    if callee.index() < m.comps.len() {
                        visit(m, callee, state, out);
                    }
                }
            }
            state[id.index()] = 2;
            out.push(id);
        }
        for id in self.comp_ids() {
            if id != self.entry {
                visit(self, id, &mut state, &mut out);
            }
        }
        visit(self, self.entry, &mut state, &mut out);
        out
    }
}
