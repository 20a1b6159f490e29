//! The cost analysis against XLA's on every corpus case. `NAME.json`'s
//! `xla_cost_analysis` is what `compiled.cost_analysis()` reports for XLA's own optimized
//! module, which is `NAME.opt.hlo`:
//! - counted on that same module, our FLOPs and transcendentals must be within 2% of XLA's
//!   on every case (this checks the rules);
//! - counted on the module the TPU backend reports on (`NAME.hlo` after our default
//!   pipeline), the transcendentals and the MXU FLOPs (dot and convolution) must be within
//!   2% of those of XLA's module on every single-device case. The elementwise FLOPs are
//!   printed, not held: XLA CPU's optimizer adds work ours does not (bf16 arithmetic
//!   widened to f32 with a convert on each side, rng-bit-generator expanded to threefry
//!   bit operations, reduce-window and sort rewrites) and removes some ours keeps.
//!
//! Bytes accessed are printed beside XLA's (each fusion pass keeps different
//! intermediates on chip). Sharded cases are counted per partition by XLA (its module is
//! the SPMD-partitioned one), so only the first check applies to them.

use hlo_analysis::cost;
use hlo_ir::{Module, Op};

fn xla_cost(name: &str) -> Option<(f64, f64, f64)> {
    let text = std::fs::read_to_string(
        hlo_tests::shared_dir().join("corpus").join(format!("{name}.json")),
    )
    .ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let c = &v["xla_cost_analysis"];
    // A key XLA leaves out is a zero.
    let get = |k: &str| c[k].as_f64().unwrap_or(0.0);
    c.is_object().then(|| (get("flops"), get("transcendentals"), get("bytes accessed")))
}

fn close(ours: f64, xla: f64) -> bool {
    (ours - xla).abs() <= 0.02 * xla.abs().max(1.0)
}

/// FLOPs of the dots and convolutions (what the MXUs do), wherever they are.
fn mxu_flops(m: &Module) -> f64 {
    let mut f = 0.0;
    for id in m.comp_ids() {
        let comp = m.comp(id);
        for n in comp.nodes() {
            if matches!(comp.instr(n).op, Op::Dot { .. } | Op::Convolution(_)) {
                f += cost::instr_cost(m, id, n).flops;
            }
        }
    }
    f
}

#[test]
fn flops_and_transcendentals_match_xla_cost_analysis() {
    let dir = hlo_tests::shared_dir().join("corpus");
    let (mut failures, mut n) = (vec![], 0);
    println!(
        "{:<28} {:>11} {:>11} {:>11} {:>9} {:>9} {:>11} {:>11} {:>9} {:>10} {:>10}",
        "case",
        "XLA flops",
        "on XLA's",
        "on ours",
        "XLA tr",
        "ours tr",
        "XLA MXU",
        "ours MXU",
        "ew diff",
        "bytes",
        "XLA bytes"
    );
    for name in hlo_tests::corpus_case_names() {
        let Some((xf, xt, xb)) = xla_cost(&name) else { continue };
        let Some(ours_m) = hlo_tests::optimized_module(&dir.join(format!("{name}.hlo"))) else {
            continue;
        };
        let xla_m = hlo_check::parse(
            &std::fs::read_to_string(dir.join(format!("{name}.opt.hlo")))
                .expect("every case has its .opt.hlo"),
        )
        .expect("XLA's module parses");
        let (theirs, ours) = (cost::module_cost(&xla_m), cost::module_cost(&ours_m));
        let (xla_mxu, our_mxu) = (mxu_flops(&xla_m), mxu_flops(&ours_m));
        let ew_diff = (ours.flops - our_mxu) - (theirs.flops - xla_mxu);
        println!(
            "{name:<28} {xf:>11.0} {:>11.0} {:>11.0} {xt:>9.0} {:>9.0} {xla_mxu:>11.0} {our_mxu:>11.0} {ew_diff:>+9.0} {:>10.0} {xb:>10.0}",
            theirs.flops, ours.flops, ours.transcendentals, ours.bytes_accessed
        );
        if !close(theirs.flops, xf) || !close(theirs.transcendentals, xt) {
            failures.push(format!(
                "{name}: on XLA's module {} flops {} transcendentals, XLA says {xf} / {xt}",
                theirs.flops, theirs.transcendentals
            ));
        }
        if !name.starts_with("sharded")
            && (!close(ours.transcendentals, xt) || !close(our_mxu, xla_mxu))
        {
            failures.push(format!("{name}: on our module {} transcendentals and {our_mxu} MXU flops, XLA's module {xt} / {xla_mxu}", ours.transcendentals));
        }
        n += 1;
    }
    assert!(n >= 40, "only {n} corpus cases with a cost analysis");
    assert!(
        failures.is_empty(),
        "{} of {n} differ by more than 2%:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
