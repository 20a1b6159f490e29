//! What a collective computes on each device, and the shared-memory fabric devices
//! exchange their operands through.
//!
//! Every device of an SPMD program executes the same collectives in the same order, so a
//! collective is a rendezvous of all N devices ([`Fabric::exchange`]): each deposits its
//! operands, the last to arrive publishes the set, and each device then computes its own
//! result from its group's contributions. An all-reduce takes two rendezvous, as a ring
//! does: member `p` reduces the `p`-th slice of the operands, then the slices are gathered
//! (each device reduces 1/g of the data). Reductions fold the group's operands in group
//! order with the reducer's elementwise op (the interpreter's own arithmetic, rounded to
//! the element type after every step), so every member gets bit-identical results and runs
//! are reproducible. A device that fails aborts the fabric: the others return an error
//! instead of waiting forever.

use std::sync::{Arc, Condvar, Mutex};

use hlo_ir::Opcode;
use hlo_ir::op::{CollectiveAttrs, ReplicaGroups, SliceRange};

use crate::data_movement::{concatenate, slice};
use crate::elementwise::binary;
use crate::{Array, Failure};

fn text(f: Failure) -> String {
    match f {
        Failure::Here(s) => s,
        Failure::Nested(d) => d.message,
    }
}

/// The rendezvous of N devices.
pub struct Fabric {
    n: usize,
    state: Mutex<State>,
    cv: Condvar,
}

struct State {
    slots: Vec<Option<Vec<Array>>>,
    arrived: usize,
    generation: u64,
    published: Arc<Vec<Vec<Array>>>,
    aborted: Option<String>,
}

impl Fabric {
    pub fn new(n: usize) -> Fabric {
        Fabric {
            n,
            state: Mutex::new(State {
                slots: (0..n).map(|_| None).collect(),
                arrived: 0,
                generation: 0,
                published: Arc::new(Vec::new()),
                aborted: None,
            }),
            cv: Condvar::new(),
        }
    }

    pub fn devices(&self) -> usize {
        self.n
    }

    /// Wakes every waiting device with `why` as its error (a device failed).
    pub fn abort(&self, why: &str) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.aborted.is_none() {
            s.aborted = Some(why.to_string());
        }
        self.cv.notify_all();
    }

    /// Deposits device `d`'s operands and returns every device's, once all have arrived.
    pub fn exchange(&self, d: usize, mine: Vec<Array>) -> Result<Arc<Vec<Vec<Array>>>, Failure> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = &s.aborted {
            return Err(Failure::from(format!("another device failed: {why}")));
        }
        if d >= self.n || s.slots[d].is_some() {
            return Err(Failure::from(format!(
                "device {d} entered a collective twice (the fabric has {} devices)",
                self.n
            )));
        }
        s.slots[d] = Some(mine);
        s.arrived += 1;
        if s.arrived == self.n {
            let all: Vec<Vec<Array>> =
                s.slots.iter_mut().map(|x| x.take().unwrap_or_default()).collect();
            s.published = Arc::new(all);
            s.arrived = 0;
            s.generation += 1;
            self.cv.notify_all();
            return Ok(s.published.clone());
        }
        let generation = s.generation;
        while s.generation == generation {
            if let Some(why) = &s.aborted {
                return Err(Failure::from(format!("another device failed: {why}")));
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        // The next round cannot complete before this device joins it: `published` is ours.
        Ok(s.published.clone())
    }
}

/// The device groups of `rg` over `n` devices (absent or empty: one group of all).
pub fn groups(rg: Option<&ReplicaGroups>, n: usize) -> Result<Vec<Vec<i64>>, Failure> {
    let all = || vec![(0..n as i64).collect::<Vec<i64>>()];
    Ok(match rg {
        None => all(),
        Some(ReplicaGroups::Explicit(g)) if g.is_empty() => all(),
        Some(ReplicaGroups::Explicit(g)) => g.clone(),
        Some(ReplicaGroups::Iota(l)) => {
            let size =
                *l.dims.get(1).ok_or("replica groups in iota form need [groups,size]")? as usize;
            l.devices().chunks(size.max(1)).map(|c| c.to_vec()).collect()
        }
        Some(ReplicaGroups::Mesh { axes, selection }) => {
            let names: Vec<&str> = selection.split('\'').skip(1).step_by(2).collect();
            let sizes: Vec<i64> = axes.iter().map(|a| a.1).collect();
            let sel: Vec<usize> = axes
                .iter()
                .enumerate()
                .filter(|(_, a)| names.contains(&a.0.as_str()))
                .map(|(i, _)| i)
                .collect();
            let total: i64 = sizes.iter().product();
            let mut keyed: Vec<(Vec<i64>, Vec<i64>, i64)> = (0..total)
                .map(|d| {
                    let mut c = vec![0; sizes.len()];
                    let mut r = d;
                    for k in (0..sizes.len()).rev() {
                        c[k] = r % sizes[k];
                        r /= sizes[k];
                    }
                    let key = c
                        .iter()
                        .enumerate()
                        .filter(|(k, _)| !sel.contains(k))
                        .map(|(_, &x)| x)
                        .collect();
                    let within = sel.iter().map(|&k| c[k]).collect();
                    (key, within, d)
                })
                .collect();
            keyed.sort();
            let mut out: Vec<Vec<i64>> = Vec::new();
            let mut last = None;
            for (key, _, d) in keyed {
                if last.as_ref() != Some(&key) {
                    out.push(Vec::new());
                    last = Some(key);
                }
                out.last_mut().expect("pushed").push(d);
            }
            out
        }
    })
}

/// Device `d`'s group and its position in it.
fn my_group(groups: &[Vec<i64>], d: usize) -> Result<(&[i64], usize), String> {
    for g in groups {
        if let Some(p) = g.iter().position(|&x| x == d as i64) {
            return Ok((g, p));
        }
    }
    Err(format!("device {d} is in no replica group"))
}

fn fold(parts: &[&Array], op: Opcode) -> Result<Array, String> {
    let mut acc = parts[0].clone();
    for p in &parts[1..] {
        acc = binary(op, &acc, p).map_err(text)?;
    }
    Ok(acc)
}

fn dim_of(attrs: &CollectiveAttrs) -> Result<usize, String> {
    attrs
        .dimensions
        .as_ref()
        .and_then(|d| d.first())
        .map(|&d| d as usize)
        .ok_or_else(|| "missing dimensions={d}".to_string())
}

/// Elements `r` of `a` in row-major order, as a rank-1 array.
fn flat_range(a: &Array, r: std::ops::Range<usize>) -> Result<Array, Failure> {
    let mut data = a.data.empty_like(r.len());
    let n = r.len();
    data.push_range(&a.data, r)?;
    Ok(Array::new(a.elem, vec![n], data))
}

/// Chunk `i` of `g` equal chunks of `a` along `dim`.
fn chunk(a: &Array, dim: usize, g: usize, i: usize) -> Result<Array, String> {
    let len = a.dims[dim] / g;
    let ranges: Vec<SliceRange> = a
        .dims
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            if k == dim {
                SliceRange { start: (i * len) as i64, limit: ((i + 1) * len) as i64, stride: 1 }
            } else {
                SliceRange { start: 0, limit: n as i64, stride: 1 }
            }
        })
        .collect();
    let mut out = a.dims.clone();
    out[dim] = len;
    slice(a, &ranges, &out).map_err(text)
}

/// Runs collective `opcode` on device `d`: `operands` are this device's, `reducer` the
/// elementwise op of `to_apply` (all-reduce, reduce-scatter).
pub fn execute(
    fabric: &Fabric,
    d: usize,
    opcode: Opcode,
    attrs: &CollectiveAttrs,
    reducer: Option<Opcode>,
    operands: Vec<Array>,
) -> Result<Vec<Array>, Failure> {
    let n = fabric.devices();
    let gs = groups(attrs.replica_groups.as_ref(), n)?;
    let count = operands.len();
    let all = fabric.exchange(d, operands)?;
    let (group, pos) = my_group(&gs, d)?;
    let member = |m: i64, i: usize| -> Result<&Array, String> {
        all.get(m as usize)
            .and_then(|ops| ops.get(i))
            .ok_or_else(|| format!("device {m} has no operand {i}"))
    };
    let mut out = Vec::with_capacity(count);
    match opcode {
        Opcode::AllReduce => {
            // As a ring does: member `pos` reduces the `pos`-th slice of the flattened
            // operands over the group (in group order), then the slices are gathered. Every
            // element is still folded in group order, so all members get the same bits.
            let op = reducer.ok_or("the reducer is not a single elementwise op")?;
            let g = group.len();
            let mut partials = Vec::with_capacity(count);
            for i in 0..count {
                let len = member(group[0], i)?.len();
                let (lo, hi) = (pos * len / g, (pos + 1) * len / g);
                let parts: Vec<Array> = group
                    .iter()
                    .map(|&m| flat_range(member(m, i)?, lo..hi))
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&Array> = parts.iter().collect();
                partials.push(fold(&refs, op)?);
            }
            let reduced = fabric.exchange(d, partials)?;
            for i in 0..count {
                let shape = member(d as i64, i)?;
                let mut data = shape.data.empty_like(shape.len());
                for &m in group {
                    let part = reduced
                        .get(m as usize)
                        .and_then(|p| p.get(i))
                        .ok_or_else(|| format!("device {m} reduced no slice {i}"))?;
                    data.push_range(&part.data, 0..part.len())?;
                }
                out.push(Array::new(shape.elem, shape.dims.clone(), data));
            }
        }
        Opcode::ReduceScatter => {
            let op = reducer.ok_or("the reducer is not a single elementwise op")?;
            for i in 0..count {
                let parts: Vec<&Array> =
                    group.iter().map(|&m| member(m, i)).collect::<Result<_, _>>()?;
                let sum = fold(&parts, op)?;
                out.push(chunk(&sum, dim_of(attrs)?, group.len(), pos)?);
            }
        }
        Opcode::AllGather => {
            let dim = dim_of(attrs)?;
            for i in 0..count {
                let parts: Vec<&Array> =
                    group.iter().map(|&m| member(m, i)).collect::<Result<_, _>>()?;
                let mut dims = parts[0].dims.clone();
                dims[dim] = parts.iter().map(|p| p.dims[dim]).sum();
                out.push(concatenate(&parts, dim, &dims).map_err(text)?);
            }
        }
        Opcode::AllToAll => match &attrs.dimensions {
            Some(_) => {
                let dim = dim_of(attrs)?;
                for i in 0..count {
                    let parts: Vec<Array> = group
                        .iter()
                        .map(|&m| chunk(member(m, i)?, dim, group.len(), pos))
                        .collect::<Result<_, _>>()?;
                    let refs: Vec<&Array> = parts.iter().collect();
                    let mut dims = parts[0].dims.clone();
                    dims[dim] = parts.iter().map(|p| p.dims[dim]).sum();
                    out.push(concatenate(&refs, dim, &dims).map_err(text)?);
                }
            }
            None => {
                for &m in group {
                    out.push(member(m, pos)?.clone());
                }
            }
        },
        Opcode::CollectivePermute => {
            let pairs = attrs.source_target_pairs.as_deref().unwrap_or(&[]);
            for i in 0..count {
                let mine = member(d as i64, i)?;
                out.push(match pairs.iter().find(|p| p.1 == d as i64) {
                    Some(p) => member(p.0, i)?.clone(),
                    None => Array::zeros(mine.elem, mine.dims.clone())?,
                });
            }
        }
        Opcode::CollectiveBroadcast => {
            for i in 0..count {
                out.push(member(group[0], i)?.clone());
            }
        }
        other => {
            return Err(Failure::from(format!(
                "{} is not a collective the fabric runs",
                other.name()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Data;
    use hlo_ir::ElemType;
    use hlo_ir::sharding::IotaList;

    fn arr(v: &[f32]) -> Array {
        Array::new(ElemType::F32, vec![v.len()], Data::F32(v.to_vec()))
    }

    fn run_all(
        n: usize,
        opcode: Opcode,
        attrs: CollectiveAttrs,
        inputs: Vec<Vec<f32>>,
    ) -> Vec<Vec<f32>> {
        let fabric = Fabric::new(n);
        std::thread::scope(|s| {
            let hs: Vec<_> = inputs
                .into_iter()
                .enumerate()
                .map(|(d, v)| {
                    let (f, a) = (&fabric, attrs.clone());
                    s.spawn(move || {
                        execute(f, d, opcode, &a, Some(Opcode::Add), vec![arr(&v)]).unwrap()[0]
                            .data
                            .as_f32()
                            .to_vec()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn all_reduce_sums_within_groups() {
        let attrs = CollectiveAttrs {
            replica_groups: Some(ReplicaGroups::Iota(IotaList {
                dims: vec![2, 2],
                reshape: vec![4],
                transpose: vec![],
            })),
            ..Default::default()
        };
        let out = run_all(
            4,
            Opcode::AllReduce,
            attrs,
            vec![vec![1.0], vec![2.0], vec![10.0], vec![20.0]],
        );
        assert_eq!(out, vec![vec![3.0], vec![3.0], vec![30.0], vec![30.0]]);
    }

    #[test]
    fn gather_scatter_and_all_to_all() {
        let dims = |d| CollectiveAttrs { dimensions: Some(vec![d]), ..Default::default() };
        assert_eq!(
            run_all(2, Opcode::AllGather, dims(0), vec![vec![1.0, 2.0], vec![3.0, 4.0]]),
            vec![vec![1.0, 2.0, 3.0, 4.0]; 2]
        );
        assert_eq!(
            run_all(2, Opcode::ReduceScatter, dims(0), vec![vec![1.0, 2.0], vec![3.0, 4.0]]),
            vec![vec![4.0], vec![6.0]]
        );
        assert_eq!(
            run_all(2, Opcode::AllToAll, dims(0), vec![vec![1.0, 2.0], vec![3.0, 4.0]]),
            vec![vec![1.0, 3.0], vec![2.0, 4.0]]
        );
        let perm =
            CollectiveAttrs { source_target_pairs: Some(vec![(0, 1)]), ..Default::default() };
        assert_eq!(
            run_all(2, Opcode::CollectivePermute, perm, vec![vec![5.0], vec![7.0]]),
            vec![vec![0.0], vec![5.0]]
        );
    }

    #[test]
    fn a_failed_device_does_not_hang_the_others() {
        let fabric = Fabric::new(2);
        std::thread::scope(|s| {
            let h = s.spawn(|| fabric.exchange(0, vec![arr(&[1.0])]));
            std::thread::sleep(std::time::Duration::from_millis(20));
            fabric.abort("device 1: out of memory");
            assert!(h.join().unwrap().unwrap_err().to_string().contains("device 1"));
        });
    }

    #[test]
    fn mesh_groups_select_named_axes() {
        let rg = ReplicaGroups::Mesh {
            axes: vec![("a".into(), 2), ("b".into(), 2)],
            selection: "{'b'}".into(),
        };
        assert_eq!(groups(Some(&rg), 4).unwrap(), vec![vec![0, 1], vec![2, 3]]);
        let rg = ReplicaGroups::Mesh {
            axes: vec![("a".into(), 2), ("b".into(), 2)],
            selection: "{'a'}".into(),
        };
        assert_eq!(groups(Some(&rg), 4).unwrap(), vec![vec![0, 2], vec![1, 3]]);
    }
}
