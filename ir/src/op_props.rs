//! Properties of operations that rewriting passes (CSE, DCE, fusion, the algebraic
//! simplifier) ask about: side effects ([`Op::has_side_effects`], recursively through
//! callees with [`SideEffects`]) and a hashable identity for CSE ([`Op::cse_key`]).
//!
//! **Side effects** follow XLA's `HasSideEffectNoRecurse`, made conservative where XLA
//! depends on the module's partitioning mode: `send`, `recv` and their `-done`, `rng`,
//! `rng-get-and-update-state`, `infeed`, `outfeed`, custom-calls with
//! `custom_call_has_side_effect=true`, and every collective (`all-reduce`,
//! `all-gather`, `reduce-scatter`, `all-to-all`, `collective-permute`,
//! `collective-broadcast`, `ragged-all-to-all`, the async `-start`/`-done` halves) but
//! `partition-id` and `replica-id`. XLA calls a channel collective side-effecting only in
//! non-SPMD (MPMD) modules; we do not model that distinction and always call them
//! side-effecting. Not side-effecting, as in XLA: `after-all` and `add-dependency` (token
//! plumbing; an unused one may be removed), `opt-barrier` (a pure identity for values
//! that keeps passes from moving computation across it; [`Op::cse_key`] refuses it all
//! the same, see there), `copy-start`/`copy-done`, `rng-bit-generator` (its state is an
//! explicit operand and result). `call`, `while`, `conditional`, `fusion`, `async-*`,
//! `map`, `reduce`, ... have side effects iff a computation they call has
//! ([`SideEffects`], [`computation_has_side_effects`]).
//!
//! **CSE identity.** [`OpKey`] pairs an operation with its result shape: two instructions
//! with equal keys and the same operands in the same order compute the same value. The
//! shape belongs to the key because the text decides part of the function for some
//! opcodes (`convert`'s target type, `reshape`, `broadcast`, `iota`, a constant's type and
//! dimensions). Attributes compare exactly, computation references by [`CompId`],
//! floating-point values (constant literals, `batch-norm` epsilon) bitwise: NaN equals a
//! NaN of the same bits, `-0.0` differs from `0.0`. Commutativity is the caller's
//! business ([`crate::Opcode::is_commutative`]; `compare` EQ/NE too).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};

use crate::literal::{Literal, LiteralData};
use crate::module::{CompId, Module};
use crate::op::{Branches, Op};
use crate::opcode::{Category, Opcode};
use crate::types::Shape;

impl Op {
    /// Whether the operation itself has a side effect (XLA's `HasSideEffectNoRecurse`,
    /// conservative for collectives; see the module doc). Callees are not looked at: use
    /// [`SideEffects::op`] for `call`, `while`, `conditional`, ...
    pub fn has_side_effects(&self) -> bool {
        use Opcode::*;
        match self {
            Op::CustomCall(c) => c.has_side_effect,
            _ => {
                let op = self.opcode();
                matches!(
                    op,
                    Send | SendDone
                        | Recv
                        | RecvDone
                        | Rng
                        | RngGetAndUpdateState
                        | Infeed
                        | Outfeed
                ) || (op.category() == Category::Collective
                    && !matches!(op, PartitionId | ReplicaId))
            }
        }
    }

    /// The CSE identity of this operation producing `shape`, or `None` when CSE must never
    /// merge it whatever its operands: side-effecting operations
    /// ([`Op::has_side_effects`]), `parameter`, `opt-barrier` (merging two barriers would
    /// merge the rematerialized copies they exist to keep apart) and constants with elided
    /// values (`{...}`: two of them need not hold the same values).
    ///
    /// A `Some` key does not account for callees: a CSE pass must also skip instructions
    /// whose callees have side effects ([`SideEffects::op`]).
    pub fn cse_key(&self, shape: &Shape) -> Option<OpKey> {
        let refused = self.has_side_effects()
            || matches!(self, Op::Parameter { .. } | Op::Plain(Opcode::OptBarrier))
            || matches!(self, Op::Constant(l) if has_elided(l));
        (!refused).then(|| OpKey { op: self.clone(), shape: shape.clone() })
    }
}

fn has_elided(l: &Literal) -> bool {
    match l {
        Literal::Elided => true,
        Literal::Array(_) => false,
        Literal::Tuple(items) => items.iter().any(has_elided),
    }
}

/// A hashable CSE identity: an operation and its result shape ([`Op::cse_key`]). Equal iff
/// the operations are equal attribute by attribute with floating-point values compared
/// bitwise, and the shapes (layouts included) are equal.
#[derive(Debug, Clone)]
pub struct OpKey {
    op: Op,
    shape: Shape,
}

impl OpKey {
    pub fn op(&self) -> &Op {
        &self.op
    }
    pub fn shape(&self) -> &Shape {
        &self.shape
    }
}

impl PartialEq for OpKey {
    fn eq(&self, other: &OpKey) -> bool {
        self.shape == other.shape && bitwise_eq(&self.op, &other.op)
    }
}

impl Eq for OpKey {}

/// `Op`'s derived `PartialEq` except for the two places floats live (constant literals and
/// the batch-norm epsilon), which compare bitwise. Every other attribute type is `Eq`, so
/// this is an equivalence relation.
fn bitwise_eq(a: &Op, b: &Op) -> bool {
    match (a, b) {
        (Op::Constant(x), Op::Constant(y)) => literal_eq(x, y),
        (
            Op::BatchNorm { opcode: o1, epsilon: e1, feature_index: f1 },
            Op::BatchNorm { opcode: o2, epsilon: e2, feature_index: f2 },
        ) => o1 == o2 && e1.to_bits() == e2.to_bits() && f1 == f2,
        _ => a == b,
    }
}

fn literal_eq(a: &Literal, b: &Literal) -> bool {
    match (a, b) {
        (Literal::Array(x), Literal::Array(y)) => match (x, y) {
            (LiteralData::Pred(x), LiteralData::Pred(y)) => x == y,
            (LiteralData::Int(x), LiteralData::Int(y)) => x == y,
            (LiteralData::Float(x), LiteralData::Float(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits())
            }
            (LiteralData::Complex(x), LiteralData::Complex(y)) => {
                x.len() == y.len()
                    && x.iter().zip(y).all(|(p, q)| {
                        p.0.to_bits() == q.0.to_bits() && p.1.to_bits() == q.1.to_bits()
                    })
            }
            _ => false,
        },
        (Literal::Tuple(x), Literal::Tuple(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| literal_eq(p, q))
        }
        // Never in a key (cse_key refuses elided constants); equal to itself for reflexivity.
        (Literal::Elided, Literal::Elided) => true,
        _ => false,
    }
}

fn hash_literal<H: Hasher>(l: &Literal, h: &mut H) {
    match l {
        Literal::Array(d) => match d {
            LiteralData::Pred(v) => (0u8, v).hash(h),
            LiteralData::Int(v) => (1u8, v).hash(h),
            LiteralData::Float(v) => {
                (2u8, v.len()).hash(h);
                v.iter().for_each(|x| x.to_bits().hash(h));
            }
            LiteralData::Complex(v) => {
                (3u8, v.len()).hash(h);
                v.iter().for_each(|x| (x.0.to_bits(), x.1.to_bits()).hash(h));
            }
        },
        Literal::Elided => 4u8.hash(h),
        Literal::Tuple(items) => {
            (5u8, items.len()).hash(h);
            items.iter().for_each(|i| hash_literal(i, h));
        }
    }
}

/// Hashes the opcode, the shape and the attributes that usually tell operations apart.
/// Attributes left out only cost collisions: equal keys still hash equally.
impl Hash for OpKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.op.opcode().hash(h);
        self.shape.hash(h);
        match &self.op {
            Op::Constant(l) => hash_literal(l, h),
            Op::Iota { dimension: d }
            | Op::GetTupleElement { index: d }
            | Op::Concatenate { dimension: d }
            | Op::GetDimensionSize { dimension: d }
            | Op::SetDimensionSize { dimension: d } => d.hash(h),
            Op::Compare { direction, kind } => (*direction as u8, kind.map(|k| k as u8)).hash(h),
            Op::Broadcast { dimensions: d }
            | Op::Transpose { dimensions: d }
            | Op::Reverse { dimensions: d }
            | Op::DynamicSlice { sizes: d } => d.hash(h),
            Op::Reduce { dimensions, to_apply } => (dimensions, to_apply).hash(h),
            Op::Slice { ranges } => {
                ranges.iter().for_each(|r| (r.start, r.limit, r.stride).hash(h))
            }
            Op::Pad { config } => config.iter().for_each(|p| (p.lo, p.hi, p.interior).hash(h)),
            Op::ReducePrecision { exponent_bits, mantissa_bits } => {
                (exponent_bits, mantissa_bits).hash(h)
            }
            Op::Dot { dims, .. } => {
                (&dims.lhs_contracting, &dims.rhs_contracting, &dims.lhs_batch, &dims.rhs_batch)
                    .hash(h)
            }
            Op::Gather(g) => {
                (&g.offset_dims, &g.collapsed_slice_dims, &g.start_index_map, &g.slice_sizes)
                    .hash(h)
            }
            Op::Scatter(s) => (&s.update_window_dims, &s.inserted_window_dims, s.to_apply).hash(h),
            Op::ReduceWindow { to_apply, .. }
            | Op::Map { to_apply, .. }
            | Op::Sort { to_apply, .. }
            | Op::Scan { to_apply, .. }
            | Op::Call { to_apply, .. } => to_apply.hash(h),
            Op::Fusion { calls, .. } => calls.hash(h),
            Op::While { condition, body } => (condition, body).hash(h),
            Op::Conditional(Branches::TrueFalse(t, f)) => (t, f).hash(h),
            Op::Conditional(Branches::Indexed(b)) => b.hash(h),
            Op::CustomCall(c) => c.target.hash(h),
            _ => {}
        }
    }
}

/// Side effects through callees, memoized per computation: an instruction has side
/// effects if its operation has ([`Op::has_side_effects`]) or a computation it calls
/// contains one that has, at any depth. `async-update`/`async-done` without `calls`
/// (inherited from their `async-start`) count as side-effecting: their callee is unknown
/// here.
#[derive(Debug, Default)]
pub struct SideEffects {
    memo: HashMap<CompId, bool>,
}

impl SideEffects {
    pub fn new() -> SideEffects {
        SideEffects::default()
    }

    /// Whether an instruction of operation `op` in module `m` has side effects.
    pub fn op(&mut self, m: &Module, op: &Op) -> bool {
        if op.has_side_effects() || matches!(op, Op::Async { calls: None, .. }) {
            return true;
        }
        op.called_computations().into_iter().any(|(_, c)| self.computation(m, c))
    }

    /// Whether any instruction of computation `id` of `m` has side effects. A missing
    /// computation counts as side-effecting.
    pub fn computation(&mut self, m: &Module, id: CompId) -> bool {
        if let Some(&known) = self.memo.get(&id) {
            return known;
        }
        // Provisional answer against (invalid) cyclic call graphs.
        self.memo.insert(id, false);
        let result = match m.get_comp(id) {
            Some(comp) => comp.instrs().any(|i| self.op(m, &i.op)),
            None => true,
        };
        self.memo.insert(id, result);
        result
    }
}

/// Whether any instruction of computation `id` has side effects, through its callees at
/// any depth. For many queries keep one [`SideEffects`] instead.
pub fn computation_has_side_effects(m: &Module, id: CompId) -> bool {
    SideEffects::new().computation(m, id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::op::{CmpDirection, CustomCall};
    use crate::types::ElemType;
    use std::collections::HashSet;

    fn f32s() -> Shape {
        Shape::scalar(ElemType::F32)
    }

    fn constant(v: f64) -> Op {
        Op::Constant(Literal::Array(LiteralData::Float(vec![v])))
    }

    fn key(op: &Op) -> OpKey {
        op.cse_key(&f32s()).expect("a key")
    }

    #[test]
    fn float_constants_compare_bitwise() {
        assert_eq!(key(&constant(1.5)), key(&constant(1.5)));
        assert_ne!(key(&constant(0.0)), key(&constant(-0.0)));
        assert_eq!(key(&constant(f64::NAN)), key(&constant(f64::NAN)));
        assert_ne!(
            key(&constant(f64::NAN)),
            key(&constant(f64::from_bits(f64::NAN.to_bits() | 1)))
        );
        let keys: HashSet<OpKey> =
            [constant(f64::NAN), constant(f64::NAN), constant(0.0), constant(-0.0), constant(0.0)]
                .iter()
                .map(key)
                .collect();
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn keys_include_attributes_and_shape() {
        let lt = Op::Compare { direction: CmpDirection::Lt, kind: None };
        let gt = Op::Compare { direction: CmpDirection::Gt, kind: None };
        assert_ne!(key(&lt), key(&gt));
        assert_eq!(key(&lt), key(&lt.clone()));
        let add = Op::Plain(Opcode::Add);
        assert_ne!(add.cse_key(&f32s()), add.cse_key(&Shape::scalar(ElemType::BF16)));
        let call = |c| Op::Call { to_apply: CompId(c), is_composite: false };
        assert_ne!(key(&call(1)), key(&call(2)));
        assert_eq!(key(&call(1)), key(&call(1)));
    }

    #[test]
    fn refused_keys() {
        assert!(Op::Constant(Literal::Elided).cse_key(&f32s()).is_none());
        assert!(Op::Plain(Opcode::OptBarrier).cse_key(&f32s()).is_none());
        assert!(Op::Parameter { number: 0, replication: None }.cse_key(&f32s()).is_none());
        assert!(Op::RngGetAndUpdateState { delta: 1 }.cse_key(&f32s()).is_none());
        assert!(Op::Plain(Opcode::AfterAll).cse_key(&Shape::Token).is_some());
    }

    fn custom_call(has_side_effect: bool) -> Op {
        Op::CustomCall(Box::new(CustomCall {
            target: "foo".into(),
            has_side_effect,
            ..Default::default()
        }))
    }

    #[test]
    fn side_effects_of_single_ops() {
        assert!(custom_call(true).has_side_effects());
        assert!(!custom_call(false).has_side_effects());
        assert!(Op::Infeed { config: None }.has_side_effects());
        assert!(Op::Plain(Opcode::AllReduceDone).has_side_effects());
        assert!(!Op::Plain(Opcode::ReplicaId).has_side_effects());
        for op in [
            Opcode::Add,
            Opcode::AfterAll,
            Opcode::AddDependency,
            Opcode::OptBarrier,
            Opcode::Tuple,
        ] {
            assert!(!Op::Plain(op).has_side_effects(), "{}", op.name());
        }
        assert!(Opcode::Multiply.is_commutative() && !Opcode::Subtract.is_commutative());
    }

    #[test]
    fn side_effects_through_callees() {
        let src = "HloModule t\n\n\
                   noisy {\n  p = f32[] parameter(0)\n  ROOT r = f32[] custom-call(p), custom_call_target=\"x\", custom_call_has_side_effect=true\n}\n\n\
                   outer {\n  p = f32[] parameter(0)\n  ROOT c = f32[] call(p), to_apply=noisy\n}\n\n\
                   quiet {\n  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p)\n}\n\n\
                   ENTRY main {\n  x = f32[] parameter(0)\n  a = f32[] call(x), to_apply=outer\n  \
                   b = f32[] call(x), to_apply=quiet\n  ROOT t = (f32[], f32[]) tuple(a, b)\n}\n";
        let m = crate::parse_verified(src)
            .unwrap_or_else(|d| panic!("{}", d.render(src, "t.hlo", false)));
        let id = |name| m.find_comp(name).expect("computation");
        assert!(computation_has_side_effects(&m, id("noisy")));
        assert!(computation_has_side_effects(&m, id("outer")));
        assert!(!computation_has_side_effects(&m, id("quiet")));
        let mut fx = SideEffects::new();
        assert!(fx.computation(&m, id("main")));
        assert!(fx.op(&m, &Op::Call { to_apply: id("outer"), is_composite: false }));
        assert!(!fx.op(&m, &Op::Call { to_apply: id("quiet"), is_composite: false }));
    }
}
