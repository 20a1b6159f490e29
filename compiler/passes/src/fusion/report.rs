//! The fusion report: what fusion did to a module, as text and as JSON
//! (`hloc opt --fusion-report OUT.json`).
//!
//! - *kernels*: top-level instructions that do work, i.e. in the computations fusion runs
//!   in ([`super::fusible_computations`]), everything but `parameter`, `constant`,
//!   `tuple`, `get-tuple-element` and `bitcast`; before and after.
//! - *fusions by kind*: fusion instructions of the module after, by kind.
//! - *intermediate bytes eliminated*: the result sizes of producers the `fusion` pass fused
//!   that no longer exist as top-level instructions (they are no longer materialized).
//! - *refusals by reason*, and the largest producers that still materialize with the reason
//!   they were last refused (what to look at first).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use hlo_ir::op::{FusionKind, Op};
use hlo_ir::{Module, Opcode};
use serde_json::{Value, json};

use super::decision::{FusionLog, Outcome, Refusal};

/// One producer that still materializes after fusion.
#[derive(Debug, Clone, PartialEq)]
pub struct Unfused {
    pub computation: String,
    pub producer: String,
    pub op: Opcode,
    pub bytes: u64,
    pub consumer: String,
    pub reason: Refusal,
}

/// What fusion did to a module.
#[derive(Debug, Clone, PartialEq)]
pub struct FusionReport {
    pub kernels_before: usize,
    pub kernels_after: usize,
    /// `(kLoop|kInput|kOutput|kCustom, count)` of the module after, zero counts left out.
    pub fusions_by_kind: Vec<(&'static str, usize)>,
    /// Fusions whose root is a tuple (multi-output).
    pub multi_output_fusions: usize,
    /// Pairs fused (both passes).
    pub fused_pairs: usize,
    pub intermediate_bytes_eliminated: u64,
    /// `(reason, count)` in [`Refusal::ALL`] order.
    pub refusals: Vec<(Refusal, usize)>,
    /// The (at most 5) largest producers left unfused, largest first.
    pub largest_unfused: Vec<Unfused>,
}

/// Kernels of a module and the names of its top-level instructions.
fn kernels(m: &Module) -> (usize, HashSet<(String, String)>) {
    let mut count = 0;
    let mut names = HashSet::new();
    for cid in super::fusible_computations(m) {
        let c = m.comp(cid);
        for i in c.instrs() {
            names.insert((c.name.clone(), i.name.clone()));
            let trivial = matches!(
                i.op.opcode(),
                Opcode::Parameter
                    | Opcode::Constant
                    | Opcode::Tuple
                    | Opcode::GetTupleElement
                    | Opcode::Bitcast
            );
            if !trivial {
                count += 1;
            }
        }
    }
    (count, names)
}

/// The report for `after`, the result of fusing `before` with decisions `log`.
pub fn fusion_report(before: &Module, after: &Module, log: &FusionLog) -> FusionReport {
    let (kernels_before, _) = kernels(before);
    let (kernels_after, alive) = kernels(after);
    let mut by_kind: BTreeMap<usize, usize> = BTreeMap::new();
    let mut multi_output_fusions = 0;
    for c in after.comps() {
        for i in c.instrs() {
            if let Op::Fusion { kind, .. } = i.op {
                let k = FusionKind::ALL.iter().position(|(x, _)| *x == kind).unwrap_or(0);
                *by_kind.entry(k).or_default() += 1;
                if i.shape.is_tuple() {
                    multi_output_fusions += 1;
                }
            }
        }
    }
    let fusions_by_kind = by_kind.into_iter().map(|(k, n)| (FusionKind::ALL[k].1, n)).collect();
    let mut eliminated = 0u64;
    let mut counted = HashSet::new();
    let mut fused_pairs = 0;
    let mut last_refusal: HashMap<(String, String), (u64, Opcode, String, Refusal)> =
        HashMap::new();
    for d in &log.decisions {
        let key = (d.computation.clone(), d.producer.clone());
        match d.outcome {
            Outcome::Fused { .. } => {
                fused_pairs += 1;
                if d.pass == "fusion" && !alive.contains(&key) && counted.insert(key) {
                    eliminated = eliminated.saturating_add(d.producer_bytes);
                }
            }
            Outcome::Refused(r) => {
                if d.pass == "fusion" {
                    last_refusal
                        .insert(key, (d.producer_bytes, d.producer_op, d.consumer.clone(), r));
                }
            }
        }
    }
    let mut largest_unfused: Vec<Unfused> = last_refusal
        .into_iter()
        .filter(|(k, _)| alive.contains(k))
        .map(|((computation, producer), (bytes, op, consumer, reason))| Unfused {
            computation,
            producer,
            op,
            bytes,
            consumer,
            reason,
        })
        .collect();
    largest_unfused.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.producer.cmp(&b.producer)));
    largest_unfused.truncate(5);
    FusionReport {
        kernels_before,
        kernels_after,
        fusions_by_kind,
        multi_output_fusions,
        fused_pairs,
        intermediate_bytes_eliminated: eliminated,
        refusals: log.refusal_counts(),
        largest_unfused,
    }
}

impl FusionReport {
    pub fn to_json(&self) -> Value {
        json!({
            "kernels_before": self.kernels_before,
            "kernels_after": self.kernels_after,
            "fusions_by_kind": self.fusions_by_kind.iter().map(|(k, n)| (k.to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "multi_output_fusions": self.multi_output_fusions,
            "fused_pairs": self.fused_pairs,
            "intermediate_bytes_eliminated": self.intermediate_bytes_eliminated,
            "refusals": self.refusals.iter().map(|(r, n)| (r.as_str().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "largest_unfused": self.largest_unfused.iter().map(|u| json!({
                "computation": u.computation,
                "producer": u.producer,
                "opcode": u.op.name(),
                "bytes": u.bytes,
                "consumer": u.consumer,
                "reason": u.reason.as_str(),
            })).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for FusionReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kernels: {} before, {} after", self.kernels_before, self.kernels_after)?;
        let kinds: Vec<String> =
            self.fusions_by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(
            f,
            "fusions: {} ({} multi-output)",
            if kinds.is_empty() { "none".to_string() } else { kinds.join(", ") },
            self.multi_output_fusions
        )?;
        writeln!(f, "pairs fused: {}", self.fused_pairs)?;
        writeln!(
            f,
            "intermediate bytes no longer materialized: {}",
            self.intermediate_bytes_eliminated
        )?;
        if self.refusals.is_empty() {
            writeln!(f, "refusals: none")?;
        } else {
            let r: Vec<String> =
                self.refusals.iter().map(|(r, n)| format!("{} {n}", r.as_str())).collect();
            writeln!(f, "refusals: {}", r.join(", "))?;
        }
        for u in &self.largest_unfused {
            writeln!(
                f,
                "unfused: {} ({}, {} bytes) into {}: {}",
                u.producer,
                u.op.name(),
                u.bytes,
                u.consumer,
                u.reason.as_str()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use hlo_pipeline::{Pass, PassContext};

    #[test]
    fn report_counts_kernels_fusions_and_eliminated_bytes() {
        let src = "HloModule m\n\nENTRY main {\n  x = f32[8] parameter(0)\n  n = f32[8] negate(x)\n  e = f32[8] exponential(n)\n  ROOT a = f32[8] abs(e)\n}\n";
        let before = hlo_check::parse(src).expect("parses");
        let mut after = (*before).clone();
        let mut cx = PassContext::default();
        assert!(super::super::Fusion.run(&mut after, &mut cx).expect("runs"));
        let log = cx.report::<crate::fusion::decision::FusionLog>().cloned().unwrap_or_default();
        let r = super::fusion_report(&before, &after, &log);
        assert_eq!((r.kernels_before, r.kernels_after), (3, 1));
        assert_eq!(r.fusions_by_kind, vec![("kLoop", 1)]);
        assert_eq!(r.intermediate_bytes_eliminated, 64);
        let j = r.to_json();
        assert_eq!(j["fusions_by_kind"]["kLoop"], 1);
        assert!(r.to_string().starts_with("kernels: 3 before, 1 after\n"));
    }
}
