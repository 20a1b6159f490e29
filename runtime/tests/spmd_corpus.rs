//! The multi-device runtime on the sharded corpus cases: each case is propagated,
//! partitioned for 8 devices, optimized and compiled once with the JIT, and run by 8
//! device threads exchanging data through the collective fabric; the reassembled outputs
//! must reproduce XLA's `NAME.outputs.npz` and be identical run to run.

/// The device count a module's shardings name.
fn devices(m: &hlo_ir::Module) -> usize {
    hlo_spmd::device_count(m).max(1) as usize
}

#[test]
fn runtime_on_8_devices_reproduces_xla() {
    let mut failures = Vec::new();
    for name in hlo_tests::SHARDED_CASES {
        let hlo_tests::ShardedCase { global, inputs, expected, tolerances: tols, .. } =
            hlo_tests::sharded_case(name);
        let global = hlo_driver::check(global, None).expect("the propagated module checks");
        let prog =
            hlo_runtime::SpmdProgram::compile(&global, devices(&global), &Default::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
        match prog.run(&inputs) {
            Ok(actual) => {
                if let Err(e) = hlo_tests::compare_outputs(&actual, &expected, &tols) {
                    failures.push(format!("{name}:\n{e}"));
                }
                let again = prog.run(&inputs).expect("second run");
                if again.iter().zip(&actual).any(|(a, b)| a.bytes() != b.bytes()) {
                    failures.push(format!("{name}: a second run gave different bits"));
                }
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every golden `spmd/` case (halo exchanges, uneven shards, gather/scatter, ...) on N
/// JIT devices against the module on the interpreter, one device.
#[test]
fn runtime_runs_the_golden_spmd_cases() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../hlo-tests/cases/spmd");
    let tol = hlo_io::compare::Tolerance { rtol: 1e-5, atol: 1e-5 };
    let mut failures = Vec::new();
    let files = hlo_tests::hlo_files(&dir);
    assert!(files.len() >= 10, "only {} spmd cases", files.len());
    for file in files {
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?").to_string();
        let src = std::fs::read_to_string(&file).expect("case");
        let m = hlo_driver::parse(&src).expect("parses");
        let global = hlo_tests::propagated(&m).expect("propagates");
        let global = hlo_driver::check(global, None).expect("the propagated module checks");
        let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 7).expect("inputs");
        let expected = hlo_interp::run(&m, &inputs).expect("one device");
        let prog =
            match hlo_runtime::SpmdProgram::compile(&global, devices(&global), &Default::default())
            {
                Ok(p) => p,
                Err(e) => {
                    failures.push(format!("{name}: {e}"));
                    continue;
                }
            };
        match prog.run(&inputs) {
            Ok(actual) => {
                for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
                    if let Err(d) = hlo_io::compare::compare(a, e, tol) {
                        failures.push(format!("{name}: o{i}: {d}"));
                    }
                }
            }
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Every runnable corpus case with its parameters sharded over 4 devices
/// ([`hlo_tests::shard_params_alternately`]) on 4 JIT devices (loops and conditionals
/// included, with collectives inside their bodies) against the interpreter on one, with
/// exact partial sums (a bf16 contraction split where nobody would split it rounds each
/// partial sum when summed in bf16, as XLA sums it).
#[test]
fn runtime_runs_every_corpus_case_on_4_devices() {
    let (mut ok, mut failures) = (0, Vec::new());
    for hlo_tests::ArbitraryCase { name, module: m, global } in
        hlo_tests::alternately_sharded_corpus(4)
    {
        let Ok(global) = global else { continue };
        let Some((inputs, expected, tols)) = hlo_tests::seeded_reference(&name, &m) else {
            continue;
        };
        let opts = hlo_runtime::CompileOptions::default().with_exact_partial_sums(true);
        let Ok(global) = hlo_driver::check(global, None) else {
            failures.push(format!("{name}: the propagated module fails the checks"));
            continue;
        };
        let prog = match hlo_runtime::SpmdProgram::compile(&global, devices(&global), &opts) {
            Ok(p) => p,
            Err(e) if e.is_unsupported() => continue,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        match prog.run(&inputs) {
            Ok(actual) => match hlo_tests::compare_outputs(&actual, &expected, &tols) {
                Ok(()) => ok += 1,
                Err(e) => failures.push(format!("{name}:\n{e}")),
            },
            Err(e) => failures.push(format!("{name}: {e}")),
        }
    }
    println!("{ok} corpus cases on 4 JIT devices match the interpreter");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(ok >= 30, "only {ok} cases ran");
}

/// A shard_map (a manual region, as JAX writes it: `hlo-tests/cases/manual/`) on 4 JIT
/// devices against the same partitioned program on 4 interpreter devices (which
/// `hlo-tests/tests/spmd_manual.rs` checks against the global computation and XLA).
#[test]
fn runtime_runs_a_shard_map() {
    // As JAX writes it with GSPMD shardings, and with Shardy (its default).
    for name in ["shard_map_psum.hlo", "shard_map_psum_sdy.hlo"] {
        runs_on_4_jit_devices(name);
    }
}

fn runs_on_4_jit_devices(name: &str) {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../hlo-tests/cases/manual")
        .join(name);
    let src = std::fs::read_to_string(&file).expect("case");
    let m = hlo_driver::parse(&src).expect("parses");
    let global = hlo_tests::propagated(&m).expect("propagates");
    let plan = hlo_spmd::devices::plan(&global).expect("partitions");
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 5).expect("inputs");
    let expected = hlo_devices::run_interp(&plan, &inputs).expect("interpreter devices");
    let global = hlo_driver::check(global, None).expect("the propagated module checks");
    let prog = hlo_runtime::SpmdProgram::compile(&global, devices(&global), &Default::default())
        .expect("compiles");
    assert_eq!(prog.devices(), 4);
    let actual = prog.run(&inputs).expect("runs");
    assert_eq!(actual.len(), expected.len());
    let tol = hlo_io::compare::Tolerance { rtol: 1e-5, atol: 1e-5 };
    for (i, (a, e)) in actual.iter().zip(&expected).enumerate() {
        hlo_io::compare::compare(a, e, tol).unwrap_or_else(|d| panic!("{name}: o{i}: {d}"));
    }
}
