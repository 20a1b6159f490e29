//! rng-bit-generator bits declared signed or floating-point. XLA 0.10.2 generates the
//! unsigned type of that width whatever the text says and types every use as unsigned
//! (an `s32[4]` output comes back as `u32`, "f32" bits are multiplied as integers, a
//! compare with `s32` values is refused), so every engine here refuses such a generator
//! at the instruction; unsigned bits of every width run.

use hlo_interp as interp;

use hlo_ir::Tensor;
use hlo_passes as passes;

fn module(bits: &str) -> String {
    format!(
        "HloModule m\n\nENTRY main {{\n  p = u64[2] parameter(0)\n  r = (u64[2], {bits}[4]) rng-bit-generator(p), algorithm=rng_three_fry\n  ROOT b = {bits}[4] get-tuple-element(r), index=1\n}}\n"
    )
}

fn state() -> Tensor {
    Tensor::from_slice::<u64>(&[2], &[1, 2]).expect("state")
}

#[test]
fn signed_and_float_bits_are_refused_at_the_generator_by_every_engine() {
    for bits in ["s32", "f32", "s8", "f16", "bf16", "s64", "f64"] {
        let src = module(bits);
        let m = hlo_check::parse(&src).unwrap_or_else(|d| {
            panic!(
                "XLA's verifier accepts {bits} bits, so does check:\n{}",
                d.render(&src, "t.hlo", false)
            )
        });
        // The interpreter.
        let err = interp::run(&m, &[state()]).expect_err("refused");
        let text = hlo_ir::Diagnostics::from(err).render(&src, "t.hlo", false);
        assert!(
            text.starts_with("t.hlo:5:3: error:")
                && text.contains(&format!("bits declared {bits}")),
            "{bits}: {text}"
        );
        // The JIT and the TPU model get it from rng-bit-generator-expander.
        let mut opt = (*m).clone();
        let diags = passes::default_pipeline().run(&mut opt).expect_err("the expander refuses it");
        let text = diags.render(&src, "t.hlo", false);
        assert!(
            text.starts_with("t.hlo:5:3: error:") && text.contains("bitcast-convert"),
            "{bits}: {text}"
        );
    }
}

#[test]
fn unsigned_bits_of_every_width_run() {
    for bits in ["u8", "u16", "u32", "u64"] {
        let src = module(bits);
        let m = hlo_check::parse(&src).expect("parses");
        let out = interp::run(&m, &[state()]).unwrap_or_else(|d| {
            panic!("{bits}: {}", hlo_ir::Diagnostics::from(d).render(&src, "t.hlo", false))
        });
        assert_eq!(out[0].elem().to_string(), bits);
    }
}
