//! A tuple-shaped entry parameter is partitioned leaf by leaf: one parameter of the leaves'
//! local shapes carrying their shardings, read through get-tuple-element, and nothing is
//! computed replicated.

use hlo_spmd::{partition, sharding_propagation};

#[test]
fn tuple_parameter_takes_its_leaves_local_shapes() {
    let src = r#"HloModule tuple_parameter

ENTRY main {
  p = (f32[8,4], f32[4]) parameter(0), sharding={{devices=[4,1]<=[4]}, {replicated}}
  a = f32[8,4] get-tuple-element(p), index=0
  b = f32[4] get-tuple-element(p), index=1
  bb = f32[8,4] broadcast(b), dimensions={1}
  ROOT s = f32[8,4] add(a, bb), sharding={devices=[4,1]<=[4]}
}
"#;
    let mut m = hlo_check::parse(src).expect("the module parses").into_inner();
    sharding_propagation::propagate(&mut m);
    let out = partition::partition(&mut m).expect("partitions").expect("on 4 devices");
    assert!(out.rematerialized.is_empty(), "computed replicated: {:?}", out.rematerialized);
    let text = hlo_ir::text::print(&m);
    assert!(
        text.contains(
            "(f32[2,4], f32[4]) parameter(0), sharding={{devices=[4,1]<=[4]}, {replicated}}"
        ),
        "{text}"
    );
    assert!(!text.contains("all-gather") && !text.contains("f32[8,4]"), "{text}");
    hlo_check::parse(&text).unwrap_or_else(|d| {
        panic!("the partitioned program checks:\n{}", d.render(&text, "partitioned", false))
    });
}
