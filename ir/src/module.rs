//! Modules: computations, the entry, the header and the stack-frame tables.

use std::fmt;

use crate::computation::Computation;
use crate::op::Alias;
use crate::types::Shape;

/// Index of a computation in [`Module::comps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompId(pub u32);

impl CompId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for CompId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "comp{}", self.0)
    }
}

#[derive(Debug, Clone)]
pub struct Module {
    pub name: String,
    pub comps: Vec<Computation>,
    pub entry: CompId,
    pub header: Header,
    pub frames: Option<FrameTables>,
}

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
        let loc = self.file_locations.get(usize::try_from(frame.file_location_id).ok()?.checked_sub(1)?)?;
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
        let entry = self.entry();
        let mut params: Vec<(u32, Shape)> = entry
            .params()
            .into_iter()
            .filter_map(|p| match entry.instr(p).op {
                crate::Op::Parameter { number, .. } => Some((number, entry.instr(p).shape.clone())),
                _ => None,
            })
            .collect();
        params.sort_by_key(|p| p.0);
        params.into_iter().map(|p| p.1).collect()
    }
    /// The entry result's array leaves in order, tuples flattened (the program's outputs,
    /// `o0..oM` in an `.npz`).
    pub fn entry_output_shapes(&self) -> Vec<Shape> {
        let entry = self.entry();
        let mut leaves = Vec::new();
        if let Some(r) = entry.root {
            entry.instr(r).shape.for_each_array(&mut |a| leaves.push(Shape::Array(a.clone())));
        }
        leaves
    }
    /// Total number of instructions in all computations.
    pub fn instr_count(&self) -> usize {
        self.comps.iter().map(|c| c.graph.node_count()).sum()
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
                for (_, callee) in comp.graph[node].op.called_computations() {
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
