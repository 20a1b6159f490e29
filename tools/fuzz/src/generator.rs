//! The generator of random well-typed HLO modules.
//!
//! A module is built instruction by instruction: each step picks an op, takes operands
//! from the values built so far (or makes the operand it needs: a new parameter, a
//! broadcast constant), and computes the result's shape itself, so every module is valid by
//! construction (the checks refusing one is a bug of the generator or of the checks).
//! It is written as text, the way JAX and XLA write HLO, and parsed like any module.
//!
//! # Which values engines must agree on, bit for bit
//!
//! Every value carries two facts the comparison relies on:
//! - `exact`: every engine must compute its exact bits. Integers and predicates always
//!   are; a float is when it is an integer whose magnitude (`bound`) fits the mantissa
//!   of its type, so that sums and products are exact in any order. Parameters hold small
//!   integers (floats too) for that reason. Division, transcendental functions and sums
//!   past the mantissa make a value inexact: engines may then differ by rounding.
//! - Ops that are discontinuous in their operand (floor, compare, sort keys, conversion
//!   to an integer, bitcasts, indices) take only exact operands, so a rounding difference
//!   upstream can never turn into a different branch or index downstream.
//!
//! With [`Config::edge_values`], inputs and constants also hold NaN, infinities, signed
//! zeros and integer extremes, and the ops give them their defined semantics; a third of
//! the float parameters (named `subnormal.N`) also hold their type's smallest subnormals,
//! which flow only through ops where a subnormal and the zero a flushing engine (FTZ/DAZ,
//! as XLA CPU) reads in its place give results that agree but for a subnormal (sums,
//! max/min/select, conversions, data movement)
//! ([`TINY_SAFE`]): the harness matches a subnormal reference value with zero there.
//!
//! # Shardings
//!
//! With [`Config::devices`] > 1, a second text of the same module carries random shardings
//! (`num_partitions`, tiles over one or two dims, partial replication, permuted device
//! lists, replicated and maximal) on parameters and instructions: the partitioned program
//! on N devices must compute what the unsharded one computes on one.

use std::fmt::Write as _;

use crate::rng::Rng;

/// What the generator may use.
#[derive(Clone, Debug)]
pub struct Config {
    /// Instructions in the entry computation (parameters and constants not counted), at
    /// least 1.
    pub max_instrs: usize,
    /// NaN, infinities, signed zeros and integer extremes in inputs and constants.
    pub edge_values: bool,
    /// Devices of the sharded text (`None` below 2).
    pub devices: usize,
    /// Largest dimension size.
    pub max_dim: u64,
}

impl Default for Config {
    fn default() -> Config {
        Config { max_instrs: 24, edge_values: false, devices: 4, max_dim: 5 }
    }
}

/// Element types the generator writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Elem {
    Pred,
    S8,
    S16,
    S32,
    S64,
    U8,
    U16,
    U32,
    F16,
    BF16,
    F32,
    F64,
}

impl Elem {
    /// The HLO spelling.
    pub fn name(self) -> &'static str {
        match self {
            Elem::Pred => "pred",
            Elem::S8 => "s8",
            Elem::S16 => "s16",
            Elem::S32 => "s32",
            Elem::S64 => "s64",
            Elem::U8 => "u8",
            Elem::U16 => "u16",
            Elem::U32 => "u32",
            Elem::F16 => "f16",
            Elem::BF16 => "bf16",
            Elem::F32 => "f32",
            Elem::F64 => "f64",
        }
    }
    pub fn is_float(self) -> bool {
        matches!(self, Elem::F16 | Elem::BF16 | Elem::F32 | Elem::F64)
    }
    pub fn is_int(self) -> bool {
        !self.is_float() && self != Elem::Pred
    }
    pub fn is_signed(self) -> bool {
        matches!(self, Elem::S8 | Elem::S16 | Elem::S32 | Elem::S64)
    }
    pub fn bits(self) -> u32 {
        match self {
            Elem::Pred | Elem::S8 | Elem::U8 => 8,
            Elem::S16 | Elem::U16 | Elem::F16 | Elem::BF16 => 16,
            Elem::S32 | Elem::U32 | Elem::F32 => 32,
            Elem::S64 | Elem::F64 => 64,
        }
    }
    /// Integers of this magnitude and below are exact (floats: 2^mantissa bits).
    pub fn exact_limit(self) -> f64 {
        match self {
            Elem::BF16 => 256.0,
            Elem::F16 => 2048.0,
            Elem::F32 => 16_777_216.0,
            Elem::F64 => 9.007_199_254_740_992e15,
            Elem::Pred => 1.0,
            e if e.is_signed() => 2f64.powi(e.bits() as i32 - 1) - 1.0,
            e => 2f64.powi(e.bits() as i32) - 1.0,
        }
    }
    /// The type of the same width whose bits a bitcast reads (floats to integers).
    fn same_width_int(self) -> Option<Elem> {
        match self {
            Elem::F16 | Elem::BF16 => Some(Elem::S16),
            Elem::F32 => Some(Elem::S32),
            Elem::F64 => Some(Elem::S64),
            _ => None,
        }
    }
}

/// A value of the entry computation.
#[derive(Clone, Debug)]
struct Val {
    name: String,
    elem: Elem,
    dims: Vec<u64>,
    /// Every engine must compute these bits (see the module doc).
    exact: bool,
    /// An upper bound of the magnitude of its elements (integers: before wrapping).
    bound: f64,
    /// The sign of its zeros is settled: no sum feeds it, whose zero's sign a partition's
    /// padding (an extra +0 term) may change.
    zero_sign: bool,
    /// The relative tolerance an inexact value is compared with: the coarsest float type
    /// an inexact value on its way passed through (a bf16 rounding stays a bf16 error
    /// after a conversion back to f32).
    tol: f64,
    /// It may hold subnormals (edge values): computed only by the ops of
    /// [`TINY_SAFE`], whose results on a subnormal and on the zero a flushing engine
    /// reads instead agree but for a subnormal.
    tiny: bool,
}

/// The ops a value that may hold subnormals feeds (see [`Val::tiny`]): sums (which
/// absorb a subnormal term or keep it subnormal), sign-free selections, and data
/// movement; reductions only with a sum, max or min. Everything that branches on a value
/// or can make an infinity of it (compare, sort, floor, sign, division, logarithms,
/// bitcasts, products, where `subnormal * inf = inf` but `0 * inf = NaN`; MXU passes of
/// the TPU model that drop what bf16 cannot hold) does not take one: those read a
/// subnormal and a flushed zero differently, which is the documented FTZ/DAZ deviation,
/// not a bug.
const TINY_SAFE: &[&str] = &[
    "add",
    "subtract",
    "negate",
    "abs",
    "maximum",
    "minimum",
    "clamp",
    "select",
    "broadcast",
    "reshape",
    "transpose",
    "slice",
    "concatenate",
    "pad",
    "reverse",
    "copy",
    "dynamic-slice",
    "dynamic-update-slice",
    "gather",
    "reduce",
    "reduce-window",
    "convert",
    "is-finite",
];

/// The name prefix of a parameter whose inputs hold subnormals (edge values).
pub const SUBNORMAL_PARAM: &str = "subnormal";

/// How far a subnormal of each type may be scaled and stay subnormal (the ratio of the
/// smallest normal to the smallest subnormal), halved: [`Val::bound`] of a value that
/// may hold subnormals stays below it.
fn tiny_room(elem: Elem) -> f64 {
    match elem {
        Elem::F32 => 2f64.powi(22),
        Elem::BF16 => 2f64.powi(6),
        Elem::F16 => 2f64.powi(9),
        Elem::F64 => 2f64.powi(51),
        _ => f64::INFINITY,
    }
}

/// A parameter of the entry computation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its name: inputs are seeded by it, so a reduced module keeps every remaining
    /// parameter's values.
    pub name: String,
    pub elem: Elem,
    pub dims: Vec<u64>,
}

/// A generated module.
#[derive(Clone, Debug)]
pub struct Generated {
    /// The module without shardings.
    pub text: String,
    /// The same module with random shardings for [`Config::devices`] devices.
    pub sharded: Option<String>,
    /// The entry parameters, in order.
    pub params: Vec<Param>,
    /// Whether each output (the root's tuple elements) is exact (see the module doc).
    pub exact_outputs: Vec<bool>,
    /// The relative tolerance of each inexact output (0 for exact ones).
    pub tolerances: Vec<f64>,
    /// A bound of the magnitudes each output's value was computed from (sums that cancel
    /// carry the rounding errors of their terms, not of their result).
    pub magnitudes: Vec<f64>,
    /// Whether inputs may hold edge values.
    pub edge_values: bool,
}

struct Instr {
    name: String,
    ty: String,
    body: String,
    /// Rank of an array result (`None`: tuple-shaped, never annotated).
    rank: Option<usize>,
    dims: Vec<u64>,
    root: bool,
}

struct Gen<'r, 'a> {
    rng: &'r mut Rng<'a>,
    cfg: Config,
    vals: Vec<Val>,
    params: Vec<Param>,
    instrs: Vec<Instr>,
    helpers: Vec<String>,
    next: usize,
    /// The last step made a float whose finite values may overflow its type: a sum or
    /// product that overflows in one order and not in another (the step is undone).
    overflow: bool,
}

fn shape(elem: Elem, dims: &[u64]) -> String {
    let d: Vec<String> = dims.iter().map(u64::to_string).collect();
    format!("{}[{}]", elem.name(), d.join(","))
}

fn list(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

fn count(dims: &[u64]) -> u64 {
    dims.iter().product()
}

const FLOATS: [Elem; 4] = [Elem::F32, Elem::BF16, Elem::F16, Elem::F64];
const INTS: [Elem; 7] = [Elem::S32, Elem::S8, Elem::S16, Elem::S64, Elem::U8, Elem::U16, Elem::U32];

/// Generates one module from `rng`'s choices.
pub fn generate(rng: &mut Rng<'_>, cfg: &Config) -> Generated {
    let mut g = Gen {
        rng,
        cfg: cfg.clone(),
        vals: Vec::new(),
        params: Vec::new(),
        instrs: Vec::new(),
        helpers: Vec::new(),
        next: 0,
        overflow: false,
    };
    g.build()
}

impl Gen<'_, '_> {
    fn fresh(&mut self, prefix: &str) -> String {
        self.next += 1;
        format!("{prefix}.{}", self.next)
    }

    fn random_elem(&mut self) -> Elem {
        match self.rng.below(20) {
            0..=7 => Elem::F32,
            8..=9 => Elem::BF16,
            10 => Elem::F16,
            11 => Elem::F64,
            12..=15 => Elem::S32,
            16 => *self.rng.pick(&INTS),
            17 => *self.rng.pick(&INTS),
            18 => Elem::Pred,
            _ => *self.rng.pick(&FLOATS),
        }
    }

    fn random_dims(&mut self, max_rank: usize) -> Vec<u64> {
        let rank = self.rng.below(max_rank + 1);
        (0..rank).map(|_| self.rng.range(1, self.cfg.max_dim as i64) as u64).collect()
    }

    fn push(&mut self, elem: Elem, dims: Vec<u64>, body: String, exact: bool, bound: f64) -> usize {
        let name = self.fresh(&body.split('(').next().unwrap_or("v").replace('-', "_"));
        // Infinities and NaN are absorbing (the same in any order); only finite values
        // that may overflow make results depend on the order of a sum or product.
        if elem.is_float() && (bound.is_nan() || bound > max_finite(elem) / 16.0) {
            self.overflow = true;
        }
        let bound = if bound.is_finite() { bound.min(1e300) } else { 1e300 };
        let exact = exact && (bound <= elem.exact_limit() || !elem.is_float());
        // Sums (reductions, products, scatter-add) may meet a partition's padding.
        let sums = [
            "reduce",
            "dot",
            "convolution",
            "select-and-scatter",
            "scatter",
            "reduce-window",
            "map",
        ]
        .iter()
        .any(|s| body.starts_with(&format!("{s}(")));
        let operands = self.operand_vals(&body);
        let tiny = operands.iter().any(|v| v.tiny);
        let mut unsafe_for_tiny = false;
        if tiny {
            let op = body.split('(').next().unwrap_or("");
            // An f32 subnormal is a normal f64: widened, a flushed zero no longer matches.
            let widens = op == "convert"
                && elem == Elem::F64
                && operands.iter().any(|v| v.tiny && v.elem != Elem::F64);
            let product = body.contains("to_apply=multiply");
            unsafe_for_tiny =
                !TINY_SAFE.contains(&op) || widens || product || bound > tiny_room(elem);
        }
        let tiny = tiny && elem.is_float();
        // A sum of several terms absorbs a subnormal into a normal partial sum in one order
        // and keeps it in another (a partition's partial sums): inexact at the subnormal
        // level, which the inexact comparison's absolute floor allows.
        let exact = exact && !(tiny && sums);
        let zero_sign = !sums && !tiny && operands.iter().all(|v| v.zero_sign);
        let inherited = operands.iter().filter(|v| !v.exact).fold(0f64, |t, v| t.max(v.tol));
        let tol = if exact { 0.0 } else { inherited.max(rtol(elem)) };
        if unsafe_for_tiny {
            self.overflow = true; // undone, as a step that may overflow
        }
        self.instrs.push(Instr {
            name: name.clone(),
            ty: shape(elem, &dims),
            body,
            rank: Some(dims.len()),
            dims: dims.clone(),
            root: false,
        });
        self.vals.push(Val { name, elem, dims, exact, bound, zero_sign, tol, tiny });
        self.vals.len() - 1
    }

    /// The values `body` names as operands (elements of tuples, which loops, sorts and
    /// variadic reductions make, are not looked through).
    fn operand_vals(&self, body: &str) -> Vec<&Val> {
        let args = body.split_once('(').map_or("", |(_, r)| r);
        let args = args.split(')').next().unwrap_or("");
        args.split(", ").filter_map(|a| self.vals.iter().rev().find(|v| v.name == a)).collect()
    }

    /// A tuple-shaped instruction (never an operand itself): its name.
    fn push_tuple(&mut self, ty: String, body: String) -> String {
        if self.operand_vals(&body).iter().any(|v| v.tiny) {
            self.overflow = true; // loops, sorts, variadic reductions: not on subnormals
        }
        let name = self.fresh(&body.split('(').next().unwrap_or("t").replace('-', "_"));
        self.instrs.push(Instr {
            name: name.clone(),
            ty,
            body,
            rank: None,
            dims: Vec::new(),
            root: false,
        });
        name
    }

    fn param(&mut self, elem: Elem, dims: Vec<u64>) -> usize {
        let k = self.params.len();
        let bound = if elem.is_float() {
            3.0
        } else if elem == Elem::Pred {
            1.0
        } else {
            8.0
        };
        // Edge values (NaN, infinities, -0, 0.5) keep floats exact: they absorb or stay
        // exact in sums in any order. Integer extremes wrap, deterministically.
        let bound =
            if self.cfg.edge_values && elem.is_int() { exact_int_bound(elem) } else { bound };
        let v = self.push(elem, dims.clone(), format!("parameter({k})"), true, bound);
        // Some float parameters hold subnormals too (the name tells the inputs).
        if self.cfg.edge_values && elem.is_float() && self.rng.chance(1, 3) {
            let name = self.fresh(SUBNORMAL_PARAM);
            self.vals[v].name = name.clone();
            self.vals[v].tiny = true;
            if let Some(last) = self.instrs.last_mut() {
                last.name = name;
            }
        }
        self.params.push(Param { name: self.vals[v].name.clone(), elem, dims });
        v
    }

    /// A scalar literal of `elem` (small integers; edge values in that mode).
    fn literal(&mut self, elem: Elem) -> (String, f64) {
        if elem == Elem::Pred {
            return (if self.rng.chance(1, 2) { "true" } else { "false" }.into(), 1.0);
        }
        if self.cfg.edge_values && self.rng.chance(1, 4) {
            if elem.is_float() {
                let s = *self.rng.pick(&["nan", "inf", "-inf", "-0", "0.5"]);
                return (s.into(), 1.0);
            }
            let (lo, hi) = int_range(elem);
            let v = if self.rng.chance(1, 2) { lo } else { hi };
            return (v.to_string(), f64::INFINITY);
        }
        let v = if elem.is_signed() || elem.is_float() {
            self.rng.range(-3, 3)
        } else {
            self.rng.range(0, 5)
        };
        (v.to_string(), v.unsigned_abs() as f64)
    }

    fn constant(&mut self, elem: Elem) -> usize {
        let (lit, bound) = self.literal(elem);
        self.push(elem, vec![], format!("constant({lit})"), true, bound)
    }

    /// A value of exactly this type: one built before, or a new parameter, or a broadcast
    /// constant, or an iota.
    fn need(&mut self, elem: Elem, dims: &[u64]) -> usize {
        let matches: Vec<usize> = (0..self.vals.len())
            .filter(|&i| self.vals[i].elem == elem && self.vals[i].dims == dims)
            .collect();
        if !matches.is_empty() && self.rng.chance(3, 4) {
            return *self.rng.pick(&matches);
        }
        match self.rng.below(4) {
            0 | 1 if self.params.len() < 8 => self.param(elem, dims.to_vec()),
            2 if !dims.is_empty() && elem != Elem::Pred => {
                let d = self.rng.below(dims.len());
                let b = dims[d] as f64;
                self.push(elem, dims.to_vec(), format!("iota(), iota_dimension={d}"), true, b)
            }
            _ => {
                let c = self.constant(elem);
                if dims.is_empty() {
                    return c;
                }
                let (name, bound) = (self.vals[c].name.clone(), self.vals[c].bound);
                self.push(
                    elem,
                    dims.to_vec(),
                    format!("broadcast({name}), dimensions={{}}"),
                    true,
                    bound,
                )
            }
        }
    }

    /// A value satisfying `ok`, preferring recent ones (so the program is a connected
    /// graph more than a forest).
    fn pick(&mut self, ok: impl Fn(&Val) -> bool) -> Option<usize> {
        let c: Vec<usize> = (0..self.vals.len()).filter(|&i| ok(&self.vals[i])).collect();
        if c.is_empty() {
            return None;
        }
        if self.rng.chance(1, 2) {
            let recent = &c[c.len().saturating_sub(4)..];
            return Some(*self.rng.pick(recent));
        }
        Some(*self.rng.pick(&c))
    }

    /// A binary computation `name(a, b) = a op b` over scalars of `elem`.
    fn binary_comp(&mut self, op: &str, elem: Elem) -> String {
        let name = self.fresh(&format!("{}_{}", op.replace('-', "_"), elem.name()));
        let t = shape(elem, &[]);
        self.helpers.push(format!(
            "{name} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  ROOT r = {t} {op}(a, b)\n}}\n"
        ));
        name
    }

    fn build(&mut self) -> Generated {
        // Most modules stay tiny; some reach the JIT's vector loops and tails.
        if self.cfg.max_dim >= 5 {
            self.cfg.max_dim = *self.rng.pick(&[4, 5, 5, 6, 9, 17]);
        }
        let n_params = 1 + self.rng.below(3);
        for _ in 0..n_params {
            let e = self.random_elem();
            let d = self.random_dims(3);
            self.param(e, d);
        }
        let target = 1 + self.rng.below(self.cfg.max_instrs.max(1));
        let mut built = 0;
        let mut tries = 0;
        while built < target && tries < target * 20 {
            tries += 1;
            let before =
                (self.instrs.len(), self.vals.len(), self.helpers.len(), self.params.len());
            let stepped = self.step().is_some();
            if self.overflow {
                self.overflow = false;
                self.instrs.truncate(before.0);
                self.vals.truncate(before.1);
                self.helpers.truncate(before.2);
                self.params.truncate(before.3);
            } else if stepped && self.instrs.len() > before.0 {
                built += 1;
            }
        }
        self.finish()
    }

    fn step(&mut self) -> Option<()> {
        match self.rng.below(36) {
            32 => self.is_finite_or_reduce_precision(),
            33 => self.scan(),
            34 => self.topk(),
            35 => self.conditional_on_pred(),
            0..=4 => self.unary(),
            5..=9 => self.binary(),
            10 => self.compare_select(),
            11 => self.convert(),
            12 => self.broadcast(),
            13 => self.reshape(),
            14 => self.transpose(),
            15 => self.slice(),
            16 => self.concatenate(),
            17 => self.pad(),
            18 => self.reverse_or_clamp(),
            19 => self.dot(),
            20 => self.reduce(),
            21 => self.reduce_window(),
            22 => self.dynamic_slice(),
            23 => self.gather(),
            24 => self.scatter(),
            25 => self.sort(),
            26 => self.while_loop(),
            27 => self.conditional(),
            28 => self.map(),
            29 => self.convolution(),
            30 => self.select_and_scatter(),
            _ => self.argmax(),
        }
    }

    fn unary(&mut self) -> Option<()> {
        let v = self.pick(|_| true)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        // (op, keeps exactness, needs an exact operand, new bound)
        let (op, keeps, discontinuous, nb): (&str, bool, bool, f64) = if elem == Elem::Pred {
            ("not", true, false, 1.0)
        } else if elem.is_int() {
            let ops: &[&str] = if elem.is_signed() {
                &["negate", "abs", "not", "popcnt", "count-leading-zeros", "sign"]
            } else {
                &["not", "popcnt", "count-leading-zeros"]
            };
            let op = *self.rng.pick(ops);
            let nb = match op {
                "negate" | "abs" => bound + 1.0,
                "sign" => 1.0,
                "popcnt" | "count-leading-zeros" => elem.bits() as f64,
                _ => exact_int_bound(elem),
            };
            (op, true, false, nb)
        } else {
            let ops = [
                ("negate", true, false, bound),
                ("abs", true, false, bound),
                ("floor", true, true, bound),
                ("ceil", true, true, bound),
                ("round-nearest-even", true, true, bound),
                ("round-nearest-afz", true, true, bound),
                ("sign", true, true, 1.0),
                ("exponential", false, false, bound.exp()),
                ("log", false, true, bound.ln_1p() + 1.0),
                ("sqrt", false, true, bound.sqrt()),
                ("rsqrt", false, true, 1.0),
                ("tanh", false, false, 1.0),
                ("logistic", false, false, 1.0),
                ("sine", false, false, 1.0),
                ("cosine", false, false, 1.0),
                ("exponential-minus-one", false, false, bound.exp()),
                ("log-plus-one", false, true, bound.ln_1p() + 1.0),
                ("cbrt", false, true, bound.cbrt()),
                ("erf", false, false, 1.0),
                ("tan", false, true, 1e7),
                ("sinh", false, false, bound.exp()),
                ("cosh", false, false, bound.exp()),
                ("asin", false, true, 2.0),
                ("acos", false, true, 4.0),
                ("atanh", false, true, 20.0),
                ("asinh", false, false, bound.ln_1p() + 1.0),
                ("acosh", false, true, bound.ln_1p() + 1.0),
            ];
            *self.rng.pick(&ops)
        };
        if discontinuous && !exact {
            return None;
        }
        self.push(elem, dims, format!("{op}({name})"), exact && keeps, nb);
        Some(())
    }

    fn binary(&mut self) -> Option<()> {
        let a = self.pick(|_| true)?;
        let Val { elem, dims, .. } = self.vals[a].clone();
        let b = self.need(elem, &dims);
        let (va, vb) = (self.vals[a].clone(), self.vals[b].clone());
        let exact = va.exact && vb.exact;
        let (ba, bb) = (va.bound, vb.bound);
        let (op, keeps, nb): (&str, bool, f64) = if elem == Elem::Pred {
            (*self.rng.pick(&["and", "or", "xor"]), true, 1.0)
        } else if elem.is_int() {
            let ops = [
                ("add", ba + bb),
                ("subtract", ba + bb),
                ("multiply", ba * bb),
                ("divide", ba),
                ("remainder", ba),
                ("maximum", ba.max(bb)),
                ("minimum", ba.max(bb)),
                ("and", ba.max(bb)),
                ("or", exact_int_bound(elem)),
                ("xor", exact_int_bound(elem)),
                ("shift-left", exact_int_bound(elem)),
                ("shift-right-logical", exact_int_bound(elem)),
                ("shift-right-arithmetic", ba),
                ("power", exact_int_bound(elem)),
            ];
            let (op, nb) = *self.rng.pick(&ops);
            (op, true, nb)
        } else {
            let ops = [
                ("add", true, ba + bb),
                ("subtract", true, ba + bb),
                ("multiply", true, ba * bb),
                ("maximum", true, ba.max(bb)),
                ("minimum", true, ba.max(bb)),
                ("remainder", true, ba),
                ("divide", false, ba),
                ("power", false, ba.max(1.0).powf(bb)),
                ("atan2", false, 4.0),
            ];
            let (op, keeps, nb) = *self.rng.pick(&ops);
            // Discontinuous (remainder) or singular near a zero operand, where the sign
            // of a zero decides (1/±0, atan2(±0, -1)): exact operands whose zeros' signs
            // no summation order or partition padding can change.
            if matches!(op, "remainder" | "divide" | "power" | "atan2")
                && !(exact && va.zero_sign && vb.zero_sign)
            {
                return None;
            }
            // remainder(x, 0) is a NaN, whose sign XLA does not define (a total-order
            // compare or sort would read it): not exact, so no sort key or compare takes it.
            let keeps = keeps && op != "remainder";
            (op, keeps, nb)
        };
        self.push(elem, dims, format!("{op}({}, {})", va.name, vb.name), exact && keeps, nb);
        Some(())
    }

    fn compare_select(&mut self) -> Option<()> {
        let a = self.pick(|v| v.exact)?;
        let Val { elem, dims, .. } = self.vals[a].clone();
        let b = self.need(elem, &dims);
        if !self.vals[b].exact {
            return None;
        }
        let dir = *self.rng.pick(&["EQ", "NE", "LT", "LE", "GT", "GE"]);
        // A total order reads a NaN's sign, which XLA does not define: not with edge values.
        let total = elem.is_float() && !self.cfg.edge_values && self.rng.chance(1, 3);
        let ty = if total { ", type=TOTALORDER" } else { "" };
        let (na, nb) = (self.vals[a].name.clone(), self.vals[b].name.clone());
        let p = self.push(
            Elem::Pred,
            dims.clone(),
            format!("compare({na}, {nb}), direction={dir}{ty}"),
            true,
            1.0,
        );
        if self.rng.chance(2, 3) {
            // select between two values of one type, by this predicate.
            let x = self.pick(|v| v.dims == dims)?;
            let ex = self.vals[x].elem;
            let y = self.need(ex, &dims);
            let (vx, vy) = (self.vals[x].clone(), self.vals[y].clone());
            let pn = self.vals[p].name.clone();
            self.push(
                ex,
                dims,
                format!("select({pn}, {}, {})", vx.name, vy.name),
                vx.exact && vy.exact,
                vx.bound.max(vy.bound),
            );
        }
        Some(())
    }

    fn convert(&mut self) -> Option<()> {
        let v = self.pick(|_| true)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let to = self.random_elem();
        if to == elem {
            return None;
        }
        if self.rng.chance(1, 6) {
            // bitcast-convert between a float and the integer of its width.
            let to = elem.same_width_int()?;
            // A NaN's payload and sign are not defined by XLA: its bits are not compared.
            if !exact || self.cfg.edge_values {
                return None;
            }
            self.push(to, dims, format!("bitcast-convert({name})"), true, exact_int_bound(to));
            return Some(());
        }
        // Conversions whose result depends on more than the value's rounding: float to
        // integer or predicate reads a threshold, so only from exact values; float to an
        // unsigned type or out of range is implementation-defined in XLA.
        if elem.is_float()
            && !to.is_float()
            && (!exact || !to.is_signed() && to != Elem::Pred || bound > to.exact_limit())
        {
            return None;
        }
        let nb = match (elem, to) {
            (_, Elem::Pred) => 1.0,
            (e, t) if e.is_int() && t.is_int() && bound > t.exact_limit() => exact_int_bound(t),
            _ => bound,
        };
        // A float converted to a narrower float is rounded: exact only within its mantissa.
        let exact = exact || !to.is_float() && !elem.is_float();
        self.push(to, dims, format!("convert({name})"), exact, nb);
        Some(())
    }

    fn broadcast(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() < 3)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let extra = 1 + self.rng.below(3 - dims.len());
        let rank = dims.len() + extra;
        // Operand dim i goes to output dim map[i] (increasing).
        let mut slots: Vec<usize> = self.rng.permutation(rank)[..dims.len()].to_vec();
        slots.sort_unstable();
        let mut out = vec![0u64; rank];
        for (i, &s) in slots.iter().enumerate() {
            out[s] = dims[i];
        }
        for d in out.iter_mut().filter(|d| **d == 0) {
            *d = self.rng.range(1, self.cfg.max_dim as i64) as u64;
        }
        let map: Vec<u64> = slots.iter().map(|&s| s as u64).collect();
        self.push(
            elem,
            out,
            format!("broadcast({name}), dimensions={{{}}}", list(&map)),
            exact,
            bound,
        );
        Some(())
    }

    fn reshape(&mut self) -> Option<()> {
        let v = self.pick(|_| true)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let n = count(&dims);
        // A random factorization of n into up to 3 dims (1s allowed).
        let mut out = Vec::new();
        let mut rest = n;
        let rank = 1 + self.rng.below(3);
        for _ in 0..rank - 1 {
            let divs: Vec<u64> = (1..=rest).filter(|d| rest.is_multiple_of(*d)).collect();
            let d = *self.rng.pick(&divs);
            out.push(d);
            rest /= d;
        }
        out.push(rest);
        if n == 1 && self.rng.chance(1, 2) {
            out.clear();
        }
        self.push(elem, out, format!("reshape({name})"), exact, bound);
        Some(())
    }

    fn transpose(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() >= 2)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let perm = self.rng.permutation(dims.len());
        let out: Vec<u64> = perm.iter().map(|&p| dims[p]).collect();
        let p: Vec<u64> = perm.iter().map(|&p| p as u64).collect();
        self.push(
            elem,
            out,
            format!("transpose({name}), dimensions={{{}}}", list(&p)),
            exact,
            bound,
        );
        Some(())
    }

    fn slice(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let mut parts = Vec::new();
        let mut out = Vec::new();
        for &d in &dims {
            let start = self.rng.below(d as usize) as u64;
            let limit = start + 1 + self.rng.below((d - start) as usize) as u64;
            let stride = 1 + self.rng.below(2) as u64;
            parts.push(format!("[{start}:{limit}:{stride}]"));
            out.push((limit - start).div_ceil(stride));
        }
        self.push(
            elem,
            out,
            format!("slice({name}), slice={{{}}}", parts.join(", ")),
            exact,
            bound,
        );
        Some(())
    }

    fn concatenate(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let d = self.rng.below(dims.len());
        let mut other = dims.clone();
        other[d] = self.rng.range(1, self.cfg.max_dim as i64) as u64;
        let w = self.need(elem, &other);
        let vw = self.vals[w].clone();
        let mut out = dims.clone();
        out[d] += other[d];
        self.push(
            elem,
            out,
            format!("concatenate({name}, {}), dimensions={{{d}}}", vw.name),
            exact && vw.exact,
            bound.max(vw.bound),
        );
        Some(())
    }

    fn pad(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let c = self.constant(elem);
        let vc = self.vals[c].clone();
        let mut cfg = Vec::new();
        let mut out = Vec::new();
        for &d in &dims {
            let interior = if self.rng.chance(1, 4) { 1 } else { 0 };
            let base = d + (d - 1) * interior;
            let lo = self.rng.range(-1, 2);
            let hi = self.rng.range(-1, 2);
            let (lo, hi) = if base as i64 + lo + hi < 1 { (0, 0) } else { (lo, hi) };
            cfg.push(format!("{lo}_{hi}_{interior}"));
            out.push((base as i64 + lo + hi) as u64);
        }
        self.push(
            elem,
            out,
            format!("pad({name}, {}), padding={}", vc.name, cfg.join("x")),
            exact && vc.exact,
            bound.max(vc.bound),
        );
        Some(())
    }

    fn reverse_or_clamp(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        if !dims.is_empty() && self.rng.chance(1, 2) {
            let mut ds: Vec<u64> =
                (0..dims.len() as u64).filter(|_| self.rng.chance(1, 2)).collect();
            if ds.is_empty() {
                ds.push(0);
            }
            self.push(
                elem,
                dims,
                format!("reverse({name}), dimensions={{{}}}", list(&ds)),
                exact,
                bound,
            );
            return Some(());
        }
        let lo = self.constant(elem);
        let hi = self.constant(elem);
        let (l, h) = (self.vals[lo].clone(), self.vals[hi].clone());
        self.push(
            elem,
            dims,
            format!("clamp({}, {name}, {})", l.name, h.name),
            exact && l.exact && h.exact,
            bound.max(l.bound).max(h.bound),
        );
        Some(())
    }

    fn dot(&mut self) -> Option<()> {
        let a = self.pick(|v| !v.dims.is_empty() && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[a].clone();
        let r = dims.len();
        let c = self.rng.below(r);
        let batch = if r >= 2 && self.rng.chance(1, 3) {
            let b = (c + 1 + self.rng.below(r - 1)) % r;
            Some(b)
        } else {
            None
        };
        let free: Vec<usize> = (0..r).filter(|&i| i != c && Some(i) != batch).collect();
        // rhs: [batch?, contracting, free?] in a random order.
        let mut rhs_parts: Vec<(char, u64)> = Vec::new();
        if let Some(b) = batch {
            rhs_parts.push(('b', dims[b]));
        }
        rhs_parts.push(('c', dims[c]));
        if self.rng.chance(2, 3) {
            rhs_parts.push(('f', self.rng.range(1, self.cfg.max_dim as i64) as u64));
        }
        let order = self.rng.permutation(rhs_parts.len());
        let rhs_parts: Vec<(char, u64)> = order.iter().map(|&i| rhs_parts[i]).collect();
        let rhs_dims: Vec<u64> = rhs_parts.iter().map(|p| p.1).collect();
        let pos = |k: char| rhs_parts.iter().position(|p| p.0 == k);
        let b = self.need(elem, &rhs_dims);
        let vb = self.vals[b].clone();
        let mut out = Vec::new();
        let mut attrs = String::new();
        if let (Some(lb), Some(rb)) = (batch, pos('b')) {
            out.push(dims[lb]);
            write!(attrs, ", lhs_batch_dims={{{lb}}}, rhs_batch_dims={{{rb}}}").ok();
        }
        out.extend(free.iter().map(|&i| dims[i]));
        if let Some(f) = pos('f') {
            out.push(rhs_dims[f]);
        }
        write!(attrs, ", lhs_contracting_dims={{{c}}}, rhs_contracting_dims={{{}}}", pos('c')?)
            .ok();
        let nb = bound * vb.bound * dims[c] as f64;
        self.push(elem, out, format!("dot({name}, {}){attrs}", vb.name), exact && vb.exact, nb);
        Some(())
    }

    /// The reducer of `elem` (`op`) and its identity.
    fn reducer(&mut self, elem: Elem, maxmin_only: bool) -> (String, &'static str, String) {
        let ops: &[&str] = if elem == Elem::Pred {
            &["and", "or"]
        } else if maxmin_only {
            &["maximum", "minimum", "add"]
        } else {
            &["add", "maximum", "minimum", "multiply"]
        };
        let op = *self.rng.pick(ops);
        let init = identity(op, elem);
        let comp = self.binary_comp(op, elem);
        (comp, op, init)
    }

    fn reduce(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let mut rd: Vec<usize> = (0..dims.len()).filter(|_| self.rng.chance(1, 2)).collect();
        if rd.is_empty() {
            rd.push(self.rng.below(dims.len()));
        }
        let (comp, op, init) = self.reducer(elem, false);
        let ini = self.push(elem, vec![], format!("constant({init})"), true, 1.0);
        let n: u64 = rd.iter().map(|&d| dims[d]).product();
        let out: Vec<u64> = (0..dims.len()).filter(|d| !rd.contains(d)).map(|d| dims[d]).collect();
        let nb = match op {
            "add" => bound * n as f64,
            "multiply" => bound.max(1.0).powi(n as i32),
            _ => bound,
        };
        let rdl: Vec<u64> = rd.iter().map(|&d| d as u64).collect();
        let iname = self.vals[ini].name.clone();
        self.push(
            elem,
            out,
            format!("reduce({name}, {iname}), dimensions={{{}}}, to_apply={comp}", list(&rdl)),
            exact,
            nb,
        );
        Some(())
    }

    /// A window over `dims`: (text, output dims, window element count).
    fn window(&mut self, dims: &[u64], dilations: bool) -> (String, Vec<u64>, u64) {
        let (mut size, mut stride, mut pad, mut lhs, mut rhs, mut out) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        let mut elems = 1;
        for &d in dims {
            let ld = if dilations && self.rng.chance(1, 6) { 2 } else { 1 };
            let rd = if dilations && self.rng.chance(1, 6) { 2 } else { 1 };
            let (plo, phi) = (self.rng.range(0, 1) as u64, self.rng.range(0, 1) as u64);
            let padded = (d - 1) * ld + 1 + plo + phi;
            let maxw = ((padded - 1) / rd + 1).min(3);
            let w = 1 + self.rng.below(maxw as usize) as u64;
            let s = 1 + self.rng.below(2) as u64;
            let span = (w - 1) * rd + 1;
            out.push((padded - span) / s + 1);
            size.push(w.to_string());
            stride.push(s.to_string());
            pad.push(format!("{plo}_{phi}"));
            lhs.push(ld.to_string());
            rhs.push(rd.to_string());
            elems *= w;
        }
        let mut t =
            format!("size={} stride={} pad={}", size.join("x"), stride.join("x"), pad.join("x"));
        if lhs.iter().any(|x| x != "1") {
            write!(t, " lhs_dilate={}", lhs.join("x")).ok();
        }
        if rhs.iter().any(|x| x != "1") {
            write!(t, " rhs_dilate={}", rhs.join("x")).ok();
        }
        (t, out, elems)
    }

    fn reduce_window(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty() && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let (window, out, elems) = self.window(&dims, true);
        let (comp, op, init) = self.reducer(elem, true);
        let ini = self.push(elem, vec![], format!("constant({init})"), true, 1.0);
        let iname = self.vals[ini].name.clone();
        let nb = if op == "add" { bound * elems as f64 } else { bound };
        self.push(
            elem,
            out,
            format!("reduce-window({name}, {iname}), window={{{window}}}, to_apply={comp}"),
            exact,
            nb,
        );
        Some(())
    }

    fn select_and_scatter(&mut self) -> Option<()> {
        let v = self
            .pick(|v| !v.dims.is_empty() && v.dims.len() <= 2 && v.exact && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, .. } = self.vals[v].clone();
        let (window, out, elems) = self.window(&dims, false);
        let src = self.need(elem, &out);
        let vs = self.vals[src].clone();
        let ini = self.push(elem, vec![], "constant(0)".into(), true, 0.0);
        let iname = self.vals[ini].name.clone();
        let t = shape(elem, &[]);
        let dir = *self.rng.pick(&["GE", "GT", "LE"]);
        let sel = self.fresh("select");
        self.helpers.push(format!(
            "{sel} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  ROOT r = pred[] compare(a, b), direction={dir}\n}}\n"
        ));
        let add = self.binary_comp("add", elem);
        self.push(
            elem,
            dims,
            format!(
                "select-and-scatter({name}, {}, {iname}), window={{{window}}}, select={sel}, scatter={add}",
                vs.name
            ),
            vs.exact,
            vs.bound * elems as f64,
        );
        Some(())
    }

    /// A scalar s32 index: a constant around the dim's range (out of bounds too), or an
    /// exact integer value of the program.
    fn index(&mut self, d: u64) -> String {
        if self.rng.chance(1, 3)
            && let Some(v) = self.pick(|v| v.dims.is_empty() && v.elem == Elem::S32 && v.exact)
        {
            return self.vals[v].name.clone();
        }
        let i = self.rng.range(-1, d as i64 + 1);
        let c =
            self.push(Elem::S32, vec![], format!("constant({i})"), true, i.unsigned_abs() as f64);
        self.vals[c].name.clone()
    }

    fn dynamic_slice(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let sizes: Vec<u64> = dims.iter().map(|&d| 1 + self.rng.below(d as usize) as u64).collect();
        let idx: Vec<String> = dims.iter().map(|&d| self.index(d)).collect();
        if self.rng.chance(1, 2) {
            let u = self.need(elem, &sizes);
            let vu = self.vals[u].clone();
            self.push(
                elem,
                dims,
                format!("dynamic-update-slice({name}, {}, {})", vu.name, idx.join(", ")),
                exact && vu.exact,
                bound.max(vu.bound),
            );
        } else {
            self.push(
                elem,
                sizes.clone(),
                format!(
                    "dynamic-slice({name}, {}), dynamic_slice_sizes={{{}}}",
                    idx.join(", "),
                    list(&sizes)
                ),
                exact,
                bound,
            );
        }
        Some(())
    }

    /// Indices `s32[n, k]`: a value of the program or a new parameter (small integers,
    /// out of bounds sometimes).
    fn indices(&mut self, n: u64, k: u64) -> Option<String> {
        let i = self.need(Elem::S32, &[n, k]);
        self.vals[i].exact.then(|| self.vals[i].name.clone())
    }

    fn gather(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let r = dims.len();
        let k = if r >= 2 && self.rng.chance(1, 3) { 2 } else { 1 };
        let mapped: Vec<usize> = self.rng.permutation(r)[..k].to_vec();
        let n = self.rng.range(1, 4) as u64;
        let idx = self.indices(n, k as u64)?;
        let mut collapsed = Vec::new();
        let mut sizes = Vec::new();
        let mut out = vec![n];
        for (d, &dd) in dims.iter().enumerate() {
            if mapped.contains(&d) && self.rng.chance(2, 3) {
                collapsed.push(d as u64);
                sizes.push(1);
            } else {
                let s = 1 + self.rng.below(dd as usize) as u64;
                sizes.push(s);
                out.push(s);
            }
        }
        let offset: Vec<u64> = (1..out.len() as u64).collect();
        let map: Vec<u64> = mapped.iter().map(|&d| d as u64).collect();
        self.push(
            elem,
            out,
            format!(
                "gather({name}, {idx}), offset_dims={{{}}}, collapsed_slice_dims={{{}}}, start_index_map={{{}}}, index_vector_dim=1, slice_sizes={{{}}}",
                list(&offset),
                list(&collapsed),
                list(&map),
                list(&sizes)
            ),
            exact,
            bound,
        );
        Some(())
    }

    fn scatter(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty() && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let r = dims.len();
        let kdim = self.rng.below(r);
        let n = self.rng.range(1, 3) as u64;
        let idx = self.indices(n, 1)?;
        let inserted = self.rng.chance(1, 2);
        let mut window = Vec::new();
        for (d, &dd) in dims.iter().enumerate() {
            if d == kdim && inserted {
                continue;
            }
            window.push(1 + self.rng.below(dd as usize) as u64);
        }
        let mut upd_dims = vec![n];
        upd_dims.extend(&window);
        let u = self.need(elem, &upd_dims);
        let vu = self.vals[u].clone();
        let uw: Vec<u64> = (1..upd_dims.len() as u64).collect();
        let ins = if inserted { kdim.to_string() } else { String::new() };
        // Overwriting is order-dependent when two updates meet: only with one index.
        let (op, nb) = if n == 1 && self.rng.chance(1, 3) {
            ("assign", bound.max(vu.bound))
        } else if self.rng.chance(2, 3) {
            ("add", bound + n as f64 * vu.bound)
        } else {
            ("maximum", bound.max(vu.bound))
        };
        let comp = if op == "assign" {
            let name = self.fresh("assign");
            let t = shape(elem, &[]);
            self.helpers.push(format!(
                "{name} {{\n  a = {t} parameter(0)\n  ROOT b = {t} parameter(1)\n}}\n"
            ));
            name
        } else {
            self.binary_comp(op, elem)
        };
        self.push(
            elem,
            dims,
            format!(
                "scatter({name}, {idx}, {}), update_window_dims={{{}}}, inserted_window_dims={{{ins}}}, scatter_dims_to_operand_dims={{{kdim}}}, index_vector_dim=1, to_apply={comp}",
                vu.name,
                list(&uw)
            ),
            exact && vu.exact,
            nb,
        );
        Some(())
    }

    fn sort(&mut self) -> Option<()> {
        // With edge values a float key may be NaN, whose sign (which a total order sorts
        // by) XLA does not define.
        let edge = self.cfg.edge_values;
        let v = self.pick(|v| {
            !v.dims.is_empty() && v.exact && v.elem != Elem::Pred && !(edge && v.elem.is_float())
        })?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        let d = self.rng.below(dims.len());
        let t = shape(elem, &[]);
        let dir = *self.rng.pick(&["LT", "GT"]);
        let ty = if elem.is_float() { ", type=TOTALORDER" } else { "" };
        let cmp = self.fresh("compare");
        let with_values = self.rng.chance(1, 2);
        let extra =
            if with_values { "\n  c = s32[] parameter(2)\n  d = s32[] parameter(3)" } else { "" };
        self.helpers.push(format!(
            "{cmp} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1){extra}\n  ROOT r = pred[] compare(a, b), direction={dir}{ty}\n}}\n"
        ));
        if !with_values {
            self.push(
                elem,
                dims,
                format!("sort({name}), dimensions={{{d}}}, is_stable=true, to_apply={cmp}"),
                true,
                bound,
            );
            return Some(());
        }
        let io = self.push(
            Elem::S32,
            dims.clone(),
            format!("iota(), iota_dimension={d}"),
            true,
            dims[d] as f64,
        );
        let iname = self.vals[io].name.clone();
        let ty = format!("({}, {})", shape(elem, &dims), shape(Elem::S32, &dims));
        let s = self.push_tuple(
            ty,
            format!("sort({name}, {iname}), dimensions={{{d}}}, is_stable=true, to_apply={cmp}"),
        );
        let k = self.rng.below(2);
        let (e, b) = if k == 0 { (elem, bound) } else { (Elem::S32, dims[d] as f64) };
        self.push(e, dims, format!("get-tuple-element({s}), index={k}"), true, b);
        Some(())
    }

    fn argmax(&mut self) -> Option<()> {
        let v = self.pick(|v| !v.dims.is_empty() && v.exact && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        let d = self.rng.below(dims.len());
        let t = shape(elem, &[]);
        let comp = self.fresh("argmax");
        let dir = *self.rng.pick(&["GT", "LT"]);
        self.helpers.push(format!(
            "{comp} {{\n  a = {t} parameter(0)\n  ai = s32[] parameter(1)\n  b = {t} parameter(2)\n  bi = s32[] parameter(3)\n  \
             better = pred[] compare(a, b), direction={dir}\n  same = pred[] compare(a, b), direction=EQ\n  \
             first = pred[] compare(ai, bi), direction=LT\n  tie = pred[] and(same, first)\n  keep = pred[] or(better, tie)\n  \
             v = {t} select(keep, a, b)\n  i = s32[] select(keep, ai, bi)\n  ROOT r = ({t}, s32[]) tuple(v, i)\n}}\n"
        ));
        let io = self.push(
            Elem::S32,
            dims.clone(),
            format!("iota(), iota_dimension={d}"),
            true,
            dims[d] as f64,
        );
        let init = if dir == "GT" { lowest(elem) } else { highest(elem) };
        let c0 = self.push(elem, vec![], format!("constant({init})"), true, bound);
        let c1 = self.push(Elem::S32, vec![], "constant(0)".into(), true, 0.0);
        let out: Vec<u64> = (0..dims.len()).filter(|&i| i != d).map(|i| dims[i]).collect();
        let names: Vec<String> = [io, c0, c1].iter().map(|&i| self.vals[i].name.clone()).collect();
        let ty = format!("({}, {})", shape(elem, &out), shape(Elem::S32, &out));
        let r = self.push_tuple(
            ty,
            format!(
                "reduce({name}, {}, {}, {}), dimensions={{{d}}}, to_apply={comp}",
                names[0], names[1], names[2]
            ),
        );
        let k = self.rng.below(2);
        let (e, b) = if k == 0 { (elem, bound) } else { (Elem::S32, dims[d] as f64) };
        self.push(e, out, format!("get-tuple-element({r}), index={k}"), true, b);
        Some(())
    }

    fn while_loop(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let trips = self.rng.range(0, 3);
        let t = shape(elem, &dims);
        // Sometimes a second slot of the same element count, swapped with the first
        // through reshapes every iteration.
        let swap = dims.len() >= 2 && dims[0] != dims[dims.len() - 1] && self.rng.chance(1, 2);
        let mut other = dims.clone();
        other.reverse();
        let t2 = shape(elem, &other);
        let (body, cond) = (self.fresh("body"), self.fresh("cond"));
        let state = if swap { format!("(s32[], {t}, {t2})") } else { format!("(s32[], {t})") };
        let step = self.binary_comp(if elem.is_float() { "add" } else { "xor" }, elem);
        let mut b = format!(
            "{body} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  one = s32[] constant(1)\n  \
             next = s32[] add(i, one)\n  x = {t} get-tuple-element(s), index=1\n  c = {} constant(1)\n  cb = {t} broadcast(c), dimensions={{}}\n  \
             y = {t} map(x, cb), dimensions={{{}}}, to_apply={step}\n",
            shape(elem, &[]),
            list(&(0..dims.len() as u64).collect::<Vec<_>>())
        );
        if swap {
            b.push_str(&format!(
                "  z = {t2} get-tuple-element(s), index=2\n  zr = {t} reshape(z)\n  yr = {t2} reshape(y)\n  ROOT r = {state} tuple(next, zr, yr)\n}}\n"
            ));
        } else {
            b.push_str(&format!("  ROOT r = {state} tuple(next, y)\n}}\n"));
        }
        self.helpers.push(b);
        self.helpers.push(format!(
            "{cond} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant({trips})\n  \
             ROOT lt = pred[] compare(i, n), direction=LT\n}}\n"
        ));
        let zero = self.push(Elem::S32, vec![], "constant(0)".into(), true, 0.0);
        let zn = self.vals[zero].name.clone();
        let (init, ex2, b2) = if swap {
            let w = self.need(elem, &other);
            let vw = self.vals[w].clone();
            (format!("tuple({zn}, {name}, {})", vw.name), vw.exact, vw.bound)
        } else {
            (format!("tuple({zn}, {name})"), true, 0.0)
        };
        let ti = self.push_tuple(state.clone(), init);
        let w = self.push_tuple(state, format!("while({ti}), condition={cond}, body={body}"));
        let k = if swap { 1 + self.rng.below(2) } else { 1 };
        let out = if k == 2 { other } else { dims };
        let nb = bound.max(b2) + trips as f64 + 1.0;
        self.push(elem, out, format!("get-tuple-element({w}), index={k}"), exact && ex2, nb);
        Some(())
    }

    fn conditional(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let t = shape(elem, &dims);
        let branches = 1 + self.rng.below(3);
        let ops = ["negate", "abs", "copy"];
        let mut names = Vec::new();
        for k in 0..branches {
            let op = if elem.is_signed() || elem.is_float() { ops[k % 3] } else { "copy" };
            let b = self.fresh("branch");
            self.helpers
                .push(format!("{b} {{\n  x = {t} parameter(0)\n  ROOT y = {t} {op}(x)\n}}\n"));
            names.push(b);
        }
        let sel = self.index(branches as u64);
        let args = vec![name.clone(); branches];
        self.push(
            elem,
            dims,
            format!(
                "conditional({sel}, {}), branch_computations={{{}}}",
                args.join(", "),
                names.join(", ")
            ),
            exact,
            bound + 1.0,
        );
        Some(())
    }

    fn map(&mut self) -> Option<()> {
        let a = self.pick(|v| v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[a].clone();
        let b = self.need(elem, &dims);
        let vb = self.vals[b].clone();
        let t = shape(elem, &[]);
        let comp = self.fresh("mapped");
        self.helpers.push(format!(
            "{comp} {{\n  a = {t} parameter(0)\n  b = {t} parameter(1)\n  m = {t} maximum(a, b)\n  ROOT r = {t} add(m, a)\n}}\n"
        ));
        let all: Vec<u64> = (0..dims.len() as u64).collect();
        self.push(
            elem,
            dims,
            format!("map({name}, {}), dimensions={{{}}}, to_apply={comp}", vb.name, list(&all)),
            exact && vb.exact,
            2.0 * bound.max(vb.bound),
        );
        Some(())
    }

    fn convolution(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() == 3 && v.elem != Elem::Pred)?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        // lhs [batch, spatial, feature] (b0f), rhs [spatial, in, out] (0io).
        let (batch, w, c) = (dims[0], dims[1], dims[2]);
        let groups = if c % 2 == 0 && self.rng.chance(1, 4) { 2 } else { 1 };
        let (window, out_sp, k) = self.window(&[w], true);
        let o = groups * self.rng.range(1, 3) as u64;
        let kdims = vec![k, c / groups, o];
        let r = self.need(elem, &kdims);
        let vr = self.vals[r].clone();
        let nb = bound * vr.bound * (k * c) as f64;
        let g = if groups > 1 { format!(", feature_group_count={groups}") } else { String::new() };
        self.push(
            elem,
            vec![batch, out_sp[0], o],
            format!(
                "convolution({name}, {}), window={{{window}}}, dim_labels=b0f_0io->b0f{g}",
                vr.name
            ),
            exact && vr.exact,
            nb,
        );
        Some(())
    }

    fn is_finite_or_reduce_precision(&mut self) -> Option<()> {
        let v = self.pick(|v| v.elem.is_float() && v.exact)?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        if self.rng.chance(1, 2) {
            self.push(Elem::Pred, dims, format!("is-finite({name})"), true, 1.0);
        } else {
            let (e, m) = *self.rng.pick(&[(5u32, 10u32), (8, 7), (4, 3), (5, 2), (8, 23)]);
            self.push(
                elem,
                dims,
                format!("reduce-precision({name}), exponent_bits={e}, mantissa_bits={m}"),
                true,
                2.0 * bound,
            );
        }
        Some(())
    }

    /// A scan as JAX writes `lax.scan`: a counted loop reading row `i` of `xs` with a
    /// dynamic-slice and writing row `i` of the result with a dynamic-update-slice.
    fn scan(&mut self) -> Option<()> {
        let v = self.pick(|v| v.dims.len() == 2 && v.elem.is_float())?;
        let Val { name, elem, dims, exact, bound, .. } = self.vals[v].clone();
        let (t, row) = (shape(elem, &dims), shape(elem, &[1, dims[1]]));
        let state = format!("(s32[], {t}, {t})");
        let (body, cond) = (self.fresh("scan_body"), self.fresh("scan_cond"));
        let op = *self.rng.pick(&["negate", "abs", "tanh", "floor"]);
        self.helpers.push(format!(
            "{body} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  xs = {t} get-tuple-element(s), index=1\n  \
             acc = {t} get-tuple-element(s), index=2\n  z = s32[] constant(0)\n  x = {row} dynamic-slice(xs, i, z), dynamic_slice_sizes={{1,{}}}\n  \
             y = {row} {op}(x)\n  acc2 = {t} dynamic-update-slice(acc, y, i, z)\n  one = s32[] constant(1)\n  next = s32[] add(i, one)\n  \
             ROOT r = {state} tuple(next, xs, acc2)\n}}\n",
            dims[1]
        ));
        self.helpers.push(format!(
            "{cond} {{\n  s = {state} parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n  n = s32[] constant({})\n  \
             ROOT lt = pred[] compare(i, n), direction=LT\n}}\n",
            dims[0]
        ));
        let zero = self.push(Elem::S32, vec![], "constant(0)".into(), true, 0.0);
        let c = self.constant(elem);
        let (zn, cn) = (self.vals[zero].name.clone(), self.vals[c].name.clone());
        let acc =
            self.push(elem, dims.clone(), format!("broadcast({cn}), dimensions={{}}"), true, 3.0);
        let an = self.vals[acc].name.clone();
        let ti = self.push_tuple(state.clone(), format!("tuple({zn}, {name}, {an})"));
        let w = self.push_tuple(state, format!("while({ti}), condition={cond}, body={body}"));
        let keeps = matches!(op, "negate" | "abs") || op == "floor" && exact;
        self.push(
            elem,
            dims,
            format!("get-tuple-element({w}), index=2"),
            exact && keeps,
            bound.max(3.0),
        );
        Some(())
    }

    fn topk(&mut self) -> Option<()> {
        if self.cfg.edge_values {
            return None; // NaN keys: see `sort`.
        }
        let v = self
            .pick(|v| !v.dims.is_empty() && v.dims.len() <= 2 && v.exact && v.elem == Elem::F32)?;
        let Val { name, elem, dims, bound, .. } = self.vals[v].clone();
        let last = dims.len() - 1;
        let k = 1 + self.rng.below(dims[last] as usize) as u64;
        let mut out = dims.clone();
        out[last] = k;
        let ty = format!("({}, {})", shape(elem, &out), shape(Elem::S32, &out));
        let t = self.push_tuple(ty, format!("topk({name}), k={k}, largest=true"));
        let i = self.rng.below(2);
        let (e, b) = if i == 0 { (elem, bound) } else { (Elem::S32, dims[last] as f64) };
        self.push(e, out, format!("get-tuple-element({t}), index={i}"), true, b);
        Some(())
    }

    fn conditional_on_pred(&mut self) -> Option<()> {
        let p = self.pick(|v| v.dims.is_empty() && v.elem == Elem::Pred)?;
        let x = self.pick(|v| v.elem.is_float() || v.elem.is_signed())?;
        let (pn, Val { name, elem, dims, exact, bound, .. }) =
            (self.vals[p].name.clone(), self.vals[x].clone());
        let y = self.need(elem, &dims);
        let vy = self.vals[y].clone();
        let t = shape(elem, &dims);
        let state = format!("({t}, {t})");
        let (tb, fb) = (self.fresh("on_true"), self.fresh("on_false"));
        self.helpers.push(format!(
            "{tb} {{\n  s = {state} parameter(0)\n  a = {t} get-tuple-element(s), index=0\n  b = {t} get-tuple-element(s), index=1\n  ROOT r = {t} subtract(a, b)\n}}\n"
        ));
        self.helpers.push(format!(
            "{fb} {{\n  s = {state} parameter(0)\n  a = {t} get-tuple-element(s), index=0\n  ROOT r = {t} negate(a)\n}}\n"
        ));
        let tup = self.push_tuple(state, format!("tuple({name}, {})", vy.name));
        self.push(
            elem,
            dims,
            format!(
                "conditional({pn}, {tup}, {tup}), true_computation={tb}, false_computation={fb}"
            ),
            exact && vy.exact,
            bound + vy.bound,
        );
        Some(())
    }

    fn finish(&mut self) -> Generated {
        // The root: the last value and up to two others.
        let last = self.vals.len() - 1;
        let mut outs = vec![last];
        for _ in 0..self.rng.below(3) {
            let o = self.rng.below(self.vals.len());
            if !outs.contains(&o) {
                outs.push(o);
            }
        }
        let names: Vec<String> = outs.iter().map(|&o| self.vals[o].name.clone()).collect();
        let types: Vec<String> =
            outs.iter().map(|&o| shape(self.vals[o].elem, &self.vals[o].dims)).collect();
        let exact_outputs: Vec<bool> = outs.iter().map(|&o| self.vals[o].exact).collect();
        let tolerances: Vec<f64> = outs.iter().map(|&o| self.vals[o].tol).collect();
        let magnitudes: Vec<f64> = outs.iter().map(|&o| self.vals[o].bound).collect();
        self.instrs.push(Instr {
            name: "out".into(),
            ty: format!("({})", types.join(", ")),
            body: format!("tuple({})", names.join(", ")),
            rank: None,
            dims: Vec::new(),
            root: true,
        });
        let text = self.render(None);
        let sharded = (self.cfg.devices > 1).then(|| {
            let shardings: Vec<Option<String>> =
                (0..self.instrs.len()).map(|i| self.random_sharding(i)).collect();
            self.render(Some(&shardings))
        });
        Generated {
            text,
            sharded,
            params: self.params.clone(),
            exact_outputs,
            tolerances,
            magnitudes,
            edge_values: self.cfg.edge_values,
        }
    }

    fn random_sharding(&mut self, i: usize) -> Option<String> {
        let rank = self.instrs[i].rank?;
        if !self.rng.chance(1, 3) {
            return None;
        }
        let n = self.cfg.devices;
        let ids: Vec<usize> =
            if self.rng.chance(1, 3) { self.rng.permutation(n) } else { (0..n).collect() };
        let ids: Vec<String> = ids.iter().map(usize::to_string).collect();
        if rank == 0 || self.rng.chance(1, 8) {
            return Some(if self.rng.chance(1, 4) {
                format!("{{maximal device={}}}", self.rng.below(n))
            } else {
                "{replicated}".into()
            });
        }
        let dims = &self.instrs[i].dims;
        let mut tiles = vec![1usize; rank];
        let mut rest = n;
        let mut replicate = 1;
        // Split n into factors of 2 (n a power of 2) or all on one dim.
        while rest > 1 {
            let f = if rest.is_multiple_of(2) { 2 } else { rest };
            if self.rng.chance(1, 5) {
                replicate *= f;
            } else {
                // Prefer dims that are large enough; tiling a small dim pads, which is legal.
                let d = self.rng.below(rank);
                let d = if dims[d] < 2 { self.rng.below(rank) } else { d };
                tiles[d] *= f;
            }
            rest /= f;
        }
        let mut t: Vec<String> = tiles.iter().map(usize::to_string).collect();
        if replicate > 1 {
            t.push(replicate.to_string());
            Some(format!("{{devices=[{}]{} last_tile_dim_replicate}}", t.join(","), ids.join(",")))
        } else {
            Some(format!("{{devices=[{}]{}}}", t.join(","), ids.join(",")))
        }
    }

    fn render(&self, shardings: Option<&[Option<String>]>) -> String {
        let mut s = String::from("HloModule fuzz");
        if shardings.is_some() {
            write!(s, ", num_partitions={}", self.cfg.devices).ok();
        }
        s.push_str("\n\n");
        for h in &self.helpers {
            s.push_str(h);
            s.push('\n');
        }
        s.push_str("ENTRY main {\n");
        for (i, ins) in self.instrs.iter().enumerate() {
            let root = if ins.root { "ROOT " } else { "" };
            write!(s, "  {root}{} = {} {}", ins.name, ins.ty, ins.body).ok();
            if let Some(Some(sh)) = shardings.map(|v| &v[i]) {
                write!(s, ", sharding={sh}").ok();
            }
            s.push('\n');
        }
        s.push_str("}\n");
        s
    }
}

/// The largest finite value of a float type.
fn max_finite(elem: Elem) -> f64 {
    match elem {
        Elem::F16 => 65504.0,
        Elem::BF16 => 3.389_531_389_251_535e38,
        Elem::F32 => f32::MAX as f64,
        _ => f64::MAX,
    }
}

/// The relative tolerance of an inexact value of `elem` (see `diff`'s module doc).
pub fn rtol(elem: Elem) -> f64 {
    match elem {
        Elem::F64 => 1e-9,
        Elem::F32 => 1e-4,
        Elem::F16 => 5e-3,
        Elem::BF16 => 4e-2,
        _ => 0.0,
    }
}

fn int_range(elem: Elem) -> (i128, i128) {
    if elem.is_signed() {
        let h = 1i128 << (elem.bits() - 1);
        (-h, h - 1)
    } else {
        (0, (1i128 << elem.bits()) - 1)
    }
}

/// A bound meaning "any value of the type": integers past it are not exact in a float.
fn exact_int_bound(elem: Elem) -> f64 {
    let (lo, hi) = int_range(elem);
    (lo.unsigned_abs().max(hi.unsigned_abs())) as f64
}

fn lowest(elem: Elem) -> String {
    if elem.is_float() { "-inf".into() } else { int_range(elem).0.to_string() }
}

fn highest(elem: Elem) -> String {
    if elem.is_float() { "inf".into() } else { int_range(elem).1.to_string() }
}

/// The identity of reducer `op` on `elem`, as a literal.
fn identity(op: &str, elem: Elem) -> String {
    match (op, elem) {
        ("and", _) => "true".into(),
        ("or", _) => "false".into(),
        ("add", Elem::Pred) => "false".into(),
        ("add", _) => "0".into(),
        ("multiply", _) => "1".into(),
        ("maximum", _) => lowest(elem),
        ("minimum", _) => highest(elem),
        _ => "0".into(),
    }
}

impl Generated {
    /// The inputs of seed `seed` (see [`small_input`]).
    pub fn inputs(&self, seed: u64) -> Vec<hlo_ir::Tensor> {
        self.params
            .iter()
            .map(|p| {
                let sub = p.name.starts_with(SUBNORMAL_PARAM);
                small_input(p.elem, &p.dims, param_seed(seed, &p.name), self.edge_values, sub)
            })
            .collect()
    }
}

/// The seed of the parameter named `name` in a run of seed `seed`: by name, so that
/// removing or adding a parameter (as the reducer does) leaves the others' values alone.
pub fn param_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl Elem {
    /// The generator's name of an element type, if it writes that type.
    pub fn of(e: hlo_ir::ElemType) -> Option<Elem> {
        use hlo_ir::ElemType as E;
        Some(match e {
            E::Pred => Elem::Pred,
            E::S8 => Elem::S8,
            E::S16 => Elem::S16,
            E::S32 => Elem::S32,
            E::S64 => Elem::S64,
            E::U8 => Elem::U8,
            E::U16 => Elem::U16,
            E::U32 => Elem::U32,
            E::F16 => Elem::F16,
            E::BF16 => Elem::BF16,
            E::F32 => Elem::F32,
            E::F64 => Elem::F64,
            _ => return None,
        })
    }
}

/// Inputs for any module's entry: the generator's small integers for the types it
/// writes, the interpreter's seeded values (`hloc run`'s) for any other parameter; each
/// seeded by its parameter's name ([`param_seed`]).
pub fn inputs_for(
    m: &hlo_ir::Module,
    seed: u64,
    edge: bool,
) -> Result<Vec<hlo_ir::Tensor>, String> {
    let entry = m.entry();
    let mut out = Vec::new();
    for (k, p) in entry.params().into_iter().enumerate() {
        let ins = entry.instr(p);
        let s = &ins.shape;
        let a = s.as_array().ok_or_else(|| format!("parameter {k} is not an array ({s})"))?;
        let dims =
            a.static_dims().ok_or_else(|| format!("parameter {k} has a dynamic shape ({s})"))?;
        if count(&dims) > 1 << 26 {
            return Err(format!("parameter {k} ({s}) is too large for generated inputs"));
        }
        let ps = param_seed(seed, &ins.name);
        match Elem::of(a.elem) {
            Some(e) => {
                out.push(small_input(e, &dims, ps, edge, ins.name.starts_with(SUBNORMAL_PARAM)))
            }
            None => out.extend(
                hlo_interp::seeded::seeded_inputs(std::slice::from_ref(s), ps)
                    .map_err(|e| e.to_string())?,
            ),
        }
    }
    Ok(out)
}

/// One input: small integers (floats too) so that exact values stay exact; with `edge`,
/// NaN, infinities, signed zeros and integer extremes mixed in, and with `subnormals`
/// (a parameter named [`SUBNORMAL_PARAM`]`.N`, with `edge`) one or two of the type's
/// smallest subnormal, either sign.
pub fn small_input(
    elem: Elem,
    d: &[u64],
    seed: u64,
    edge: bool,
    subnormals: bool,
) -> hlo_ir::Tensor {
    use half::{bf16, f16};
    use hlo_ir::Tensor;
    let mut rng = Rng::seeded(seed);
    {
        let n = count(d) as usize;
        let smallest = match elem {
            Elem::F64 => f64::from_bits(1),
            Elem::BF16 => bf16::from_bits(1).to_f64(),
            Elem::F16 => f16::from_bits(1).to_f64(),
            _ => f32::from_bits(1) as f64,
        };
        let fl = |rng: &mut Rng| -> f64 {
            if edge && subnormals && rng.chance(1, 3) {
                smallest * *rng.pick(&[1.0, 2.0, -1.0, -2.0])
            } else if edge && rng.chance(1, 6) {
                *rng.pick(&[f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -0.0, 0.5])
            } else {
                rng.range(-3, 3) as f64
            }
        };
        let int = |rng: &mut Rng| -> i128 {
            let (lo, hi) = int_range(elem);
            if edge && rng.chance(1, 6) {
                *rng.pick(&[lo, hi, (-1i128).max(lo), 0])
            } else if elem.is_signed() {
                rng.range(-4, 7) as i128
            } else {
                rng.range(0, 7) as i128
            }
        };
        let t = match elem {
            Elem::Pred => {
                Tensor::from_pred(d, &(0..n).map(|_| rng.chance(1, 2)).collect::<Vec<_>>())
            }
            Elem::F32 => {
                Tensor::from_f32(d, &(0..n).map(|_| fl(&mut rng) as f32).collect::<Vec<_>>())
            }
            Elem::F64 => Tensor::from_f64(d, &(0..n).map(|_| fl(&mut rng)).collect::<Vec<_>>()),
            Elem::BF16 => Tensor::from_bf16(
                d,
                &(0..n).map(|_| bf16::from_f64(fl(&mut rng))).collect::<Vec<_>>(),
            ),
            Elem::F16 => Tensor::from_f16(
                d,
                &(0..n).map(|_| f16::from_f64(fl(&mut rng))).collect::<Vec<_>>(),
            ),
            Elem::S8 => {
                Tensor::from_i8(d, &(0..n).map(|_| int(&mut rng) as i8).collect::<Vec<_>>())
            }
            Elem::S16 => {
                Tensor::from_i16(d, &(0..n).map(|_| int(&mut rng) as i16).collect::<Vec<_>>())
            }
            Elem::S32 => {
                Tensor::from_i32(d, &(0..n).map(|_| int(&mut rng) as i32).collect::<Vec<_>>())
            }
            Elem::S64 => {
                Tensor::from_i64(d, &(0..n).map(|_| int(&mut rng) as i64).collect::<Vec<_>>())
            }
            Elem::U8 => {
                Tensor::from_u8(d, &(0..n).map(|_| int(&mut rng) as u8).collect::<Vec<_>>())
            }
            Elem::U16 => {
                Tensor::from_u16(d, &(0..n).map(|_| int(&mut rng) as u16).collect::<Vec<_>>())
            }
            Elem::U32 => {
                Tensor::from_u32(d, &(0..n).map(|_| int(&mut rng) as u32).collect::<Vec<_>>())
            }
        };
        t.expect("dims and values agree")
    }
}
