//! Conformance over real modules: every `.hlo` module of `../shared/corpus`,
//! `../shared/bench` and `../shared/external-hlo` parses, verifies, and prints to a
//! fixpoint of parse+print.

fn check_dir(sub: &str) -> (usize, usize) {
    let dir = hlo_tests::shared_dir().join(sub);
    let (mut modules, mut instrs, mut failures) = (0, 0, Vec::new());
    for path in hlo_tests::hlo_files(&dir) {
        let src = std::fs::read_to_string(&path).expect("corpus files are UTF-8");
        for (k, module) in hlo_tests::split_modules(&src).iter().enumerate() {
            let name = format!("{}#{k}", path.display());
            match hlo_tests::check_round_trip(module, &name) {
                Ok(n) => {
                    modules += 1;
                    instrs += n;
                }
                Err(e) => failures.push(format!("{name}: {e}")),
            }
        }
    }
    println!("{sub}: {modules} modules ({instrs} instructions) parse, verify and round-trip");
    assert!(
        failures.is_empty(),
        "{} of {} modules in {sub} fail:\n{}",
        failures.len(),
        modules + failures.len(),
        failures.join("\n")
    );
    (modules, instrs)
}

#[test]
fn corpus_round_trips() {
    let (n, _) = check_dir("corpus");
    assert_eq!(n, 137, "the public corpus has 137 .hlo files");
}

#[test]
fn bench_round_trips() {
    let (n, _) = check_dir("bench");
    assert!(n >= 30);
}

#[test]
fn external_hlo_round_trips() {
    let (n, _) = check_dir("external-hlo");
    assert_eq!(n, 221, "external-hlo holds 221 modules");
}
