//! Every engine behind the one interface, against XLA: each sharded corpus program
//! (XLA's outputs on its inputs, per-output tolerances) compiled by every engine on one
//! device and on the devices of its shardings, run on the global inputs, compared.

use hlo_engine::{ENGINES, EngineError, Options, PartialSums};
use hlo_tests::{SHARDED_CASES, ShardedCase, sharded_case};

#[test]
fn every_engine_on_one_and_n_devices_matches_xla() {
    let mut failures = Vec::new();
    let mut runs = 0;
    for name in SHARDED_CASES {
        let ShardedCase { module, inputs, expected, tolerances, .. } = sharded_case(name);
        let checked = hlo_driver::check(module, None).expect("the corpus module checks");
        let n = hlo_spmd::device_count(&checked).max(1) as usize;
        for engine_name in ENGINES {
            let engine = hlo_engine::by_name(engine_name).expect("a known engine");
            assert_eq!(engine.name(), engine_name);
            for devices in [None, Some(n)] {
                let what = format!("{name} on {engine_name}, {devices:?} devices");
                // Exact partial sums on N devices: XLA's outputs are the one-device sums.
                let opts = Options::default().with_partial_sums(PartialSums::Exact);
                let exe = match engine.compile(&checked, devices, &opts) {
                    Ok(exe) => exe,
                    Err(e) => {
                        failures.push(format!("{what}: compile: {e}"));
                        continue;
                    }
                };
                assert_eq!(exe.engine(), engine_name);
                assert_eq!(exe.devices(), devices.unwrap_or(1), "{what}");
                assert_eq!(exe.plan().is_some(), devices.is_some(), "{what}");
                match exe.run(&inputs) {
                    Ok(out) => {
                        runs += 1;
                        if let Err(e) = hlo_tests::compare_outputs(&out, &expected, &tolerances) {
                            failures.push(format!("{what}:\n{e}"));
                        }
                    }
                    Err(e) => failures.push(format!("{what}: run: {e}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(runs, SHARDED_CASES.len() * ENGINES.len() * 2);
}

/// Bad inputs are a run error naming what is wrong, on every engine and device count;
/// a module with a shardings' device count other than asked for is a located compile error.
#[test]
fn engines_report_bad_inputs_and_device_counts_as_errors() {
    let ShardedCase { module, inputs, .. } = sharded_case(SHARDED_CASES[0]);
    let checked = hlo_driver::check(module, None).expect("checks");
    let n = hlo_spmd::device_count(&checked).max(1) as usize;
    for engine_name in ENGINES {
        let engine = hlo_engine::by_name(engine_name).expect("a known engine");
        for devices in [None, Some(n)] {
            let exe = engine.compile(&checked, devices, &Options::default()).expect("compiles");
            let err = exe.run(&inputs[1..]).map(|_| ()).expect_err("one input short");
            assert!(matches!(err, EngineError::Run(_)), "{engine_name}: {err:?}");
        }
        let err = engine.compile(&checked, Some(n + 1), &Options::default()).map(|_| ());
        let err = err.expect_err("the wrong device count");
        assert!(err.to_string().contains(&format!("{n} devices")), "{engine_name}: {err}");
    }
}
