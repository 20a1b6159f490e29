"""JAX training steps at published configurations, lowered to HLO from shapes alone.

Each builder takes a row of `../shared/tpu-published/rows.json` (its `model` and
`parallelism`), builds the training step as a JAX program over `jax.ShapeDtypeStruct`
arguments (nothing is allocated), lowers it with GSPMD shardings over the row's device
count and returns the unpartitioned HLO text (with `sharding={...}` annotations) plus
what `hloc validate` needs to turn a simulated step time into the row's metric:

    {"hlo": str, "devices": int, "model_flops_per_device": float,
     "params": int, "tokens_per_device": int, "flops_convention": str}

Five families, after the programs the published rows ran:
  * `decoder-lm`: MaxText's DecoderLayer (one RMSNorm, attention and a relu MLP in
    parallel from it, both added to the residual; logits through the shared embedding),
    scanned over layers, AdamW, FSDP over `ici_fsdp` devices (weights sharded along
    `embed`, batch along `fsdp`, as MaxText's logical-axis rules map them), tensor
    parallelism over `ici_tensor`, and data parallelism over `dcn_data` slices (the
    outermost mesh axis: weights replicated across slices, the batch split over slices
    and `fsdp`, as MaxText's `dcn_data_parallelism`). A MaxText row's global batch is
    per_device_batch x every device (the tensor axis included, as MaxText's). A MaxText
    row that states MaxText's optimizer in full (global-norm clipping) is built as
    MaxText's train_step at the date its block names (2023-10-31: no RoPE, T5
    relative-position bias parameters; 2023-12-15: RoPE on adjacent pairs from the
    batch's positions, QKV RMSNorm, segment ids): the block's features as the row names
    them (use_iota_embed, causal or not), no 1/sqrt(head_dim) in the forward pass, logits
    attended in f32 and scaled by 1/sqrt(emb), the one-hot cross entropy masked by
    segment, parameters stacked on axis 1, the residual stream's embedding dimension over
    `tensor`, `remat` full or minimal (checkpoint_dots_with_no_batch_dims), clipping and
    the gradient and parameter norms it logs. Other rows (the 22B rows' plain "adamw")
    keep the simplified 2023-12 step: RoPE, causal attention, full rematerialization.
    A row whose block names SwiGLU or multi-query attention gets them (PaLM), a model
    stating `kv_heads` grouped-query attention (key/value heads repeated); parallelism
    written per pod (PaLM's paper) is read by `normalize_parallelism`.
  * `decoder-lm-moe`: DeepSeek-V2 as MaxText builds it in 2025 (MLA attention, dense
    SwiGLU first layers, routed top-k experts plus shared experts, dropless), FSDP.
  * `bert-encoder`: BERT pre-training (post-LN encoder, masked-LM head on
    `max_predictions` gathered positions through the tied word embedding, next-sentence
    head), LAMB, data parallel; layers unrolled and attention written as the MLPerf
    v1.0 TPU submission's `modeling.py` writes it (normalization after the context).
  * `resnet50-v1.5`: ResNet-50 v1.5 (stride in the 3x3 convolution), NHWC, batch-norm on
    batch statistics, SGD with momentum, data parallel.
  * `unet-diffusion`: Stable Diffusion 2's UNet trained with v-prediction as MaxDiffusion's
    MLPerf v4.1 submission trains it, AdamW with clipping, data parallel.

The TPU kernels the published runs used (Pallas flash attention, splash attention,
megablox grouped matmuls) exist on TPU only: for our own pipeline (the default, on host
devices) attention is written in XLA ops and the MoE's grouped matmul as a batched matmul
over equal expert groups; with `--tpu` the step is built with the Pallas kernels, which
appear as `tpu_custom_call` custom-calls (`pallas_info.py` prints their grids and blocks).

Usage (in the oracle venv; the device count is set before jax is imported):
    python models.py OUT.hlo --rows ROWS_JSON --row NAME [--meta OUT.json]
    python models.py OUT.hlo --config '{"model": {...}, "parallelism": {...}}' [--xla-opt XLA.hlo]

With `--tpu TOPOLOGY --tpu-out DIR` (in the libtpu venv, `tools/models/setup_libtpu.sh`)
the same step is built over the devices of a TPU topology and compiled ahead of time by
XLA's own TPU compiler; DIR receives the per-chip scheduled program (`program.hlo`) and
`xla_tpu.json` (memory and cost analyses, compile time, each partition's device, the
custom-calls and Pallas kernels of the program). `--tpu-lowered OUT.hlo [--meta M.json]`
writes the step as lowered for the topology, before optimization (shardings, shard_map
regions, the Pallas kernels as custom-calls), the input `hloc compile OUT.hlo --chips N`
takes; without `--tpu-out` nothing is compiled:
    python models.py --rows ROWS_JSON --row NAME --tpu auto --tpu-out DIR
    python models.py --rows ROWS_JSON --row NAME --tpu auto --tpu-lowered OUT.hlo --meta OUT.json
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


# ------------------------------------------------------------------ shared pieces
def optimizer_config(m, defaults=None):
    """AdamW's hyperparameters and global-norm clipping as the row's `optimizer` states
    them ("adamw (b1 0.9, b2 0.95, wd 0.1), global-norm clipping 1.0"; "clip_by_global_norm
    1.0"); what it leaves out comes from `defaults`, then MaxText's base.yml (b1 0.9, b2
    0.95, eps 1e-8, wd 0.1, no clipping)."""
    text = str(m.get('optimizer', 'adamw')).lower()
    cfg = dict(b1=0.9, b2=0.95, eps=1e-8, wd=0.1, clip=None)
    cfg.update(defaults or {})
    for key in ('b1', 'b2', 'eps', 'wd'):
        found = re.search(rf'\b{key}\s*=?\s*([0-9][0-9.eE+-]*)', text)
        if found:
            cfg[key] = float(found.group(1))
    found = re.search(r'clip[a-z_ \-]*?([0-9]+(?:\.[0-9]+)?)', text)
    if found:
        cfg['clip'] = float(found.group(1))
    return cfg


def global_norm(jax, jnp, tree):
    """The L2 norm of every leaf together (optax.global_norm, MaxText's l2norm_pytree)."""
    total = 0.0
    for leaf in jax.tree.leaves(tree):
        total = total + jnp.sum(jnp.square(leaf))
    return jnp.sqrt(total)


def clip_by_global_norm(jax, jnp, g, max_norm):
    """optax.clip_by_global_norm: every gradient scaled by max_norm / norm when the global
    norm exceeds max_norm. Returns the clipped gradients and the raw norm."""
    norm = global_norm(jax, jnp, g)
    keep = norm < max_norm
    return jax.tree.map(lambda t: jnp.where(keep, t, (t / norm.astype(t.dtype)) * max_norm),
                        g), norm


def remat_policy(jax, text):
    """A row's `remat` as MaxText's `remat_policy` maps it: `full` saves nothing, `minimal`
    saves the dots without batch dimensions (jax.checkpoint_policies.
    checkpoint_dots_with_no_batch_dims), `none` (or `false`) is no rematerialization. The
    first word decides ("minimal (checkpoint_dots_with_no_batch_dims)")."""
    word = (str(text or 'full').strip().lower().split() or ['full'])[0]
    if word in ('none', 'false', 'no'):
        return None
    if word == 'minimal':
        return jax.checkpoint_policies.checkpoint_dots_with_no_batch_dims
    if word == 'full':
        return jax.checkpoint_policies.nothing_saveable
    raise SystemExit(f'unknown remat {text!r} (full, minimal, none)')


def make_xent(jax, jnp):
    """MaxText's cross entropy against one-hot targets (max_utils.cross_entropy_with_logits,
    from T5X; z_loss 0): the forward keeps exp(logits - max) and its sum, the backward is
    softmax - targets without differentiating logsumexp again."""
    @jax.custom_vjp
    def xent(logits, targets):
        lse = jax.nn.logsumexp(logits, axis=-1, keepdims=True)
        return -jnp.sum(targets * (logits - lse), axis=-1)

    def fwd(logits, targets):
        shifted = logits - jnp.max(logits, axis=-1, keepdims=True)
        exp_shifted = jnp.exp(shifted)
        sum_exp = jnp.sum(exp_shifted, axis=-1, keepdims=True)
        log_softmax = shifted - jnp.log(sum_exp)
        return -jnp.sum(targets * log_softmax, axis=-1), (targets, exp_shifted, sum_exp,
                                                          log_softmax)

    def bwd(res, g):
        targets, exp_shifted, sum_exp, log_softmax = res
        g_logits = g[..., None] * (exp_shifted / sum_exp - targets)
        g_targets = -g[..., None] * log_softmax
        return g_logits.astype(exp_shifted.dtype), g_targets.astype(targets.dtype)

    xent.defvjp(fwd, bwd)
    return xent


def flash_block_sizes(fa, dated, b, s):
    """The Pallas flash-attention block sizes MaxText passed at its date: 2023-10-31 (the
    v5e results): every block 512, block_b 1; from 2023-12 (76bd53b0f): q/k blocks 512,
    block_b 2, the dq pass over 1024 queries x 256 keys (each capped by the shapes)."""
    if dated == '2023-10-31':
        return fa.BlockSizes(block_q=512, block_k_major=512, block_k=512, block_b=1,
                             block_q_major_dkv=512, block_k_major_dkv=512, block_k_dkv=512,
                             block_q_dkv=512, block_k_major_dq=512, block_k_dq=512,
                             block_q_dq=512)
    return fa.BlockSizes(block_q=min(512, s), block_k_major=min(512, s), block_k=min(512, s),
                         block_b=min(2, b), block_q_major_dkv=min(512, s),
                         block_k_major_dkv=min(512, s), block_q_dkv=min(512, s),
                         block_k_dkv=min(512, s), block_q_dq=min(1024, s),
                         block_k_dq=min(256, s), block_k_major_dq=min(512, s))


def _param_tree(jax, shapes, dtype, P):
    """Abstract parameters, their PartitionSpecs and their count from {name: (shape, spec)}."""
    is_leaf = lambda t: isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], P)
    params = jax.tree.map(lambda t: jax.ShapeDtypeStruct(t[0], dtype), shapes, is_leaf=is_leaf)
    pspec = jax.tree.map(lambda t: t[1], shapes, is_leaf=is_leaf)
    n = sum(math.prod(t[0]) for t in jax.tree.leaves(shapes, is_leaf=is_leaf))
    return params, pspec, n


# ------------------------------------------------------------------ decoder LM
def decoder_lm(jax, jnp, row, mesh, P, NS, layers_override=None, pallas=False):
    m = row['model']
    par = row['parallelism']
    L = layers_override or m['layers']
    E, H, D, F, V, S = m['emb'], m['heads'], m['head_dim'], m['mlp'], m['vocab'], m['seq']
    fsdp, dcn, tp = mesh.shape['fsdp'], mesh.shape['dcn'], mesh.shape['tensor']
    block = str(m.get('block', '')).lower()
    flat = block.replace(' ', '')
    maxtext = 'maxtext' in block
    opt = optimizer_config(m)
    # A MaxText row that states the optimizer in full (with MaxText's global-norm clipping)
    # is built as MaxText's train_step at the row's date (see `full` below); the 22B rows
    # state a plain "adamw" and keep the simplified step they were calibrated with.
    full = maxtext and opt['clip'] is not None
    dated = '2023-10-31' if '2023-10-31' in block else '2023-12-15'
    # The global batch: MaxText's is per_device_batch_size x jax.device_count(), every
    # device of the tensor axis included (pyconfig.calculate_global_batch_sizes), split
    # over the data-parallel axes (`activation_batch` -> data, fsdp) while the tensor axis
    # splits the activations' other dimensions. Other rows count per_device_batch per
    # data-parallel group: the devices of a tensor group share their batch.
    B = par['per_device_batch'] * fsdp * dcn * (tp if maxtext else 1)
    batch = ('dcn', 'fsdp')
    act = jnp.bfloat16
    wdt = jnp.float32
    f32 = jnp.float32

    # The block as the row describes it: MaxText's (relu MLP, multi-head attention) unless
    # it names a SwiGLU MLP (PaLM: swish(x wi_0) * (x wi_1)) or multi-query attention (one
    # key/value head shared by every query head, replicated over `tensor`).
    swiglu = 'swiglu' in block
    # Grouped-query attention where the model states `kv_heads` (each key/value head
    # shared by H / kv_heads query heads, repeated to H before attention, as MaxText
    # repeats them); split over `tensor` when the tensor axis divides them, replicated
    # over it otherwise (as multi-query's single head is).
    kv = int(m.get('kv_heads') or (1 if ('multi-query' in block or 'multiquery' in block) else H))
    if kv < 1 or H % kv:
        raise SystemExit(f'row {row.get("name")}: {kv} key/value heads do not divide {H} heads')
    kv_axes = ('fsdp', 'tensor', None) if kv % tp == 0 and kv > 1 else ('fsdp', None, None)
    # RoPE: MaxText's step applies it where the row names it (not in the 2023-10-31 v5e
    # block); the simplified step always has.
    rope = 'rope' in block if full else True
    qkv_norm = 'qkv rmsnorm' in block
    causal = 'causal=false' not in flat
    flash = pallas and 'flash' in block
    source = str(row.get('source', '')).lower().replace(' ', '')
    iota_embed = 'use_iota_embed=true' in flat or 'use_iota_embed=true' in source
    # MaxText 2023-10-31 creates T5 relative-position biases (heads x 32 buckets per layer)
    # that the flash path never reads: parameters (and optimizer state) all the same.
    relpos = full and dated == '2023-10-31'

    # The vocabulary is padded to a multiple of 128 x the tensor axis, as Megatron-LM
    # pads it (`make-vocab-size-divisible-by` 128 times the tensor-parallel size), so the
    # embedding splits evenly; FLOPs count the real vocabulary.
    V_real, pad = V, 128 * tp
    V = -(-V // pad) * pad

    # MaxText's logical-axis rules: embed -> fsdp; heads, mlp, vocab -> tensor. Scanned
    # weights stack the layers on axis 0, or on axis 1 where the row is MaxText's own
    # step (param_scan_axis: 1; the scan moves that axis to the front).
    ax = 1 if full else 0

    def lw(shape, axes):
        shape, axes = list(shape), list(axes)
        shape.insert(ax, L)
        axes.insert(ax, None)
        return tuple(shape), P(*axes)

    layer_shapes = {
        'pre_norm': lw((E,), ('fsdp',) if full else (None,)),
        'query': lw((E, H, D), ('fsdp', 'tensor', None)),
        'key': lw((E, kv, D), kv_axes),
        'value': lw((E, kv, D), kv_axes),
        'out': lw((H, D, E), ('tensor', None, 'fsdp')),
        'wi': lw((E, F), ('fsdp', 'tensor')),
        'wo': lw((F, E), ('tensor', 'fsdp')),
    }
    if swiglu:
        layer_shapes['wi_gate'] = lw((E, F), ('fsdp', 'tensor'))
    if full and qkv_norm:
        for name in ('query_norm', 'key_norm', 'value_norm'):
            layer_shapes[name] = lw((D,), ('tensor',))      # kernel_axes ('heads',)
    if relpos:
        layer_shapes['rel_embedding'] = lw((H, 32), ('tensor', None))
    shapes = {
        'embedding': ((V, E), P('tensor', 'fsdp')),
        'decoder_norm': ((E,), P('fsdp') if full else P(None)),
        'layers': layer_shapes,
    }
    params, pspec, n_params = _param_tree(jax, shapes, wdt, P)
    n_params -= (V - V_real) * E

    def rms_norm(x, scale):
        xf = x.astype(jnp.float32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)
        if full:
            # MaxText's RMSNorm: the normalized input in the activation type, times the
            # scale in the activation type.
            return y.astype(act) * scale.astype(act)
        return (y * scale).astype(act)

    def rope_half(x, pos):
        half = D // 2
        freq = 1.0 / (10000.0 ** (jnp.arange(half, dtype=jnp.float32) * 2.0 / D))
        ang = pos[:, None].astype(jnp.float32) * freq[None, :]          # [S, half]
        sin, cos = jnp.sin(ang)[None, :, None, :], jnp.cos(ang)[None, :, None, :]
        x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).astype(act)

    def rope_pairs(x, pos):
        # MaxText's LLaMARotaryEmbedding (2023-12): adjacent pairs rotated, positions from
        # the batch (`inputs_position`, [B, S]), timescales 10000^(2i/D).
        half = D // 2
        timescale = 10000.0 ** (2 * jnp.arange(half, dtype=f32) / D)
        ang = pos[:, :, None, None].astype(f32) / timescale
        sin, cos = jnp.sin(ang), jnp.cos(ang)
        pairs = x.astype(f32).reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        first, second = (a * cos - b * sin).astype(act), (b * cos + a * sin).astype(act)
        return jnp.stack([first, second], axis=-1).reshape(x.shape)

    def constrain(x):
        return jax.lax.with_sharding_constraint(x, NS(mesh, P(batch, *([None] * (x.ndim - 1)))))

    def constrain_to(x, *axes):
        return jax.lax.with_sharding_constraint(x, NS(mesh, P(*axes)))

    # activation_embed, activation_mlp, activation_vocab -> tensor; activation_heads ->
    # tensor (MaxText's rules, both dates).
    act_embed = lambda x: constrain_to(x, batch, None, 'tensor')
    act_heads = lambda x: constrain_to(x, batch, None, 'tensor', None)

    def dense_attention(q, k, v, seg):
        """Softmax(q k^T) v in XLA ops, the scores in f32, masked as the kernel masks."""
        logits = jnp.einsum('bqhd,bkhd->bhqk', q, k).astype(jnp.float32)
        mask = None
        if causal:
            mask = (jnp.arange(S)[:, None] >= jnp.arange(S)[None, :])[None, None]
        if seg is not None:
            same = seg[:, None, :, None] == seg[:, None, None, :]
            mask = same if mask is None else mask & same
        if mask is not None:
            logits = jnp.where(mask, logits, jnp.float32(-1e9))
        probs = jax.nn.softmax(logits, axis=-1).astype(act)
        return jnp.einsum('bhqk,bkhd->bqhd', probs, v)

    def flash_attention(q, k, v, seg):
        """Pallas flash attention (jax.experimental.pallas.ops.tpu.flash_attention) in a
        shard_map over MaxText's specs: batch over the data-parallel axes, heads over
        `tensor`; [B, S, H, D] in and out, [B, H, S, D] inside."""
        from jax.experimental.pallas.ops.tpu import flash_attention as fa
        bhsd = lambda a: jnp.transpose(a, (0, 2, 1, 3))
        spec = P(batch, 'tensor', None, None)

        def kernel(q, k, v, *segment):
            kw = dict(causal=causal, block_sizes=flash_block_sizes(fa, dated, q.shape[0], S))
            if segment:
                kw['segment_ids'] = fa.SegmentIds(segment[0], segment[0])
            return fa.flash_attention(q, k, v, **kw)

        args, specs = (bhsd(q), bhsd(k), bhsd(v)), (spec,) * 3
        if seg is not None:
            args, specs = args + (seg,), specs + (P(batch, None),)
        o = jax.shard_map(kernel, mesh=mesh, in_specs=specs, out_specs=spec,
                          check_vma=False)(*args)
        return bhsd(o)

    attention = flash_attention if flash else dense_attention

    def layer(x, w):
        x = constrain(x)
        lnx = rms_norm(x, w['pre_norm'])
        pos = jnp.arange(S)
        q = jnp.einsum('bse,ehd->bshd', lnx, w['query'].astype(act))
        k = jnp.einsum('bse,ehd->bshd', lnx, w['key'].astype(act))
        v = jnp.einsum('bse,ehd->bshd', lnx, w['value'].astype(act))
        if rope:
            q, k = rope_half(q, pos), rope_half(k, pos)
        q = q / jnp.sqrt(jnp.asarray(D, act))
        if kv == 1:
            k = jnp.broadcast_to(k, q.shape)
            v = jnp.broadcast_to(v, q.shape)
        elif kv != H:
            k = jnp.repeat(k, H // kv, axis=2)
            v = jnp.repeat(v, H // kv, axis=2)
        if flash:
            o = attention(q, k, v, None)
        else:
            logits = jnp.einsum('bqhd,bkhd->bhqk', q, k).astype(jnp.float32)
            causal_mask = jnp.arange(S)[:, None] >= jnp.arange(S)[None, :]
            logits = jnp.where(causal_mask[None, None], logits, jnp.float32(-1e9))
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

    def layer_maxtext(x, w, positions, seg):
        """MaxText's DecoderLayer at the row's date: one RMSNorm, attention and the MLP
        from it, both added to the residual; q/k/v without biases and without a 1/sqrt(D)
        (folded into the query's initializer), RoPE on q and k and a QKV RMSNorm where the
        row names them."""
        x = act_embed(x)
        lnx = act_embed(rms_norm(x, w['pre_norm']))
        q = jnp.einsum('bse,ehd->bshd', lnx, w['query'].astype(act))
        k = jnp.einsum('bse,ehd->bshd', lnx, w['key'].astype(act))
        v = jnp.einsum('bse,ehd->bshd', lnx, w['value'].astype(act))
        if rope:
            q, k = rope_pairs(q, positions), rope_pairs(k, positions)
        if qkv_norm:
            q, k = rms_norm(q, w['query_norm']), rms_norm(k, w['key_norm'])
            v = rms_norm(v, w['value_norm'])
        if kv == 1:
            k = jnp.broadcast_to(k, q.shape)
            v = jnp.broadcast_to(v, q.shape)
        elif kv != H:
            k = jnp.repeat(k, H // kv, axis=2)
            v = jnp.repeat(v, H // kv, axis=2)
        q, k, v = act_heads(q), act_heads(k), act_heads(v)
        o = act_heads(attention(q, k, v, seg))
        attn = act_embed(jnp.einsum('bshd,hde->bse', o, w['out'].astype(act)))
        h = jnp.einsum('bse,ef->bsf', lnx, w['wi'].astype(act))
        if swiglu:
            h = jax.nn.silu(jnp.einsum('bse,ef->bsf', lnx, w['wi_gate'].astype(act))) * h
        else:
            h = jax.nn.relu(h)
        h = act_embed(h)                                   # activation_mlp -> tensor
        mlp = act_embed(jnp.einsum('bsf,fe->bse', h, w['wo'].astype(act)))
        return act_embed((mlp + attn) + x), None

    policy = remat_policy(jax, m.get('remat', 'full'))
    xent = make_xent(jax, jnp)

    def loss_fn(p, tokens, targets):
        x = p['embedding'].astype(act)[tokens]
        body = jax.checkpoint(layer, policy=policy) if policy else layer
        x, _ = jax.lax.scan(body, x, p['layers'])
        x = rms_norm(x, p['decoder_norm'])
        logits = jnp.einsum('bse,ve->bsv', x, p['embedding'].astype(act)).astype(jnp.float32)
        if maxtext:
            # MaxText's loss (train.py, 2023): cross_entropy_with_logits against
            # one_hot(targets), a compare with an iota that fuses into the loss. Picking
            # the target logit with take_along_axis instead differentiates into a scatter
            # of a [batch, seq, vocab] f32 zero array (4 GiB per chip on the 22B row).
            return jnp.mean(xent(logits, jax.nn.one_hot(targets, V, dtype=f32)))
        logz = jax.nn.logsumexp(logits, axis=-1)
        tgt = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return jnp.mean(logz - tgt)

    def loss_maxtext(p, tokens, targets, seg, *positions):
        if iota_embed:
            # use_iota_embed: one-hot(vocab) x table, a matmul on the MXU.
            one_hot = (tokens[..., None] == jax.lax.iota(jnp.int32, V)).astype(act)
            x = jnp.dot(one_hot, p['embedding'].astype(act))
        else:
            x = p['embedding'].astype(act)[tokens]
        x = act_embed(x)
        pos = positions[0] if positions else None
        # The flash kernel masks by segment from 2023-12 (the batch's inputs_segmentation).
        seg_ids = seg if dated != '2023-10-31' else None

        def body(x, w):
            return layer_maxtext(x, w, pos, seg_ids)
        if policy:
            body = jax.checkpoint(body, policy=policy, prevent_cse=False)
        stacked = jax.tree.map(lambda a: jnp.moveaxis(a, ax, 0), p['layers'])
        x, _ = jax.lax.scan(body, x, stacked)
        y = rms_norm(x, p['decoder_norm'])
        # logits_via_embedding: attend in f32 (attend_dtype), scaled by 1/sqrt(emb).
        logits = jnp.dot(y, p['embedding'].astype(f32).T) / jnp.sqrt(jnp.float32(E))
        logits = act_embed(logits)                           # activation_vocab -> tensor
        one_hot = jax.nn.one_hot(targets, V, dtype=f32)
        loss = constrain_to(xent(logits, one_hot), batch, None)
        loss = loss * (seg != 0)
        return jnp.sum(loss) / loss.size

    def step(p, mu, nu, count, tokens, targets):
        loss, g = jax.value_and_grad(loss_fn)(p, tokens, targets)
        p, mu, nu, count = adamw(jax, jnp, p, g, mu, nu, count)
        return p, mu, nu, count, loss

    def step_maxtext(p, mu, nu, count, tokens, targets, seg, *positions):
        loss, raw = jax.value_and_grad(loss_maxtext)(p, tokens, targets, seg, *positions)
        g, raw_norm = clip_by_global_norm(jax, jnp, raw, opt['clip'])
        p, mu, nu, count = adamw(jax, jnp, p, g, mu, nu, count, b1=opt['b1'], b2=opt['b2'],
                                 eps=opt['eps'], wd=opt['wd'])
        # MaxText's metrics: the clipped and raw gradient norms and the new parameters'.
        return (p, mu, nu, count, loss, global_norm(jax, jnp, g), raw_norm,
                global_norm(jax, jnp, p))

    tok = jax.ShapeDtypeStruct((B, S), jnp.int32)
    cnt = jax.ShapeDtypeStruct((), jnp.int32)
    if full:
        # inputs, targets, inputs_segmentation (and inputs_position for RoPE), sharded over
        # every mesh axis (MaxText's data_sharding).
        data = P(('dcn', 'fsdp', 'tensor'), None)
        n_data = 4 if rope else 3
        fn = step_maxtext
        in_specs = (pspec, pspec, pspec, P()) + (data,) * n_data
        out_specs = (pspec, pspec, pspec, P(), P(), P(), P(), P())
        args = (params, params, params, cnt) + (tok,) * n_data
    else:
        data = P(batch, None)
        fn = step
        in_specs = (pspec, pspec, pspec, P(), data, data)
        out_specs = (pspec, pspec, pspec, P(), P())
        args = (params, params, params, cnt, tok, tok)
    pdb = par['per_device_batch']
    if row.get('metric') == 'mfu_pct':
        # MFU as PaLM defines it (Chowdhery et al. 2022, Appendix B): 6N + 12 L H Q T FLOPs
        # per token, causal attention counted whole; tokens per device = the batch of its
        # data-parallel group over the devices that share it (`tensor`).
        tokens = S * pdb / tp
        flops = (6 * n_params + 12 * m['layers'] * H * D * S) * tokens
        conv = ('(6 * params + 12 * layers * heads * head_dim * seq) * tokens per device '
                '(PaLM, Appendix B)')
    else:
        # MaxText train.py calculate_training_tflops, per device: 6 N T + 12 H L D T S, the
        # attention term halved from 2023-11-30; the row's `flops_convention` says which.
        conv = row.get('flops_convention') or (
            '6 * params * seq * per_device_batch + 12 * heads * layers * head_dim * seq^2 '
            '* per_device_batch / 2 (MaxText calculate_training_tflops, 2023-12)')
        halved = re.search(r'per_device_batch\s*/\s*2', conv) is not None
        flops = (6 * n_params * S * pdb
                 + 12 * H * m['layers'] * D * S * S * pdb / (2 if halved else 1))
    return fn, args, in_specs, out_specs, dict(params=n_params, tokens_per_device=S * pdb,
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
def bert(jax, jnp, row, mesh, P, NS, layers_override=None, pallas=False):
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
def resnet50(jax, jnp, row, mesh, P, NS, layers_override=None, pallas=False):
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


# ------------------------------------------------------------------ MoE decoder (DeepSeek-V2)
def _num(text, pattern, default=None, cast=int):
    """The first group of `pattern` in `text` as a number, else `default`."""
    found = re.search(pattern, text)
    return cast(found.group(1)) if found else default


def make_sort_rows(jax, jnp):
    """MaxText's _sort_activations: rows gathered by `indices`, the gradient gathered back
    by argsort(indices) (a gather both ways, not a scatter-add)."""
    @jax.custom_vjp
    def sort_rows(x, indices):
        return jnp.take_along_axis(x, indices[..., None], axis=-2)

    def fwd(x, indices):
        return sort_rows(x, indices), indices

    def bwd(indices, g):
        return sort_rows(g, jnp.argsort(indices, axis=-1)), None

    sort_rows.defvjp(fwd, bwd)
    return sort_rows


def decoder_lm_moe(jax, jnp, row, mesh, P, NS, layers_override=None, pallas=False):
    """DeepSeek-V2 as MaxText builds it (layers/deepseek.py, attention_mla.py, moe.py at
    ffb0d49ad, 2025-08-29; configs/models/deepseek2-16b.yml): per layer an RMSNorm, MLA
    attention, the residual, an RMSNorm, then a dense SwiGLU (the first layers) or the
    routed and shared experts, the residual; the dense and the MoE layers scanned apart;
    logits through their own dense layer, cast to f32; full rematerialization; AdamW with
    global-norm clipping 1.0 (base.yml). FSDP: weights along `embed`, batch along `fsdp`.

    Dropless routing: on TPU (`pallas`), tokens sorted by expert in a shard_map (each
    device its own tokens, the expert weights gathered whole) and three megablox grouped
    matmuls (jax.experimental.pallas.ops.tpu.megablox.gmm, tiling 512 x 1024 x 1024 capped
    by the shapes), as MaxText's sparse_matmul; elsewhere the same sort, then each expert's
    group as an equal share of the device's token-slots (a batched matmul over the
    experts with capacity tokens x top-k / experts: the dropless FLOPs exactly, as if the
    router balanced the experts), because `ragged-dot` has no partitioner or cost model
    downstream yet."""
    m, par = row['model'], row['parallelism']
    block = str(m.get('block', '')).lower()
    get = lambda key, pattern, default: m.get(key, _num(block, pattern, default))
    L = layers_override or m['layers']
    E, H, V, S = m['emb'], m['heads'], m['vocab'], m['seq']
    q_lora = get('q_lora_rank', r'q_lora_rank\s*(\d+)', 0)
    if q_lora:
        raise SystemExit(f'row {row.get("name")}: MLA with q_lora_rank {q_lora} is not built')
    kv_rank = get('kv_lora_rank', r'kv_lora_rank\s*(\d+)', 512)
    nope = get('qk_nope_head_dim', r'qk_nope_head_dim\s*(\d+)', 128)
    rope_d = get('qk_rope_head_dim', r'qk_rope_head_dim\s*(\d+)', 64)
    v_d = get('v_head_dim', r'v_head_dim\s*(\d+)', 128)
    head_dim = m.get('head_dim', 128)          # base.yml's head_dim: the unused k/v below
    rope_factor = get('rope_factor', r'rope factor\s*(\d+)', 40)
    first_dense = get('first_num_dense_layers', r'first (\d+) layers? dense', None)
    if first_dense is None:
        first_dense = 1 if 'first layer dense' in block else 0
    first_dense = min(first_dense, L)
    n_moe = L - first_dense
    F_dense = get('mlp', r'dense swiglu\s*(\d+)', None)
    G = get('num_experts', r'(\d+) routed experts', None)
    F_moe = get('moe_mlp', r'routed experts swiglu\s*(\d+)', None)
    topk = get('num_experts_per_tok', r'top-?(\d+)', None)
    shared = get('shared_experts', r'(\d+) shared experts?', 0)
    if None in (F_dense, G, F_moe, topk):
        raise SystemExit(f'row {row.get("name")}: the MoE block does not state the dense and '
                         'expert widths, the experts and top-k')
    qk = nope + rope_d
    fsdp, dcn = mesh.shape['fsdp'], mesh.shape['dcn']
    groups = fsdp * dcn
    pdb = par['per_device_batch']
    B = pdb * groups                              # per_device_batch_size x device_count
    batch = ('dcn', 'fsdp')
    act, f32 = jnp.bfloat16, jnp.float32
    eps = 1e-6                                    # normalization_layer_epsilon (model yml)
    opt = optimizer_config(m, defaults=dict(clip=1.0))   # base.yml: clipping 1.0

    # Parameters, the layers stacked on axis 1 (param_scan_axis), logical axes mapped as
    # MaxText maps them with FSDP alone: embed (and kv_lora, where embed is free) -> fsdp.
    def lw(n, shape, axes):
        shape, axes = list(shape), list(axes)
        shape.insert(1, n) if len(shape) > 1 else shape.append(n)
        axes.insert(1, None) if len(axes) > 1 else axes.append(None)
        return tuple(shape), P(*axes)

    def attention_params(n):
        return {
            'pre_norm': lw(n, (E,), (None,)), 'post_norm': lw(n, (E,), (None,)),
            'query': lw(n, (E, H, qk), ('fsdp', None, None)),
            'wkv_a': lw(n, (E, kv_rank + rope_d), ('fsdp', None)),
            'kv_norm': lw(n, (kv_rank,), (None,)),
            'wkv_b': lw(n, (kv_rank, H, nope + v_d), ('fsdp', None, None)),
            'out': lw(n, (H, v_d, E), (None, None, 'fsdp')),
            # The Attention base class's key and value projections (embed x kv_heads x
            # head_dim), created at that commit and never read by MLA: MaxText counts them
            # (15.933B) and AdamW updates them.
            'key': lw(n, (E, H, head_dim), ('fsdp', None, None)),
            'value': lw(n, (E, H, head_dim), ('fsdp', None, None)),
        }

    def swiglu_params(n, f):
        return {'wi_0': lw(n, (E, f), ('fsdp', None)), 'wi_1': lw(n, (E, f), ('fsdp', None)),
                'wo': lw(n, (f, E), (None, 'fsdp'))}

    dense = dict(attention_params(first_dense), mlp=swiglu_params(first_dense, F_dense))
    moe = dict(attention_params(n_moe),
               gate=lw(n_moe, (E, G), ('fsdp', None)),
               experts={'wi_0': lw(n_moe, (G, E, F_moe), (None, 'fsdp', None)),
                        'wi_1': lw(n_moe, (G, E, F_moe), (None, 'fsdp', None)),
                        'wo': lw(n_moe, (G, F_moe, E), (None, None, 'fsdp'))})
    if shared:
        moe['shared'] = swiglu_params(n_moe, shared * F_moe)
    shapes = {'embedding': ((V, E), P(None, 'fsdp')), 'decoder_norm': ((E,), P(None)),
              'logits_dense': ((E, V), P('fsdp', None))}
    if first_dense:
        shapes['dense_layers'] = dense
    if n_moe:
        shapes['moe_layers'] = moe
    params, pspec, n_params = _param_tree(jax, shapes, f32, P)

    def rms_norm(x, scale):
        xf = x.astype(f32)
        y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
        return y.astype(act) * scale.astype(act)

    def constrain(x, *axes):
        return jax.lax.with_sharding_constraint(x, NS(mesh, P(*axes)))

    act_bse = lambda x: constrain(x, batch, None, None)

    # YaRN rotary embedding (MaxText's YarnRotaryEmbedding: rope_max_timescale 10000,
    # original_max_position_embeddings 4096, beta_fast 32, beta_slow 1, factor 40): the
    # frequencies are constants; each pair (x[2i], x[2i+1]) is rotated as a complex number
    # and the real parts come first, then the imaginary parts.
    import numpy as np
    half = rope_d // 2
    base, orig, beta_fast, beta_slow = 10000.0, 4096, 32.0, 1.0
    extra = 1.0 / base ** (np.arange(0, rope_d, 2) / rope_d)
    inter = extra / rope_factor
    corr = lambda rot: rope_d * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(base))
    low, high = max(math.floor(corr(beta_fast)), 0), min(math.ceil(corr(beta_slow)), rope_d - 1)
    ramp = np.clip((np.arange(half) - low) / max(high - low, 1e-3), 0, 1)
    inv_freq = (inter * ramp + extra * (1 - ramp)).astype(np.float32)

    def yarn(x, pos):
        ang = pos[:, :, None, None].astype(f32) * jnp.asarray(inv_freq)
        cos, sin = jnp.cos(ang), jnp.sin(ang)
        pairs = x.astype(f32).reshape(*x.shape[:-1], half, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        out = jnp.stack([a * cos - b * sin, a * sin + b * cos], axis=-2)
        return out.reshape(x.shape).astype(act)

    # softmax_scale: qk^-0.5, times mscale^2 (0.1 * mscale * ln(factor) + 1) as YaRN
    # extends 4096 positions to 163840.
    mscale = 0.1 * 0.707 * math.log(rope_factor) + 1.0 if rope_factor > 1 else 1.0
    softmax_scale = qk ** -0.5 * mscale * mscale

    def dense_attention(q, k, v, seg):
        logits = jnp.einsum('bqhd,bkhd->bhqk', q, k).astype(f32)
        mask = (jnp.arange(S)[:, None] >= jnp.arange(S)[None, :])[None, None]
        mask = mask & (seg[:, None, :, None] == seg[:, None, None, :])
        probs = jax.nn.softmax(jnp.where(mask, logits, jnp.float32(-1e9)), axis=-1)
        return jnp.einsum('bhqk,bkhd->bqhd', probs.astype(act), v)

    def splash_attention(q, k, v, seg):
        # MaxText's tpu_flash_attention: splash attention (causal mask, sa_block_* 512,
        # separate dq and dkv kernels), vmapped over each device's sequences in a shard_map.
        from jax.experimental.pallas.ops.tpu.splash_attention import (
            splash_attention_kernel as sk, splash_attention_mask as sm)
        bhsd = lambda a: jnp.transpose(a, (0, 2, 1, 3))
        spec = P(batch, None, None, None)
        sizes = sk.BlockSizes(block_q=min(512, S), block_kv=min(512, S),
                              block_kv_compute=min(512, S), block_q_dkv=min(512, S),
                              block_kv_dkv=min(512, S), block_kv_dkv_compute=min(512, S),
                              block_q_dq=min(512, S), block_kv_dq=min(512, S),
                              use_fused_bwd_kernel=False)

        def kernel(q, k, v, seg):
            mask = sm.MultiHeadMask(masks=(sm.CausalMask(shape=(S, S)),) * q.shape[1])
            splash = sk.make_splash_mha(mask=mask, head_shards=1, q_seq_shards=1,
                                        block_sizes=sizes)
            return jax.vmap(splash)(q, k, v, segment_ids=sk.SegmentIds(seg, seg))

        o = jax.shard_map(kernel, mesh=mesh, in_specs=(spec, spec, spec, P(batch, None)),
                          out_specs=spec, check_vma=False)(bhsd(q), bhsd(k), bhsd(v), seg)
        return bhsd(o)

    attention = splash_attention if pallas else dense_attention

    def mla(x, w, pos, seg):
        q = jnp.einsum('bse,ehd->bshd', x, w['query'].astype(act))
        q_nope, q_pe = jnp.split(q, [nope], axis=-1)
        query = jnp.concatenate([q_nope, yarn(q_pe, pos)], axis=-1) * softmax_scale
        low_rank = jnp.einsum('bse,er->bsr', x, w['wkv_a'].astype(act))
        main, k_pe = jnp.split(low_rank, [kv_rank], axis=-1)
        main = rms_norm(main, w['kv_norm'])
        k_pe = yarn(k_pe[:, :, None, :], pos)
        kv_out = jnp.einsum('bsr,rhd->bshd', main, w['wkv_b'].astype(act))
        k_nope, value = jnp.split(kv_out, [nope], axis=-1)
        key = jnp.concatenate([k_nope, jnp.broadcast_to(k_pe, (*k_nope.shape[:3], rope_d))],
                              axis=-1)
        o = attention(query, key, value, seg)
        return jnp.einsum('bshd,hde->bse', o, w['out'].astype(act))

    def swiglu(x, w):
        h = jax.nn.silu(jnp.einsum('bse,ef->bsf', x, w['wi_0'].astype(act)))
        h = h * jnp.einsum('bse,ef->bsf', x, w['wi_1'].astype(act))
        return jnp.einsum('bsf,fe->bse', constrain(h, batch, None, None), w['wo'].astype(act))

    sort_rows = make_sort_rows(jax, jnp)
    Tl = B // groups * S                                  # tokens per device
    slots = Tl * topk                                     # token-expert pairs per device

    def route(x, gate):
        # GateLogit with routed_score_func softmax, top-k of the probabilities (weights
        # scaled by routed_scaling_factor 1).
        probs = jax.nn.softmax(jnp.einsum('bse,eg->bsg', x, gate.astype(act)), axis=-1)
        return jax.lax.top_k(probs, topk)

    def permute(x2, idx):
        # x2 [.., Tl, E], idx [.., Tl, K]: each token-slot's row, sorted by expert.
        flat = idx.reshape(*idx.shape[:-2], slots)
        order = jnp.argsort(flat, axis=-1)
        tokens = order // topk
        copies = jnp.broadcast_to(x2[..., None, :, :], (*x2.shape[:-2], topk, Tl, E))
        sorted_x = sort_rows(copies.reshape(*x2.shape[:-2], slots, E), tokens)
        return sorted_x, order, flat

    def unpermute(y, order, weights):
        y = sort_rows(y, jnp.argsort(order, axis=-1)).reshape(*y.shape[:-2], Tl, topk, E)
        return jnp.einsum('...tke,...tk->...te', y.astype(f32), weights.astype(f32))

    def experts_balanced(x, weights, idx, w):
        # [groups, Tl, E] with the groups over the batch's devices: the sort stays local.
        x2 = constrain(x.reshape(groups, Tl, E), batch, None, None)
        wts, ids = weights.reshape(groups, Tl, topk), idx.reshape(groups, Tl, topk)
        xs, order, _ = permute(x2, ids)
        xs = xs.reshape(groups, G, slots // G, E)
        full_w = lambda a: constrain(a.astype(act), None, None, None)   # gathered (FSDP)
        h0 = jnp.einsum('dgce,gef->dgcf', xs, full_w(w['wi_0']))
        h1 = jnp.einsum('dgce,gef->dgcf', xs, full_w(w['wi_1']))
        y = jnp.einsum('dgcf,gfe->dgce', jax.nn.silu(h0) * h1, full_w(w['wo']))
        y = unpermute(y.reshape(groups, slots, E), order, wts)
        return y.reshape(B, S, E).astype(act)

    def experts_megablox(x, weights, idx, w):
        from jax.experimental.pallas.ops.tpu.megablox import ops as mblx

        def gmm(lhs, rhs, sizes):
            rows = lhs.shape[0]
            padded = -(-rows // 512) * 512
            if padded != rows:
                lhs = jnp.pad(lhs, ((0, padded - rows), (0, 0)))
            tiling = (min(512, padded), min(1024, lhs.shape[1]), min(1024, rhs.shape[2]))
            return mblx.gmm(lhs, rhs, sizes, jnp.bfloat16, tiling)[:rows]

        def local(x, wts, ids, w0, w1, wo):
            b = x.shape[0]
            xs, order, flat = permute(x.reshape(Tl, E), ids.reshape(Tl, topk))
            sizes = jnp.bincount(flat, length=G).astype(jnp.int32)
            h = jax.nn.silu(gmm(xs, w0, sizes)) * gmm(xs, w1, sizes)
            y = unpermute(gmm(h, wo, sizes), order, wts.reshape(Tl, topk))
            return y.reshape(b, S, E).astype(act)

        spec = P(batch, None, None)
        return jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec, P(), P(), P()),
                             out_specs=spec, check_vma=False)(
            x, weights, idx, w['wi_0'].astype(act), w['wi_1'].astype(act), w['wo'].astype(act))

    experts = experts_megablox if pallas else experts_balanced

    def layer(x, w, pos, seg, kind):
        x = act_bse(x)
        lnx = act_bse(rms_norm(x, w['pre_norm']))
        h = x + act_bse(mla(lnx, w, pos, seg))
        hn = act_bse(rms_norm(h, w['post_norm']))
        if kind == 'dense':
            y = swiglu(hn, w['mlp'])
        else:
            weights, idx = route(hn, w['gate'])
            y = experts(hn, weights, idx, w['experts'])
            if shared:
                y = y + swiglu(hn, w['shared'])
        return act_bse(y + h), None

    policy = remat_policy(jax, m.get('remat', 'full'))
    xent = make_xent(jax, jnp)

    def loss_fn(p, inputs, positions, segmentation, targets, target_seg):
        x = act_bse(p['embedding'].astype(act)[inputs])
        for kind, key in (('dense', 'dense_layers'), ('moe', 'moe_layers')):
            if key not in p:
                continue
            body = lambda x, w, kind=kind: layer(x, w, positions, segmentation, kind)
            if policy:
                body = jax.checkpoint(body, policy=policy, prevent_cse=False)
            stacked = jax.tree.map(lambda a: jnp.moveaxis(a, 1, 0) if a.ndim > 1 else a, p[key])
            x, _ = jax.lax.scan(body, x, stacked)
        y = rms_norm(x, p['decoder_norm'])
        logits = jnp.einsum('bse,ev->bsv', y, p['logits_dense'].astype(act)).astype(f32)
        loss = constrain(xent(logits, jax.nn.one_hot(targets, V, dtype=f32)), batch, None)
        mask = target_seg != 0
        return jnp.sum(loss * mask) / (jnp.sum(mask) + 1e-8)

    def step(p, mu, nu, count, inputs, positions, segmentation, targets, target_seg):
        loss, raw = jax.value_and_grad(loss_fn)(p, inputs, positions, segmentation, targets,
                                                target_seg)
        g, raw_norm = clip_by_global_norm(jax, jnp, raw, opt['clip'])
        p, mu, nu, count = adamw(jax, jnp, p, g, mu, nu, count, b1=opt['b1'], b2=opt['b2'],
                                 eps=opt['eps'], wd=opt['wd'])
        return (p, mu, nu, count, loss, global_norm(jax, jnp, g), raw_norm,
                global_norm(jax, jnp, p))

    if Tl * topk % G:
        raise SystemExit(f'row {row.get("name")}: {Tl} tokens x top-{topk} do not split over '
                         f'{G} experts')
    tok = jax.ShapeDtypeStruct((B, S), jnp.int32)
    data = P(batch, None)
    args = (params, params, params, jax.ShapeDtypeStruct((), jnp.int32)) + (tok,) * 5
    in_specs = (pspec, pspec, pspec, P()) + (data,) * 5
    out_specs = (pspec, pspec, pspec) + (P(),) * 5

    # MaxText's calculate_tflops_training_per_device (DeepSeek branch, 2025-08): the
    # matmuls with weights x 3 (forward and backward), the causal attention halved.
    bl = pdb * S
    ffn = lambda f: 2 * bl * f * E * 2 + 2 * bl * f * E          # two inputs (silu, linear)
    moe_ffn = 2 * bl * E * G + ffn(F_moe) * (shared + topk)
    q_flops = 2 * bl * E * H * qk
    kv_flops = 2 * bl * (E * (kv_rank + rope_d) + kv_rank * H * (nope + v_d))
    proj = 2 * bl * E * H * v_d
    emb = 2 * bl * E * V
    learnable = (ffn(F_dense) * first_dense + moe_ffn * n_moe
                 + (q_flops + kv_flops + proj) * L + emb) * 3
    attention_flops = 2 * bl * S * H * (qk + v_d) / 2 * L * 3
    return step, args, in_specs, out_specs, dict(
        params=n_params, tokens_per_device=S * pdb,
        model_flops_per_device=learnable + attention_flops,
        flops_convention='MaxText calculate_tflops_training_per_device (2025-08, DeepSeek): '
                         '3 x (dense and routed/shared expert FFNs with the gate, MLA '
                         'projections, embedding) + 3 x causal attention / 2, per device')


# ------------------------------------------------------------------ UNet (Stable Diffusion 2)
def unet_diffusion(jax, jnp, row, mesh, P, NS, layers_override=None, pallas=False):
    """Stable Diffusion 2's UNet2DConditionModel trained as MaxDiffusion's MLPerf v4.1
    submission trains it (models/train.py and models/*_flax.py of the submission's
    maxdiffusion fork): latents sampled from the VAE moments (mean + std x N(0, 1)) and
    scaled by 0.18215, DDPM noise at a random timestep, the UNet's v-prediction against
    the velocity, mean squared error, AdamW with global-norm clipping. NHWC inside (Flax),
    convolutions and dense layers in bf16 on f32 parameters; GroupNorm outputs f32 (Flax
    promotes to its f32 scale), LayerNorm outputs bf16. Attention: heads of 64, q/k in f32
    for the scores; on TPU (`pallas`) self-attention over 4096 positions or more runs
    splash attention (flash_min_seq_length 4096: the 64 x 64 level), the head dimension
    padded to 128, as MaxDiffusion runs it. Data parallel: parameters replicated, the
    batch over `data`."""
    m, par = row['model'], row['parallelism']
    block = str(m.get('block', '')).lower()
    found = re.search(r'block_out_channels\s*([0-9]+(?:\s*/\s*[0-9]+)+)', block)
    channels = [int(c) for c in found.group(1).split('/')] if found else [320, 640, 1280, 1280]
    layers = layers_override or _num(block, r'(\d+) layers per block', 2)
    head_dim = _num(block, r'head dim\s*(\d+)', 64)
    ctx_len, ctx_dim = (77, 1024)
    found = re.search(r'(\d+)\s*x\s*(\d+) text embeddings', block)
    if found:
        ctx_len, ctx_dim = int(found.group(1)), int(found.group(2))
    out_groups = _num(block, r'norm_num_groups overridden to (\d+)', 32)
    hh, ww, cin = m.get('latent', [64, 64, 4])
    dp = mesh.shape['data']
    pdb = par['per_device_batch']
    B = pdb * dp
    act, f32 = jnp.bfloat16, jnp.float32
    opt = optimizer_config(m, defaults=dict(b2=0.999, wd=0.01))
    n_blocks = len(channels)
    # CrossAttnDownBlock2D for all but the last level, DownBlock2D last; mirrored up.
    attn_levels = [i < n_blocks - 1 for i in range(n_blocks)]
    temb_dim = channels[0] * 4
    flops = [0.0]                                 # forward multiply-adds x 2, traced once

    # ---- parameters (every leaf f32, replicated)
    def dense_p(i, o, bias=True):
        p = {'kernel': (i, o)}
        if bias:
            p['bias'] = (o,)
        return p

    conv_p = lambda i, o, k=3: {'kernel': (k, k, i, o), 'bias': (o,)}
    norm_p = lambda c: {'scale': (c,), 'bias': (c,)}

    def resnet_p(i, o):
        p = {'norm1': norm_p(i), 'conv1': conv_p(i, o), 'time_emb_proj': dense_p(temb_dim, o),
             'norm2': norm_p(o), 'conv2': conv_p(o, o)}
        if i != o:
            p['conv_shortcut'] = conv_p(i, o, 1)
        return p

    def transformer_p(c):
        attn = lambda kv: {'to_q': dense_p(c, c, False), 'to_k': dense_p(kv, c, False),
                           'to_v': dense_p(kv, c, False), 'to_out_0': dense_p(c, c)}
        return {'norm': norm_p(c), 'proj_in': dense_p(c, c), 'proj_out': dense_p(c, c),
                'block': {'norm1': norm_p(c), 'attn1': attn(c), 'norm2': norm_p(c),
                          'attn2': attn(ctx_dim), 'norm3': norm_p(c),
                          'ff': {'proj': dense_p(c, 8 * c), 'net_2': dense_p(4 * c, c)}}}

    shapes = {'conv_in': conv_p(cin, channels[0]),
              'time_embedding': {'linear_1': dense_p(channels[0], temb_dim),
                                 'linear_2': dense_p(temb_dim, temb_dim)},
              'down': [], 'up': [],
              'conv_norm_out': norm_p(channels[0]), 'conv_out': conv_p(channels[0], cin)}
    out_c = channels[0]
    for i, c in enumerate(channels):
        in_c, out_c = out_c, c
        blk = {'resnets': [resnet_p(in_c if j == 0 else c, c) for j in range(layers)]}
        if attn_levels[i]:
            blk['attentions'] = [transformer_p(c) for _ in range(layers)]
        if i < n_blocks - 1:
            blk['downsample'] = conv_p(c, c)
        shapes['down'].append(blk)
    shapes['mid'] = {'resnets': [resnet_p(channels[-1], channels[-1]) for _ in range(2)],
                     'attentions': [transformer_p(channels[-1])]}
    rev = channels[::-1]
    rev_attn = attn_levels[::-1]
    out_c = rev[0]
    for i in range(n_blocks):
        prev_c, out_c = out_c, rev[i]
        in_c = rev[min(i + 1, n_blocks - 1)]
        res = []
        for j in range(layers + 1):
            skip = in_c if j == layers else out_c
            res.append(resnet_p((prev_c if j == 0 else out_c) + skip, out_c))
        blk = {'resnets': res}
        if rev_attn[i]:
            blk['attentions'] = [transformer_p(out_c) for _ in range(layers + 1)]
        if i < n_blocks - 1:
            blk['upsample'] = conv_p(out_c, out_c)
        shapes['up'].append(blk)
    is_leaf = lambda t: isinstance(t, tuple) and all(isinstance(d, int) for d in t)
    params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s, f32), shapes, is_leaf=is_leaf)
    pspec = jax.tree.map(lambda s: P(), shapes, is_leaf=is_leaf)
    n_params = sum(math.prod(s) for s in jax.tree.leaves(shapes, is_leaf=is_leaf))
    heads = lambda c: c // head_dim

    # ---- layers
    def dense(x, p):
        flops[0] += 2 * x.size // x.shape[-1] * math.prod(p['kernel'].shape)
        y = jnp.dot(x.astype(act), p['kernel'].astype(act))
        return y + p['bias'].astype(act) if 'bias' in p else y

    def conv(x, p, stride=1):
        k = p['kernel'].shape[0]
        pad = ((k // 2, k // 2),) * 2
        y = jax.lax.conv_general_dilated(x.astype(act), p['kernel'].astype(act), (stride, stride),
                                         pad, dimension_numbers=('NHWC', 'HWIO', 'NHWC'))
        flops[0] += 2 * y.size * math.prod(p['kernel'].shape[:3])
        return y + p['bias'].astype(act)

    def group_norm(x, p, groups=32):
        xf = x.astype(f32)
        n, h, w, c = xf.shape
        g = xf.reshape(n, h, w, groups, c // groups)
        mean = jnp.mean(g, axis=(1, 2, 4), keepdims=True)
        var = jnp.mean(jnp.square(g - mean), axis=(1, 2, 4), keepdims=True)
        y = ((g - mean) * jax.lax.rsqrt(var + 1e-5)).reshape(n, h, w, c)
        return y * p['scale'] + p['bias']                     # f32 (promoted)

    def layer_norm(x, p):
        xf = x.astype(f32)
        mean = jnp.mean(xf, -1, keepdims=True)
        var = jnp.mean(jnp.square(xf - mean), -1, keepdims=True)
        y = (xf - mean) * jax.lax.rsqrt(var + 1e-5)
        return (y * p['scale'] + p['bias']).astype(act)        # Flax LayerNorm(dtype=bf16)

    def constrain(x):
        return jax.lax.with_sharding_constraint(
            x, NS(mesh, P('data', *([None] * (x.ndim - 1)))))

    def attention_dot(q, k, v, n):
        # split_head_dim, float32_qk_product: scores [b, heads, q, k] in f32, softmax,
        # probabilities in bf16.
        b, sq, c = q.shape
        d = c // n
        q4 = q.reshape(b, sq, n, d).astype(f32)
        k4 = k.reshape(b, k.shape[1], n, d).astype(f32)
        v4 = v.reshape(b, v.shape[1], n, d)
        s = jnp.einsum('btnh,bfnh->bnft', k4, q4) * (d ** -0.5)
        probs = jax.nn.softmax(s, axis=-1).astype(act)
        flops[0] += 4 * b * n * sq * k.shape[1] * d
        return jnp.einsum('bnft,btnh->bfnh', probs, v4).reshape(b, sq, c)

    def attention_splash(q, k, v, n):
        from jax.experimental.pallas.ops.tpu.splash_attention import (
            splash_attention_kernel as sk, splash_attention_mask as sm)
        b, sq, c = q.shape
        d = c // n
        scale = d ** -0.5

        def bhsd(t):
            t = jnp.transpose(t.reshape(b, t.shape[1], n, d), (0, 2, 1, 3))
            return jnp.pad(t, ((0, 0), (0, 0), (0, 0), (0, 128 - d))) if d < 128 else t

        spec = P('data', None, None, None)

        def kernel(q, k, v):
            s = q.shape[2]
            sizes = sk.BlockSizes(block_q=min(512, s), block_kv_compute=min(512, s),
                                  block_kv=min(512, s), block_q_dkv=min(512, s),
                                  block_kv_dkv=min(512, s), block_kv_dkv_compute=min(512, s),
                                  block_q_dq=min(512, s), block_kv_dq=min(512, s))
            mask = sm.MultiHeadMask(masks=[sm.FullMask(_shape=(s, s)) for _ in range(q.shape[1])])
            splash = sk.make_splash_mha(mask=mask, head_shards=1, q_seq_shards=1,
                                        block_sizes=sizes)
            return jax.vmap(splash)(q, k, v)

        o = jax.shard_map(kernel, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec,
                          check_vma=False)(bhsd(q), bhsd(k * scale), bhsd(v))
        flops[0] += 4 * b * n * sq * k.shape[1] * d
        o = o[..., :d]
        return jnp.transpose(o, (0, 2, 1, 3)).reshape(b, sq, c)

    def attention(x, p, n, context=None):
        ctx = x if context is None else context
        q, k, v = dense(x, p['to_q']), dense(ctx, p['to_k']), dense(ctx, p['to_v'])
        if pallas and q.shape[1] >= 4096 and k.shape[1] >= 4096:
            o = attention_splash(q, k, v, n)
        else:
            o = attention_dot(q, k, v, n)
        return dense(o, p['to_out_0'])

    def transformer(x, p, ctx):
        b, h, w, c = x.shape
        n = heads(c)
        res = x
        t = dense(group_norm(x, p['norm']).reshape(b, h * w, c), p['proj_in'])
        blk = p['block']
        t = attention(layer_norm(t, blk['norm1']), blk['attn1'], n) + t
        t = attention(layer_norm(t, blk['norm2']), blk['attn2'], n, ctx) + t
        ff = dense(layer_norm(t, blk['norm3']), blk['ff']['proj'])
        lin, gate = jnp.split(ff, 2, axis=-1)
        t = dense(lin * jax.nn.gelu(gate), blk['ff']['net_2']) + t
        t = dense(t, p['proj_out']).reshape(b, h, w, c)
        return constrain(t + res)

    def resnet(x, p, temb):
        h = conv(jax.nn.swish(group_norm(x, p['norm1'])), p['conv1'])
        h = h + dense(jax.nn.swish(temb), p['time_emb_proj'])[:, None, None, :]
        h = conv(jax.nn.swish(group_norm(h, p['norm2'])), p['conv2'])
        res = conv(x, p['conv_shortcut']) if 'conv_shortcut' in p else x
        return constrain(h + res)

    def unet(p, sample, t, ctx):
        # FlaxTimesteps (flip_sin_to_cos, freq_shift 0) and the time embedding MLP.
        half = channels[0] // 2
        freqs = jnp.exp(jnp.arange(half, dtype=f32) * -(math.log(10000.0) / half))
        ang = t.astype(f32)[:, None] * freqs[None, :]
        temb = jnp.concatenate([jnp.cos(ang), jnp.sin(ang)], axis=-1)
        temb = dense(temb, p['time_embedding']['linear_1'])
        temb = dense(jax.nn.silu(temb), p['time_embedding']['linear_2'])
        x = conv(jnp.transpose(sample, (0, 2, 3, 1)), p['conv_in'])
        skips = [x]
        for i, blk in enumerate(p['down']):
            for j, rp in enumerate(blk['resnets']):
                x = resnet(x, rp, temb)
                if 'attentions' in blk:
                    x = transformer(x, blk['attentions'][j], ctx)
                skips.append(x)
            if 'downsample' in blk:
                x = conv(x, blk['downsample'], stride=2)
                skips.append(x)
        mid = p['mid']
        x = resnet(x, mid['resnets'][0], temb)
        x = transformer(x, mid['attentions'][0], ctx)
        x = resnet(x, mid['resnets'][1], temb)
        for blk in p['up']:
            for j, rp in enumerate(blk['resnets']):
                x = jnp.concatenate([x, skips.pop()], axis=-1)
                x = resnet(x, rp, temb)
                if 'attentions' in blk:
                    x = transformer(x, blk['attentions'][j], ctx)
            if 'upsample' in blk:
                b, h, w, c = x.shape
                x = jax.image.resize(x, (b, 2 * h, 2 * w, c), method='nearest')
                x = conv(x, blk['upsample'])
        x = jax.nn.silu(group_norm(x, p['conv_norm_out'], out_groups))
        x = conv(x, p['conv_out'])
        return jnp.transpose(x, (0, 3, 1, 2))

    # DDPM (scaled_linear betas 0.00085..0.012 over 1000 steps, rescaled to zero terminal
    # SNR as the submission's config asks), as constants.
    import numpy as np
    betas = np.linspace(0.00085 ** 0.5, 0.012 ** 0.5, 1000, dtype=np.float64) ** 2
    ab_sqrt = np.sqrt(np.cumprod(1 - betas))
    ab_sqrt = (ab_sqrt - ab_sqrt[-1]) * ab_sqrt[0] / (ab_sqrt[0] - ab_sqrt[-1])
    alphas_cumprod = np.clip(ab_sqrt ** 2, 0, 1).astype(np.float32)

    def loss_fn(p, moments, ctx, key):
        sample_key, noise_key, t_key = jax.random.split(key, 3)
        mean, logvar = jnp.split(moments, 2, axis=-1)
        std = jnp.exp(0.5 * jnp.clip(logvar, -30.0, 20.0))
        latents = mean + std * jax.random.normal(sample_key, mean.shape)
        latents = jnp.transpose(latents, (0, 3, 1, 2)) * 0.18215
        noise = jax.random.normal(noise_key, latents.shape)
        t = jax.random.randint(t_key, (latents.shape[0],), 0, 1000)
        ac = jnp.asarray(alphas_cumprod)[t][:, None, None, None]
        a, s = jnp.sqrt(ac), jnp.sqrt(1 - ac)
        pred = unet(p, a * latents + s * noise, t, ctx)
        target = a * noise - s * latents                    # the velocity
        return jnp.mean(jnp.square(target - pred))

    def step(p, mu, nu, count, moments, ctx, key):
        loss, raw = jax.value_and_grad(loss_fn)(p, moments, ctx, key)
        g, _ = clip_by_global_norm(jax, jnp, raw, opt['clip'] or 1.0)
        p, mu, nu, count = adamw(jax, jnp, p, g, mu, nu, count, b1=opt['b1'], b2=opt['b2'],
                                 eps=opt['eps'], wd=opt['wd'])
        return p, mu, nu, count, loss

    sd = jax.ShapeDtypeStruct
    args = (params, params, params, sd((), jnp.int32), sd((B, hh, ww, 2 * cin), f32),
            sd((B, ctx_len, ctx_dim), f32), sd((2,), jnp.uint32))
    in_specs = (pspec, pspec, pspec, P(), P('data', None, None, None), P('data', None, None), P())
    out_specs = (pspec, pspec, pspec, P(), P())
    # The model FLOPs: the forward pass's matmuls and convolutions (counted as it is
    # traced, per global batch) x 3, per device.
    jax.eval_shape(lambda *a: unet(*a), params, sd((B, cin, hh, ww), f32), sd((B,), jnp.int32),
                   sd((B, ctx_len, ctx_dim), f32))
    forward = flops[0]
    print(f'{row.get("name")}: UNet parameters {n_params:,}', file=sys.stderr)
    return step, args, in_specs, out_specs, dict(
        params=n_params, tokens_per_device=pdb,
        model_flops_per_device=3 * forward / (B // pdb),
        flops_convention='3 x the forward pass\'s matmul and convolution FLOPs (the metric is '
                         'step time)')


FAMILIES = {'decoder-lm': decoder_lm, 'bert-encoder': bert, 'resnet50-v1.5': resnet50,
            'decoder-lm-moe': decoder_lm_moe, 'unet-diffusion': unet_diffusion}
# Mesh axes per family: (axis name, parallelism key), outermost first.
MESH_AXES = {'decoder-lm': (('dcn', 'dcn_data'), ('fsdp', 'ici_fsdp'), ('tensor', 'ici_tensor')),
             'bert-encoder': (('data', 'data'),),
             'resnet50-v1.5': (('data', 'data'),),
             'decoder-lm-moe': (('dcn', 'dcn_data'), ('fsdp', 'ici_fsdp')),
             'unet-diffusion': (('data', 'data'),)}


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


def _lower(jax, jnp, fam, row, mesh, layers_override, pallas=False):
    """The row's step jitted with its shardings over `mesh` and lowered, with the
    abstract arguments, the builder's metadata and the arguments' shardings. `pallas`:
    the TPU kernels the published run used (flash attention, megablox) as Pallas calls,
    for a TPU topology's devices only."""
    from jax.sharding import NamedSharding as NS, PartitionSpec as P
    fn, args, in_specs, out_specs, meta = FAMILIES[fam](jax, jnp, row, mesh, P, NS,
                                                        layers_override, pallas=pallas)
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
             256: '4x8x8', 512: '8x8x8', 1024: '8x8x16', 2048: '8x16x16', 3072: '12x16x16',
             4096: '16x16x16', 6144: '16x16x24'}
SLICES_2D = {4: '2x2', 8: '2x4', 16: '4x4', 32: '4x8', 64: '8x8', 128: '8x16', 256: '16x16'}
# The axis the batch is split over, per family: on chips of two cores that are two
# devices (v2, v3), it is split over the cores too.
BATCH_AXIS = {'decoder-lm': 'ici_fsdp', 'bert-encoder': 'data', 'resnet50-v1.5': 'data',
              'decoder-lm-moe': 'ici_fsdp', 'unet-diffusion': 'data'}


def default_topology(row):
    """The row's `topology`, or the default slice shape of Cloud TPU for its chip count
    and generation (`v4:4x4x4` for 64 v4 chips)."""
    if row.get('topology'):
        return row['topology']
    chip, chips = str(row.get('chip', '')).lower(), int(row.get('chips', 0))
    # A multi-slice row's chips are spread over its slices (pods, as PaLM's row says):
    # the topology is one slice's.
    par = normalize_parallelism(row)['parallelism'] if 'parallelism' in row else {}
    chips //= max(1, int(par.get('slices', 1)))
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


def tpu_mesh(np, devices, sizes, names, slices=1):
    """The mesh over a topology's devices, and how it was laid out: MaxText's
    `create_device_mesh` (mesh axes on physical torus axes), the same allowed to split a
    physical axis, or the topology's device order when both refuse the shape. Over
    several slices (`slices` > 1, the first mesh axis being the one across them, as
    MaxText's `dcn_data_parallelism`), MaxText's `create_hybrid_device_mesh`: each
    slice's devices laid out as above, the slices outermost, so that consecutive
    partitions share a slice."""
    from jax.experimental import mesh_utils
    from jax.sharding import Mesh
    if slices > 1:
        if sizes[0] != slices:
            raise SystemExit(f'the mesh axis across slices has {sizes[0]} devices, the '
                             f'topology {slices} slices')
        ici = [1] + list(sizes[1:])
        dcn = [slices] + [1] * (len(sizes) - 1)
        refusals = []
        for how, kw in [('mesh_utils.create_hybrid_device_mesh', {}),
                        ('mesh_utils.create_hybrid_device_mesh(allow_split_physical_axes=True)',
                         {'allow_split_physical_axes': True})]:
            try:
                arr = mesh_utils.create_hybrid_device_mesh(ici, dcn, devices=devices, **kw)
                return Mesh(arr, names), how, refusals
            except Exception as e:  # noqa: BLE001 (any refusal falls back to the next layout)
                refusals.append(f'{how}: {type(e).__name__}: {str(e).splitlines()[0][:300]}')
        by_slice = sorted(devices, key=lambda d: (int(getattr(d, 'slice_index', 0)), int(d.id)))
        return (Mesh(np.array(by_slice).reshape(sizes), names), 'slices outermost, device order',
                refusals)
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


def build_tpu(row, topology, out_dir, layers_override=None, lowered_out=None, meta_out=None):
    """Compiles the row's step with XLA's own TPU compiler (libtpu, ahead of time, no
    TPU needed) for `topology` (`auto`: `default_topology(row)`), and writes into
    `out_dir` the per-chip scheduled program (`program.hlo`) and `xla_tpu.json`: XLA's
    memory and cost analyses, compile time, the device of every partition and the
    custom-calls of the program (the Pallas kernels as `tpu_custom_call`). A multi-slice
    row is not compiled (`xla_tpu.json` says why): it is lowered over `num_slices` copies
    of the topology (`lowered_out`), the slices outermost. The step is built with the TPU kernels the
    published run used (Pallas flash attention, megablox). `lowered_out`: also (or, with
    no `out_dir`, only) the module as lowered for the topology, before any optimization:
    GSPMD shardings, shard_map regions and the Pallas kernels as custom-calls, the input
    `hloc compile --chips N` simulates; `meta_out` its metadata (as `build`'s). Returns
    the report."""
    report_path = os.path.join(out_dir, 'xla_tpu.json') if out_dir else None
    program_path = os.path.join(out_dir, 'program.hlo') if out_dir else None
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        for stale in (report_path, program_path):
            if os.path.exists(stale):
                os.remove(stale)
    if topology in (None, '', 'auto'):
        topology = default_topology(row)
    fam, row, axes, sizes, n = _check(row)
    slices = int(row['parallelism'].get('dcn_data', 1))
    report = dict(row=row.get('name'), topology=topology)
    if slices > 1 and out_dir:
        report['skipped'] = (f'{slices} slices: XLA compiles for one slice\'s topology, and '
                             'multi-slice rows are compiled by --tpu only as far as '
                             '--tpu-lowered')
        if report_path:
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
    if slices > 1:
        # Several slices of `topology` joined by the data-center network (devices carry
        # their `slice_index`); lowered only, never compiled.
        kw['num_slices'] = slices
    devices = topologies.get_topology_desc(platform='tpu', topology_name=topology,
                                           **kw).devices
    cores = len(devices) // n if n else 0
    if cores < 1 or len(devices) != cores * n:
        raise SystemExit(f'row {row.get("name")}: topology {topology} has {len(devices)} '
                         f'devices, the row {n} chips')
    if cores > 1:
        fam, row, axes, sizes, n = _check(split_cores(row, fam, cores))
    names = tuple(a for a, _ in axes)
    mesh, layout, refusals = tpu_mesh(np, devices, sizes, names, slices)
    t = time.time()
    lowered, args, meta, shardings = _lower(jax, jnp, fam, row, mesh, layers_override,
                                            pallas=True)
    lower_s = time.time() - t
    if lowered_out:
        text = lowered.as_text(dialect='hlo')
        if len(jax.tree.leaves(args)) > 2000:
            # Past 2000 arguments jax passes a TPU program's arguments as one tuple (the
            # UNet's 2,000-odd parameter leaves and moments); the module for our pipeline
            # takes them as separate parameters, as the host path does (lowered again).
            from jax._src import dispatch
            tuple_args = dispatch.should_tuple_args
            dispatch.should_tuple_args = lambda num_args, platform: False
            try:
                text = _lower(jax, jnp, fam, row, mesh, layers_override,
                              pallas=True)[0].as_text(dialect='hlo')
            finally:
                dispatch.should_tuple_args = tuple_args
        _write(lowered_out, text)
        if meta_out:
            lowered_meta = dict(meta, devices=len(devices), row=row.get('name'), slices=slices,
                                topology=topology,
                                tpu_custom_calls=text.count('custom_call_target="tpu_custom_call"'))
            _write(meta_out, json.dumps(lowered_meta, indent=1))
    if not out_dir:
        return dict(report, lower_s=lower_s, devices=len(devices))
    report.update(lower_s=lower_s,
                  flops_convention=meta.get('flops_convention'))
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
        # it, and `xla_tpu_no_crash_on_oom` ends in "Invalid TPU program".) The other form
        # of the refusal, when the program is laid out and still does not fit, itemizes
        # it: "Program hbm requirement ...: HLO temp 26.91G (...)".
        need = (re.search(r'HLO temporaries \(([0-9.]+)G\)', msg)
                or re.search(r'HLO temp\s+([0-9.]+)G', msg))
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
    program = compiled.as_text()
    _write(program_path, program)
    # The custom-calls of XLA's program by target, and the Pallas kernels by name (the
    # instruction names XLA gives them: flash_attention, flash_mha_bwd_dq_..., gmm, ...).
    calls, kernels = {}, {}
    for found in re.finditer(r'%([\w.\-]+) = [^\n]*?custom-call\([^\n]*?custom_call_target="([^"]+)"',
                             program):
        calls[found.group(2)] = calls.get(found.group(2), 0) + 1
        if found.group(2) == 'tpu_custom_call':
            name = re.sub(r'(\.\d+)+$', '', found.group(1))
            kernels[name] = kernels.get(name, 0) + 1
    report.update(custom_calls=calls, pallas_kernels=kernels)
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


def build_batch(jobs, tpu=None, layers_override=None):
    """`--batch`: every job built in this process, each reported on standard output when
    its files are written (a failure is that job's error line, not the batch's end)."""
    for i, job in enumerate(jobs):
        try:
            row = dict(job['config'])
            row.setdefault('name', f'config-{i}')
            if tpu:
                report = build_tpu(row, tpu, None, layers_override, lowered_out=job['out'],
                                   meta_out=job['meta'])
                if 'skipped' in report:
                    raise SystemExit(f'row {report["row"]}: {report["skipped"]}')
            else:
                hlo, meta = build(row, layers_override)
                _write(job['out'], hlo)
                _write(job['meta'], json.dumps(meta, indent=1))
            line = {'index': i}
        except SystemExit as e:
            line = {'index': i, 'error': str(e)}
        except Exception as e:  # noqa: BLE001 (one job's failure is reported, the rest built)
            line = {'index': i, 'error': f'{type(e).__name__}: {str(e).splitlines()[0][:500] if str(e) else ""}'}
        print(json.dumps(line), flush=True)


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
                         "Cloud TPU's default slice for its chips); needs --tpu-out or "
                         "--tpu-lowered")
    ap.add_argument('--tpu-out', metavar='DIR',
                    help='with --tpu: where program.hlo and xla_tpu.json go')
    ap.add_argument('--tpu-lowered', metavar='OUT.hlo',
                    help='with --tpu: write the step as lowered for the topology, before '
                         'optimization (shardings, shard_map regions, Pallas kernels as '
                         'tpu_custom_call), for `hloc compile OUT.hlo --chips N`; --meta '
                         'writes its metadata; without --tpu-out nothing is compiled')
    ap.add_argument('--batch', metavar='JOBS.json',
                    help='build many steps in one process (one jax start): a JSON list of '
                         '{"config": row, "out": OUT.hlo, "meta": M.json}, each built as '
                         '--config OUT --meta M builds it (with --tpu TOPOLOGY, as '
                         '--tpu-lowered OUT); one JSON line per job on standard output as '
                         'it is written: {"index": i} or {"index": i, "error": "..."}. The '
                         'host devices are counted once, for the first job')
    a = ap.parse_args(argv)
    if a.batch:
        if a.config or a.row or a.out or a.tpu_out or a.tpu_lowered or a.xla_opt or a.inputs:
            ap.error('--batch takes its configurations and outputs from JOBS.json (only '
                     '--tpu and --layers beside it)')
        build_batch(json.load(open(a.batch)), a.tpu, a.layers)
        return
    if a.config:
        row = json.loads(a.config)
        row.setdefault('name', 'config')
    elif a.rows and a.row:
        row = _row(a.rows, a.row)
    else:
        ap.error('give --rows and --row, or --config')
    if a.tpu_lowered and not a.tpu:
        ap.error('--tpu-lowered needs --tpu TOPOLOGY')
    if a.tpu:
        if not (a.tpu_out or a.tpu_lowered):
            ap.error('--tpu needs --tpu-out DIR or --tpu-lowered OUT.hlo')
        if a.out or a.xla_opt or a.inputs or (a.meta and not a.tpu_lowered):
            ap.error('--tpu writes only into --tpu-out and --tpu-lowered (--meta with '
                     '--tpu-lowered; no OUT, --xla-opt, --inputs)')
        report = build_tpu(row, a.tpu, a.tpu_out, a.layers, lowered_out=a.tpu_lowered,
                           meta_out=a.meta)
        if a.tpu_lowered and 'skipped' in report:
            raise SystemExit(f'row {report["row"]}: no --tpu-lowered module: {report["skipped"]}')
        if a.tpu_out and 'skipped' not in report:
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
