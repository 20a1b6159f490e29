//! The interpreter's semantics at the values where implementations differ: integer
//! wrap-around, division by zero, shifts past the width, float→int saturation, bf16
//! rounding ties, TOTALORDER, NaN propagation, stable sort. Each expectation comes from
//! the rule in `../shared/design/hlo-ops.md` (XLA's reference/CPU behaviour).

use hlo_interp as interp;

/// Runs an ENTRY body (instructions, the last one `ROOT`) with no parameters; the leaves
/// as f64 (floats) or i128 (integers and pred) rendered to strings for easy comparison.
fn eval(body: &str) -> Vec<String> {
    let src = format!("HloModule t\n\nENTRY main {{\n{body}\n}}\n");
    let m = hlo_check::parse(&src).unwrap_or_else(|d| panic!("{}", d.render(&src, "t.hlo", false)));
    let out = interp::run(&m, &[]).unwrap_or_else(|d| {
        panic!("{}", hlo_ir::Diagnostics::from(d).render(&src, "t.hlo", false))
    });
    out.iter()
        .flat_map(|t| match t.to_f64_vec() {
            Ok(v) if t.elem().is_float() => {
                v.into_iter().map(|x| format!("{x:?}")).collect::<Vec<_>>()
            }
            _ => t
                .to_i128_vec()
                .expect("integer tensor")
                .into_iter()
                .map(|x| x.to_string())
                .collect(),
        })
        .collect()
}

fn binary(ty: &str, op: &str, a: &str, b: &str) -> Vec<String> {
    eval(&format!("  a = {ty} constant({a})\n  b = {ty} constant({b})\n  ROOT r = {ty} {op}(a, b)"))
}

#[test]
fn integers_wrap_at_their_width() {
    assert_eq!(binary("s8[2]", "add", "{127, -128}", "{1, -1}"), ["-128", "127"]);
    assert_eq!(binary("u8[2]", "subtract", "{0, 5}", "{1, 6}"), ["255", "255"]);
    assert_eq!(binary("s32[]", "multiply", "65536", "65536"), ["0"]);
    assert_eq!(binary("u32[]", "multiply", "4294967295", "4294967295"), ["1"]);
    assert_eq!(binary("u64[]", "add", "18446744073709551615", "2"), ["1"]);
    assert_eq!(eval("  a = s8[2] constant({-128, 5})\n  ROOT r = s8[2] negate(a)"), ["-128", "-5"]);
    assert_eq!(eval("  a = s8[] constant(-128)\n  ROOT r = s8[] abs(a)"), ["-128"]);
}

#[test]
fn integer_division_edge_cases() {
    // x / 0 = -1 (all ones), x % 0 = x, INT_MIN / -1 = INT_MIN, INT_MIN % -1 = 0.
    assert_eq!(
        binary("s32[3]", "divide", "{7, -2147483648, -7}", "{0, -1, 2}"),
        ["-1", "-2147483648", "-3"]
    );
    assert_eq!(
        binary("s32[3]", "remainder", "{7, -2147483648, -7}", "{0, -1, 2}"),
        ["7", "0", "-1"]
    );
    assert_eq!(
        binary("u32[2]", "divide", "{7, 4294967295}", "{0, 2}"),
        ["4294967295", "2147483647"]
    );
    assert_eq!(binary("u8[]", "remainder", "200", "0"), ["200"]);
}

#[test]
fn shifts_past_the_width() {
    assert_eq!(
        binary("s32[3]", "shift-left", "{1, 1, 1}", "{31, 32, -1}"),
        ["-2147483648", "0", "0"]
    );
    assert_eq!(
        binary("s32[3]", "shift-right-logical", "{-1, -1, -1}", "{28, 32, 100}"),
        ["15", "0", "0"]
    );
    assert_eq!(
        binary("s32[3]", "shift-right-arithmetic", "{-8, -8, 8}", "{1, 40, 40}"),
        ["-4", "-1", "0"]
    );
    // Arithmetic shift of an unsigned value reads it as signed of the same width.
    assert_eq!(binary("u8[2]", "shift-right-arithmetic", "{200, 100}", "{1, 1}"), ["228", "50"]);
    assert_eq!(binary("u32[]", "shift-right-logical", "4294967295", "31"), ["1"]);
}

#[test]
fn bit_counts() {
    assert_eq!(
        eval("  a = u8[3] constant({255, 0, 16})\n  ROOT r = u8[3] popcnt(a)"),
        ["8", "0", "1"]
    );
    assert_eq!(
        eval("  a = s32[3] constant({1, 0, -1})\n  ROOT r = s32[3] count-leading-zeros(a)"),
        ["31", "32", "0"]
    );
}

#[test]
fn integer_power() {
    assert_eq!(
        binary("s32[4]", "power", "{2, 2, -1, 3}", "{10, -1, -3, 0}"),
        ["1024", "0", "-1", "1"]
    );
}

#[test]
fn float_to_int_truncates_saturates_and_maps_nan_to_zero() {
    let r = eval(
        "  a = f32[6] constant({nan, 3e9, -3e9, -1.7, 1.7, -0.0})\n  ROOT r = s32[6] convert(a)",
    );
    assert_eq!(r, ["0", "2147483647", "-2147483648", "-1", "1", "0"]);
    let r = eval("  a = f32[3] constant({-5, 300, 255.9})\n  ROOT r = u8[3] convert(a)");
    assert_eq!(r, ["0", "255", "255"]);
    let r = eval("  a = s32[2] constant({-1, 2})\n  ROOT r = u32[2] convert(a)");
    assert_eq!(r, ["4294967295", "2"]);
    let r = eval("  a = f32[3] constant({0, -0.5, nan})\n  ROOT r = pred[3] convert(a)");
    assert_eq!(r, ["0", "1", "1"]);
}

#[test]
fn bf16_rounds_to_nearest_even_after_every_operation() {
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0);
    // 1 + 3·2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
    let r = eval(
        "  a = f32[3] constant({1.00390625, 1.01171875, 1.0039064})\n  ROOT r = bf16[3] convert(a)",
    );
    assert_eq!(r, ["1.0", "1.015625", "1.0078125"]);
    // The sum is rounded to bf16: 1 + 2^-8 → 1, so adding it 4 times stays 1.
    let body = "  one = bf16[] constant(1)\n  eps = bf16[] constant(0.00390625)\n  a = bf16[] add(one, eps)\n  b = bf16[] add(a, eps)\n  c = bf16[] add(b, eps)\n  ROOT d = bf16[] add(c, eps)";
    assert_eq!(eval(body), ["1.0"]);
    // f32 would have reached 1.015625.
    assert_eq!(eval(&body.replace("bf16", "f32")), ["1.015625"]);
    // int → bf16 rounds to nearest even as well: 257 is a tie between 256 and 258 → 256.
    assert_eq!(
        eval("  a = s32[2] constant({257, 259})\n  ROOT r = bf16[2] convert(a)"),
        ["256.0", "260.0"]
    );
    // ... through f32, as XLA's compiled code does: 2^24 + 2^16 + 1 rounds to 2^24 + 2^16 in
    // f32, a bf16 tie that goes to 2^24 (rounding directly would give 2^24 + 2^17).
    assert_eq!(
        eval("  a = s32[] constant(16842753)\n  ROOT r = bf16[] convert(a)"),
        ["16777216.0"]
    );
}

#[test]
fn comparisons_float_and_totalorder() {
    let ops = "  a = f32[5] constant({nan, -0.0, -nan, 1, nan})\n  b = f32[5] constant({nan, 0, -inf, 1, inf})\n";
    let cmp = |dir: &str, ty: &str| {
        eval(&format!("{ops}  ROOT r = pred[5] compare(a, b), direction={dir}{ty}"))
    };
    assert_eq!(cmp("EQ", ""), ["0", "1", "0", "1", "0"]);
    assert_eq!(cmp("NE", ""), ["1", "0", "1", "0", "1"]);
    assert_eq!(cmp("LT", ""), ["0", "0", "0", "0", "0"]);
    // TOTALORDER: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN.
    assert_eq!(cmp("LT", ", type=TOTALORDER"), ["0", "1", "1", "0", "0"]);
    assert_eq!(cmp("GT", ", type=TOTALORDER"), ["0", "0", "0", "0", "1"]);
    assert_eq!(cmp("EQ", ", type=TOTALORDER"), ["1", "0", "0", "1", "0"]);
    // Unsigned comparison of u32 values above 2^31.
    assert_eq!(
        eval(
            "  a = u32[] constant(4294967295)\n  b = u32[] constant(1)\n  ROOT r = pred[] compare(a, b), direction=GT"
        ),
        ["1"]
    );
}

#[test]
fn nan_propagates_through_max_and_min_and_rounding_is_ieee() {
    assert_eq!(binary("f32[2]", "maximum", "{nan, 1}", "{1, nan}"), ["NaN", "NaN"]);
    assert_eq!(binary("f32[2]", "minimum", "{nan, -inf}", "{1, 2}"), ["NaN", "-inf"]);
    // IEEE 754-2019 maximum/minimum: -0 < +0, whatever the operand order.
    assert_eq!(binary("f32[2]", "maximum", "{-0.0, 0}", "{0, -0.0}"), ["0.0", "0.0"]);
    assert_eq!(binary("f32[2]", "minimum", "{-0.0, 0}", "{0, -0.0}"), ["-0.0", "-0.0"]);
    assert_eq!(
        eval(
            "  a = f32[4] constant({2.5, -0.5, 3.5, -2.5})\n  ROOT r = f32[4] round-nearest-even(a)"
        ),
        ["2.0", "-0.0", "4.0", "-2.0"]
    );
    assert_eq!(
        eval("  a = f32[4] constant({-0.0, nan, -3, 0})\n  ROOT r = f32[4] sign(a)"),
        ["-0.0", "NaN", "-1.0", "0.0"]
    );
    assert_eq!(binary("f32[2]", "remainder", "{-7.5, 7.5}", "{2, -2}"), ["-1.5", "1.5"]);
    assert_eq!(
        eval("  a = f32[3] constant({inf, nan, 1})\n  ROOT r = pred[3] is-finite(a)"),
        ["0", "0", "1"]
    );
}

#[test]
fn sort_is_stable_and_follows_the_comparator() {
    let src = "HloModule t\n\nless {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  c = s32[] parameter(2)\n  d = s32[] parameter(3)\n  ROOT lt = pred[] compare(a, b), direction=LT\n}\n\n\
               ENTRY main {\n  k = s32[6] constant({1, 0, 1, 0, 2, 0})\n  v = s32[6] constant({0, 1, 2, 3, 4, 5})\n  ROOT s = (s32[6], s32[6]) sort(k, v), dimensions={0}, is_stable=true, to_apply=less\n}\n";
    let m = hlo_check::parse(src).expect("valid");
    let out = interp::run(&m, &[]).expect("runs");
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [0, 0, 0, 1, 1, 2]);
    assert_eq!(out[1].to_vec::<i32>().unwrap(), [1, 3, 5, 0, 2, 4], "equal keys keep their order");
}

#[test]
fn bitcast_convert_reinterprets_little_endian_bytes() {
    assert_eq!(
        eval("  a = f32[2] constant({1, -2})\n  ROOT r = u32[2] bitcast-convert(a)"),
        ["1065353216", "3221225472"]
    );
    assert_eq!(
        eval("  a = f32[] constant(1)\n  ROOT r = u8[4] bitcast-convert(a)"),
        ["0", "0", "128", "63"]
    );
}

#[test]
fn out_of_range_starts_are_clamped() {
    let body = "  a = s32[5] iota(), iota_dimension=0\n  i = s32[] constant(4)\n  ROOT r = s32[2] dynamic-slice(a, i), dynamic_slice_sizes={2}";
    assert_eq!(eval(body), ["3", "4"]);
    let body = "  a = s32[5] iota(), iota_dimension=0\n  u = s32[2] constant({9, 9})\n  i = s32[] constant(-3)\n  ROOT r = s32[5] dynamic-update-slice(a, u, i)";
    assert_eq!(eval(body), ["9", "9", "2", "3", "4"]);
}

#[test]
fn conditional_index_out_of_range_takes_the_last_branch() {
    let src = "HloModule t\n\nb0 {\n  p = s32[] parameter(0)\n  ROOT r = s32[] constant(10)\n}\n\nb1 {\n  p = s32[] parameter(0)\n  ROOT r = s32[] constant(11)\n}\n\n\
               ENTRY main {\n  i = s32[] constant(7)\n  x = s32[] constant(0)\n  ROOT c = s32[] conditional(i, x, x), branch_computations={b0, b1}\n}\n";
    let m = hlo_check::parse(src).expect("valid");
    let out = interp::run(&m, &[]).expect("runs");
    assert_eq!(out[0].to_vec::<i32>().unwrap(), [11]);
}

#[test]
fn elided_constants_are_an_error_at_the_instruction_not_a_panic() {
    let src = "HloModule t\n\nENTRY main {\n  ROOT c = f32[4] constant({...})\n}\n";
    let m = hlo_check::parse(src).expect("valid");
    let e = interp::run(&m, &[]).expect_err("values are unknown");
    let text = hlo_ir::Diagnostics::from(e).render(src, "t.hlo", false);
    assert!(text.starts_with("t.hlo:4:8: error: cannot evaluate `c` (constant)"), "{text}");
}

#[test]
fn a_computation_used_for_two_branches_gets_each_branch_operand() {
    // Both branches are `id`: the operand must follow the branch index, not the callee.
    let src = "HloModule t\n\nid {\n  p = s32[] parameter(0)\n  ROOT r = s32[] copy(p)\n}\n\n\
               ENTRY main {\n  t = pred[] constant(false)\n  i = s32[] constant(1)\n  a = s32[] constant(10)\n  b = s32[] constant(20)\n  \
               c1 = s32[] conditional(t, a, b), true_computation=id, false_computation=id\n  \
               c2 = s32[] conditional(i, a, b), branch_computations={id, id}\n  ROOT r = (s32[], s32[]) tuple(c1, c2)\n}\n";
    let m = hlo_check::parse(src).expect("valid");
    let out = interp::run(&m, &[]).expect("runs");
    assert_eq!(
        (out[0].to_vec::<i32>().unwrap(), out[1].to_vec::<i32>().unwrap()),
        (vec![20], vec![20])
    );
}

#[test]
fn fp8_converts_round_once_and_operations_round_through_f16() {
    // f32 → f8e4m3fn: ties to even (1.0625 → 1, 1.1875 → 1.25), past the largest finite
    // value NaN (no infinity), subnormals kept (2^-9 is the smallest).
    let cvt = "  a = f32[6] constant({1.0625, 1.1875, 464, 465, 0.001953125, -0.0009765625})\n  c = f8e4m3fn[6] convert(a)\n  ROOT r = f32[6] convert(c)";
    assert_eq!(eval(cvt), ["1.0", "1.25", "448.0", "NaN", "0.001953125", "-0.0"]);
    // f8e5m2 has infinities: overflow goes there.
    assert_eq!(
        eval(
            "  a = f32[2] constant({61440, -1e9})\n  c = f8e5m2[2] convert(a)\n  ROOT r = f32[2] convert(c)"
        ),
        ["inf", "-inf"]
    );
    // f4e2m1fn saturates at ±6 and has neither NaN nor infinity.
    assert_eq!(
        eval(
            "  a = f32[4] constant({7, -100, 0.25, 5})\n  c = f4e2m1fn[4] convert(a)\n  ROOT r = f32[4] convert(c)"
        ),
        ["6.0", "-6.0", "0.0", "4.0"]
    );
    // 1.125 * 1.125 = 1.265625: f16 keeps it, then the e4m3fn tie-free rounding gives 1.25;
    // 448 + 448 overflows to NaN.
    assert_eq!(binary("f8e4m3fn[2]", "multiply", "{1.125, 448}", "{1.125, 1}"), ["1.25", "448.0"]);
    assert_eq!(binary("f8e4m3fn[]", "add", "448", "448"), ["NaN"]);
    // f8e8m0fnu: powers of two; a tie (3 = 1.5 * 2) rounds up.
    assert_eq!(binary("f8e8m0fnu[]", "add", "2", "1"), ["4.0"]);
}

#[test]
fn sub_byte_integers_wrap_and_bitcast_packs_low_bits_first() {
    assert_eq!(binary("s4[3]", "add", "{7, -8, 3}", "{1, -1, 3}"), ["-8", "7", "6"]);
    assert_eq!(binary("u4[2]", "multiply", "{15, 4}", "{2, 4}"), ["14", "0"]);
    assert_eq!(binary("s2[2]", "add", "{1, -2}", "{1, -1}"), ["-2", "1"]);
    // f32 → s4 saturates, s32 → s4 wraps.
    assert_eq!(
        eval("  a = f32[2] constant({100, -9.5})\n  ROOT r = s4[2] convert(a)"),
        ["7", "-8"]
    );
    assert_eq!(eval("  a = s32[2] constant({9, -9})\n  ROOT r = s4[2] convert(a)"), ["-7", "7"]);
    // 0x12 = 18 splits into [2, 1] (element 0 is the low nibble), and joins back.
    assert_eq!(
        eval("  a = s8[2] constant({18, -8})\n  ROOT r = s4[2,2] bitcast-convert(a)"),
        ["2", "1", "-8", "-1"]
    );
    assert_eq!(
        eval("  a = s4[1,2] constant({{2, 1}})\n  ROOT r = s8[1] bitcast-convert(a)"),
        ["18"]
    );
}
