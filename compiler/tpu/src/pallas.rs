//! Pallas kernels: the `tpu_custom_call` custom-calls a JAX program makes when it calls a
//! Pallas (Mosaic) kernel, timed by a rule from their operands and block sizes.
//!
//! A call carries its kernel as serialized Mosaic MLIR (`custom_call_config.body`,
//! base64), whose debug locations name the kernel function; the body is not executed
//! here. The kernel is recognized by that name:
//!
//! - **Flash attention** (`jax.experimental.pallas.ops.tpu.flash_attention`, as MaxText
//!   and MaxDiffusion call it): `_flash_attention_kernel` (forward),
//!   `_flash_attention_dq_kernel` and `_flash_attention_dkv_kernel` (backward). With `q`
//!   `[b, h, sq, d]` and `k`, `v` `[b, h, sk, d]` (operands 0-2), the blocked algorithm
//!   multiplies, per computed `(q block, k block)` pair: forward `S = QKᵀ`, `O += PV`
//!   (`sq·sk·2d` multiply-adds per head in all); dq `S`, `dP = dO Vᵀ`, `dQ += dS K`
//!   (`3d`); dkv `S`, `dV += Pᵀ dO`, `dP`, `dK += dSᵀ Q` (`4d`); one `exp` per score.
//!   A causal kernel computes only the pairs on or below the diagonal: it is causal when
//!   its body builds a position mask (`tpu.iota`; the kernels' only position-dependent
//!   op, segment ids arrive as operands), and the fraction is counted on the grid of its
//!   block sizes. HBM traffic is the blocked algorithm's: the operand streamed across the
//!   inner grid axis is read once per outer block (forward and dq: `k`, `v` once per
//!   `q` block; dkv: `q`, `dO` and the row statistics once per `k` block), everything
//!   else once, outputs written once. Block sizes come from the kernel's name where JAX
//!   writes them (`flash_mha_bwd_dq_block_q_major_1024_block_k_major_512_block_k_256`);
//!   otherwise JAX's default (`BlockSizes.get_default`: 128).
//! - **Splash attention** (`jax.experimental.pallas.ops.tpu.splash_attention`, MaxText's
//!   and MaxDiffusion's newer kernel; `splash_mha_fwd*`, `*_dq*`, `*_dkv*`): the same
//!   blocked algorithm, q/k/v after its block-mask operands, blocks from the mask's block
//!   counts; its mask's values are operands not read here, so every block is computed
//!   (exact for a full mask, an upper bound for a causal one).
//! - **Megablox grouped matmuls** (`gmm`, `tgmm`: dropless MoE): recognized by their
//!   operands, timed by their blocked algorithm ([`grouped_matmul`]): the row tiles the
//!   grid visits (group boundaries inside a tile visit it again) and the padded
//!   `[tk, tn]` blocks read from the body. Their cost estimate counts `2 m k n` exactly,
//!   which the kernel exceeds by its padding (on DeepSeek-V2-Lite's `n = 1408` with
//!   `tn = 1024`, 61% more MXU work).
//! - **Any other kernel with a cost estimate** (`pl.CostEstimate`, written into
//!   `custom_call_config.cost_estimate`): its FLOPs on the MXU as 128x128x128 tiles, its
//!   transcendentals on the EUP, its `bytes_accessed` as HBM traffic.
//! - Anything else is an error naming the kernel: no guess is presented as a prediction.

use hlo_chip::program::{Matmul, VectorWork};
use hlo_ir::Shape;

/// A Pallas kernel's work and traffic.
#[derive(Clone, Debug, PartialEq)]
pub struct PallasWork {
    /// The kernel function's name (`_flash_attention_kernel`), or `?` when the body names
    /// none.
    pub kernel: String,
    pub matmul: Option<Matmul>,
    pub vector: VectorWork,
    /// HBM bytes read and written by the blocked algorithm.
    pub hbm_bytes: u64,
    /// FLOPs (2 per multiply-add) and transcendentals, for the report's counts.
    pub flops: f64,
    pub transcendentals: f64,
}

/// Decodes standard base64 (padding optional); `None` on a character outside it.
fn base64(text: &str) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &c in text.as_bytes().iter().filter(|&&c| c != b'=') {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// The kernel function named in a Mosaic body: the first identifier ending in `_kernel`.
fn kernel_name(body: &[u8]) -> Option<String> {
    identifier_around(body, b"_kernel")
}

/// The first identifier of a Mosaic body that contains `part`.
fn identifier_around(body: &[u8], part: &[u8]) -> Option<String> {
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let at = body.windows(part.len()).position(|w| w == part)?;
    let mut start = at;
    while start > 0 && ident(body[start - 1]) {
        start -= 1;
    }
    let mut end = at + part.len();
    while end < body.len() && ident(body[end]) {
        end += 1;
    }
    String::from_utf8(body[start..end].to_vec()).ok()
}

/// `block_x_N` values written in a kernel's instruction name.
fn block(name: &str, key: &str) -> Option<u64> {
    let pat = format!("{key}_");
    let mut rest = name;
    while let Some(i) = rest.find(&pat) {
        let after = &rest[i + pat.len()..];
        let digits: String = after.chars().take_while(char::is_ascii_digit).collect();
        // `block_k_` must not match inside `block_k_major_`.
        if !digits.is_empty() {
            return digits.parse().ok();
        }
        rest = after;
    }
    None
}

fn dims(s: &Shape) -> Vec<u64> {
    s.as_array().and_then(|a| a.static_dims()).unwrap_or_default()
}

fn bytes(s: &Shape) -> u64 {
    let mut n = 0;
    s.for_each_array(&mut |a| {
        n += a.element_count().unwrap_or(0) * (a.elem.bits() as u64).div_ceil(8)
    });
    n
}

/// The fraction of `(q block, k block)` pairs a causal kernel computes: those whose first
/// key is at or before the block's last query.
fn causal_fraction(sq: u64, sk: u64, bq: u64, bk: u64) -> f64 {
    let (nq, nk) = (sq.div_ceil(bq.max(1)), sk.div_ceil(bk.max(1)));
    let computed: u64 = (0..nq).map(|i| ((i + 1) * bq).div_ceil(bk.max(1)).min(nk)).sum();
    computed as f64 / (nq * nk).max(1) as f64
}

/// The work of the Pallas kernel of instruction `name` with `backend_config`, operands
/// and results.
pub fn work(
    name: &str,
    backend_config: Option<&str>,
    operands: &[Shape],
    results: &[Shape],
) -> Result<PallasWork, String> {
    let cfg: serde_json::Value = backend_config
        .and_then(|t| serde_json::from_str(t).ok())
        .ok_or("its backend_config is not the JSON of a Mosaic call")?;
    let call = &cfg["custom_call_config"];
    let body = call["body"]
        .as_str()
        .and_then(base64)
        .ok_or("its backend_config has no Mosaic body (custom_call_config.body)")?;
    let kernel = kernel_name(&body).unwrap_or_else(|| "?".into());
    let causal = body.windows(8).any(|w| w == b"tpu.iota");
    let out_bytes: u64 = results.iter().map(bytes).sum();
    let splash = kernel.contains("splash");
    // A splash kernel's role is in its function's name (`splash_mha_dkv_no_residuals`),
    // which XLA TPU gives the instruction; a program lowered for TPU but not compiled
    // names it `pallas_call.N`, and the body still holds it.
    let role = match identifier_around(&body, b"splash_mha") {
        Some(f) if splash && !name.contains("splash_mha") => f,
        _ => name.to_string(),
    };
    let name = role.as_str();
    let flash = match kernel.as_str() {
        "_flash_attention_kernel" => Some(Flash::Forward),
        "_flash_attention_dq_kernel" => Some(Flash::Dq),
        "_flash_attention_dkv_kernel" => Some(Flash::Dkv),
        _ if splash && name.contains("_dkv") => Some(Flash::Dkv),
        _ if splash && name.contains("_dq") => Some(Flash::Dq),
        _ if splash => Some(Flash::Forward),
        _ => None,
    };
    // Splash attention takes its block masks first (`s8[heads, q blocks, k blocks]`),
    // then q, k, v: its blocks are the sequence over the mask's block counts. Its mask is
    // an operand whose values are not read here: every block is computed (exact for a
    // full mask, an upper bound for a causal one).
    let (operands, causal, blocks) = if splash {
        let first = operands.iter().position(|o| dims(o).len() == 4).unwrap_or(0);
        let mask = dims(operands.first().unwrap_or(&Shape::Token));
        let blocks = (mask.len() == 3).then(|| (mask[1], mask[2]));
        (&operands[first..], false, blocks)
    } else {
        (operands, causal, None)
    };
    if let Some(kind) = flash {
        let (q, k) = (
            dims(operands.first().unwrap_or(&Shape::Token)),
            dims(operands.get(1).unwrap_or(&Shape::Token)),
        );
        let [b, h, sq, d] = q[..] else {
            return Err(format!(
                "flash attention kernel `{kernel}` with a query of rank {} (want [batch, heads, seq, head_dim])",
                q.len()
            ));
        };
        let sk = k.get(2).copied().unwrap_or(sq);
        let default = 128;
        let (bq, bk) = match kind {
            Flash::Forward => (
                block(name, "block_q").unwrap_or(default),
                block(name, "block_k").unwrap_or(default),
            ),
            Flash::Dq => (
                block(name, "block_q_major").or(block(name, "block_q")).unwrap_or(default),
                block(name, "block_k").unwrap_or(default),
            ),
            Flash::Dkv => (
                block(name, "block_q").unwrap_or(default),
                block(name, "block_k_major").or(block(name, "block_k")).unwrap_or(default),
            ),
        };
        let (bq, bk) = match blocks {
            Some((nq, nk)) if nq > 0 && nk > 0 => (sq.div_ceil(nq), sk.div_ceil(nk)),
            _ => (bq, bk),
        };
        let frac = if causal { causal_fraction(sq, sk, bq, bk) } else { 1.0 };
        let scores = (b * h * sq * sk) as f64 * frac;
        let per_score_d = match kind {
            Flash::Forward => 2,
            Flash::Dq => 3,
            Flash::Dkv => 4,
        };
        let macs = scores * (per_score_d * d) as f64;
        // One GEMM per head of the computed pairs: sq·frac rows against sk columns,
        // contracted over d, as many times as the kernel multiplies.
        let rows = ((sq as f64 * frac).ceil() as u64).max(1);
        let matmul = Matmul {
            batch: b * h * per_score_d,
            m: rows,
            n: sk,
            k: d,
            passes: 1,
            lhs_transposed: false,
            rhs_transposed: false,
        };
        let n = scores.ceil() as u64;
        let vector = VectorWork { alu: 6 * n, eup: n, xlu: n / 128 };
        // Operand 0 is q; 1 and 2 are k and v; the rest (statistics, dO, ...) follow q.
        let op_bytes: Vec<u64> = operands.iter().map(bytes).collect();
        let kv: u64 = op_bytes.iter().skip(1).take(2).sum();
        let rest: u64 =
            op_bytes.iter().skip(3).sum::<u64>() + op_bytes.first().copied().unwrap_or(0);
        let (nq, nk) = (sq.div_ceil(bq.max(1)), sk.div_ceil(bk.max(1)));
        let streamed = |x: u64, times: u64| (x as f64 * (times as f64 * frac).max(1.0)) as u64;
        let hbm = match kind {
            Flash::Forward | Flash::Dq => streamed(kv, nq) + rest + out_bytes,
            Flash::Dkv => streamed(rest, nk) + kv + out_bytes,
        };
        return Ok(PallasWork {
            kernel,
            matmul: Some(matmul),
            vector,
            hbm_bytes: hbm,
            flops: 2.0 * macs,
            transcendentals: scores,
        });
    }
    if let Some(w) = grouped_matmul(&kernel, &body, operands, results) {
        return Ok(w);
    }
    let est = &call["cost_estimate"];
    let num =
        |v: &serde_json::Value| v.as_f64().or_else(|| v.as_str().and_then(|s| s.parse().ok()));
    if let (Some(flops), Some(bytes_accessed)) = (num(&est["flops"]), num(&est["bytes_accessed"])) {
        let trans = num(&est["transcendentals"]).unwrap_or(0.0);
        let tiles = (flops / 2.0 / (128.0 * 128.0 * 128.0)).ceil() as u64;
        let matmul = (tiles > 0).then_some(Matmul {
            batch: 1,
            m: 128 * tiles,
            n: 128,
            k: 128,
            passes: 1,
            lhs_transposed: false,
            rhs_transposed: false,
        });
        return Ok(PallasWork {
            kernel,
            matmul,
            vector: VectorWork { alu: 0, eup: trans as u64, xlu: 0 },
            hbm_bytes: bytes_accessed as u64,
            flops,
            transcendentals: trans,
        });
    }
    Err(format!(
        "Pallas kernel `{kernel}` has no timing rule (flash attention forward, dq and dkv are known) and carries no cost_estimate"
    ))
}

/// Whether `body` holds the little-endian `i64` run `values` (a `DenseI64ArrayAttr`'s raw
/// data in MLIR bytecode: a block shape of `window_params`).
fn holds_i64s(body: &[u8], values: &[u64]) -> bool {
    let pattern: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    body.windows(pattern.len()).any(|w| w == pattern.as_slice())
}

/// The `[1, a, b]` block of a kernel's grouped operand (its `window_params`), with `a` and
/// `b` within `dims` (the operand's last two).
fn group_block(body: &[u8], dims: (u64, u64)) -> Option<(u64, u64)> {
    let one = 1u64.to_le_bytes();
    (0..body.len().saturating_sub(23)).find_map(|i| {
        if body[i..i + 8] != one {
            return None;
        }
        let word = |j: usize| u64::from_le_bytes(body[j..j + 8].try_into().expect("8 bytes"));
        let (a, b) = (word(i + 8), word(i + 16));
        (a >= 1 && b >= 1 && a <= dims.0 && b <= dims.1).then_some((a, b))
    })
}

/// Megablox's grouped matmuls (`jax.experimental.pallas.ops.tpu.megablox`, the dropless
/// MoE layers of MaxText), recognized by their operands: scalar-prefetch `s32` group
/// metadata first, then `gmm` (`lhs [m, k]`, `rhs [groups, k, n]` -> `[m, n]`) or `tgmm`
/// (`lhs [m, k]`, `grad [m, n]` -> `[groups, k, n]`). The grid visits `tiles_m + groups -
/// 1` row tiles (the length of the group-id metadata: a tile that a group boundary crosses
/// is visited once per group), each `tm = ceil(m / tiles_m)` rows, and computes whole
/// `[tk, tn]` blocks, the last ones padded: MXU work `visits * tm * ceil(k/tk)tk *
/// ceil(n/tn)tn`. `tk` and `tn` are the grouped operand's `[1, tk, tn]` block, read from the
/// body's `window_params` (confirmed by the `[tm, tk]` row block); HBM traffic is the
/// blocked algorithm's: per visit and n tile, the row block and the group's `[k, tn]`
/// weight slab (gmm) or the row blocks of both operands (tgmm), the result once per visit
/// (gmm) or per group (tgmm). `None` when the operands or blocks are not these.
fn grouped_matmul(
    kernel: &str,
    body: &[u8],
    operands: &[Shape],
    results: &[Shape],
) -> Option<PallasWork> {
    let int = |s: &Shape| s.as_array().is_some_and(|a| a.elem.is_integer() && dims(s).len() <= 1);
    let prefetch = operands.iter().take_while(|s| int(s)).count();
    let (meta, data) = operands.split_at(prefetch);
    let ([lhs, other], [out]) = (data, results) else { return None };
    let elem_bytes = |s: &Shape| s.as_array().map_or(2, |a| (a.elem.bits() as u64).div_ceil(8));
    let (l, o, r) = (dims(lhs), dims(out), dims(other));
    let [m, k] = l[..] else { return None };
    // gmm: rhs [g, k, n] (or [g, n, k] transposed); tgmm: the result is grouped.
    let (groups, n, grouped, transposed) = match (&r[..], &o[..]) {
        ([g, a, b], [om, on]) if *om == m && *a == k && b == on => (*g, *b, (*a, *b), false),
        ([g, a, b], [om, on]) if *om == m && *b == k && a == on => (*g, *a, (*a, *b), true),
        ([rm, rn], [g, a, b]) if *rm == m && *a == k && b == rn => (*g, *rn, (*a, *b), false),
        _ => return None,
    };
    let tgmm = o.len() == 3;
    let visits = meta.iter().map(|s| dims(s).first().copied().unwrap_or(1)).max()?;
    let tiles_m = (visits + 1).checked_sub(groups).filter(|&t| t >= 1)?;
    let tm = m.div_ceil(tiles_m);
    let (a, b) = group_block(body, grouped)?;
    let (tk, tn) = if transposed { (b, a) } else { (a, b) };
    if !holds_i64s(body, &[tm, tk]) {
        return None;
    }
    let (kp, np) = (k.div_ceil(tk) * tk, n.div_ceil(tn) * tn);
    let (tiles_k, tiles_n) = (kp / tk, np / tn);
    let (eb, ob) = (elem_bytes(lhs), elem_bytes(out));
    let rows = visits * tm;
    let hbm = if tgmm {
        rows * kp * eb * tiles_n + rows * np * elem_bytes(other) * tiles_k + groups * kp * np * ob
    } else {
        rows * kp * eb * tiles_n + visits * kp * np * elem_bytes(other) + rows * np * ob
    };
    let macs = rows * kp * np;
    Some(PallasWork {
        kernel: format!("{kernel} (megablox {})", if tgmm { "tgmm" } else { "gmm" }),
        matmul: Some(Matmul {
            batch: visits,
            m: tm,
            n: np,
            k: kp,
            passes: 1,
            lhs_transposed: tgmm,
            rhs_transposed: transposed,
        }),
        // The f32 accumulator: one add per result element and k tile.
        vector: VectorWork { alu: rows * np * tiles_k, eup: 0, xlu: 0 },
        hbm_bytes: hbm,
        flops: 2.0 * macs as f64,
        transcendentals: 0.0,
    })
}

#[derive(Clone, Copy)]
enum Flash {
    Forward,
    Dq,
    Dkv,
}

#[cfg(test)]
mod tests {
    use super::*;
    use hlo_ir::ElemType;

    fn encode(bytes: &[u8]) -> String {
        const T: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut s = String::new();
        for c in bytes.chunks(3) {
            let n = (u32::from(c[0]) << 16)
                | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
                | u32::from(*c.get(2).unwrap_or(&0));
            for i in 0..=c.len() {
                s.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        s
    }

    fn config(body: &str, extra: &str) -> String {
        format!(r#"{{"custom_call_config":{{"body":"{}"{extra}}}}}"#, encode(body.as_bytes()))
    }

    #[test]
    fn base64_round_trips() {
        for s in ["", "a", "ab", "abc", "abcd", "_flash_attention_kernel tpu.iota"] {
            assert_eq!(base64(&encode(s.as_bytes())).as_deref(), Some(s.as_bytes()), "{s}");
        }
        assert_eq!(base64("TWFu"), Some(b"Man".to_vec()));
        assert_eq!(base64("TWE="), Some(b"Ma".to_vec()));
        assert!(base64("T$").is_none());
    }

    #[test]
    fn flash_attention_by_its_blocked_algorithm() {
        let q = Shape::array(ElemType::BF16, &[2, 4, 2048, 128]);
        let ops = vec![q.clone(), q.clone(), q.clone()];
        let fwd = config("loc(\"_flash_attention_kernel\") flash_attention.py", "");
        let w = work("flash_attention.1", Some(&fwd), &ops, std::slice::from_ref(&q)).unwrap();
        // Non-causal: 4 b h s^2 d FLOPs (QK^T and PV), one exp per score.
        assert_eq!(w.flops, 4.0 * 2.0 * 4.0 * 2048.0 * 2048.0 * 128.0);
        assert_eq!(w.transcendentals, 2.0 * 4.0 * 2048.0 * 2048.0);
        assert_eq!(w.matmul.unwrap().macs() as f64 * 2.0, w.flops);
        // k and v read once per 128-row q block (16 blocks), q and o once.
        let qb = 2 * 4 * 2048 * 128 * 2;
        assert_eq!(w.hbm_bytes, 16 * 2 * qb + qb + qb);
        // Causal (a position mask in the body) with 512 blocks: 10 of 16 block pairs.
        let causal = config("_flash_attention_kernel tpu.iota", "");
        let c = work(
            "flash_attention_block_q_512_block_k_512",
            Some(&causal),
            &ops,
            std::slice::from_ref(&q),
        )
        .unwrap();
        assert_eq!(c.flops, w.flops * 10.0 / 16.0);
        assert_eq!(causal_fraction(2048, 2048, 1024, 256), (4.0 + 8.0) / 16.0);
        // dq: three products per score; dkv: four; block sizes from the name.
        let dq = config("_flash_attention_dq_kernel", "");
        let name = "flash_mha_bwd_dq_block_q_major_1024_block_k_major_512_block_k_256.1";
        let d = work(name, Some(&dq), &ops, std::slice::from_ref(&q)).unwrap();
        assert_eq!(d.flops, 1.5 * w.flops);
        assert_eq!(d.hbm_bytes, 2 * 2 * qb + qb + qb);
        let dkv = config("_flash_attention_dkv_kernel", "");
        let name =
            "flash_mha_bwd_dkv_block_q_major_512_block_q_512_block_k_major_512_block_k_512.1";
        let kv = work(name, Some(&dkv), &ops, &[q.clone(), q.clone()]).unwrap();
        assert_eq!(kv.flops, 2.0 * w.flops);
        assert_eq!(kv.hbm_bytes, 4 * qb + 2 * qb + 2 * qb);
    }

    #[test]
    fn splash_attention_after_its_masks() {
        let mask = Shape::array(ElemType::S8, &[1, 4, 4]);
        let q = Shape::array(ElemType::BF16, &[2, 4, 2048, 128]);
        let ops = vec![mask.clone(), mask, q.clone(), q.clone(), q.clone()];
        let body = config("splash_attention_kernel", "");
        let name = "splash_mha_fwd_segmented_residuals.3";
        let f = work(name, Some(&body), &ops, std::slice::from_ref(&q)).unwrap();
        assert_eq!(f.flops, 4.0 * 2.0 * 4.0 * 2048.0 * 2048.0 * 128.0);
        // Blocks of 512 (4 per sequence): k and v read once per q block.
        let qb = 2 * 4 * 2048 * 128 * 2;
        assert_eq!(f.hbm_bytes, 4 * 2 * qb + qb + qb);
        let name = "splash_mha_dkv_segmented_no_residuals.1";
        let d = work(name, Some(&body), &ops, &[q.clone(), q.clone()]).unwrap();
        assert_eq!(d.flops, 2.0 * f.flops);
        // Lowered but not compiled, the call is `pallas_call.N`: its role is the name of
        // the function in its body.
        for (role, times) in [("dkv", 2.0), ("dq", 1.5), ("fwd", 1.0)] {
            let body =
                config(&format!("splash_attention_kernel splash_mha_{role}_no_residuals"), "");
            let w = work("pallas_call.20", Some(&body), &ops, &[q.clone(), q.clone()]).unwrap();
            assert_eq!(w.flops, times * f.flops, "{role}");
        }
    }

    /// DeepSeek-V2-Lite's expert matmuls as MaxText calls megablox on a v5p chip: 294912
    /// routed rows, 64 experts, tiling (512, 1024, 1024); group metadata of 576 + 63 tiles.
    #[test]
    fn megablox_by_its_visited_tiles_and_padded_blocks() {
        let s32 = |d: &[u64]| Shape::array(ElemType::S32, d);
        let bf16 = |d: &[u64]| Shape::array(ElemType::BF16, d);
        let meta = vec![s32(&[]), s32(&[65]), s32(&[639]), s32(&[639]), s32(&[1])];
        let mut body = b"kernel ".to_vec();
        for v in [512u64, 1024, 7, 1, 1024, 1024] {
            body.extend(v.to_le_bytes());
        }
        let est = r#","cost_estimate":{"flops":"1700807049216","bytes_accessed":"6931611648"}"#;
        let cfg = format!(r#"{{"custom_call_config":{{"body":"{}"{est}}}}}"#, encode(&body));
        let ops = [meta.clone(), vec![bf16(&[294912, 2048]), bf16(&[64, 2048, 1408])]].concat();
        let w = work("pallas_call.13", Some(&cfg), &ops, &[bf16(&[294912, 1408])]).unwrap();
        let rows: u64 = 639 * 512;
        assert_eq!(w.flops, 2.0 * (rows * 2048 * 2048) as f64);
        let hbm: u64 = rows * 2048 * 2 * 2 + 639 * 2048 * 2048 * 2 + rows * 2048 * 2;
        assert_eq!(w.hbm_bytes, hbm);
        assert!(w.kernel.contains("gmm"), "{}", w.kernel);
        // tgmm: the weight gradient, grouped result.
        let ops = [meta, vec![bf16(&[294912, 2048]), bf16(&[294912, 1408])]].concat();
        let t = work("pallas_call.39", Some(&cfg), &ops, &[bf16(&[64, 2048, 1408])]).unwrap();
        assert_eq!(t.flops, w.flops);
        assert!(t.kernel.contains("tgmm"), "{}", t.kernel);
        // Without the blocks in the body, the cost estimate is all there is.
        let plain = config("kernel", est);
        let ops =
            [vec![s32(&[639])], vec![bf16(&[294912, 2048]), bf16(&[64, 2048, 1408])]].concat();
        let e = work("pallas_call.13", Some(&plain), &ops, &[bf16(&[294912, 1408])]).unwrap();
        assert_eq!(e.flops, 1700807049216.0);
    }

    #[test]
    fn other_kernels_need_a_cost_estimate() {
        let x = Shape::array(ElemType::F32, &[1024, 1024]);
        let est = config(
            "_gmm_kernel",
            r#","cost_estimate":{"flops":"2147483648","transcendentals":"0","bytes_accessed":"12582912"}"#,
        );
        let w = work("gmm", Some(&est), &[x.clone(), x.clone()], std::slice::from_ref(&x)).unwrap();
        assert_eq!(
            (w.kernel.as_str(), w.flops, w.hbm_bytes),
            ("_gmm_kernel", 2147483648.0, 12582912)
        );
        assert_eq!(w.matmul.unwrap().macs(), 1 << 30);
        let none = config("_mystery_kernel", "");
        let e = work("custom", Some(&none), std::slice::from_ref(&x), std::slice::from_ref(&x))
            .unwrap_err();
        assert!(e.contains("_mystery_kernel") && e.contains("no timing rule"), "{e}");
        assert!(work("custom", Some("{}"), &[], &[]).unwrap_err().contains("Mosaic body"));
        assert!(work("custom", None, &[], &[]).is_err());
    }
}
