//! Scatters split over the pool by the operand rows their windows land in ("owner
//! computes", `codegen::scatter::rows_owned`): each part copies its rows and applies, in
//! the updates' order, the windows that land there. Colliding updates, windows out of
//! bounds, an order-sensitive combiner, scatter dimensions after the window dimensions,
//! and windows thick along the first dimension (not split) give the interpreter's bits
//! on 1, 3 and 7 threads.

use hlo_ir::Tensor;
use hlo_runtime::{CompileOptions, Program};

/// `combine(a, b) = a * 0.5 + b`: the result depends on the order of colliding updates.
const HALF_ADD: &str = "half_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  h = f32[] constant(0.5)
  m = f32[] multiply(a, h)
  ROOT s = f32[] add(m, b)
}
";

/// Row indices `(i * 7) % modulus` for `i` in `0..n`, as `s32[n, 1]`: every row hit
/// several times, and the rows from the operand's end on out of bounds.
fn indices(n: usize, modulus: i64) -> String {
    format!(
        "  io = s32[{n},1] iota(), iota_dimension=0\n  seven = s32[] constant(7)\n  \
         sevens = s32[{n},1] broadcast(seven), dimensions={{}}\n  mo = s32[] constant({modulus})\n  \
         mos = s32[{n},1] broadcast(mo), dimensions={{}}\n  i7 = s32[{n},1] multiply(io, sevens)\n  \
         idx = s32[{n},1] remainder(i7, mos)\n"
    )
}

fn run(src: &str, inputs: &[Tensor], threads: usize) -> Vec<Vec<u8>> {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let p = Program::compile(&m, &CompileOptions::default().with_threads(threads)).unwrap();
    p.run(inputs).unwrap().iter().map(|t| t.bytes().to_vec()).collect()
}

fn check(src: &str, what: &str) {
    let m = hlo_driver::parse(src).unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
    let inputs = hlo_interp::seeded::seeded_inputs(&m.entry_param_shapes(), 5).unwrap();
    let want: Vec<Vec<u8>> =
        hlo_interp::run(&m, &inputs).unwrap().iter().map(|t| t.bytes().to_vec()).collect();
    // Several runs each: a part writing outside its rows would race with its neighbour.
    for threads in [1, 3, 7, 7, 7] {
        assert!(
            run(src, &inputs, threads) == want,
            "{what}: {threads} threads differ from the interpreter"
        );
    }
}

/// The module `ROOT s = x_shape scatter(x, idx, u)` with the updates `u_shape`, the index
/// instructions `idx` (ending in one named `idx`) and the scatter's dimension numbers
/// `dims`, combined by [`HALF_ADD`].
fn scatter_module(x_shape: &str, u_shape: &str, idx: &str, dims: &str) -> String {
    format!(
        "HloModule t\n{HALF_ADD}ENTRY e {{\n  x = {x_shape} parameter(0)\n  u = {u_shape} parameter(1)\n{idx}  \
         ROOT s = {x_shape} scatter(x, idx, u), {dims}, index_vector_dim=1, to_apply=half_add\n}}\n"
    )
}

#[test]
fn embedding_gradient_rows_split_with_collisions_in_order() {
    // 2000 windows of one row of 64 into 512 rows (+ 48 out of bounds): about 4 updates
    // per row, combined in order by whichever part owns the row.
    let dims =
        "update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}";
    let src = scatter_module("f32[512,64]", "f32[2000,1,64]", &indices(2000, 560), dims);
    check(&src, "row windows");
}

#[test]
fn inserted_row_dimension_with_scatter_dims_after_the_window() {
    // Updates `[64, n]`: the window (64 columns) first, the scatter dimension last, so each
    // element loads its index vector; the row is an inserted dimension.
    let dims = "update_window_dims={0}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}";
    let src = scatter_module("f32[512,64]", "f32[64,2000]", &indices(2000, 530), dims);
    check(&src, "scatter dims last");
}

#[test]
fn point_updates_into_a_3d_operand_split_by_the_first_dimension() {
    // take_along_axis's gradient: single elements at (b, r, c), several on one element.
    let n = 4096;
    let idx = format!(
        "  io = s32[{n},3] iota(), iota_dimension=0\n  c = s32[3] constant({{5, 3, 11}})\n  \
         cs = s32[{n},3] broadcast(c), dimensions={{1}}\n  m = s32[] constant(17)\n  \
         ms = s32[{n},3] broadcast(m), dimensions={{}}\n  p = s32[{n},3] multiply(io, cs)\n  \
         idx = s32[{n},3] remainder(p, ms)\n"
    );
    let dims =
        "update_window_dims={1,2,3}, inserted_window_dims={}, scatter_dims_to_operand_dims={0,1,2}";
    let src = scatter_module("f32[16,64,64]", &format!("f32[{n},1,1,1]"), &idx, dims);
    check(&src, "point windows");
}

#[test]
fn windows_two_rows_thick_are_not_split_and_stay_exact() {
    // Windows of 2 rows x 64: one window spans two rows, so the scatter runs whole.
    let dims =
        "update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}";
    let src = scatter_module("f32[512,64]", "f32[2000,2,64]", &indices(2000, 520), dims);
    check(&src, "thick windows");
}
