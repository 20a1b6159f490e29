//! How many times a `while` loop runs, read from the program without values: the
//! `known_trip_count` XLA writes into a loop's backend config, else the induction
//! variable of a counted loop (what `jax.lax.fori_loop` and `scan` lower to), as XLA's
//! `ComputeWhileLoopTripCount` finds it.
//!
//! A counted loop keeps an integer in its state (tuple element `i`, or the whole state
//! when it is a scalar) that starts at a constant, moves by a constant step each iteration
//! (`body` returns `state[i] + c` in slot `i`) and is compared with a limit in the
//! condition (`state[i] + k <dir> limit`, either side). The limit is a constant, or a state
//! element the body passes through unchanged whose initial value is a constant. The
//! expressions are followed through fusions (multi-output ones too), copies, bitcasts, reshapes and converts
//! between integer types, so optimized modules are read as well as the text JAX prints.

use hlo_ir::literal::{Literal, LiteralData};
use hlo_ir::op::CmpDirection;
use hlo_ir::{Computation, Module, NodeIndex, Op, Opcode, Shape};

/// A scalar integer of the loop: `state[elem] + offset` (`elem: None`: the constant
/// `offset`; `Some(-1)`: the whole state, when it is a scalar).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Lin {
    elem: Option<i64>,
    offset: i128,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Val {
    Int(Lin),
    Cmp(CmpDirection, Lin, Lin),
    Unknown,
}

/// What the parameters of the computation being read stand for.
#[derive(Clone, Copy)]
enum Env<'a> {
    /// A loop's condition or body: parameter 0 is the loop state.
    Loop { tuple_state: bool },
    /// A fused computation: parameter `k` is operand `k` of the fusion, read in `outer`.
    Fused { outer: &'a Computation, fusion: NodeIndex, env: &'a Env<'a> },
    /// The computation holding the loop: parameters are unknown.
    Outside,
}

fn scalar_int(lit: &Literal, shape: &Shape) -> Option<i128> {
    if shape.as_array()?.rank() != 0 {
        return None;
    }
    match lit {
        Literal::Array(LiteralData::Int(v)) if v.len() == 1 => Some(i128::from(v[0])),
        _ => None,
    }
}

const DEPTH: usize = 32;

fn eval(m: &Module, c: &Computation, n: NodeIndex, env: &Env<'_>, depth: usize) -> Val {
    if depth == 0 {
        return Val::Unknown;
    }
    let ins = c.instr(n);
    let operand = |k: usize| c.operands(n).get(k).copied();
    let sub = |k: usize| match operand(k) {
        Some(o) => eval(m, c, o, env, depth - 1),
        None => Val::Unknown,
    };
    let is_int = |s: &Shape| s.as_array().is_some_and(|a| a.elem.is_integer());
    match &ins.op {
        Op::Constant(lit) if is_int(&ins.shape) => match scalar_int(lit, &ins.shape) {
            Some(v) => Val::Int(Lin { elem: None, offset: v }),
            None => Val::Unknown,
        },
        Op::Parameter { number, .. } => match env {
            Env::Loop { tuple_state: false } if *number == 0 && is_int(&ins.shape) => {
                Val::Int(Lin { elem: Some(-1), offset: 0 })
            }
            Env::Fused { outer, fusion, env } => {
                match outer.operands(*fusion).get(*number as usize) {
                    Some(&o) => eval(m, outer, o, env, depth - 1),
                    None => Val::Unknown,
                }
            }
            _ => Val::Unknown,
        },
        Op::GetTupleElement { index } => {
            let Some(o) = operand(0) else { return Val::Unknown };
            match (&c.instr(o).op, env) {
                (Op::Parameter { number: 0, .. }, Env::Loop { tuple_state: true })
                    if is_int(&ins.shape) =>
                {
                    Val::Int(Lin { elem: Some(*index), offset: 0 })
                }
                (Op::Plain(Opcode::Tuple), _) => match c.operands(o).get(*index as usize) {
                    Some(&x) => eval(m, c, x, env, depth - 1),
                    None => Val::Unknown,
                },
                // An element of a multi-output fusion: that element of its fused root.
                (Op::Fusion { calls, .. }, _) => {
                    let f = m.comp(*calls);
                    let Some(r) = f.root() else { return Val::Unknown };
                    if f.instr(r).op != Op::Plain(Opcode::Tuple) {
                        return Val::Unknown;
                    }
                    match f.operands(r).get(*index as usize) {
                        Some(&x) => {
                            eval(m, f, x, &Env::Fused { outer: c, fusion: o, env }, depth - 1)
                        }
                        None => Val::Unknown,
                    }
                }
                _ => Val::Unknown,
            }
        }
        Op::Fusion { calls, .. } => {
            let f = m.comp(*calls);
            match f.root() {
                Some(r) => eval(m, f, r, &Env::Fused { outer: c, fusion: n, env }, depth - 1),
                None => Val::Unknown,
            }
        }
        Op::Plain(Opcode::Copy | Opcode::Bitcast | Opcode::Reshape) => sub(0),
        Op::Plain(Opcode::Convert) if is_int(&ins.shape) => sub(0),
        Op::Plain(Opcode::Add) => match (sub(0), sub(1)) {
            (Val::Int(a), Val::Int(b)) if a.elem.is_none() || b.elem.is_none() => {
                Val::Int(Lin { elem: a.elem.or(b.elem), offset: a.offset + b.offset })
            }
            _ => Val::Unknown,
        },
        Op::Plain(Opcode::Subtract) => match (sub(0), sub(1)) {
            (Val::Int(a), Val::Int(Lin { elem: None, offset })) => {
                Val::Int(Lin { elem: a.elem, offset: a.offset - offset })
            }
            _ => Val::Unknown,
        },
        Op::Compare { direction, .. } => match (sub(0), sub(1)) {
            (Val::Int(a), Val::Int(b)) => Val::Cmp(*direction, a, b),
            _ => Val::Unknown,
        },
        _ => Val::Unknown,
    }
}

/// `"known_trip_count":{"n":"N"}` in a backend config.
fn known_trip_count(config: &str) -> Option<u64> {
    let at = config.find("known_trip_count")?;
    let rest = &config[at..];
    let n = rest.find("\"n\"")?;
    let digits: String = rest[n + 3..]
        .chars()
        .skip_while(|ch| !ch.is_ascii_digit())
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Iterations of `v_t = start + t * step` (t = 0, 1, ...) while `v_t <dir> limit` holds;
/// `None` when the loop would not end (or would only end by wrapping around).
fn count(dir: CmpDirection, start: i128, step: i128, limit: i128) -> Option<u64> {
    use CmpDirection::*;
    let holds = |v: i128| match dir {
        Lt => v < limit,
        Le => v <= limit,
        Gt => v > limit,
        Ge => v >= limit,
        Eq => v == limit,
        Ne => v != limit,
    };
    if !holds(start) {
        return Some(0);
    }
    let t = match dir {
        Lt if step > 0 => (limit - start + step - 1) / step,
        Le if step > 0 => (limit - start) / step + 1,
        Gt if step < 0 => (start - limit + (-step) - 1) / (-step),
        Ge if step < 0 => (start - limit) / (-step) + 1,
        Eq => 1,
        Ne if (limit - start) % step == 0 && (limit - start) / step > 0 => (limit - start) / step,
        _ => return None,
    };
    u64::try_from(t).ok()
}

fn flip(d: CmpDirection) -> CmpDirection {
    use CmpDirection::*;
    match d {
        Lt => Gt,
        Gt => Lt,
        Le => Ge,
        Ge => Le,
        other => other,
    }
}

/// How many times while loop `n` of `comp` runs its body, when the program says so
/// without values (see the module doc); `None` when it depends on data.
pub fn trip_count(m: &Module, comp: &Computation, n: NodeIndex) -> Option<u64> {
    let ins = comp.instr(n);
    let Op::While { condition, body } = &ins.op else { return None };
    if let Some(t) =
        ins.extras.as_ref().and_then(|x| x.backend_config.as_deref()).and_then(known_trip_count)
    {
        return Some(t);
    }
    let tuple_state = matches!(ins.shape, Shape::Tuple(_));
    let loop_env = Env::Loop { tuple_state };
    let (cond, body) = (m.comp(*condition), m.comp(*body));
    let Val::Cmp(dir, lhs, rhs) = eval(m, cond, cond.root()?, &loop_env, DEPTH) else {
        return None;
    };
    // The body's new value of state element `e`.
    let body_root = body.root()?;
    let next = |e: i64| -> Option<Lin> {
        let node = if e < 0 {
            body_root
        } else if body.instr(body_root).op == Op::Plain(Opcode::Tuple) {
            *body.operands(body_root).get(e as usize)?
        } else {
            return None;
        };
        match eval(m, body, node, &loop_env, DEPTH) {
            Val::Int(l) => Some(l),
            _ => None,
        }
    };
    // The initial value of state element `e`.
    let init_node = *comp.operands(n).first()?;
    let init = |e: i64| -> Option<i128> {
        if e < 0 {
            return match eval(m, comp, init_node, &Env::Outside, DEPTH) {
                Val::Int(Lin { elem: None, offset }) => Some(offset),
                _ => None,
            };
        }
        let init_ins = comp.instr(init_node);
        match &init_ins.op {
            Op::Plain(Opcode::Tuple) => {
                match eval(
                    m,
                    comp,
                    *comp.operands(init_node).get(e as usize)?,
                    &Env::Outside,
                    DEPTH,
                ) {
                    Val::Int(Lin { elem: None, offset }) => Some(offset),
                    _ => None,
                }
            }
            Op::Constant(Literal::Tuple(items)) => {
                let Shape::Tuple(shapes) = &init_ins.shape else { return None };
                scalar_int(items.get(e as usize)?, shapes.get(e as usize)?)
            }
            _ => None,
        }
    };
    // A side that does not move: a constant, or an element the body passes through.
    let fixed = |l: Lin| -> Option<i128> {
        match l.elem {
            None => Some(l.offset),
            Some(e) => {
                let nx = next(e)?;
                (nx.elem == Some(e) && nx.offset == 0).then_some(())?;
                Some(init(e)? + l.offset)
            }
        }
    };
    // The side that moves: state[e] + k with body step c != 0.
    let moving = |l: Lin| -> Option<(i128, i128)> {
        let e = l.elem?;
        let nx = next(e)?;
        (nx.elem == Some(e) && nx.offset != 0).then_some(())?;
        Some((init(e)? + l.offset, nx.offset))
    };
    if let (Some((start, step)), Some(limit)) = (moving(lhs), fixed(rhs)) {
        return count(dir, start, step, limit);
    }
    if let (Some(limit), Some((start, step))) = (fixed(lhs), moving(rhs)) {
        return count(flip(dir), start, step, limit);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use CmpDirection::*;

    #[test]
    fn counts_follow_the_comparison() {
        assert_eq!(count(Lt, 0, 1, 10), Some(10));
        assert_eq!(count(Lt, 0, 3, 10), Some(4));
        assert_eq!(count(Le, 0, 1, 10), Some(11));
        assert_eq!(count(Gt, 10, -2, 0), Some(5));
        assert_eq!(count(Ge, 10, -2, 0), Some(6));
        assert_eq!(count(Ne, 0, 2, 10), Some(5));
        assert_eq!(count(Ne, 0, 3, 10), None);
        assert_eq!(count(Lt, 5, 1, 0), Some(0));
        assert_eq!(count(Lt, 0, -1, 10), None);
        assert_eq!(count(Eq, 3, 1, 3), Some(1));
    }

    #[test]
    fn known_trip_count_is_read_from_the_backend_config() {
        assert_eq!(known_trip_count(r#"{"known_trip_count":{"n":"48"}}"#), Some(48));
        assert_eq!(known_trip_count(r#"{"other":1}"#), None);
    }
}

#[cfg(test)]
mod module_tests {
    use super::*;

    fn loop_count(src: &str) -> Option<u64> {
        let m = hlo_check::parse(src).expect("valid module");
        let e = m.entry();
        let w = e.nodes().find(|&n| matches!(e.instr(n).op, Op::While { .. })).expect("a loop");
        trip_count(&m, e, w)
    }

    /// The induction variable computed inside a multi-output fusion (as XLA's and hloc's
    /// fusion leave a scan's `i + 1` beside `n - 1 - i`): read through the fusion's tuple.
    #[test]
    fn counts_through_a_multi_output_fusion() {
        let src = r#"
HloModule m
fused (p0: s32[]) -> (s32[], s32[]) {
  p0 = s32[] parameter(0)
  one = s32[] constant(1)
  next = s32[] add(p0, one)
  seven = s32[] constant(7)
  rev = s32[] subtract(seven, p0)
  ROOT t = (s32[], s32[]) tuple(next, rev)
}
body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  f = (s32[], s32[]) fusion(i), kind=kLoop, calls=fused
  i1 = s32[] get-tuple-element(f), index=0
  x = f32[4] get-tuple-element(s), index=1
  ROOT r = (s32[], f32[4]) tuple(i1, x)
}
cond (s: (s32[], f32[4])) -> pred[] {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e (x: f32[4]) -> (s32[], f32[4]) {
  x = f32[4] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[4]) tuple(z, x)
  ROOT w = (s32[], f32[4]) while(t), condition=cond, body=body
}
"#;
        assert_eq!(loop_count(src), Some(8));
        // The other element (7 - i) is not a counter: taking it as one gives no count.
        assert_eq!(
            loop_count(
                &src.replace("get-tuple-element(f), index=0", "get-tuple-element(f), index=1")
            ),
            None
        );
    }
}
