//! Module-level validation of shardings, beyond what the parser and verifier check on
//! one instruction (tile shape vs device list, duplicates, rank): every sharding must
//! span the module's devices (`num_partitions`, or the mesh the user named, or else the
//! device count of the first tiled sharding), and a maximal device must exist.

use hlo_ir::verify::attr_span;
use hlo_ir::{Diagnostic, Module};

use super::Spec;
use super::mesh::Mesh;

/// The module's device count: `num_partitions`, else the mesh's, else the first tiled
/// sharding's.
pub fn device_count(m: &Module, mesh: Option<&Mesh>) -> Option<i64> {
    if let Some(n) = m.header.num_partitions.filter(|&n| n > 1) {
        return Some(n);
    }
    if let Some(mesh) = mesh {
        return Some(mesh.num_devices());
    }
    m.comps().iter().flat_map(|c| c.instrs()).find_map(|i| {
        i.sharding.as_ref().and_then(|s| Spec::from_ir(s)).and_then(|s| s.device_count())
    })
}

/// One located error per sharding that does not fit the module's devices.
pub fn check(m: &Module, src: Option<&str>, mesh: Option<&Mesh>) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let Some(n) = device_count(m, mesh) else { return out };
    let whence = if m.header.num_partitions.filter(|&n| n > 1).is_some() {
        format!("num_partitions={n}")
    } else if let Some(mesh) = mesh {
        format!("the mesh {mesh} ({n} devices)")
    } else {
        format!("the module's other shardings ({n} devices)")
    };
    if let (Some(mesh), Some(p)) = (mesh, m.header.num_partitions.filter(|&p| p > 1))
        && mesh.num_devices() != p
    {
        out.push(
            Diagnostic::error(
                None,
                format!(
                    "the mesh {mesh} has {} devices but the module has num_partitions={p}",
                    mesh.num_devices()
                ),
            )
            .with_help("give a mesh whose axis sizes multiply to num_partitions"),
        );
    }
    for c in m.comps() {
        for i in c.instrs() {
            let Some(s) = i.sharding.as_ref().and_then(|s| Spec::from_ir(s)) else { continue };
            let leaves = match &s {
                Spec::Tuple(v) => v.clone(),
                s => vec![s.clone()],
            };
            for l in leaves {
                let bad = match &l {
                    Spec::Tiled(t) if t.num_devices() != n => Some(format!(
                        "sharding of `{}` spans {} devices, but {whence}",
                        i.name,
                        t.num_devices()
                    )),
                    Spec::Maximal(d) if *d < 0 || *d >= n => Some(format!(
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
