//! Shardings (GSPMD `HloSharding`) and iota device lists.

use std::fmt::{self, Write};

use crate::metadata::Metadata;

/// `[d0,...]<=[r0,...]T(p0,...)`: the devices `0..N` reshaped to `reshape`, transposed by
/// `transpose`, reshaped to `dims`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IotaList {
    pub dims: Vec<i64>,
    pub reshape: Vec<i64>,
    /// Empty when no `T(...)` is written (identity).
    pub transpose: Vec<i64>,
}

impl IotaList {
    /// Expands to the explicit row-major device list.
    pub fn devices(&self) -> Vec<i64> {
        let n: i64 = self.reshape.iter().product();
        if self.transpose.is_empty() {
            return (0..n).collect();
        }
        let rank = self.reshape.len();
        // strides of the reshaped array
        let mut strides = vec![1i64; rank];
        for i in (0..rank.saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * self.reshape[i + 1];
        }
        let tdims: Vec<i64> = self.transpose.iter().map(|&p| self.reshape[p as usize]).collect();
        let mut out = Vec::with_capacity(n as usize);
        let mut idx = vec![0i64; rank];
        for _ in 0..n {
            out.push(idx.iter().zip(&self.transpose).map(|(&i, &p)| i * strides[p as usize]).sum());
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < tdims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        out
    }
}

impl fmt::Display for IotaList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}]<=[{}]", join(&self.dims), join(&self.reshape))?;
        if !self.transpose.is_empty() {
            write!(f, "T({})", join(&self.transpose))?;
        }
        Ok(())
    }
}

pub(crate) fn join(v: &[i64]) -> String {
    let mut s = String::new();
    for (i, x) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{x}");
    }
    s
}

/// Which devices hold which tile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TileAssignment {
    /// `[2,2]0,2,1,3`: tile-grid dims and the device of each tile, row-major.
    Explicit {
        dims: Vec<i64>,
        devices: Vec<i64>,
    },
    Iota(IotaList),
}

impl TileAssignment {
    pub fn dims(&self) -> &[i64] {
        match self {
            TileAssignment::Explicit { dims, .. } | TileAssignment::Iota(IotaList { dims, .. }) => {
                dims
            }
        }
    }
    pub fn devices(&self) -> Vec<i64> {
        match self {
            TileAssignment::Explicit { devices, .. } => devices.clone(),
            TileAssignment::Iota(l) => l.devices(),
        }
    }
}

/// Kinds of the trailing subgroup dimensions of `last_tile_dims={...}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubgroupKind {
    Replicated,
    Manual,
    Maximal,
    Unreduced,
}

impl SubgroupKind {
    pub const ALL: [(SubgroupKind, &'static str); 4] = [
        (SubgroupKind::Replicated, "replicated"),
        (SubgroupKind::Manual, "manual"),
        (SubgroupKind::Maximal, "maximal"),
        (SubgroupKind::Unreduced, "unreduced"),
    ];
    pub fn name(self) -> &'static str {
        SubgroupKind::ALL.iter().find(|(k, _)| *k == self).map(|(_, n)| *n).unwrap_or("replicated")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShardingKind {
    Replicated,
    Manual,
    Unknown,
    Unreduced,
    Maximal {
        device: i64,
    },
    Tiled {
        tiles: TileAssignment,
        /// `last_tile_dim_replicate`: the last tile dim enumerates replicas.
        last_tile_dim_replicate: bool,
        /// `last_tile_dims={manual, ...}`: kinds of the trailing subgroup dims.
        last_tile_dims: Vec<SubgroupKind>,
    },
}

/// One array's sharding.
#[derive(Debug, Clone, PartialEq)]
pub struct SingleSharding {
    pub kind: ShardingKind,
    /// `shard_as N` / `shard_like N`.
    pub shard_group: Option<(ShardGroup, i64)>,
    pub metadata: Vec<Metadata>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardGroup {
    As,
    Like,
}

impl SingleSharding {
    pub fn new(kind: ShardingKind) -> SingleSharding {
        SingleSharding { kind, shard_group: None, metadata: Vec::new() }
    }
    /// Rank of the data this sharding tiles (tile dims minus subgroup dims); `None` if not tiled.
    pub fn data_rank(&self) -> Option<usize> {
        match &self.kind {
            ShardingKind::Tiled { tiles, last_tile_dim_replicate, last_tile_dims } => Some(
                tiles.dims().len() - usize::from(*last_tile_dim_replicate) - last_tile_dims.len(),
            ),
            _ => None,
        }
    }
}

/// The `sharding=` attribute: one sharding, or one per tuple leaf.
#[derive(Debug, Clone, PartialEq)]
pub enum Sharding {
    Single(SingleSharding),
    Tuple(Vec<SingleSharding>),
}

impl fmt::Display for SingleSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        match &self.kind {
            ShardingKind::Replicated => f.write_str("replicated")?,
            ShardingKind::Manual => f.write_str("manual")?,
            ShardingKind::Unknown => f.write_str("unknown")?,
            ShardingKind::Unreduced => f.write_str("unreduced")?,
            ShardingKind::Maximal { device } => write!(f, "maximal device={device}")?,
            ShardingKind::Tiled { tiles, last_tile_dim_replicate, last_tile_dims } => {
                match tiles {
                    TileAssignment::Explicit { dims, devices } => {
                        write!(f, "devices=[{}]{}", join(dims), join(devices))?
                    }
                    TileAssignment::Iota(l) => write!(f, "devices={l}")?,
                }
                if *last_tile_dim_replicate {
                    f.write_str(" last_tile_dim_replicate")?;
                }
                if !last_tile_dims.is_empty() {
                    let names: Vec<_> = last_tile_dims.iter().map(|k| k.name()).collect();
                    write!(f, " last_tile_dims={{{}}}", names.join(", "))?;
                }
            }
        }
        if let Some((g, n)) = self.shard_group {
            let word = if g == ShardGroup::As { "shard_as" } else { "shard_like" };
            write!(f, " {word} {n}")?;
        }
        match self.metadata.as_slice() {
            [] => {}
            [m] => write!(f, " metadata={m}")?,
            ms => {
                f.write_str(" metadata={")?;
                for (i, m) in ms.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{m}")?;
                }
                f.write_str("}")?;
            }
        }
        f.write_str("}")
    }
}

impl fmt::Display for Sharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharding::Single(s) => write!(f, "{s}"),
            Sharding::Tuple(v) => {
                f.write_str("{")?;
                for (i, s) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{s}")?;
                }
                f.write_str("}")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iota_devices() {
        let l = IotaList { dims: vec![4, 2], reshape: vec![2, 4], transpose: vec![1, 0] };
        assert_eq!(l.devices(), vec![0, 4, 1, 5, 2, 6, 3, 7]);
        let l = IotaList { dims: vec![8], reshape: vec![8], transpose: vec![] };
        assert_eq!(l.devices(), (0..8).collect::<Vec<_>>());
        assert_eq!(l.to_string(), "[8]<=[8]");
    }
}
