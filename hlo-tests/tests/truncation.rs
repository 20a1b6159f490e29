//! Robustness: real modules cut at many points, or with bytes flipped, never make the
//! parser, verifier, checking passes, optimizer (`hloc opt`'s default pipeline) or
//! interpreter panic, and every diagnostic points inside the text. Clean mutants are
//! optimized, and the optimized module must still verify and, when the original ran, give
//! the same outputs.

use std::path::Path;

/// Parses, verifies and checks `src`; when it is clean, optimizes a copy with the default
/// pipeline, and when `inputs` still bind its entry parameters, runs both on the
/// interpreter (a mutated attribute or constant must give an error or a value, never a
/// panic; the optimized module must agree with the original).
fn check(src: &str, what: &str, inputs: &Path, optimized: &mut usize) -> bool {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut ran = false;
        let (m, mut diags) = hlo_ir::text::parse(src);
        if let Some(m) = &m {
            diags.extend(hlo_ir::verify::verify(m));
            let _ = hlo_ir::text::print(m);
            if !diags.has_errors() {
                diags.extend(hlo_check::diagnose(m, Some(src)));
            }
            let mut opt = None;
            if !diags.has_errors() {
                let mut o = m.clone();
                let mut pipeline = hlo_passes::default_pipeline();
                pipeline.verify_each = true;
                match pipeline.run(&mut o) {
                    Ok(_) => {
                        *optimized += 1;
                        opt = Some(o);
                    }
                    Err(d) => {
                        let text = d.render(src, "t.hlo", false);
                        assert!(
                            !text.contains("left an invalid module"),
                            "{what}: the optimizer broke the module:\n{text}"
                        );
                    }
                }
            }
            if !diags.has_errors()
                && let Ok(args) = hlo_io::npz::read_inputs(inputs, &m.entry_param_shapes())
            {
                ran = true;
                match hlo_interp::run(m, &args) {
                    Err(d) => diags.push(d),
                    Ok(before) => {
                        if let Some(o) = &opt {
                            let after = hlo_interp::run(o, &args);
                            assert!(
                                after.as_ref().is_ok_and(|a| *a == before),
                                "{what}: the optimized module computes something else ({after:?})"
                            );
                        }
                    }
                }
            }
        }
        for d in diags.iter() {
            if let Some(s) = d.span {
                assert!(
                    s.start <= s.end && s.end as usize <= src.len(),
                    "{what}: span {s:?} outside the text ({} bytes)",
                    src.len()
                );
            }
        }
        let _ = diags.render(src, "t.hlo", false);
        ran
    }));
    result.unwrap_or_else(|_| panic!("{what}: panicked"))
}

/// A small deterministic generator (no external randomness: failures reproduce).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

#[test]
fn truncated_and_mutated_modules_never_panic() {
    let dir = hlo_tests::shared_dir().join("corpus");
    let mut rng = Lcg(0x5eed);
    let (mut runs, mut interpreted, mut optimized) = (0, 0, 0);
    for name in [
        "softmax.debug.hlo",
        "train_mlp_sgd.hlo",
        "gather_scatter.hlo",
        "sharded_mlp_train.propagated.hlo",
        "cond.debug.hlo",
    ] {
        let src = std::fs::read_to_string(dir.join(name)).expect("corpus file");
        let case = name.split('.').next().expect("case name");
        let inputs = dir.join(format!("{case}.inputs.npz"));
        for _ in 0..60 {
            let mut cut = rng.next(src.len());
            while !src.is_char_boundary(cut) {
                cut -= 1;
            }
            let t = &src[..cut];
            interpreted +=
                check(t, &format!("{name} cut at {cut}"), &inputs, &mut optimized) as usize;
            // truncated text that still parses must at least be a prefix ending at a statement
            runs += 1;
        }
        let bytes = src.as_bytes();
        let alphabet = b"{}()[],=%:\"/*-<>?#0123456789abfxT_. \n";
        for _ in 0..60 {
            let mut b = bytes.to_vec();
            for _ in 0..1 + rng.next(3) {
                let at = rng.next(b.len());
                b[at] = alphabet[rng.next(alphabet.len())];
            }
            if let Ok(s) = String::from_utf8(b) {
                interpreted +=
                    check(&s, &format!("{name} mutated"), &inputs, &mut optimized) as usize;
                runs += 1;
            }
        }
        // Digit flips keep the text well-formed more often: they reach shape inference and
        // the interpreter with odd attributes (dimensions, slice bounds, constants).
        let digits: Vec<usize> =
            src.bytes().enumerate().filter(|(_, b)| b.is_ascii_digit()).map(|(i, _)| i).collect();
        for _ in 0..60 {
            let mut b = bytes.to_vec();
            b[digits[rng.next(digits.len())]] = b'0' + rng.next(10) as u8;
            let s = String::from_utf8(b).expect("digits are ASCII");
            interpreted +=
                check(&s, &format!("{name} digit flipped"), &inputs, &mut optimized) as usize;
            runs += 1;
        }
    }
    println!(
        "{runs} truncated or mutated modules parsed and checked without a panic; {optimized} were clean and optimized, {interpreted} ran on the interpreter"
    );
    assert!(optimized >= 20, "too few mutated modules reached the optimizer ({optimized})");
    assert!(interpreted >= 20, "too few mutated modules reached the interpreter ({interpreted})");
}
