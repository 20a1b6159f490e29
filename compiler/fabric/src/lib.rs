//! The device fabric: what a collective computes on each of N devices, over host
//! tensors, shared by every engine that runs SPMD programs (the reference interpreter,
//! the JIT, the TPU model's values).
//!
//! Every device of an SPMD program executes the same collectives in the same order, so a
//! collective is a rendezvous of all N devices ([`Fabric::exchange`]): each deposits its
//! operands, the last to arrive publishes the set, and each device then computes its own
//! result from its group's contributions ([`execute`]). An all-reduce takes two
//! rendezvous, as a ring does: member `p` reduces the `p`-th slice of the operands, then
//! the slices are gathered (each device reduces 1/g of the data). Reductions fold the
//! group's operands in group order with the reducer's elementwise op (the reference
//! interpreter's arithmetic, rounded to the element type after every step), so every
//! member gets bit-identical results, whichever engine runs it, and runs are reproducible.
//! A device that fails aborts the fabric: the others return an error instead of waiting
//! forever.
//!
//! Operands and results are [`Tensor`]s, the dense little-endian layout every engine's
//! buffers already have: the JIT hands its arena bytes over without converting them.
//!
//! [`on_devices`] runs N devices, a thread each, on one fabric: every engine's N-device
//! run (the interpreter's in `hlo-devices`, the JIT's, the TPU model's chips) goes
//! through it. [`binary_reducer`] is the elementwise op of a reducer computation.

mod layout;
mod reduce;

use std::sync::{Arc, Condvar, Mutex};

use hlo_ir::op::{CollectiveAttrs, ReplicaGroups};
use hlo_ir::{Diagnostic, Opcode, Tensor};

pub use reduce::binary_reducer;

/// Why a collective could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum FabricError {
    /// Another device failed; this one was woken instead of waiting forever.
    #[error("another device failed: {0}")]
    Aborted(String),
    /// The replica groups, dimensions or operands do not describe a collective the
    /// devices can run.
    #[error("{0}")]
    Malformed(String),
    /// The reducer is not an elementwise op the fabric applies to this element type.
    #[error("{0}")]
    Reducer(String),
    /// A collective over more than one device, run where there is only one (see [`alone`]).
    #[error(
        "{} over groups of {group} needs {devices} devices (the SPMD runtime); this run has one device",
        .opcode.name()
    )]
    NeedsDevices {
        /// The collective.
        opcode: Opcode,
        /// Its largest replica group.
        group: usize,
        /// The devices its module and groups name.
        devices: usize,
    },
}

fn malformed(s: impl Into<String>) -> FabricError {
    FabricError::Malformed(s.into())
}

/// The rendezvous of N devices.
pub struct Fabric {
    n: usize,
    state: Mutex<State>,
    cv: Condvar,
}

struct State {
    slots: Vec<Option<Vec<Tensor>>>,
    arrived: usize,
    generation: u64,
    published: Arc<Vec<Vec<Tensor>>>,
    aborted: Option<String>,
}

impl Fabric {
    /// A fabric joining `n` devices.
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

    /// How many devices the fabric joins.
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
    pub fn exchange(
        &self,
        d: usize,
        mine: Vec<Tensor>,
    ) -> Result<Arc<Vec<Vec<Tensor>>>, FabricError> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(why) = &s.aborted {
            return Err(FabricError::Aborted(why.clone()));
        }
        if d >= self.n || s.slots[d].is_some() {
            return Err(malformed(format!(
                "device {d} entered a collective twice (the fabric has {} devices)",
                self.n
            )));
        }
        s.slots[d] = Some(mine);
        s.arrived += 1;
        if s.arrived == self.n {
            let all: Vec<Vec<Tensor>> =
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
                return Err(FabricError::Aborted(why.clone()));
            }
            s = self.cv.wait(s).unwrap_or_else(|e| e.into_inner());
        }
        // The next round cannot complete before this device joins it: `published` is ours.
        Ok(s.published.clone())
    }
}

/// Runs `f(device, fabric)` on one thread per device; the first error aborts the others.
pub fn on_devices<T: Send>(
    n: usize,
    f: impl Fn(usize, &Fabric) -> Result<T, Diagnostic> + Sync,
) -> Result<Vec<T>, Diagnostic> {
    let fabric = Fabric::new(n);
    let results: Vec<Result<T, Diagnostic>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|d| {
                let (f, fabric) = (&f, &fabric);
                s.spawn(move || {
                    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(d, fabric)))
                        .unwrap_or_else(|_| {
                            Err(Diagnostic::error(None, format!("device {d} panicked")))
                        });
                    if let Err(e) = &r {
                        fabric.abort(&format!("device {d}: {}", e.message));
                    }
                    r
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Diagnostic::error(None, "a device thread panicked")))
            })
            .collect()
    });
    // Report the device that failed first, not one that saw the abort.
    let mut out = Vec::with_capacity(n);
    let mut first: Option<Diagnostic> = None;
    for r in results {
        match r {
            Ok(v) => out.push(v),
            Err(e) => {
                let secondary = e.message.contains("another device failed");
                if first
                    .as_ref()
                    .is_none_or(|f| f.message.contains("another device failed") && !secondary)
                {
                    first = Some(e);
                }
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// The device groups of `rg` over `n` devices (absent or empty: one group of all).
pub fn groups(rg: Option<&ReplicaGroups>, n: usize) -> Result<Vec<Vec<i64>>, FabricError> {
    let all = || vec![(0..n as i64).collect::<Vec<i64>>()];
    Ok(match rg {
        None => all(),
        Some(ReplicaGroups::Explicit(g)) if g.is_empty() => all(),
        Some(ReplicaGroups::Explicit(g)) => g.clone(),
        Some(ReplicaGroups::Iota(l)) => {
            let size = *l
                .dims
                .get(1)
                .ok_or_else(|| malformed("replica groups in iota form need [groups,size]"))?
                as usize;
            l.devices().chunks(size.max(1)).map(|c| c.to_vec()).collect()
        }
        Some(ReplicaGroups::Mesh { axes, selection, device_ids }) => {
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
            // The device at each mesh position: its position, or the transposed iota of
            // `device_ids`.
            let ids: Option<Vec<i64>> = device_ids.as_ref().map(|(dims, perm)| {
                let rank = dims.len();
                let perm: Vec<usize> = if perm.is_empty() {
                    (0..rank).collect()
                } else {
                    perm.iter().map(|&p| p as usize).collect()
                };
                // Row-major strides of the reshaped iota, read in the transposed order.
                let mut strides = vec![1i64; rank];
                for k in (0..rank.saturating_sub(1)).rev() {
                    strides[k] = strides[k + 1] * dims[k + 1];
                }
                let tdims: Vec<i64> = perm.iter().map(|&p| dims[p]).collect();
                let total: i64 = dims.iter().product();
                (0..total)
                    .map(|mut i| {
                        let mut id = 0;
                        for k in (0..rank).rev() {
                            id += (i % tdims[k]) * strides[perm[k]];
                            i /= tdims[k];
                        }
                        id
                    })
                    .collect()
            });
            if let Some(ids) = &ids
                && ids.len() as i64 != total
            {
                return Err(malformed(format!(
                    "mesh device_ids list {} devices for a mesh of {total}",
                    ids.len()
                )));
            }
            let mut out: Vec<Vec<i64>> = Vec::new();
            let mut last = None;
            for (key, _, d) in keyed {
                let d = ids.as_ref().map_or(d, |ids| ids[d as usize]);
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

/// Whether collective `opcode` over `attrs`'s groups can run on a single device, without a
/// fabric (an engine's one-device run), in a module that declares `declared` devices (the
/// larger of `num_partitions` and `replica_count`). It can when the module declares one
/// device and no replica group has more than one member (absent groups are one group of
/// every device; groups in iota or mesh form count as more than one): with one
/// participant each result is its operand, as XLA computes it. Otherwise the error says
/// how many devices it needs. (The engine still checks that each result has its operand's
/// shape: a growing all-gather without groups is accepted by shape inference.)
pub fn alone(opcode: Opcode, attrs: &CollectiveAttrs, declared: usize) -> Result<(), FabricError> {
    let single = match &attrs.replica_groups {
        None => true,
        Some(ReplicaGroups::Explicit(g)) => g.iter().all(|g| g.len() <= 1),
        Some(_) => false,
    };
    if single && declared <= 1 {
        return Ok(());
    }
    let gs = groups(attrs.replica_groups.as_ref(), declared.max(1)).unwrap_or_default();
    let group = gs.iter().map(Vec::len).max().unwrap_or(declared).max(1);
    let named = gs.iter().flatten().map(|&d| d.max(0) as usize + 1).max().unwrap_or(0);
    Err(FabricError::NeedsDevices { opcode, group, devices: named.max(declared).max(group) })
}

/// Device `d`'s group and its position in it.
fn my_group(groups: &[Vec<i64>], d: usize) -> Result<(&[i64], usize), FabricError> {
    for g in groups {
        if let Some(p) = g.iter().position(|&x| x == d as i64) {
            return Ok((g, p));
        }
    }
    Err(malformed(format!("device {d} is in no replica group")))
}

/// The group's operands folded in group order with `op`.
fn fold(parts: &[&Tensor], op: Opcode) -> Result<Tensor, FabricError> {
    let mut acc = parts[0].clone();
    for p in &parts[1..] {
        if p.elem() != acc.elem() || p.bytes().len() != acc.bytes().len() {
            return Err(malformed(format!(
                "operands {} and {} of one collective differ",
                p.shape(),
                acc.shape()
            )));
        }
        let e = acc.elem();
        reduce::fold_into(op, e, acc.bytes_mut(), p.bytes())?;
    }
    Ok(acc)
}

fn dim_of(attrs: &CollectiveAttrs) -> Result<usize, FabricError> {
    attrs
        .dimensions
        .as_ref()
        .and_then(|d| d.first())
        .map(|&d| d as usize)
        .ok_or_else(|| malformed("missing dimensions={d}"))
}

/// Runs collective `opcode` on device `d`: `operands` are this device's, `reducer` the
/// elementwise op of `to_apply` (all-reduce, reduce-scatter).
pub fn execute(
    fabric: &Fabric,
    d: usize,
    opcode: Opcode,
    attrs: &CollectiveAttrs,
    reducer: Option<Opcode>,
    operands: Vec<Tensor>,
) -> Result<Vec<Tensor>, FabricError> {
    let n = fabric.devices();
    let gs = groups(attrs.replica_groups.as_ref(), n)?;
    let count = operands.len();
    let all = fabric.exchange(d, operands)?;
    let (group, pos) = my_group(&gs, d)?;
    let member = |m: i64, i: usize| -> Result<&Tensor, FabricError> {
        all.get(m as usize)
            .and_then(|ops| ops.get(i))
            .ok_or_else(|| malformed(format!("device {m} has no operand {i}")))
    };
    let no_reducer = || FabricError::Reducer("the reducer is not a single elementwise op".into());
    let mut out = Vec::with_capacity(count);
    match opcode {
        Opcode::AllReduce => {
            // As a ring does: member `pos` reduces the `pos`-th slice of the flattened
            // operands over the group (in group order), then the slices are gathered. Every
            // element is still folded in group order, so all members get the same bits.
            let op = reducer.ok_or_else(no_reducer)?;
            let g = group.len();
            let mut partials = Vec::with_capacity(count);
            for i in 0..count {
                let len = member(group[0], i)?.element_count();
                let (lo, hi) = (pos * len / g, (pos + 1) * len / g);
                let parts: Vec<Tensor> = group
                    .iter()
                    .map(|&m| layout::flat_range(member(m, i)?, lo..hi))
                    .collect::<Result<_, _>>()?;
                let refs: Vec<&Tensor> = parts.iter().collect();
                partials.push(fold(&refs, op)?);
            }
            let reduced = fabric.exchange(d, partials)?;
            for i in 0..count {
                let mine = member(d as i64, i)?;
                let mut bytes = Vec::with_capacity(mine.bytes().len());
                for &m in group {
                    let part = reduced
                        .get(m as usize)
                        .and_then(|p| p.get(i))
                        .ok_or_else(|| malformed(format!("device {m} reduced no slice {i}")))?;
                    bytes.extend_from_slice(part.bytes());
                }
                out.push(layout::tensor(mine.elem(), mine.dims().to_vec(), bytes)?);
            }
        }
        Opcode::ReduceScatter => {
            let op = reducer.ok_or_else(no_reducer)?;
            for i in 0..count {
                let parts: Vec<&Tensor> =
                    group.iter().map(|&m| member(m, i)).collect::<Result<_, _>>()?;
                let sum = fold(&parts, op)?;
                out.push(layout::chunk(&sum, dim_of(attrs)?, group.len(), pos)?);
            }
        }
        Opcode::AllGather => {
            let dim = dim_of(attrs)?;
            for i in 0..count {
                let parts: Vec<&Tensor> =
                    group.iter().map(|&m| member(m, i)).collect::<Result<_, _>>()?;
                out.push(layout::concatenate(&parts, dim)?);
            }
        }
        Opcode::AllToAll => match &attrs.dimensions {
            Some(_) => {
                let dim = dim_of(attrs)?;
                for i in 0..count {
                    let parts: Vec<Tensor> = group
                        .iter()
                        .map(|&m| layout::chunk(member(m, i)?, dim, group.len(), pos))
                        .collect::<Result<_, _>>()?;
                    let refs: Vec<&Tensor> = parts.iter().collect();
                    out.push(layout::concatenate(&refs, dim)?);
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
                    None => Tensor::zeros(mine.elem(), mine.dims())
                        .map_err(|e| malformed(e.to_string()))?,
                });
            }
        }
        Opcode::CollectiveBroadcast => {
            for i in 0..count {
                out.push(member(group[0], i)?.clone());
            }
        }
        other => {
            return Err(malformed(format!("{} is not a collective the fabric runs", other.name())));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
