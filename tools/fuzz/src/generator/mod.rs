//! The generator of random well-typed HLO modules: its machinery here (values, parameters,
//! constants, the step loop, shardings, the module's text, inputs), the op builders in
//! [`ops`].
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

mod ops;

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
