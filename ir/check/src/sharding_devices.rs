//! Module-level validation of shardings, beyond what the parser and verifier check on
//! one instruction (tile shape vs device list, duplicates, rank): every sharding must
//! span exactly the module's devices `0..N-1`, and a maximal device must exist.
//!
//! As in XLA, `N` is known when the module says `num_partitions` (or the user named a
//! mesh): [`check`] then holds every sharding to it. Without either, a sharding may name
//! any distinct devices (XLA's parser and verifier accept `{devices=[2]4,5}`; sharding
//! propagation works on such modules); the partitioner, which needs one device set, asks
//! [`check_partitionable`], which takes `N` from the first tiled sharding.

use hlo_ir::sharding::{Sharding, ShardingKind, SingleSharding};
use hlo_ir::verify::attr_span;
use hlo_ir::{Diagnostic, Module};

/// A device mesh named outside the module (`--mesh`): its device count and how it prints.
#[derive(Debug, Clone, Copy)]
pub struct MeshDevices<'a> {
    /// How many devices the mesh has (the product of its axis sizes).
    pub devices: i64,
    /// The mesh as the user wrote it, for messages.
    pub name: &'a str,
}

/// What one sharding leaf asks of the devices.
enum Leaf {
    /// A tiled sharding over these devices.
    Tiled(Vec<i64>),
    /// Everything on this one device.
    Maximal(i64),
}

fn leaf(s: &SingleSharding) -> Option<Leaf> {
    match &s.kind {
        ShardingKind::Tiled { tiles, .. } => Some(Leaf::Tiled(tiles.devices())),
        ShardingKind::Maximal { device } => Some(Leaf::Maximal(*device)),
        _ => None,
    }
}

fn leaves(s: &Sharding) -> Vec<&SingleSharding> {
    match s {
        Sharding::Single(s) => vec![s],
        Sharding::Tuple(v) => v.iter().collect(),
    }
}

/// The module's device count as the module or the user states it: `num_partitions`, else
/// the mesh's.
pub fn stated_device_count(m: &Module, mesh: Option<MeshDevices<'_>>) -> Option<i64> {
    m.header.num_partitions.filter(|&n| n > 1).or(mesh.map(|mesh| mesh.devices))
}

/// The module's device count: as stated, else the first tiled sharding's.
pub fn device_count(m: &Module, mesh: Option<MeshDevices<'_>>) -> Option<i64> {
    if let Some(n) = stated_device_count(m, mesh) {
        return Some(n);
    }
    m.comps().iter().flat_map(|c| c.instrs()).find_map(|i| {
        let s = i.sharding.as_ref()?;
        leaves(s).into_iter().find_map(|l| match leaf(l) {
            Some(Leaf::Tiled(d)) => Some(d.len() as i64),
            _ => None,
        })
    })
}

/// One located error per sharding that does not fit the module's stated devices
/// (`num_partitions` or the mesh); nothing to check when neither states them.
pub fn check(m: &Module, src: Option<&str>, mesh: Option<MeshDevices<'_>>) -> Vec<Diagnostic> {
    if stated_device_count(m, mesh).is_none() {
        return Vec::new();
    }
    check_partitionable(m, src, mesh)
}

/// One located error per sharding that does not span the devices the module is
/// partitioned for ([`device_count`]: as stated, else the first tiled sharding's).
pub fn check_partitionable(
    m: &Module,
    src: Option<&str>,
    mesh: Option<MeshDevices<'_>>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let Some(n) = device_count(m, mesh) else { return out };
    let whence = if m.header.num_partitions.filter(|&n| n > 1).is_some() {
        format!("num_partitions={n}")
    } else if let Some(mesh) = mesh {
        format!("the mesh {} ({n} devices)", mesh.name)
    } else {
        format!("the module's other shardings ({n} devices)")
    };
    if let (Some(mesh), Some(p)) = (mesh, m.header.num_partitions.filter(|&p| p > 1))
        && mesh.devices != p
    {
        out.push(
            Diagnostic::error(
                None,
                format!(
                    "the mesh {} has {} devices but the module has num_partitions={p}",
                    mesh.name, mesh.devices
                ),
            )
            .with_help("give a mesh whose axis sizes multiply to num_partitions"),
        );
    }
    for c in m.comps() {
        for i in c.instrs() {
            let Some(s) = i.sharding.as_ref() else { continue };
            for l in leaves(s) {
                let bad = match leaf(l) {
                    Some(Leaf::Tiled(d)) if d.len() as i64 != n => Some(format!(
                        "sharding of `{}` spans {} devices, but {whence}",
                        i.name,
                        d.len()
                    )),
                    Some(Leaf::Tiled(d)) if d.iter().any(|&d| d >= n) => Some(format!(
                        "sharding of `{}` names device {}, but {whence} (devices 0..{})",
                        i.name,
                        d.iter().find(|&&d| d >= n).copied().unwrap_or(n),
                        n - 1
                    )),
                    Some(Leaf::Maximal(d)) if d < 0 || d >= n => Some(format!(
                        "sharding of `{}` places it on device {d}, but {whence} (devices 0..{})",
                        i.name,
                        n - 1
                    )),
                    _ => None,
                };
                if let Some(msg) = bad {
                    out.push(
                        Diagnostic::error(attr_span(src, i, "sharding"), msg)
                            .with_label("device count does not match")
                            .with_help("every sharding of a module spans the same devices; write the tile shape for the whole mesh"),
                    );
                    break;
                }
            }
        }
    }
    out
}
