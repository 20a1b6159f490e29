use super::*;
use hlo_ir::sharding::IotaList;

fn t(dims: &[u64], v: &[f32]) -> Tensor {
    Tensor::from_f32(dims, v).unwrap()
}

/// Runs `opcode` on `inputs.len()` devices, one thread each, and returns their results.
fn run_all(
    opcode: Opcode,
    attrs: CollectiveAttrs,
    reducer: Opcode,
    inputs: Vec<Tensor>,
) -> Vec<Tensor> {
    let fabric = Fabric::new(inputs.len());
    std::thread::scope(|s| {
        let hs: Vec<_> = inputs
            .into_iter()
            .enumerate()
            .map(|(d, x)| {
                let (f, a) = (&fabric, attrs.clone());
                s.spawn(move || {
                    execute(f, d, opcode, &a, Some(reducer), vec![x]).unwrap().remove(0)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn f32s(ts: &[Tensor]) -> Vec<Vec<f32>> {
    ts.iter().map(|t| t.to_vec::<f32>().unwrap()).collect()
}

#[test]
fn all_reduce_sums_within_groups() {
    let attrs = CollectiveAttrs {
        replica_groups: Some(ReplicaGroups::Iota(IotaList {
            dims: vec![2, 2],
            reshape: vec![4],
            transpose: vec![],
        })),
        ..Default::default()
    };
    let ins = [1.0, 2.0, 10.0, 20.0].iter().map(|&x| t(&[1], &[x])).collect();
    let out = run_all(Opcode::AllReduce, attrs, Opcode::Add, ins);
    assert_eq!(f32s(&out), vec![vec![3.0], vec![3.0], vec![30.0], vec![30.0]]);
}

#[test]
fn gather_scatter_all_to_all_and_permute() {
    let dims = |d| CollectiveAttrs { dimensions: Some(vec![d]), ..Default::default() };
    let ins = || vec![t(&[2], &[1.0, 2.0]), t(&[2], &[3.0, 4.0])];
    let add = Opcode::Add;
    assert_eq!(
        f32s(&run_all(Opcode::AllGather, dims(0), add, ins())),
        vec![vec![1.0, 2.0, 3.0, 4.0]; 2]
    );
    assert_eq!(
        f32s(&run_all(Opcode::ReduceScatter, dims(0), add, ins())),
        vec![vec![4.0], vec![6.0]]
    );
    assert_eq!(
        f32s(&run_all(Opcode::AllToAll, dims(0), add, ins())),
        vec![vec![1.0, 3.0], vec![2.0, 4.0]]
    );
    let perm = CollectiveAttrs { source_target_pairs: Some(vec![(0, 1)]), ..Default::default() };
    let ins = vec![t(&[1], &[5.0]), t(&[1], &[7.0])];
    assert_eq!(
        f32s(&run_all(Opcode::CollectivePermute, perm, add, ins)),
        vec![vec![0.0], vec![5.0]]
    );
}

#[test]
fn gathers_and_scatters_along_inner_dimensions() {
    // [2,2] per device, gathered along dimension 1: rows interleave device by device.
    let ins = || vec![t(&[2, 2], &[1.0, 2.0, 3.0, 4.0]), t(&[2, 2], &[5.0, 6.0, 7.0, 8.0])];
    let dim1 = CollectiveAttrs { dimensions: Some(vec![1]), ..Default::default() };
    let out = run_all(Opcode::AllGather, dim1.clone(), Opcode::Add, ins());
    assert_eq!(out[0].dims(), &[2, 4]);
    assert_eq!(f32s(&out)[1], vec![1.0, 2.0, 5.0, 6.0, 3.0, 4.0, 7.0, 8.0]);
    let out = run_all(Opcode::ReduceScatter, dim1, Opcode::Add, ins());
    assert_eq!(out[1].dims(), &[2, 1]);
    assert_eq!(f32s(&out), vec![vec![6.0, 10.0], vec![8.0, 12.0]]);
}

#[test]
fn reductions_round_to_the_element_type_at_every_step() {
    // bf16: 1 + 2^-8 is not representable; 1 + 2^-8 + 2^-8 is. Folding in group order
    // rounds after each step, as the interpreter does: (1 + 2^-8) -> 1, then 1 + 2^-8 -> 1.
    let b = |x: f32| Tensor::from_bf16(&[1], &[half::bf16::from_f32(x)]).unwrap();
    let tiny = 1.0 / 256.0;
    let out = run_all(
        Opcode::AllReduce,
        CollectiveAttrs::default(),
        Opcode::Add,
        vec![b(1.0), b(tiny), b(tiny)],
    );
    assert_eq!(out[2].to_vec::<half::bf16>().unwrap()[0].to_f32(), 1.0);
    // Integers wrap at their width.
    let s8 = |x: i8| Tensor::from_i8(&[1], &[x]).unwrap();
    let out =
        run_all(Opcode::AllReduce, CollectiveAttrs::default(), Opcode::Add, vec![s8(100), s8(100)]);
    assert_eq!(out[0].to_vec::<i8>().unwrap(), vec![-56]);
    // Maximum is NaN when either operand is, and orders -0 below +0.
    let out = run_all(
        Opcode::AllReduce,
        CollectiveAttrs::default(),
        Opcode::Maximum,
        vec![t(&[2], &[f32::NAN, -0.0]), t(&[2], &[1.0, 0.0])],
    );
    let v = out[0].to_vec::<f32>().unwrap();
    assert!(v[0].is_nan() && v[1] == 0.0 && v[1].is_sign_positive());
    // Unsigned maximum compares as unsigned.
    let u = |x: u32| Tensor::from_u32(&[1], &[x]).unwrap();
    let out = run_all(
        Opcode::AllReduce,
        CollectiveAttrs::default(),
        Opcode::Maximum,
        vec![u(u32::MAX), u(1)],
    );
    assert_eq!(out[1].to_vec::<u32>().unwrap(), vec![u32::MAX]);
}

#[test]
fn refuses_what_it_cannot_run() {
    let f = Fabric::new(1);
    let one = || vec![Tensor::from_f32(&[1], &[1.0]).unwrap()];
    let attrs = CollectiveAttrs::default();
    // A reducer the fabric does not apply (on a group of two: one member has nothing to fold).
    let two = Fabric::new(2);
    let errs: Vec<FabricError> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|d| {
                let (f, a) = (&two, &attrs);
                s.spawn(move || {
                    execute(f, d, Opcode::AllReduce, a, Some(Opcode::Divide), one()).unwrap_err()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(errs.iter().any(|e| matches!(e, FabricError::Reducer(_))), "{errs:?}");
    let e = execute(&f, 0, Opcode::AllGather, &attrs, None, one()).unwrap_err();
    assert!(e.to_string().contains("dimensions"), "{e}");
    let dim3 = CollectiveAttrs { dimensions: Some(vec![3]), ..Default::default() };
    let e = execute(&f, 0, Opcode::AllGather, &dim3, None, one()).unwrap_err();
    assert!(e.to_string().contains("dimension 3"), "{e}");
}

#[test]
fn a_failed_device_does_not_hang_the_others() {
    let fabric = Fabric::new(2);
    std::thread::scope(|s| {
        let h = s.spawn(|| fabric.exchange(0, vec![t(&[1], &[1.0])]));
        std::thread::sleep(std::time::Duration::from_millis(20));
        fabric.abort("device 1: out of memory");
        let e = h.join().unwrap().unwrap_err();
        assert!(matches!(&e, FabricError::Aborted(w) if w.contains("device 1")), "{e}");
    });
}

#[test]
fn mesh_groups_select_named_axes() {
    let rg = ReplicaGroups::Mesh {
        axes: vec![("a".into(), 2), ("b".into(), 2)],
        selection: "{'b'}".into(),
        device_ids: None,
    };
    assert_eq!(groups(Some(&rg), 4).unwrap(), vec![vec![0, 1], vec![2, 3]]);
    let rg = ReplicaGroups::Mesh {
        axes: vec![("a".into(), 2), ("b".into(), 2)],
        selection: "{'a'}".into(),
        device_ids: None,
    };
    assert_eq!(groups(Some(&rg), 4).unwrap(), vec![vec![0, 2], vec![1, 3]]);
    // `device_ids=([2,2]T(1,0))`: mesh position (a, b) is device b * 2 + a.
    let rg = ReplicaGroups::Mesh {
        axes: vec![("a".into(), 2), ("b".into(), 2)],
        selection: "{'a'}".into(),
        device_ids: Some((vec![2, 2], vec![1, 0])),
    };
    assert_eq!(groups(Some(&rg), 4).unwrap(), vec![vec![0, 1], vec![2, 3]]);
    // A 2x4 mesh numbered by `[4,2]T(1,0)`: position (a, b) is device b * 2 + a.
    let rg = ReplicaGroups::Mesh {
        axes: vec![("a".into(), 2), ("b".into(), 4)],
        selection: "{'b'}".into(),
        device_ids: Some((vec![4, 2], vec![1, 0])),
    };
    assert_eq!(groups(Some(&rg), 8).unwrap(), vec![vec![0, 2, 4, 6], vec![1, 3, 5, 7]]);
}

#[test]
fn on_devices_returns_in_device_order_and_reports_the_device_that_failed() {
    assert_eq!(on_devices(3, |d, _| Ok(d * 10)).unwrap(), vec![0, 10, 20]);
    // Device 2 fails before the collective; the others, waiting in it, are woken by the
    // abort, and the error reported is device 2's, not theirs.
    let attrs = CollectiveAttrs { dimensions: Some(vec![0]), ..Default::default() };
    let err = on_devices(4, |d, fabric| {
        if d == 2 {
            return Err(Diagnostic::error(None, "device two gave up"));
        }
        execute(fabric, d, Opcode::AllGather, &attrs, None, vec![t(&[1], &[d as f32])])
            .map_err(|e| Diagnostic::error(None, e.to_string()))
    })
    .unwrap_err();
    assert_eq!(err.message, "device two gave up");
    let err = on_devices(2, |d, _| if d == 1 { panic!("boom") } else { Ok(()) }).unwrap_err();
    assert_eq!(err.message, "device 1 panicked");
}

#[test]
fn binary_reducers_are_a_commutative_op_of_the_two_parameters() {
    use hlo_ir::{Computation, ElemType, Instr, Op, Shape};
    let reducer = |op: Opcode, swap: bool, shape: Shape| {
        let mut c = Computation::new("r");
        let x = c.add_param("x", shape.clone());
        let y = c.add_param("y", shape.clone());
        let ops = if swap { [y, x] } else { [x, y] };
        let r = c.add(Instr::new("r", Op::Plain(op), shape), &ops);
        c.set_root(r);
        c
    };
    let f32s = Shape::scalar(ElemType::F32);
    assert_eq!(binary_reducer(&reducer(Opcode::Add, false, f32s.clone())), Some(Opcode::Add));
    assert_eq!(
        binary_reducer(&reducer(Opcode::Maximum, true, f32s.clone())),
        Some(Opcode::Maximum)
    );
    assert_eq!(binary_reducer(&reducer(Opcode::Subtract, false, f32s)), None);
    assert_eq!(
        binary_reducer(&reducer(Opcode::Add, false, Shape::array(ElemType::F32, &[2]))),
        None
    );
}
