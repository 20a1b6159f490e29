//! What a sharded module's annotations cost before any partitioning: every edge where an
//! operand's sharding differs from the one its user needs (a reshard point: the
//! collective a partitioner inserts there and the bytes it moves), and every instruction
//! whose computation itself needs a collective (a dot contracting a tiled dimension, a
//! reduce over one: partial results summed by an `all-reduce`).
//!
//! Bytes are per device per execution of the module. Models, as GSPMD lowers them:
//! replicated → tiled is a local `dynamic-slice` (0 bytes); tiled → coarser (or
//! replicated) is an `all-gather` (each device receives what it lacks); same tiles on
//! other devices is a `collective-permute` (one shard); the tiling moving between dims is
//! an `all-to-all` (the shard minus the part a device keeps); anything else is a full
//! rematerialization (`all-gather` then `dynamic-slice`). An `all-reduce` over `g`
//! devices moves `2 (g - 1) / g` shards (ring).

use std::collections::HashMap;

use hlo_ir::{Module, NodeIndex, Op, Opcode, Shape};

use super::Leaves;
use super::mesh::Mesh;
use super::rules;
use super::rules::partitioned_computations;
use super::spec::{self, Spec};

#[derive(Debug, Clone)]
pub struct ReshardPoint {
    pub computation: String,
    pub user: String,
    pub operand: String,
    pub slot: usize,
    pub shape: Shape,
    pub from: Spec,
    pub to: Spec,
    pub collective: &'static str,
    pub bytes: u64,
}

#[derive(Debug, Clone)]
pub struct ComputeCollective {
    pub computation: String,
    pub instr: String,
    pub why: &'static str,
    pub group: i64,
    pub bytes: u64,
}

#[derive(Debug, Clone, Default)]
pub struct Report {
    pub points: Vec<ReshardPoint>,
    pub compute: Vec<ComputeCollective>,
}

fn leaves_of(shape: &Shape, s: Option<Spec>) -> Leaves {
    match (shape, s) {
        (Shape::Tuple(_), Some(Spec::Tuple(v))) => v.into_iter().map(Some).collect(),
        (Shape::Tuple(_), s) => vec![s; shape.leaf_count()],
        (_, s) => vec![s],
    }
}

fn elem_bytes(shape: &Shape) -> u64 {
    shape.as_array().map(|a| (a.elem.bits() as u64).div_ceil(8)).unwrap_or(4)
}

fn shard_bytes(s: &Spec, dims: &[i64], eb: u64) -> u64 {
    let elems: i64 = match s {
        Spec::Tiled(t) => t.shard_dims(dims).iter().product(),
        _ => dims.iter().product(),
    };
    elems.max(0) as u64 * eb
}

/// The collective that turns sharding `from` into `to` for an array of `dims`, and the
/// bytes each device receives.
pub fn classify(from: &Spec, to: &Spec, dims: &[i64], eb: u64) -> (&'static str, u64) {
    let full = dims.iter().product::<i64>().max(0) as u64 * eb;
    let sa = shard_bytes(from, dims, eb);
    let sb = shard_bytes(to, dims, eb);
    match (from, to) {
        (Spec::Replicated, Spec::Tiled(_)) => ("dynamic-slice", 0),
        (Spec::Tiled(_), Spec::Replicated) => ("all-gather", full - sa),
        (Spec::Tiled(a), Spec::Tiled(b)) => {
            if a.tiles == b.tiles {
                ("collective-permute", sa)
            } else if a.merge(b).is_some_and(|m| m.into_spec().same(to)) {
                ("dynamic-slice", 0)
            } else if a.merge(b).is_some_and(|m| m.into_spec().same(from)) {
                ("all-gather", sb.saturating_sub(sa))
            } else if a.num_tiles() == b.num_tiles() {
                let g: i64 = a
                    .tiles
                    .iter()
                    .zip(&b.tiles)
                    .filter(|(x, y)| x > y)
                    .map(|(x, y)| x / y)
                    .product();
                ("all-to-all", sa - sa / g.max(1) as u64)
            } else {
                ("all-gather + dynamic-slice (full rematerialization)", full - sa)
            }
        }
        _ => ("none", 0),
    }
}

/// The reshard points and compute collectives of a propagated module.
pub fn report(m: &Module) -> Report {
    let mut r = Report::default();
    for cid in partitioned_computations(m) {
        let c = m.comp(cid);
        let nodes: Vec<NodeIndex> = c.post_order();
        let leaves: HashMap<NodeIndex, Leaves> = nodes
            .iter()
            .map(|&n| {
                (
                    n,
                    // Unsharded is replicated, as the partitioner takes it.
                    leaves_of(
                        &c.instr(n).shape,
                        Some(
                            c.instr(n)
                                .sharding
                                .as_ref()
                                .and_then(|s| Spec::from_ir(s))
                                .unwrap_or(Spec::Replicated),
                        ),
                    ),
                )
            })
            .collect();
        let empty: Leaves = Vec::new();
        let get = |x: NodeIndex| leaves.get(&x).unwrap_or(&empty);
        for &n in &nodes {
            let i = c.instr(n);
            if matches!(i.op, Op::Plain(Opcode::Tuple) | Op::GetTupleElement { .. })
                || rules::link(&i.op).is_some()
            {
                continue;
            }
            for (slot, o) in c.operands(n).into_iter().enumerate() {
                let oi = c.instr(o);
                if oi.shape.is_tuple() {
                    continue;
                }
                let Some((req, _)) = rules::backward(c, n, slot, 3, &get) else { continue };
                let (Some(Some(want)), Some(Some(have))) = (req.first(), get(o).first()) else {
                    continue;
                };
                if want.same(have)
                    || matches!(want, Spec::Maximal(_) | Spec::Manual)
                    || matches!(have, Spec::Maximal(_) | Spec::Manual)
                {
                    continue;
                }
                let Some(dims) = spec::dims(&oi.shape) else { continue };
                let (collective, bytes) = classify(have, want, &dims, elem_bytes(&oi.shape));
                r.points.push(ReshardPoint {
                    computation: c.name.clone(),
                    user: i.name.clone(),
                    operand: oi.name.clone(),
                    slot,
                    shape: oi.shape.clone(),
                    from: have.clone(),
                    to: want.clone(),
                    collective,
                    bytes,
                });
            }
            // Partial results: a contracted or reduced dim that is tiled.
            let ops = c.operands(n);
            let tiles_of = |k: usize| {
                get(ops[k])
                    .first()
                    .cloned()
                    .flatten()
                    .and_then(|s| s.tiling().map(|t| t.tiles.clone()))
            };
            let group = match &i.op {
                Op::Dot { dims: dd, .. } => match (tiles_of(0), tiles_of(1)) {
                    (Some(a), Some(b)) => dd
                        .lhs_contracting
                        .iter()
                        .zip(&dd.rhs_contracting)
                        .map(|(&x, &y)| a[x as usize].min(b[y as usize]))
                        .product(),
                    _ => 1,
                },
                Op::Reduce { dimensions, .. } => tiles_of(0)
                    .map(|t| dimensions.iter().map(|&d| t[d as usize]).product())
                    .unwrap_or(1),
                _ => 1,
            };
            if group > 1 {
                let out = get(n).first().cloned().flatten().unwrap_or(Spec::Replicated);
                let dims =
                    i.shape.as_array().and_then(|_| spec::dims(&i.shape)).unwrap_or_default();
                let shard = shard_bytes(&out, &dims, elem_bytes(&i.shape));
                r.compute.push(ComputeCollective {
                    computation: c.name.clone(),
                    instr: i.name.clone(),
                    why: if i.op.opcode() == Opcode::Reduce {
                        "reduces a tiled dimension"
                    } else {
                        "contracts a tiled dimension"
                    },
                    group,
                    bytes: 2 * (group as u64 - 1) * shard / group as u64,
                });
            }
        }
    }
    r.points.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.user.cmp(&b.user)));
    r
}

impl Report {
    pub fn total_bytes(&self) -> u64 {
        self.points.iter().map(|p| p.bytes).sum::<u64>()
            + self.compute.iter().map(|c| c.bytes).sum::<u64>()
    }

    /// The text report: reshard points, then compute collectives, then the total.
    pub fn render(&self, mesh: Option<&Mesh>) -> String {
        let show = |s: &Spec| match mesh.and_then(|m| m.describe(s)) {
            Some(p) => p,
            None => s.to_ir().to_string(),
        };
        let mut out = String::new();
        out.push_str(&format!(
            "reshard points: {} ({} bytes per device per step)\n",
            self.points.len(),
            self.points.iter().map(|p| p.bytes).sum::<u64>()
        ));
        for p in &self.points {
            out.push_str(&format!(
                "  {} operand {} `{}` {}: {} -> {}  {} {} B/device\n",
                p.user,
                p.slot,
                p.operand,
                p.shape,
                show(&p.from),
                show(&p.to),
                p.collective,
                p.bytes
            ));
        }
        out.push_str(&format!(
            "compute collectives: {} ({} bytes per device per step)\n",
            self.compute.len(),
            self.compute.iter().map(|c| c.bytes).sum::<u64>()
        ));
        for c in &self.compute {
            out.push_str(&format!(
                "  {}: all-reduce over {} devices ({}) {} B/device\n",
                c.instr, c.group, c.why, c.bytes
            ));
        }
        out.push_str(&format!("total: {} bytes per device per step\n", self.total_bytes()));
        out
    }
}
