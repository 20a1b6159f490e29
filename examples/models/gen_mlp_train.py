"""Regenerates mlp_train.hlo: one SGD step of a 2-layer tanh MLP with softmax
cross-entropy, lowered by JAX and printed in XLA's dump style (metadata, stack frames),
plus seeded inputs (mlp_train.inputs.npz, p0..p5) and XLA's outputs for them
(mlp_train.outputs.npz, o0..o4).

Run with the oracle's Python: ~/.cache/xla-oracle-venv/bin/python gen_mlp_train.py
"""
import pathlib

import numpy as np
import jax
import jax.numpy as jnp
from jax._src.lib import xla_client as xc


def loss(params, x, y):
    w1, b1, w2, b2 = params
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    logp = jax.nn.log_softmax(logits)
    return -jnp.mean(jnp.sum(logp * jax.nn.one_hot(y, logits.shape[-1]), axis=-1))


def step(params, x, y):
    l, g = jax.value_and_grad(loss)(params, x, y)
    return l, tuple(p - 0.05 * d for p, d in zip(params, g))


def main():
    f32 = jnp.float32
    params = (jnp.zeros((24, 32), f32), jnp.zeros((32,), f32), jnp.zeros((32, 8), f32), jnp.zeros((8,), f32))
    x, y = jnp.zeros((16, 24), f32), jnp.zeros((16,), jnp.int32)
    text = jax.jit(step).lower(params, x, y).as_text(dialect="hlo", debug_info=True)
    text = xc.hlo.hlo_module_from_text(text).to_string()
    here = pathlib.Path(__file__).resolve()
    text = text.replace(str(here), "examples/models/" + here.name)  # no machine paths in the file
    out = here.with_name("mlp_train.hlo")
    out.write_text(text)
    print(f"wrote {out} ({len(text)} bytes)")

    rng = np.random.default_rng(20261122)
    inputs = [
        (rng.standard_normal((24, 32)) * 0.2).astype(np.float32),
        np.zeros((32,), np.float32),
        (rng.standard_normal((32, 8)) * 0.2).astype(np.float32),
        np.zeros((8,), np.float32),
        rng.standard_normal((16, 24)).astype(np.float32),
        rng.integers(0, 8, (16,)).astype(np.int32),
    ]
    loss_value, new_params = jax.jit(step)(tuple(inputs[:4]), inputs[4], inputs[5])
    outputs = [np.asarray(loss_value)] + [np.asarray(p) for p in new_params]
    np.savez(here.with_name("mlp_train.inputs.npz"), **{f"p{i}": a for i, a in enumerate(inputs)})
    np.savez(here.with_name("mlp_train.outputs.npz"), **{f"o{i}": a for i, a in enumerate(outputs)})
    print(f"wrote inputs and outputs (loss {float(loss_value):.6f})")


if __name__ == "__main__":
    main()
