//! The rewriting API: every edit keeps names unique, references valid and printing
//! deterministic. Each test names the failure it guards against (what the pre-API IR did).

use hlo_ir::op::Op;
use hlo_ir::text::{parse, print};
use hlo_ir::{Instr, Module, NodeIndex, Opcode, Shape};

/// Parsed and structurally verified (hlo-ir's tests sit below `hlo_check::parse`).
fn module(src: &str) -> Module {
    let (m, mut diags) = hlo_ir::text::parse(src);
    if let Some(m) = &m {
        diags.extend(hlo_ir::verify::verify_source(m, src));
    }
    match m {
        Some(m) if !diags.has_errors() => m,
        _ => panic!("{}", diags.render(src, "test.hlo", false)),
    }
}

fn f32s(dims: &[u64]) -> Shape {
    Shape::Array(hlo_ir::ArrayShape {
        elem: hlo_ir::ElemType::F32,
        dims: dims.iter().map(|&d| hlo_ir::Dim::Static(d)).collect(),
        layout: None,
    })
}

fn node(m: &Module, name: &str) -> NodeIndex {
    m.entry().find(name).unwrap_or_else(|| panic!("no `{name}`"))
}

/// Printing, parsing and printing again gives the same text, and the text verifies.
fn assert_fixpoint(m: &Module) -> String {
    let text = print(m);
    let again = module(&text);
    assert_eq!(print(&again), text, "print(parse(print(m))) differs");
    text
}

const CHAIN: &str = r#"HloModule chain, entry_computation_layout={(f32[4]{0}, f32[4]{0})->f32[4]{0}}

ENTRY %main (x: f32[4], y: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %add.100 = f32[4]{0} add(%x, %y)
  %multiply.7 = f32[4]{0} multiply(%add.100, %add.100)
  %after = f32[4]{0} negate(%x), control-predecessors={%multiply.7}
  ROOT %r = f32[4]{0} subtract(%multiply.7, %after)
}
"#;

#[test]
fn replace_all_uses_moves_operands_root_and_control_edges() {
    let mut m = module(CHAIN);
    let (mul, after, x) = (node(&m, "multiply.7"), node(&m, "after"), node(&m, "x"));
    let c = m.comp_mut(m.entry);
    let abs = c.add(Instr::new("abs", Op::Plain(Opcode::Abs), f32s(&[4])), &[x]);
    // Uses as operand (r), as control predecessor (after) move to `abs`.
    assert_eq!(c.replace_all_uses(mul, abs), 1);
    assert_eq!(c.control_predecessors(after), &[abs]);
    assert!(!c.has_users(mul));
    c.remove(mul).expect("dead after RAUW");
    // The root moves too.
    let root = c.root().unwrap();
    let neg = c.add(Instr::new("neg", Op::Plain(Opcode::Negate), f32s(&[4])), &[root]);
    c.replace_all_uses(root, neg);
    // `neg` used `root` and must keep doing so: RAUW(root, neg) replaced the root, and
    // neg's own operand is root (a self-use through RAUW would be a cycle).
    assert_eq!(c.root(), Some(neg));
    let text = assert_fixpoint(&m);
    assert!(text.contains("control-predecessors={%abs."), "{text}");
    assert!(!text.contains("multiply.7"), "{text}");
}

#[test]
fn fresh_names_are_unique_across_the_module() {
    // Before: names were only unique per computation and new instructions tied at seq 0.
    let mut m = module(CHAIN);
    let x = node(&m, "x");
    let mut names = std::collections::HashSet::new();
    for c in m.comps() {
        for i in c.instrs() {
            names.insert(i.name.clone());
        }
    }
    let c = m.comp_mut(m.entry);
    for _ in 0..200 {
        // `add.100` exists: a fresh `add.N` must never be `add.100` again.
        let n = c.add(Instr::new("add.100", Op::Plain(Opcode::Add), f32s(&[4])), &[x, x]);
        assert!(names.insert(c.instr(n).name.clone()), "duplicate name {}", c.instr(n).name);
    }
    let other = m.new_computation("helper");
    let helper_name = other.name.clone();
    assert!(names.insert(helper_name));
    let seqs: std::collections::HashSet<u32> = m.entry().instrs().map(|i| i.seq).collect();
    assert_eq!(seqs.len(), m.entry().len(), "every seq distinct");
}

#[test]
fn users_are_distinct_and_ordered_after_adds() {
    // Before: instructions added by passes all had seq 0, so `users` sorted by seq and
    // deduplicated only adjacent entries: a node used twice by two new users was listed
    // more than once.
    let mut m = module(CHAIN);
    let x = node(&m, "x");
    let c = m.comp_mut(m.entry);
    let a = c.add(Instr::new("a", Op::Plain(Opcode::Add), f32s(&[4])), &[x, x]);
    let b = c.add(Instr::new("b", Op::Plain(Opcode::Add), f32s(&[4])), &[x, x]);
    let users = c.users(x);
    let mut dedup = users.clone();
    dedup.dedup();
    assert_eq!(users, dedup);
    assert_eq!(&users[users.len() - 2..], &[a, b]);
}

#[test]
fn remove_refuses_live_instructions_and_keeps_control_order() {
    let mut m = module(CHAIN);
    let (add, mul, after) = (node(&m, "add.100"), node(&m, "multiply.7"), node(&m, "after"));
    let c = m.comp_mut(m.entry);
    assert!(matches!(c.remove(add), Err(hlo_ir::EditError::HasUsers(_))));
    let root = c.root().unwrap();
    assert!(matches!(c.remove(root), Err(hlo_ir::EditError::IsRoot(_))));
    let x = c.find("x").unwrap();
    assert!(c.remove(x).is_err(), "parameters go through remove_param");
    // Remove `after`'s use chain: r uses after; make r use x instead, then remove after.
    c.replace_operand(root, after, x);
    c.remove(after).unwrap();
    assert!(c.find("after").is_none());
    assert!(c.control_predecessors(root).is_empty());
    let _ = mul;
    assert_fixpoint(&m);
}

#[test]
fn removing_a_node_hands_its_control_predecessors_to_its_successors() {
    let src = r#"HloModule ctl

ENTRY %main (x: f32[4]) -> (f32[4], f32[4]) {
  %x = f32[4]{0} parameter(0)
  %a = f32[4]{0} negate(%x)
  %b = f32[4]{0} abs(%x), control-predecessors={%a}
  %c = f32[4]{0} sine(%x), control-predecessors={%b}
  ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(%a, %c)
}
"#;
    let mut m = module(src);
    let (a, b, cc) = (node(&m, "a"), node(&m, "b"), node(&m, "c"));
    let comp = m.comp_mut(m.entry);
    comp.remove(b).unwrap();
    assert_eq!(comp.control_predecessors(cc), &[a]);
    let text = assert_fixpoint(&m);
    assert!(text.contains("sine(%x), control-predecessors={%a}"), "{text}");
}

#[test]
fn deterministic_printing_after_edits_and_index_reuse() {
    // Two edit sequences that free and reuse different NodeIndex values print alike.
    let build = |swap: bool| {
        let mut m = module(CHAIN);
        let (x, y) = (node(&m, "x"), node(&m, "y"));
        let c = m.comp_mut(m.entry);
        let root = c.root().unwrap();
        let dead = c.add(Instr::new("dead", Op::Plain(Opcode::Exp), f32s(&[4])), &[x]);
        c.remove(dead).unwrap();
        let (p, q) = if swap { (y, x) } else { (x, y) };
        let s = c.add(Instr::new("sum", Op::Plain(Opcode::Add), f32s(&[4])), &[p, q]);
        let t = c.add(
            Instr::new(
                "tuple",
                Op::Plain(Opcode::Tuple),
                Shape::Tuple(vec![f32s(&[4]), f32s(&[4])]),
            ),
            &[root, s],
        );
        c.set_root(t);
        m
    };
    let a = print(&build(false));
    let b = print(&build(false));
    assert_eq!(a, b);
    // The entry changed: its layout is regenerated from the new root (a tuple now).
    assert!(
        a.contains("entry_computation_layout={(f32[4]{0}, f32[4]{0})->(f32[4]{0}, f32[4]{0})}"),
        "{a}"
    );
    assert_fixpoint(&build(true));
}

#[test]
fn regenerated_entry_layout_prints_scalars_as_xla_does() {
    // XLA's parser rejects `f32[]{}`: a regenerated layout must leave scalars bare.
    let mut m = module(CHAIN);
    let x = node(&m, "x");
    let c = m.comp_mut(m.entry);
    let s = c.add(
        Instr::new("s", Op::Plain(Opcode::Tuple), Shape::Tuple(vec![f32s(&[]), f32s(&[4])])),
        &[x, x],
    );
    let _ = s;
    let z = c.add_param("z", f32s(&[]));
    let root = c.root().unwrap();
    let t = c.add(
        Instr::new("t", Op::Plain(Opcode::Tuple), Shape::Tuple(vec![f32s(&[]), f32s(&[4])])),
        &[z, root],
    );
    c.set_root(t);
    c.remove(s).unwrap();
    let text = assert_fixpoint(&m);
    assert!(
        text.contains(
            "entry_computation_layout={(f32[4]{0}, f32[4]{0}, f32[])->(f32[], f32[4]{0})}"
        ),
        "{text}"
    );
}

#[test]
fn parameters_add_remove_renumber() {
    let mut m = module(CHAIN);
    let c = m.comp_mut(m.entry);
    let z = c.add_param("z", f32s(&[2]));
    assert_eq!(c.params().len(), 3);
    assert!(matches!(c.instr(z).op, Op::Parameter { number: 2, .. }));
    let x = c.find("x").unwrap();
    let y = c.find("y").unwrap();
    c.renumber_params(&[z, y, x]).unwrap();
    assert_eq!(c.params(), vec![z, y, x]);
    assert!(c.renumber_params(&[z, y]).is_err());
    c.remove_param(z).unwrap();
    assert_eq!(c.params(), vec![y, x]);
    assert!(matches!(c.instr(x).op, Op::Parameter { number: 1, .. }));
    let text = assert_fixpoint(&m);
    assert!(text.contains("ENTRY %main (y: f32[4], x: f32[4])"), "{text}");
}

const CALLS: &str = r#"HloModule calls

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

%body (p: f32[4]) -> f32[] {
  %p = f32[4]{0} parameter(0)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(%p, %zero), dimensions={0}, to_apply=%sum
}

ENTRY %main (x: f32[4]) -> f32[] {
  %x = f32[4]{0} parameter(0)
  ROOT %c = f32[] call(%x), to_apply=%body
}
"#;

#[test]
fn deep_clone_remaps_callees_and_keeps_the_original() {
    let mut m = module(CALLS);
    let body = m.find_comp("body").unwrap();
    let before = print(&m);
    let clone = m.clone_computation(body, true);
    let cloned = m.comp(clone);
    assert_ne!(cloned.name, "body");
    let r = cloned.root().unwrap();
    let Op::Reduce { to_apply, .. } = cloned.instr(r).op else { panic!("reduce") };
    assert_ne!(to_apply, m.find_comp("sum").unwrap(), "the reducer is cloned too");
    assert_eq!(m.comps().len(), 5);
    // Point the call at the clone: the old body and reducer become unreachable.
    let entry = m.entry;
    let c = m.comp_mut(entry);
    let call = c.root().unwrap();
    c.instr_mut(call).op = Op::Call { to_apply: clone, is_composite: false };
    assert_eq!(m.remove_unreachable_computations(), 2);
    let text = assert_fixpoint(&m);
    assert_ne!(text, before);
    assert!(!text.contains("%sum ("), "{text}");
    // Shallow clone shares the callee.
    let mut m = module(CALLS);
    let body = m.find_comp("body").unwrap();
    let shallow = m.clone_computation(body, false);
    let Op::Reduce { to_apply, .. } = m.comp(shallow).instr(m.comp(shallow).root().unwrap()).op
    else {
        panic!()
    };
    assert_eq!(to_apply, m.find_comp("sum").unwrap());
}

#[test]
fn removing_a_computation_remaps_references() {
    let mut m = module(CALLS);
    let sum = m.find_comp("sum").unwrap();
    assert!(m.remove_computation(sum).is_err(), "still called by the reduce");
    assert!(m.remove_computation(m.entry).is_err());
    // An unused computation written first: removing it shifts every later id down and
    // the remaining references (reduce → sum, call → body, the entry) follow.
    let src = CALLS.replace(
        "%sum (a",
        "%unused (u: f32[]) -> f32[] {\n  ROOT %u = f32[] parameter(0)\n}\n\n%sum (a",
    );
    let mut m = module(&src);
    let unused = m.find_comp("unused").unwrap();
    assert_eq!(unused.index(), 0);
    m.remove_computation(unused).unwrap();
    assert_eq!(print(&m), print(&module(CALLS)));
    assert!(hlo_ir::verify::verify(&m).is_empty());
}

#[test]
fn signature_is_dropped_after_an_edit() {
    let mut m = module(CHAIN);
    assert!(m.entry().signature().is_some());
    let x = node(&m, "x");
    let c = m.comp_mut(m.entry);
    c.add(Instr::new("n", Op::Plain(Opcode::Negate), f32s(&[4])), &[x]);
    assert!(m.entry().signature().is_none());
    assert!(hlo_ir::verify::verify(&m).is_empty());
}

#[test]
fn foreign_computations_are_renamed_into_the_module() {
    let mut m = module(CALLS);
    let mut c = hlo_ir::Computation::new("sum");
    let p = c.add_param("add", f32s(&[]));
    c.set_root(p);
    let id = m.add_computation(c);
    let names: Vec<&str> = m.comps().iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.iter().filter(|n| **n == "sum").count(), 1, "{names:?}");
    let added = m.comp(id);
    assert_ne!(
        added.instr(added.root().unwrap()).name,
        "add",
        "renamed away from the entry's names"
    );
    let _ = parse(&print(&m));
}

#[test]
fn set_name_keeps_the_name_map_and_fresh_ids_consistent() {
    let mut m = module(CHAIN);
    let (x, r) = (node(&m, "x"), node(&m, "r"));
    let c = m.comp_mut(m.entry);
    assert!(
        matches!(c.set_name(x, "y"), Err(hlo_ir::EditError::NameTaken(_))),
        "a taken name is refused"
    );
    c.set_name(r, "result.5000").unwrap();
    assert_eq!(c.find("result.5000"), Some(r));
    assert_eq!(c.find("r"), None, "the old name no longer maps");
    let fresh = c.add(Instr::new("result", Op::Plain(Opcode::Negate), f32s(&[4])), &[x]);
    assert!(
        c.instr(fresh)
            .name
            .strip_prefix("result.")
            .and_then(|s| s.parse::<u32>().ok())
            .is_some_and(|id| id > 5000),
        "fresh ids move above a set suffix"
    );
    c.set_name(x, "x").unwrap();
    let text = assert_fixpoint(&m);
    assert!(text.contains("ROOT %result.5000 = f32[4]{0} subtract(%multiply.7, %after)"), "{text}");
}
