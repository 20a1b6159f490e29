//! A partitioned program on four interpreter devices computes what the global module
//! computes on one, and a device's failure comes back as an error.

use hlo_ir::Tensor;

/// Rows split over four devices (two each), squared, summed over the split dim: each
/// device sums its rows and an all-reduce adds the partial sums.
const SRC: &str = r#"HloModule sum_of_squares, num_partitions=4

add {
  x = s32[] parameter(0)
  y = s32[] parameter(1)
  ROOT s = s32[] add(x, y)
}

ENTRY main {
  p = s32[8,4] parameter(0), sharding={devices=[4,1]<=[4]}
  q = s32[8,4] multiply(p, p), sharding={devices=[4,1]<=[4]}
  z = s32[] constant(0), sharding={replicated}
  ROOT r = s32[4] reduce(q, z), dimensions={0}, to_apply=add, sharding={replicated}
}
"#;

#[test]
fn four_interpreter_devices_compute_the_global_result() {
    let global = hlo_check::parse(SRC).expect("the module parses");
    let plan = hlo_spmd::devices::plan(&global).expect("partitions");
    assert_eq!(plan.devices, 4);
    assert!(hlo_ir::text::print(&plan.module).contains("all-reduce("));
    let x: Vec<i32> = (0..32).map(|k| k - 7).collect();
    let input = Tensor::from_i32(&[8, 4], &x).expect("an s32[8,4]");
    let one = hlo_interp::run(&global, std::slice::from_ref(&input)).expect("one device runs");
    let four = hlo_devices::run_interp(&plan, &[input]).expect("four devices run");
    assert_eq!(four, one);
    let sums: Vec<i32> = (0..4).map(|c| (0..8).map(|r| x[r * 4 + c].pow(2)).sum()).collect();
    assert_eq!(four[0].to_vec::<i32>().expect("s32"), sums);
}

#[test]
fn inputs_that_do_not_fit_the_plan_are_errors() {
    let global = hlo_check::parse(SRC).expect("the module parses");
    let plan = hlo_spmd::devices::plan(&global).expect("partitions");
    let e = hlo_devices::run_interp(&plan, &[]).expect_err("no input");
    assert!(e.message.contains("takes 1 inputs but 0 were given"), "{}", e.message);
    let wrong = Tensor::from_i32(&[4, 4], &[0; 16]).expect("an s32[4,4]");
    let e = hlo_devices::run_interp(&plan, &[wrong]).expect_err("a wrong shape");
    assert!(e.message.contains("input 0"), "{}", e.message);
}
