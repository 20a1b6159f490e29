//! The Python package `hloc` (tools/python): its unittest suite, tools/python/tests, run
//! by the XLA oracle's Python (numpy, ml_dtypes, JAX) on the native module and the
//! `hloc` binary of this very build.
//!
//! Why here: a test of hlo-tools gets its binary built (`CARGO_BIN_EXE_hloc`), and
//! hloc-python is a dev-dependency of hlo-tools (a cycle cargo allows for
//! dev-dependencies: hloc-python depends on hlo-tools' library), so cargo builds the
//! native module, hloc-python's cdylib `libhloc_python.so`, before this test runs too,
//! whether `cargo test --workspace` or `cargo test -p hlo-tools`. Nothing is built
//! here: no nested cargo or pip. The cdylib is copied as `hloc/_hloc.abi3.so` beside a
//! copy of the package's Python sources in a temporary directory, which goes on
//! `PYTHONPATH`.
//!
//! Without the oracle's venv the test says SKIPPED; under `CI=true` it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Instant, SystemTime};

/// The native module this build made: `libhloc_python.so` in the target directory of
/// this test binary (`target/<profile>/deps`, or uplifted beside it), the newest if both.
fn native_module() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let deps = exe.parent().expect("target/<profile>/deps");
    let candidates = [deps.to_path_buf(), deps.parent().expect("target/<profile>").to_path_buf()];
    let name =
        format!("{}hloc_python{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    candidates
        .iter()
        .map(|d| d.join(&name))
        .filter_map(|p| {
            let modified = p.metadata().and_then(|m| m.modified()).ok()?;
            Some((modified, p))
        })
        .max_by_key(|(t, _): &(SystemTime, PathBuf)| *t)
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "{name} not found beside {} (hloc-python is a dev-dependency of hlo-tools: cargo builds it for this test)",
                deps.display()
            )
        })
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the package directory");
    for entry in std::fs::read_dir(from).expect("read the package sources") {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        if path.is_dir() {
            if entry.file_name() != "__pycache__" {
                copy_dir(&path, &to.join(entry.file_name()));
            }
        } else {
            std::fs::copy(&path, to.join(entry.file_name())).expect("copy a package file");
        }
    }
}

#[test]
fn python_package_unittests() {
    let Some(python) = hlo_tests::oracle_python(module_path!()) else {
        return;
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let package = root.join("python");
    let dir_guard =
        tempfile::Builder::new().prefix("hloc-python-").tempdir().expect("a temporary directory");
    let dir = dir_guard.path();
    copy_dir(&package.join("hloc"), &dir.join("hloc"));
    let so = native_module();
    std::fs::copy(&so, dir.join("hloc/_hloc.abi3.so")).expect("copy the native module");
    let start = Instant::now();
    let out = Command::new(&python)
        .args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(package.join("tests"))
        .args(["-t"])
        .arg(package.join("tests"))
        .env("PYTHONPATH", dir)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("HLOC_BIN", env!("CARGO_BIN_EXE_hloc"))
        .env("HLOC_SHARED", hlo_tests::shared_dir())
        .env("HLOC_CASES", root.join("../hlo-tests/cases"))
        .output()
        .expect("the oracle's python runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    println!(
        "python tests: {:.1} s with {} ({})",
        start.elapsed().as_secs_f64(),
        python.display(),
        so.display()
    );
    assert!(out.status.success(), "the Python package's tests failed (output above)");
    // unittest ends with `OK` (or `OK (skipped=N)`): a run of no test is a failure.
    let ran = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split_whitespace().next()?.parse::<usize>().ok());
    assert!(ran.is_some_and(|n| n >= 20), "too few Python tests ran: {ran:?}");
}
