//! The interpreter as a trustworthy oracle: every value it produces is checked against
//! the instruction's declared shape, results that cannot fit the memory budget are
//! refused before anything is allocated, and bad input gives a located error, never a
//! panic. Modules the checker would reject are run directly (skipping `hlo_check`)
//! to exercise the interpreter's own guards.

use hlo_interp as interp;

use hlo_ir::{Diagnostics, Module, Tensor};

/// Parsed and structurally verified, deliberately not checked (see the module doc).
fn module(src: &str) -> Module {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    match m {
        Some(m) if !diags.has_errors() => m,
        _ => panic!("{}", diags.render(src, "t.hlo", false)),
    }
}

/// Runs `src` (no checking) with `budget` bytes and returns the rendered error.
fn error_with(src: &str, inputs: &[Tensor], budget: Option<u64>) -> String {
    let m = module(src);
    let mut it = interp::Interpreter::new(&m);
    if let Some(b) = budget {
        it = it.with_memory_budget(b);
    }
    let e = it.run(inputs).expect_err("the run must fail");
    assert!(e.span.is_some(), "the error is located: {e:?}");
    Diagnostics::from(e).render(src, "t.hlo", false)
}

fn error(src: &str) -> String {
    error_with(src, &[], None)
}

fn entry(body: &str) -> String {
    format!("HloModule t\n\nENTRY main {{\n{body}\n}}\n")
}

#[test]
fn map_whose_computation_returns_the_wrong_type_is_an_error() {
    let src = "HloModule t\n\nto_int {\n  x = f32[] parameter(0)\n  ROOT c = s32[] convert(x)\n}\n\n\
               ENTRY main {\n  a = f32[4] constant({1, 2, 3, 4})\n  ROOT m = f32[4] map(a), dimensions={0}, to_apply=to_int\n}\n";
    // Shape inference rejects it; run unchecked, the interpreter catches it too.
    assert!(hlo_check::diagnose(&module(src), Some(src)).has_errors());
    let text = error(src);
    assert!(text.starts_with("t.hlo:10:8: error: cannot evaluate `m` (map)"), "{text}");
    assert!(
        text.contains("`to_int` returned s32[], but a map of f32[4] must compute f32[] scalars"),
        "{text}"
    );
}

#[test]
fn map_operands_must_have_the_result_dims() {
    let src = "HloModule t\n\nneg {\n  x = f32[] parameter(0)\n  ROOT n = f32[] negate(x)\n}\n\n\
               ENTRY main {\n  a = f32[2] constant({1, 2})\n  ROOT m = f32[4] map(a), dimensions={0}, to_apply=neg\n}\n";
    let text = error(src);
    assert!(text.contains("operand 0 has dims [2] but the result has dims [4]"), "{text}");
}

#[test]
fn sharding_custom_call_must_keep_its_operand_shape() {
    let body = "  a = f32[4] constant({1, 2, 3, 4})\n  ROOT s = f32[2,2] custom-call(a), custom_call_target=\"Sharding\", sharding={replicated}";
    let src = entry(body);
    let text = error(&src);
    assert!(text.starts_with("t.hlo:5:8: error: cannot evaluate `s` (custom-call)"), "{text}");
    assert!(text.contains("`Sharding` is an identity on one device, so its declared shape f32[2,2] must be its operand's shape f32[4]"), "{text}");
    // Same dims, another element type.
    let body = "  a = f32[4] constant({1, 2, 3, 4})\n  ROOT s = bf16[4] custom-call(a), custom_call_target=\"MoveToHost\"";
    assert!(
        error(&entry(body)).contains("declared shape bf16[4] must be its operand's shape f32[4]")
    );
}

#[test]
fn a_value_that_differs_from_its_declared_shape_is_an_error() {
    // `add` of two f32 arrays declared as s32: the checker would reject it; the interpreter
    // must not hand out an f32 value under an s32 name either.
    let body =
        "  a = f32[2] constant({1, 2})\n  b = f32[2] constant({3, 4})\n  ROOT r = s32[2] add(a, b)";
    let src = entry(body);
    assert!(hlo_check::diagnose(&module(&src), Some(&src)).has_errors());
    let text = error(&src);
    assert!(text.starts_with("t.hlo:6:8: error: `r` (add) produced a value of shape f32[2], but its declared shape is s32[2]"), "{text}");
    // Dims and tuple structure too.
    let body = "  a = f32[2] constant({1, 2})\n  ROOT r = f32[3] negate(a)";
    assert!(error(&entry(body)).contains(
        "`r` (negate) produced a value of shape f32[2], but its declared shape is f32[3]"
    ));
    let body = "  a = f32[2] constant({1, 2})\n  b = s32[] constant(1)\n  ROOT t = (f32[2], f32[]) tuple(a, b)";
    let text = error(&entry(body));
    assert!(
        text.contains("produced a value of shape (f32[2], s32[])")
            && text.contains("s32[] at tuple index {1} where f32[] is declared"),
        "{text}"
    );
}

#[test]
fn huge_results_are_refused_before_allocating() {
    // 2^48 elements of 4 bytes: 1 PiB. Refused from the declared shape, so this is instant.
    let body =
        "  c = f32[] constant(1)\n  ROOT b = f32[65536,65536,65536] broadcast(c), dimensions={}";
    let src = entry(body);
    assert!(!hlo_check::diagnose(&module(&src), Some(&src)).has_errors());
    let text = error(&src);
    assert!(
        text.starts_with("t.hlo:5:8: error: `b` (broadcast) of shape f32[65536,65536,65536] needs 1.0 PiB (1125899906842624 bytes), more than the interpreter's memory budget"),
        "{text}"
    );
    assert!(text.contains("help: ") && text.contains("with_memory_budget"), "{text}");
    // A size that overflows 64 bits: 2^61 elements of s8 (held in 8 bytes each).
    let body =
        "  c = s8[] constant(1)\n  ROOT b = s8[2147483648,1073741824] broadcast(c), dimensions={}";
    let text = error(&entry(body));
    assert!(text.contains("`b` (broadcast) of shape s8[2147483648,1073741824]: its size in bytes overflows 64 bits"), "{text}");
    // The same for other allocating opcodes: iota and constants.
    let body = "  ROOT i = s64[1099511627776] iota(), iota_dimension=0";
    assert!(error(&entry(body)).contains("`i` (iota) of shape s64[1099511627776] needs 8.0 TiB"));
}

#[test]
fn the_budget_is_configurable_and_counts_live_arrays() {
    // Each iota is 8 * 100 = 800 bytes (integers are held as i64).
    let body = "  a = s32[100] iota(), iota_dimension=0\n  b = s32[100] iota(), iota_dimension=0\n  ROOT r = s32[100] add(a, b)";
    let src = entry(body);
    let m = module(&src);
    assert!(interp::Interpreter::new(&m).with_memory_budget(4000).run(&[]).is_ok());
    let text = error_with(&src, &[], Some(700));
    assert!(text.starts_with("t.hlo:4:3: error: `a` (iota) of shape s32[100] needs 800 bytes, more than the interpreter's memory budget of 700 bytes"), "{text}");
    // `a` fits alone, but not `b` beside it.
    let text = error_with(&src, &[], Some(1000));
    assert!(
        text.contains("`b` (iota) of shape s32[100] needs 800 bytes while 800 bytes are live"),
        "{text}"
    );
    // Inputs count too.
    let src = entry("  ROOT p = f32[1000] parameter(0)");
    let input = Tensor::from_f32(&[1000], &[0.5; 1000]).unwrap();
    let text = error_with(&src, &[input], Some(1000));
    assert!(text.contains("input 0 (f32[1000]) needs 3.9 KiB (4000 bytes), more than the interpreter's memory budget"), "{text}");
}

#[test]
fn inputs_must_match_the_entry_parameters() {
    let src = entry("  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)");
    let input = Tensor::from_f32(&[3], &[1.0, 2.0, 3.0]).unwrap();
    let text = error_with(&src, &[input], None);
    assert!(text.starts_with("t.hlo:4:3: error: computation `main` called with argument 0 of shape f32[3], but parameter `p` is declared f32[2]"), "{text}");
    let text = error_with(&src, &[], None);
    assert!(text.contains("`main` takes 1 parameters but 0 inputs were given"), "{text}");
}

#[test]
fn unchecked_modules_give_errors_not_panics() {
    let cases = [
        // Mixed storage classes (f32 and s32) in one concatenation.
        (
            "  a = f32[2] constant({1, 2})\n  b = s32[2] constant({3, 4})\n  ROOT c = f32[4] concatenate(a, b), dimensions={0}",
            "does not fit operand 0",
        ),
        // Elementwise operands of different dims.
        (
            "  a = f32[3] constant({1, 2, 3})\n  b = f32[2] constant({3, 4})\n  ROOT r = f32[3] add(a, b)",
            "add operands of different dims",
        ),
        // A select whose predicate is not pred.
        (
            "  a = f32[2] constant({1, 2})\n  ROOT r = f32[2] select(a, a, a)",
            "the select predicate is f32[2]",
        ),
        // A slice past the end.
        (
            "  a = f32[2] constant({1, 2})\n  ROOT r = f32[4] slice(a), slice={[0:4]}",
            "out of range",
        ),
        // A reshape that changes the element count.
        (
            "  a = f32[2] constant({1, 2})\n  ROOT r = f32[3] reshape(a)",
            "2 elements cannot be reshaped to dims [3]",
        ),
        // A pad whose configuration gives other dims than declared.
        (
            "  a = f32[2] constant({1, 2})\n  z = f32[] constant(0)\n  ROOT r = f32[3] pad(a, z), padding=1_1",
            "gives dims [4] but the result is declared with dims [3]",
        ),
        // A dynamic-slice window larger than the operand.
        (
            "  a = f32[2] constant({1, 2})\n  i = s32[] constant(0)\n  ROOT r = f32[3] dynamic-slice(a, i), dynamic_slice_sizes={3}",
            "does not fit",
        ),
        // A transpose whose permutation repeats a dimension.
        (
            "  a = f32[2,3] constant({{1, 2, 3}, {4, 5, 6}})\n  ROOT r = f32[2,2] transpose(a), dimensions={0,0}",
            "out of range or repeated",
        ),
        // A dot whose contracting dimensions do not pair up, and one declared with other dims.
        (
            "  a = f32[2,3] constant({{1, 2, 3}, {4, 5, 6}})\n  ROOT r = f32[3,3] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
            "do not pair up",
        ),
        (
            "  a = f32[2,3] constant({{1, 2, 3}, {4, 5, 6}})\n  ROOT r = f32[3,3] dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
            "the dot gives dims [2,2] but the result is declared with dims [3,3]",
        ),
    ];
    for (body, want) in cases {
        let src = entry(body);
        let m = module(&src);
        let result = std::panic::catch_unwind(|| interp::run(&m, &[]));
        let e = result.unwrap_or_else(|_| panic!("panicked on\n{body}")).expect_err(body);
        let text = Diagnostics::from(e).render(&src, "t.hlo", false);
        assert!(text.contains(want), "{body}\n{text}");
    }
}
