//! FLOPs, transcendentals and bytes accessed, counted by XLA's `HloCostAnalysis` rules
//! (what `compiled.cost_analysis()` reports), per instruction and per module.
//!
//! The rules, instruction by instruction:
//! - elementwise ops (unary, binary, `compare`, `select`, `clamp`, `convert`,
//!   `reduce-precision`): one per output element, counted as a transcendental for `exp`,
//!   `expm1`, `log`, `log1p`, `logistic`, `power`, `sqrt`, `cbrt`, `rsqrt`, `tanh`, `sin`,
//!   `cos`, `tan`, `atan2`, `erf` and `acosh`, as a FLOP for everything else;
//! - `dot`: 2 x output elements x the product of the contracting dims;
//! - `convolution`: 2 x (input features / feature groups) x output features x (batch /
//!   batch groups) x the product over spatial dims of the *valid* (kernel tap, output
//!   position) pairs: padding and base-dilation holes do not count;
//! - `reduce`: (input elements - output elements) x the reducer's cost; `reduce-window`:
//!   (window elements - 1) x output elements x the reducer's cost, except XLA's special
//!   case of a window that spans a padded dimension (a reduce broadcast back);
//!   `select-and-scatter`: source elements x ((window - 1) x select + scatter); `map`:
//!   elements x the mapped computation; `scatter`: update elements x the combiner;
//! - `sort`: n x ceil(log2 n) FLOPs for n keys; `rng`/`rng-bit-generator`: one
//!   transcendental per element; `all-reduce`: one FLOP per output element;
//! - fusions and calls: the sum over their computation; `while`: body + condition once
//!   (XLA cannot know the trip count); `conditional`: the per-key maximum over branches;
//! - data movement (`broadcast`, `reshape`, `transpose`, `copy`, `slice`, `pad`,
//!   `concatenate`, `reverse`, `iota`, gather, dynamic slices): no FLOPs.
//!
//! Custom-calls are unknown to XLA, which records -1 for them; here they count 0.
//!
//! Bytes accessed: operands read plus the result written, with XLA's exceptions
//! (parameters, constants, `get-tuple-element`, `bitcast`, `after-all`: nothing; a tuple:
//! its index table, 8 bytes per element; slices, gather and dynamic slices: only what they
//! touch; `dynamic-update-slice` and `scatter`: the update; a fusion: each fused parameter
//! once (or the part a slice of it reads), each output once, large constants inside).
//! XLA's figure is for *its* fused module, ours for ours: the two differ by what each
//! fusion pass keeps in registers (`hloc bench tpu` prints them side by side), which is
//! why the corpus test holds FLOPs and transcendentals to 2% and only reports bytes.

use std::ops::{Add, AddAssign};

use hlo_ir::op::{Branches, Convolution, WindowDim};
use hlo_ir::opcode::Category;
use hlo_ir::{CompId, Computation, Module, NodeIndex, Op, Opcode, Shape};

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Cost {
    pub flops: f64,
    pub transcendentals: f64,
    pub bytes_accessed: f64,
}

impl Add for Cost {
    type Output = Cost;
    fn add(self, o: Cost) -> Cost {
        Cost {
            flops: self.flops + o.flops,
            transcendentals: self.transcendentals + o.transcendentals,
            bytes_accessed: self.bytes_accessed + o.bytes_accessed,
        }
    }
}

impl AddAssign for Cost {
    fn add_assign(&mut self, o: Cost) {
        *self = *self + o;
    }
}

impl Cost {
    /// FLOPs and transcendentals times `n` (XLA copies no bytes from a reducer or mapped
    /// computation: they run in registers).
    fn compute_times(self, n: f64) -> Cost {
        Cost {
            flops: self.flops * n,
            transcendentals: self.transcendentals * n,
            bytes_accessed: 0.0,
        }
    }
    fn max(self, o: Cost) -> Cost {
        Cost {
            flops: self.flops.max(o.flops),
            transcendentals: self.transcendentals.max(o.transcendentals),
            bytes_accessed: self.bytes_accessed.max(o.bytes_accessed),
        }
    }
}

/// The whole module: the entry computation, nested computations through the instructions
/// that call them.
pub fn module_cost(m: &Module) -> Cost {
    comp_cost(m, m.entry)
}

/// One computation: the sum over its instructions.
pub fn comp_cost(m: &Module, id: CompId) -> Cost {
    let comp = m.comp(id);
    comp.nodes().fold(Cost::default(), |acc, n| acc + instr_cost(m, id, n))
}

fn elements(s: &Shape) -> f64 {
    s.as_array().and_then(|a| a.element_count()).unwrap_or(0) as f64
}

/// Elements of every array leaf.
fn elements_recursive(s: &Shape) -> f64 {
    match s {
        Shape::Tuple(t) => t.iter().map(elements_recursive).sum(),
        _ => elements(s),
    }
}

/// XLA's `ShapeUtil::ByteSizeOf(shape, pointer_size = 8)`: an array's elements at their
/// width (sub-byte types packed), a tuple's index table.
fn shape_bytes(s: &Shape) -> f64 {
    match s {
        Shape::Array(a) => (elements(s) * f64::from(a.elem.bits()) / 8.0).ceil(),
        Shape::Tuple(t) => 8.0 * t.len() as f64,
        _ => 0.0,
    }
}

fn is_transcendental(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        Acosh
            | Erf
            | Exp
            | Log
            | Logistic
            | Power
            | Sqrt
            | Cbrt
            | Rsqrt
            | Tanh
            | Sin
            | Cos
            | Expm1
            | Log1p
            | Atan2
            | Tan
    )
}

/// One instruction (a fusion, call or loop includes what it calls).
pub fn instr_cost(m: &Module, id: CompId, n: NodeIndex) -> Cost {
    let comp = m.comp(id);
    let instr = comp.instr(n);
    let shape = &instr.shape;
    let ops = comp.operands(n);
    let operand = |k: usize| ops.get(k).map(|&o| &comp.instr(o).shape);
    let operand_elems = |k: usize| operand(k).map_or(0.0, elements);
    // Operands read plus the result written: XLA's default before each handler.
    let default_bytes =
        ops.iter().map(|&o| shape_bytes(&comp.instr(o).shape)).sum::<f64>() + shape_bytes(shape);
    let with = |flops: f64, transcendentals: f64| Cost {
        flops,
        transcendentals,
        bytes_accessed: default_bytes,
    };
    let opcode = instr.op.opcode();
    match &instr.op {
        Op::Parameter { .. } | Op::Constant(_) | Op::GetTupleElement { .. } | Op::Domain { .. } => {
            Cost::default()
        }
        Op::Plain(Opcode::Bitcast | Opcode::AfterAll | Opcode::AddDependency) => Cost::default(),
        Op::Plain(Opcode::Tuple) => Cost { bytes_accessed: shape_bytes(shape), ..Cost::default() },
        Op::Slice { .. } => Cost { bytes_accessed: 2.0 * shape_bytes(shape), ..Cost::default() },
        Op::DynamicSlice { .. } => {
            let indices: f64 = ops.iter().skip(1).map(|&o| shape_bytes(&comp.instr(o).shape)).sum();
            Cost { bytes_accessed: 2.0 * shape_bytes(shape) + indices, ..Cost::default() }
        }
        Op::Plain(Opcode::DynamicUpdateSlice) => {
            let indices: f64 = ops.iter().skip(2).map(|&o| shape_bytes(&comp.instr(o).shape)).sum();
            Cost {
                bytes_accessed: 2.0 * operand(1).map_or(0.0, shape_bytes) + indices,
                ..Cost::default()
            }
        }
        Op::Gather(_) => Cost {
            bytes_accessed: 2.0 * shape_bytes(shape) + operand(1).map_or(0.0, shape_bytes),
            ..Cost::default()
        },
        Op::Scatter(sc) => {
            // Operands: inputs..., indices, updates... (as many updates as inputs).
            let k = ops.len() / 2;
            let updates: f64 =
                ops.iter().skip(k + 1).map(|&o| shape_bytes(&comp.instr(o).shape)).sum();
            let mut c = comp_cost(m, sc.to_apply).compute_times(operand_elems(k + 1));
            c.bytes_accessed = 3.0 * updates + operand(k).map_or(0.0, shape_bytes);
            c
        }
        Op::Dot { dims, .. } => {
            let contract: f64 = operand(0).and_then(Shape::as_array).map_or(0.0, |a| {
                dims.lhs_contracting
                    .iter()
                    .map(|&d| a.dims.get(d as usize).and_then(|x| x.bound()).unwrap_or(0) as f64)
                    .product()
            });
            with(2.0 * elements(shape) * contract, 0.0)
        }
        Op::Convolution(c) => with(convolution_flops(c, operand(0), operand(1), shape), 0.0),
        Op::Reduce { to_apply, .. } => {
            let out = shape.tuple_elements().and_then(|t| t.first()).unwrap_or(shape);
            let count = operand_elems(0) - elements(out);
            Cost { bytes_accessed: default_bytes, ..comp_cost(m, *to_apply).compute_times(count) }
        }
        Op::ReduceWindow { window, to_apply } => {
            let out = shape.tuple_elements().and_then(|t| t.first()).unwrap_or(shape);
            let count = reduce_window_count(&window.dims, out);
            Cost { bytes_accessed: default_bytes, ..comp_cost(m, *to_apply).compute_times(count) }
        }
        Op::SelectAndScatter { window, select, scatter } => {
            let source = operand_elems(1);
            let window_elems: f64 = window.dims.iter().map(|d| d.size as f64).product();
            let c = comp_cost(m, *select).compute_times(source * (window_elems - 1.0))
                + comp_cost(m, *scatter).compute_times(source);
            Cost { bytes_accessed: default_bytes, ..c }
        }
        Op::Map { to_apply, .. } => Cost {
            bytes_accessed: default_bytes,
            ..comp_cost(m, *to_apply).compute_times(elements(shape))
        },
        Op::Sort { .. } => {
            let n = operand_elems(0);
            let log2_ceil = if n > 1.0 { (n - 1.0).log2().floor() + 1.0 } else { 0.0 };
            with(n * log2_ceil, 0.0)
        }
        Op::Rng { .. } => with(0.0, elements(shape)),
        Op::RngBitGenerator { .. } => with(0.0, elements_recursive(shape)),
        Op::Collective { opcode: Opcode::AllReduce | Opcode::AllReduceStart, .. } => {
            with(elements_recursive(shape), 0.0)
        }
        Op::Fusion { calls, .. } => {
            let inner = comp_cost(m, *calls);
            Cost { bytes_accessed: fusion_bytes(m.comp(*calls)), ..inner }
        }
        Op::Call { to_apply, .. } => comp_cost(m, *to_apply),
        Op::While { condition, body } => comp_cost(m, *body) + comp_cost(m, *condition),
        Op::Conditional(br) => {
            let comps: Vec<CompId> = match br {
                Branches::TrueFalse(t, f) => vec![*t, *f],
                Branches::Indexed(v) => v.clone(),
            };
            comps.iter().map(|&c| comp_cost(m, c)).reduce(Cost::max).unwrap_or_default()
        }
        Op::Async { calls: Some(c), opcode: Opcode::AsyncStart, .. } => comp_cost(m, *c),
        Op::CustomCall(_) => Cost::default(),
        Op::Fft { fft_length, .. } => {
            let log_factors: f64 =
                fft_length.iter().map(|&l| (l.max(1) as f64).log2().floor()).product();
            let real = operand(0)
                .map(|s| s.tuple_elements().and_then(|t| t.first()).unwrap_or(s))
                .map_or(0.0, elements);
            with(2.0 * 4.0 * log_factors * real, 0.0)
        }
        Op::TriangularSolve { .. } => {
            let a_minor = operand(0)
                .and_then(Shape::as_array)
                .and_then(|a| a.dims.last())
                .and_then(|d| d.bound())
                .unwrap_or(0) as f64;
            with(2.0 * a_minor * operand_elems(1), 0.0)
        }
        Op::Cholesky { .. } => {
            let a_minor = operand(0)
                .and_then(Shape::as_array)
                .and_then(|a| a.dims.last())
                .and_then(|d| d.bound())
                .unwrap_or(0) as f64;
            with((a_minor * operand_elems(0) / 3.0).floor(), 0.0)
        }
        _ if matches!(
            opcode.category(),
            Category::Unary | Category::Binary | Category::Ternary
        ) || matches!(&instr.op, Op::Compare { .. } | Op::ReducePrecision { .. }) =>
        {
            let count = elements(shape);
            if is_transcendental(opcode) { with(0.0, count) } else { with(count, 0.0) }
        }
        _ => with(0.0, 0.0),
    }
}

/// XLA's `GetConvolutionFlops`: valid (kernel tap, output position) pairs per spatial dim.
fn convolution_flops(
    c: &Convolution,
    lhs: Option<&Shape>,
    rhs: Option<&Shape>,
    out: &Shape,
) -> f64 {
    let (Some(l), Some(r), Some(o)) =
        (lhs.and_then(Shape::as_array), rhs.and_then(Shape::as_array), out.as_array())
    else {
        return 0.0;
    };
    let dim = |a: &hlo_ir::ArrayShape, d: i64| {
        a.dims.get(d as usize).and_then(|x| x.bound()).unwrap_or(0) as i64
    };
    let d = &c.dims;
    let (in_feat, out_feat, batch) =
        (dim(l, d.input_feature), dim(o, d.output_feature), dim(l, d.input_batch));
    let mut positions: f64 = 1.0;
    for (s, w) in c.window.dims.iter().enumerate() {
        let (k, out_n, in_n) =
            (dim(r, d.kernel_spatial[s]), dim(o, d.output_spatial[s]), dim(l, d.input_spatial[s]));
        positions *= valid_positions(w, k, out_n, in_n) as f64;
    }
    let fg = c.feature_group_count.max(1);
    let bg = c.batch_group_count.max(1);
    2.0 * (in_feat / fg) as f64 * out_feat as f64 * (batch / bg) as f64 * positions
}

/// (kernel tap, output position) pairs of one spatial dim that read a real input element.
fn valid_positions(w: &WindowDim, k: i64, out_n: i64, in_n: i64) -> i64 {
    let (stride, lhs_dil, rhs_dil) = (w.stride.max(1), w.lhs_dilate.max(1), w.rhs_dilate.max(1));
    let mut count = 0;
    for tap in 0..k {
        if stride == 1 && lhs_dil == 1 {
            let base = w.pad_lo - tap * rhs_dil;
            count += ((in_n + base).min(out_n) - base.max(0)).max(0);
            continue;
        }
        for o in 0..out_n {
            let undilated = o * stride - w.pad_lo + tap * rhs_dil;
            if undilated.rem_euclid(lhs_dil) != 0 {
                continue;
            }
            let i = undilated.div_euclid(lhs_dil);
            if (0..in_n).contains(&i) {
                count += 1;
            }
        }
    }
    count
}

/// XLA's reduce-window count: (window - 1) x outputs, or, for a window that spans one
/// padded dimension to broadcast its reduction back (size 2p+1, padding p = dim - 1),
/// outputs / dim + dim - 1.
fn reduce_window_count(dims: &[WindowDim], out: &Shape) -> f64 {
    let outputs = elements(out);
    let window: f64 = dims.iter().map(|d| d.size as f64).product();
    let reducing = dims.iter().filter(|d| d.size != 1).count();
    let padded = dims.iter().filter(|d| d.pad_lo != 0 || d.pad_hi != 0).count();
    if reducing == 1
        && padded == 1
        && let Some(a) = out.as_array()
        && let Some((i, d)) = dims.iter().enumerate().find(|(_, d)| {
            d.size != 1 && d.pad_lo != 0 && d.pad_lo == d.pad_hi && d.size == 2 * d.pad_lo + 1
        })
        && let Some(n) = a.dims.get(i).and_then(|x| x.bound())
        && d.pad_lo == n as i64 - 1
    {
        let n = n as f64;
        return (outputs / n).floor() + n - 1.0;
    }
    (window - 1.0) * outputs
}

/// XLA's fusion bytes: every output leaf written once (a dynamic-update-slice root writes
/// its update), every fused parameter read as its users read it, large constants inside.
fn fusion_bytes(fused: &Computation) -> f64 {
    let mut bytes = 0.0;
    if let Some(root) = fused.root() {
        let root_instr = fused.instr(root);
        let outputs: Vec<NodeIndex> = if matches!(root_instr.op, Op::Plain(Opcode::Tuple)) {
            fused.operands(root)
        } else {
            vec![root]
        };
        for o in outputs {
            let i = fused.instr(o);
            bytes += if matches!(i.op, Op::Plain(Opcode::DynamicUpdateSlice)) {
                fused.operands(o).get(1).map_or(0.0, |&u| shape_bytes(&fused.instr(u).shape))
            } else {
                leaf_bytes(&i.shape)
            };
        }
    }
    for p in fused.nodes() {
        match &fused.instr(p).op {
            Op::Parameter { .. } => bytes += parameter_read_bytes(fused, p),
            Op::Constant(_) if elements(&fused.instr(p).shape) > 1.0 => {
                bytes += shape_bytes(&fused.instr(p).shape)
            }
            _ => {}
        }
    }
    bytes
}

fn leaf_bytes(s: &Shape) -> f64 {
    match s {
        Shape::Tuple(t) => t.iter().map(leaf_bytes).sum(),
        _ => shape_bytes(s),
    }
}

/// Bytes a fused parameter is read with: a slice or dynamic slice of it reads what it
/// takes, a dynamic-update-slice into it reads nothing (it aliases the output), broadcasts
/// and reshapes read it each, every other user shares one read.
fn parameter_read_bytes(fused: &Computation, p: NodeIndex) -> f64 {
    let size = leaf_bytes(&fused.instr(p).shape);
    let (mut bytes, mut shared) = (0.0, false);
    for u in fused.users(p) {
        let user = fused.instr(u);
        let first = fused.operands(u).first() == Some(&p);
        match &user.op {
            Op::Slice { .. } => bytes += shape_bytes(&user.shape),
            Op::DynamicSlice { .. } if first => bytes += shape_bytes(&user.shape),
            Op::Plain(Opcode::DynamicUpdateSlice) if first => {}
            Op::Broadcast { .. } | Op::Reshape { .. } => bytes += size,
            _ if !shared => {
                shared = true;
                bytes += size;
            }
            _ => {}
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(src: &str) -> Cost {
        let m = hlo_check::parse(src).expect("valid module");
        module_cost(&m)
    }

    #[test]
    fn elementwise_and_transcendentals() {
        let c = cost(
            "HloModule m\n\nENTRY e {\n  a = f32[4,8] parameter(0)\n  b = f32[4,8] add(a, a)\n  c = f32[4,8] exponential(b)\n  d = pred[4,8] compare(b, c), direction=LT\n  ROOT s = f32[4,8] select(d, b, c)\n}\n",
        );
        assert_eq!((c.flops, c.transcendentals), (96.0, 32.0));
        // add reads 2 x 128 B and writes 128; exp 128 + 128; compare 256 + 32; select 32 + 256 + 128.
        assert_eq!(c.bytes_accessed, 384.0 + 256.0 + 288.0 + 416.0);
    }

    #[test]
    fn dot_counts_two_flops_per_multiply_add() {
        let c = cost(
            "HloModule m\n\nENTRY e {\n  a = f32[2,16,32] parameter(0)\n  b = f32[2,32,8] parameter(1)\n  ROOT d = f32[2,16,8] dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
        );
        assert_eq!(c.flops, 2.0 * 2.0 * 16.0 * 8.0 * 32.0);
    }

    #[test]
    fn convolution_counts_only_valid_positions() {
        // 1-D, 4 inputs, kernel 3, padding 1 each side: taps see 3 + 4 + 3 = 10 valid pairs
        // (not 3 x 4): 2 x 2 in x 5 out features x 1 batch x 10.
        let c = cost(
            "HloModule m\n\nENTRY e {\n  a = f32[1,4,2] parameter(0)\n  k = f32[3,2,5] parameter(1)\n  ROOT c = f32[1,4,5] convolution(a, k), window={size=3 pad=1_1}, dim_labels=b0f_0io->b0f\n}\n",
        );
        assert_eq!(c.flops, 2.0 * 2.0 * 5.0 * 10.0);
        // Stride 2 with base dilation 2: the general loop.
        let w = WindowDim {
            size: 3,
            stride: 2,
            pad_lo: 1,
            pad_hi: 1,
            lhs_dilate: 2,
            rhs_dilate: 1,
            reversal: false,
        };
        let brute = (0..3)
            .flat_map(|t| (0..4).map(move |o| o * 2 - 1 + t))
            .filter(|&u| u % 2 == 0 && (0..4).contains(&(u / 2)))
            .count();
        assert_eq!(valid_positions(&w, 3, 4, 4), brute as i64);
    }

    #[test]
    fn reduce_counts_reducer_applications() {
        let c = cost(
            "HloModule m\n\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\nENTRY e {\n  a = f32[8,16] parameter(0)\n  z = f32[] constant(0)\n  ROOT r = f32[8] reduce(a, z), dimensions={1}, to_apply=add\n}\n",
        );
        assert_eq!(c.flops, 128.0 - 8.0);
    }

    #[test]
    fn fusion_sums_its_computation_and_reads_each_parameter_once() {
        let c = cost(
            "HloModule m\n\nf {\n  p = f32[64] parameter(0)\n  t = f32[64] tanh(p)\n  ROOT m = f32[64] multiply(t, p)\n}\n\nENTRY e {\n  a = f32[64] parameter(0)\n  ROOT r = f32[64] fusion(a), kind=kLoop, calls=f\n}\n",
        );
        assert_eq!((c.flops, c.transcendentals), (64.0, 64.0));
        assert_eq!(c.bytes_accessed, 256.0 + 256.0);
    }

    #[test]
    fn while_counts_one_iteration_and_sort_n_log_n() {
        let c = cost(
            "HloModule m\n\ncond {\n  s = (s32[], f32[4]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant(10)\n  ROOT lt = pred[] compare(i, n), direction=LT\n}\n\nbody {\n  s = (s32[], f32[4]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  one = s32[] constant(1)\n  j = s32[] add(i, one)\n  x = f32[4] get-tuple-element(s), index=1\n  y = f32[4] multiply(x, x)\n  ROOT t = (s32[], f32[4]) tuple(j, y)\n}\n\nENTRY e {\n  z = s32[] constant(0)\n  a = f32[4] parameter(0)\n  t = (s32[], f32[4]) tuple(z, a)\n  ROOT w = (s32[], f32[4]) while(t), condition=cond, body=body\n}\n",
        );
        assert_eq!(c.flops, 1.0 + 1.0 + 4.0);
        let c = cost(
            "HloModule m\n\nlt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT c = pred[] compare(a, b), direction=LT\n}\n\nENTRY e {\n  a = f32[100] parameter(0)\n  ROOT s = f32[100] sort(a), dimensions={0}, to_apply=lt\n}\n",
        );
        assert_eq!(c.flops, 100.0 * 7.0);
    }
}
