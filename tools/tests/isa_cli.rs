//! The instruction-set cap (`HLOC_ISA`) end to end: `hloc` refuses an invalid one at
//! startup, and `hloc run --stats` names the path each kernel kind took under `avx2` and
//! `avx512`, with the same outputs under both.

use std::path::Path;
use std::process::{Command, Output};

use hlo_runtime::cpu::Level;

fn hloc(isa: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hloc"))
        .args(args)
        .env("HLOC_ISA", isa)
        .output()
        .expect("hloc runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A fresh directory, removed when the returned guard drops (a failing test's too).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("hloc-isa-{name}-")).tempdir().expect("temp dir")
}

/// A bf16 dot (a GEMM well above the small-product loop's size) and a fusion calling the
/// vector math.
const PROGRAM: &str = "HloModule m

ENTRY e {
  a = bf16[64,64] parameter(0)
  b = bf16[64,64] parameter(1)
  d = bf16[64,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  f = f32[64,64] convert(d)
  x = f32[64,64] exponential(f)
  ROOT t = f32[64,64] tanh(x)
}
";

/// `hloc run --stats` under cap `isa`: its stdout and stderr, and the outputs it wrote.
fn run(dir: &Path, isa: &str) -> (String, Vec<hlo_ir::Tensor>) {
    let file = dir.join("m.hlo");
    std::fs::write(&file, PROGRAM).expect("write the program");
    let out = dir.join(format!("{isa}.npz"));
    let o = hloc(
        isa,
        &["run", file.to_str().expect("utf-8"), "--stats", "-o", out.to_str().expect("utf-8")],
    );
    let all = text(&o.stdout) + &text(&o.stderr);
    assert!(o.status.success(), "HLOC_ISA={isa}: {all}");
    let m = hlo_driver::parse(PROGRAM).expect("valid");
    let outs = hlo_io::npz::read_outputs(&out, &m.entry_output_shapes()).expect("outputs");
    (all, outs)
}

/// The `path` column of the stats row of kernel kind `kind`.
fn path_of(report: &str, kind: &str) -> String {
    let line = report
        .lines()
        .find(|l| l.starts_with(kind))
        .unwrap_or_else(|| panic!("no `{kind}` row in:\n{report}"));
    line.split('%').nth(1).expect("a share column").trim().to_string()
}

#[test]
fn stats_name_each_kernels_path_under_avx2_and_avx512_and_outputs_agree() {
    let scratch = scratch("stats");
    let dir = scratch.path();
    let host = hlo_runtime::cpu::host();
    let gemm = hlo_runtime::cpu::gemm_crate();
    let mut outputs = Vec::new();
    for (isa, cap) in [("avx2", Level::Avx2), ("AVX512", Level::Avx512)] {
        let (report, outs) = run(dir, isa);
        let eff = cap.min(host);
        assert!(
            report.contains(&format!("instruction set: {eff} (cap {cap}, host {host})")),
            "HLOC_ISA={isa}:\n{report}"
        );
        // The dot: never AMX under these caps; the gemm crate (uncapped: its own choice).
        assert_eq!(path_of(&report, "dot (gemm)"), gemm, "{report}");
        // The loops: Cranelift's flags and the vector math follow the cap.
        let want = match eff {
            Level::Base => "cranelift sse + vmath base",
            Level::Avx2 => "cranelift avx2 + vmath avx2",
            _ => "cranelift avx512vl + vmath avx512",
        };
        assert_eq!(path_of(&report, "fusion (jit)"), want, "{report}");
        outputs.push(outs);
    }
    // The same bits: the gemm crate runs the same kernels, and the vector math's builds
    // and Cranelift's encodings compute the same IEEE operations.
    assert_eq!(outputs[0].len(), outputs[1].len());
    for (a, b) in outputs[0].iter().zip(&outputs[1]) {
        assert_eq!(a, b, "outputs differ between HLOC_ISA=avx2 and avx512");
    }
}

#[test]
fn an_invalid_cap_is_an_error_not_a_panic() {
    let scratch = scratch("invalid");
    let dir = scratch.path();
    let file = dir.join("m.hlo");
    std::fs::write(&file, PROGRAM).expect("write the program");
    for bad in ["avx1024", "sse2", "avx-512", "base"] {
        let o = hloc(bad, &["run", file.to_str().expect("utf-8")]);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "HLOC_ISA={bad}: {err}");
        assert!(err.contains("HLOC_ISA") && err.contains(bad), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    // Every spelling of a valid cap runs.
    for ok in ["native", "Avx2", "avx512_bf16", "amx"] {
        let o = hloc(ok, &["check", file.to_str().expect("utf-8")]);
        assert!(o.status.success(), "HLOC_ISA={ok}: {}", text(&o.stderr));
    }
}
