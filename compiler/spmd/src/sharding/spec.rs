//! The semantic form of a sharding (GSPMD's `HloSharding`) and the operations the
//! propagation rules compose: partial replication of data dimensions, transposition,
//! insertion and removal of untiled dimensions, reshape, reversal, merging of two partial
//! shardings, and the comparisons that decide whether a candidate is an improvement.
//!
//! A [`Tiling`] keeps its device assignment as an explicit row-major array over
//! `tiles ++ [repl] ++ other subgroup sizes`, so every operation is an array permutation
//! and no rule needs to care how the text wrote the list. [`Spec::to_ir`] prints it back
//! the way XLA does: an iota list (`[4,2]<=[8]`, `[2,1,4]<=[4,2]T(1,0)`) whenever the
//! array is one, else an explicit list. Equality ([`Spec::same`]) ignores the printed
//! form and the order of devices within a replication group.

use hlo_ir::sharding::{IotaList, ShardingKind, SingleSharding, SubgroupKind, TileAssignment};
use hlo_ir::{Shape, Sharding};

/// A tiled sharding, possibly partially replicated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiling {
    /// Tile count of each data dimension.
    pub tiles: Vec<i64>,
    /// Devices holding each tile (`last_tile_dim_replicate`); 1 when fully tiled.
    pub repl: i64,
    /// Non-replicated subgroup dimensions (`last_tile_dims={manual, ...}`).
    pub other: Vec<(SubgroupKind, i64)>,
    /// Row-major over `tiles ++ [repl] ++ other sizes`.
    pub devices: Vec<i64>,
}

/// One array's sharding, or a tuple's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Spec {
    Replicated,
    Manual,
    Maximal(i64),
    Tiled(Tiling),
    Tuple(Vec<Spec>),
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Row-major strides of `dims`.
fn strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1];
    }
    s
}

/// `a` (row-major over `dims`) transposed: result dim `k` is input dim `perm[k]`.
pub fn transpose_array(a: &[i64], dims: &[i64], perm: &[usize]) -> Vec<i64> {
    let st = strides(dims);
    let out_dims: Vec<i64> = perm.iter().map(|&p| dims[p]).collect();
    let mut out = Vec::with_capacity(a.len());
    let mut idx = vec![0i64; dims.len()];
    for _ in 0..a.len() {
        let off: i64 = idx.iter().zip(perm).map(|(&i, &p)| i * st[p]).sum();
        out.push(a[off as usize]);
        for d in (0..out_dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < out_dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    out
}

impl Tiling {
    /// The array shape of `devices`.
    pub fn array_dims(&self) -> Vec<i64> {
        let mut d = self.tiles.clone();
        d.push(self.repl);
        d.extend(self.other.iter().map(|o| o.1));
        d
    }
    pub fn rank(&self) -> usize {
        self.tiles.len()
    }
    pub fn num_tiles(&self) -> i64 {
        self.tiles.iter().product()
    }
    pub fn num_devices(&self) -> i64 {
        self.devices.len() as i64
    }
    /// A tiling, simplified: all-1 tiles with no other subgroups is replication.
    pub fn into_spec(self) -> Spec {
        if self.other.is_empty() && self.tiles.iter().all(|&t| t == 1) {
            Spec::Replicated
        } else {
            Spec::Tiled(self)
        }
    }
    /// Moves the tiling of data dimensions `dims` into the replication group (their tile
    /// count becomes 1). The replicated dims' devices become the major part of the group.
    pub fn partially_replicate(&self, dims: &[usize]) -> Tiling {
        let r = self.rank();
        let ad = self.array_dims();
        // Data dims keep their place (the moved ones leave a size-1 dim behind): gather
        // the moved ones into the replication group by transposing them before it.
        let moved: Vec<usize> = dims.iter().copied().filter(|&d| self.tiles[d] > 1).collect();
        if moved.is_empty() {
            return self.clone();
        }
        let mut order: Vec<usize> = (0..r).filter(|d| !moved.contains(d)).collect();
        order.extend(moved.iter().copied());
        order.push(r);
        order.extend((0..self.other.len()).map(|k| r + 1 + k));
        let devices = transpose_array(&self.devices, &ad, &order);
        let mut tiles = self.tiles.clone();
        let mut group = self.repl;
        for &d in &moved {
            group *= tiles[d];
            tiles[d] = 1;
        }
        Tiling { tiles, repl: group, other: self.other.clone(), devices }
    }
    /// Data dimension `k` of the result is dimension `perm[k]` of `self`.
    pub fn transpose(&self, perm: &[usize]) -> Tiling {
        let r = self.rank();
        if perm.iter().enumerate().all(|(k, &p)| k == p) {
            return self.clone();
        }
        let mut full: Vec<usize> = perm.to_vec();
        full.extend(r..r + 1 + self.other.len());
        Tiling {
            tiles: perm.iter().map(|&p| self.tiles[p]).collect(),
            repl: self.repl,
            other: self.other.clone(),
            devices: transpose_array(&self.devices, &self.array_dims(), &full),
        }
    }
    /// Removes data dimensions `dims`, which must have one tile each.
    pub fn remove_dims(&self, dims: &[usize]) -> Option<Tiling> {
        if dims.iter().any(|&d| self.tiles[d] != 1) {
            return None;
        }
        let tiles = self
            .tiles
            .iter()
            .enumerate()
            .filter(|(i, _)| !dims.contains(i))
            .map(|(_, &t)| t)
            .collect();
        Some(Tiling { tiles, ..self.clone() })
    }
    /// Inserts untiled data dimensions so that they sit at `positions` of the result.
    pub fn insert_dims(&self, positions: &[usize]) -> Tiling {
        let n = self.rank() + positions.len();
        let mut it = self.tiles.iter();
        let tiles = (0..n)
            .map(|k| if positions.contains(&k) { 1 } else { *it.next().unwrap_or(&1) })
            .collect();
        Tiling { tiles, ..self.clone() }
    }
    /// Reverses the device order along data dimensions `dims` (a `reverse`'s sharding).
    pub fn reverse(&self, dims: &[usize]) -> Tiling {
        let ad = self.array_dims();
        let st = strides(&ad);
        let mut devices = vec![0; self.devices.len()];
        let mut idx = vec![0i64; ad.len()];
        for slot in devices.iter_mut() {
            let off: i64 = idx
                .iter()
                .enumerate()
                .map(|(k, &i)| if dims.contains(&k) { (ad[k] - 1 - i) * st[k] } else { i * st[k] })
                .sum();
            *slot = self.devices[off as usize];
            for d in (0..ad.len()).rev() {
                idx[d] += 1;
                if idx[d] < ad[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Tiling { devices, ..self.clone() }
    }
    /// GSPMD's `MergeShardingIfCompatible`: one sharding that refines both partial
    /// shardings (each tiled dim keeps its tiling; a dim tiled by both must agree), with
    /// every device's tile consistent with both. `None` when no such sharding exists.
    pub fn merge(&self, other: &Tiling) -> Option<Tiling> {
        if self.rank() != other.rank()
            || !self.other.is_empty()
            || !other.other.is_empty()
            || self.devices.len() != other.devices.len()
        {
            return None;
        }
        let tiles: Vec<i64> = self
            .tiles
            .iter()
            .zip(&other.tiles)
            .map(|(&a, &b)| if a > 1 && b > 1 && a != b { -1 } else { a.max(b) })
            .collect();
        if tiles.contains(&-1) {
            return None;
        }
        let total: i64 = tiles.iter().product();
        let n = self.devices.len() as i64;
        if total > n || n % total != 0 {
            return None;
        }
        // Where each device sits in `other`, looked up by id (ids are distinct but need
        // not be 0..n, and may be large: sorted pairs, not a table indexed by id), and
        // each flat position's tile index, by arithmetic.
        let mut pos_b: Vec<(i64, usize)> =
            other.devices.iter().enumerate().map(|(p, &d)| (d, p)).collect();
        pos_b.sort_unstable();
        let (per_a, per_b) = (self.repl.max(1) as usize, other.repl.max(1) as usize);
        let (sa, sb, st) = (strides(&self.tiles), strides(&other.tiles), strides(&tiles));
        let mut groups: Vec<Vec<i64>> = vec![Vec::new(); total as usize];
        for (p, &d) in self.devices.iter().enumerate() {
            let q = pos_b[pos_b.binary_search_by_key(&d, |&(id, _)| id).ok()?].1;
            let (ta, tb) = ((p / per_a) as i64, (q / per_b) as i64);
            let mut flat = 0;
            for k in 0..tiles.len() {
                let (na, nb) = (self.tiles[k], other.tiles[k]);
                let (ia, ib) = ((ta / sa[k]) % na, (tb / sb[k]) % nb);
                if na > 1 && nb > 1 && ia != ib {
                    return None;
                }
                flat += if na > 1 { ia } else { ib } * st[k];
            }
            groups[flat as usize].push(d);
        }
        let per = (n / total) as usize;
        if groups.iter().any(|g| g.len() != per) {
            return None;
        }
        Some(Tiling { tiles, repl: per as i64, other: Vec::new(), devices: groups.concat() })
    }
    /// GSPMD's `ReshapeSharding`: the sharding of `reshape(x)` (dims `to`) given `x`'s
    /// (dims `from`). Keeps tiling through added/removed size-1 dims, splits (the tiling
    /// lands on the major factor), merges where only the most-major merged dim is tiled,
    /// and reshapes of untiled dims; whatever cannot follow becomes partial replication.
    /// `None` when nothing of the tiling survives.
    pub fn reshape(&self, from: &[i64], to: &[i64]) -> Option<Tiling> {
        if from.len() != self.rank() || !self.other.is_empty() {
            return None;
        }
        let mut src: Vec<i64> = from.iter().rev().copied().collect();
        let mut src_t: Vec<i64> = self.tiles.iter().rev().copied().collect();
        let mut dst: Vec<i64> = to.iter().rev().copied().collect();
        let mut out: Vec<i64> = Vec::new();
        while !src.is_empty() || !dst.is_empty() {
            let Some(t) = dst.pop() else {
                if src_t.iter().product::<i64>() != 1 {
                    return None;
                }
                break;
            };
            let (s, p) = match (src.pop(), src_t.pop()) {
                (Some(s), Some(p)) => (s, p),
                _ => (1, 1),
            };
            if s == t {
                out.push(p);
            } else if t == 1 {
                out.push(1);
                src.push(s);
                src_t.push(p);
            } else if s == 1 {
                if p > 1 {
                    return None;
                }
                dst.push(t);
            } else if s > t {
                if s % t != 0 {
                    return None;
                }
                if t % p == 0 {
                    out.push(p);
                    src.push(s / t);
                    src_t.push(1);
                } else if p % t == 0 {
                    out.push(t);
                    src.push(s / t);
                    src_t.push(p / t);
                } else {
                    out.push(gcd(t, p));
                    break;
                }
            } else {
                // Merge `s` into the next source dim; the merged tile is contiguous only
                // when the next dim is untiled or this one is tiled down to single rows.
                if s % p != 0 || src.is_empty() {
                    return None;
                }
                if *src_t.last().unwrap_or(&1) != 1 && s != p {
                    break;
                }
                *src.last_mut().unwrap() *= s;
                *src_t.last_mut().unwrap() *= p;
                dst.push(t);
            }
        }
        while out.len() < to.len() {
            out.push(1);
        }
        out.truncate(to.len());
        let product: i64 = out.iter().product();
        if product == 1 || self.num_tiles() % product != 0 {
            return None;
        }
        // Row-major flat order is unchanged: the untaken (minor) tiles join replication.
        Some(Tiling {
            tiles: out,
            repl: self.repl * (self.num_tiles() / product),
            other: Vec::new(),
            devices: self.devices.clone(),
        })
    }
    /// The tile index of each device: `tile_of[device] = multi-index over tiles`.
    pub fn tile_index_of(&self) -> Vec<(i64, Vec<i64>)> {
        let ad = self.array_dims();
        let mut out = Vec::with_capacity(self.devices.len());
        let mut idx = vec![0i64; ad.len()];
        for &d in &self.devices {
            out.push((d, idx[..self.rank()].to_vec()));
            for k in (0..ad.len()).rev() {
                idx[k] += 1;
                if idx[k] < ad[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        out
    }
    /// Devices grouped per tile, each group sorted (the order within a replication group
    /// does not change what any device holds).
    fn groups(&self) -> Vec<Vec<i64>> {
        let per = (self.repl * self.other.iter().map(|o| o.1).product::<i64>()) as usize;
        self.devices
            .chunks(per.max(1))
            .map(|c| {
                let mut v = c.to_vec();
                v.sort_unstable();
                v
            })
            .collect()
    }
    /// Each device's `[start, limit)` per dimension of an array of `dims` (GSPMD's uneven
    /// tiling: chunks of `ceil(dim / tiles)`, the last ones short or empty).
    pub fn shard_bounds(&self, dims: &[i64]) -> Vec<(i64, Vec<(i64, i64)>)> {
        let mut v: Vec<(i64, Vec<(i64, i64)>)> = self
            .tile_index_of()
            .into_iter()
            .map(|(d, idx)| {
                let b = idx
                    .iter()
                    .zip(dims)
                    .zip(&self.tiles)
                    .map(|((&i, &n), &t)| {
                        let chunk = (n + t - 1) / t;
                        ((i * chunk).min(n), ((i + 1) * chunk).min(n))
                    })
                    .collect();
                (d, b)
            })
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }
    /// The per-device shard shape of an array of `dims` (the padded chunk).
    pub fn shard_dims(&self, dims: &[i64]) -> Vec<i64> {
        dims.iter().zip(&self.tiles).map(|(&n, &t)| (n + t - 1) / t).collect()
    }
}

impl Spec {
    /// The semantic form of a parsed sharding (`unknown` is no sharding: `None`).
    pub fn from_ir(s: &Sharding) -> Option<Spec> {
        match s {
            Sharding::Single(s) => from_single(s),
            Sharding::Tuple(v) => Some(Spec::Tuple(
                v.iter().map(|s| from_single(s).unwrap_or(Spec::Replicated)).collect(),
            )),
        }
    }
    /// The sharding as XLA prints it (iota lists whenever the device array is one).
    pub fn to_ir(&self) -> Sharding {
        match self {
            Spec::Tuple(v) => Sharding::Tuple(v.iter().map(to_single).collect()),
            s => Sharding::Single(to_single(s)),
        }
    }
    /// Semantic equality: same tiles, same devices per tile.
    pub fn same(&self, other: &Spec) -> bool {
        match (self, other) {
            (Spec::Tiled(a), Spec::Tiled(b)) => {
                a.tiles == b.tiles && a.other == b.other && a.groups() == b.groups()
            }
            (Spec::Tuple(a), Spec::Tuple(b)) => {
                a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.same(y))
            }
            (a, b) => a == b,
        }
    }
    pub fn tiling(&self) -> Option<&Tiling> {
        match self {
            Spec::Tiled(t) => Some(t),
            _ => None,
        }
    }
    /// Data tiles (1 for replicated; tuples: the product over leaves, for ranking only).
    pub fn num_tiles(&self) -> i64 {
        match self {
            Spec::Tiled(t) => t.num_tiles(),
            Spec::Tuple(v) => v.iter().map(Spec::num_tiles).product(),
            _ => 1,
        }
    }
    /// The leaf of a tuple sharding at `index`, or the sharding itself for arrays.
    pub fn element(&self, index: usize) -> Option<&Spec> {
        match self {
            Spec::Tuple(v) => v.get(index),
            _ => None,
        }
    }
    /// The tuple sharding for `shape` with every leaf `self` (non-tuples return themselves).
    pub fn for_shape(&self, shape: &Shape) -> Spec {
        match shape {
            Shape::Tuple(t) => Spec::Tuple(t.iter().map(|s| self.for_shape(s)).collect()),
            _ => self.clone(),
        }
    }
    /// The devices this sharding spans (`None` for replicated and manual: any count).
    pub fn device_count(&self) -> Option<i64> {
        match self {
            Spec::Tiled(t) => Some(t.num_devices()),
            Spec::Tuple(v) => v.iter().find_map(Spec::device_count),
            _ => None,
        }
    }
}

fn from_single(s: &SingleSharding) -> Option<Spec> {
    Some(match &s.kind {
        ShardingKind::Replicated | ShardingKind::Unreduced => Spec::Replicated,
        ShardingKind::Manual => Spec::Manual,
        ShardingKind::Unknown => return None,
        ShardingKind::Maximal { device } => Spec::Maximal(*device),
        ShardingKind::Tiled { tiles, last_tile_dim_replicate, last_tile_dims } => {
            let dims = tiles.dims().to_vec();
            let devices = tiles.devices();
            let nsub = usize::from(*last_tile_dim_replicate) + last_tile_dims.len();
            let rank = dims.len().saturating_sub(nsub);
            let mut kinds: Vec<SubgroupKind> = Vec::new();
            if *last_tile_dim_replicate {
                kinds.push(SubgroupKind::Replicated);
            }
            kinds.extend(last_tile_dims.iter().copied());
            // Canonical array order: data dims, one replication dim, then the other
            // subgroup dims in the order written.
            let mut order: Vec<usize> = (0..rank).collect();
            order.extend(
                kinds
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| **k == SubgroupKind::Replicated)
                    .map(|(i, _)| rank + i),
            );
            order.extend(
                kinds
                    .iter()
                    .enumerate()
                    .filter(|(_, k)| **k != SubgroupKind::Replicated)
                    .map(|(i, _)| rank + i),
            );
            let devices = transpose_array(&devices, &dims, &order);
            let repl: i64 = kinds
                .iter()
                .zip(&dims[rank..])
                .filter(|(k, _)| **k == SubgroupKind::Replicated)
                .map(|(_, d)| *d)
                .product();
            let other = kinds
                .iter()
                .zip(&dims[rank..])
                .filter(|(k, _)| **k != SubgroupKind::Replicated)
                .map(|(k, d)| (*k, *d))
                .collect();
            Tiling { tiles: dims[..rank].to_vec(), repl, other, devices }.into_spec()
        }
    })
}

fn to_single(s: &Spec) -> SingleSharding {
    let kind = match s {
        Spec::Replicated | Spec::Tuple(_) => ShardingKind::Replicated,
        Spec::Manual => ShardingKind::Manual,
        Spec::Maximal(d) => ShardingKind::Maximal { device: *d },
        Spec::Tiled(t) => {
            let mut dims = t.tiles.clone();
            let mut devices = t.devices.clone();
            let mut kinds = Vec::new();
            if t.other.is_empty() {
                if t.repl > 1 {
                    dims.push(t.repl);
                }
            } else {
                // Subgroups print in the order XLA keeps them: the others, then replication.
                let ad = t.array_dims();
                let r = t.rank();
                let mut order: Vec<usize> = (0..r).collect();
                order.extend((0..t.other.len()).map(|k| r + 1 + k));
                if t.repl > 1 {
                    order.push(r);
                }
                if t.repl == 1 {
                    // Drop the size-1 replication dim from the array: same flat order.
                    order.push(r);
                }
                devices = transpose_array(&devices, &ad, &order);
                dims.extend(t.other.iter().map(|o| o.1));
                kinds.extend(t.other.iter().map(|o| o.0));
                if t.repl > 1 {
                    dims.push(t.repl);
                    kinds.push(SubgroupKind::Replicated);
                }
            }
            let tiles = match iota_form(&dims, &devices) {
                Some(l) => TileAssignment::Iota(l),
                None => TileAssignment::Explicit { dims, devices },
            };
            ShardingKind::Tiled {
                tiles,
                last_tile_dim_replicate: t.other.is_empty() && t.repl > 1,
                last_tile_dims: kinds,
            }
        }
    };
    SingleSharding::new(kind)
}

/// The iota form of a device array, if it has one: `devices` equals `0..N` reshaped to
/// `reshape`, transposed by `transpose`, reshaped to `dims`. The reshape is the coarsest
/// one (adjacent device axes that stay adjacent are merged), as XLA prints it.
pub fn iota_form(dims: &[i64], devices: &[i64]) -> Option<IotaList> {
    let n = devices.len();
    // pos[d] = where device d sits in the flat array.
    let mut pos = vec![usize::MAX; n];
    for (p, &d) in devices.iter().enumerate() {
        let d = usize::try_from(d).ok().filter(|&d| d < n)?;
        if pos[d] != usize::MAX {
            return None;
        }
        pos[d] = p;
    }
    if n == 0 || pos[0] != 0 {
        return None;
    }
    // Device-minor-first axes (size, position stride).
    let mut axes: Vec<(usize, usize)> = Vec::new();
    let mut unit = 1usize;
    while unit < n {
        let stride = pos[unit];
        // The longest run of devices unit*j sitting at j*stride is one axis.
        let mut m = 1usize;
        while unit * m < n && pos[unit * m] == m * stride {
            m += 1;
        }
        while m > 1 && !n.is_multiple_of(unit * m) {
            m -= 1;
        }
        if m < 2 {
            return None;
        }
        axes.push((m, stride));
        unit *= m;
    }
    // reshape: device axes major to minor; transpose: by position stride, descending.
    axes.reverse();
    let reshape: Vec<i64> =
        if axes.is_empty() { vec![n as i64] } else { axes.iter().map(|a| a.0 as i64).collect() };
    let mut perm: Vec<usize> = (0..axes.len()).collect();
    perm.sort_by_key(|&k| std::cmp::Reverse(axes[k].1));
    let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
    let l = IotaList {
        dims: dims.to_vec(),
        reshape,
        transpose: if identity || axes.is_empty() {
            Vec::new()
        } else {
            perm.iter().map(|&p| p as i64).collect()
        },
    };
    let l = if identity { IotaList { reshape: vec![n as i64], ..l } } else { l };
    (l.devices() == devices).then_some(l)
}

/// Maps a tiling: source dim `i` lands at destination dim `map[i]`; `None` drops it (its
/// tiling becomes partial replication). Destination dims nobody maps to are untiled.
pub fn map_dims(t: &Tiling, map: &[Option<usize>], dst_rank: usize) -> Option<Tiling> {
    if map.len() != t.rank() {
        return None;
    }
    let drop: Vec<usize> = (0..t.rank()).filter(|&i| map[i].is_none()).collect();
    let p = t.partially_replicate(&drop).remove_dims(&drop)?;
    let kept: Vec<usize> = (0..t.rank()).filter(|&i| map[i].is_some()).collect();
    let mut order: Vec<usize> = (0..kept.len()).collect();
    order.sort_by_key(|&k| map[kept[k]]);
    let p = p.transpose(&order);
    let dsts: Vec<usize> = kept.iter().filter_map(|&k| map[k]).collect();
    if dsts.iter().any(|&d| d >= dst_rank) {
        return None;
    }
    let missing: Vec<usize> = (0..dst_rank).filter(|d| !dsts.contains(d)).collect();
    Some(p.insert_dims(&missing))
}

/// [`map_dims`] on a sharding: replication stays replication; maximal and manual do not
/// propagate.
pub fn map_spec(s: &Spec, map: &[Option<usize>], dst_rank: usize) -> Option<Spec> {
    match s {
        Spec::Replicated => Some(Spec::Replicated),
        Spec::Tiled(t) => Some(map_dims(t, map, dst_rank)?.into_spec()),
        _ => None,
    }
}

/// Partially replicates data dims `dims` of a sharding.
pub fn replicate_dims(s: &Spec, dims: &[usize]) -> Option<Spec> {
    match s {
        Spec::Replicated => Some(Spec::Replicated),
        Spec::Tiled(t) => Some(t.partially_replicate(dims).into_spec()),
        _ => None,
    }
}

/// The more specific of two shardings, merged when both are partial and compatible
/// (`merge` only from level 1).
pub fn combine(a: &Spec, b: &Spec, merge: bool) -> Spec {
    // A fully tiled side cannot gain tiles from a merge: it is the answer (when `a`) or
    // wins against any partial `a` (when `b`); identical sides need no merge.
    if let (Spec::Tiled(x), Spec::Tiled(y)) = (a, b)
        && x.other.is_empty()
        && y.other.is_empty()
    {
        if x == y || x.repl == 1 {
            return a.clone();
        }
        if y.repl == 1 && y.num_devices() == x.num_devices() {
            return b.clone();
        }
    }
    if merge
        && let (Spec::Tiled(x), Spec::Tiled(y)) = (a, b)
        && let Some(m) = x.merge(y)
    {
        return m.into_spec();
    }
    if more_specific(b, a) { b.clone() } else { a.clone() }
}

/// GSPMD's `IsShardingMoreSpecific`: tiled beats replicated, more tiles beat fewer.
pub fn more_specific(a: &Spec, b: &Spec) -> bool {
    match (a, b) {
        (Spec::Tiled(x), Spec::Tiled(y)) => x.num_tiles() > y.num_tiles(),
        (Spec::Tiled(_), Spec::Replicated) => true,
        _ => false,
    }
}

/// GSPMD's `ReturnImprovedSharding`: the merged sharding (from level 1) or the candidate,
/// if strictly more specific than the current one.
pub fn better(cur: &Spec, cand: &Spec, level: u8) -> Option<Spec> {
    if level >= 1
        && let (Spec::Tiled(a), Spec::Tiled(b)) = (cur, cand)
        && a.repl > 1
        && b.repl > 1
        && a.tiles.len() == b.tiles.len()
        && a.tiles.iter().zip(&b.tiles).map(|(x, y)| x.max(y)).product::<i64>() > a.num_tiles()
        && let Some(m) = a.merge(b)
        && m.num_tiles() > a.num_tiles()
    {
        return Some(m.into_spec());
    }
    more_specific(cand, cur).then(|| cand.clone())
}

/// Static dims of an array shape.
pub fn dims(s: &Shape) -> Option<Vec<i64>> {
    s.as_array()?.static_dims().map(|d| d.into_iter().map(|x| x as i64).collect())
}

/// The inverse of `map` (dim `k` lands on `map[k]`) over `len` target dims: where each
/// target dim comes from.
pub(crate) fn invert(map: &[Option<usize>], len: usize) -> Vec<Option<usize>> {
    let mut inv = vec![None; len];
    for (k, o) in map.iter().enumerate() {
        if let Some(&o) = o.as_ref()
            && let Some(slot) = inv.get_mut(o)
        {
            *slot = Some(k);
        }
    }
    inv
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Spec {
        // The array's rank is whatever the sharding tiles.
        let m = (0..5)
            .find_map(|r| {
                let dims = vec!["8"; r].join(",");
                hlo_check::parse(&format!("HloModule m\nENTRY e {{\n  ROOT p = f32[{dims}] parameter(0), sharding={s}\n}}\n")).ok()
            })
            .expect("parses");
        let c = m.comp(m.entry);
        Spec::from_ir(c.instr(c.root().unwrap()).sharding.as_ref().unwrap()).unwrap()
    }

    #[test]
    fn iota_forms_print_as_xla() {
        let t = parse("{devices=[2,1,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}");
        assert_eq!(t.to_ir().to_string(), "{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}");
        let t = parse("{devices=[4,2]0,1,2,3,4,5,6,7}");
        assert_eq!(t.to_ir().to_string(), "{devices=[4,2]<=[8]}");
        let t = parse("{devices=[2,2]0,3,1,2}");
        assert_eq!(t.to_ir().to_string(), "{devices=[2,2]0,3,1,2}");
        let t = parse("{devices=[2,2,2]<=[2,2,2]T(2,0,1)}");
        assert_eq!(t.to_ir().to_string(), "{devices=[2,2,2]<=[4,2]T(1,0)}");
    }

    #[test]
    fn equality_ignores_printed_form_and_group_order() {
        assert!(
            parse("{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}")
                .same(&parse("{devices=[2,1,4]0,2,4,6,1,3,5,7 last_tile_dim_replicate}"))
        );
        assert!(
            parse("{devices=[2,1,4]0,6,4,2,7,3,5,1 last_tile_dim_replicate}")
                .same(&parse("{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"))
        );
        assert!(
            !parse("{devices=[2,1,4]<=[8] last_tile_dim_replicate}")
                .same(&parse("{devices=[2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"))
        );
        assert!(parse("{devices=[1,1,8]<=[8] last_tile_dim_replicate}").same(&Spec::Replicated));
        assert!(
            parse("{devices=[1,1,1,8]<=[8] last_tile_dims={replicated}}").same(&Spec::Replicated)
        );
    }

    #[test]
    fn partial_replication_and_bounds() {
        let t = parse("{devices=[4,2,1]<=[8]}");
        let p = t.tiling().unwrap().partially_replicate(&[0]);
        assert_eq!(
            p.clone().into_spec().to_ir().to_string(),
            "{devices=[1,2,1,4]<=[4,2]T(1,0) last_tile_dim_replicate}"
        );
        let b = t.tiling().unwrap().shard_bounds(&[10, 8, 8]);
        assert_eq!(b[0].1, vec![(0, 3), (0, 4), (0, 8)]);
        assert_eq!(b[7].1, vec![(9, 10), (4, 8), (0, 8)]);
    }
}
