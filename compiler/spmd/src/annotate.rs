//! Shardings written onto a module exported without any, from a choice of parallelism:
//! what `jax.jit(step, in_shardings=..., out_shardings=...)` writes when JAX lowers a step
//! for a mesh, for a module exported on one device. Propagation and partitioning then
//! run as for a module JAX annotated itself.

use hlo_ir::sharding::{IotaList, ShardingKind, SingleSharding, TileAssignment};
use hlo_ir::{Diagnostic, Module, Sharding};

/// Data parallelism over `devices` devices: the first `replicated` entry parameters (the
/// training state: parameters and optimizer state) are replicated, every later one (the
/// batch) is split along its first dimension, and every output is replicated (the loss
/// and the new state: gradients are summed across devices by the partitioner's
/// all-reduce).
///
/// Refused, with a located error: a module that already has shardings, a batch
/// parameter that is a tuple or a scalar, or one whose first dimension `devices` does not
/// divide.
pub fn data_parallel(m: &Module, devices: usize, replicated: usize) -> Result<Module, Diagnostic> {
    if devices == 0 {
        return Err(Diagnostic::error(None, "data parallelism over 0 devices"));
    }
    for id in m.comp_ids() {
        let c = m.comp(id);
        if let Some(n) = c.post_order().into_iter().find(|&n| c.instr(n).sharding.is_some()) {
            let i = c.instr(n);
            return Err(Diagnostic::error(
                Some(i.span),
                format!("`{}` already has a sharding: the module is annotated", i.name),
            )
            .with_help("partition it as annotated, without data_parallel"));
        }
    }
    let mut out = m.clone();
    let entry_id = out.entry;
    let entry = out.comp_mut(entry_id);
    let params = entry.params();
    if replicated > params.len() {
        return Err(Diagnostic::error(
            None,
            format!("{replicated} replicated parameters, but the entry has {}", params.len()),
        ));
    }
    let replicated_one = || SingleSharding::new(ShardingKind::Replicated);
    for (k, &n) in params.iter().enumerate() {
        let i = entry.instr(n);
        let sharding = if k < replicated {
            let mut leaves = Vec::new();
            i.shape.for_each_array(&mut |_| leaves.push(replicated_one()));
            if i.shape.as_array().is_some() {
                Sharding::Single(replicated_one())
            } else {
                Sharding::Tuple(leaves)
            }
        } else {
            let a = i.shape.as_array().ok_or_else(|| {
                Diagnostic::error(
                    Some(i.span),
                    format!("batch parameter `{}` is a tuple; only arrays are split", i.name),
                )
            })?;
            let first = a.dims.first().and_then(|d| match d {
                hlo_ir::Dim::Static(n) => Some(*n),
                _ => None,
            });
            let Some(first) = first else {
                return Err(Diagnostic::error(
                    Some(i.span),
                    format!(
                        "batch parameter `{}` ({}) has no static first dimension to split",
                        i.name, i.shape
                    ),
                ));
            };
            if first % devices as u64 != 0 {
                return Err(Diagnostic::error(
                    Some(i.span),
                    format!(
                        "batch parameter `{}` ({}): {devices} devices do not divide its first \
                         dimension",
                        i.name, i.shape
                    ),
                )
                .with_help("choose a device count that divides the global batch"));
            }
            let mut dims = vec![1i64; a.dims.len()];
            dims[0] = devices as i64;
            Sharding::Single(SingleSharding::new(ShardingKind::Tiled {
                tiles: TileAssignment::Iota(IotaList {
                    dims,
                    reshape: vec![devices as i64],
                    transpose: Vec::new(),
                }),
                last_tile_dim_replicate: false,
                last_tile_dims: Vec::new(),
            }))
        };
        entry.instr_mut(n).sharding = Some(Box::new(sharding));
    }
    if let Some(r) = entry.root() {
        let shape = entry.instr(r).shape.clone();
        let sharding = if shape.as_array().is_some() {
            Sharding::Single(replicated_one())
        } else {
            let mut leaves = Vec::new();
            shape.for_each_array(&mut |_| leaves.push(replicated_one()));
            Sharding::Tuple(leaves)
        };
        entry.instr_mut(r).sharding = Some(Box::new(sharding));
    }
    out.header.num_partitions = Some(devices as i64);
    Ok(out)
}
