//! `rng-bit-generator`, `rng-get-and-update-state` and `rng`, evaluated natively with the
//! definitions XLA's CPU backend compiles (its `RngBitGeneratorExpander`, `RngExpander`
//! and the bit generators of `xla/hlo/builder/lib/prng.cc`). The compiler's
//! `rng-bit-generator-expander` and `rng-expander` passes write the same steps as HLO for
//! the JIT and the TPU model; they share the shape helpers below, and tests check the
//! passes against this file and this file against XLA.
//!
//! **`rng-bit-generator`** is a pure function of its state operand and matches XLA bit for
//! bit. `rng_default` is Philox, as on XLA's CPU backend.
//! - Threefry-2x32 (20 rounds), state `u64[2]` = (key, counter). 32-bit (and narrower)
//!   outputs split the shape in two halves along the first even dimension (else the
//!   first largest), run one counter per element of the half, `counter + i` for its
//!   row-major index `i`, and interleave the two output words along that dimension;
//!   64-bit outputs run one counter per element and join the words (low, high). The new
//!   state is (key, counter + counters used).
//! - Philox-4x32 (10 rounds), state `u64[3]` = (key, 128-bit counter low, high), or
//!   `u64[2]` = (key, counter) whose counter reads as (low = state[1], high = state[0]).
//!   Key and counter are used as given (no scrambling). Each counter gives four 32-bit
//!   words, laid out round robin; 64-bit outputs take two words per element (low, high).
//!   The new state is (key, counter + counters used) (with a `u64[2]` state only the low
//!   word is kept).
//! - Outputs narrower than 32 bits keep the low bits of 32-bit words; every output type
//!   receives the bits of its width (signed and floating-point types by reinterpretation).
//!
//! **`rng-get-and-update-state`** (XLA CPU's runtime): each instruction owns a 128-bit
//! counter that starts at `0x7012395` (XLA's `kRngStateInitialValue`); an execution
//! returns it as `u64[2]` (low, high) and then adds `delta`. Counters live as long as the
//! evaluator: an [`super::Interpreter`] (and a compiled JIT program) keeps them across runs,
//! so repeated executions of one compiled module continue the stream, as repeated
//! executions of one XLA executable do. An interpreter keys the counters by instruction
//! name, so one computation `call`ed from several sites shares one counter here, while
//! after `inline-calls` every inlined copy has its own (as XLA, which inlines first).
//!
//! **`rng`** is XLA's `RngExpander`: Philox bits from (key, `rng-get-and-update-state`
//! with delta = elements x 32-bit words per element), then
//! - uniform floats: `(bits >> (w - mantissa)) as float * 2^-mantissa * (b - a) + a`
//!   (f16/bf16: computed in f32 on f32-converted bounds, then converted);
//! - uniform integers (s32/u32/s64/u64): `range = b - a` unsigned, `d = bits % range`,
//!   `a + (d >> 1) + (d - (d >> 1))`;
//! - normal (f32/f64; f16/bf16 through f32): uniform [0, 1) on the halves-split shape,
//!   Box-Muller `sqrt(-2 log(max(u0, 1e-7))) * (sin, cos)(2 pi u1)`, interleaved back,
//!   then `a + b * z`.
//!
//! XLA draws the key from a process-wide generator when it compiles the module, so the
//! same module gives other numbers each time one process compiles it (a fresh process
//! repeats its first compile). Here the key is a fixed function of the instruction's name
//! ([`rng_key`]), so every engine gives the same numbers for the same module; they are
//! not XLA's, and tests check `rng` on XLA by distribution (range, moments) and its
//! conversion steps bit for bit through `rng-bit-generator`.

use std::collections::HashMap;
use std::sync::Mutex;

use hlo_ir::op::{RngAlgorithm, RngDistribution};
use hlo_ir::{ElemType, Opcode};

use super::elementwise::{binary, bitcast_convert, convert, unary};
use super::value::{Array, Data, Failure};

type R<T> = Result<T, Failure>;

/// XLA CPU's initial value of every `rng-get-and-update-state` counter.
pub const INITIAL_STATE: u128 = 0x7012395;

pub const PHILOX_W32A: u32 = 0x9E37_79B9;
pub const PHILOX_W32B: u32 = 0xBB67_AE85;
pub const PHILOX_M4X32A: u32 = 0xD251_1F53;
pub const PHILOX_M4X32B: u32 = 0xCD9E_8D57;
pub const THREEFRY_ROTATIONS: [u32; 8] = [13, 15, 26, 6, 17, 29, 16, 24];
pub const THREEFRY_PARITY: u32 = 0x1BD1_1BDA;

/// Philox-4x32 with 10 rounds on one counter.
pub fn philox4x32(mut x: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let mut k = key;
    for _ in 0..10 {
        let p0 = u64::from(x[0]) * u64::from(PHILOX_M4X32A);
        let p1 = u64::from(x[2]) * u64::from(PHILOX_M4X32B);
        x = [
            (p1 >> 32) as u32 ^ x[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ x[3] ^ k[1],
            p0 as u32,
        ];
        k = [k[0].wrapping_add(PHILOX_W32A), k[1].wrapping_add(PHILOX_W32B)];
    }
    x
}

/// Threefry-2x32 with 20 rounds on one counter.
pub fn threefry2x32(x: [u32; 2], key: [u32; 2]) -> [u32; 2] {
    let ks = [key[0], key[1], THREEFRY_PARITY ^ key[0] ^ key[1]];
    let mut v = [x[0].wrapping_add(ks[0]), x[1].wrapping_add(ks[1])];
    for block in 0..5usize {
        for r in 0..4 {
            let rot = THREEFRY_ROTATIONS[(block % 2) * 4 + r];
            v[0] = v[0].wrapping_add(v[1]);
            v[1] = v[1].rotate_left(rot) ^ v[0];
        }
        v[0] = v[0].wrapping_add(ks[(block + 1) % 3]);
        v[1] = v[1].wrapping_add(ks[(block + 2) % 3]).wrapping_add(block as u32 + 1);
    }
    v
}

/// How Threefry (32-bit outputs) and the normal distribution split a shape in two halves:
/// along `split` (the first even dimension, else the first largest), each half has
/// `half` dims (`ceil(d/2)` there), laid side by side along a new dimension after it
/// (`concat`: `.., ceil(d/2), 2, ..`). A scalar splits into `[1]` and `[2]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halves {
    /// The half's dims without the new unit dimension.
    pub half: Vec<usize>,
    /// The half's dims with the unit dimension after `split` (XLA's half shape).
    pub half_unit: Vec<usize>,
    /// Both halves side by side.
    pub concat: Vec<usize>,
    pub split: usize,
    /// The new dimension of `concat` (after `split`; 0 for a scalar).
    pub concat_dim: usize,
}

impl Halves {
    pub fn of(dims: &[usize]) -> Halves {
        if dims.is_empty() {
            return Halves {
                half: vec![1],
                half_unit: vec![1],
                concat: vec![2],
                split: 0,
                concat_dim: 0,
            };
        }
        let split = dims.iter().position(|d| d % 2 == 0).unwrap_or_else(|| {
            let max = dims.iter().copied().max().unwrap_or(0);
            dims.iter().position(|&d| d == max).unwrap_or(0)
        });
        let mut half = dims.to_vec();
        half[split] = dims[split].div_ceil(2);
        let mut half_unit = half.clone();
        half_unit.insert(split + 1, 1);
        let mut concat = half.clone();
        concat.insert(split + 1, 2);
        Halves { half, half_unit, concat, split, concat_dim: split + 1 }
    }
    /// For each element of `dims` (row-major): (which half, row-major index in the half).
    pub fn gather_map(&self, dims: &[usize]) -> Vec<(usize, usize)> {
        let n: usize = dims.iter().product();
        if dims.is_empty() {
            return vec![(0, 0)];
        }
        let mut out = Vec::with_capacity(n);
        super::value::for_each_index(dims, |idx, _| {
            let mut h = 0usize;
            for (d, (&i, &size)) in idx.iter().zip(&self.half).enumerate() {
                let i = if d == self.split { i / 2 } else { i };
                h = h * size + i;
            }
            out.push((idx[self.split] % 2, h));
        });
        out
    }
}

fn unsigned_of_width(bits: usize) -> Option<ElemType> {
    Some(match bits {
        8 => ElemType::U8,
        16 => ElemType::U16,
        32 => ElemType::U32,
        64 => ElemType::U64,
        _ => return None,
    })
}

/// The bit width the generators produce for `elem` (8, 16, 32 or 64), or why not.
///
/// Only unsigned bits are produced. XLA turns a generator declared with signed or
/// floating-point bits into one of the unsigned type of that width (its builder's
/// `RngBitGenerator`) and re-types every use from there: XLA 0.10.2 returns `u32` arrays
/// for `s32`/`f32` bits, multiplies "f32" bits as integers, and refuses to compare them
/// with `s32` values. A value of the declared type would not be XLA's, so such a
/// generator is refused at the instruction (by the interpreter and by
/// `rng-bit-generator-expander`, hence on every engine).
pub fn generated_width(elem: ElemType) -> Result<usize, Failure> {
    let bits = elem.bits() as usize;
    let Some(unsigned) = unsigned_of_width(bits)
        .filter(|_| elem != ElemType::Pred && (elem.is_integer() || elem.is_float()))
    else {
        return Err(Failure::from(format!(
            "rng-bit-generator cannot produce {elem} values (8-, 16-, 32- and 64-bit unsigned integers)"
        )));
    };
    if elem != unsigned {
        return Err(Failure::from(format!(
            "rng-bit-generator bits declared {elem}: XLA generates {unsigned} bits whatever the text declares and types every use of them as {unsigned} \
             (it returns {unsigned} arrays, does {unsigned} arithmetic on them, refuses to mix them with {elem} values), so no engine gives this module XLA's meaning; \
             declare {unsigned} bits and bitcast-convert them to {elem}"
        )));
    }
    Ok(bits)
}

/// Philox bits: `n` words of `width` bits (64: two 32-bit words each; narrower: the low
/// bits of 32-bit words) from counters `(lo, hi) + 0, 1, ...`; returns the bits and the
/// counter after the last one used.
pub fn philox_bits(key: u64, lo: u64, hi: u64, n: usize, width: usize) -> (Vec<u64>, (u64, u64)) {
    let words = if width == 64 { 2 * n } else { n };
    let m = words.div_ceil(4);
    let k = [key as u32, (key >> 32) as u32];
    let add = |i: u64| {
        let l = lo.wrapping_add(i);
        (l, if l < lo { hi.wrapping_add(1) } else { hi })
    };
    let mut out = Vec::with_capacity(n);
    for i in 0..m {
        let (l, h) = add(i as u64);
        let y = philox4x32([l as u32, (l >> 32) as u32, h as u32, (h >> 32) as u32], k);
        if width == 64 {
            out.push(u64::from(y[0]) | u64::from(y[1]) << 32);
            out.push(u64::from(y[2]) | u64::from(y[3]) << 32);
        } else {
            out.extend(y.iter().map(|&w| u64::from(w) & mask(width)));
        }
    }
    out.truncate(n);
    (out, add(m as u64))
}

fn mask(width: usize) -> u64 {
    if width >= 64 { u64::MAX } else { (1u64 << width) - 1 }
}

/// Threefry bits for an array of `dims`; returns the bits and the new counter.
pub fn threefry_bits(key: u64, counter: u64, dims: &[usize], width: usize) -> (Vec<u64>, u64) {
    let k = [key as u32, (key >> 32) as u32];
    let run = |i: usize| {
        let c = counter.wrapping_add(i as u64);
        threefry2x32([c as u32, (c >> 32) as u32], k)
    };
    if width == 64 {
        let n: usize = dims.iter().product();
        let bits = (0..n).map(&run).map(|y| u64::from(y[0]) | u64::from(y[1]) << 32).collect();
        return (bits, counter.wrapping_add(n as u64));
    }
    let halves = Halves::of(dims);
    let h: usize = halves.half.iter().product();
    let ys: Vec<[u32; 2]> = (0..h).map(run).collect();
    let bits = halves
        .gather_map(dims)
        .into_iter()
        .map(|(w, i)| u64::from(ys[i][w]) & mask(width))
        .collect();
    (bits, counter.wrapping_add(h as u64))
}

/// `rng-bit-generator`: the new state and the bits (one u64 per element, `width` bits
/// each) for output dims `dims`.
pub fn bit_generator(
    alg: RngAlgorithm,
    state: &[u64],
    width: usize,
    dims: &[usize],
) -> Result<(Vec<u64>, Vec<u64>), Failure> {
    let n: usize = dims.iter().product();
    match alg {
        RngAlgorithm::ThreeFry => {
            let &[key, counter] = state else {
                return Err(Failure::from(format!(
                    "rng_three_fry takes a u64[2] state (key, counter), not u64[{}]",
                    state.len()
                )));
            };
            let (bits, c) = threefry_bits(key, counter, dims, width);
            Ok((vec![key, c], bits))
        }
        RngAlgorithm::Philox | RngAlgorithm::Default => match *state {
            [key, lo, hi] => {
                let (bits, (l, h)) = philox_bits(key, lo, hi, n, width);
                Ok((vec![key, l, h], bits))
            }
            [key, lo] => {
                let (bits, (l, _)) = philox_bits(key, lo, key, n, width);
                Ok((vec![key, l], bits))
            }
            _ => Err(Failure::from(format!(
                "rng_philox takes a u64[2] or u64[3] state (key, counter), not u64[{}]",
                state.len()
            ))),
        },
    }
}

fn u64s(a: &Array) -> Vec<u64> {
    a.data.as_int().iter().map(|&v| v as u64).collect()
}

fn int_array(elem: ElemType, dims: Vec<usize>, bits: impl IntoIterator<Item = u64>) -> Array {
    Array::new(
        elem,
        dims,
        Data::Int(bits.into_iter().map(|b| super::value::wrap(elem, b as i64)).collect()),
    )
}

/// `rng-bit-generator` on arrays: (new state, bits as `elem[dims]`).
pub fn bit_generator_array(
    alg: RngAlgorithm,
    state: &Array,
    elem: ElemType,
    dims: &[usize],
) -> R<(Array, Array)> {
    if state.elem != ElemType::U64 || state.dims.len() != 1 {
        return Err(
            format!("the state must be a u64 vector, not {}{:?}", state.elem, state.dims).into()
        );
    }
    let width = generated_width(elem)?;
    let (new_state, bits) = bit_generator(alg, &u64s(state), width, dims)?;
    let unsigned = unsigned_of_width(width).ok_or("no unsigned type of this width")?;
    let raw = int_array(unsigned, dims.to_vec(), bits);
    let out = if elem == unsigned { raw } else { bitcast_convert(&raw, elem, dims.to_vec())? };
    Ok((int_array(ElemType::U64, vec![new_state.len()], new_state), out))
}

/// The key `rng-expander` gives the `rng` instruction called `name` (SplitMix64's
/// finalizer of its FNV-1a hash).
pub fn rng_key(name: &str) -> u64 {
    let mut z = hlo_ir::hash::fnv1a(name.as_bytes()).wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The element type `rng` is computed in (f16/bf16 run in f32) and the delta of its
/// `rng-get-and-update-state` (32-bit words per draw), or why `rng` cannot produce `elem`.
pub fn rng_plan(
    dist: RngDistribution,
    elem: ElemType,
    dims: &[usize],
) -> Result<(ElemType, i64), Failure> {
    use ElemType::*;
    let compute = match (dist, elem) {
        (_, F16 | BF16 | F32) => F32,
        (_, F64) => F64,
        (RngDistribution::Uniform, S32 | U32 | S64 | U64) => elem,
        (RngDistribution::Uniform, _) => {
            return Err(Failure::from(format!(
                "rng_uniform of {elem} values (f16, bf16, f32, f64, s32, u32, s64, u64 only, as XLA)"
            )));
        }
        (RngDistribution::Normal, _) => {
            return Err(Failure::from(format!(
                "rng_normal of {elem} values (floating point only)"
            )));
        }
    };
    let n: usize = dims.iter().product();
    let words = n as i64 * (compute.bits() as i64 / 32);
    Ok((compute, words))
}

fn scalar_f(elem: ElemType, v: f64) -> Array {
    match elem {
        ElemType::F64 => Array::new(elem, Vec::new(), Data::F64(vec![v])),
        _ => Array::new(elem, Vec::new(), Data::F32(vec![v as f32])),
    }
}

fn spread(a: &Array, dims: &[usize]) -> R<Array> {
    super::data_movement::broadcast(a, dims.to_vec(), &[])
}

/// Uniform [a, b) floats of `elem` (f32/f64) from the bits (u32/u64 of the same width).
fn uniform_float(bits: &Array, a: &Array, b: &Array, elem: ElemType) -> R<Array> {
    let width = elem.bits() as usize;
    let mantissa = if elem == ElemType::F64 { 52 } else { 23 };
    let dims = bits.dims.clone();
    let shift = spread(&int_array(bits.elem, Vec::new(), [(width - mantissa) as u64]), &dims)?;
    let v = convert(&binary(Opcode::ShiftRightLogical, bits, &shift)?, elem)?;
    let v = binary(
        Opcode::Multiply,
        &v,
        &spread(&scalar_f(elem, (-(mantissa as f64)).exp2()), &dims)?,
    )?;
    let range = binary(Opcode::Subtract, b, a)?;
    let v = binary(Opcode::Multiply, &v, &spread(&range, &dims)?)?;
    binary(Opcode::Add, &v, &spread(a, &dims)?)
}

/// Uniform [a, b) integers of `elem` from bits of the same width.
fn uniform_int(bits: &Array, a: &Array, b: &Array, elem: ElemType) -> R<Array> {
    let unsigned = if elem.bits() == 64 { ElemType::U64 } else { ElemType::U32 };
    let dims = bits.dims.clone();
    let range = binary(
        Opcode::Subtract,
        &bitcast_convert(b, unsigned, Vec::new())?,
        &bitcast_convert(a, unsigned, Vec::new())?,
    )?;
    let dist = binary(Opcode::Remainder, bits, &spread(&range, &dims)?)?;
    let one = spread(&int_array(unsigned, Vec::new(), [1]), &dims)?;
    let half = binary(Opcode::ShiftRightLogical, &dist, &one)?;
    let rest = binary(Opcode::Subtract, &dist, &half)?;
    let sum =
        binary(Opcode::Add, &spread(a, &dims)?, &bitcast_convert(&half, elem, dims.clone())?)?;
    binary(Opcode::Add, &sum, &bitcast_convert(&rest, elem, dims)?)
}

/// `rng`: draws of `elem[dims]` from `key` and the state (low, high) that its
/// `rng-get-and-update-state` returned.
pub fn rng(
    dist: RngDistribution,
    key: u64,
    state: [u64; 2],
    a: &Array,
    b: &Array,
    elem: ElemType,
    dims: &[usize],
) -> R<Array> {
    let (compute, _) = rng_plan(dist, elem, dims)?;
    if a.elem != elem || b.elem != elem || !a.dims.is_empty() || !b.dims.is_empty() {
        return Err(format!("rng bounds must be {elem}[] scalars").into());
    }
    let (a, b) = if compute != elem {
        (convert(a, compute)?, convert(b, compute)?)
    } else {
        (a.clone(), b.clone())
    };
    let width = compute.bits() as usize;
    let unsigned = if width == 64 { ElemType::U64 } else { ElemType::U32 };
    let bits_for = |d: &[usize]| {
        let n = d.iter().product();
        let (bits, _) = philox_bits(key, state[0], state[1], n, width);
        int_array(unsigned, d.to_vec(), bits)
    };
    let out = match dist {
        RngDistribution::Uniform if compute.is_float() => {
            uniform_float(&bits_for(dims), &a, &b, compute)?
        }
        RngDistribution::Uniform => uniform_int(&bits_for(dims), &a, &b, compute)?,
        RngDistribution::Normal => {
            let halves = Halves::of(dims);
            let u = uniform_float(
                &bits_for(&halves.concat),
                &scalar_f(compute, 0.0),
                &scalar_f(compute, 1.0),
                compute,
            )?;
            // The two halves: index 0 and 1 along the new dimension.
            let (mut x0, mut x1) = (Vec::new(), Vec::new());
            let flat = match &u.data {
                Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect::<Vec<_>>(),
                Data::F64(v) => v.clone(),
                _ => return Err("internal error: uniform draws are not floats".into()),
            };
            super::value::for_each_index(&halves.concat, |idx, i| {
                if idx[halves.concat_dim] == 0 { x0.push(flat[i]) } else { x1.push(flat[i]) }
            });
            let half = |v: Vec<f64>| match compute {
                ElemType::F64 => Array::new(compute, vec![v.len()], Data::F64(v)),
                _ => Array::new(
                    compute,
                    vec![v.len()],
                    Data::F32(v.into_iter().map(|x| x as f32).collect()),
                ),
            };
            let (x0, x1) = (half(x0), half(x1));
            let (z0, z1) = box_muller(&x0, &x1, compute)?;
            let map = halves.gather_map(dims);
            let pick = |z: [&Array; 2]| -> Data {
                match (&z[0].data, &z[1].data) {
                    (Data::F64(p), Data::F64(q)) => Data::F64(
                        map.iter().map(|&(w, i)| if w == 0 { p[i] } else { q[i] }).collect(),
                    ),
                    (Data::F32(p), Data::F32(q)) => Data::F32(
                        map.iter().map(|&(w, i)| if w == 0 { p[i] } else { q[i] }).collect(),
                    ),
                    _ => Data::F32(Vec::new()),
                }
            };
            let z = Array::new(compute, dims.to_vec(), pick([&z0, &z1]));
            let scaled = binary(Opcode::Multiply, &spread(&b, dims)?, &z)?;
            binary(Opcode::Add, &spread(&a, dims)?, &scaled)?
        }
    };
    if compute != elem { convert(&out, elem) } else { Ok(out) }
}

/// XLA's Box-Muller step on the two uniform halves (same element type, f32 or f64).
fn box_muller(x0: &Array, x1: &Array, elem: ElemType) -> R<(Array, Array)> {
    let dims = x0.dims.clone();
    let c = |v: f64| spread(&scalar_f(elem, v), &dims);
    // XLA writes the constants as C++ floats: 1.0e-7f and 2 * M_PI rounded to f32 only for f32.
    let u1 = binary(Opcode::Maximum, x0, &c(f64::from(1.0e-7f32))?)?;
    let v1 = binary(Opcode::Multiply, &c(2.0 * std::f64::consts::PI)?, x1)?;
    let log = unary(Opcode::Log, &u1)?;
    let u2 = unary(Opcode::Sqrt, &binary(Opcode::Multiply, &c(-2.0)?, &log)?)?;
    let z0 = binary(Opcode::Multiply, &unary(Opcode::Sin, &v1)?, &u2)?;
    let z1 = binary(Opcode::Multiply, &unary(Opcode::Cos, &v1)?, &u2)?;
    Ok((z0, z1))
}

/// The counters of the `rng-get-and-update-state` instructions (and of the `rng`
/// instructions, which own one each), keyed by instruction name.
#[derive(Debug, Default)]
pub struct Counters(Mutex<HashMap<String, u128>>);

impl Counters {
    /// The counter of `name` as (low, high), advanced by `delta` afterwards.
    pub fn get_and_update(&self, name: &str, delta: i64) -> [u64; 2] {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let c = map.entry(name.to_string()).or_insert(INITIAL_STATE);
        let now = *c;
        *c = c.wrapping_add(delta as i128 as u128);
        [now as u64, (now >> 64) as u64]
    }

    /// Every counter back to its initial value.
    pub fn reset(&self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// The state value `rng-get-and-update-state` returns.
pub fn state_array(s: [u64; 2]) -> Array {
    int_array(ElemType::U64, vec![2], s)
}
