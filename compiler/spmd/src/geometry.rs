//! Where each device's shard sits: per-device tile coordinates of a [`Tiling`], the
//! `[start, start + extent)` region a device holds along each dimension (GSPMD's padded
//! chunks of `ceil(n / tiles)`), and the device groups collectives run over.

use crate::sharding::spec::Tiling;

/// A tiling with every device's coordinate over `tiles ++ [repl] ++ other`.
#[derive(Debug, Clone)]
pub struct Placed {
    pub t: Tiling,
    /// `coords[device]`: the device's multi-index over `t.array_dims()`.
    pub coords: Vec<Vec<i64>>,
}

impl Placed {
    /// `None` when the device list is not a permutation of `0..N`.
    pub fn new(t: Tiling) -> Option<Placed> {
        let ad = t.array_dims();
        let n = t.devices.len();
        let mut coords = vec![Vec::new(); n];
        let mut idx = vec![0i64; ad.len()];
        for &d in &t.devices {
            let slot = coords.get_mut(usize::try_from(d).ok()?)?;
            if !slot.is_empty() && !ad.is_empty() {
                return None;
            }
            *slot = idx.clone();
            for k in (0..ad.len()).rev() {
                idx[k] += 1;
                if idx[k] < ad[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        Some(Placed { t, coords })
    }

    /// Every device holds everything: rank `rank`, one tile per dimension.
    pub fn replicated(rank: usize, devices: i64) -> Placed {
        let t = Tiling {
            tiles: vec![1; rank],
            repl: devices,
            other: Vec::new(),
            devices: (0..devices).collect(),
        };
        Placed::new(t).expect("iota devices")
    }

    pub fn devices(&self) -> usize {
        self.coords.len()
    }

    pub fn rank(&self) -> usize {
        self.t.rank()
    }

    pub fn is_replicated(&self) -> bool {
        self.t.tiles.iter().all(|&t| t == 1)
    }

    /// The padded chunk length along `k` of a dimension of size `n`.
    pub fn chunk(&self, k: usize, n: i64) -> i64 {
        let t = self.t.tiles[k];
        if t <= 1 { n } else { (n + t - 1) / t }
    }

    /// Device `d`'s first element along dimension `k` (of size `n`).
    pub fn start(&self, d: usize, k: usize, n: i64) -> i64 {
        if self.t.tiles[k] <= 1 { 0 } else { self.coords[d][k] * self.chunk(k, n) }
    }

    /// The per-device (padded) shape of an array of `dims`.
    pub fn local_dims(&self, dims: &[i64]) -> Vec<i64> {
        dims.iter().enumerate().map(|(k, &n)| self.chunk(k, n)).collect()
    }

    /// Whether dimension `k` of size `n` has padding on some device.
    pub fn padded(&self, k: usize, n: i64) -> bool {
        let t = self.t.tiles[k];
        t > 1 && self.chunk(k, n) * t != n
    }

    /// Device `d`'s valid element count along `k` (the rest of its chunk is padding).
    pub fn valid(&self, d: usize, k: usize, n: i64) -> i64 {
        (n - self.start(d, k, n)).clamp(0, self.chunk(k, n))
    }

    /// Semantic equality: every device holds the same region of every dimension.
    pub fn same_regions(&self, other: &Placed, dims: &[i64]) -> bool {
        self.devices() == other.devices()
            && (0..dims.len()).all(|k| {
                let n = dims[k];
                self.chunk(k, n) == other.chunk(k, n)
                    && (0..self.devices()).all(|d| self.start(d, k, n) == other.start(d, k, n))
            })
    }

    /// Device groups whose members differ only in their coordinates along `dims` (data
    /// dimensions), each ordered row-major by those coordinates; groups ordered by their
    /// first member. All-gather along one dim concatenates in this order.
    pub fn groups_along(&self, dims: &[usize]) -> Vec<Vec<i64>> {
        let mut keyed: Vec<(Vec<i64>, Vec<i64>, i64)> = (0..self.devices())
            .map(|d| {
                let c = &self.coords[d];
                let key: Vec<i64> = c
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| !dims.contains(k))
                    .map(|(_, &x)| x)
                    .collect();
                let within: Vec<i64> = dims.iter().map(|&k| c[k]).collect();
                (key, within, d as i64)
            })
            .collect();
        keyed.sort();
        let mut groups: Vec<Vec<i64>> = Vec::new();
        let mut last: Option<Vec<i64>> = None;
        for (key, _, d) in keyed {
            if last.as_ref() != Some(&key) {
                groups.push(Vec::new());
                last = Some(key);
            }
            groups.last_mut().expect("pushed").push(d);
        }
        groups.sort_by_key(|g| g[0]);
        groups
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiling(tiles: &[i64], repl: i64, devices: &[i64]) -> Tiling {
        Tiling { tiles: tiles.to_vec(), repl, other: Vec::new(), devices: devices.to_vec() }
    }

    #[test]
    fn regions_are_padded_chunks() {
        let p = Placed::new(tiling(&[4, 1], 2, &[0, 1, 2, 3, 4, 5, 6, 7])).unwrap();
        assert_eq!(p.local_dims(&[10, 3]), vec![3, 3]);
        assert_eq!(
            (0..8).map(|d| p.start(d, 0, 10)).collect::<Vec<_>>(),
            vec![0, 0, 3, 3, 6, 6, 9, 9]
        );
        assert_eq!(p.valid(7, 0, 10), 1);
        assert!(p.padded(0, 10) && !p.padded(0, 8));
    }

    #[test]
    fn groups_follow_the_device_order() {
        // [2,2] tiles over devices 0,2,1,3 (column-major placement).
        let p = Placed::new(tiling(&[2, 2], 1, &[0, 2, 1, 3])).unwrap();
        assert_eq!(p.groups_along(&[0]), vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(p.groups_along(&[1]), vec![vec![0, 2], vec![1, 3]]);
        assert_eq!(p.groups_along(&[0, 1]), vec![vec![0, 2, 1, 3]]);
    }

    #[test]
    fn bad_device_lists_are_refused() {
        assert!(Placed::new(tiling(&[2], 1, &[0, 0])).is_none());
        assert!(Placed::new(tiling(&[2], 1, &[0, 5])).is_none());
    }
}
