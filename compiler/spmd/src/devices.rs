//! A partition plan and the global view of its entry: the per-device module with the
//! global inputs' and outputs' shapes and shardings ([`Plan`]), the global inputs split
//! into each device's shards (padded chunks, zeros in the padding) and the per-device
//! outputs put back together from the global output shardings. Every engine's N devices
//! run a [`Plan`]: the reference interpreter's (`hlo_devices::run_interp`), the JIT's
//! (`hlo_runtime::SpmdProgram`) and the TPU model's chips, each a thread on one
//! `hlo_fabric::Fabric` (`hlo_fabric::on_devices`); none of them runs in this crate.

use hlo_ir::{Diagnostic, ElemType, Module, Shape, Tensor};

use crate::geometry::Placed;
use crate::sharding::Spec;

/// A global array and how it is split across devices.
#[derive(Debug, Clone)]
pub struct Sharded {
    pub elem: ElemType,
    pub dims: Vec<i64>,
    pub p: Placed,
}

impl Sharded {
    pub fn local_dims(&self) -> Vec<u64> {
        self.p.local_dims(&self.dims).iter().map(|&d| d as u64).collect()
    }
}

/// A partitioned module with the global view of its entry: what the caller passes and
/// gets back.
pub struct Plan {
    pub module: Module,
    pub devices: usize,
    pub inputs: Vec<Sharded>,
    /// Where each of `inputs` is declared in the global module (its parameter's span).
    pub input_spans: Vec<hlo_ir::Span>,
    pub outputs: Vec<Sharded>,
    pub partitioned: crate::partition::Partitioned,
}

fn leaf_specs(spec: Option<Spec>, shape: &Shape) -> Vec<Spec> {
    match (shape, spec) {
        (Shape::Tuple(items), Some(Spec::Tuple(v))) => {
            items.iter().enumerate().flat_map(|(i, s)| leaf_specs(v.get(i).cloned(), s)).collect()
        }
        (Shape::Tuple(items), s) => items.iter().flat_map(|x| leaf_specs(s.clone(), x)).collect(),
        (_, s) => vec![s.unwrap_or(Spec::Replicated)],
    }
}

fn sharded(spec: &Spec, shape: &Shape, n: i64) -> Result<Sharded, String> {
    let a = shape.as_array().ok_or("a non-array entry parameter or output")?;
    if matches!(spec, Spec::Manual) {
        return Err("a value of a manual region is an input or output of the program (it \
                    enters through `SPMDFullToShardShape` and leaves through \
                    `SPMDShardToFullShape`)"
            .into());
    }
    let dims: Vec<i64> =
        a.static_dims().ok_or("a dynamic entry shape")?.iter().map(|&d| d as i64).collect();
    let t = crate::partition::as_tiling(spec, dims.len(), n).ok_or_else(|| {
        format!("sharding {} does not fit {} on {n} devices", spec.to_ir(), shape)
    })?;
    let p = Placed::new(t).ok_or("a sharding whose devices are not 0..N")?;
    Ok(Sharded { elem: a.elem, dims, p })
}

/// Each array leaf of `ins`'s shape with its leaf of `ins`'s sharding.
fn sharded_leaves(ins: &hlo_ir::Instr, n: i64) -> Result<Vec<Sharded>, String> {
    let specs = leaf_specs(ins.sharding.as_deref().and_then(Spec::from_ir), &ins.shape);
    let mut shapes = Vec::new();
    collect_leaves(&ins.shape, &mut shapes);
    specs.iter().zip(&shapes).map(|(s, sh)| sharded(s, sh, n)).collect()
}

/// Partitions `global` (whose instructions carry shardings, e.g. after
/// `sharding-propagation`) and records the global entry shapes and shardings.
pub fn plan(global: &Module) -> Result<Plan, Diagnostic> {
    plan_with(global, crate::partition::PartialSums::AsXla)
}

/// [`plan`] with the partial sums of split contractions summed as `sums` says.
pub fn plan_with(global: &Module, sums: crate::partition::PartialSums) -> Result<Plan, Diagnostic> {
    let n = crate::partition::device_count(global);
    let entry = global.entry();
    let at = |e: String| Diagnostic::error(entry.span, e);
    let (mut inputs, mut input_spans) = (Vec::new(), Vec::new());
    for p in entry.params() {
        // A tuple parameter (as JAX passes many arguments to a TPU program) is its leaves.
        let ins = entry.instr(p);
        inputs.extend(sharded_leaves(ins, n).map_err(|e| Diagnostic::error(ins.span, e))?);
        input_spans.resize(inputs.len(), ins.span);
    }
    let root = entry.root().ok_or_else(|| at("the entry computation has no root".into()))?;
    let rins = entry.instr(root);
    let outputs = sharded_leaves(rins, n).map_err(|e| Diagnostic::error(rins.span, e))?;
    let mut module = global.clone();
    let mut cx = hlo_pipeline::PassContext::default();
    cx.set_report(sums);
    use hlo_pipeline::Pass;
    crate::spmd_partition::SpmdPartition.run(&mut module, &mut cx)?;
    let partitioned = cx
        .take_report::<crate::partition::Partitioned>()
        .unwrap_or_else(|| crate::partition::Partitioned { devices: n, ..Default::default() });
    Ok(Plan { module, devices: n.max(1) as usize, inputs, input_spans, outputs, partitioned })
}

fn collect_leaves(s: &Shape, out: &mut Vec<Shape>) {
    match s {
        Shape::Tuple(v) => v.iter().for_each(|x| collect_leaves(x, out)),
        other => out.push(other.clone()),
    }
}

/// Copies the box `ext` at `from` of a row-major array of `sdims` to `to` of `ddims`.
#[allow(clippy::too_many_arguments)]
fn copy_box(
    src: &[u8],
    sdims: &[usize],
    from: &[usize],
    dst: &mut [u8],
    ddims: &[usize],
    to: &[usize],
    ext: &[usize],
    es: usize,
) {
    let r = ext.len();
    if ext.contains(&0) {
        return;
    }
    if r == 0 {
        dst[..es].copy_from_slice(&src[..es]);
        return;
    }
    let stride = |dims: &[usize]| {
        let mut s = vec![1usize; dims.len()];
        for i in (0..dims.len().saturating_sub(1)).rev() {
            s[i] = s[i + 1] * dims[i + 1];
        }
        s
    };
    let (ss, ds) = (stride(sdims), stride(ddims));
    let row = ext[r - 1] * es;
    let mut idx = vec![0usize; r - 1];
    loop {
        let so: usize =
            (0..r).map(|k| (from[k] + if k < r - 1 { idx[k] } else { 0 }) * ss[k]).sum::<usize>()
                * es;
        let doff: usize =
            (0..r).map(|k| (to[k] + if k < r - 1 { idx[k] } else { 0 }) * ds[k]).sum::<usize>()
                * es;
        dst[doff..doff + row].copy_from_slice(&src[so..so + row]);
        let mut k = r - 1;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < ext[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Device `d`'s `[start, valid length)` per dimension.
fn region(s: &Sharded, d: usize) -> (Vec<usize>, Vec<usize>) {
    let start = (0..s.dims.len()).map(|k| s.p.start(d, k, s.dims[k]) as usize).collect();
    let valid = (0..s.dims.len()).map(|k| s.p.valid(d, k, s.dims[k]) as usize).collect();
    (start, valid)
}

/// `t` split into every device's shard.
pub fn shard(t: &Tensor, s: &Sharded) -> Result<Vec<Tensor>, hlo_ir::Diagnostic> {
    let want: Vec<u64> = s.dims.iter().map(|&d| d as u64).collect();
    if t.elem() != s.elem || t.dims() != want.as_slice() {
        return Err(hlo_ir::Diagnostic::from(format!(
            "expected {}{:?}, got {}{:?}",
            s.elem,
            want,
            t.elem(),
            t.dims()
        )));
    }
    let gd: Vec<usize> = want.iter().map(|&d| d as usize).collect();
    let ld = s.local_dims();
    let ldu: Vec<usize> = ld.iter().map(|&d| d as usize).collect();
    (0..s.p.devices())
        .map(|d| {
            let mut out = Tensor::zeros(s.elem, &ld).map_err(|e| e.to_string())?;
            let (start, valid) = region(s, d);
            let es = out.elem_size();
            copy_box(t.bytes(), &gd, &start, out.bytes_mut(), &ldu, &vec![0; gd.len()], &valid, es);
            Ok(out)
        })
        .collect()
}

/// The global array from every device's shard (`parts[d]`).
pub fn assemble(parts: &[&Tensor], s: &Sharded) -> Result<Tensor, hlo_ir::Diagnostic> {
    let gd: Vec<u64> = s.dims.iter().map(|&d| d as u64).collect();
    let gdu: Vec<usize> = gd.iter().map(|&d| d as usize).collect();
    let ld = s.local_dims();
    let ldu: Vec<usize> = ld.iter().map(|&d| d as usize).collect();
    let mut out = Tensor::zeros(s.elem, &gd).map_err(|e| e.to_string())?;
    let es = out.elem_size();
    for (d, part) in parts.iter().enumerate() {
        if part.elem() != s.elem || part.dims() != ld.as_slice() {
            return Err(hlo_ir::Diagnostic::from(format!(
                "device {d} returned {}{:?}, expected {}{:?}",
                part.elem(),
                part.dims(),
                s.elem,
                ld
            )));
        }
        let (start, valid) = region(s, d);
        copy_box(
            part.bytes(),
            &ldu,
            &vec![0; gdu.len()],
            out.bytes_mut(),
            &gdu,
            &start,
            &valid,
            es,
        );
    }
    Ok(out)
}

/// Bytes of a host tensor of `dims` of `elem` (saturating; one byte per element for the
/// sub-byte types, which host tensors unpack).
fn tensor_bytes(dims: &[u64], elem: ElemType) -> u64 {
    let n = dims.iter().fold(1u64, |a, &d| a.saturating_mul(d));
    n.saturating_mul(hlo_ir::tensor::elem_size(elem).unwrap_or(1) as u64)
}

impl Plan {
    /// The bytes the global inputs and every device's shards of them take together, as
    /// [`shard_inputs`] holds them (a replicated input is copied to every device).
    pub fn input_bytes(&self) -> u64 {
        self.inputs.iter().fold(0u64, |acc, s| {
            let global: Vec<u64> = s.dims.iter().map(|&d| d as u64).collect();
            acc.saturating_add(tensor_bytes(&global, s.elem)).saturating_add(
                tensor_bytes(&s.local_dims(), s.elem).saturating_mul(self.devices as u64),
            )
        })
    }

    /// The memory budget of each device's interpreter in a run of this plan: what the host
    /// budget leaves beside the global inputs and their shards, split evenly (each
    /// interpreter counts only its own thread's arrays, so without this N devices could
    /// each take the whole budget).
    pub fn device_budget(&self) -> u64 {
        hlo_ir::tensor::memory_budget().saturating_sub(self.input_bytes())
            / self.devices.max(1) as u64
    }

    /// An error unless the global inputs and their shards fit the host memory budget
    /// ([`hlo_ir::tensor::memory_budget`]) together: checked before [`shard_inputs`]
    /// allocates any shard (and before anyone seeds inputs that large), it names the input
    /// whose shards take the most.
    pub fn check_inputs_fit(&self) -> Result<(), Diagnostic> {
        let (need, budget) = (self.input_bytes(), hlo_ir::tensor::memory_budget());
        if need <= budget {
            return Ok(());
        }
        let format = hlo_ir::tensor::format_bytes;
        let largest = self
            .inputs
            .iter()
            .enumerate()
            .rev() // the first of the largest: `max_by_key` keeps the last of equals
            .max_by_key(|(_, s)| tensor_bytes(&s.local_dims(), s.elem));
        // At the largest input's parameter.
        let span = largest
            .and_then(|(k, _)| self.input_spans.get(k).copied())
            .unwrap_or(self.module.entry().span);
        let largest = largest
            .map(|(k, s)| {
                let local = s.local_dims();
                let global: Vec<u64> = s.dims.iter().map(|&d| d as u64).collect();
                let how = if local == global {
                    "replicated: a whole copy on every device".to_string()
                } else {
                    format!("{:?} on every device", local)
                };
                format!(
                    "; the largest, input {k} ({}{:?}, {how}), takes {}",
                    s.elem,
                    global,
                    format(tensor_bytes(&local, s.elem).saturating_mul(self.devices as u64))
                )
            })
            .unwrap_or_default();
        Err(Diagnostic::error(
            span,
            format!(
                "the inputs and their shards on {} devices take {}, more than the memory budget of {} (16 GiB, or 3/4 of the physical memory if less){largest}",
                self.devices,
                format(need),
                format(budget)
            ),
        ))
    }
}

/// Splits `inputs` per the plan; checks count, types and shapes.
pub fn shard_inputs(plan: &Plan, inputs: &[Tensor]) -> Result<Vec<Vec<Tensor>>, Diagnostic> {
    shard_input_parts(plan, inputs, &[])
}

/// [`shard_inputs`] of the inputs `first` then `rest` (resident state and a batch,
/// without concatenating them).
pub fn shard_input_parts(
    plan: &Plan,
    first: &[Tensor],
    rest: &[Tensor],
) -> Result<Vec<Vec<Tensor>>, Diagnostic> {
    let span = plan.module.entry().span;
    let given = first.len() + rest.len();
    if given != plan.inputs.len() {
        return Err(Diagnostic::error(
            span,
            format!("the program takes {} inputs but {given} were given", plan.inputs.len()),
        ));
    }
    plan.check_inputs_fit()?;
    let mut per: Vec<Vec<Tensor>> = (0..plan.devices).map(|_| Vec::with_capacity(given)).collect();
    for (k, (t, s)) in first.iter().chain(rest).zip(&plan.inputs).enumerate() {
        let parts = shard(t, s).map_err(|e| Diagnostic::error(span, format!("input {k}: {e}")))?;
        for (d, p) in parts.into_iter().enumerate() {
            per[d].push(p);
        }
    }
    Ok(per)
}

/// The global outputs from each device's (`outs[d]`).
pub fn assemble_outputs(plan: &Plan, outs: &[Vec<Tensor>]) -> Result<Vec<Tensor>, Diagnostic> {
    let span = plan.module.entry().span;
    (0..plan.outputs.len())
        .map(|k| {
            let parts: Vec<&Tensor> = outs
                .iter()
                .map(|o| {
                    o.get(k).ok_or_else(|| {
                        Diagnostic::error(span, format!("a device returned no output {k}"))
                    })
                })
                .collect::<Result<_, _>>()?;
            assemble(&parts, &plan.outputs[k])
                .map_err(|e| Diagnostic::error(span, format!("output {k}: {e}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::spec::Tiling;

    #[test]
    fn shard_and_assemble_round_trip_uneven() {
        let t = Tiling { tiles: vec![3, 1], repl: 2, other: vec![], devices: (0..6).collect() };
        let s = Sharded { elem: ElemType::F32, dims: vec![7, 2], p: Placed::new(t).unwrap() };
        let v: Vec<f32> = (0..14).map(|x| x as f32).collect();
        let g = Tensor::from_f32(&[7, 2], &v).unwrap();
        let parts = shard(&g, &s).unwrap();
        assert_eq!(parts[0].dims(), &[3, 2]);
        assert_eq!(parts[5].to_vec::<f32>().unwrap(), vec![12.0, 13.0, 0.0, 0.0, 0.0, 0.0]);
        let refs: Vec<&Tensor> = parts.iter().collect();
        assert_eq!(assemble(&refs, &s).unwrap().to_vec::<f32>().unwrap(), v);
        assert!(
            shard(&Tensor::from_f32(&[2], &[1.0, 2.0]).unwrap(), &s)
                .unwrap_err()
                .message
                .contains("expected f32[7, 2]")
        );
    }
}
