//! Rules found missing while writing the golden `shape/` suite; each module below was
//! checked against XLA (jax 0.10.2) through the oracle: XLA rejects the `reject` ones.

use hlo_check::shape_inference::check_module;

const ADD: &str =
    "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n";

fn errors(body: &str) -> Vec<String> {
    let src = format!("HloModule t\n\n{body}");
    check_module(&verified(&src)).iter().map(|d| d.message.clone()).collect()
}

/// Parsed and structurally verified, not checked: these tests run shape inference on
/// modules `hlo_check::parse` would reject.
fn verified(src: &str) -> hlo_ir::Module {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    match m {
        Some(m) if !diags.has_errors() => m,
        _ => panic!("{}", diags.render(src, "t.hlo", false)),
    }
}

fn reject(body: &str, want: &str) {
    let errs = errors(body);
    assert!(
        errs.len() == 1 && errs[0].contains(want),
        "expected one error containing {want:?}, got {errs:?}"
    );
}

fn accept(body: &str) {
    assert_eq!(errors(body), Vec::<String>::new());
}

fn gather(indices: &str, out: &str, attrs: &str) -> String {
    format!(
        "ENTRY main {{\n  o = f32[5,7,16] parameter(0)\n  i = {indices} parameter(1)\n  ROOT g = {out} gather(o, i), {attrs}\n}}\n"
    )
}

fn scatter(indices: &str, updates: &str, attrs: &str) -> String {
    format!(
        "{ADD}\nENTRY main {{\n  o = f32[5,7,16] parameter(0)\n  i = {indices} parameter(1)\n  u = {updates} parameter(2)\n  \
         ROOT r = f32[5,7,16] scatter(o, i, u), {attrs}, to_apply=add\n}}\n"
    )
}

#[test]
fn gather_batching_dims_pair_up() {
    let ok = "offset_dims={2}, collapsed_slice_dims={1}, start_index_map={1}, operand_batching_dims={0}, \
              start_indices_batching_dims={1}, index_vector_dim=2, slice_sizes={1,1,16}";
    accept(&gather("s32[3,5]", "f32[3,5,16]", ok));
    reject(
        &gather("s32[3,4]", "f32[3,4,16]", ok),
        "gather operand_batching_dims[0] (operand dim 0, size 5) and start_indices_batching_dims[0] (indices dim 1, size 4) \
         must have the same size: operand f32[5,7,16] and indices s32[3,4]",
    );
    reject(
        &gather(
            "s32[3,5]",
            "f32[3,5,7,16]",
            "offset_dims={2,3}, collapsed_slice_dims={}, start_index_map={0}, operand_batching_dims={0}, \
             start_indices_batching_dims={1}, index_vector_dim=2, slice_sizes={1,7,16}",
        ),
        "gather operand dimension 0 is in both start_index_map and operand_batching_dims",
    );
}

#[test]
fn scatter_batching_dims_pair_up() {
    let attrs = |sibd: &str, sdod: &str| {
        format!(
            "update_window_dims={{2}}, inserted_window_dims={{1}}, input_batching_dims={{0}}, \
             scatter_indices_batching_dims={{{sibd}}}, scatter_dims_to_operand_dims={{{sdod}}}, index_vector_dim=2"
        )
    };
    accept(&scatter("s32[3,5]", "f32[3,5,16]", &attrs("1", "1")));
    reject(
        &scatter("s32[3,4]", "f32[3,4,16]", &attrs("1", "1")),
        "scatter input_batching_dims[0] (operand dim 0, size 5) and scatter_indices_batching_dims[0] (indices dim 1, size 4)",
    );
    reject(
        &scatter("s32[3,5]", "f32[3,5,16]", &attrs("1", "0")),
        "scatter operand dimension 0 is in both scatter_dims_to_operand_dims and input_batching_dims",
    );
    reject(
        &scatter("s32[3,5]", "f32[3,5,16]", &attrs("4", "1")),
        "scatter scatter_indices_batching_dims 4 is out of range for rank 2",
    );
    reject(
        &scatter(
            "s32[3,1]",
            "f32[3,16]",
            "update_window_dims={1}, inserted_window_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={1}, \
             scatter_dims_to_operand_dims={1}, index_vector_dim=1",
        ),
        "scatter scatter_indices_batching_dims must not contain index_vector_dim 1",
    );
    reject(
        &scatter(
            "s32[3,5]",
            "f32[3,5,7]",
            "update_window_dims={2}, inserted_window_dims={0}, input_batching_dims={0}, scatter_indices_batching_dims={1}, \
             scatter_dims_to_operand_dims={2}, index_vector_dim=2",
        ),
        "scatter operand dimension 0 is in both inserted_window_dims and input_batching_dims",
    );
}

#[test]
fn batching_dims_on_the_indices_side_need_not_be_sorted() {
    accept(
        "ENTRY main {\n  o = f32[5,6,7,16] parameter(0)\n  i = s32[6,5] parameter(1)\n  ROOT g = f32[6,5,16] gather(o, i), \
         offset_dims={2}, collapsed_slice_dims={2}, start_index_map={2}, operand_batching_dims={0,1}, \
         start_indices_batching_dims={1,0}, index_vector_dim=2, slice_sizes={1,1,1,16}\n}\n",
    );
}

#[test]
fn reduce_allows_no_mixed_precision() {
    let reduce = |x: &str, init: &str, out: &str| {
        format!(
            "{ADD}\nENTRY main {{\n  x = {x}[4,6] parameter(0)\n  z = {init}[] constant(0)\n  \
             ROOT r = {out}[4] reduce(x, z), dimensions={{1}}, to_apply=add\n}}\n"
        )
    };
    accept(&reduce("f32", "f32", "f32"));
    reject(&reduce("bf16", "f32", "f32"), "reduce init value 0 is f32[] but input 0 is bf16[4,6]");
    reject(&reduce("bf16", "bf16", "bf16"), "reducer `add` parameter 0 is f32[], expected bf16[]");
}

#[test]
fn reducer_result_has_the_accumulator_type() {
    reject(
        "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  s = f32[] add(a, b)\n  ROOT c = bf16[] convert(s)\n}\n\n\
         ENTRY main {\n  x = f32[4,6] parameter(0)\n  z = f32[] constant(0)\n  \
         ROOT r = f32[4] reduce(x, z), dimensions={1}, to_apply=add\n}\n",
        "reducer `add` result 0 is bf16[], but its accumulator parameter 0 is f32[]",
    );
}

#[test]
fn scatter_and_select_and_scatter_element_types() {
    reject(
        &format!(
            "{ADD}\nENTRY main {{\n  o = f32[10] parameter(0)\n  i = s32[4,1] parameter(1)\n  u = bf16[4] parameter(2)\n  \
             ROOT r = f32[10] scatter(o, i, u), update_window_dims={{}}, inserted_window_dims={{0}}, \
             scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, to_apply=add\n}}\n"
        ),
        "scatter update 0 bf16[4] must have the element type of operand 0 f32[10]",
    );
    reject(
        "ge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=GE\n}\n\n\
         add {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT s = s32[] add(a, b)\n}\n\n\
         ENTRY main {\n  x = f32[8] parameter(0)\n  dy = s32[4] parameter(1)\n  z = s32[] constant(0)\n  \
         ROOT dx = f32[8] select-and-scatter(x, dy, z), window={size=2 stride=2}, select=ge, scatter=add\n}\n",
        "select-and-scatter source s32[4] must have the element type of the operand f32[8]",
    );
}

#[test]
fn collective_reducers_are_checked() {
    let body = |op: &str| {
        format!(
            "add {{\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT s = s32[] add(a, b)\n}}\n\n\
             ENTRY main {{\n  x = f32[8] parameter(0)\n  ROOT r = {op}\n}}\n"
        )
    };
    reject(
        &body("f32[8] all-reduce(x), replica_groups={{0,1,2,3}}, to_apply=add"),
        "reducer `add` parameter 0 is s32[], expected f32[]",
    );
    reject(
        &body("f32[2] reduce-scatter(x), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=add"),
        "reducer `add` parameter 0 is s32[], expected f32[]",
    );
}

mod pure {
    //! `infer_shape` on operations that are not (yet) instructions.

    use hlo_check::shape_inference::{NoCallees, infer, infer_shape};
    use hlo_ir::op::{ConvDims, Convolution, DotDims, Window, WindowDim};
    use hlo_ir::{ElemType, Op, Opcode, Shape};

    fn arr(e: ElemType, dims: &[u64]) -> Shape {
        Shape::array(e, dims)
    }

    #[test]
    fn elementwise_without_a_graph() {
        let x = arr(ElemType::F32, &[2, 3]);
        assert_eq!(
            infer_shape(&Op::Plain(Opcode::Add), &[&x, &x], None, &NoCallees),
            Ok(x.clone())
        );
        let y = arr(ElemType::F32, &[3, 2]);
        assert_eq!(
            infer_shape(&Op::Plain(Opcode::Add), &[&x, &y], None, &NoCallees),
            Err("add operands must have identical dimensions (no implicit broadcast in HLO): f32[2,3] and f32[3,2]".into())
        );
        let cmp = Op::Compare { direction: hlo_ir::op::CmpDirection::Lt, kind: None };
        assert_eq!(
            infer_shape(&cmp, &[&x, &x], None, &NoCallees),
            Ok(arr(ElemType::Pred, &[2, 3]))
        );
        assert_eq!(
            infer_shape(&Op::Plain(Opcode::Tuple), &[&x, &y], None, &NoCallees),
            Ok(Shape::Tuple(vec![x.clone(), y]))
        );
    }

    #[test]
    fn text_decided_opcodes_need_the_result_shape() {
        let x = arr(ElemType::F32, &[2, 3]);
        for (op, name) in [
            (Op::Plain(Opcode::Convert), "convert"),
            (Op::Reshape { inferred_dimension: None }, "reshape"),
            (Op::Broadcast { dimensions: vec![0, 1] }, "broadcast"),
            (Op::Plain(Opcode::Bitcast), "bitcast"),
        ] {
            assert_eq!(
                infer_shape(&op, &[&x], None, &NoCallees).map_err(|d| d.message),
                Err(format!("the result shape of {name} must be given: the text decides it"))
            );
        }
        let to = arr(ElemType::BF16, &[2, 3]);
        assert_eq!(infer_shape(&Op::Plain(Opcode::Convert), &[&x], Some(&to), &NoCallees), Ok(to));
        let r = arr(ElemType::F32, &[6]);
        assert_eq!(
            infer_shape(&Op::Reshape { inferred_dimension: None }, &[&x], Some(&r), &NoCallees),
            Ok(r)
        );
    }

    #[test]
    fn dot_and_convolution_default_to_the_operand_type() {
        let (l, r) = (arr(ElemType::BF16, &[2, 3]), arr(ElemType::BF16, &[3, 4]));
        let dims =
            DotDims { lhs_contracting: vec![1], rhs_contracting: vec![0], ..DotDims::default() };
        let dot = Op::Dot { opcode: Opcode::Dot, dims: Box::new(dims) };
        assert_eq!(
            infer_shape(&dot, &[&l, &r], None, &NoCallees),
            Ok(arr(ElemType::BF16, &[2, 4]))
        );
        let f32_out = arr(ElemType::F32, &[2, 4]);
        assert_eq!(infer_shape(&dot, &[&l, &r], Some(&f32_out), &NoCallees), Ok(f32_out));
        let r32 = arr(ElemType::F32, &[3, 4]);
        assert!(
            infer_shape(&dot, &[&l, &r32], None, &NoCallees)
                .is_err_and(|e| e.message.contains("must be given"))
        );

        let conv = Op::Convolution(Box::new(Convolution {
            window: Window { dims: vec![WindowDim { size: 3, ..WindowDim::default() }] },
            dims: ConvDims {
                input_batch: 0,
                input_feature: 2,
                input_spatial: vec![1],
                kernel_input_feature: 1,
                kernel_output_feature: 2,
                kernel_spatial: vec![0],
                output_batch: 0,
                output_feature: 2,
                output_spatial: vec![1],
            },
            feature_group_count: 1,
            batch_group_count: 1,
            precision: Vec::new(),
            kind: None,
        }));
        let (input, kernel) = (arr(ElemType::F32, &[1, 10, 4]), arr(ElemType::F32, &[3, 4, 8]));
        assert_eq!(
            infer_shape(&conv, &[&input, &kernel], None, &NoCallees),
            Ok(arr(ElemType::F32, &[1, 8, 8]))
        );
    }

    #[test]
    fn callees_come_from_the_lookup() {
        let src = "HloModule t\n\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n\n\
                   ENTRY main {\n  x = f32[4,6] parameter(0)\n  z = f32[] constant(0)\n  \
                   ROOT r = f32[4] reduce(x, z), dimensions={1}, to_apply=add\n}\n";
        let m = super::verified(src);
        let entry = m.entry();
        let root = entry.root().expect("root");
        let op = &entry.instr(root).op;
        let (x, z) = (arr(ElemType::F32, &[4, 6]), Shape::scalar(ElemType::F32));
        assert_eq!(infer_shape(op, &[&x, &z], None, &m), Ok(arr(ElemType::F32, &[4])));
        assert_eq!(infer(&m, entry, root).map_err(|d| d.message), Ok(arr(ElemType::F32, &[4])));
        assert_eq!(
            infer_shape(op, &[&x, &z], None, &NoCallees),
            Err("called computation does not exist".into())
        );
        // Plain messages: no location, no instruction name (`infer` adds those).
        let bf16 = Shape::scalar(ElemType::BF16);
        assert_eq!(
            infer_shape(op, &[&x, &bf16], None, &m),
            Err("reduce init value 0 is bf16[] but input 0 is f32[4,6]: no mixed floating-point precision in reduce".into())
        );
    }
}
