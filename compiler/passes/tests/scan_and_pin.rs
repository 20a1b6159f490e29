//! `scan` (XLA's ScanExpander semantics) on the interpreter and through `scan-expander`,
//! and the `Pin` custom-call as XLA's CPU backend treats it (dead: removed; live: refused).
//! The oracle cases (`tools/interp-cases/scan_*.hlo`) check the same against XLA; these
//! cover what XLA 0.10.2 cannot run (a zero-length scan) and the expander's output.

use hlo_interp as interp;

use hlo_passes as passes;

use hlo_interp::seeded;
use hlo_ir::{Module, Tensor};

fn parse(src: &str) -> Module {
    hlo_check::parse(src)
        .unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)))
        .into_inner()
}

fn floats(ts: &[Tensor]) -> Vec<Vec<f64>> {
    ts.iter().map(|t| t.to_f64_vec().expect("float tensor")).collect()
}

/// The interpreter on `m` and on `m` after the default pipeline (scan-expander first):
/// bit-identical outputs.
fn interp_and_expanded(src: &str, inputs: &[Tensor]) -> Vec<Tensor> {
    let m = parse(src);
    let direct = interp::run(&m, inputs)
        .unwrap_or_else(|d| panic!("{}", hlo_ir::Diagnostics::from(d).render(src, "t.hlo", false)));
    let mut opt = m.clone();
    passes::default_pipeline().run(&mut opt).expect("the default pipeline runs");
    let printed = hlo_ir::text::print(&opt);
    assert!(!printed.contains(" scan("), "scan-expander left a scan:\n{printed}");
    let expanded = interp::run(&opt, inputs).unwrap_or_else(|d| {
        panic!("{}", hlo_ir::Diagnostics::from(d).render(&printed, "opt.hlo", false))
    });
    assert_eq!(direct.len(), expanded.len());
    for (a, b) in direct.iter().zip(&expanded) {
        assert_eq!(a.dims(), b.dims());
        assert_eq!(a.bytes(), b.bytes(), "expanded scan differs from the interpreter's");
    }
    direct
}

const CUMSUM: &str = r#"HloModule cumsum

add {
  x = f32[] parameter(0)
  acc = f32[] parameter(1)
  s = f32[] add(x, acc)
  ROOT t = (f32[], f32[]) tuple(s, s)
}

ENTRY main {
  p = f32[5] parameter(0)
  i = f32[] parameter(1)
  f = (f32[5], f32[]) scan(p, i), dimensions={0}, num_carries=1, to_apply=add
  r = (f32[5], f32[]) scan(p, i), dimensions={0}, num_carries=1, is_reverse=true, to_apply=add
  f0 = f32[5] get-tuple-element(f), index=0
  f1 = f32[] get-tuple-element(f), index=1
  r0 = f32[5] get-tuple-element(r), index=0
  r1 = f32[] get-tuple-element(r), index=1
  ROOT o = (f32[5], f32[], f32[5], f32[]) tuple(f0, f1, r0, r1)
}
"#;

#[test]
fn scan_is_an_inclusive_prefix_forward_and_a_suffix_reversed() {
    // XLA's scan_expander_test: the forward cumulative sum seeded with the init, and the
    // reverse one filling the output from the last index down.
    let xs = [1.0f32, 2.0, 3.0, 4.0, 5.0];
    let init = 10.0f32;
    let out = floats(&interp_and_expanded(
        CUMSUM,
        &[Tensor::from_f32(&[5], &xs).unwrap(), Tensor::from_f32(&[], &[init]).unwrap()],
    ));
    let mut fwd = Vec::new();
    let mut acc = init;
    for x in xs {
        acc += x;
        fwd.push(f64::from(acc));
    }
    let mut rev = vec![0.0; 5];
    let mut racc = init;
    for k in (0..5).rev() {
        racc += xs[k];
        rev[k] = f64::from(racc);
    }
    assert_eq!(out[0], fwd);
    assert_eq!(out[1], [f64::from(acc)]);
    assert_eq!(out[2], rev);
    assert_eq!(out[3], [f64::from(racc)]);
}

#[test]
fn zero_length_scan_gives_empty_outputs_and_the_inits() {
    // XLA 0.10.2 refuses this module (its expander slices the empty dimension); the
    // meaning is still defined: no step runs.
    let src = r#"HloModule zero

add {
  x = f32[2] parameter(0)
  acc = f32[2] parameter(1)
  s = f32[2] add(x, acc)
  ROOT t = (f32[2], f32[2]) tuple(s, s)
}

ENTRY main {
  p = f32[0,2] parameter(0)
  i = f32[2] parameter(1)
  ROOT r = (f32[0,2], f32[2]) scan(p, i), dimensions={0}, num_carries=1, is_reverse=true, to_apply=add
}
"#;
    let init = [1.5f32, -2.0];
    let out = interp_and_expanded(
        src,
        &[Tensor::from_f32(&[0, 2], &[]).unwrap(), Tensor::from_f32(&[2], &init).unwrap()],
    );
    assert_eq!(out[0].dims(), [0, 2]);
    assert_eq!(floats(&out[1..])[0], init.map(f64::from));
}

#[test]
fn scan_cases_agree_with_their_expansion() {
    // Every oracle case, on seeded inputs: the interpreter before and after scan-expander.
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/interp-cases");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).expect("tools/interp-cases") {
        let path = e.expect("entry").path();
        let name = path.file_name().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if !name.starts_with("scan_") || !name.ends_with(".hlo") {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("read");
        let m = parse(&src);
        let inputs = seeded::seeded_inputs(&m.entry_param_shapes(), 7).expect("seeded inputs");
        interp_and_expanded(&src, &inputs);
        n += 1;
    }
    assert!(n >= 5, "found only {n} scan cases in {}", dir.display());
}

const PIN: &str = r#"HloModule pin

ENTRY main {
  p = f32[4] parameter(0)
  b = b(f32[4]) custom-call(p), custom_call_target="Pin", output_to_operand_aliasing={{}: (0, {})}, api_version=API_VERSION_TYPED_FFI
  ROOT r = f32[4] negate(p)
}
"#;

#[test]
fn a_dead_pin_is_not_evaluated_and_a_live_one_is_refused_at_the_instruction() {
    let x = Tensor::from_f32(&[4], &[1.0, -2.0, 0.5, 3.0]).unwrap();
    let out = interp::run(&parse(PIN), std::slice::from_ref(&x))
        .expect("a dead Pin does not stop the run (XLA removes it)");
    assert_eq!(floats(&out)[0], [-1.0, 2.0, -0.5, -3.0]);

    let live = PIN.replace("ROOT r = f32[4] negate(p)", "ROOT u = f32[4] custom-call(b), custom_call_target=\"Unpin\", output_to_operand_aliasing={{}: (0, {})}, api_version=API_VERSION_TYPED_FFI");
    let err = interp::run(&parse(&live), &[x]).expect_err("XLA's CPU backend refuses a live Pin");
    let text = hlo_ir::Diagnostics::from(err).render(&live, "t.hlo", false);
    assert!(
        text.starts_with("t.hlo:5:3: error:")
            && text.contains("`Pin`")
            && text.contains("No FFI handler"),
        "{text}"
    );
}
