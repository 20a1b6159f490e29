//! Will it fit: the bytes a step holds in one device's memory (a TPU chip's HBM) at its
//! peak, from the buffers of the optimized (per-device) module, against a capacity.
//!
//! Every value the schedule ([`hlo_ir::schedule::Schedule`]) produces gets buffers, one
//! per array leaf, except where XLA aliases: a tuple holds its operands' buffers, a
//! get-tuple-element and a bitcast hold their operand's, a while loop updates its state in
//! place. A buffer is freed when the last value holding it dies (after its last use).
//! Fusions keep their intermediates on chip, so a fusion counts as its outputs only. While
//! a loop, a call or a conditional runs, the peak of its computations' own temporaries is
//! added to what is live around it. The entry's parameters (weights, optimizer state,
//! the batch) stay resident for the whole step, except those donated to an output
//! (`input_output_alias`, as JAX's `donate_argnums` prints it): their buffers are freed
//! after their last use, where XLA hands them to the output.
//!
//! This is an estimate of the same kind as XLA's buffer assignment without its reuse
//! heuristics: it counts no padding or layout tiling and no workspace of a kernel.

use std::collections::HashMap;

use hlo_ir::tensor::format_bytes;
use hlo_ir::{CompId, Module, Op, Opcode, Shape};

/// The memory one device needs for a step.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryUsage {
    /// The entry's parameters, resident for the whole step.
    pub parameters: u64,
    /// The most bytes live at once, parameters included.
    pub peak: u64,
    /// The instruction during which the peak is reached.
    pub peak_at: String,
    /// The device's memory capacity (a TPU chip's HBM).
    pub capacity: u64,
}

impl MemoryUsage {
    /// Whether the step fits.
    pub fn fits(&self) -> bool {
        self.peak <= self.capacity
    }

    /// "fits, 3.2 GiB free" or "exceeds by 1.5 GiB".
    pub fn verdict(&self) -> String {
        if self.fits() {
            format!("fits, {} free", format_bytes(self.capacity - self.peak))
        } else {
            format!("exceeds by {}", format_bytes(self.peak - self.capacity))
        }
    }
}

fn leaf_bytes(s: &Shape) -> Vec<u64> {
    match s {
        Shape::Tuple(t) => t.iter().flat_map(leaf_bytes).collect(),
        Shape::Array(a) => {
            let n: u64 = a.dims.iter().map(|d| d.bound().unwrap_or(0)).product();
            vec![n.saturating_mul((a.elem.bits() as u64).div_ceil(8))]
        }
        _ => vec![],
    }
}

/// The leaves of tuple element `index` of `s`: their range among `s`'s leaves.
fn element_leaves(s: &Shape, index: usize) -> Option<std::ops::Range<usize>> {
    let Shape::Tuple(t) = s else { return None };
    let start: usize = t.get(..index)?.iter().map(|e| leaf_bytes(e).len()).sum();
    Some(start..start + leaf_bytes(t.get(index)?).len())
}

struct Walk<'m> {
    m: &'m Module,
    /// Entry parameters donated to the outputs (`input_output_alias`, whole arrays): their
    /// buffers die after their last use, where the aliased output takes them over.
    donated: Vec<usize>,
    /// Peak temporaries of each computation, computed once.
    inner: HashMap<CompId, (u64, String)>,
}

impl Walk<'_> {
    /// Walks `id`: (peak bytes live at once, the instruction at the peak). Parameters of
    /// the entry are resident buffers; other computations' parameters alias the caller's
    /// operands and cost nothing.
    fn peak(&mut self, id: CompId, entry: bool) -> (u64, String) {
        if let Some(p) = self.inner.get(&id) {
            return p.clone();
        }
        // Marks the computation as in progress: recursion (not valid HLO) costs nothing.
        self.inner.insert(id, (0, String::new()));
        let c = self.m.comp(id);
        let sched = hlo_ir::schedule::Schedule::new(c);
        let mut sizes: Vec<u64> = vec![];
        let mut refs: Vec<u32> = vec![];
        let mut held: Vec<Vec<usize>> = vec![Vec::new(); sched.nodes.len()];
        let (mut live, mut best, mut at) = (0u64, 0u64, String::new());
        let fresh = |s: &Shape, sizes: &mut Vec<u64>, refs: &mut Vec<u32>, live: &mut u64| {
            leaf_bytes(s)
                .into_iter()
                .map(|b| {
                    sizes.push(b);
                    refs.push(0);
                    *live += b;
                    sizes.len() - 1
                })
                .collect::<Vec<usize>>()
        };
        let mut uses = vec![0usize; sched.nodes.len()];
        for ops in &sched.operands {
            for &o in ops {
                uses[o] += 1;
            }
        }
        for (i, &n) in sched.nodes.iter().enumerate() {
            let ins = c.instr(n);
            let operand = |k: usize| sched.operands[i].get(k).map(|&o| held[o].clone());
            let mut during = 0u64;
            let bufs: Vec<usize> = match &ins.op {
                Op::Parameter { .. } if entry => {
                    fresh(&ins.shape, &mut sizes, &mut refs, &mut live)
                }
                Op::Parameter { .. } => {
                    let n = leaf_bytes(&ins.shape).len();
                    (0..n)
                        .map(|_| {
                            sizes.push(0);
                            refs.push(0);
                            sizes.len() - 1
                        })
                        .collect()
                }
                Op::Plain(Opcode::Tuple) => {
                    sched.operands[i].iter().flat_map(|&o| held[o].clone()).collect()
                }
                Op::GetTupleElement { index } => {
                    let src = sched.operands[i][0];
                    let shape = &c.instr(sched.nodes[src]).shape;
                    match element_leaves(shape, *index as usize) {
                        Some(r) if r.end <= held[src].len() => held[src][r].to_vec(),
                        _ => fresh(&ins.shape, &mut sizes, &mut refs, &mut live),
                    }
                }
                Op::Plain(Opcode::Bitcast) => operand(0).unwrap_or_default(),
                Op::While { condition, body } => {
                    let (b, _) = self.peak(*body, false);
                    let (cnd, _) = self.peak(*condition, false);
                    during = b.max(cnd);
                    operand(0).unwrap_or_default()
                }
                other => {
                    for (_, callee) in other.called_computations() {
                        if !matches!(other, Op::Fusion { .. }) {
                            during = during.max(self.peak(callee, false).0);
                        }
                    }
                    fresh(&ins.shape, &mut sizes, &mut refs, &mut live)
                }
            };
            for &b in &bufs {
                refs[b] += 1;
            }
            held[i] = bufs;
            if live + during > best {
                best = live + during;
                at = ins.name.clone();
            }
            // Values dead after this step, and this value when nothing uses it.
            let mut dead = sched.dead_after[i].clone();
            if uses[i] == 0 && i != sched.root {
                dead.push(i);
            }
            for v in dead {
                if entry && sched.params.iter().any(|&(k, p)| p == v && !self.donated.contains(&k))
                {
                    continue;
                }
                for &b in &held[v] {
                    refs[b] -= 1;
                    if refs[b] == 0 {
                        live -= sizes[b];
                    }
                }
                held[v].clear();
            }
        }
        self.inner.insert(id, (best, at.clone()));
        (best, at)
    }
}

/// The memory one device needs for module `m` (optimized, per device), against
/// `capacity` bytes.
pub fn memory_usage(m: &Module, capacity: u64) -> MemoryUsage {
    let parameters = m.entry_param_shapes().iter().flat_map(leaf_bytes).sum();
    // A donated array parameter (the whole of it) is given back to the output it aliases.
    let params = m.entry_param_shapes();
    let donated = m
        .header
        .input_output_alias
        .iter()
        .flatten()
        .filter(|a| a.operand_index.is_empty())
        .filter_map(|a| usize::try_from(a.operand).ok())
        .filter(|&k| params.get(k).is_some_and(|s| matches!(s, Shape::Array(_))))
        .collect();
    let mut w = Walk { m, donated, inner: HashMap::new() };
    let (peak, peak_at) = w.peak(m.entry, true);
    MemoryUsage { parameters, peak: peak.max(parameters), peak_at, capacity }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(src: &str, capacity: u64) -> MemoryUsage {
        memory_usage(&hlo_ir::parse_and_verify(src).expect("module"), capacity)
    }

    #[test]
    fn buffers_die_after_their_last_use() {
        let h = usage(
            "HloModule m\n\nENTRY e {\n  p = f32[256] parameter(0)\n  \
             a = f32[256] negate(p)\n  b = f32[256] exponential(a)\n  \
             c = f32[256] add(b, p)\n  ROOT t = (f32[256]) tuple(c)\n}\n",
            1 << 20,
        );
        // p resident; a, b live together at `b`; a is gone before `c`.
        assert_eq!((h.parameters, h.peak, h.peak_at.as_str()), (1024, 3072, "b"));
        assert!(h.fits() && h.verdict().starts_with("fits"), "{}", h.verdict());
        let small = usage(
            "HloModule m\n\nENTRY e {\n  p = f32[256] parameter(0)\n  ROOT a = f32[256] negate(p)\n}\n",
            1024,
        );
        assert!(!small.fits() && small.verdict().starts_with("exceeds by"), "{}", small.verdict());
    }

    #[test]
    fn donated_parameters_are_given_back_after_their_last_use() {
        let body = "  p = f32[256] parameter(0)\n  a = f32[256] negate(p)\n  \
                    ROOT b = f32[256] exponential(a)\n}\n";
        let kept = usage(&format!("HloModule m\n\nENTRY e {{\n{body}"), 1 << 20);
        let donated = usage(
            &format!(
                "HloModule m, input_output_alias={{ {{}}: (0, {{}}, may-alias) }}\n\nENTRY e {{\n{body}"
            ),
            1 << 20,
        );
        // Kept: p, a and b at `b`; donated: p is gone once `a` is computed.
        assert_eq!((kept.peak, donated.peak), (3072, 2048));
    }

    #[test]
    fn loops_add_their_temporaries_and_update_state_in_place() {
        let h = usage(
            "HloModule m\n\n\
             cond {\n  s = (s32[], f32[256]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             n = s32[] constant(4)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n\n\
             body {\n  s = (s32[], f32[256]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  \
             one = s32[] constant(1)\n  i1 = s32[] add(i, one)\n  \
             x = f32[256] get-tuple-element(s), index=1\n  \
             big = f32[16,256] broadcast(x), dimensions={1}\n  \
             sl = f32[1,256] slice(big), slice={[0:1], [0:256]}\n  \
             r = f32[256] reshape(sl)\n  \
             ROOT t = (s32[], f32[256]) tuple(i1, r)\n}\n\n\
             ENTRY e {\n  p = f32[256] parameter(0)\n  z = s32[] constant(0)\n  \
             t = (s32[], f32[256]) tuple(z, p)\n  \
             w = (s32[], f32[256]) while(t), condition=cond, body=body\n  \
             ROOT r = f32[256] get-tuple-element(w), index=1\n}\n",
            1 << 20,
        );
        // The body holds `big` (16 KiB) and `r` beside the resident state.
        assert_eq!(h.peak_at, "w");
        assert!(h.peak >= 1024 + 4 + 16384 && h.peak <= 1024 + 4 + 16384 + 1024 + 8, "{h:?}");
    }
}
