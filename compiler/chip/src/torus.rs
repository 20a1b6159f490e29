//! The physical ICI network of one slice: a 2-D or 3-D mesh of chips, with wraparound
//! links (a torus) on the axes that have them, and how a collective's device group lies
//! on it.
//!
//! **Shapes.** A slice of `n` chips has the shape Cloud TPU gives it by default
//! ([`Torus::slice`]): the most cubic (2-D: most square) factorization of `n`, axes in
//! ascending order, a size-1 axis last (`2x2x1`, `2x2x4`, `4x4x4`, `8x16x16`,
//! `16x16x24`; v5e `8x16`, `16x16`), which reproduces the slice shapes of the Cloud TPU
//! v4, v5p and v5e configuration tables. `hloc compile --topology 16x16x8` names another.
//!
//! **Wraparound** ([`Wrap`], per preset in `config.rs`): on v4 and v5p every axis of a
//! slice made of whole 4x4x4 cubes wraps ("All 4x4x4 and larger slices (one cube) have
//! full 3D torus", Cloud TPU v5p page; v4's optical switches join cubes the same way,
//! Jouppi et al., ISCA 2023); smaller slices are meshes. On the 2-D generations an axis
//! wraps only when it is the pod's full extent (16 chips on v5e and v2, 32 on v3).
//!
//! **Device ids.** Chip `id` sits at `x + X (y + Y z)` (x fastest): the numbering of
//! `jax.experimental.topologies` devices on v4 (`id=1` at `(1,0,0)`, `id=4` at `(0,1,0)`
//! on `4x4x4`), and how a mesh whose axes follow the torus axes (what
//! `mesh_utils.create_device_mesh` builds) numbers its partitions: the innermost mesh axis
//! runs along x. A caller with the real placement passes coordinates instead
//! ([`Torus::with_coords`]).
//!
//! **Groups** ([`Torus::group`]). A replica group whose chips form a product of per-axis
//! sets is a sub-torus: on each axis it spans, its chips are a ring (they cover the axis
//! at an even spacing `s` and the axis wraps: each step crosses `s` links, which `s`
//! interleaved groups share) or a line (anything else: a ring laid on a line runs at half
//! a ring's bandwidth, as "How to Scale Your Model", Part 3, states for slices without
//! wraparound). A group that is no product is a line through its chips in id order,
//! each step as long as their mean distance.
//!
//! The collective algorithms on these axes are in [`crate::ici`].

use std::collections::BTreeSet;

/// How the axes of a preset's slices wrap around.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wrap {
    /// Every axis wraps when every axis is a multiple of this cube edge (v4, v5p: 4).
    Cubes(u64),
    /// An axis wraps when it is this long, the pod's full extent (v5e, v2: 16; v3: 32).
    FullAxis(u64),
}

/// One slice's chips on their axes.
#[derive(Clone, Debug, PartialEq)]
pub struct Torus {
    /// Chips along each axis (x first).
    pub dims: Vec<u64>,
    /// Whether each axis has wraparound links.
    pub wrap: Vec<bool>,
    /// The physical coordinates of each device id, when the caller knows the placement;
    /// otherwise `id = x + X (y + Y z)`.
    pub coords: Option<Vec<Vec<u64>>>,
}

/// How a group lies on one axis: `n` chips, `spacing` links apart on average, as a ring
/// (wraparound, even spacing) or a line.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AxisSpan {
    /// Which torus axis (`None`: a group that is no product, laid along its id order).
    pub axis: Option<usize>,
    pub n: u64,
    /// Links between consecutive chips of the group along this axis (>= 1).
    pub spacing: f64,
    pub ring: bool,
}

impl Torus {
    /// The default slice of `chips` chips with `axes` axes (2 or 3), wrapped by `wrap`.
    pub fn slice(chips: u64, axes: usize, wrap: Wrap) -> Torus {
        let dims = default_shape(chips.max(1), axes.clamp(1, 3));
        Torus::new(dims, wrap)
    }

    /// A slice of the given shape, wrapped by `wrap`.
    pub fn new(dims: Vec<u64>, wrap: Wrap) -> Torus {
        let w = match wrap {
            Wrap::Cubes(edge) => {
                let whole = dims.iter().all(|&d| d >= edge && d % edge == 0);
                vec![whole; dims.len()]
            }
            Wrap::FullAxis(full) => dims.iter().map(|&d| d == full).collect(),
        };
        Torus { dims, wrap: w, coords: None }
    }

    /// Parses `AxB` or `AxBxC` (each at least 1, at most 65536 chips in all).
    pub fn parse_shape(s: &str) -> Result<Vec<u64>, String> {
        let bad = || {
            format!("topology `{s}` is not AxB or AxBxC with every size at least 1 (e.g. 16x16x8)")
        };
        let dims: Vec<u64> = s
            .split(['x', 'X'])
            .map(|p| p.trim().parse::<u64>())
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        if !(2..=3).contains(&dims.len()) || dims.contains(&0) {
            return Err(bad());
        }
        let chips = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d)).unwrap_or(u64::MAX);
        if chips > 65536 {
            return Err(format!("topology `{s}` has {chips} chips; at most 65536 are modelled"));
        }
        Ok(dims)
    }

    /// The same slice with known device coordinates (`coords[id]`, one per device).
    pub fn with_coords(mut self, coords: Vec<Vec<u64>>) -> Torus {
        self.coords = Some(coords);
        self
    }

    pub fn chips(&self) -> u64 {
        self.dims.iter().product()
    }

    /// `2x2x1`-style name, with `(wraparound)` on the axes that wrap.
    pub fn describe(&self) -> String {
        let shape = self.dims.iter().map(u64::to_string).collect::<Vec<_>>().join("x");
        let kind = if self.wrap.iter().all(|&w| w) {
            "torus"
        } else if self.wrap.iter().any(|&w| w) {
            "partial torus"
        } else {
            "mesh"
        };
        format!("{shape} {kind}")
    }

    /// The coordinates of device `id` (ids past the slice wrap around it, as the chips of
    /// later slices repeat its layout).
    pub fn coord(&self, id: u32) -> Vec<u64> {
        if let Some(c) = self.coords.as_ref().and_then(|c| c.get(id as usize)) {
            return c.clone();
        }
        let mut rest = u64::from(id) % self.chips().max(1);
        self.dims
            .iter()
            .map(|&d| {
                let c = rest % d;
                rest /= d;
                c
            })
            .collect()
    }

    /// Links between two chips on the shortest route (dimension by dimension).
    pub fn distance(&self, a: u32, b: u32) -> u64 {
        let (ca, cb) = (self.coord(a), self.coord(b));
        (0..self.dims.len()).map(|ax| self.axis_distance(ax, ca[ax], cb[ax]).0).sum()
    }

    /// Links from `a` to `b` along axis `ax`, and whether the route goes up (+1).
    fn axis_distance(&self, ax: usize, a: u64, b: u64) -> (u64, bool) {
        let d = self.dims[ax];
        let up = (b + d - a) % d;
        if self.wrap[ax] {
            if up <= d - up { (up, true) } else { (d - up, false) }
        } else if b >= a {
            (b - a, true)
        } else {
            (a - b, false)
        }
    }

    /// How a group of devices lies on the slice: one [`AxisSpan`] per axis it spans (none
    /// for a group of one chip).
    pub fn group(&self, members: &[u32]) -> Vec<AxisSpan> {
        let mut uniq: Vec<u32> = members.to_vec();
        uniq.sort_unstable();
        uniq.dedup();
        // Devices on the same chip (the two cores of a v2/v3 chip) exchange on chip: the
        // group on the torus is its distinct chips, in id order.
        let mut seen = std::collections::HashSet::new();
        uniq.retain(|&m| seen.insert(self.coord(m)));
        if uniq.len() <= 1 {
            return vec![];
        }
        let coords: Vec<Vec<u64>> = uniq.iter().map(|&m| self.coord(m)).collect();
        let axes = self.dims.len();
        let sets: Vec<BTreeSet<u64>> =
            (0..axes).map(|ax| coords.iter().map(|c| c[ax]).collect()).collect();
        let product: u64 = sets.iter().map(|s| s.len() as u64).product();
        let distinct: BTreeSet<&Vec<u64>> = coords.iter().collect();
        if product == uniq.len() as u64 && distinct.len() == uniq.len() {
            return (0..axes)
                .filter(|&ax| sets[ax].len() > 1)
                .map(|ax| self.axis_span(ax, &sets[ax]))
                .collect();
        }
        // Not a product: a line through the chips (one link, then two).in id order.
        let hops: u64 = uniq.windows(2).map(|w| self.distance(w[0], w[1])).sum();
        let n = uniq.len() as u64;
        vec![AxisSpan {
            axis: None,
            n,
            spacing: (hops as f64 / (n - 1) as f64).max(1.0),
            ring: false,
        }]
    }

    fn axis_span(&self, ax: usize, set: &BTreeSet<u64>) -> AxisSpan {
        let d = self.dims[ax];
        let n = set.len() as u64;
        let v: Vec<u64> = set.iter().copied().collect();
        let even = d.is_multiple_of(n) && {
            let s = d / n;
            v.iter().all(|&c| c % s == v[0] % s)
        };
        if self.wrap[ax] && even {
            return AxisSpan { axis: Some(ax), n, spacing: (d / n) as f64, ring: true };
        }
        // A line: the shortest stretch of the axis that holds the chips (on a wrapping
        // axis, the complement of the largest gap).
        let extent = if self.wrap[ax] {
            let gaps = v.windows(2).map(|w| w[1] - w[0]).chain([v[0] + d - v[n as usize - 1]]);
            d - gaps.max().unwrap_or(d) + 1
        } else {
            v[n as usize - 1] - v[0] + 1
        };
        AxisSpan {
            axis: Some(ax),
            n,
            spacing: ((extent - 1) as f64 / (n - 1) as f64).max(1.0),
            ring: false,
        }
    }

    /// Bytes on the busiest directed link, and the longest route in links, when every
    /// `(source, target)` pair sends `bytes` at once, each routed dimension by dimension
    /// on its shortest way (a collective-permute).
    pub fn permute_load(&self, pairs: &[(u32, u32)], bytes: f64) -> (f64, u64) {
        use std::collections::HashMap;
        let mut load: HashMap<(Vec<u64>, usize, bool), f64> = HashMap::new();
        let mut longest = 0;
        for &(a, b) in pairs {
            let mut at = self.coord(a);
            let to = self.coord(b);
            let mut hops = 0;
            for ax in 0..self.dims.len() {
                let (dist, up) = self.axis_distance(ax, at[ax], to[ax]);
                for _ in 0..dist {
                    *load.entry((at.clone(), ax, up)).or_default() += bytes;
                    let d = self.dims[ax];
                    at[ax] = if up { (at[ax] + 1) % d } else { (at[ax] + d - 1) % d };
                }
                hops += dist;
            }
            longest = longest.max(hops);
        }
        (load.values().copied().fold(0.0, f64::max), longest)
    }
}

/// The most cubic (square) shape of `chips` on `axes` axes: sizes ascending, size-1 axes
/// last.
fn default_shape(chips: u64, axes: usize) -> Vec<u64> {
    if chips > 1 << 20 {
        // Beyond any pod: one long axis (no slice this large is described anywhere).
        let mut dims = vec![chips];
        dims.resize(axes, 1);
        return dims;
    }
    let divisors: Vec<u64> = (1..=chips).filter(|&d| chips.is_multiple_of(d)).collect();
    let mut best: Option<Vec<u64>> = None;
    let mut consider = |mut dims: Vec<u64>| {
        dims.sort_unstable();
        // Fewest size-1 axes, then the smallest spread between the longest and the
        // shortest axis.
        let key = |v: &Vec<u64>| {
            let ones = v.iter().filter(|&&d| d == 1).count();
            let shortest = v.iter().copied().filter(|&d| d > 1).min().unwrap_or(1);
            (ones, v[v.len() - 1] - shortest)
        };
        if best.as_ref().is_none_or(|b| key(&dims) < key(b)) {
            best = Some(dims);
        }
    };
    match axes {
        1 => consider(vec![chips]),
        2 => divisors.iter().for_each(|&a| consider(vec![a, chips / a])),
        _ => {
            for &a in &divisors {
                for &b in divisors.iter().filter(|&&b| (chips / a).is_multiple_of(b)) {
                    consider(vec![a, b, chips / a / b]);
                }
            }
        }
    }
    let mut dims = best.unwrap_or_else(|| vec![chips]);
    // Size-1 axes last (2x2x1).
    dims.retain(|&d| d > 1);
    dims.resize(axes, 1);
    dims
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_slices_are_the_cloud_tpu_shapes() {
        let v5p = |n| Torus::slice(n, 3, Wrap::Cubes(4));
        for (n, want, wraps) in [
            (4, vec![2, 2, 1], false),
            (8, vec![2, 2, 2], false),
            (16, vec![2, 2, 4], false),
            (32, vec![2, 4, 4], false),
            (64, vec![4, 4, 4], true),
            (128, vec![4, 4, 8], true),
            (256, vec![4, 8, 8], true),
            (512, vec![8, 8, 8], true),
            (1024, vec![8, 8, 16], true),
            (2048, vec![8, 16, 16], true),
            (6144, vec![16, 16, 24], true),
        ] {
            let t = v5p(n);
            assert_eq!(t.dims, want, "{n}");
            assert_eq!(t.wrap, vec![wraps; 3], "{n}");
        }
        let v5e = |n| Torus::slice(n, 2, Wrap::FullAxis(16));
        assert_eq!(v5e(256).dims, vec![16, 16]);
        assert_eq!(v5e(256).wrap, vec![true, true]);
        assert_eq!(v5e(128).dims, vec![8, 16]);
        assert_eq!(v5e(128).wrap, vec![false, true]);
        assert_eq!(v5e(8).dims, vec![2, 4]);
        assert_eq!(v5e(1).dims, vec![1, 1]);
    }

    #[test]
    fn groups_on_axes() {
        let t = Torus::new(vec![16, 16, 8], Wrap::Cubes(4));
        assert_eq!(t.coord(1), vec![1, 0, 0]);
        assert_eq!(t.coord(16), vec![0, 1, 0]);
        assert_eq!(t.coord(256), vec![0, 0, 1]);
        // 16 consecutive ids: the x ring.
        let g = t.group(&(0..16).collect::<Vec<_>>());
        assert_eq!(g, vec![AxisSpan { axis: Some(0), n: 16, spacing: 1.0, ring: true }]);
        // Every 16th id, 16 of them: the y ring.
        let g = t.group(&(0..16).map(|i| i * 16).collect::<Vec<_>>());
        assert_eq!(g, vec![AxisSpan { axis: Some(1), n: 16, spacing: 1.0, ring: true }]);
        // The whole slice: three rings.
        let g = t.group(&(0..2048).collect::<Vec<_>>());
        assert_eq!(g.len(), 3);
        assert!(g.iter().all(|s| s.ring && s.spacing == 1.0));
        assert_eq!(g.iter().map(|s| s.n).collect::<Vec<_>>(), vec![16, 16, 8]);
        // Every other chip along x: a ring of 8 whose steps cross two links.
        let g = t.group(&(0..8).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(g, vec![AxisSpan { axis: Some(0), n: 8, spacing: 2.0, ring: true }]);
        // Half an axis: a line of 8.
        let g = t.group(&(0..8).collect::<Vec<_>>());
        assert_eq!(g, vec![AxisSpan { axis: Some(0), n: 8, spacing: 1.0, ring: false }]);
        // On a mesh (no wraparound), a full axis is a line too.
        let m = Torus::new(vec![2, 4, 4], Wrap::Cubes(4));
        assert_eq!(
            m.group(&[0, 1]),
            vec![AxisSpan { axis: Some(0), n: 2, spacing: 1.0, ring: false }]
        );
        // Not a product: a line through the chips (one link, then two).
        let g = t.group(&[0, 1, 16]);
        assert_eq!(g, vec![AxisSpan { axis: None, n: 3, spacing: 1.5, ring: false }]);
        assert!(t.group(&[5]).is_empty());
        // Two devices per chip (v2/v3 cores): the group is its chips.
        let cores = Torus::new(vec![2, 2], Wrap::FullAxis(16)).with_coords(vec![
            vec![0, 0],
            vec![0, 0],
            vec![1, 0],
            vec![1, 0],
            vec![0, 1],
            vec![0, 1],
            vec![1, 1],
            vec![1, 1],
        ]);
        assert_eq!(cores.group(&(0..8).collect::<Vec<_>>()).len(), 2);
        assert!(cores.group(&[0, 1]).is_empty());
    }

    #[test]
    fn permutes_route_on_the_shortest_way() {
        let t = Torus::new(vec![4, 4, 4], Wrap::Cubes(4));
        // A shift by one along x: every link used once.
        let shift: Vec<(u32, u32)> = (0..64u32).map(|i| (i, (i & !3) | ((i + 1) & 3))).collect();
        assert_eq!(t.permute_load(&shift, 100.0), (100.0, 1));
        // 0 -> 3 wraps around: one link.
        assert_eq!(t.distance(0, 3), 1);
        // 0 -> (2,2,2): six links.
        assert_eq!(t.distance(0, 2 + 8 + 32), 6);
        let m = Torus::new(vec![2, 2, 4], Wrap::Cubes(4));
        assert_eq!(m.distance(0, 12), 3);
    }

    #[test]
    fn shapes_parse_and_reject() {
        assert_eq!(Torus::parse_shape("16x16x8"), Ok(vec![16, 16, 8]));
        assert_eq!(Torus::parse_shape("16X16"), Ok(vec![16, 16]));
        for bad in ["16", "0x4", "4x", "ax4", "2x2x2x2", "1024x1024x1024"] {
            assert!(Torus::parse_shape(bad).is_err(), "{bad}");
        }
    }
}
