//! `triangular-solve-expander`: rewrites every f32/f64 `triangular-solve` into a `call` of
//! a computation (one per operand shapes and options, as XLA's `TriangularSolveExpander`
//! caches them) built from slices, dots, selects and one `while` loop, so the JIT and the
//! TPU model, which have no solver kernel, run it. It takes XLA's algorithm for the shapes
//! (`interp::linalg::solve_kind`, with XLA's block size 128):
//!
//! - `b` without elements: `b`; a 1x1 `a`: `b * (1/a)` (or `b` with a unit diagonal);
//! - more than 8 batch matrices smaller than 32x32 (XLA's direct solve): substitution,
//!   unrolled over the rows (at most 31 steps, as XLA unrolls it): row `j` of the
//!   solution is `(b[j] - dot(op(a)[j, solved], x[solved])) * (1/a[j, j])`;
//! - otherwise (XLA's solve by inverted diagonal blocks): `a` masked to its triangle (a
//!   unit diagonal written in when `unit_diagonal`), its diagonal blocks of `min(128, n)`
//!   (the last padded with the identity) inverted together in one `while` loop (scaled by
//!   the reciprocal diagonal per column, one row per iteration: `row_j = -dot(S[j, :],
//!   out)`, scaled back per row), then the solution built block by block, unrolled over
//!   the few blocks: `x_j = op(inv_j) · (b_j - op(a)[j, solved] · x_solved)` (on the right
//!   side the mirror image), concatenated.
//!
//! Divisions by a broadcast diagonal are multiplications by its reciprocal, as XLA's
//! algebraic simplifier leaves them on CPU. The interpreter evaluates `triangular-solve`
//! natively with the same steps and sums in the same order (`interp::linalg`); the golden
//! case checks the two agree bit for bit. Narrow floats are left alone (the engines
//! without a kernel refuse them with an error at the instruction), and so is a
//! `transpose_a` XLA would reject (the checking pipeline reports it).

use std::collections::HashMap;

use hlo_ir::op::CmpDirection;
use hlo_ir::{CompId, Diagnostic, ElemType, Module, NodeIndex, Op, Opcode, Shape, Span};

use super::hlo_builder::{Builder, N, scalar_binary};
use crate::expander::OpExpander;
use hlo_interp::linalg::{SolveKind, Transpose, solve_kind};

/// `triangular-solve-expander`; the solver computations it built this run.
#[derive(Default)]
pub struct TriangularSolveExpander {
    cache: HashMap<Key, CompId>,
}

/// Operand shapes and options: the cache key of the expanded computations.
type Key = (ElemType, Vec<u64>, Vec<u64>, [bool; 4]);

#[derive(Clone, Copy)]
struct Opts {
    left: bool,
    lower: bool,
    unit: bool,
    t: bool,
}

impl OpExpander for TriangularSolveExpander {
    fn name(&self) -> &'static str {
        "triangular-solve-expander"
    }

    fn matches(&self, op: &Op) -> bool {
        matches!(op, Op::TriangularSolve { .. })
    }

    fn begin(&mut self) {
        self.cache.clear();
    }

    fn expand(
        &mut self,
        m: &mut Module,
        id: CompId,
        n: NodeIndex,
    ) -> Result<Option<NodeIndex>, Diagnostic> {
        let c = m.comp(id);
        let i = c.instr(n);
        let Op::TriangularSolve { left_side, lower, unit_diagonal, ref transpose_a } = i.op else {
            return Ok(None);
        };
        let Ok(t) = Transpose::parse(transpose_a.as_deref()) else { return Ok(None) };
        let ops = c.operands(n);
        let [a, b] = ops[..] else { return Ok(None) };
        let (Some(ashape), Some(bshape)) =
            (c.instr(a).shape.as_array(), c.instr(b).shape.as_array())
        else {
            return Ok(None);
        };
        let (Some(ad), Some(bd)) = (ashape.static_dims(), bshape.static_dims()) else {
            return Ok(None);
        };
        let elem = ashape.elem;
        let r = ad.len();
        let fits = r >= 2
            && bd.len() == r
            && ad[..r - 2] == bd[..r - 2]
            && ad[r - 1] == ad[r - 2]
            && (if left_side { bd[r - 2] } else { bd[r - 1] }) == ad[r - 1];
        if !matches!(elem, ElemType::F32 | ElemType::F64) || bshape.elem != elem || !fits {
            return Ok(None);
        }
        let o = Opts { left: left_side, lower, unit: unit_diagonal, t: t.transposed() };
        let (span, metadata, shape) = (i.span, i.metadata.clone(), i.shape.clone());
        let key = (elem, ad.clone(), bd.clone(), [o.left, o.lower, o.unit, o.t]);
        let callee = match self.cache.get(&key) {
            Some(&c) => c,
            None => {
                let c = build(m, elem, &ad, &bd, o, span, metadata.clone());
                self.cache.insert(key, c);
                c
            }
        };
        Ok(Some(crate::expander::call(m, id, callee, shape, (span, metadata), &[a, b])))
    }
}

/// The computation `(a, b) -> x`.
fn build(
    m: &mut Module,
    elem: ElemType,
    ad: &[u64],
    bd: &[u64],
    o: Opts,
    span: Span,
    metadata: Option<Box<hlo_ir::instr::Metadata>>,
) -> CompId {
    let nd = ad.len();
    let k = ad[nd - 1] as usize;
    let batch: usize = ad[..nd - 2].iter().product::<u64>() as usize;
    let b_elems: usize = bd.iter().product::<u64>() as usize;
    let kind = solve_kind(batch, k, b_elems);
    // The inversion loop's computations first (they need `m`), then the solve.
    let inverse = if let SolveKind::Blocked(bs) = kind {
        let nbk = k.div_ceil(bs);
        Some(inversion_loop(m, elem, batch * nbk, bs, o.lower, span, metadata.clone()))
    } else {
        None
    };
    let add = if matches!(kind, SolveKind::Blocked(_)) {
        Some(scalar_binary(m, Opcode::Add, elem, "triangular_solve_sum"))
    } else {
        None
    };
    let mut c = m.new_computation("triangular_solve");
    let mut b = Builder { c: &mut c, span, metadata };
    let a = b.param("a", Shape::array(elem, ad));
    let rhs = b.param("b", Shape::array(elem, bd));
    let root = match kind {
        SolveKind::Empty => rhs,
        SolveKind::Scalar if o.unit => rhs,
        SolveKind::Scalar => {
            let one = b.full(elem, 1.0, ad);
            let recip = b.binary(Opcode::Divide, one, a);
            let rb = b.spread_scalar_per_matrix(recip, bd);
            b.binary(Opcode::Multiply, rhs, rb)
        }
        SolveKind::Direct => direct(&mut b, a, rhs, o, k),
        SolveKind::Blocked(bs) => {
            let (cond, body) = inverse.expect("built for Blocked");
            blocked(&mut b, a, rhs, o, k, bs, cond, body, add.expect("built for Blocked"))
        }
    };
    c.set_root(root);
    m.add_computation(c)
}

/// Row (left side) or column (right side) substitution, unrolled.
fn direct(b: &mut Builder, a: N, rhs: N, o: Opts, k: usize) -> N {
    let ad = b.dims(a);
    let bd = b.dims(rhs);
    let nd = ad.len();
    let nb = nd - 2;
    let (m, n) = (bd[nd - 2], bd[nd - 1]);
    let forward = o.t ^ o.lower ^ !o.left;
    let zero = b.s32(0);
    let mut x = rhs;
    for i in 0..k {
        let j = if forward { i } else { k - 1 - i } as u64;
        let (lo, hi) = if forward { (0, j) } else { (j + 1, k as u64) };
        let mut row = if o.left {
            b.slice_minor(x, (j, j + 1), (0, n))
        } else {
            b.slice_minor(x, (0, m), (j, j + 1))
        };
        if hi > lo {
            // The coefficients of the solved rows in equation j: op(a)[j, lo..hi] on the
            // left, op(a)[lo..hi, j] on the right.
            let coef_row = o.t ^ !o.left; // stored as a column of a
            let coef = if coef_row {
                b.slice_minor(a, (lo, hi), (j, j + 1))
            } else {
                b.slice_minor(a, (j, j + 1), (lo, hi))
            };
            let prod = if o.left {
                let solved = b.slice_minor(x, (lo, hi), (0, n));
                b.batch_dot(coef, coef_row, solved, false)
            } else {
                let solved = b.slice_minor(x, (0, m), (lo, hi));
                b.batch_dot(solved, false, coef, o.t)
            };
            row = b.binary(Opcode::Subtract, row, prod);
        }
        if !o.unit {
            let d = b.slice_minor(a, (j, j + 1), (j, j + 1));
            let one = b.full(b.elem(a), 1.0, &b.dims(d));
            let recip = b.binary(Opcode::Divide, one, d);
            let rd = b.dims(row);
            let rb = b.spread_scalar_per_matrix(recip, &rd);
            row = b.binary(Opcode::Multiply, row, rb);
        }
        let j = b.s32(j as i64);
        let mut starts = vec![zero; nb];
        if o.left {
            starts.extend([j, zero]);
        } else {
            starts.extend([zero, j]);
        }
        x = b.dynamic_update_slice(x, row, &starts);
    }
    x
}

/// Masks of `[.., r, c]` from row/column iotas.
fn mask(b: &mut Builder, dims: &[u64], dir: CmpDirection) -> N {
    let nd = dims.len();
    let r = b.iota(dims, nd - 2);
    let c = b.iota(dims, nd - 1);
    b.compare(r, c, dir)
}

/// XLA's solve by inverted diagonal blocks.
#[allow(clippy::too_many_arguments)]
fn blocked(
    b: &mut Builder,
    a: N,
    rhs: N,
    o: Opts,
    k: usize,
    bs: usize,
    cond: CompId,
    body: CompId,
    add: CompId,
) -> N {
    let ad = b.dims(a);
    let bd = b.dims(rhs);
    let nd = ad.len();
    let nb = nd - 2;
    let elem = b.elem(a);
    let batch_dims = ad[..nb].to_vec();
    let batch: u64 = batch_dims.iter().product();
    let (m, n) = (bd[nd - 2], bd[nd - 1]);
    let (k64, bs64) = (k as u64, bs as u64);
    // The triangle `lower` names; a unit diagonal written in.
    let keep = match (o.lower, o.unit) {
        (true, false) => mask(b, &ad, CmpDirection::Ge),
        (true, true) => mask(b, &ad, CmpDirection::Gt),
        (false, false) => mask(b, &ad, CmpDirection::Le),
        (false, true) => mask(b, &ad, CmpDirection::Lt),
    };
    let zeros = b.full(elem, 0.0, &ad);
    let mut am = b.select(keep, a, zeros);
    if o.unit {
        let diag = mask(b, &ad, CmpDirection::Eq);
        let ones = b.full(elem, 1.0, &ad);
        am = b.select(diag, ones, am);
    }
    // Diagonal blocks, the last padded with the identity: [batch.., nbk, bs, bs].
    let nbk = k.div_ceil(bs);
    let mut blocks = Vec::new();
    let mut one_block: Vec<u64> = batch_dims.clone();
    one_block.extend([1, bs64, bs64]);
    let mut sq: Vec<u64> = batch_dims.clone();
    sq.extend([bs64, bs64]);
    for j in 0..nbk as u64 {
        let lo = j * bs64;
        let hi = (lo + bs64).min(k64);
        let mut blk = b.slice_minor(am, (lo, hi), (lo, hi));
        let size = hi - lo;
        if size < bs64 {
            let z = b.float(elem, 0.0);
            let mut cfg = vec![(0, 0); nb];
            cfg.extend([(0, bs64 - size), (0, bs64 - size)]);
            blk = b.pad(blk, z, &cfg);
            let diag = mask(b, &sq, CmpDirection::Eq);
            let rows = b.iota(&sq, nb);
            let lim = b.s32(size as i64);
            let limb = b.splat(lim, &sq);
            let padded = b.compare(rows, limb, CmpDirection::Ge);
            let pad_diag = b.binary(Opcode::And, diag, padded);
            let ones = b.full(elem, 1.0, &sq);
            blk = b.select(pad_diag, ones, blk);
        }
        blocks.push(b.reshape(blk, &one_block));
    }
    let stacked = if blocks.len() == 1 { blocks[0] } else { b.concat(&blocks, nb) };
    let total = batch * nbk as u64;
    let flat = b.reshape(stacked, &[total, bs64, bs64]);
    // Invert them together.
    let fd = [total, bs64, bs64];
    let eye = mask(b, &fd, CmpDirection::Eq);
    let zb = b.full(elem, 0.0, &fd);
    let on_diag = b.select(eye, flat, zb);
    let z = b.float(elem, 0.0);
    let diag = b.emit(
        "reduce",
        Op::Reduce { dimensions: vec![1], to_apply: add },
        Shape::array(elem, &[total, bs64]),
        &[on_diag, z],
    );
    let ones = b.full(elem, 1.0, &[total, bs64]);
    let recip = b.binary(Opcode::Divide, ones, diag);
    let by_col = b.broadcast(recip, &fd, &[0, 2]);
    let scaled = b.binary(Opcode::Multiply, flat, by_col);
    let minus = b.full(elem, -1.0, &fd);
    let neg_eye = b.select(eye, minus, zb);
    let first = if o.lower { 0 } else { bs as i64 - 1 };
    let r = b.iota(&fd, 1);
    let cc = b.iota(&fd, 2);
    let f = b.s32(first);
    let fb = b.splat(f, &fd);
    let r_first = b.compare(r, fb, CmpDirection::Eq);
    let c_first = b.compare(cc, fb, CmpDirection::Eq);
    let at_first = b.binary(Opcode::And, r_first, c_first);
    let one_b = b.full(elem, 1.0, &fd);
    let out0 = b.select(at_first, one_b, neg_eye);
    let i0 = b.s32(1);
    let init = b.tuple(&[i0, out0, scaled]);
    let w = b.while_loop(init, cond, body);
    let out = b.gte(w, 1);
    let by_row = b.broadcast(recip, &fd, &[0, 1]);
    let inv_flat = b.binary(Opcode::Multiply, out, by_row);
    let mut inv_dims = batch_dims.clone();
    inv_dims.extend([nbk as u64, bs64, bs64]);
    let inv = b.reshape(inv_flat, &inv_dims);
    // The solution, block by block.
    let backward = o.left ^ o.lower ^ o.t;
    let mut x: Option<N> = None;
    for i in 0..nbk {
        let j = if backward { nbk - 1 - i } else { i };
        let size = if !k.is_multiple_of(bs) && j + 1 == nbk { (k % bs) as u64 } else { bs64 };
        let mut ranges: Vec<(u64, u64)> = batch_dims.iter().map(|&d| (0, d)).collect();
        ranges.extend([(j as u64, j as u64 + 1), (0, size), (0, size)]);
        let ib = b.slice(inv, &ranges);
        let mut ibd = batch_dims.clone();
        ibd.extend([size, size]);
        let inv_block = b.reshape(ib, &ibd);
        let (lo, kk) = (j as u64 * bs64, ((j as u64 + 1) * bs64).min(k64));
        let b_row = if o.left {
            b.slice_minor(rhs, (lo, kk), (0, n))
        } else {
            b.slice_minor(rhs, (0, m), (lo, kk))
        };
        let remainder = match x {
            None => b_row,
            Some(x) => {
                let (mut s, mut e) = if backward {
                    ([lo, ((nbk - i) as u64 * bs64).min(k64)], [kk, k64])
                } else {
                    ([lo, 0], [kk, (i as u64 * bs64).min(k64)])
                };
                if !o.left ^ o.t {
                    s.swap(0, 1);
                    e.swap(0, 1);
                }
                let a_row = b.slice_minor(am, (s[0], e[0]), (s[1], e[1]));
                let p = if o.left {
                    b.batch_dot(a_row, o.t, x, false)
                } else {
                    b.batch_dot(x, false, a_row, o.t)
                };
                b.binary(Opcode::Subtract, b_row, p)
            }
        };
        let update = if o.left {
            b.batch_dot(inv_block, o.t, remainder, false)
        } else {
            b.batch_dot(remainder, false, inv_block, o.t)
        };
        let dim = if o.left { nd - 2 } else { nd - 1 };
        x = Some(match x {
            None => update,
            Some(x) if backward => b.concat(&[update, x], dim),
            Some(x) => b.concat(&[x, update], dim),
        });
    }
    x.unwrap_or(rhs)
}

/// The row-by-row inversion loop over `[total, bs, bs]` unit-diagonal blocks: state
/// `(i, out, scaled)`, `i` from 1 to `bs - 1`; returns (condition, body).
fn inversion_loop(
    m: &mut Module,
    elem: ElemType,
    total: usize,
    bs: usize,
    lower: bool,
    span: Span,
    metadata: Option<Box<hlo_ir::instr::Metadata>>,
) -> (CompId, CompId) {
    let fd = [total as u64, bs as u64, bs as u64];
    let state = Shape::Tuple(vec![
        Shape::scalar(ElemType::S32),
        Shape::array(elem, &fd),
        Shape::array(elem, &fd),
    ]);
    let mut cond_c = m.new_computation("invert_blocks_cond");
    let mut b = Builder { c: &mut cond_c, span, metadata: metadata.clone() };
    let p = b.param("state", state.clone());
    let i = b.gte(p, 0);
    let lim = b.s32(bs as i64);
    let root = b.compare(i, lim, CmpDirection::Lt);
    cond_c.set_root(root);
    let mut body_c = m.new_computation("invert_blocks_body");
    let mut b = Builder { c: &mut body_c, span, metadata };
    let p = b.param("state", state);
    let i = b.gte(p, 0);
    let out = b.gte(p, 1);
    let s = b.gte(p, 2);
    let zero = b.s32(0);
    let j = if lower {
        i
    } else {
        let last = b.s32(bs as i64 - 1);
        b.binary(Opcode::Subtract, last, i)
    };
    let row = b.dynamic_slice(s, &[zero, j, zero], &[total as u64, 1, bs as u64]);
    let prod = b.batch_dot(row, false, out, false);
    let update = b.unary(Opcode::Negate, prod);
    let out2 = b.dynamic_update_slice(out, update, &[zero, j, zero]);
    let one = b.s32(1);
    let i2 = b.binary(Opcode::Add, i, one);
    let root = b.tuple(&[i2, out2, s]);
    body_c.set_root(root);
    (m.add_computation(cond_c), m.add_computation(body_c))
}
