//! Sharding semantics and analysis (GSPMD): the data lives in `hlo_ir::sharding` as
//! written; this module gives it meaning.
//!
//! - [`spec`]: the semantic form ([`Spec`], [`Tiling`]): equality independent of the
//!   printed form, canonical printing as XLA prints it, each device's tile and shard
//!   bounds, and the operations the rules compose (a sharding moved along a dim map;
//!   GSPMD's choice among candidates: more specific, improved, merged).
//! - [`mesh`]: a named device mesh; shardings described as `PartitionSpec`s.
//! - [`rules`]: per-op forward/backward rules with GSPMD's aggressiveness levels.
//! - [`gather_scatter`]: the gather and scatter rules (index-parallel, operand and index
//!   pass-through dims) and their dim maps, which the partitioner shares.
//! - [`reshard`]: where a sharded module would need communication, which collective,
//!   and how many bytes it moves.
//! - [`compare`]: instruction-by-instruction agreement of two sharded modules.
//!
//! Module-level validation (device counts against the mesh and `num_partitions`) is part of
//! the checks every module passes: `hlo_check::sharding_devices`.
//!
//! The pass that uses them is [`crate::sharding_propagation`].

pub mod compare;
pub mod gather_scatter;
pub mod mesh;
pub mod reshard;
pub mod rules;
pub mod spec;

pub use mesh::Mesh;
pub use spec::{Spec, Tiling};

/// One optional sharding per array leaf: an instruction's sharding as the rules see it
/// (a tuple's leaves flattened).
pub type Leaves = Vec<Option<Spec>>;

/// Which rule produced a candidate (for provenance).
pub type Rule = &'static str;

use std::collections::BTreeMap;

/// Why an instruction (one array leaf of it) has its sharding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// `annotation`, `default`, or the rule (`dot`, `reshape (from user)`, `while state`...).
    pub rule: &'static str,
    /// The neighbour the sharding came from (an operand, a user, or a linked instruction
    /// across a call boundary).
    pub from: Option<String>,
    /// The aggressiveness level (0-3) of the round that set it.
    pub level: u8,
}

impl Origin {
    pub fn annotation() -> Origin {
        Origin { rule: "annotation", from: None, level: 0 }
    }
    pub fn is_annotation(&self) -> bool {
        self.rule == "annotation"
    }
}

/// What a propagation run decided, by instruction name (names are unique per module).
#[derive(Debug, Default, Clone)]
pub struct Propagation {
    /// One origin per array leaf of each instruction of the partitioned computations.
    pub origins: BTreeMap<String, Vec<Origin>>,
    /// Rounds run per aggressiveness level until nothing changed.
    pub rounds: [usize; 4],
}

impl Propagation {
    /// The chain of decisions from `name` back to a user annotation (or a default), one
    /// line per step: `name  sharding  <- rule from neighbour (level k)`.
    pub fn explain(
        &self,
        m: &hlo_ir::Module,
        name: &str,
        mesh: Option<&Mesh>,
    ) -> Result<String, hlo_ir::Diagnostic> {
        let Some(_) = self.origins.get(name) else {
            let mut known: Vec<&String> = self.origins.keys().collect();
            known.sort_by_key(|k| hlo_ir::opcode::edit_distance(k, name));
            return Err(hlo_ir::Diagnostic::from(format!(
                "no instruction `{name}` in the propagated computations{}",
                known.first().map(|k| format!(" (did you mean `{k}`?)")).unwrap_or_default()
            )));
        };
        let mut out = String::new();
        let mut cur = name.to_string();
        let mut seen = std::collections::HashSet::new();
        while seen.insert(cur.clone()) {
            let Some(origins) = self.origins.get(&cur) else { break };
            let Some((comp, n)) = find(m, &cur) else { break };
            let i = comp.instr(n);
            let sharding =
                i.sharding.as_ref().map(|s| s.to_string()).unwrap_or_else(|| "{replicated}".into());
            let spec = i.sharding.as_ref().and_then(|s| Spec::from_ir(s));
            let named = match (mesh, &spec) {
                (Some(mesh), Some(s)) if !i.shape.is_tuple() => {
                    mesh.describe(s).map(|p| format!("  {p}")).unwrap_or_default()
                }
                _ => String::new(),
            };
            // The leaf that decides: the first non-default one.
            let o = origins.iter().find(|o| o.rule != "default").unwrap_or(&origins[0]);
            let why = match (o.rule, &o.from) {
                ("annotation", _) => "given by the user (never overwritten)".to_string(),
                ("default", _) => "default: replicated (no neighbour constrained it)".to_string(),
                (rule, Some(f)) => format!("{rule} <- `{f}` (level {})", o.level),
                (rule, None) => format!("{rule} (level {})", o.level),
            };
            out.push_str(&format!(
                "{cur} = {} {}  sharding={sharding}{named}\n    {why}\n",
                i.shape,
                i.op.opcode().name()
            ));
            match &o.from {
                Some(f) if !o.is_annotation() => cur = f.clone(),
                _ => break,
            }
        }
        Ok(out)
    }
}

/// The computation and node of the instruction called `name`.
pub fn find<'m>(
    m: &'m hlo_ir::Module,
    name: &str,
) -> Option<(&'m hlo_ir::Computation, hlo_ir::NodeIndex)> {
    m.comps().iter().find_map(|c| c.find(name).map(|n| (c, n)))
}
