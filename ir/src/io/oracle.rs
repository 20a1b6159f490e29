//! The XLA oracle beside the project (`../shared/xla-oracle`): where its Python is, and
//! the bench training steps' inputs and XLA outputs, which it regenerates on demand.

use std::path::{Path, PathBuf};

/// The oracle's Python: `$ORACLE_PYTHON`, else the venv `setup.sh` makes
/// (`~/.cache/xla-oracle-venv`), if it exists.
pub fn python() -> Option<PathBuf> {
    std::env::var_os("ORACLE_PYTHON").map(PathBuf::from).or_else(|| {
        let p = PathBuf::from(std::env::var_os("HOME")?).join(".cache/xla-oracle-venv/bin/python");
        p.exists().then_some(p)
    })
}

/// `../shared/bench` with inputs (`NAME.inputs.npz`) and XLA's outputs
/// (`NAME.outputs.npz`), in `dir`: generated there by the oracle the first time (about
/// 20 s). `None` when they are missing and the oracle cannot make them.
pub fn bench_inputs(shared: &Path, dir: &Path) -> Option<PathBuf> {
    let ready = |d: &Path| d.join("train_transformer_sgd.outputs.npz").exists();
    if ready(dir) {
        return Some(dir.to_path_buf());
    }
    let py = python()?;
    eprintln!("note: generating the bench inputs into `{}` (about 20 s)...", dir.display());
    let ok = std::process::Command::new(py)
        .arg(shared.join("xla-oracle/gen_corpus.py"))
        .arg(dir)
        .args(["--set", "bench", "--cases-file"])
        .arg(shared.join("xla-oracle/bench_cases.py"))
        .stdout(std::process::Stdio::null())
        .status()
        .ok()?
        .success();
    (ok && ready(dir)).then(|| dir.to_path_buf())
}
