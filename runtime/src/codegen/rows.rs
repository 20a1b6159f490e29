//! Which of a loop kernel's buffers it reads *by rows*: a kernel whose split range runs
//! over its outputs' leading dimensions (the same `prefix` of dimensions for every output,
//! flattened: row `r` is the `r`-th index of that prefix in row-major order) computes
//! output row `r` at unit `r`; a leaf is read by rows when every element the kernel reads
//! of it at unit `r` lies in the leaf's own row `r` (its own leading dimensions, the same
//! `prefix`). The executor runs a sequence of such kernels a block of rows at a time
//! (`row_chain`) when each reads what an earlier one wrote only by rows.
//!
//! The walk follows, from each output down to the leaves, which dimensions of every
//! instruction hold the output's leading indices. Elementwise instructions keep them; a
//! broadcast, reduce, transpose, full slice or reverse of other dimensions moves each to
//! the operand's dimension it maps to; a reshape keeps them when the leading dimensions
//! are unchanged. Anything else (a broadcast along the rows, a gather, a pad, a window...)
//! reads its operands anywhere, and the leaves below it are not read by rows.

use std::collections::HashMap;

use hlo_ir::{Computation, NodeIndex, Op, Opcode};

use super::elemental::static_dims;

/// For each leaf, whether it is read only at the output's row in its own leading
/// dimensions (the leaf's rows are the outputs' rows: the same leading dimensions
/// `prefix`).
pub fn leaves_read_by_rows(
    comp: &Computation,
    outputs: &[NodeIndex],
    leaves: &[NodeIndex],
    prefix: &[i64],
) -> HashMap<NodeIndex, bool> {
    let lead: Vec<usize> = (0..prefix.len()).collect();
    // `at[n]`: the dimensions of `n` that carry the output's leading indices on every path
    // so far (`None` once some path reads them elsewhere).
    let mut at: HashMap<NodeIndex, Option<Vec<usize>>> = HashMap::new();
    let mut stack: Vec<(NodeIndex, Option<Vec<usize>>)> =
        outputs.iter().map(|&n| (n, Some(lead.clone()))).collect();
    while let Some((n, d)) = stack.pop() {
        match at.get(&n) {
            Some(prev) if *prev == d || prev.is_none() => continue,
            Some(_) => {
                at.insert(n, None);
            }
            None => {
                at.insert(n, d);
            }
        }
        let d = at[&n].clone();
        if leaves.contains(&n) {
            continue;
        }
        let ops = comp.operands(n);
        for (k, &o) in ops.iter().enumerate() {
            let od = d.as_deref().and_then(|d| operand_row_dims(comp, n, k, o, d));
            stack.push((o, od));
        }
    }
    leaves
        .iter()
        .map(|&l| {
            let dims = static_dims(&comp.instr(l).shape).ok();
            let same = dims.is_some_and(|d| d.get(..prefix.len()) == Some(prefix));
            (l, same && at.get(&l).cloned().flatten().as_ref() == Some(&lead))
        })
        .collect()
}

/// The dimensions of operand `k` (`o`) of `n` that hold `n`'s dimensions `ds`, when `n`
/// reads `o` only at indices whose those dimensions equal `n`'s indices in `ds`.
fn operand_row_dims(
    comp: &Computation,
    n: NodeIndex,
    k: usize,
    o: NodeIndex,
    ds: &[usize],
) -> Option<Vec<usize>> {
    if let Op::Reshape { .. } = comp.instr(n).op {
        // The leading dimensions, unchanged.
        let dims = static_dims(&comp.instr(n).shape).ok()?;
        let odims = static_dims(&comp.instr(o).shape).ok()?;
        let lead = ds.iter().enumerate().all(|(i, &d)| i == d);
        let same =
            lead && dims.get(..ds.len()).is_some() && dims.get(..ds.len()) == odims.get(..ds.len());
        return same.then(|| ds.to_vec());
    }
    ds.iter().map(|&d| operand_row_dim(comp, n, k, o, d)).collect()
}

/// The dimension of operand `k` (`o`) of `n` that holds `n`'s dimension `d`, when `n`
/// reads `o` only at indices whose that dimension equals `n`'s index in `d`.
fn operand_row_dim(
    comp: &Computation,
    n: NodeIndex,
    k: usize,
    o: NodeIndex,
    d: usize,
) -> Option<usize> {
    let dims = static_dims(&comp.instr(n).shape).ok();
    let odims = static_dims(&comp.instr(o).shape).ok();
    let same_dims = dims.is_some() && dims == odims;
    match &comp.instr(n).op {
        Op::Plain(op) if op.is_elementwise() => same_dims.then_some(d),
        Op::Compare { .. } | Op::Map { .. } | Op::ReducePrecision { .. } => same_dims.then_some(d),
        Op::Plain(Opcode::Tuple) => Some(d),
        Op::GetTupleElement { .. } => Some(d),
        Op::Broadcast { dimensions } => dimensions.iter().position(|&x| x == d as i64),
        Op::Transpose { dimensions } => dimensions.get(d).map(|&x| x as usize),
        Op::Reverse { dimensions } => (!dimensions.contains(&(d as i64))).then_some(d),
        Op::Slice { ranges } => {
            let r = ranges.get(d)?;
            let full = r.start == 0 && r.stride == 1 && Some(r.limit) == odims?.get(d).copied();
            full.then_some(d)
        }
        Op::Reshape { .. } => None, // see `operand_row_dims`
        Op::Reduce { dimensions, .. } => {
            // Operands: the inputs, then as many init values (scalars, read anywhere).
            let inputs = comp.operands(n).len() / 2;
            if k >= inputs {
                return None;
            }
            let rank = odims?.len();
            let kept: Vec<usize> =
                (0..rank).filter(|x| !dimensions.contains(&(*x as i64))).collect();
            kept.get(d).copied()
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(text: &str) -> (hlo_ir::Module, Vec<NodeIndex>, Vec<NodeIndex>) {
        let m = hlo_driver::parse(text)
            .unwrap_or_else(|d| panic!("{}", d.render(text, "t.hlo", false)))
            .into_inner();
        let c = m.entry();
        let root = c.root().expect("root");
        let params: Vec<NodeIndex> =
            c.nodes().filter(|&n| matches!(c.instr(n).op, Op::Parameter { .. })).collect();
        (m.clone(), vec![root], params)
    }

    fn by_name(m: &hlo_ir::Module, r: &HashMap<NodeIndex, bool>) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> =
            r.iter().map(|(&n, &b)| (m.entry().instr(n).name.clone(), b)).collect();
        v.sort();
        v
    }

    #[test]
    fn rows_pass_through_elementwise_broadcast_and_row_reductions() {
        let (m, roots, params) = entry(
            "HloModule t
            add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
            ENTRY e {
              x = f32[8,16] parameter(0)
              rowv = f32[8] parameter(1)
              colv = f32[16] parameter(2)
              z = f32[] constant(0)
              s = f32[8] reduce(x, z), dimensions={1}, to_apply=add
              r = f32[8,1] reshape(s)
              r8 = f32[8] reshape(r)
              b = f32[8,16] broadcast(rowv), dimensions={0}
              c = f32[8,16] broadcast(colv), dimensions={1}
              bs = f32[8,16] broadcast(r8), dimensions={0}
              t = f32[8,16] add(b, c)
              u = f32[8,16] add(t, bs)
              ROOT o = f32[8,16] multiply(u, x)
            }",
        );
        let r = leaves_read_by_rows(m.entry(), &roots, &params, &[8]);
        assert_eq!(
            by_name(&m, &r),
            vec![("colv".into(), false), ("rowv".into(), true), ("x".into(), true)]
        );
    }

    #[test]
    fn column_reductions_transposes_and_row_broadcasts_read_anywhere() {
        let (m, roots, params) = entry(
            "HloModule t
            add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
            ENTRY e {
              x = f32[8,8] parameter(0)
              y = f32[8,8] parameter(1)
              w = f32[8,8] parameter(2)
              z = f32[] constant(0)
              cs = f32[8] reduce(x, z), dimensions={0}, to_apply=add
              b = f32[8,8] broadcast(cs), dimensions={0}
              t = f32[8,8] transpose(y), dimensions={1,0}
              s = f32[7,8] slice(w), slice={[1:8], [0:8]}
              p = f32[8,8] pad(s, z), padding=0_1x0_0
              a = f32[8,8] add(b, t)
              ROOT o = f32[8,8] add(a, p)
            }",
        );
        let r = leaves_read_by_rows(m.entry(), &roots, &params, &[8]);
        assert!(r.values().all(|&b| !b), "{:?}", by_name(&m, &r));
    }

    #[test]
    fn leading_dimensions_flattened_are_followed_together() {
        let (m, roots, params) = entry(
            "HloModule t
            add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
            ENTRY e {
              x = f32[2,4,16] parameter(0)
              m = f32[2,4] parameter(1)
              batch = f32[2] parameter(2)
              y = f32[2,4,4,4] parameter(3)
              swapped = f32[4,2,16] parameter(4)
              z = f32[] constant(0)
              s = f32[2,4] reduce(x, z), dimensions={2}, to_apply=add
              bs = f32[2,4,16] broadcast(s), dimensions={0,1}
              bm = f32[2,4,16] broadcast(m), dimensions={0,1}
              bb = f32[2,4,16] broadcast(batch), dimensions={0}
              ry = f32[2,4,16] reshape(y)
              ts = f32[2,4,16] transpose(swapped), dimensions={1,0,2}
              a = f32[2,4,16] add(bs, bm)
              b = f32[2,4,16] add(a, bb)
              c = f32[2,4,16] add(b, ry)
              ROOT o = f32[2,4,16] add(c, ts)
            }",
        );
        let r = leaves_read_by_rows(m.entry(), &roots, &params, &[2, 4]);
        assert_eq!(
            by_name(&m, &r),
            vec![
                ("batch".into(), false), // the same at every row of a batch
                ("m".into(), true),
                ("swapped".into(), false), // its rows are other rows
                ("x".into(), true),
                ("y".into(), true), // reshaped behind the leading dimensions
            ]
        );
        // With the batch alone as the rows, the batch vector is read by rows too.
        let r = leaves_read_by_rows(m.entry(), &roots, &params, &[2]);
        assert!(r[&params[2]]);
    }

    #[test]
    fn a_leaf_read_by_rows_on_one_path_and_elsewhere_on_another_is_not_read_by_rows() {
        let (m, roots, params) = entry(
            "HloModule t
            ENTRY e {
              x = f32[4,4] parameter(0)
              t = f32[4,4] transpose(x), dimensions={1,0}
              ROOT o = f32[4,4] add(x, t)
            }",
        );
        let r = leaves_read_by_rows(m.entry(), &roots, &params, &[4]);
        assert_eq!(by_name(&m, &r), vec![("x".into(), false)]);
    }
}
