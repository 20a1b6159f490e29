//! Tensor I/O over the public corpus: every `NAME.inputs.npz` validates against the entry
//! parameters of `NAME.hlo`, every `NAME.outputs.npz` against the root and compares equal
//! to itself (and unequal to a perturbed copy, so the comparison can fail), write→read
//! round-trips, and damaged inputs give errors that name the problem.

use std::fs;
use std::path::{Path, PathBuf};

use hlo_io::compare::{Mismatch, Tolerance, Tolerances, compare};
use hlo_io::npz::{self, NpzErrorKind};
use hlo_ir::{ElemType, Module, Shape, Tensor};

struct Case {
    name: String,
    module: Module,
}

impl Case {
    fn file(&self, suffix: &str) -> PathBuf {
        corpus().join(format!("{}{suffix}", self.name))
    }
    fn params(&self) -> Vec<Shape> {
        self.module.entry_param_shapes()
    }
    fn outputs(&self) -> Vec<Shape> {
        self.module.entry_output_shapes()
    }
    fn all_static(shapes: &[Shape]) -> bool {
        shapes.iter().all(|s| s.as_array().is_some_and(|a| a.is_static()))
    }
}

fn corpus() -> PathBuf {
    hlo_tests::shared_dir().join("corpus")
}

/// Every corpus case with an inputs file, parsed and verified.
fn cases() -> Vec<Case> {
    hlo_tests::corpus_case_names()
        .into_iter()
        .map(|name| {
            let path = corpus().join(format!("{name}.hlo"));
            let src =
                fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            // Parsed and verified, not checked: the I/O of every corpus case is tested,
            // the dynamic-shape ones (which the checks reject) included.
            let module = hlo_tests::parse_verified(&src)
                .unwrap_or_else(|d| panic!("{}", d.render(&src, &name, false)));
            Case { name, module }
        })
        .collect()
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("npz-tests").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

#[test]
fn corpus_inputs_validate_against_entry_parameters() {
    let cases = cases();
    let (mut ok, mut skipped, mut failures) = (0, Vec::new(), Vec::new());
    let mut dtypes = std::collections::BTreeMap::<String, usize>::new();
    for case in &cases {
        let params = case.params();
        if !Case::all_static(&params) {
            skipped.push(case.name.clone());
            continue;
        }
        match npz::read_inputs(case.file(".inputs.npz"), &params) {
            Ok(tensors) => {
                assert_eq!(tensors.len(), params.len());
                for (t, p) in tensors.iter().zip(&params) {
                    assert!(t.shape().compatible(p), "{}: {} vs {p}", case.name, t.shape());
                    *dtypes.entry(t.elem().to_string()).or_default() += 1;
                }
                ok += 1;
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    println!(
        "npz inputs: {ok} of {} cases validate against their entry parameters; skipped (dynamic parameters): {}; parameter dtypes: {dtypes:?}",
        cases.len(),
        if skipped.is_empty() { "none".to_string() } else { skipped.join(", ") }
    );
    assert!(failures.is_empty(), "{} cases fail:\n{}", failures.len(), failures.join("\n"));
    assert_eq!(
        skipped,
        ["dyn_unbounded_export"],
        "only the unbounded case has non-static parameters"
    );
    assert!(ok >= 43, "the public corpus has 44 cases with inputs");
    assert!(dtypes.contains_key("bf16"), "train_mlp_bf16 binds a bf16 parameter from uint16 bits");
}

/// A copy with the first element moved well outside any corpus tolerance.
fn perturbed(t: &Tensor) -> Option<Tensor> {
    if t.element_count() == 0 {
        return None;
    }
    let dims = t.dims();
    let bumped = match t.elem() {
        ElemType::F32 => {
            let mut v = t.to_vec::<f32>().unwrap();
            v[0] = if v[0].is_finite() { v[0] + 1.0 + 2.0 * v[0].abs() } else { 0.0 };
            Tensor::from_f32(dims, &v)
        }
        ElemType::S32 => {
            let mut v = t.to_vec::<i32>().unwrap();
            v[0] = v[0].wrapping_add(1);
            Tensor::from_i32(dims, &v)
        }
        ElemType::U32 => {
            let mut v = t.to_vec::<u32>().unwrap();
            v[0] = v[0].wrapping_add(1);
            Tensor::from_u32(dims, &v)
        }
        ElemType::Pred => {
            let mut v = t.to_vec::<bool>().unwrap();
            v[0] = !v[0];
            Tensor::from_pred(dims, &v)
        }
        other => panic!("no perturbation for {other} outputs yet; add one"),
    };
    Some(bumped.unwrap())
}

#[test]
fn corpus_outputs_compare_equal_to_themselves_and_not_to_perturbed_copies() {
    let (mut cases_ok, mut outputs, mut perturbed_fail, mut empty) = (0, 0, 0, 0);
    let mut dtypes = std::collections::BTreeMap::<String, usize>::new();
    for case in cases() {
        let shapes = case.outputs();
        let path = case.file(".outputs.npz");
        // Static roots are checked against the module; the others are read as stored.
        let expected: Vec<Tensor> = if Case::all_static(&shapes) {
            npz::read_outputs(&path, &shapes).unwrap_or_else(|e| panic!("{e}"))
        } else {
            npz::read_npz(&path)
                .unwrap_or_else(|e| panic!("{e}"))
                .into_iter()
                .map(|(_, t)| t)
                .collect()
        };
        let json = case.file(".json");
        let tols = Tolerances::from_case_json(&json).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            tols.outputs.len(),
            expected.len(),
            "{}: one tolerance per output",
            json.display()
        );
        for (i, e) in expected.iter().enumerate() {
            let tol = tols.get(i).unwrap();
            if e.is_exact() {
                assert_eq!(
                    tol,
                    Tolerance::EXACT,
                    "{}: o{i} is {} but has a tolerance",
                    case.name,
                    e.elem()
                );
            }
            *dtypes.entry(e.elem().to_string()).or_default() += 1;
            compare(e, e, tol).unwrap_or_else(|m| panic!("{} o{i} against itself: {m}", case.name));
            compare(e, e, Tolerance::EXACT)
                .unwrap_or_else(|m| panic!("{} o{i} against itself exactly: {m}", case.name));
            outputs += 1;
            let Some(p) = perturbed(e) else {
                empty += 1;
                continue;
            };
            match compare(&p, e, tol) {
                Err(Mismatch::Values { bad: 1, flat: 0, .. }) => perturbed_fail += 1,
                other => panic!(
                    "{} o{i}: a perturbed copy should fail at element 0, got {other:?}",
                    case.name
                ),
            }
        }
        cases_ok += 1;
    }
    println!(
        "npz outputs: {cases_ok} cases, {outputs} outputs equal to themselves; {perturbed_fail} perturbed copies rejected ({empty} empty outputs); output dtypes: {dtypes:?}"
    );
    assert!(cases_ok >= 44 && perturbed_fail + empty == outputs);
}

#[test]
fn corpus_inputs_round_trip_through_write() {
    let dir = scratch("round_trip");
    let mut n = 0;
    for case in cases() {
        let params = case.params();
        if !Case::all_static(&params) {
            continue;
        }
        let inputs = npz::read_inputs(case.file(".inputs.npz"), &params).unwrap();
        let names: Vec<String> = (0..inputs.len()).map(|i| format!("p{i}")).collect();
        let arrays: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&inputs).collect();
        let (a, b) = (dir.join("a.npz"), dir.join("b.npz"));
        npz::write_arrays(&a, &arrays).unwrap();
        let again = npz::read_inputs(&a, &params).unwrap();
        assert_eq!(again, inputs, "{}: write→read changes the tensors", case.name);
        for (x, y) in again.iter().zip(&inputs) {
            assert_eq!(x.bytes(), y.bytes());
        }
        // The raw arrays also survive: names, dtypes (bf16 stays u16 bits) and bytes.
        let raw = npz::read_npz(case.file(".inputs.npz")).unwrap();
        let raw_again = npz::read_npz(&a).unwrap();
        assert_eq!(raw, raw_again, "{}", case.name);
        // Deterministic output: writing the same tensors twice gives the same file.
        npz::write_arrays(&b, &arrays).unwrap();
        assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
        n += 1;
    }
    println!("npz round trip: {n} cases' inputs write and read back unchanged");
    assert!(n >= 43);
}

#[test]
fn damaged_inputs_give_errors_naming_the_problem() {
    let dir = scratch("damaged");
    let case = cases()
        .into_iter()
        .find(|c| c.name == "train_mlp_sgd")
        .expect("train_mlp_sgd is in the corpus");
    let params = case.params();
    let good = case.file(".inputs.npz");
    let inputs = npz::read_inputs(&good, &params).unwrap();
    assert_eq!(
        inputs.iter().map(|t| t.shape().to_string()).collect::<Vec<_>>(),
        ["f32[128]", "f32[64,128]", "f32[10]", "f32[128,10]", "f32[32,64]", "s32[32]"]
    );
    let path = dir.join("in.npz");
    let shown = path.display().to_string();
    let error_for = |arrays: &[(&str, &Tensor)]| {
        npz::write_arrays(&path, arrays).unwrap();
        let e = npz::read_inputs(&path, &params).unwrap_err();
        let NpzErrorKind::Invalid(_) = e.kind else { panic!("expected validation problems: {e}") };
        let text = e.to_string();
        let body = text
            .strip_prefix(&format!("{shown}: "))
            .unwrap_or_else(|| panic!("error does not start with the path: {text}"));
        // A heading line counting the problems, then one indented line per problem.
        let (heading, problems) =
            body.split_once(":\n  ").unwrap_or_else(|| panic!("no problem list: {body}"));
        let n = problems.split("\n  ").count();
        assert!(
            heading.ends_with(&format!("({n} problem{})", if n == 1 { "" } else { "s" })),
            "{heading}"
        );
        problems.replace("\n  ", "; ")
    };
    let named = |i: usize| format!("p{i}");
    let names: Vec<String> = (0..inputs.len()).map(named).collect();
    let all: Vec<(&str, &Tensor)> = names.iter().map(String::as_str).zip(&inputs).collect();

    // Wrong shape: p4 transposed.
    let transposed =
        Tensor::from_bytes(ElemType::F32, vec![64, 32], inputs[4].bytes().to_vec()).unwrap();
    let mut arrays = all.clone();
    arrays[4].1 = &transposed;
    assert_eq!(error_for(&arrays), "p4: expected f32[32,64], got f32[64,32]");

    // Wrong dtype: p5 as f32 instead of s32.
    let as_f32 = Tensor::from_f32(
        &[32],
        &inputs[5].to_vec::<i32>().unwrap().iter().map(|&x| x as f32).collect::<Vec<_>>(),
    )
    .unwrap();
    let mut arrays = all.clone();
    arrays[5].1 = &as_f32;
    assert_eq!(error_for(&arrays), "p5: expected s32[32], got f32[32] (element type differs)");

    // Missing p3, an unexpected p7, and both at once with a wrong shape: every problem is listed.
    let mut arrays = all.clone();
    arrays.remove(3);
    assert_eq!(error_for(&arrays), "missing p3 (expected f32[128,10])");
    let mut arrays = all.clone();
    arrays.push(("p7", &inputs[0]));
    assert_eq!(error_for(&arrays), "unexpected array p7");
    let mut arrays = all.clone();
    arrays[4].1 = &transposed;
    arrays.remove(3);
    arrays.push(("extra", &inputs[0]));
    assert_eq!(
        error_for(&arrays),
        "missing p3 (expected f32[128,10]); p4: expected f32[32,64], got f32[64,32]; unexpected array extra"
    );

    // Too few and too many parameters are the same problems by name.
    assert_eq!(error_for(&all[..5]), "missing p5 (expected s32[32])");

    // Truncated files and random bytes: corrupt-file errors, never a panic.
    let bytes = fs::read(&good).unwrap();
    let mut lcg = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        lcg = lcg.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (lcg >> 33) as usize
    };
    let mut corrupt = 0;
    for k in 0..40 {
        let damaged: Vec<u8> = match k % 3 {
            0 => bytes[..next() % bytes.len()].to_vec(),
            1 => (0..next() % 4096).map(|_| next() as u8).collect(),
            _ => {
                let mut b = bytes.clone();
                for _ in 0..1 + next() % 8 {
                    let at = next() % b.len();
                    b[at] = next() as u8;
                }
                b
            }
        };
        fs::write(&path, &damaged).unwrap();
        let r = std::panic::catch_unwind(|| npz::read_inputs(&path, &params));
        match r {
            Err(_) => panic!("damaged input {k} made the reader panic"),
            // A byte flipped in zip padding or an unused field can leave the file valid.
            Ok(Ok(t)) => assert_eq!(t.len(), params.len()),
            Ok(Err(e)) => {
                let text = e.to_string();
                assert!(text.starts_with(&shown), "{text}");
                corrupt += 1;
            }
        }
    }
    assert!(corrupt >= 30, "only {corrupt} of 40 damaged files were rejected");
    fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    let e = npz::read_inputs(&path, &params).unwrap_err();
    assert!(matches!(e.kind, NpzErrorKind::Corrupt(_)), "{e}");
    assert!(e.to_string().starts_with(&format!("{shown}: corrupt npz: ")), "{e}");
    println!(
        "npz damaged inputs: {corrupt} of 40 truncated/random/flipped files rejected with an error, none panicked"
    );
}
