"""JAX training steps at published configurations, lowered to HLO from shapes alone.

Each builder takes a row of `../shared/tpu-published/rows.json` (its `model` and
`parallelism`), builds the training step as a JAX program over `jax.ShapeDtypeStruct`
arguments (nothing is allocated), lowers it with GSPMD shardings over the row's device
count and returns the unpartitioned HLO text (with `sharding={...}` annotations) plus
what `hloc validate` needs to turn a simulated step time into the row's metric:

    {"hlo": str, "devices": int, "model_flops_per_device": float,
     "params": int, "tokens_per_device": int, "flops_convention": str}

Three families, after the programs the published rows ran:
  * `decoder-lm`: MaxText's DecoderLayer as of 2023-12 (one RMSNorm, attention and a relu
    MLP in parallel from it, both added to the residual; RoPE; causal attention; logits
    through the shared embedding), scanned over layers with full rematerialization, AdamW,
    FSDP over `ici_fsdp` devices (weights sharded along `embed`, batch along `fsdp`, as
    MaxText's logical-axis rules map them), tensor parallelism over `ici_tensor`, and data
    parallelism over `dcn_data` slices (the outermost mesh axis: weights replicated across
    slices, the batch split over slices and `fsdp`, as MaxText's `dcn_data_parallelism`).
    A row whose block names SwiGLU or multi-query attention gets them (PaLM); parallelism
    written per pod (PaLM's paper) is read by `normalize_parallelism`.
  * `bert-encoder`: BERT pre-training (post-LN encoder, masked-LM head on
    `max_predictions` gathered positions through the tied word embedding, next-sentence
    head), LAMB, data parallel; layers unrolled and attention written as the MLPerf
    v1.0 TPU submission's `modeling.py` writes it (normalization after the context).
  * `resnet50-v1.5`: ResNet-50 v1.5 (stride in the 3x3 convolution), NHWC, batch-norm on
    batch statistics, SGD with momentum, data parallel.

Usage (in the oracle venv; the device count is set before jax is imported):
    python models.py OUT.hlo --rows ROWS_JSON --row NAME [--meta OUT.json]
    python models.py OUT.hlo --config '{"model": {...}, "parallelism": {...}}' [--xla-opt XLA.hlo]

With `--tpu TOPOLOGY --tpu-out DIR` (in the libtpu venv, `tools/models/setup_libtpu.sh`)
the same step is built over the devices of a TPU topology and compiled ahead of time by
XLA's own TPU compiler; DIR receives the per-chip scheduled program (`program.hlo`) and
`xla_tpu.json` (memory and cost analyses, compile time, each partition's device):
    python models.py --rows ROWS_JSON --row NAME --tpu auto --tpu-out DIR
"""
import json
import math
import os
import re
import sys
import time


def _row(rows_path, name):
    rows = json.load(open(rows_path))
    by_name = {r['name']: r for r in rows}
    if name not in by_name:
        raise SystemExit(f'no row named {name!r} in {rows_path}')
    r = dict(by_name[name])
    if 'same_as' in r:
        base = by_name[r['same_as']]
        for k, v in base.items():
            r.setdefault(k, v)
    return r


# ------------------------------------------------------------------ decoder LM
def decoder_lm(jax, jnp, row, mesh, P, NS, layers_override=None):
    m = row['model']
    par = row['parallelism']
    L = layers_override or m['layers']
    E, H, D, F, V, S = m['emb'], m['heads'], m['head_dim'], m['mlp'], m['vocab'], m['seq']
    fsdp, dcn = mesh.shape['fsdp'], mesh.shape['dcn']
    # The batch is split over the slices and the fsdp axis: tensor-parallel devices share
    # a batch.
    B = par['per_device_batch'] * fsdp * dcn
    batch = ('dcn', 'fsdp')
    act = jnp.bfloat16
    wdt = jnp.float32

    # The block as the row describes it: MaxText's (relu MLP, multi-head attention) unless
    # it names a SwiGLU MLP (PaLM: swish(x wi_0) * (x wi_1)) or multi-query attention (one
    # key/value head shared by every query head, replicated over `tensor`).
    block = str(m.get('block', '')).lower()
    swiglu = 'swiglu' in block
    kv = 1 if ('multi-query' in block or 'multiquery' in block) else H
    kv_spec = P(None, 'fsdp', 'tensor', None) if kv == H else P(None, 'fsdp', None, None)

    # The vocabulary is padded to a multiple of 128 x the tensor axis, as Megatron-LM
    # pads it (`make-vocab-size-divisible-by` 128 times the tensor-parallel size), so the
    # embedding splits evenly; FLOPs count the real vocabulary.
    V_real, pad = V, 128 * mesh.shape['tensor']
    V = -(-V // pad) * pad

    # MaxText's logical-axis rules: embed -> fsdp; heads, mlp, vocab -> tensor.
    layer_shapes = {
        'pre_norm': ((L, E), P(None, None)),
        'query': ((L, E, H, D), P(None, 'fsdp', 'tensor', None)),
        'key': ((L, E, kv, D), kv_spec),
        'value': ((L, E, kv, D), kv_spec),
        'out': ((L, H, D, E), P(None, 'tensor', None, 'fsdp')),
        'wi': ((L, E, F), P(None, 'fsdp', 'tensor')),
        'wo': ((L, F, E), P(None, 'tensor', 'fsdp')),
    }
    if swiglu:
        layer_shapes['wi_gate'] = ((L, E, F), P(None, 'fsdp', 'tensor'))
    shapes = {
        'embedding': ((V, E), P('tensor', 'fsdp')),
        'decoder_norm': ((E,), P(None)),
        'layers': layer_shapes,
    }
    is_leaf = lambda t: isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], P)
    params = jax.tree.map(lambda t: jax.ShapeDtypeStruct(t[0], wdt), shapes, is_leaf=is_leaf)
    pspec = jax.tree.map(lambda t: t[1], shapes, is_leaf=is_leaf)
    n_params = sum(math.prod(t[0]) for t in jax.tree.leaves(shapes, is_leaf=is_leaf))
    n_params -= (V - V_real) * E

    def rms_norm(x, scale):
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
        return (y * scale).astype(act)

    def rope(x, pos):
        half = D // 2
        freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) * 2.0 / D))
        ang = pos[:, None].astype(jnp.float32) * freq[None, :]          # [S, half]
        sin, cos = jnp.sin(ang)[None, :, None, :], jnp.cos(ang)[None, :, None, :]
        x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(act)

    def constrain(x):
        return jax.lax.with_sharding_constraint(x, NS(mesh, P(batch, *([None] * (x.ndim - 1)))))

    def layer(x, w):
        x = constrain(x)
        lnx = rms_norm(x, w['pre_norm'])
        pos = jnp.arange(S)
        q = jnp.einsum('bse,ehd->bshd', lnx, w['query'].astype(act))
        k = jnp.einsum('bse,ehd->bshd', lnx, w['key'].astype(act))
        v = jnp.einsum('bse,ehd->bshd', lnx, w['value'].astype(act))
        q, k = rope(q, pos), rope(k, pos)
        q = q / jnp.sqrt(jnp.asarray(D, act))
        if kv != H:
            k = jnp.broadcast_to(k, q.shape)
            v = jnp.broadcast_to(v, q.shape)
        logits = jnp.einsum('bqhd,bkhd->bhqk', q, k).astype(jnp.float32)
        causal = jnp.arange(S)[:, None] >= jnp.arange(S)[None, :]
        logits = jnp.where(causal[None, None], logits, jnp.float32(-1e9))
        probs = jax.nn.softmax(logits, axis=-1).astype(act)
        o = jnp.einsum('bhqk,bkhd->bqhd', probs, v)
        attn = jnp.einsum('bshd,hde->bse', o, w['out'].astype(act))
        h = jnp.einsum('bse,ef->bsf', lnx, w['wi'].astype(act))
        if swiglu:
            h = jax.nn.silu(jnp.einsum('bse,ef->bsf', lnx, w['wi_gate'].astype(act))) * h
        else:
            h = jax.nn.relu(h)
        mlp = jnp.einsum('bsf,fe->bse', h, w['wo'].astype(act))
        return constrain(x + attn + mlp), None

    remat = {'full': jax.checkpoint_policies.nothing_saveable,
             'minimal': jax.checkpoint_policies.checkpoint_dots}.get(m.get('remat', 'full'))
    body = jax.checkpoint(layer, policy=remat) if remat else layer

    def loss_fn(p, tokens, targets):
        x = p['embedding'].astype(act)[tokens]
        x, _ = jax.lax.scan(body, x, p['layers'])
        x = rms_norm(x, p['decoder_norm'])
        logits = jnp.einsum('bse,ve->bsv', x, p['embedding'].astype(act)).astype(jnp.float32)
        logz = jax.nn.logsumexp(logits, axis=-1)
        tgt = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return jnp.mean(logz - tgt)

    def step(p, mu, nu, count, tokens, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, targets)
        p, mu, nu, count = adamw(jax, jnp, p, g, mu, nu, count)
        return p, mu, nu, count, loss

    tok = jax.ShapeDtypeStruct((B, S), jnp.int32)
    cnt = jax.ShapeDtypeStruct((), jnp.int32)
    data = P(batch, None)
    in_specs = (pspec, pspec, pspec, P(), data, data)
    out_specs = (pspec, pspec, pspec, P(), P())
    args = (params, params, params, cnt, tok, tok)
    pdb = par['per_device_batch']
    if row.get('metric') == 'mfu_pct':
        # MFU as PaLM defines it (Chowdhery et al. 2022, Appendix B): 6N + 12 L H Q T FLOPs
        # per token, causal attention counted whole; tokens per device = the batch of its
        # data-parallel group over the devices that share it (`tensor`).
        tokens = S * pdb / mesh.shape['tensor']
        flops = (6 * n_params + 12 * m['layers'] * H * D * S) * tokens
        conv = ('(6 * params + 12 * layers * heads * head_dim * seq) * tokens per device '
                '(PaLM, Appendix B)')
    else:
        # MaxText train.py calculate_training_tflops (2023-12), per device.
        flops = 6 * n_params * S * pdb + 12 * H * m['layers'] * D * S * S * pdb / 2
        conv = ('6 * params * seq * per_device_batch + 12 * heads * layers * head_dim * seq^2 '
                '* per_device_batch / 2 (MaxText calculate_training_tflops, 2023-12)')
    return step, args, in_specs, out_specs, dict(params=n_params, tokens_per_device=S * pdb,
                                                  model_flops_per_device=flops,
                                                  flops_convention=conv)


def adamw(jax, jnp, p, g, mu, nu, count, lr=1e-4, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
    count = count + 1
    c = count.astype(jnp.float32)
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, mu, g)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, g)
    bc1, bc2 = 1 - b1 ** c, 1 - b2 ** c
    p = jax.tree.map(lambda w, m, v: w - lr * ((m / bc1) / (jnp.sqrt(v / bc2) + eps) + wd * w),
                     p, mu, nu)
    return p, mu, nu, count


# ------------------------------------------------------------------ BERT
def bert(jax, jnp, row, mesh, P, NS, layers_override=None):
    m = row['model']
    par = row['parallelism']
    L = layers_override or m['layers']
    Hd, H, F, V, S, M = m['hidden'], m['heads'], m['ff'], m['vocab'], m['seq'], m['max_predictions']
    D = Hd // H
    dp = mesh.shape['data']
    B = par['per_device_batch'] * dp
    act = jnp.bfloat16 if m.get('activations') == 'bf16' else jnp.float32
    f32 = jnp.float32
    layer_shapes = {
        'qkv': (L, Hd, 3 * Hd), 'qkv_b': (L, 3 * Hd), 'out': (L, Hd, Hd), 'out_b': (L, Hd),
        'ln1_g': (L, Hd), 'ln1_b': (L, Hd), 'ff1': (L, Hd, F), 'ff1_b': (L, F),
        'ff2': (L, F, Hd), 'ff2_b': (L, Hd), 'ln2_g': (L, Hd), 'ln2_b': (L, Hd),
    }
    shapes = {
        'word': (V, Hd), 'pos': (S, Hd), 'type': (2, Hd), 'emb_ln_g': (Hd,), 'emb_ln_b': (Hd,),
        'layers': layer_shapes,
        'mlm_dense': (Hd, Hd), 'mlm_dense_b': (Hd,), 'mlm_ln_g': (Hd,), 'mlm_ln_b': (Hd,),
        'mlm_bias': (V,), 'pool': (Hd, Hd), 'pool_b': (Hd,), 'nsp': (Hd, 2), 'nsp_b': (2,),
    }
    is_leaf = lambda t: isinstance(t, tuple) and all(isinstance(d, int) for d in t)
    params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, f32), shapes, is_leaf=is_leaf)
    pspec = jax.tree.map(lambda s: P(), shapes, is_leaf=is_leaf)
    n_params = sum(math.prod(s) for s in jax.tree.leaves(shapes, is_leaf=is_leaf))

    def ln(x, g, b):
        xf = x.astype(f32)
        mu = jnp.mean(xf, -1, keepdims=True)
        var = jnp.mean(jnp.square(xf - mu), -1, keepdims=True)
        return ((xf - mu) * jax.lax.rsqrt(var + 1e-12) * g + b).astype(act)

    def layer(x, w):
        qkv = jnp.einsum('bsh,hk->bsk', x, w['qkv'].astype(act)) + w['qkv_b'].astype(act)
        q, k, v = jnp.split(qkv.reshape(B, S, 3, H, D), 3, axis=2)
        q, k, v = q[:, :, 0], k[:, :, 0], v[:, :, 0]
        # Attention as the MLPerf v1.0 TPU submission's `modeling.py` writes it: scores in
        # the activation type (the query pre-scaled), exp in f32 after subtracting the
        # row max (no gradient through it), the unnormalized probabilities cast back, and
        # the normalization applied to the context, which is 1/seq the size. Dropout is
        # left out (no random bits are drawn in these shapes-only programs).
        s = jnp.einsum('bqhd,bkhd->bhqk', q * (1.0 / math.sqrt(D)), k).astype(f32)
        e = jnp.exp(s - jax.lax.stop_gradient(jnp.max(s, -1, keepdims=True)))
        total = jnp.sum(e, -1)                                                   # [B, H, S]
        o = jnp.einsum('bhqk,bkhd->bqhd', e.astype(act), v)
        o = (o / jnp.transpose(total, (0, 2, 1))[..., None].astype(act)).reshape(B, S, Hd)
        o = jnp.einsum('bsh,hk->bsk', o, w['out'].astype(act)) + w['out_b'].astype(act)
        x = ln(x + o, w['ln1_g'], w['ln1_b'])
        h = jax.nn.gelu(jnp.einsum('bsh,hf->bsf', x, w['ff1'].astype(act)) + w['ff1_b'].astype(act))
        h = jnp.einsum('bsf,fh->bsh', h, w['ff2'].astype(act)) + w['ff2_b'].astype(act)
        return ln(x + h, w['ln2_g'], w['ln2_b']), None

    def loss_fn(p, ids, types, mpos, mids, mw, nsp_label):
        x = p['word'][ids] + p['pos'][None] + p['type'][types]
        x = ln(x, p['emb_ln_g'], p['emb_ln_b'])
        # Unrolled, as the reference's `transformer_model` loops over its layers: the
        # backward pass reads each layer's saved activations where they were written
        # (a scan would copy them into stacked buffers and back).
        for i in range(L):
            x, _ = layer(x, jax.tree.map(lambda a: a[i], p['layers']))
        sel = jnp.take_along_axis(x, mpos[..., None], axis=1)                    # [B, M, Hd]
        h = jax.nn.gelu(jnp.einsum('bmh,hk->bmk', sel, p['mlm_dense'].astype(act))
                        + p['mlm_dense_b'].astype(act))
        h = ln(h, p['mlm_ln_g'], p['mlm_ln_b'])
        logits = (jnp.einsum('bmh,vh->bmv', h, p['word'].astype(act)).astype(f32)
                  + p['mlm_bias'])
        logp = jax.nn.log_softmax(logits, -1)
        nll = -jnp.take_along_axis(logp, mids[..., None], -1)[..., 0]
        mlm = jnp.sum(nll * mw) / (jnp.sum(mw) + 1e-5)
        pooled = jnp.tanh(x[:, 0].astype(f32) @ p['pool'] + p['pool_b'])
        nl = jax.nn.log_softmax(pooled @ p['nsp'] + p['nsp_b'], -1)
        nsp = -jnp.mean(jnp.take_along_axis(nl, nsp_label[:, None], -1))
        return mlm + nsp

    def step(p, mu, nu, count, ids, types, mpos, mids, mw, nsp_label):
        loss, g = jax.value_and_grad(loss_fn)(p, ids, types, mpos, mids, mw, nsp_label)
        p, mu, nu, count = lamb(jax, jnp, p, g, mu, nu, count)
        return p, mu, nu, count, loss

    i32 = jnp.int32
    sd = jax.ShapeDtypeStruct
    args = (params, params, params, sd((), i32), sd((B, S), i32), sd((B, S), i32),
            sd((B, M), i32), sd((B, M), i32), sd((B, M), f32), sd((B,), i32))
    d2, d1 = P('data', None), P('data')
    in_specs = (pspec, pspec, pspec, P(), d2, d2, d2, d2, d2, d1)
    out_specs = (pspec, pspec, pspec, P(), P())
    pdb = par['per_device_batch']
    flops = 6 * n_params * S * pdb
    return step, args, in_specs, out_specs, dict(
        params=n_params, tokens_per_device=S * pdb, model_flops_per_device=flops,
        flops_convention='6 * params * seq * per_device_batch (the metric is step time)')


def lamb(jax, jnp, p, g, mu, nu, count, lr=1e-4, b1=0.9, b2=0.999, eps=1e-6, wd=0.01):
    count = count + 1
    c = count.astype(jnp.float32)
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, mu, g)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, g)

    def upd(w, m, v):
        u = (m / (1 - b1 ** c)) / (jnp.sqrt(v / (1 - b2 ** c)) + eps) + wd * w
        wn, un = jnp.linalg.norm(w), jnp.linalg.norm(u)
        ratio = jnp.where((wn > 0) & (un > 0), wn / un, 1.0)
        return w - lr * ratio * u
    return jax.tree.map(upd, p, mu, nu), mu, nu, count


# ------------------------------------------------------------------ ResNet-50 v1.5
def resnet50(jax, jnp, row, mesh, P, NS, layers_override=None):
    m = row['model']
    par = row['parallelism']
    dp = mesh.shape['data']
    B = par['per_device_batch'] * dp
    img = m.get('image', 224)
    classes = m.get('classes', 1000)
    act = jnp.bfloat16 if m.get('activations') == 'bf16' else jnp.float32
    f32 = jnp.float32
    # `width` scales every channel count (1: ResNet-50 itself; small test versions use less).
    wide = lambda c: max(1, int(c * m.get('width', 1)))
    stem = wide(64)
    stages = [(3, wide(64)), (4, wide(128)), (6, wide(256)), (3, wide(512))]
    if layers_override:
        stages = [(1, w) for _, w in stages]
    # `stages` keeps the first N stages (small test versions: two already have the strided
    # block with its projection shortcut).
    stages = stages[:int(m.get('stages', len(stages)))]

    shapes = {'stem': {'w': (7, 7, 3, stem), 'bn': stem}, 'blocks': [],
              'fc': {'w': (4 * stages[-1][1], classes), 'b': (classes,)}}
    cin = stem
    for si, (n, w) in enumerate(stages):
        for bi in range(n):
            stride = 2 if (bi == 0 and si > 0) else 1
            blk = {'c1': (1, 1, cin, w), 'c2': (3, 3, w, w), 'c3': (1, 1, w, 4 * w),
                   'bn1': w, 'bn2': w, 'bn3': 4 * w, 'stride': stride}
            if bi == 0:
                blk['proj'] = (1, 1, cin, 4 * w)
                blk['bnp'] = 4 * w
            shapes['blocks'].append(blk)
            cin = 4 * w

    sd = jax.ShapeDtypeStruct
    params, state, n_params = {}, {}, 0

    def add_bn(dst_p, dst_s, key, c):
        nonlocal n_params
        dst_p[key] = {'g': sd((c,), f32), 'b': sd((c,), f32)}
        dst_s[key] = {'mean': sd((c,), f32), 'var': sd((c,), f32)}
        n_params += 2 * c

    def add_w(dst, key, s):
        nonlocal n_params
        dst[key] = sd(s, f32)
        n_params += math.prod(s)

    params['stem'], state['stem'] = {}, {}
    add_w(params['stem'], 'w', shapes['stem']['w'])
    add_bn(params['stem'], state['stem'], 'bn', stem)
    params['blocks'], state['blocks'] = [], []
    for blk in shapes['blocks']:
        bp, bs = {}, {}
        for k in ('c1', 'c2', 'c3', 'proj'):
            if k in blk:
                add_w(bp, k, blk[k])
        for k in ('bn1', 'bn2', 'bn3', 'bnp'):
            if k in blk:
                add_bn(bp, bs, k, blk[k])
        params['blocks'].append(bp)
        state['blocks'].append(bs)
    params['fc'] = {}
    add_w(params['fc'], 'w', shapes['fc']['w'])
    add_w(params['fc'], 'b', shapes['fc']['b'])

    def conv(x, w, stride):
        k = w.shape[0]
        pad = ((k - 1) // 2, k // 2) if stride == 1 else ((k - 1) // 2, (k - 1) // 2)
        return jax.lax.conv_general_dilated(x, w.astype(act), (stride, stride), (pad, pad),
                                            dimension_numbers=('NHWC', 'HWIO', 'NHWC'))

    def bn(x, p, s, new_state):
        xf = x.astype(f32)
        mean = jnp.mean(xf, (0, 1, 2))
        var = jnp.mean(jnp.square(xf - mean), (0, 1, 2))
        new_state['mean'] = 0.9 * s['mean'] + 0.1 * mean
        new_state['var'] = 0.9 * s['var'] + 0.1 * var
        return ((xf - mean) * jax.lax.rsqrt(var + 1e-5) * p['g'] + p['b']).astype(act)

    def forward(p, s, x):
        ns = {'stem': {'bn': {}}, 'blocks': []}
        x = jax.nn.relu(bn(conv(x.astype(act), p['stem']['w'], 2), p['stem']['bn'],
                           s['stem']['bn'], ns['stem']['bn']))
        x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1),
                                  (1, 2, 2, 1), ((0, 0), (1, 1), (1, 1), (0, 0)))
        for blk, bp, bs in zip(shapes['blocks'], p['blocks'], s['blocks']):
            st = blk['stride']
            n = {k: {} for k in bs}
            h = jax.nn.relu(bn(conv(x, bp['c1'], 1), bp['bn1'], bs['bn1'], n['bn1']))
            h = jax.nn.relu(bn(conv(h, bp['c2'], st), bp['bn2'], bs['bn2'], n['bn2']))
            h = bn(conv(h, bp['c3'], 1), bp['bn3'], bs['bn3'], n['bn3'])
            sc = bn(conv(x, bp['proj'], st), bp['bnp'], bs['bnp'], n['bnp']) if 'proj' in bp else x
            x = jax.nn.relu(h + sc)
            ns['blocks'].append(n)
        x = jnp.mean(x.astype(f32), (1, 2))
        return x @ p['fc']['w'] + p['fc']['b'], ns

    def loss_fn(p, s, images, labels):
        logits, ns = forward(p, s, images)
        logp = jax.nn.log_softmax(logits, -1)
        loss = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], -1))
        return loss, ns

    def step(p, mom, s, images, labels):
        (loss, ns), g = jax.value_and_grad(loss_fn, has_aux=True)(p, s, images, labels)
        mom = jax.tree.map(lambda m, g, w: 0.9 * m + g + 1e-4 * w, mom, g, p)
        p = jax.tree.map(lambda w, m: w - 0.1 * m, p, mom)
        return p, mom, ns, loss

    rep = lambda t: jax.tree.map(lambda _: P(), t)
    args = (params, params, state, sd((B, img, img, 3), f32), sd((B,), jnp.int32))
    in_specs = (rep(params), rep(params), rep(state), P('data', None, None, None), P('data'))
    out_specs = (rep(params), rep(params), rep(state), P())
    pdb = par['per_device_batch']
    # Forward multiply-adds of ResNet-50 v1.5 at 224x224: 4.1e9 (He et al. 2016, Table 1,
    # counted for v1.5's stride placement); a training step is about 3x the forward pass.
    flops = 3 * 2 * 4.1e9 * (img / 224) ** 2 * pdb
    return step, args, in_specs, out_specs, dict(
        params=n_params, tokens_per_device=pdb, model_flops_per_device=flops,
        flops_convention='3 * 2 * 4.1e9 multiply-adds per 224x224 image (the metric is step time)')


FAMILIES = {'decoder-lm': decoder_lm, 'bert-encoder': bert, 'resnet50-v1.5': resnet50}
# Mesh axes per family: (axis name, parallelism key), outermost first.
MESH_AXES = {'decoder-lm': (('dcn', 'dcn_data'), ('fsdp', 'ici_fsdp'), ('tensor', 'ici_tensor')),
             'bert-encoder': (('data', 'data'),),
             'resnet50-v1.5': (('data', 'data'),)}


def normalize_parallelism(row):
    """The row's parallelism in the mesh keys the generators know. Rows may state it as
    PaLM's paper does: `pods` (data parallel across pods over the data-center network),
    `per_pod` ("12-way model parallel x 256-way fully sharded data parallel") and
    `global_batch`; those become `dcn_data`/`slices`, `ici_tensor`, `ici_fsdp` and
    `per_device_batch` (the batch split over the pods and the FSDP axis). Text that does
    not say both ways is refused."""
    par = dict(row['parallelism'])
    if 'per_pod' in par:
        text = str(par.pop('per_pod')).lower()
        tensor = re.search(r'(\d+)-way model parallel', text)
        fsdp = re.search(r'(\d+)-way (?:fully sharded )?data parallel', text)
        if not (tensor and fsdp):
            raise SystemExit(f'row {row.get("name")}: cannot read the per-pod parallelism '
                             f'{text!r} (expected "N-way model parallel x M-way fully sharded '
                             'data parallel")')
        par['ici_tensor'], par['ici_fsdp'] = int(tensor.group(1)), int(fsdp.group(1))
    if 'pods' in par:
        par['dcn_data'] = par['slices'] = int(par.pop('pods'))
    if 'global_batch' in par:
        split = int(par.get('dcn_data', 1)) * int(par.get('ici_fsdp', 1))
        gb = int(par.pop('global_batch'))
        if gb % split:
            raise SystemExit(f'row {row.get("name")}: global batch {gb} does not split over '
                             f'{split} data-parallel groups')
        par['per_device_batch'] = gb // split
    return dict(row, parallelism=par)


def _check(row):
    """The row in the generators' terms (parallelism normalized and every key checked),
    its family and mesh axes, the mesh shape and its device count."""
    fam = row['model']['family']
    if fam not in FAMILIES:
        raise SystemExit(f'row {row["name"]}: no generator for model family {fam!r}')
    row = normalize_parallelism(row)
    axes = MESH_AXES[fam]
    par = row['parallelism']
    # Every parallelism key must be one this family maps onto its mesh (after
    # `normalize_parallelism`): a row written in other terms (pipeline stages, say) is
    # refused, not silently built on one device.
    known = {key for _, key in axes} | {'per_device_batch', 'slices'}
    unknown = sorted(set(par) - known)
    if unknown:
        raise SystemExit(f'row {row.get("name")}: the {fam} generator does not understand the '
                         f'parallelism keys {", ".join(unknown)} (it knows {", ".join(sorted(known))})')
    if int(par.get('slices', 1)) != int(par.get('dcn_data', 1)):
        raise SystemExit(f'row {row.get("name")}: slices must equal dcn_data (data parallel '
                         f'across slices is the only multi-slice form built)')
    sizes = [int(par.get(key, 1)) for _, key in axes]
    n = math.prod(sizes)
    if 'chips' in row and int(row['chips']) != n:
        raise SystemExit(f'row {row.get("name")}: the mesh has {n} devices, the row {row["chips"]} chips')
    return fam, row, axes, sizes, n


def _jax():
    import jax
    import jax.numpy as jnp
    import numpy as np
    jax.config.update('jax_use_shardy_partitioner', False)
    return jax, jnp, np


def _lower(jax, jnp, fam, row, mesh, layers_override):
    """The row's step jitted with its shardings over `mesh` and lowered, with the
    abstract arguments, the builder's metadata and the arguments' shardings."""
    from jax.sharding import NamedSharding as NS, PartitionSpec as P
    fn, args, in_specs, out_specs, meta = FAMILIES[fam](jax, jnp, row, mesh, P, NS,
                                                        layers_override)
    to_ns = lambda tree: jax.tree.map(lambda s: NS(mesh, s), tree,
                                      is_leaf=lambda s: isinstance(s, P))
    jitted = jax.jit(fn, in_shardings=to_ns(in_specs), out_shardings=to_ns(out_specs),
                     donate_argnums=tuple(range(3)), keep_unused=True)
    return jitted.lower(*args), args, meta, to_ns(in_specs)


def build(row, layers_override=None, xla_opt=False, inputs=None):
    """The lowered step's HLO text and its metadata (`xla_opt`: also XLA's own
    partitioned, optimized per-device module, as `meta['xla_opt_hlo']`; `inputs`: a path
    where valid inputs are written, p0..pN in parameter order)."""
    fam, row, axes, sizes, n = _check(row)
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               f' --xla_force_host_platform_device_count={n}')
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    jax, jnp, np = _jax()
    from jax.sharding import Mesh
    mesh = Mesh(np.array(jax.devices()[:n]).reshape(sizes), tuple(a for a, _ in axes))
    lowered, args, meta, _ = _lower(jax, jnp, fam, row, mesh, layers_override)
    hlo = lowered.as_text(dialect='hlo')
    meta.update(devices=n, row=row['name'],
                slices=int(row['parallelism'].get('dcn_data', 1)))
    if xla_opt:
        meta['xla_opt_hlo'] = lowered.compile().as_text()
    if inputs:
        write_inputs(np, jax.tree.leaves(args), inputs)
    return hlo, meta


# ------------------------------------------------------------------ XLA's TPU compiler
# Cloud TPU's default slice shapes by chip count: 3-D tori for v4 and v5p, 2-D meshes for
# v2, v3, v5e and v6e (chips, not cores).
SLICES_3D = {4: '2x2x1', 8: '2x2x2', 16: '2x2x4', 32: '2x4x4', 64: '4x4x4', 128: '4x4x8',
             256: '4x8x8', 512: '8x8x8', 1024: '8x8x16', 2048: '8x16x16', 4096: '16x16x16',
             6144: '16x16x24'}
SLICES_2D = {4: '2x2', 8: '2x4', 16: '4x4', 32: '4x8', 64: '8x8', 128: '8x16', 256: '16x16'}
# The axis the batch is split over, per family: on chips of two cores that are two
# devices (v2, v3), it is split over the cores too.
BATCH_AXIS = {'decoder-lm': 'ici_fsdp', 'bert-encoder': 'data', 'resnet50-v1.5': 'data'}


def default_topology(row):
    """The row's `topology`, or the default slice shape of Cloud TPU for its chip count
    and generation (`v4:4x4x4` for 64 v4 chips)."""
    if row.get('topology'):
        return row['topology']
    chip, chips = str(row.get('chip', '')).lower(), int(row.get('chips', 0))
    shapes = SLICES_3D if chip in ('v4', 'v5p') else (
        SLICES_2D if chip in ('v2', 'v3', 'v5e', 'v6e') else None)
    if shapes is None:
        raise SystemExit(f'row {row.get("name")}: no default TPU topology for chip {chip!r} '
                         '(give --tpu GENERATION:SHAPE)')
    if chips not in shapes:
        raise SystemExit(f'row {row.get("name")}: no default {chip} slice of {chips} chips '
                         f'(known: {", ".join(map(str, shapes))}; give --tpu {chip}:SHAPE)')
    return f'{chip}:{shapes[chips]}'


def split_cores(row, fam, cores):
    """The row with its batch axis over every core of a chip whose cores are separate
    devices (v2, v3: two per chip): the axis `cores` times wider, the per-device batch
    `cores` times smaller, as the published runs fed each core."""
    par = dict(row['parallelism'])
    key = BATCH_AXIS[fam]
    pdb = int(par['per_device_batch'])
    if pdb % cores:
        raise SystemExit(f'row {row.get("name")}: a per-chip batch of {pdb} does not split over '
                         f'{cores} cores')
    par[key] = int(par.get(key, 1)) * cores
    par['per_device_batch'] = pdb // cores
    out = dict(row, parallelism=par)
    if 'chips' in row:
        out['chips'] = int(row['chips']) * cores
    return out


def tpu_mesh(np, devices, sizes, names):
    """The mesh over a topology's devices, and how it was laid out: MaxText's
    `create_device_mesh` (mesh axes on physical torus axes), the same allowed to split a
    physical axis, or the topology's device order when both refuse the shape."""
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh
    tries = [('mesh_utils.create_device_mesh', {}),
             ('mesh_utils.create_device_mesh(allow_split_physical_axes=True)',
              {'allow_split_physical_axes': True})]
    refusals = []
    for how, kw in tries:
        try:
            arr = mesh_utils.create_device_mesh(sizes, devices=devices, **kw)
            return Mesh(arr, names), how, refusals
        except Exception as e:  # noqa: BLE001 (any refusal falls back to the next layout)
            refusals.append(f'{how}: {type(e).__name__}: {str(e).splitlines()[0][:300]}')
    return Mesh(np.array(devices).reshape(sizes), names), 'device order', refusals


def build_tpu(row, topology, out_dir, layers_override=None):
    """Compiles the row's step with XLA's own TPU compiler (libtpu, ahead of time, no
    TPU needed) for `topology` (`auto`: `default_topology(row)`), and writes into
    `out_dir` the per-chip scheduled program (`program.hlo`) and `xla_tpu.json`: XLA's
    memory and cost analyses, compile time, and the device of every partition. A
    multi-slice row is skipped (`xla_tpu.json` says why). Returns the report."""
    os.makedirs(out_dir, exist_ok=True)
    report_path = os.path.join(out_dir, 'xla_tpu.json')
    program_path = os.path.join(out_dir, 'program.hlo')
    for stale in (report_path, program_path):
        if os.path.exists(stale):
            os.remove(stale)
    if topology in (None, '', 'auto'):
        topology = default_topology(row)
    fam, row, axes, sizes, n = _check(row)
    slices = int(row['parallelism'].get('dcn_data', 1))
    report = dict(row=row.get('name'), topology=topology)
    if slices > 1:
        report['skipped'] = (f'{slices} slices: XLA compiles for one slice\'s topology, and '
                             'multi-slice rows are not supported by --tpu')
        _write(report_path, json.dumps(report, indent=1))
        print(f'row {row.get("name")}: skipped: {report["skipped"]}', file=sys.stderr)
        return report
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    # No TPU is attached: libtpu's one-process-per-host lock guards nothing here, and
    # would refuse a second compilation running beside this one.
    os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
    jax, jnp, np = _jax()
    from jax.experimental import topologies
    kw = {'chip_config_name': 'megacore'} if topology.startswith('v4') else {}
    devices = topologies.get_topology_desc(platform='tpu', topology_name=topology,
                                           **kw).devices
    cores = len(devices) // n if n else 0
    if cores < 1 or len(devices) != cores * n:
        raise SystemExit(f'row {row.get("name")}: topology {topology} has {len(devices)} '
                         f'devices, the row {n} chips')
    if cores > 1:
        fam, row, axes, sizes, n = _check(split_cores(row, fam, cores))
    names = tuple(a for a, _ in axes)
    mesh, layout, refusals = tpu_mesh(np, devices, sizes, names)
    lowered, args, meta, shardings = _lower(jax, jnp, fam, row, mesh, layers_override)
    report.update(
        devices=len(devices), cores_per_chip=cores, chips=len(devices) // cores,
        device_kind=devices[0].device_kind, mesh_shape=dict(zip(names, sizes)),
        mesh_layout=layout, mesh_layout_refusals=refusals,
        # Per device (per core where a chip's cores are devices), as the builder counts.
        builder={k: meta[k] for k in ('params', 'tokens_per_device', 'model_flops_per_device')},
        # Partition i of the program runs on mesh.devices.flat[i].
        partitions=[dict(partition=i, id=int(d.id), coords=[int(c) for c in d.coords],
                         core_on_chip=int(getattr(d, 'core_on_chip', 0)))
                    for i, d in enumerate(mesh.devices.flat)])
    t = time.time()
    try:
        compiled = lowered.compile()
    except Exception as e:  # noqa: BLE001 (XLA's refusal is the result)
        msg = str(e).strip()
        report.update(error=f'{type(e).__name__}: {msg[:2000]}', compile_s=time.time() - t)
        # A step that does not fit the chip's HBM is refused before it is scheduled, with
        # what its temporaries need ("... HLO temporaries (42.43G) exceeds available HBM
        # (30.75G)", GiB): with the arguments' shards, that is XLA's HBM per device. (Its
        # limit cannot be raised past the chip's: `xla_tpu_max_hbm_size_mib` only lowers
        # it, and `xla_tpu_no_crash_on_oom` ends in "Invalid TPU program".)
        need = re.search(r'HLO temporaries \(([0-9.]+)G\)', msg)
        if need:
            arg = sum(math.prod(sh.shard_shape(a.shape)) * np.dtype(a.dtype).itemsize
                      for a, sh in zip(jax.tree.leaves(args), jax.tree.leaves(shardings)))
            temp = int(float(need.group(1)) * 2**30)
            report['memory'] = dict(
                argument_size_in_bytes=arg, temp_size_in_bytes=temp,
                hbm_per_device_bytes=arg + temp, hbm_per_chip_bytes=(arg + temp) * cores,
                source="XLA's refusal: the temporaries it names and the arguments' shards")
        _write(report_path, json.dumps(report, indent=1))
        raise SystemExit(f'row {row.get("name")}: XLA TPU compilation failed: '
                         f'{msg.splitlines()[0][:500]}')
    compile_s = time.time() - t
    _write(program_path, compiled.as_text())
    ma = compiled.memory_analysis()
    mem = {k: int(getattr(ma, k)) for k in (
        'argument_size_in_bytes', 'output_size_in_bytes', 'alias_size_in_bytes',
        'temp_size_in_bytes', 'generated_code_size_in_bytes', 'peak_memory_in_bytes')
        if hasattr(ma, k)}
    # What one device holds at once: its arguments, its outputs that do not reuse an
    # argument's buffer, and the temporaries (XLA's own buffer assignment).
    mem['hbm_per_device_bytes'] = (mem['argument_size_in_bytes'] + mem['output_size_in_bytes']
                                   - mem['alias_size_in_bytes'] + mem['temp_size_in_bytes'])
    mem['hbm_per_chip_bytes'] = mem['hbm_per_device_bytes'] * cores
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    cost = {k.replace(' ', '_'): float(ca[k]) for k in
            ('flops', 'bytes accessed', 'transcendentals', 'optimal_seconds') if k in ca}
    report.update(compile_s=compile_s, memory=mem, cost=cost)
    _write(report_path, json.dumps(report, indent=1))
    return report


def write_inputs(np, leaves, path):
    """Valid inputs for a small test run: floats |N(0, 0.05)| (optimizer second moments
    and batch-norm variances must not be negative), integers 0 or 1 (in range for every
    token, label, type and position), scalars (the step count) 0."""
    rng = np.random.default_rng(0)
    arrays = {}
    for i, leaf in enumerate(leaves):
        dt = np.dtype(leaf.dtype)
        if leaf.shape == ():
            a = np.zeros((), dt)
        elif np.issubdtype(dt, np.integer):
            a = rng.integers(0, 2, leaf.shape).astype(dt)
        else:
            a = np.abs(rng.normal(0, 0.05, leaf.shape)).astype(np.float32).astype(dt)
        arrays[f'p{i}'] = a
    tmp = path + '.tmp.npz'
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


def _write(path, text):
    """Atomically: a temporary file beside `path`, then renamed."""
    tmp = path + '.tmp'
    with open(tmp, 'w') as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('out', nargs='?', help='where the HLO text goes (not with --tpu)')
    ap.add_argument('--rows', help='rows.json of published measurements')
    ap.add_argument('--row', help='the row to build (with --rows)')
    ap.add_argument('--config', help='a row as JSON (model, parallelism), instead of --rows/--row')
    ap.add_argument('--meta', help='where the metadata JSON goes')
    ap.add_argument('--layers', type=int, help='override the layer count (small test versions)')
    ap.add_argument('--xla-opt', help="also write XLA's own partitioned, optimized module here")
    ap.add_argument('--inputs', help='also write valid inputs here (.npz, p0..pN; small sizes)')
    ap.add_argument('--tpu', metavar='TOPOLOGY',
                    help="compile with XLA's TPU compiler (libtpu) for this topology "
                         "(v4:4x4x4, v5e:16x16, v5p:8x8x8; auto: the row's `topology` or "
                         "Cloud TPU's default slice for its chips); needs --tpu-out")
    ap.add_argument('--tpu-out', metavar='DIR',
                    help='with --tpu: where program.hlo and xla_tpu.json go')
    a = ap.parse_args(argv)
    if a.config:
        row = json.loads(a.config)
        row.setdefault('name', 'config')
    elif a.rows and a.row:
        row = _row(a.rows, a.row)
    else:
        ap.error('give --rows and --row, or --config')
    if a.tpu:
        if not a.tpu_out:
            ap.error('--tpu needs --tpu-out DIR')
        if a.out or a.meta or a.xla_opt or a.inputs:
            ap.error('--tpu writes only into --tpu-out (no OUT, --meta, --xla-opt, --inputs)')
        report = build_tpu(row, a.tpu, a.tpu_out, a.layers)
        if 'skipped' not in report:
            opt = report['cost'].get('optimal_seconds')
            print(f'{report["row"]} on {report["topology"]} ({report["devices"]} devices, '
                  f'{report["mesh_layout"]}): compiled in {report["compile_s"]:.1f} s, '
                  f'optimal_seconds {opt}, HBM per chip '
                  f'{report["memory"]["hbm_per_chip_bytes"] / 2**30:.2f} GiB', file=sys.stderr)
        return
    if not a.out:
        ap.error('give OUT (where the HLO text goes)')
    hlo, meta = build(row, a.layers, xla_opt=bool(a.xla_opt), inputs=a.inputs)
    _write(a.out, hlo)
    if a.xla_opt:
        _write(a.xla_opt, meta.pop('xla_opt_hlo'))
    if a.meta:
        _write(a.meta, json.dumps(meta, indent=1))


if __name__ == '__main__':
    main(sys.argv[1:])
