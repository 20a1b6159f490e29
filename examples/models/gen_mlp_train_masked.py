"""Regenerates mlp_train_masked.hlo: one SGD step of the 2-layer tanh MLP with a masked
mean loss (padded rows have mask 0), with a symbolic batch dimension `?`.

XLA's HLO cannot express a `jax.export` of this step (its dynamic broadcasts have no HLO
form), so the step is lowered at batch 13 and every batch dimension (the only dims equal to
13) is written as `?`. The runtime specializes the module per batch size; the loss has no
batch-size constant (it divides by the mask's sum), so every specialization is exact.

Run with the oracle's Python: ~/.cache/xla-oracle-venv/bin/python gen_mlp_train_masked.py
"""
import pathlib
import re

import jax
import jax.numpy as jnp
from jax._src.lib import xla_client as xc


def loss(params, x, y, mask):
    w1, b1, w2, b2 = params
    h = jnp.tanh(x @ w1 + b1)
    logits = h @ w2 + b2
    logp = jax.nn.log_softmax(logits)
    per = -jnp.sum(logp * jax.nn.one_hot(y, logits.shape[-1]), axis=-1)
    return jnp.sum(per * mask) / jnp.maximum(jnp.sum(mask), 1.0)


def step(params, x, y, mask):
    l, g = jax.value_and_grad(loss)(params, x, y, mask)
    return l, tuple(p - 0.1 * d for p, d in zip(params, g))


def main():
    f32, b = jnp.float32, 13
    params = (jnp.zeros((24, 32), f32), jnp.zeros((32,), f32), jnp.zeros((32, 8), f32), jnp.zeros((8,), f32))
    args = (params, jnp.zeros((b, 24), f32), jnp.zeros((b,), jnp.int32), jnp.zeros((b,), f32))
    text = jax.jit(step).lower(*args).as_text(dialect="hlo")
    text = xc.hlo.hlo_module_from_text(text).to_string()
    text = re.sub(r"\[13([,\]])", r"[?\1", text)
    out = pathlib.Path(__file__).resolve().with_name("mlp_train_masked.hlo")
    out.write_text(text)
    print(f"wrote {out} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
