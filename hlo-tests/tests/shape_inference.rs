//! Shape inference over every corpus and external module, plus hand-written tricky cases.

use hlo_check::shape_inference::{check_module, covers, infer, show};
use hlo_ir::text::split_modules;
use hlo_ir::{Module, Opcode};

/// Modules that are genuinely ill-typed under XLA's HLO rules: (file#module, the exact
/// number of errors, a substring each error must contain, in source order, and the reason).
const EXPECTED_FAILURES: &[(&str, &[&str], &str)] = &[
    (
        "invalid_concat.hlo#0",
        &["concatenate operands differ outside dimension"],
        "the test's purpose: operands differ outside the concatenated dimension",
    ),
    (
        "import.hlo#0",
        &[
            "convolution window size 3 of spatial dimension 0 differs from the kernel's size 2",
            "map computation `map_computation_returning_tuple` must return a scalar, returns (f32[])",
            "reduce init value 0 must be a f32[] scalar, got f32[4]",
            "select computation `ge_select_returning_tuple` must return pred[]",
            "sort comparator `compare_returning_tuple` must return pred[]",
        ],
        "MHLO-importer lit test: XLA's shape inference rejects a window size != kernel spatial size, a map computation \
         returning an (f32[]) tuple instead of f32[], a non-scalar reduce init, and select/sort computations returning a \
         (pred[]) tuple instead of pred[]",
    ),
    (
        "while.hlo#0",
        &[
            "broadcast maps operand dim 0 (size 1) to result dim 0 (size 3)",
            "broadcast maps operand dim 0 (size 1) to result dim 0 (size 3)",
        ],
        "MHLO-importer lit test: broadcast f32[1] -> f32[3] with dimensions={0}; the HLO broadcast needs exact sizes (no size-1 expansion)",
    ),
];

fn check_dir(sub: &str) -> (usize, usize) {
    let dir = hlo_tests::shared_dir().join(sub);
    let (mut ok, mut rejected, mut failures) = (0, 0, Vec::new());
    let (mut instrs, mut skipped) = (0, std::collections::BTreeMap::<&str, usize>::new());
    for path in hlo_tests::hlo_files(&dir) {
        let src = std::fs::read_to_string(&path).expect("UTF-8");
        let file = path.file_name().unwrap().to_string_lossy().to_string();
        for (k, text) in split_modules(&src).iter().enumerate() {
            let key = format!("{file}#{k}");
            let m = hlo_tests::parse_verified(text)
                .unwrap_or_else(|d| panic!("{key}: {}", d.render(text, &key, false)));
            let diags = check_module(&m);
            for comp in m.comps() {
                for n in comp.graph().node_indices() {
                    instrs += 1;
                    let op = comp.instr(n).op.opcode();
                    if !covers(op) {
                        *skipped.entry(op.name()).or_default() += 1;
                    }
                }
            }
            let expected = EXPECTED_FAILURES.iter().find(|(f, _, _)| *f == key);
            match (diags.has_errors(), expected) {
                (false, None) => ok += 1,
                (true, Some((_, want, _))) => {
                    let mut got: Vec<_> = diags.iter().collect();
                    got.sort_by_key(|d| d.span.map(|s| s.start));
                    if got.len() == want.len()
                        && got.iter().zip(want.iter()).all(|(d, w)| d.message.contains(w))
                    {
                        rejected += 1;
                    } else {
                        failures.push(format!(
                            "{key}: expected diagnostics {want:?}, got:\n{}",
                            diags.render(text, &key, false)
                        ));
                    }
                }
                (false, Some(_)) => failures
                    .push(format!("{key}: expected to be rejected, but check_module accepts it")),
                (true, None) => {
                    failures.push(format!("{key}:\n{}", diags.render(text, &key, false)))
                }
            }
        }
    }
    println!(
        "{sub}: {ok} modules pass shape inference, {rejected} rejected as expected; {instrs} instructions, not yet inferred: {skipped:?}"
    );
    assert!(
        failures.is_empty(),
        "{} modules in {sub} fail:\n{}",
        failures.len(),
        failures.join("\n")
    );
    (ok, rejected)
}

#[test]
fn corpus_shapes_check() {
    let (ok, rejected) = check_dir("corpus");
    assert_eq!((ok, rejected), (137, 0));
}

#[test]
fn external_shapes_check() {
    let (ok, rejected) = check_dir("external-hlo");
    assert_eq!((ok, rejected), (221 - EXPECTED_FAILURES.len(), EXPECTED_FAILURES.len()));
}

/// Parsed and verified, not checked: these tests run shape inference themselves.
fn parse(src: &str) -> Module {
    hlo_tests::parse_verified(src)
        .unwrap_or_else(|d| panic!("{}", d.render(src, "test.hlo", false)))
}

/// Infers the shape of instruction `name` of the entry computation.
fn infer_named(src: &str, name: &str) -> Result<String, String> {
    let m = parse(src);
    let comp = m.entry();
    let n = comp.find(name).unwrap_or_else(|| panic!("no instruction {name}"));
    infer(&m, comp, n).map(|s| show(&s)).map_err(|d| d.message)
}

/// A module whose entry computation is `body` (parameters first, the root last).
fn module(body: &str) -> String {
    format!(
        "HloModule t\n\nadd_f32 {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}}\n\n\
         add2 {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  c = f32[] parameter(2)\n  d = f32[] parameter(3)\n  \
         s = f32[] add(a, c)\n  t = f32[] add(b, d)\n  ROOT r = (f32[], f32[]) tuple(s, t)\n}}\n\n\
         ENTRY main {{\n{body}\n}}\n"
    )
}

#[track_caller]
fn assert_shape(body: &str, name: &str, want: &str) {
    let src = module(body);
    assert_eq!(infer_named(&src, name).unwrap_or_else(|e| panic!("{e}")), want);
    let m = parse(&src);
    let d = check_module(&m);
    assert!(!d.has_errors(), "{}", d.render(&src, "test.hlo", false));
}

#[track_caller]
fn assert_error(body: &str, name: &str, want: &str) {
    let src = module(body);
    assert_eq!(infer_named(&src, name).expect_err("must be rejected"), want);
}

#[test]
fn gather_variants() {
    // Embedding lookup.
    assert_shape(
        "  op = f32[50,16] parameter(0)\n  idx = s32[8,1] parameter(1)\n  \
         ROOT g = f32[8,16] gather(op, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,16}",
        "g",
        "f32[8,16]",
    );
    // Batching dims (vmapped gather).
    assert_shape(
        "  op = f32[4,10,16] parameter(0)\n  idx = s32[4,5,1] parameter(1)\n  \
         ROOT g = f32[4,5,16] gather(op, idx), offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,16}",
        "g",
        "f32[4,5,16]",
    );
    // Implicit trailing index vector dim; offset dims interleaved with batch dims.
    assert_shape(
        "  op = f32[3,4,5] parameter(0)\n  idx = s32[2,6] parameter(1)\n  \
         ROOT g = f32[2,3,6,5] gather(op, idx), offset_dims={1,3}, collapsed_slice_dims={1}, start_index_map={1}, index_vector_dim=2, slice_sizes={3,1,5}",
        "g",
        "f32[2,3,6,5]",
    );
    // Index vector dim first, two start indices, no collapsed dims.
    assert_shape(
        "  op = f32[7,9] parameter(0)\n  idx = s32[2,3] parameter(1)\n  \
         ROOT g = f32[3,2,4] gather(op, idx), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=0, slice_sizes={2,4}",
        "g",
        "f32[3,2,4]",
    );
}

#[test]
fn map_variants() {
    assert_shape(
        "  a = f32[4,3] parameter(0)\n  b = f32[4,3] parameter(1)\n  \
         ROOT m = f32[4,3] map(a, b), dimensions={0,1}, to_apply=add_f32",
        "m",
        "f32[4,3]",
    );
    assert_error(
        "  a = f32[4,3] parameter(0)\n  b = f32[3,4] parameter(1)\n  \
         ROOT m = f32[4,3] map(a, b), dimensions={0,1}, to_apply=add_f32",
        "m",
        "`m`: map operands must have the same dimensions: f32[4,3] and f32[3,4]",
    );
    assert_error(
        "  a = f32[4] parameter(0)\n  b = s32[4] parameter(1)\n  \
         ROOT m = f32[4] map(a, b), dimensions={0}, to_apply=add_f32",
        "m",
        "`m`: map computation `add_f32` parameter 1 is f32[], expected s32[] (operand 1's element type)",
    );
    assert_error(
        "  a = f32[4] parameter(0)\n  b = f32[4] parameter(1)\n  c = f32[4] parameter(2)\n  d = f32[4] parameter(3)\n  \
         ROOT m = f32[4] map(a, b, c, d), dimensions={0}, to_apply=add2",
        "m",
        "`m`: map computation `add2` must return a scalar, returns (f32[], f32[])",
    );
}

#[test]
fn scatter_variants() {
    assert_shape(
        "  op = f32[50,16] parameter(0)\n  idx = s32[8,1] parameter(1)\n  up = f32[8,16] parameter(2)\n  \
         ROOT s = f32[50,16] scatter(op, idx, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_f32",
        "s",
        "f32[50,16]",
    );
    // Batching dims, implicit index vector dim, partial window.
    assert_shape(
        "  op = f32[4,10,16] parameter(0)\n  idx = s32[4,5] parameter(1)\n  up = f32[4,5,8] parameter(2)\n  \
         ROOT s = f32[4,10,16] scatter(op, idx, up), update_window_dims={2}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, index_vector_dim=2, to_apply=add_f32",
        "s",
        "f32[4,10,16]",
    );
    assert_error(
        "  op = f32[50,16] parameter(0)\n  idx = s32[8,1] parameter(1)\n  up = f32[9,16] parameter(2)\n  \
         ROOT s = f32[50,16] scatter(op, idx, up), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_f32",
        "s",
        "`s`: scatter update 0 dim 0 is 9, but indices dim 0 is 8",
    );
}

#[test]
fn convolutions() {
    // Weight gradient: f01b_i01o->01bf.
    assert_shape(
        "  x = f32[3,10,10,2] parameter(0)\n  k = f32[3,8,8,5] parameter(1)\n  \
         ROOT c = f32[3,3,2,5] convolution(x, k), window={size=8x8}, dim_labels=f01b_i01o->01bf",
        "c",
        "f32[3,3,2,5]",
    );
    // Same labels with padding and window (rhs) dilation.
    assert_shape(
        "  x = f32[3,10,10,2] parameter(0)\n  k = f32[3,3,3,5] parameter(1)\n  \
         ROOT c = f32[8,8,2,5] convolution(x, k), window={size=3x3 pad=1_1x1_1 rhs_dilate=2x2}, dim_labels=f01b_i01o->01bf",
        "c",
        "f32[8,8,2,5]",
    );
    // Input gradient: base (lhs) dilation, stride.
    assert_shape(
        "  x = f32[2,7,7,4] parameter(0)\n  k = f32[3,3,4,6] parameter(1)\n  \
         ROOT c = f32[2,7,7,6] convolution(x, k), window={size=3x3 stride=2x2 pad=1_1x1_1 lhs_dilate=2x2}, dim_labels=b01f_01io->b01f",
        "c",
        "f32[2,7,7,6]",
    );
    // Depthwise (feature groups) and batch groups.
    assert_shape(
        "  x = f32[1,5,5,4] parameter(0)\n  k = f32[3,3,1,4] parameter(1)\n  \
         ROOT c = f32[1,3,3,4] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=4",
        "c",
        "f32[1,3,3,4]",
    );
    assert_shape(
        "  x = f32[8,5,5,4] parameter(0)\n  k = f32[3,3,4,8] parameter(1)\n  \
         ROOT c = f32[4,3,3,8] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=2",
        "c",
        "f32[4,3,3,8]",
    );
    assert_error(
        "  x = f32[1,5,5,4] parameter(0)\n  k = f32[3,3,3,4] parameter(1)\n  \
         ROOT c = f32[1,3,3,4] convolution(x, k), window={size=3x3}, dim_labels=b01f_01io->b01f",
        "c",
        "`c`: convolution input features (4) / feature_group_count (1) must equal kernel input features (3)",
    );
}

#[test]
fn dots() {
    // Batch dims in the middle: result = batch ++ lhs free ++ rhs free; type from the text.
    assert_shape(
        "  a = bf16[2,3,4,5] parameter(0)\n  b = bf16[5,3,7] parameter(1)\n  \
         ROOT d = f32[3,2,4,7] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={3}, rhs_batch_dims={1}, rhs_contracting_dims={0}",
        "d",
        "f32[3,2,4,7]",
    );
    assert_error(
        "  a = f32[8,16] parameter(0)\n  b = f32[32,4] parameter(1)\n  \
         ROOT dot.1 = f32[8,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
        "dot.1",
        "`dot.1`: dot contracting dimension sizes differ: lhs dim 1 is 16, rhs dim 0 is 32",
    );
    assert_error(
        "  a = f32[2,8,16] parameter(0)\n  b = f32[3,16,4] parameter(1)\n  \
         ROOT d = f32[2,8,4] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}",
        "d",
        "`d`: dot batch dimension sizes differ: lhs dim 0 is 2, rhs dim 0 is 3",
    );
}

#[test]
fn pads_and_windows() {
    assert_shape(
        "  x = f32[5,4] parameter(0)\n  z = f32[] parameter(1)\n  ROOT p = f32[8,9] pad(x, z), padding=-2_1_1x0_-1_2",
        "p",
        "f32[8,9]",
    );
    assert_error(
        "  x = f32[2] parameter(0)\n  z = f32[] parameter(1)\n  ROOT p = f32[0] pad(x, z), padding=-3_-1",
        "p",
        "`p`: padding -3_-1_0 of dimension 0 (size 2) gives a negative size -2",
    );
    assert_shape(
        "  x = f32[10,12] parameter(0)\n  z = f32[] parameter(1)\n  \
         ROOT r = f32[9,11] reduce-window(x, z), window={size=3x2 stride=2x1 pad=1_0x0_2 lhs_dilate=2x1 rhs_dilate=1x3}, to_apply=add_f32",
        "r",
        "f32[9,11]",
    );
    // Window larger than the padded base: empty output.
    assert_shape(
        "  x = f32[2] parameter(0)\n  z = f32[] parameter(1)\n  ROOT r = f32[0] reduce-window(x, z), window={size=3}, to_apply=add_f32",
        "r",
        "f32[0]",
    );
}

#[test]
fn elementwise_and_data_movement() {
    assert_shape(
        "  x = u32[4,2] parameter(0)\n  ROOT b = u64[4] bitcast-convert(x)",
        "b",
        "u64[4]",
    );
    assert_shape(
        "  x = f32[4] parameter(0)\n  ROOT b = u8[4,4] bitcast-convert(x)",
        "b",
        "u8[4,4]",
    );
    assert_error(
        "  x = u32[4,3] parameter(0)\n  ROOT b = u64[4] bitcast-convert(x)",
        "b",
        "`b`: bitcast-convert from u32 to u64 needs a last operand dimension of 2, operand is u32[4,3]",
    );
    assert_shape(
        "  x = f32[4,3] parameter(0)\n  y = f32[4,3] parameter(1)\n  ROOT c = pred[4,3] compare(x, y), direction=LT",
        "c",
        "pred[4,3]",
    );
    assert_shape(
        "  p = pred[] parameter(0)\n  x = f32[4] parameter(1)\n  y = f32[4] parameter(2)\n  ROOT s = f32[4] select(p, x, y)",
        "s",
        "f32[4]",
    );
    assert_shape(
        "  lo = f32[] parameter(0)\n  x = f32[4] parameter(1)\n  hi = f32[4] parameter(2)\n  ROOT c = f32[4] clamp(lo, x, hi)",
        "c",
        "f32[4]",
    );
    assert_error(
        "  x = f32[4] parameter(0)\n  y = f32[4] parameter(1)\n  ROOT c = pred[4] compare(x, y), direction=LT, type=SIGNED",
        "c",
        "`c`: compare of floating-point f32 operands must use type FLOAT or TOTALORDER",
    );
    assert_shape("  x = c64[3] parameter(0)\n  ROOT a = f32[3] abs(x)", "a", "f32[3]");
    assert_shape("  x = f32[3] parameter(0)\n  ROOT a = pred[3] is-finite(x)", "a", "pred[3]");
    assert_error(
        "  x = f32[4] parameter(0)\n  y = f32[8] parameter(1)\n  ROOT add.1 = f32[8] add(x, y)",
        "add.1",
        "`add.1`: add operands must have identical dimensions (no implicit broadcast in HLO): f32[4] and f32[8]",
    );
    assert_error(
        "  x = s32[4] parameter(0)\n  ROOT f = s32[4] floor(x)",
        "f",
        "`f`: floor expects floating-point operands, got s32",
    );
    assert_error(
        "  x = f32[4] parameter(0)\n  y = bf16[4] parameter(1)\n  ROOT m = f32[4] multiply(x, y)",
        "m",
        "`m`: multiply operands must have the same element type: f32 and bf16",
    );
    assert_shape(
        "  x = f32[2,3,4] parameter(0)\n  ROOT t = f32[4,2,3] transpose(x), dimensions={2,0,1}",
        "t",
        "f32[4,2,3]",
    );
    assert_shape(
        "  x = f32[10,7] parameter(0)\n  ROOT s = f32[3,7] slice(x), slice={[1:8:3], [0:7]}",
        "s",
        "f32[3,7]",
    );
    assert_error(
        "  x = f32[10] parameter(0)\n  ROOT s = f32[3] slice(x), slice={[8:11]}",
        "s",
        "`s`: slice range [8:11] of dimension 0 is not within 0 <= start <= limit <= 10",
    );
    assert_shape(
        "  x = f32[2,3] parameter(0)\n  y = f32[5,3] parameter(1)\n  ROOT c = f32[7,3] concatenate(x, y), dimensions={0}",
        "c",
        "f32[7,3]",
    );
    assert_error(
        "  x = f32[4] parameter(0)\n  ROOT b = f32[3,5] broadcast(x), dimensions={1}",
        "b",
        "`b`: broadcast maps operand dim 0 (size 4) to result dim 1 (size 5); sizes must match",
    );
    assert_error(
        "  x = f32[4,6] parameter(0)\n  ROOT r = f32[5,5] reshape(x)",
        "r",
        "`r`: reshape changes the element count: operand has 24 elements, result has 25",
    );
    assert_shape(
        "  x = f32[8,8] parameter(0)\n  i = s32[] parameter(1)\n  j = s32[] parameter(2)\n  ROOT d = f32[2,8] dynamic-slice(x, i, j), dynamic_slice_sizes={2,8}",
        "d",
        "f32[2,8]",
    );
    assert_shape(
        "  x = f32[2,5] parameter(0)\n  z = f32[] parameter(1)\n  ROOT r = (f32[2], f32[2]) reduce(x, x, z, z), dimensions={1}, to_apply=add2",
        "r",
        "(f32[2], f32[2])",
    )
}

#[test]
fn declared_shape_mismatch_names_both_shapes() {
    let src = module(
        "  x = f32[8] parameter(0)\n  y = f32[8] parameter(1)\n  ROOT add.3 = f32[4] add(x, y)",
    );
    let m = parse(&src);
    let d = check_module(&m);
    let msgs: Vec<_> = d.iter().map(|d| d.message.clone()).collect();
    assert_eq!(msgs, ["`add.3` is declared f32[4] but add of f32[8] and f32[8] gives f32[8]"]);
}

/// The module doc lists every opcode `covers` rejects under "Not yet inferred", and
/// names every covered opcode under "Covered".
#[test]
fn module_doc_lists_coverage() {
    let src = include_str!("../../ir/check/src/shape_inference/mod.rs");
    let doc: String =
        src.lines().take_while(|l| l.starts_with("//!")).collect::<Vec<_>>().join("\n");
    let covered = &doc[doc.find("**Covered**").unwrap()..doc.find("**Not yet inferred**").unwrap()];
    let missing = &doc[doc.find("**Not yet inferred**").unwrap()..];
    let missing = &missing[..missing.find("\n//!\n").unwrap_or(missing.len())];
    let (mut yes, mut no) = (0, 0);
    for &op in Opcode::ALL {
        let tick = format!("`{}`", op.name());
        if covers(op) {
            yes += 1;
            assert!(covered.contains(&tick), "{tick} is covered but not listed as covered");
            assert!(!missing.contains(&tick), "{tick} is covered but listed as not yet inferred");
        } else {
            no += 1;
            assert!(
                missing.contains(&tick),
                "{tick} is not covered but not listed as not yet inferred"
            );
        }
    }
    println!("{yes} opcodes covered, {no} not yet inferred");
}

#[test]
fn bench_shapes_check() {
    let (ok, rejected) = check_dir("bench");
    assert!(ok >= 30 && rejected == 0);
}

#[test]
fn collectives_and_control_flow() {
    assert_shape(
        "  x = f32[4,2] parameter(0)\n  ROOT g = f32[4,4] all-gather(x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={1}, use_global_device_ids=true",
        "g",
        "f32[4,4]",
    );
    // Empty groups: the group size is unknown, the declared size of the gathered dim is taken.
    assert_shape(
        "  x = f32[4,2] parameter(0)\n  ROOT g = f32[4,6] all-gather(x), replica_groups={}, dimensions={1}",
        "g",
        "f32[4,6]",
    );
    assert_shape(
        "  x = f32[8] parameter(0)\n  ROOT r = f32[2] reduce-scatter(x), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add_f32",
        "r",
        "f32[2]",
    );
    assert_error(
        "  x = f32[6] parameter(0)\n  ROOT r = f32[2] reduce-scatter(x), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add_f32",
        "r",
        "`r`: reduce-scatter dimension 0 of size 6 is not divisible by the group size 4",
    );
    assert_error(
        "  op = f32[50,16] parameter(0)\n  idx = s32[8,1] parameter(1)\n  \
         ROOT g = f32[8,16] gather(op, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={2,16}",
        "g",
        "`g`: gather slice size of collapsed/batching dimension 0 must be <= 1, got 2",
    );
    assert_shape(
        "  x = f32[4,3] parameter(0)\n  ROOT t = (f32[4,2], s32[4,2]) topk(x), k=2, largest=true",
        "t",
        "(f32[4,2], s32[4,2])",
    );
}
