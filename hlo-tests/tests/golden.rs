//! Golden suites: `cases/<suite>/*.hlo` → `cases/snapshots/<suite>@<case>.snap`.
//! Update with `INSTA_UPDATE=always cargo test -p hlo-tests --test golden`, review with `git diff`.

use insta::{Settings, assert_snapshot, glob};

fn run_suite(suite: &str) {
    let misplaced = std::sync::Mutex::new(Vec::new());
    let mut s = Settings::clone_current();
    s.set_snapshot_path("../cases/snapshots");
    s.set_prepend_module_to_snapshot(false);
    s.set_omit_expression(true);
    s.bind(|| {
        glob!("../cases", &format!("{suite}/*.hlo"), |path| {
            let src = std::fs::read_to_string(path).expect("case file is readable UTF-8");
            let name = path.file_name().and_then(|n| n.to_str()).expect("case names are UTF-8");
            let out = hlo_tests::run_case(suite, name, &src);
            // `!!` marks a failed harness check (e.g. a partitioned program that computes
            // something else): never a snapshot to accept.
            if let Some(l) = out.lines().find(|l| l.starts_with("!!")) {
                misplaced.lock().expect("lock").push(format!("{name}: {l}"));
            }
            if let Some((line, col)) = hlo_tests::expected_error_at(&src) {
                let want = format!("{name}:{line}:{col}: error:");
                if !out.starts_with(&want) {
                    let got = out.lines().next().unwrap_or("").to_string();
                    misplaced
                        .lock()
                        .expect("lock")
                        .push(format!("{name}: expected `{want}`, got `{got}`"));
                }
            }
            let mut per_file = Settings::clone_current();
            per_file.set_snapshot_suffix(path.file_stem().and_then(|s| s.to_str()).expect("stem"));
            per_file.bind(|| assert_snapshot!(suite, out));
        });
    });
    let misplaced = misplaced.into_inner().expect("lock");
    assert!(
        misplaced.is_empty(),
        "{} cases report their first error elsewhere or fail a check:\n{}",
        misplaced.len(),
        misplaced.join("\n")
    );
}

#[test]
fn parse() {
    run_suite("parse");
}

#[test]
fn verify() {
    run_suite("verify");
}

#[test]
fn shape() {
    run_suite("shape");
}

#[test]
fn dynamic() {
    run_suite("dynamic");
}

#[test]
fn opt() {
    run_suite("opt");
}

#[test]
fn sharding() {
    run_suite("sharding");
}

#[test]
fn fusion() {
    run_suite("fusion");
}

#[test]
fn spmd() {
    run_suite("spmd");
}
