//! Module-level validation of shardings, beyond what the parser and verifier check on
//! one instruction (tile shape vs device list, duplicates, rank): every sharding must
//! span the module's devices (`num_partitions`, or the mesh the user named, or else the
//! device count of the first tiled sharding), and a maximal device must exist.

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
    /// A tiled sharding over this many devices.
    Tiled(i64),
    /// Everything on this one device.
    Maximal(i64),
}

fn leaf(s: &SingleSharding) -> Option<Leaf> {
    match &s.kind {
        ShardingKind::Tiled { tiles, .. } => Some(Leaf::Tiled(tiles.devices().len() as i64)),
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

/// The module's device count: `num_partitions`, else the mesh's, else the first tiled
/// sharding's.
pub fn device_count(m: &Module, mesh: Option<MeshDevices<'_>>) -> Option<i64> {
    if let Some(n) = m.header.num_partitions.filter(|&n| n > 1) {
        return Some(n);
    }
    if let Some(mesh) = mesh {
        return Some(mesh.devices);
    }
    m.comps().iter().flat_map(|c| c.instrs()).find_map(|i| {
        let s = i.sharding.as_ref()?;
        leaves(s).into_iter().find_map(|l| match leaf(l) {
            Some(Leaf::Tiled(n)) => Some(n),
            _ => None,
        })
    })
}

/// One located error per sharding that does not fit the module's devices.
pub fn check(m: &Module, src: Option<&str>, mesh: Option<MeshDevices<'_>>) -> Vec<Diagnostic> {
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
                    Some(Leaf::Tiled(d)) if d != n => {
                        Some(format!("sharding of `{}` spans {d} devices, but {whence}", i.name))
                    }
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
