//! A named device mesh (JAX's `Mesh(devices.reshape(4, 2), ('data', 'model'))`), so
//! reports speak of `data`/`model` axes rather than device lists.
//!
//! The mesh's devices are `0..N` in row-major order over the axes (what JAX builds from
//! `jax.devices()`); a sharding is described as the `PartitionSpec` that produces it:
//! each data dim lists the mesh axes that tile it, major first (`P('data', None)`), and
//! the unused axes replicate.

use super::spec::{Spec, Tiling, transpose_array};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mesh {
    pub axes: Vec<(String, i64)>,
}

impl Mesh {
    /// `data=4,model=2`.
    pub fn parse(s: &str) -> Result<Mesh, hlo_ir::Diagnostic> {
        let mut axes = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, size) = part
                .split_once('=')
                .ok_or_else(|| format!("mesh axis `{part}` is not NAME=SIZE"))?;
            let size: i64 = size
                .trim()
                .parse()
                .map_err(|_| format!("mesh axis `{part}`: size is not a number"))?;
            if size < 1 || name.trim().is_empty() {
                return Err(hlo_ir::Diagnostic::from(format!(
                    "mesh axis `{part}`: needs a name and a size of at least 1"
                )));
            }
            if axes.iter().any(|(n, _): &(String, i64)| n == name.trim()) {
                return Err(hlo_ir::Diagnostic::from(format!(
                    "mesh axis `{}` is named twice",
                    name.trim()
                )));
            }
            axes.push((name.trim().to_string(), size));
        }
        if axes.is_empty() {
            return Err("the mesh has no axes (write e.g. `data=4,model=2`)".into());
        }
        Ok(Mesh { axes })
    }

    /// The module's shardings checked against this mesh's device count (and
    /// `num_partitions` against it), as located errors.
    pub fn check(&self, m: &hlo_ir::Module, src: Option<&str>) -> Vec<hlo_ir::Diagnostic> {
        let name = self.to_string();
        let mesh =
            hlo_check::sharding_devices::MeshDevices { devices: self.num_devices(), name: &name };
        hlo_check::sharding_devices::check(m, src, Some(mesh))
    }

    pub fn num_devices(&self) -> i64 {
        self.axes.iter().map(|a| a.1).product()
    }

    /// The sharding of `P(...)`: `dims[k]` lists the mesh axes (indices) tiling data dim `k`.
    pub fn sharding(&self, dims: &[Vec<usize>]) -> Spec {
        let sizes: Vec<i64> = self.axes.iter().map(|a| a.1).collect();
        let mut order: Vec<usize> = dims.iter().flatten().copied().collect();
        let unused: Vec<usize> = (0..sizes.len()).filter(|a| !order.contains(a)).collect();
        order.extend(&unused);
        let iota: Vec<i64> = (0..self.num_devices()).collect();
        let devices = transpose_array(&iota, &sizes, &order);
        let tiles = dims.iter().map(|d| d.iter().map(|&a| sizes[a]).product()).collect();
        let repl = unused.iter().map(|&a| sizes[a]).product();
        Tiling { tiles, repl, other: Vec::new(), devices }.into_spec()
    }

    /// The `PartitionSpec` that gives `s` on this mesh, e.g. `P('data', None)`; `None` when
    /// no spec does (another device order, or another device count).
    pub fn describe(&self, s: &Spec) -> Option<String> {
        let t = match s {
            Spec::Replicated => return Some("P()".into()),
            Spec::Tiled(t) if t.num_devices() == self.num_devices() && t.other.is_empty() => t,
            _ => return None,
        };
        let rank = t.rank();
        let k = self.axes.len();
        // Each axis goes to one data dim or stays unused: (rank + 1)^k assignments.
        let total = (rank + 1).checked_pow(k as u32)?;
        if total > 1 << 16 {
            return None;
        }
        for code in 0..total {
            let mut dims: Vec<Vec<usize>> = vec![Vec::new(); rank];
            let mut c = code;
            for a in 0..k {
                let slot = c % (rank + 1);
                c /= rank + 1;
                if slot < rank {
                    dims[slot].push(a);
                }
            }
            if dims
                .iter()
                .zip(&t.tiles)
                .any(|(d, &n)| d.iter().map(|&a| self.axes[a].1).product::<i64>() != n)
            {
                continue;
            }
            if self.sharding(&dims).same(s) {
                return Some(self.spec_text(&dims));
            }
        }
        None
    }

    fn spec_text(&self, dims: &[Vec<usize>]) -> String {
        let parts: Vec<String> = dims
            .iter()
            .map(|d| match d.as_slice() {
                [] => "None".to_string(),
                [a] => format!("'{}'", self.axes[*a].0),
                many => format!(
                    "({})",
                    many.iter()
                        .map(|&a| format!("'{}'", self.axes[a].0))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
            .collect();
        // A one-element spec prints as the tuple it is, as JAX's repr does.
        if parts.len() == 1 {
            format!("P({},)", parts[0])
        } else {
            format!("P({})", parts.join(", "))
        }
    }

    /// A mesh for a module's shardings when the user names none: the finest factorization
    /// of the device count that the shardings' iota lists use, axes named `x0, x1, ...`.
    pub fn infer(shardings: &[&Spec]) -> Option<Mesh> {
        let n = shardings.iter().find_map(|s| s.device_count())?;
        let mut best: Vec<i64> = vec![n];
        for s in shardings {
            let Some(t) = s.tiling() else { continue };
            if let Some(l) = super::spec::iota_form(&t.array_dims(), &t.devices)
                && l.reshape.len() > best.len()
            {
                best = l.reshape.clone();
            }
        }
        Some(Mesh { axes: best.iter().enumerate().map(|(k, &s)| (format!("x{k}"), s)).collect() })
    }
}

impl std::fmt::Display for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.axes.iter().map(|(n, s)| format!("{n}={s}")).collect();
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_specs_as_jax_builds_them() {
        let m = Mesh::parse("data=4,model=2").unwrap();
        assert_eq!(
            m.sharding(&[vec![0], vec![]]).to_ir().to_string(),
            "{devices=[4,1,2]<=[8] last_tile_dim_replicate}"
        );
        assert_eq!(
            m.sharding(&[vec![1], vec![]]).to_ir().to_string(),
            "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"
        );
        assert_eq!(m.sharding(&[vec![], vec![0, 1]]).to_ir().to_string(), "{devices=[1,8]<=[8]}");
        assert_eq!(m.sharding(&[vec![0], vec![1]]).to_ir().to_string(), "{devices=[4,2]<=[8]}");
        assert_eq!(
            m.describe(&m.sharding(&[vec![1], vec![]])).as_deref(),
            Some("P('model', None)")
        );
        assert_eq!(
            m.describe(&m.sharding(&[vec![], vec![1]])).as_deref(),
            Some("P(None, 'model')")
        );
        assert_eq!(
            m.describe(&m.sharding(&[vec![0, 1]])).as_deref(),
            Some("P(('data', 'model'),)")
        );
        assert_eq!(m.describe(&Spec::Replicated).as_deref(), Some("P()"));
        assert!(Mesh::parse("data=4,data=2").is_err());
    }
}
