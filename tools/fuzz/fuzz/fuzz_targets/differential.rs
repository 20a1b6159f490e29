//! The fuzzer's bytes choose a module (`hlo_fuzz::generate` on `Rng::from_bytes`: every
//! byte string is a valid module), which then runs on every engine against the reference
//! interpreter. Any disagreement, error or panic aborts with the module and the finding.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks edge values; the rest choose the program and its inputs.
    let (edge, rest) = match data.split_first() {
        Some((b, rest)) => (b & 1 == 1, rest),
        None => (false, data),
    };
    let cfg = hlo_fuzz::Config { edge_values: edge, ..hlo_fuzz::Config::default() };
    let g = hlo_fuzz::generate(&mut hlo_fuzz::Rng::from_bytes(rest), &cfg);
    let seed = rest.iter().fold(0u64, |h, &b| h.rotate_left(5) ^ b as u64);
    let r = hlo_fuzz::differential(&g, seed, &hlo_fuzz::Engine::OTHERS, cfg.devices);
    if let Some(f) = r.findings.first() {
        panic!(
            "{} {}: {}\n--- module (inputs: seed {seed}{}) ---\n{}\n--- sharded ---\n{}",
            f.engine.name(),
            f.kind,
            f.detail,
            if edge { ", edge values" } else { "" },
            g.text,
            g.sharded.as_deref().unwrap_or("")
        );
    }
});
