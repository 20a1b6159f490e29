//! Iteration spaces: an op whose operands' dims map into one space of its own (a dot's:
//! output dims, then contracted dims) is partitioned by tiling that space; [`lift`] puts
//! an operand's tiling into it, [`project`] takes a space tiling back to each operand.
//! Every handler that chooses a tiling among its operands' (dot, convolution, gather,
//! scatter, the pass-through ops) works through them; XLA's dot handler does the same
//! with its dims mapping (`DotConvolutionDimsInfo`).

use hlo_ir::op::DotDims;

use crate::sharding::spec::Tiling;

/// A dot's iteration space: result dims (batch, lhs free, rhs free) then contracting dims.
/// The iteration space of a contraction: output dims, then contracted dims; operand dim
/// `d` is space dim `lhs[d]` (`None`: never split).
pub(super) struct Space {
    pub(super) rank: usize,
    pub(super) lhs: Vec<Option<usize>>,
    pub(super) rhs: Vec<Option<usize>>,
}

impl Space {
    /// A dot's space: batch dims, lhs free, rhs free (the output), then contracted.
    pub(super) fn of_dot(dd: &DotDims, lr: usize, rr: usize) -> Space {
        let nb = dd.lhs_batch.len();
        let nc = dd.lhs_contracting.len();
        let lfree: Vec<usize> = (0..lr)
            .filter(|d| {
                !dd.lhs_batch.contains(&(*d as i64)) && !dd.lhs_contracting.contains(&(*d as i64))
            })
            .collect();
        let rfree: Vec<usize> = (0..rr)
            .filter(|d| {
                !dd.rhs_batch.contains(&(*d as i64)) && !dd.rhs_contracting.contains(&(*d as i64))
            })
            .collect();
        let ro = nb + lfree.len() + rfree.len();
        let mut lhs = vec![0; lr];
        let mut rhs = vec![0; rr];
        for (i, &d) in dd.lhs_batch.iter().enumerate() {
            lhs[d as usize] = i;
        }
        for (i, &d) in dd.rhs_batch.iter().enumerate() {
            rhs[d as usize] = i;
        }
        for (i, &d) in lfree.iter().enumerate() {
            lhs[d] = nb + i;
        }
        for (i, &d) in rfree.iter().enumerate() {
            rhs[d] = nb + lfree.len() + i;
        }
        for (i, &d) in dd.lhs_contracting.iter().enumerate() {
            lhs[d as usize] = ro + i;
        }
        for (i, &d) in dd.rhs_contracting.iter().enumerate() {
            rhs[d as usize] = ro + i;
        }
        let some = |v: Vec<usize>| v.into_iter().map(Some).collect();
        Space { rank: ro + nc, lhs: some(lhs), rhs: some(rhs) }
    }
}

/// An operand's tiling placed in an iteration space of `rank` dims: operand dim `d` is
/// space dim `map[d]`; dims mapped to `None` cannot carry a tiling and are replicated
/// first; space dims the operand lacks are untiled.
pub(super) fn lift(t: &Tiling, map: &[Option<usize>], rank: usize) -> Tiling {
    let dropped: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_none()).collect();
    let kept: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_some()).collect();
    let t = t.partially_replicate(&dropped).remove_dims(&dropped).expect("replicated dims");
    // `t` has the kept dims in operand order; sort them by space position.
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&i| map[kept[i]]);
    let sorted = t.transpose(&order);
    let present: Vec<usize> = order.iter().map(|&i| map[kept[i]].expect("kept")).collect();
    let missing: Vec<usize> = (0..rank).filter(|k| !present.contains(k)).collect();
    sorted.insert_dims(&missing)
}

/// The operand's tiling under space tiling `t` (see [`lift`]): dims mapped to `None`
/// untiled, space dims the operand lacks replicated.
pub(super) fn project(t: &Tiling, map: &[Option<usize>], rank: usize) -> Option<Tiling> {
    let present: Vec<usize> = map.iter().flatten().copied().collect();
    let missing: Vec<usize> = (0..rank).filter(|k| !present.contains(k)).collect();
    let reduced = t.partially_replicate(&missing).remove_dims(&missing)?;
    // `reduced` has the mapped dims in space order: back to operand order.
    let kept: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_some()).collect();
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&i| map[kept[i]]);
    let mut pos = vec![0; kept.len()];
    for (i, &k) in order.iter().enumerate() {
        pos[k] = i;
    }
    let dropped: Vec<usize> = (0..map.len()).filter(|&d| map[d].is_none()).collect();
    Some(reduced.transpose(&pos).insert_dims(&dropped))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::Spec;

    #[test]
    fn dot_space_lifts_and_projects() {
        // [b, m, k] x [b, k, n] -> [b, m, n]; space = b, m, n, k.
        let dd = DotDims {
            lhs_batch: vec![0],
            lhs_contracting: vec![2],
            rhs_batch: vec![0],
            rhs_contracting: vec![1],
            ..Default::default()
        };
        let s = Space::of_dot(&dd, 3, 3);
        let some = |v: Vec<usize>| v.into_iter().map(Some).collect::<Vec<_>>();
        assert_eq!(
            (s.rank, s.lhs.clone(), s.rhs.clone()),
            (4, some(vec![0, 1, 3]), some(vec![0, 3, 2]))
        );
        let t = Tiling { tiles: vec![2, 1, 4], repl: 1, other: vec![], devices: (0..8).collect() };
        let lifted = lift(&t, &s.rhs, s.rank);
        assert_eq!(lifted.tiles, vec![2, 1, 4, 1]);
        let back = project(&lifted, &s.rhs, s.rank).unwrap();
        assert!(Spec::Tiled(back).same(&Spec::Tiled(t)));
    }
}
