//! How much loop-invariant code motion saves on the interpreter: a loop whose body
//! recomputes `tanh(dot(w, w))` (64x64x64) every iteration, run before and after the
//! default pipeline. Ignored by default (it measures, asserts only equal outputs):
//! `cargo test -p hlo-tests --test licm_timing -- --ignored --nocapture`.

use std::time::Instant;

use hlo_interp as interp;

use hlo_passes as passes;

use hlo_interp::seeded;

fn module(trips: u64) -> hlo_ir::Module {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("cases/bench/licm_big.hlo.in");
    let src = std::fs::read_to_string(path).expect("readable").replace("TRIPS", &trips.to_string());
    hlo_check::parse(&src)
        .unwrap_or_else(|d| panic!("{}", d.render(&src, "licm_big", false)))
        .into_inner()
}

#[test]
#[ignore]
fn licm_timing() {
    for (trips, run_original) in [(1_000u64, true), (10_000, true), (1_000_000, false)] {
        let m = module(trips);
        let mut opt = m.clone();
        passes::default_pipeline().run(&mut opt).expect("optimizes");
        let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 1).expect("inputs");
        let t = Instant::now();
        let after = interp::run(&opt, &inputs).expect("optimized runs");
        let t_after = t.elapsed().as_secs_f64();
        if run_original {
            let t = Instant::now();
            let before = interp::run(&m, &inputs).expect("original runs");
            let t_before = t.elapsed().as_secs_f64();
            assert_eq!(before, after, "{trips} trips: outputs differ");
            println!("{trips:>9} trips: original {t_before:.2} s, after LICM {t_after:.2} s");
        } else {
            println!("{trips:>9} trips: after LICM {t_after:.2} s (original not run)");
        }
    }
}
