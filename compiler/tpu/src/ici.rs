//! Collectives on the inter-chip interconnect: the time of one collective from its
//! algorithm, group size and buffer, on a preset's links ([`crate::config::Ici`]).
//!
//! A group of `g` chips is a ring along torus axes, driven in both directions (two links
//! per chip: `2 x link` bytes/s), one step per neighbour hand-off costing
//! `step_latency_s`. For a buffer of `B` bytes per chip:
//! - all-reduce (reduce-scatter then all-gather): `2(g-1)/g * B / 2link + 2(g-1) steps`;
//! - all-gather (`B` = result) and reduce-scatter (`B` = operand): `(g-1)/g * B / 2link +
//!   (g-1) steps`;
//! - all-to-all: each chip sends `(g-1)/g * B` over an average of `g/4` hops:
//!   `(g-1)/g * B * max(1, g/4) / 2link + (g-1) steps`;
//! - collective-permute: one hop, one direction: `B / link + 1 step`.
//!
//! Not modeled: groups spanning several torus axes driving more than two links at once
//! (a 3D torus could run three rings), and contention between concurrent collectives
//! (they are serialized on the ICI).

use crate::config::Ici;

/// A collective's traffic: its kind, each chip's buffer (operands; the result of an
/// all-gather) and the size of its device groups.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collective {
    pub kind: &'static str,
    pub bytes: u64,
    pub group: u64,
}

/// Seconds one collective takes.
pub fn seconds(c: &Collective, ici: &Ici) -> f64 {
    let g = c.group as f64;
    if c.group <= 1 || ici.link_bytes_per_s <= 0.0 {
        return 0.0;
    }
    let b = c.bytes as f64;
    let ring = 2.0 * ici.link_bytes_per_s;
    let steps = g - 1.0;
    let frac = (g - 1.0) / g;
    match c.kind {
        "all-reduce" => 2.0 * frac * b / ring + 2.0 * steps * ici.step_latency_s,
        "all-gather" | "reduce-scatter" => frac * b / ring + steps * ici.step_latency_s,
        "all-to-all" => frac * b * (g / 4.0).max(1.0) / ring + steps * ici.step_latency_s,
        "collective-permute" => b / ici.link_bytes_per_s + ici.step_latency_s,
        _ => frac * b / ring + steps * ici.step_latency_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_all_reduce_moves_twice_the_gather() {
        let ici =
            Ici { topology: "ring", links_per_chip: 2, link_bytes_per_s: 1e9, step_latency_s: 0.0 };
        let ar = seconds(&Collective { kind: "all-reduce", bytes: 8_000_000, group: 8 }, &ici);
        let ag = seconds(&Collective { kind: "all-gather", bytes: 8_000_000, group: 8 }, &ici);
        // 2 (g-1)/g of 8 MB over 2 GB/s = 7 ms.
        assert!((ar - 7e-3).abs() < 1e-9, "{ar}");
        assert!((ar - 2.0 * ag).abs() < 1e-12);
        assert_eq!(seconds(&Collective { kind: "all-reduce", bytes: 100, group: 1 }, &ici), 0.0);
    }
}
