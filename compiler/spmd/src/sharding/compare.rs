//! Instruction-by-instruction comparison of two sharded versions of one module (ours and
//! XLA's `NAME.propagated.hlo`), matched by instruction name, compared semantically.

use hlo_ir::{Module, Shape};

use super::Spec;

/// One instruction whose shardings differ.
#[derive(Debug, Clone)]
pub struct Difference {
    pub name: String,
    pub ours: String,
    pub theirs: String,
}

#[derive(Debug, Clone, Default)]
pub struct Agreement {
    /// Instructions of theirs that carry a sharding and exist in ours by name.
    pub matched: usize,
    pub agree: usize,
    pub differences: Vec<Difference>,
    /// Sharded instructions of theirs with no instruction of that name in ours.
    pub unmatched: Vec<String>,
}

impl Agreement {
    pub fn percent(&self) -> f64 {
        if self.matched == 0 { 100.0 } else { 100.0 * self.agree as f64 / self.matched as f64 }
    }
}

/// Compares every sharded instruction of `theirs` with the same-named one of `ours` (a
/// missing sharding counts as replicated, as the partitioner treats it).
pub fn agreement(ours: &Module, theirs: &Module) -> Agreement {
    let mut a = Agreement::default();
    for c in theirs.comps() {
        for i in c.instrs() {
            let Some(ts) = i.sharding.as_ref() else { continue };
            let Some((oc, n)) = super::find(ours, &i.name) else {
                a.unmatched.push(i.name.clone());
                continue;
            };
            let oi = oc.instr(n);
            let t = Spec::from_ir(ts).unwrap_or(Spec::Replicated);
            let o = oi.sharding.as_ref().and_then(|s| Spec::from_ir(s)).unwrap_or(Spec::Replicated);
            a.matched += 1;
            if normalize(&o, &oi.shape).same(&normalize(&t, &i.shape)) {
                a.agree += 1;
            } else {
                a.differences.push(Difference {
                    name: i.name.clone(),
                    ours: oi
                        .sharding
                        .as_ref()
                        .map(|s| s.to_string())
                        .unwrap_or_else(|| "(none)".into()),
                    theirs: ts.to_string(),
                });
            }
        }
    }
    a
}

/// A sharding as leaves of `shape` (one sharding on a tuple means every leaf).
fn normalize(s: &Spec, shape: &Shape) -> Spec {
    match (s, shape) {
        (Spec::Tuple(_), _) => s.clone(),
        (s, Shape::Tuple(_)) => Spec::Tuple(vec![s.clone(); shape.leaf_count()]),
        (s, _) => s.clone(),
    }
}

/// Parses a sharding written as text (`{devices=[4,1,2]<=[8] last_tile_dim_replicate}`)
/// for a value of `shape`.
pub fn parse_for(text: &str, shape: &Shape) -> Result<Spec, hlo_ir::Diagnostic> {
    let src = format!(
        "HloModule m\n\nENTRY e {{\n  ROOT p = {shape} parameter(0), sharding={text}\n}}\n"
    );
    let m = hlo_check::parse(&src).map_err(|d| d.render(&src, "sharding", false))?;
    let c = m.comp(m.entry);
    let i = c.instr(c.root().ok_or("no root")?);
    Ok(i.sharding.as_ref().and_then(|s| Spec::from_ir(s)).unwrap_or(Spec::Replicated))
}
