//! Collectives on the inter-chip interconnect, and across slices on the data-center
//! network: the time of one collective from its algorithm, its device groups and buffer, on
//! a preset's links ([`crate::config::Ici`], [`crate::config::Dcn`]).
//!
//! A group of `g` chips within one slice is a ring along torus axes, driven in both
//! directions (two links per chip: `2 x link` bytes/s), one step per neighbour hand-off
//! costing `step_latency_s`. For a buffer of `B` bytes per chip:
//! - all-reduce (reduce-scatter then all-gather): `2(g-1)/g * B / 2link + 2(g-1) steps`;
//! - all-gather (`B` = result) and reduce-scatter (`B` = operand): `(g-1)/g * B / 2link +
//!   (g-1) steps`;
//! - all-to-all: each chip sends `(g-1)/g * B` over an average of `g/4` hops:
//!   `(g-1)/g * B * max(1, g/4) / 2link + (g-1) steps`;
//! - collective-permute: one hop, one direction: `B / link + 1 step`.
//!
//! A group spanning `s` slices with `k` chips in each runs hierarchically, as XLA and
//! MaxText arrange multi-slice data parallelism: the ICI part among the `k` chips of a
//! slice on the whole buffer, and the DCN part among the `s` slices on each chip's `B/k`
//! share, a ring whose every chip sends at its share of the host's interface
//! (`host_bytes_per_s / chips_per_host`): all-reduce = ICI all-reduce of `B` + DCN
//! all-reduce of `B/k`; all-gather and reduce-scatter likewise; all-to-all sends the
//! `(s-1)/s` of `B` bound for other slices over the DCN; a collective-permute with a pair
//! crossing slices sends `B` over the DCN.
//!
//! Not modeled: groups spanning several torus axes driving more than two links at once
//! (a 3D torus could run three rings), and contention between concurrent collectives
//! (they are serialized on the ICI).

use crate::config::{Dcn, Ici, TpuConfig};

/// A collective's traffic: its kind, each chip's buffer (operands; the result of an
/// all-gather) and the size of its device groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    pub kind: &'static str,
    pub bytes: u64,
    pub group: u64,
    /// The device ids of the first group (every group of a collective has the same
    /// shape); for a collective-permute, its pairs flattened (source, target, ...).
    pub members: Vec<u32>,
}

/// Seconds one collective takes on `cfg`'s ICI, and on its DCN when the group spans
/// slices (`cfg.chips_per_slice`).
pub fn seconds(c: &Collective, cfg: &TpuConfig) -> f64 {
    let Some(per_slice) = cfg.chips_per_slice.filter(|&n| n > 0) else {
        return on_ici(c.kind, c.bytes as f64, c.group, &cfg.ici);
    };
    let slice = |d: &u32| u64::from(*d) / per_slice;
    if c.kind == "collective-permute" {
        let crosses = c.members.chunks(2).any(|p| p.len() == 2 && slice(&p[0]) != slice(&p[1]));
        return if crosses {
            on_dcn(c.kind, c.bytes as f64, 2, &cfg.dcn)
        } else {
            on_ici(c.kind, c.bytes as f64, c.group, &cfg.ici)
        };
    }
    let mut slices: Vec<u64> = c.members.iter().map(slice).collect();
    slices.sort_unstable();
    slices.dedup();
    let s = slices.len() as u64;
    if s <= 1 {
        return on_ici(c.kind, c.bytes as f64, c.group, &cfg.ici);
    }
    let k = (c.group / s).max(1);
    let b = c.bytes as f64;
    // Bytes per chip on each network: an all-to-all keeps 1/s of B inside the slice and
    // sends the rest across; the others move B on the ICI and each chip's B/k share across.
    let (ici_bytes, dcn_bytes) =
        if c.kind == "all-to-all" { (b / s as f64, b) } else { (b, b / k as f64) };
    on_ici(c.kind, ici_bytes, k, &cfg.ici) + on_dcn(c.kind, dcn_bytes, s, &cfg.dcn)
}

/// One collective within a slice: a ring of `group` chips on the ICI.
fn on_ici(kind: &str, b: f64, group: u64, ici: &Ici) -> f64 {
    let g = group as f64;
    if group <= 1 || ici.link_bytes_per_s <= 0.0 {
        return 0.0;
    }
    let ring = 2.0 * ici.link_bytes_per_s;
    let steps = g - 1.0;
    let frac = (g - 1.0) / g;
    match kind {
        "all-reduce" => 2.0 * frac * b / ring + 2.0 * steps * ici.step_latency_s,
        "all-gather" | "reduce-scatter" => frac * b / ring + steps * ici.step_latency_s,
        "all-to-all" => frac * b * (g / 4.0).max(1.0) / ring + steps * ici.step_latency_s,
        "collective-permute" => b / ici.link_bytes_per_s + ici.step_latency_s,
        _ => frac * b / ring + steps * ici.step_latency_s,
    }
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

    fn collective(kind: &'static str, bytes: u64, members: Vec<u32>) -> Collective {
        Collective { kind, bytes, group: members.len() as u64, members }
    }

    fn ring() -> TpuConfig {
        let mut cfg = TpuConfig::v4();
        cfg.ici =
            Ici { topology: "ring", links_per_chip: 2, link_bytes_per_s: 1e9, step_latency_s: 0.0 };
        cfg.dcn = Dcn { host_bytes_per_s: 4e8, chips_per_host: 4, step_latency_s: 0.0 };
        cfg
    }

    #[test]
    fn ring_all_reduce_moves_twice_the_gather() {
        let cfg = ring();
        let ar = seconds(&collective("all-reduce", 8_000_000, (0..8).collect()), &cfg);
        let ag = seconds(&collective("all-gather", 8_000_000, (0..8).collect()), &cfg);
        // 2 (g-1)/g of 8 MB over 2 GB/s = 7 ms.
        assert!((ar - 7e-3).abs() < 1e-9, "{ar}");
        assert!((ar - 2.0 * ag).abs() < 1e-12);
        assert_eq!(seconds(&collective("all-reduce", 100, vec![3]), &cfg), 0.0);
    }

    #[test]
    fn groups_across_slices_add_the_dcn_share() {
        let mut cfg = ring();
        // 16 chips, 2 slices of 8.
        cfg.chips_per_slice = Some(8);
        let within = collective("all-reduce", 8_000_000, (0..8).collect());
        assert!((seconds(&within, &cfg) - 7e-3).abs() < 1e-9);
        // The same 8 chips' ring plus the DCN all-reduce of 1 MB per chip between the two
        // slices at 1e8 B/s (4e8 per host of 4 chips): 2 * 1/2 * 1e6 / 1e8 = 10 ms.
        let across = collective("all-reduce", 8_000_000, (0..16).collect());
        assert!((seconds(&across, &cfg) - 7e-3 - 10e-3).abs() < 1e-9, "{}", seconds(&across, &cfg));
        // One chip per slice: the whole buffer crosses the DCN.
        let pair = collective("all-reduce", 8_000_000, vec![3, 11]);
        assert!((seconds(&pair, &cfg) - 80e-3).abs() < 1e-9);
        // A permute is on the DCN only when a pair crosses slices.
        let inside = collective("collective-permute", 1_000_000, vec![0, 1, 1, 2]);
        let crossing = collective("collective-permute", 1_000_000, vec![7, 8]);
        assert!((seconds(&inside, &cfg) - 1e-3).abs() < 1e-9);
        assert!((seconds(&crossing, &cfg) - 10e-3).abs() < 1e-9);
    }
}
