"""Regenerates transformer_lm.hlo and transformer_lm.json: ONE training step of a small
decoder-only transformer language model over bytes (vocabulary 256), lowered by JAX and
printed in XLA's dump style (metadata, stack frames), for a runtime that keeps the
training state resident and feeds it a batch of text per step.

The model: learned token and position embeddings, pre-norm blocks (RMSNorm -> causal
multi-head attention -> residual, RMSNorm -> GELU MLP -> residual), a final RMSNorm and an
untied output projection to 256 logits; mean cross-entropy of the next byte, in f32.
Master weights are f32; the forward pass casts them to bf16 and runs activations and
matmuls in bf16 (norms, softmax and the loss in f32). The optimizer is AdamW in f32 with
a linear learning-rate warmup computed from the step counter, weight decay on matrices
only, and global-norm gradient clipping.

The step's interface is flat (no pytrees), so the HLO entry reads as a list:

    step(*params, *mu, *nu, count, tokens) -> (loss, *params', *mu', *nu', count')

    params  n f32 tensors, in the order of `param_specs` (see transformer_lm.json "state")
    mu, nu  Adam's first and second moments, same shapes and order as params
    count   s32[]: steps taken so far (0 for the first step)
    tokens  s32[B, S+1]: bytes; inputs are tokens[:, :-1], targets tokens[:, 1:]

Parameters 0..P-1 (P = 3n+1) are the resident training state, parameter P is the batch;
output 0 is the loss (f32[]) and outputs 1..P replace parameters 0..P-1 in the same order.

transformer_lm.json holds the config, the state list (name, shape, dtype, init), the batch
shape, the parameter count, a FLOP estimate and a "reference" a test can rebuild without
any binary file:

    - every tensor whose init is {"kind": "normal", "std": s}, at position t of the state
      list (0-based, counting from the first parameter), gets element k (row-major flat
      index, 0-based) = f32(s * sin(1 + k + 1000 * t)), sin and the product in f64, then
      rounded to nearest f32;
    - "ones" tensors are 1, "zeros" tensors (all of mu and nu) are 0, count is 0;
    - tokens = the first B*(S+1) bytes of examples/data/sonnets.txt, reshaped row-major to
      [B, S+1] as s32;
    - the step is run 3 times, feeding outputs 1..P back as the state (the same tokens each
      time); "losses" are the 3 values of output 0 as XLA computes them on the CPU.

Run with the oracle's Python: ~/.cache/xla-oracle-venv/bin/python gen_transformer_lm.py
(add --check to also time the step and train 300 steps on random windows of the sonnets).
"""
import argparse
import json
import math
import pathlib
import re
import statistics
import time

import numpy as np
import jax
import jax.extend
import jax.numpy as jnp
from jax._src.lib import xla_client as xc

CONFIG = dict(
    vocab=256,          # bytes
    seq=64,             # tokens per example the model sees (the batch holds seq+1)
    batch=16,
    d_model=128,
    heads=4,
    head_dim=32,
    layers=2,
    mlp=512,            # GELU (tanh approximation)
    norm="rmsnorm",     # pre-norm, scale only, eps below
    norm_eps=1e-6,
    positions="learned",
    tied_embeddings=False,
    init_std=0.02,      # every matrix and embedding; norm scales start at 1
    activation_dtype="bf16",
    master_dtype="f32",
    # AdamW
    lr=3e-3,
    warmup_steps=20,    # lr * min(1, (count + 1) / warmup_steps)
    b1=0.9,
    b2=0.99,
    eps=1e-8,
    weight_decay=0.01,  # decoupled, on matrices (rank 2) only: not on norm scales
    clip_norm=1.0,      # global gradient norm
)

C = CONFIG
V, S, B, E = C["vocab"], C["seq"], C["batch"], C["d_model"]
H, D, L, F = C["heads"], C["head_dim"], C["layers"], C["mlp"]
ACT = jnp.bfloat16
F32 = jnp.float32


def param_specs():
    """(name, shape, init) of every parameter, in the order of the HLO interface."""
    normal = {"kind": "normal", "std": C["init_std"]}
    ones = {"kind": "ones"}
    specs = [("embed", (V, E), normal), ("pos_embed", (S, E), normal)]
    for i in range(L):
        p = f"layer{i}."
        specs += [
            (p + "attn_norm", (E,), ones),
            (p + "attn.wq", (E, H * D), normal),
            (p + "attn.wk", (E, H * D), normal),
            (p + "attn.wv", (E, H * D), normal),
            (p + "attn.wo", (H * D, E), normal),
            (p + "mlp_norm", (E,), ones),
            (p + "mlp.w_in", (E, F), normal),
            (p + "mlp.w_out", (F, E), normal),
        ]
    specs += [("final_norm", (E,), ones), ("unembed", (E, V), normal)]
    return specs


SPECS = param_specs()
N = len(SPECS)
NAMES = [name for name, _, _ in SPECS]


def rms_norm(x, scale):
    xf = x.astype(F32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + C["norm_eps"])
    return (y * scale).astype(ACT)


def attention(x, wq, wk, wv, wo):
    q = (x @ wq).reshape(B, S, H, D)
    k = (x @ wk).reshape(B, S, H, D)
    v = (x @ wv).reshape(B, S, H, D)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k).astype(F32) / math.sqrt(D)
    causal = jnp.tril(jnp.ones((S, S), jnp.bool_))
    scores = jnp.where(causal, scores, -1e9)
    probs = jax.nn.softmax(scores, axis=-1).astype(ACT)
    o = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(B, S, H * D)
    return o @ wo


def loss_fn(params, tokens):
    p = dict(zip(NAMES, params))
    w = {k: v.astype(ACT) for k, v in p.items()}  # bf16 copies of the f32 master weights
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    x = jnp.take(w["embed"], inputs, axis=0) + w["pos_embed"][None]
    for i in range(L):
        l = f"layer{i}."
        h = rms_norm(x, p[l + "attn_norm"])
        x = x + attention(h, w[l + "attn.wq"], w[l + "attn.wk"], w[l + "attn.wv"], w[l + "attn.wo"])
        h = rms_norm(x, p[l + "mlp_norm"])
        x = x + jax.nn.gelu(h @ w[l + "mlp.w_in"]) @ w[l + "mlp.w_out"]
    logits = (rms_norm(x, p["final_norm"]) @ w["unembed"]).astype(F32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(nll)


def adamw(params, grads, mu, nu, count):
    # global-norm clipping
    gnorm = jnp.sqrt(sum(jnp.sum(g * g) for g in grads))
    scale = jnp.minimum(1.0, C["clip_norm"] / (gnorm + 1e-6))
    grads = [g * scale for g in grads]
    count = count + 1
    c = count.astype(F32)
    lr = C["lr"] * jnp.minimum(1.0, c / C["warmup_steps"])
    b1, b2 = C["b1"], C["b2"]
    bc1, bc2 = 1 - b1 ** c, 1 - b2 ** c
    new_p, new_mu, new_nu = [], [], []
    for w, g, m, v in zip(params, grads, mu, nu):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        update = (m / bc1) / (jnp.sqrt(v / bc2) + C["eps"])
        if w.ndim == 2:
            update = update + C["weight_decay"] * w
        new_p.append(w - lr * update)
        new_mu.append(m)
        new_nu.append(v)
    return new_p, new_mu, new_nu, count


def step(*args):
    """step(*params, *mu, *nu, count, tokens) -> (loss, *params', *mu', *nu', count')"""
    params, mu, nu = list(args[:N]), list(args[N:2 * N]), list(args[2 * N:3 * N])
    count, tokens = args[3 * N], args[3 * N + 1]
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    params, mu, nu, count = adamw(params, grads, mu, nu, count)
    return (loss, *params, *mu, *nu, count)


def state_list():
    """The resident state, in parameter order: what the JSON's "state" describes."""
    state = []
    for prefix in ("params.", "adam.mu.", "adam.nu."):
        for name, shape, init in SPECS:
            state.append({
                "name": prefix + name,
                "shape": list(shape),
                "dtype": "f32",
                "init": init if prefix == "params." else {"kind": "zeros"},
            })
    state.append({"name": "adam.count", "shape": [], "dtype": "s32", "init": {"kind": "zeros"}})
    return state


def abstract_args():
    state = [jax.ShapeDtypeStruct(s["shape"], F32 if s["dtype"] == "f32" else jnp.int32)
             for s in state_list()]
    return state + [jax.ShapeDtypeStruct((B, S + 1), jnp.int32)]


def reference_state():
    """The deterministic state of the JSON's "reference" (see the module docstring)."""
    out = []
    for t, s in enumerate(state_list()):
        shape, init = tuple(s["shape"]), s["init"]
        if init["kind"] == "normal":
            k = np.arange(math.prod(shape), dtype=np.float64)
            out.append((init["std"] * np.sin(1.0 + k + 1000.0 * t)).astype(np.float32).reshape(shape))
        elif init["kind"] == "ones":
            out.append(np.ones(shape, np.float32))
        else:
            out.append(np.zeros(shape, np.float32 if s["dtype"] == "f32" else np.int32))
    return out


def random_state(seed):
    out = []
    rng = np.random.default_rng(seed)
    for s in state_list():
        shape, init = tuple(s["shape"]), s["init"]
        if init["kind"] == "normal":
            out.append((rng.standard_normal(shape) * init["std"]).astype(np.float32))
        elif init["kind"] == "ones":
            out.append(np.ones(shape, np.float32))
        else:
            out.append(np.zeros(shape, np.float32 if s["dtype"] == "f32" else np.int32))
    return out


def flops_per_step():
    """Matmul FLOPs (2 per multiply-add), backward = 2x forward; the embedding gather and
    elementwise work are not counted."""
    T = B * S
    per_layer = 2 * T * (4 * E * H * D + 2 * E * F)        # q, k, v, o projections; MLP
    per_layer += 2 * 2 * B * H * S * S * D                 # scores and probs @ v (full, unmasked)
    forward = L * per_layer + 2 * T * E * V                 # + output projection
    return 3 * forward


def check_interface(text, n_state):
    """The entry's parameters and root tuple must be the flat list described above."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("ENTRY"))
    body = []
    for l in lines[start + 1:]:
        if l.startswith("}"):
            break
        body.append(l.strip())
    params = {}
    for l in body:
        if " parameter(" in l:
            num = int(l.split(" parameter(")[1].split(")")[0])
            shape = l.split(" = ")[1].split(" parameter(")[0]
            params[num] = shape.split("{")[0]
    want = []
    for s in state_list():
        dt = "f32" if s["dtype"] == "f32" else "s32"
        want.append(f"{dt}[{','.join(map(str, s['shape']))}]")
    want.append(f"s32[{B},{S + 1}]")
    got = [params[i] for i in range(len(params))]
    assert got == want, f"entry parameters differ:\n{got}\n{want}"
    root = next(l for l in body if l.startswith("ROOT"))
    tuple_shape = root.split(" = ")[1].split(" tuple(")[0]
    assert tuple_shape.startswith("(") and " tuple(" in root, root[:200]
    tuple_shape = re.sub(r"/\*index=\d+\*/", "", tuple_shape)
    elems = [e.split("{")[0].strip() for e in tuple_shape.strip("()").split(", ")]
    assert elems == ["f32[]"] + want[:n_state], f"root tuple differs:\n{elems}"
    return len(body)


def compile_hlo_text(text):
    """Compiles HLO text on XLA CPU as a runtime reading the file would see it (parsed by
    XLA's HLO parser, not JAX's own lowering); returns a function of numpy arrays."""
    backend = jax.extend.backend.get_backend("cpu")
    device = backend.devices()[0]
    module = xc.hlo.hlo_module_from_text(text)
    mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    exe = backend.compile_and_load(mlir, xc.DeviceList((device,)), xc.CompileOptions())

    def run(*arrays):
        outs = exe.execute_sharded([jax.device_put(a, device) for a in arrays])
        return [np.asarray(o[0]) for o in outs.disassemble_into_single_device_arrays()]
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true",
                    help="also time the step and train 300 steps on random windows")
    args = ap.parse_args()

    here = pathlib.Path(__file__).resolve()
    P = 3 * N + 1
    jitted = jax.jit(step, keep_unused=True)
    text = jitted.lower(*abstract_args()).as_text(dialect="hlo", debug_info=True)
    text = xc.hlo.hlo_module_from_text(text).to_string()
    text = text.replace(str(here), "examples/models/" + here.name)  # no machine paths in the file
    n_instructions = check_interface(text, P)
    out = here.with_name("transformer_lm.hlo")
    out.write_text(text)
    print(f"wrote {out} ({len(text)} bytes, {n_instructions} instructions in the entry, "
          f"{P} state parameters + 1 batch)")

    # The reference: deterministic state, the first bytes of the sonnets, 3 steps of the
    # exported text on XLA (JAX's own jit of `step` agrees to ~1e-6: it compiles JAX's
    # lowering, not the printed text, and XLA fuses the two slightly differently).
    data = np.frombuffer(here.parents[1].joinpath("data", "sonnets.txt").read_bytes(), np.uint8)
    tokens = data[:B * (S + 1)].astype(np.int32).reshape(B, S + 1)
    run = compile_hlo_text(text)
    state = reference_state()
    jax_loss = float(jitted(*state, tokens)[0])
    losses = []
    for _ in range(3):
        outs = run(*state, tokens)
        losses.append(float(outs[0]))
        state = outs[1:]
    assert int(state[-1]) == 3 and abs(jax_loss - losses[0]) < 1e-4, (jax_loss, losses)
    print("reference losses", losses, f"(ln 256 = {math.log(256):.4f}; jax.jit: {jax_loss})")

    n_params = sum(math.prod(shape) for _, shape, _ in SPECS)
    meta = {
        "hlo": "transformer_lm.hlo",
        "generator": "examples/models/" + here.name,
        "config": CONFIG,
        "interface": "step(*params, *mu, *nu, count, tokens) -> (loss, *params', *mu', *nu', count'); "
                     "parameters 0..P-1 are the state below, parameter P the batch; output 0 is the loss "
                     "(f32[]), outputs 1..P replace parameters 0..P-1 in order",
        "num_state": P,
        "state": state_list(),
        "batch": {"shape": [B, S + 1], "dtype": "s32",
                  "meaning": "bytes; inputs tokens[:, :-1], targets tokens[:, 1:]"},
        "outputs": {"loss": 0, "state": [1, P]},
        "num_params": n_params,
        "flops_per_step": flops_per_step(),
        "flops_note": "matmul FLOPs only (2 per multiply-add), forward x3 for forward+backward, "
                      "attention scores counted unmasked",
        "reference": {
            "rule": "state tensor t (0-based position in `state`) with init normal(std): element k "
                    "(row-major flat index) = f32(std * sin(1 + k + 1000*t)), computed in f64 then "
                    "rounded to nearest f32; ones -> 1; zeros -> 0 (all of mu, nu); count = 0. "
                    "tokens = first batch[0]*batch[1] bytes of examples/data/sonnets.txt, row-major "
                    "[B, S+1], s32. Run the step 3 times feeding outputs 1..P back as the state "
                    "(same tokens every time); `losses` are output 0 of each step on XLA CPU.",
            "data": "examples/data/sonnets.txt",
            "steps": 3,
            "losses": losses,
            "losses_note": "XLA CPU (jaxlib 0.10.2) running transformer_lm.hlo itself; bf16 "
                           "activations, so another engine should agree to ~1e-3 relative, not bit for bit",
            "param_sums_after_3_steps": {s["name"]: float(np.sum(a, dtype=np.float64))
                                         for s, a in zip(state_list()[:N], state[:N])},
        },
    }
    if args.check:
        meta["check"] = check(jitted, data)
    json_out = here.with_name("transformer_lm.json")
    json_out.write_text(json.dumps(meta, indent=1) + "\n")
    print(f"wrote {json_out}")


def check(jitted, data, steps=300, seed=0):
    """Times the step on XLA CPU and trains `steps` steps on random windows of the text."""
    rng = np.random.default_rng(seed)

    def batch():
        starts = rng.integers(0, len(data) - (S + 1), B)
        return np.stack([data[s:s + S + 1] for s in starts]).astype(np.int32)

    state = [jnp.asarray(a) for a in random_state(seed)]
    tokens = jnp.asarray(batch())
    outs = jitted(*state, tokens)
    jax.block_until_ready(outs)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        jax.block_until_ready(jitted(*state, tokens))
        times.append(time.perf_counter() - t0)
    median = statistics.median(times)
    print(f"XLA CPU step: median {median * 1e3:.1f} ms over 20 (min {min(times) * 1e3:.1f} ms)")

    first, curve = None, []
    for i in range(steps):
        outs = jitted(*state, jnp.asarray(batch()))
        loss, state = float(outs[0]), list(outs[1:])
        first = loss if first is None else first
        curve.append(loss)
        if i % 25 == 0 or i == steps - 1:
            print(f"step {i:4d} loss {loss:.4f}")
    last = statistics.mean(curve[-10:])
    print(f"first loss {first:.4f} (ln 256 = {math.log(256):.4f}); mean of last 10: {last:.4f}")
    return {"note": "measured by --check; time depends on the machine",
            "xla_cpu_step_ms_median": round(median * 1e3, 2),
            "train_seed": seed, "train_steps": steps, "first_loss": first,
            "mean_loss_last_10_steps": last}


if __name__ == "__main__":
    main()
