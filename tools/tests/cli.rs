//! End-to-end tests of the `hloc` binary: exit codes, streams, and diagnostics locations.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn hloc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hloc")).args(args).output().expect("hloc runs")
}

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hlo-tests/cases")
}

fn shared() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_documents_every_subcommand() {
    let o = hloc(&["--help"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    for sub in ["parse", "bench"] {
        assert!(text.contains(sub), "`hloc --help` does not mention `{sub}`:\n{text}");
    }
    let o = hloc(&["parse", "--help"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("--no-verify"));
}

#[test]
fn parse_prints_canonical_text_that_parses_again() {
    let file = shared().join("corpus/softmax.debug.hlo");
    let o = hloc(&["parse", file.to_str().expect("utf-8 path")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stderr.is_empty(), "a clean module prints no diagnostics: {}", stderr(&o));
    let first = String::from_utf8(o.stdout).expect("utf-8 output");
    assert!(first.starts_with("HloModule jit_f"));
    // Feed the output back through stdin: the text is a fixpoint.
    let mut child = Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(["parse", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("hloc runs");
    child.stdin.take().expect("stdin").write_all(first.as_bytes()).expect("write stdin");
    let again = child.wait_with_output().expect("hloc finishes");
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(String::from_utf8(again.stdout).expect("utf-8"), first);
}

/// Every case with an `// error-at: L:C` directive fails with exit code 1 and a first
/// diagnostic at exactly that place, without panicking.
#[test]
fn malformed_inputs_exit_1_with_located_diagnostics() {
    let mut checked = 0;
    for suite in ["parse", "verify"] {
        let dir = cases_dir().join(suite);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir).expect("cases dir").map(|e| e.expect("entry").path()).collect();
        files.sort();
        for path in files.into_iter().filter(|p| p.extension().is_some_and(|x| x == "hlo")) {
            let src = std::fs::read_to_string(&path).expect("case is UTF-8");
            let Some(at) = src.lines().take_while(|l| l.starts_with("//")).find_map(|l| l.strip_prefix("// error-at:")) else {
                continue;
            };
            let p = path.to_str().expect("utf-8 path");
            let o = hloc(&["parse", p]);
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(1), "{p}: expected exit code 1, stderr:\n{err}");
            assert!(!err.contains("panicked"), "{p} panicked:\n{err}");
            assert!(o.stdout.is_empty(), "{p}: nothing may be printed to stdout on error");
            let want = format!("{p}:{}: error:", at.trim());
            assert!(err.starts_with(&want), "{p}: expected the first diagnostic to start with `{want}`, got:\n{err}");
            checked += 1;
        }
    }
    println!("{checked} malformed cases exit 1 with the diagnostic at the expected line:col");
    assert!(checked >= 40, "only {checked} malformed cases");
}

#[test]
fn unreadable_inputs_are_clear_errors() {
    let o = hloc(&["parse", "/definitely/not/here.hlo"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot read `/definitely/not/here.hlo`"), "{}", stderr(&o));

    let dir = std::env::temp_dir().join(format!("hloc-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bad = dir.join("latin1.hlo");
    std::fs::write(&bad, b"HloModule m\n// caf\xe9\n").expect("write");
    let o = hloc(&["parse", bad.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not UTF-8"), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn output_file_is_written_only_on_success() {
    let dir = std::env::temp_dir().join(format!("hloc-out-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let out = dir.join("out.hlo");
    let good = shared().join("corpus/dot_matmul.hlo");
    let o = hloc(&["parse", good.to_str().expect("utf-8"), "-o", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read_to_string(&out).expect("written").starts_with("HloModule"));

    let bad = dir.join("bad.hlo");
    std::fs::write(&bad, "HloModule m\nENTRY e {\n  ROOT x = f32[] bogus-op()\n}\n").expect("write");
    let out2 = dir.join("out2.hlo");
    let o = hloc(&["parse", bad.to_str().expect("utf-8"), "-o", out2.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(!out2.exists(), "no output file may be created on error");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_verify_skips_the_verifier() {
    let dir = std::env::temp_dir().join(format!("hloc-nv-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let f = dir.join("cycle.hlo");
    std::fs::write(&f, "HloModule m\nENTRY e {\n  a = f32[] negate(b)\n  ROOT b = f32[] negate(a)\n}\n").expect("write");
    let p = f.to_str().expect("utf-8");
    let o = hloc(&["parse", p]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cycle in computation `e`"), "{}", stderr(&o));
    let o = hloc(&["parse", "--no-verify", p]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(&dir).ok();
}
