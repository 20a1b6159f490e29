//! Collectives on the inter-chip interconnect, and across slices on the data-center
//! network: the time of one collective from its algorithm, its device group and buffer,
//! on a preset's links ([`crate::config::Ici`], [`crate::config::Dcn`]) and the slice's
//! torus ([`crate::torus`]).
//!
//! **Within a slice** a group is decomposed into the torus axes it spans
//! ([`Torus::group`]): on each, its `n` chips form a bidirectional ring (both directions
//! of the axis's two links: `R = 2W/s` bytes/s into each chip, `W` one direction of one
//! link, `s` the links between consecutive members, shared by `s` interleaved groups) or,
//! without wraparound, a line (`R = W/s`). A collective runs as per-axis ring phases, as
//! on a pod's torus (not one ring over every chip):
//! - all-gather (`B` = result) and reduce-scatter (`B` = operand): on each axis `a` in
//!   turn, each chip receives `(n_a - 1)` times what it holds. The buffer is split into
//!   one share per spanned axis, each share taking the axes in a rotated order, so all
//!   axes carry data at once ("How to Scale Your Model", Part 3: an AllGather over `k`
//!   axes runs at `k` times one axis's bandwidth). Time: the busiest axis's bytes over
//!   its `R`, plus `(n_a - 1)` steps of `s_a` hops on each axis. On one ring of `g`
//!   chips this is the textbook `(g-1)/g * B / 2W + (g-1)` steps.
//! - all-reduce: a reduce-scatter then an all-gather of the operand (twice the above).
//! - all-to-all: axis by axis, each phase moving the whole buffer: `(n-1)/n * B` over a
//!   mean of `max(1, n/4)` group steps, at `R`; `(n - 1)` steps.
//! - collective-permute: every pair routed dimension by dimension on its shortest way:
//!   the busiest directed link's bytes over `W`, plus the longest route's hops.
//!
//! A step costs `step_latency_s` per hop (an assumption: link latency plus
//! synchronization). So a 16 KiB all-reduce over the 2048 chips of a `8x16x16` v4 torus
//! costs `2 (7 + 15 + 15) = 74` steps, not the `2 x 2047` of one ring over every chip.
//!
//! **Across slices** a group spanning `s` slices with `k` chips in each runs
//! hierarchically, as XLA and MaxText arrange multi-slice data parallelism: the ICI part
//! among the chips of a slice on the whole buffer, and the DCN part among the `s` slices
//! on each chip's `B/k` share, a ring whose every chip sends at its share of the host's
//! interface (`host_bytes_per_s / chips_per_host`): all-reduce = ICI all-reduce of `B` +
//! DCN all-reduce of `B/k`; all-gather and reduce-scatter likewise; all-to-all sends the
//! `(s-1)/s` of `B` bound for other slices over the DCN; a collective-permute with a pair
//! crossing slices sends `B` over the DCN.
//!
//! Not modeled: contention between concurrent collectives (the simulator serializes them
//! on the ICI), and twisted tori (their gain is in all-to-all bisection).

use crate::config::{Dcn, Ici, TpuConfig};
use crate::program::Collective;
use crate::torus::{AxisSpan, Torus};

/// Seconds one collective takes on `cfg`'s ICI, and on its DCN when the group spans
/// slices (`cfg.chips_per_slice`).
pub fn seconds(c: &Collective, cfg: &TpuConfig) -> f64 {
    let torus = slice_torus(c, cfg);
    let Some(per_slice) = cfg.chips_per_slice.filter(|&n| n > 0) else {
        return on_ici(c, c.bytes as f64, &c.members, &torus, &cfg.ici);
    };
    let slice = |d: &u32| u64::from(*d) / per_slice;
    if c.kind == "collective-permute" {
        let crosses = c.members.chunks(2).any(|p| p.len() == 2 && slice(&p[0]) != slice(&p[1]));
        return if crosses {
            on_dcn(c.kind, c.bytes as f64, 2, &cfg.dcn)
        } else {
            on_ici(c, c.bytes as f64, &c.members, &torus, &cfg.ici)
        };
    }
    let mut slices: Vec<u64> = c.members.iter().map(slice).collect();
    slices.sort_unstable();
    slices.dedup();
    let s = slices.len() as u64;
    if s <= 1 {
        return on_ici(c, c.bytes as f64, &c.members, &torus, &cfg.ici);
    }
    let k = (c.group / s).max(1);
    let b = c.bytes as f64;
    // Bytes per chip on each network: an all-to-all keeps 1/s of B inside the slice and
    // sends the rest across; the others move B on the ICI and each chip's B/k share across.
    let (ici_bytes, dcn_bytes) =
        if c.kind == "all-to-all" { (b / s as f64, b) } else { (b, b / k as f64) };
    // The ICI part runs among the group's chips in its first slice.
    let first = slice(&c.members[0]);
    let local: Vec<u32> = c.members.iter().copied().filter(|d| slice(d) == first).collect();
    on_ici(c, ici_bytes, &local, &torus, &cfg.ici) + on_dcn(c.kind, dcn_bytes, s, &cfg.dcn)
}

/// The slice the collective runs on: the run's (`cfg.slice`), else the default slice of
/// `chips_per_slice` chips, else of as many chips as the group has.
fn slice_torus(c: &Collective, cfg: &TpuConfig) -> Torus {
    if let Some(t) = &cfg.slice {
        return t.clone();
    }
    let chips = cfg.chips_per_slice.filter(|&n| n > 0).unwrap_or(c.group.max(1));
    Torus::slice(chips, cfg.ici.axes, cfg.ici.wrap)
}

/// One collective within a slice, among `members`, on the torus axes they span.
fn on_ici(c: &Collective, b: f64, members: &[u32], torus: &Torus, ici: &Ici) -> f64 {
    let w = ici.link_bytes_per_s;
    if w <= 0.0 || b <= 0.0 && c.kind != "collective-permute" {
        return 0.0;
    }
    let hop = ici.step_latency_s;
    if c.kind == "collective-permute" {
        let pairs: Vec<(u32, u32)> = members
            .chunks(2)
            .filter(|p| p.len() == 2 && p[0] != p[1])
            .map(|p| (p[0], p[1]))
            .collect();
        if pairs.is_empty() {
            return 0.0;
        }
        let (busiest, longest) = torus.permute_load(&pairs, b);
        return busiest / w + longest as f64 * hop;
    }
    let spans = torus.group(members);
    if spans.is_empty() {
        return 0.0;
    }
    // Bytes into each chip per second on an axis, and the latency of its steps.
    let rate = |s: &AxisSpan| if s.ring { 2.0 * w / s.spacing } else { w / s.spacing };
    let steps = |s: &AxisSpan| (s.n - 1) as f64 * s.spacing * hop;
    match c.kind {
        "all-reduce" => 2.0 * gather(&spans, b, &rate, &steps),
        "all-to-all" => spans
            .iter()
            .map(|s| {
                let n = s.n as f64;
                (n - 1.0) / n * b * (n / 4.0).max(1.0) / rate(s) + steps(s)
            })
            .sum(),
        // all-gather, reduce-scatter and anything else that moves a buffer among a group.
        _ => gather(&spans, b, &rate, &steps),
    }
}

/// An all-gather of `b` bytes (a reduce-scatter of `b`) over the axes `spans`: one share
/// of the buffer per axis, each share taking the axes in a rotated order; the busiest
/// axis's bytes at its rate, plus every axis's steps.
fn gather(
    spans: &[AxisSpan],
    b: f64,
    rate: &dyn Fn(&AxisSpan) -> f64,
    steps: &dyn Fn(&AxisSpan) -> f64,
) -> f64 {
    let k = spans.len();
    let chips: f64 = spans.iter().map(|s| s.n as f64).product();
    let mut load = vec![0.0; k];
    for r in 0..k {
        // Each chip starts with its 1/chips of the share and gathers axis by axis.
        let mut held = b / k as f64 / chips;
        for i in 0..k {
            let a = (r + i) % k;
            let n = spans[a].n as f64;
            load[a] += (n - 1.0) * held;
            held *= n;
        }
    }
    let bw = spans.iter().zip(&load).map(|(s, l)| l / rate(s)).fold(0.0, f64::max);
    bw + spans.iter().map(steps).sum::<f64>()
}

/// One collective among `slices` slices on the DCN, each chip sending `b` bytes at its
/// share of its host's interface.
fn on_dcn(kind: &str, b: f64, slices: u64, dcn: &Dcn) -> f64 {
    let bw = dcn.host_bytes_per_s / f64::from(dcn.chips_per_host.max(1));
    if slices <= 1 || bw <= 0.0 {
        return 0.0;
    }
    let s = slices as f64;
    let (frac, steps) = ((s - 1.0) / s, s - 1.0);
    match kind {
        "all-reduce" => 2.0 * frac * b / bw + 2.0 * steps * dcn.step_latency_s,
        "collective-permute" => b / bw + dcn.step_latency_s,
        _ => frac * b / bw + steps * dcn.step_latency_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::torus::Wrap;

    fn collective(kind: &'static str, bytes: u64, members: Vec<u32>) -> Collective {
        Collective { kind, bytes, group: members.len() as u64, members }
    }

    /// A preset with 1 GB/s links and no step latency (the bandwidth terms alone) on the
    /// given slice.
    fn on(dims: Vec<u64>, wrap: Wrap) -> TpuConfig {
        let mut cfg = TpuConfig::v4();
        cfg.ici.link_bytes_per_s = 1e9;
        cfg.ici.step_latency_s = 0.0;
        cfg.dcn = Dcn { host_bytes_per_s: 4e8, chips_per_host: 4, step_latency_s: 0.0 };
        cfg.slice = Some(Torus::new(dims, wrap));
        cfg
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-12 + 1e-9 * b.abs()
    }

    #[test]
    fn one_ring_is_the_textbook_ring() {
        // A 1-D torus of 8: all-gather (g-1)/g * B / 2W, all-reduce twice that.
        let cfg = on(vec![8, 1, 1], Wrap::FullAxis(8));
        let b = 8_000_000;
        let ar = seconds(&collective("all-reduce", b, (0..8).collect()), &cfg);
        let ag = seconds(&collective("all-gather", b, (0..8).collect()), &cfg);
        let rs = seconds(&collective("reduce-scatter", b, (0..8).collect()), &cfg);
        assert!(close(ag, 7.0 / 8.0 * 8e6 / 2e9), "{ag}");
        assert!(close(ar, 2.0 * ag) && close(rs, ag));
        // Without wraparound the same chips are a line: half the bandwidth.
        let line = on(vec![8, 1, 1], Wrap::FullAxis(16));
        let ag_line = seconds(&collective("all-gather", b, (0..8).collect()), &line);
        assert!(close(ag_line, 2.0 * ag), "{ag_line}");
        // All-to-all: (g-1)/g * B over g/4 steps of the ring.
        let a2a = seconds(&collective("all-to-all", b, (0..8).collect()), &cfg);
        assert!(close(a2a, 7.0 / 8.0 * 8e6 * 2.0 / 2e9), "{a2a}");
        // A group of one chip moves nothing.
        assert_eq!(seconds(&collective("all-reduce", 100, vec![3]), &cfg), 0.0);
    }

    #[test]
    fn axes_run_at_once() {
        // A 4x4 torus, all 16 chips: two axes of 4, each carrying half the data at once.
        // Per axis: share B/2; first phase receives 3 x B/32, second 3 x B/8 (of the
        // share): 15/32 B per axis... over 2W: (15/16 B / 2) / 2W.
        let cfg = on(vec![4, 4], Wrap::FullAxis(4));
        let b = 16_000_000u64;
        let ag = seconds(&collective("all-gather", b, (0..16).collect()), &cfg);
        let want = 15.0 / 16.0 * b as f64 / 2.0 / 2e9;
        assert!(close(ag, want), "{ag} {want}");
        // The scaling book's k-axis speedup: the same 16 chips as one ring of 16 would
        // take twice as long.
        let ring16 = on(vec![16, 1], Wrap::FullAxis(16));
        let one = seconds(&collective("all-gather", b, (0..16).collect()), &ring16);
        assert!(close(one, 2.0 * want), "{one}");
        // A 3-D 4x4x4 torus, all 64 chips: three axes at once.
        let cube = on(vec![4, 4, 4], Wrap::Cubes(4));
        let ar = seconds(&collective("all-reduce", b, (0..64).collect()), &cube);
        assert!(close(ar, 2.0 * 63.0 / 64.0 * b as f64 / 3.0 / 2e9), "{ar}");
        // Half of it (a 2x4x4 mesh, no wraparound): lines; the 2-long axis carries the
        // most for its size... bounded below by the torus time and above by one line.
        let mesh = on(vec![2, 4, 4], Wrap::Cubes(4));
        let arm = seconds(&collective("all-reduce", b, (0..32).collect()), &mesh);
        assert!(arm > 2.0 * 31.0 / 32.0 * b as f64 / 3.0 / 2e9 && arm < 2.0 * b as f64 / 1e9);
    }

    #[test]
    fn hops_are_per_axis_not_per_chip() {
        // 2048 v4 chips (8x16x16 torus), a 16 KiB all-reduce over all of them: 2 (7 + 15 +
        // 15) = 74 steps of 1 us plus the bytes, not 2 x 2047 steps.
        let mut cfg = TpuConfig::v4();
        cfg.slice = Some(Torus::slice(2048, 3, Wrap::Cubes(4)));
        let t = seconds(&collective("all-reduce", 16 << 10, (0..2048).collect()), &cfg);
        assert!(t > 74e-6 && t < 75e-6, "{t}");
        // Strided ids, every 8th: the y ring of 16: a ring of 16 with one-link steps.
        let y =
            seconds(&collective("all-reduce", 16 << 10, (0..16).map(|i| i * 8).collect()), &cfg);
        assert!(y > 30e-6 && y < 31e-6, "{y}");
    }

    #[test]
    fn permutes_load_the_busiest_link() {
        let cfg = on(vec![4, 4, 4], Wrap::Cubes(4));
        // A shift by one along x on every chip: B / W.
        let pairs: Vec<u32> = (0..64u32).flat_map(|i| [i, (i & !3) | ((i + 1) & 3)]).collect();
        let t = seconds(&collective("collective-permute", 1_000_000, pairs), &cfg);
        assert!(close(t, 1e-3), "{t}");
        // A shift by two: every route crosses two links, each link carries two routes.
        let pairs: Vec<u32> = (0..64u32).flat_map(|i| [i, (i & !3) | ((i + 2) & 3)]).collect();
        let t2 = seconds(&collective("collective-permute", 1_000_000, pairs), &cfg);
        assert!(close(t2, 2e-3), "{t2}");
    }

    #[test]
    fn groups_across_slices_add_the_dcn_share() {
        let mut cfg = on(vec![8, 1, 1], Wrap::FullAxis(8));
        // 16 chips, 2 slices of 8.
        cfg.chips_per_slice = Some(8);
        let within = collective("all-reduce", 8_000_000, (0..8).collect());
        assert!(close(seconds(&within, &cfg), 7e-3));
        // The same 8 chips' ring plus the DCN all-reduce of 1 MB per chip between the two
        // slices at 1e8 B/s (4e8 per host of 4 chips): 2 * 1/2 * 1e6 / 1e8 = 10 ms.
        let across = collective("all-reduce", 8_000_000, (0..16).collect());
        assert!(close(seconds(&across, &cfg), 7e-3 + 10e-3), "{}", seconds(&across, &cfg));
        // One chip per slice: the whole buffer crosses the DCN.
        let pair = collective("all-reduce", 8_000_000, vec![3, 11]);
        assert!(close(seconds(&pair, &cfg), 80e-3));
        // A permute is on the DCN only when a pair crosses slices.
        let inside = collective("collective-permute", 1_000_000, vec![0, 1, 1, 2]);
        let crossing = collective("collective-permute", 1_000_000, vec![7, 8]);
        assert!(close(seconds(&inside, &cfg), 1e-3));
        assert!(close(seconds(&crossing, &cfg), 10e-3));
    }
}
