//! The golden-file harness: one function per suite turns a case file into the text that
//! is snapshotted. Tests touch the library only through here ("tests are data driven").
//!
//! A case is an `.hlo` file under `cases/<suite>/`. Its first lines may hold directives:
//! `// error-at: LINE:COL` — the first diagnostic must be an error at that position.

use std::path::{Path, PathBuf};

/// What a suite prints for one case.
pub fn run_case(suite: &str, name: &str, src: &str) -> String {
    match suite {
        "parse" => parse_case(name, src, false),
        "verify" => parse_case(name, src, true),
        "shape" => check_case(name, src, true),
        "dynamic" => check_case(name, src, false),
        other => format!("unknown suite `{other}`"),
    }
}

/// Parses (and verifies, if asked): canonical text when clean, rendered diagnostics otherwise.
fn parse_case(name: &str, src: &str, verify: bool) -> String {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m
        && verify
    {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    let mut out = diags.render(src, name, false);
    match m {
        Some(m) if !diags.has_errors() => {
            let printed = hlo_ir::text::print(&m);
            // The printed text must be a fixpoint of parse+print.
            let again = hlo_ir::text::parse(&printed).0.map(|m2| hlo_ir::text::print(&m2));
            if again.as_deref() != Some(printed.as_str()) {
                out.push_str("!! printed text is not a fixpoint of parse+print\n");
            }
            out.push_str(&printed);
        }
        _ => out.push_str("-- rejected\n"),
    }
    out
}

/// Runs the checking pipeline (`hloc check`): the rendered diagnostics, or, when the
/// module is clean, the inferred shape of every instruction (`with_shapes`) or `-- accepted`.
fn check_case(name: &str, src: &str, with_shapes: bool) -> String {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m
        && !diags.has_errors()
    {
        diags.extend(hlo_compiler::passes::check(m, Some(src)));
    }
    let mut out = diags.render(src, name, false);
    match m {
        Some(m) if !diags.has_errors() => {
            if with_shapes {
                out.push_str(&inferred_shapes(&m));
            }
            out.push_str("-- accepted\n");
        }
        _ => out.push_str("-- rejected\n"),
    }
    out
}

/// `computation / name = inferred shape` for every instruction, callees first.
fn inferred_shapes(m: &hlo_ir::Module) -> String {
    use hlo_compiler::passes::shape_inference::{infer, show};
    let mut out = String::new();
    for comp in m.comps() {
        out.push_str(&format!("{}:\n", comp.name));
        for n in comp.post_order() {
            let shape = match infer(m, comp, n) {
                Ok(s) => show(&s),
                Err(d) => format!("<not inferred: {}>", d.message),
            };
            out.push_str(&format!("  {} = {}\n", comp.instr(n).name, shape));
        }
    }
    out
}

/// The `// error-at: LINE:COL` directive of a case, if any.
pub fn expected_error_at(src: &str) -> Option<(usize, usize)> {
    let line = src.lines().take_while(|l| l.starts_with("//")).find_map(|l| l.strip_prefix("// error-at:"))?;
    let (l, c) = line.trim().split_once(':')?;
    Some((l.parse().ok()?, c.parse().ok()?))
}

/// `../shared` beside the project root, located from this crate's manifest directory.
pub fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

/// The `.hlo` files directly in `dir`, sorted (panics when the directory cannot be read:
/// a test must not pass on a missing `../shared`).
pub fn hlo_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "hlo"))
        .collect();
    v.sort();
    v
}

/// The names of the corpus cases that have inputs (`NAME.inputs.npz`), sorted.
pub fn corpus_case_names() -> Vec<String> {
    let dir = shared_dir().join("corpus");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .filter_map(|e| e.expect("directory entry").file_name().to_str()?.strip_suffix(".inputs.npz").map(str::to_string))
        .collect();
    names.sort();
    names
}

/// The modules of a file (lit files with `-split-input-file` hold several).
pub use hlo_ir::text::split_modules;

/// Outcome of the parse + verify + round-trip check on one module.
pub fn check_round_trip(src: &str, name: &str) -> Result<usize, String> {
    let m = hlo_ir::parse_and_verify(src).map_err(|d| d.render(src, name, false))?;
    let printed = hlo_ir::text::print(&m);
    let m2 = hlo_ir::parse_and_verify(&printed).map_err(|d| format!("printed text does not re-parse:\n{}", d.render(&printed, name, false)))?;
    let printed2 = hlo_ir::text::print(&m2);
    if printed != printed2 {
        let line = printed.lines().zip(printed2.lines()).position(|(a, b)| a != b).unwrap_or(0);
        return Err(format!(
            "print(parse(x)) is not a fixpoint; first difference at printed line {}:\n  {}\n  {}",
            line + 1,
            printed.lines().nth(line).unwrap_or(""),
            printed2.lines().nth(line).unwrap_or("")
        ));
    }
    if m.instr_count() != m2.instr_count() {
        return Err(format!("instruction count changed from {} to {}", m.instr_count(), m2.instr_count()));
    }
    Ok(m.instr_count())
}
