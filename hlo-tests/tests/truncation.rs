//! Robustness: real modules cut at many points, or with bytes flipped, never make the
//! parser or verifier panic, and every diagnostic points inside the text.

fn check(src: &str, what: &str) {
    let result = std::panic::catch_unwind(|| {
        let (m, mut diags) = hlo_ir::text::parse(src);
        if let Some(m) = &m {
            diags.extend(hlo_ir::verify::verify(m));
            let _ = hlo_ir::text::print(m);
        }
        for d in diags.iter() {
            if let Some(s) = d.span {
                assert!(s.start <= s.end && s.end as usize <= src.len(), "{what}: span {s:?} outside the text ({} bytes)", src.len());
            }
        }
        let _ = diags.render(src, "t.hlo", false);
        (m.is_some(), diags.has_errors())
    });
    assert!(result.is_ok(), "{what}: parser panicked");
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
    let mut runs = 0;
    for name in ["softmax.debug.hlo", "train_mlp_sgd.hlo", "gather_scatter.hlo", "sharded_mlp_train.propagated.hlo", "cond.debug.hlo"] {
        let src = std::fs::read_to_string(dir.join(name)).expect("corpus file");
        for _ in 0..60 {
            let mut cut = rng.next(src.len());
            while !src.is_char_boundary(cut) {
                cut -= 1;
            }
            let t = &src[..cut];
            check(t, &format!("{name} cut at {cut}"));
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
                check(&s, &format!("{name} mutated"));
                runs += 1;
            }
        }
    }
    println!("{runs} truncated or mutated modules parsed without a panic");
}
