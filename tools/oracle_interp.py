#!/usr/bin/env python3
"""Cross-check hloc's engines (`hloc run --engine interp|jit|tpu`) against real XLA on HLO
modules with seeded inputs.

    --engine interp --engine jit --engine tpu --dir ../shared/external-hlo

runs every module of XLA's own test/benchmark set on all three engines (XLA once per
module) and ends with a table per engine: pass / fail (a mismatch, cause printed) /
unsupported (the engine refuses an op with a located error) / skip (hloc check or XLA
refuses, or the inputs cannot be made). The TPU engine runs with `--precision highest`
(f32-accurate MXU products, comparable with XLA's CPU).

For each HLO file: `hloc check` it (SKIP when rejected), generate seeded random inputs
p0..pN for the entry parameters, run XLA (<shared>/xla-oracle/run_hlo.py, with
JAX_ENABLE_X64=1 so 64-bit parameters are not truncated) to get the expected outputs,
then `hloc run FILE --inputs IN --expect EXPECTED [--tolerances T.json] -o GOT`.

Prints one line per file and variant: PASS, FAIL (hloc's mismatch lines plus up to a few
elements per output that are out of tolerance: index, XLA value, hloc value, bit patterns
for floats), NEAR, XFAIL (an expected mismatch, see the xfail directive) or SKIP (reason:
hloc check rejects, XLA rejects or crashes, a tuple-shaped entry parameter, ...), then
`N passed, M failed, E near, X xfailed, K skipped`.  Exit status 1 if any FAIL.

NEAR: an f32-only module whose failing outputs are f32 is re-run on XLA upcast to f64; if
the interpreter's error on each failing output is within 1e-5 * max|f64 result| (long
dot/convolution/reduce accumulations summed in another order), the file is NEAR, not FAIL,
and the errors of both XLA and the interpreter against f64 are printed.

    ~/.cache/xla-oracle-venv/bin/python tools/oracle_interp.py          # default set, 2 jobs
    ~/.cache/xla-oracle-venv/bin/python tools/oracle_interp.py tools/interp-cases/sort_*.hlo
    ~/.cache/xla-oracle-venv/bin/python tools/oracle_interp.py -k scatter --keep /tmp/oi

Default files: hlo-tests/cases/shape/*.hlo, hlo-tests/cases/dynamic/*.hlo and
tools/interp-cases/*.hlo.  Run it with the oracle venv's python (it needs numpy and
ml_dtypes); create the venv with `bash ../shared/xla-oracle/setup.sh`.  Build hloc
first: `cargo build -p hlo-tools`.

Inputs (seeded by --seed and the file name, so every file always gets the same values):
  * floats: normal(0, 2) with about 1 in 8 elements drawn from a few exact values
    (0, -0, +-0.5, 1.5, -2.5, 1, -1, 3) so ties and rounding midpoints occur;
    bf16/f16 values are rounded to their type (bf16 stored as uint16 bits); fp8 and
    f4e2m1fn values likewise, stored as uint8 bit patterns (f8e8m0fnu: powers of two
    2^-12..2^11); s4/s2/u4/u2 as for other integers within their range, stored as
    int8/uint8 values (tools/oracle_narrow.py converts for XLA);
  * complex (c64, c128): real and imaginary parts drawn independently as f32/f64 above
    (`uniform LO HI` applies to both parts);
  * integers used as indices (an operand of gather/scatter indices, dynamic-slice /
    dynamic-update-slice starts, directly or through reshape/convert/broadcast/
    concatenate/slice/transpose/copy) lie in [0, D) for most elements and in
    [-3, 0) or [D, D+3) for about 1 in 6 (D = the largest dim of the indexed operand),
    so clamping and scatter skipping are exercised;
  * other integers: mostly small (|x| <= 20, unsigned 0..40), about 1 in 5 from the
    type's full range; pred: random.

Directives: comment lines in the HLO file of the form `// oracle: ...`:
  // oracle: tolerance rtol=R atol=A         float tolerance for every output
  // oracle: tolerance o1 rtol=R atol=A      ... for one output (overrides the above)
  // oracle: exact                           tolerance 0 and bit-exact outputs
                                             (-0 != +0; any NaN matches any NaN)
  // oracle: input p1 uniform LO HI          p1 uniform in [LO, HI] (integers: inclusive)
  // oracle: input p1 values V0,V1,...       p1's elements cycle through these values
                                             (floats: decimal, inf, nan, -nan or 0x bits)
  // oracle: xfail REASON                    a mismatch is expected (XLA's behaviour is
  // oracle: xfail-asis REASON               unspecified or wrong): reported as XFAIL with
  // oracle: xfail-lifted REASON             the reason and the differences, not as FAIL;
                                             -asis/-lifted: only that variant

Variants: every file runs as written ("asis") and, when its ENTRY computation has array
constants, again with those constants turned into extra entry parameters fed with the same
values ("lifted"): XLA constant-folds constant-only expressions with its HloEvaluator,
whose semantics can differ from the compiled CPU code (e.g. count-leading-zeros of negative
numbers, integer division by zero crashes the compiler); the lifted run checks the
compiled code.  --variants asis|lifted|both (default both).

Without a tolerance directive hloc's per-dtype defaults apply (f32/f64/c64/c128 1e-5,
f16 1e-3, bf16 2e-2; integers and pred exact). Complex outputs are compared by magnitude:
|hloc - xla| <= atol + rtol*|xla| with complex absolute values.

--errors adds, for every float or complex output, XLA's magnitude max|xla| and hloc's
largest absolute error and largest relative error (over elements with |xla| > atol) to
each PASS/FAIL line.

Options: FILES (default set above), -k SUBSTR, -j N (default 2), --seed N (default 0),
--hloc PATH, --python PATH ($ORACLE_PYTHON or ~/.cache/xla-oracle-venv/bin/python),
--shared DIR (default <repo>/../shared), --keep DIR (keep inputs/expected/got per file),
--timeout SECONDS (per process, default 120).
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from oracle_common import REPO, add_oracle_args, oracle_path
from oracle_common import error_line as _error_line
TAIL = 6          # error lines shown for a FAIL / SKIP
SHOW = 4          # differing elements listed per failing output

NP_DTYPE = {
    'pred': np.bool_, 's8': np.int8, 's16': np.int16, 's32': np.int32, 's64': np.int64,
    'u8': np.uint8, 'u16': np.uint16, 'u32': np.uint32, 'u64': np.uint64,
    'f16': np.float16, 'f32': np.float32, 'f64': np.float64, 'bf16': 'bf16',
    'c64': np.complex64, 'c128': np.complex128,
    # Narrow types, stored as hloc stores them (ir/io/src/npz.rs; tools/oracle_narrow.py
    # converts on the XLA side): fp8/f4 as uint8 bits, s4/s2/s1 as int8 values, u4/u2/u1
    # as uint8 values.
    's4': np.int8, 's2': np.int8, 's1': np.int8, 'u4': np.uint8, 'u2': np.uint8, 'u1': np.uint8,
}
# fp8/fp4 element types -> ml_dtypes names (values travel as uint8 bit patterns).
NARROW = {'f8e4m3fn': 'float8_e4m3fn', 'f8e5m2': 'float8_e5m2', 'f8e4m3': 'float8_e4m3',
          'f8e4m3fnuz': 'float8_e4m3fnuz', 'f8e5m2fnuz': 'float8_e5m2fnuz',
          'f8e4m3b11fnuz': 'float8_e4m3b11fnuz', 'f8e3m4': 'float8_e3m4',
          'f8e8m0fnu': 'float8_e8m0fnu', 'f4e2m1fn': 'float4_e2m1fn'}
NP_DTYPE.update({t: np.uint8 for t in NARROW})
SUB_BITS = {'s4': 4, 's2': 2, 's1': 1, 'u4': 4, 'u2': 2, 'u1': 1}
FLOATS = ('f16', 'bf16', 'f32', 'f64') + tuple(NARROW)


def narrow_dtype(dt):
    import ml_dtypes
    return getattr(ml_dtypes, NARROW[dt])
COMPLEX = {'c64': 'f32', 'c128': 'f64'}   # complex type -> type of its parts
SPECIALS = np.array([0.0, -0.0, 0.5, -0.5, 1.5, -2.5, 1.0, -1.0, 3.0])
# Ops through which an integer parameter still counts as an index operand.
PASS_THROUGH = {'reshape', 'convert', 'broadcast', 'concatenate', 'slice', 'transpose', 'copy',
                'bitcast'}


def error_line(text):
    """The last `SomeError: ...` / `error: ...` line of a tool's output, else the last line."""
    return _error_line(text, tool_errors=True)


def indent(lines):
    return '\n'.join('    ' + ln for ln in lines)


# ------------------------------------------------------------------ HLO text
def load_hlo_util(shared):
    sys.path.insert(0, os.path.join(shared, 'xla-oracle'))
    import hlo_util  # noqa: E402
    return hlo_util


def entry_block(text):
    """Lines of the ENTRY computation's body (without `ENTRY`, XLA takes the last
    computation)."""
    lines = text.splitlines()
    starts = [i for i, ln in enumerate(lines) if re.match(r'^\s*ENTRY\b', ln)]
    if not starts:
        starts = [i for i, ln in enumerate(lines) if re.match(r'^\s*%?[\w.\-]+\s*(\(.*\)\s*->.*)?\{\s*$', ln)][-1:]
    for i in starts:
        body = []
        for l2 in lines[i + 1:]:
            if l2.strip() == '}':
                break
            body.append(l2)
        return body
    raise ValueError('no ENTRY computation')


def parse_entry(hu, text):
    """(params, instrs): params = [(number, name, shape text)] sorted by number;
    instrs = parsed instruction dicts of the entry computation."""
    # Statements may span lines (`conditional(a, b,\n c)`): join until brackets balance.
    stmts, cur = [], ''
    for ln in entry_block(text):
        cur = f'{cur} {ln.strip()}' if cur else ln
        if sum(cur.count(c) for c in '([{') <= sum(cur.count(c) for c in ')]}'):
            stmts.append(cur)
            cur = ''
    if cur:
        stmts.append(cur)
    instrs = [p for p in (hu.parse_instruction(ln) for ln in stmts) if p]
    params = []
    for p in instrs:
        if p['opcode'] == 'parameter':
            params.append((int(p['operands'].strip()), p['name'].lstrip('%'), p['shape']))
    return sorted(params), instrs


def operand_names(hu, p):
    out = []
    for o in hu.split_top_level(p['operands']):
        o = o.strip()
        if o:
            out.append(o.split()[-1].lstrip('%'))   # `f32[2] %x` or `x`
    return out


def index_bounds(hu, instrs):
    """{value name: D} for values used as gather/scatter indices or dynamic-(update-)slice
    starts, followed back through PASS_THROUGH ops; D = largest dim of the indexed operand."""
    by_name = {p['name'].lstrip('%'): p for p in instrs}
    shapes = {n: p['shape'] for n, p in by_name.items()}

    def max_dim(name):
        try:
            return max(hu.parse_array_shape(shapes[name])[1] or [1])
        except (KeyError, ValueError):
            return None

    bounds = {}

    def mark(name, d, seen=()):
        if d is None or name in seen:
            return
        bounds[name] = max(bounds.get(name, 0), d)
        p = by_name.get(name)
        if p and p['opcode'] in PASS_THROUGH:
            for o in operand_names(hu, p):
                mark(o, d, seen + (name,))

    for p in instrs:
        ops = operand_names(hu, p)
        if not ops:
            continue
        if p['opcode'] == 'gather' and len(ops) >= 2:
            mark(ops[1], max_dim(ops[0]))
        elif p['opcode'] == 'scatter' and len(ops) >= 3:
            n = (len(ops) - 1) // 2
            mark(ops[n], max_dim(ops[0]))
        elif p['opcode'] == 'dynamic-slice':
            for o in ops[1:]:
                mark(o, max_dim(ops[0]))
        elif p['opcode'] == 'dynamic-update-slice':
            for o in ops[2:]:
                mark(o, max_dim(ops[0]))
    return bounds


def directives(text):
    """{'tolerance': {None|out index: (rtol, atol)}, 'exact': bool, 'inputs': {k: spec}}."""
    d = {'tolerance': {}, 'exact': False, 'inputs': {}, 'xfail': {}}
    for ln in text.splitlines():
        m = re.match(r'^\s*//\s*oracle:\s*(.*)$', ln)
        if not m:
            continue
        words = m.group(1).split()
        if not words:
            continue
        if words[0] == 'exact':
            d['exact'] = True
        elif words[0] in ('xfail', 'xfail-asis', 'xfail-lifted'):
            reason = ' '.join(words[1:]) or words[0]
            for v in ('asis', 'lifted'):
                if words[0] in ('xfail', 'xfail-' + v):
                    d['xfail'][v] = reason
        elif words[0] == 'tolerance':
            target = None
            rest = words[1:]
            if rest and re.fullmatch(r'o\d+', rest[0]):
                target, rest = int(rest[0][1:]), rest[1:]
            kv = dict(w.split('=', 1) for w in rest)
            d['tolerance'][target] = (float(kv['rtol']), float(kv['atol']))
        elif words[0] == 'input' and len(words) >= 3:
            k = int(words[1].lstrip('p'))
            if words[2] == 'uniform':
                d['inputs'][k] = ('uniform', float(words[3]), float(words[4]))
            elif words[2] == 'values':
                d['inputs'][k] = ('values', [v.strip() for v in ' '.join(words[3:]).split(',')])
            else:
                raise ValueError('unknown input directive: ' + ln)
        else:
            raise ValueError('unknown oracle directive: ' + ln)
    return d


# ------------------------------------------------------------------ inputs
def type_range(dt):
    if dt in SUB_BITS:
        b = SUB_BITS[dt]
        return (-(1 << (b - 1)), (1 << (b - 1)) - 1) if dt[0] == 's' else (0, (1 << b) - 1)
    info = np.iinfo(NP_DTYPE[dt])
    return int(info.min), int(info.max)


def gen_param(rng, dt, dims, bound, spec):
    """One input array (bf16 as uint16 bits)."""
    n = int(np.prod(dims)) if dims else 1
    if dt in COMPLEX:
        if spec is not None and spec[0] != 'uniform':
            raise ValueError(f'`values` inputs are not supported for {dt} parameters')
        part = COMPLEX[dt]
        re_, im = gen_param(rng, part, dims, None, spec), gen_param(rng, part, dims, None, spec)
        return (re_ + 1j * im.astype(np.complex128)).astype(NP_DTYPE[dt]).reshape(dims)
    if dt == 'pred':
        v = rng.random(n) < 0.5
    elif spec is not None:
        if spec[0] == 'uniform':
            lo, hi = spec[1], spec[2]
            v = rng.integers(int(lo), int(hi) + 1, n) if dt not in FLOATS else rng.uniform(lo, hi, n)
        else:
            return literal_array(spec[1], dt, dims)
    elif dt == 'f8e8m0fnu':
        v = np.exp2(rng.integers(-12, 12, n).astype(np.float64))   # powers of two only
    elif dt in FLOATS:
        v = rng.normal(0.0, 2.0, n)
        special = rng.random(n) < 0.125
        v[special] = rng.choice(SPECIALS, int(special.sum()))
    elif bound is not None:
        v = rng.integers(0, max(bound, 1), n)
        off = rng.random(n) < 1 / 6
        oob = np.where(rng.random(n) < 0.5, rng.integers(-3, 0, n), rng.integers(bound, bound + 3, n))
        v[off] = oob[off]
    else:
        lo, hi = type_range(dt)
        unsigned = lo == 0
        v = rng.integers(0, 41, n) if unsigned else rng.integers(-20, 21, n)
        if dt in SUB_BITS:
            v = np.clip(v, lo, hi)
        full = rng.random(n) < 0.2
        fv = rng.integers(lo, hi, n, dtype=np.int64 if dt in SUB_BITS else NP_DTYPE[dt], endpoint=True)
        v = v.astype(object)
        v[full] = fv[full].astype(object)
    if dt == 'bf16':
        import ml_dtypes
        a = np.asarray(v, np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    elif dt in NARROW:
        a = np.asarray(v, np.float32).astype(narrow_dtype(dt)).view(np.uint8)
    elif dt in FLOATS:
        a = np.asarray(v, np.float64).astype(NP_DTYPE[dt])
    else:
        a = np.array([int(x) for x in v] if dt != 'pred' else v).astype(NP_DTYPE[dt])
    return a.reshape(dims)


# Larger modules (multi-billion-parameter models) would exhaust the machine's memory.
MAX_INPUT_BYTES = 256 << 20


def make_inputs(hu, text, seed, name):
    """({'p0': array, ...}, None) or (None, skip reason)."""
    params, instrs = parse_entry(hu, text)
    bounds = index_bounds(hu, instrs)
    dirs = directives(text)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    arrays = {}
    total = 0
    for k, (num, pname, shape) in enumerate(params):
        try:
            dt, dims, _ = hu.parse_array_shape(shape)
            if dt in NP_DTYPE:
                size = 2 if NP_DTYPE[dt] == 'bf16' else np.dtype(NP_DTYPE[dt]).itemsize
                total += int(np.prod(dims, dtype=np.float64)) * size
        except ValueError:
            pass
    if total > MAX_INPUT_BYTES:
        return None, f'inputs of {total / 2**20:.0f} MiB: more than this machine runs three engines and XLA on (limit {MAX_INPUT_BYTES >> 20} MiB)'
    for k, (num, pname, shape) in enumerate(params):
        if num != k:
            return None, f'entry parameter numbers are not 0..{len(params) - 1}'
        if shape.startswith('('):
            return None, f'tuple-shaped entry parameter p{k} ({shape}) cannot travel in an .npz'
        try:
            dt, dims, _ = hu.parse_array_shape(shape)
        except ValueError:
            return None, f'parameter p{k} has a shape the script cannot read: {shape}'
        if dt not in NP_DTYPE:
            return None, f'parameter p{k}: element type {dt} has no numpy dtype'
        arrays[f'p{k}'] = gen_param(rng, dt, dims, bounds.get(pname), dirs['inputs'].get(k))
    return arrays, None


LIT_TOKEN = re.compile(r'-?nan(?:\([^)]*\))?|-?inf|true|false|0x[0-9a-fA-F]+|'
                       r'[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?')


def literal_array(tokens, dt, dims):
    """Array of dtype dt (bf16 as uint16 bits) from literal tokens (cycled to fill dims).
    Floats: decimal, inf, nan, -nan, or 0x... = the raw bit pattern; ints: decimal or 0x..."""
    n = int(np.prod(dims)) if dims else 1
    tokens = [tokens[i % len(tokens)] for i in range(n)]
    if dt == 'pred':
        return np.array([t in ('true', '1') for t in tokens], np.bool_).reshape(dims)
    if dt in NARROW:
        out = np.zeros(n, np.uint8)
        for i, t in enumerate(tokens):
            if t.startswith('0x'):
                out[i] = int(t, 16)
            else:
                x = float(re.sub(r'\(.*\)', '', t))
                out[i] = np.array([x], np.float32).astype(narrow_dtype(dt)).view(np.uint8)[0]
        return out.reshape(dims)
    if dt in SUB_BITS:
        lo, hi = type_range(dt)
        vals = [int(t, 16) if t.startswith('0x') else int(t) for t in tokens]
        if any(v < lo or v > hi for v in vals):
            raise ValueError(f'a value of {tokens} does not fit {dt}')
        return np.array(vals, NP_DTYPE[dt]).reshape(dims)
    if dt not in FLOATS:
        vals = [int(t, 16) if t.startswith('0x') else int(t) for t in tokens]
        width = np.iinfo(NP_DTYPE[dt]).bits
        vals = [v & ((1 << width) - 1) for v in vals]           # two's complement bits
        u = np.array(vals, {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[width])
        return u.view(NP_DTYPE[dt]).reshape(dims)
    width = {'f16': 16, 'bf16': 16, 'f32': 32, 'f64': 64}[dt]
    ubits = {16: np.uint16, 32: np.uint32, 64: np.uint64}[width]
    out = np.zeros(n, ubits)
    for i, t in enumerate(tokens):
        if t.startswith('0x'):
            out[i] = int(t, 16)
            continue
        if re.fullmatch(r'[-+]?\d+', t):      # XLA's parser reads `-0` as the integer 0: +0.0
            x = np.float64(int(t))
        else:
            x = np.float64(float(re.sub(r'\(.*\)', '', t)))
        if 'nan' in t:                        # float('-nan') keeps the sign on CPython
            x = np.copysign(np.float64('nan'), -1.0 if t.startswith('-') else 1.0)
        if dt == 'bf16':
            import ml_dtypes
            out[i] = np.array([x], np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)[0]
        else:
            out[i] = np.array([x], NP_DTYPE[dt]).view(ubits)[0]
    return out.view(np.uint16 if dt == 'bf16' else NP_DTYPE[dt]).reshape(dims)


def strip_entry_layout(hu, text):
    """The module header without `entry_computation_layout={...}`."""
    m = re.search(r',?\s*entry_computation_layout=\{', text)
    if not m:
        return text
    end = hu._match_close(text, m.end() - 1)
    return text[:m.start()] + text[end + 1:]


def lift_constants(hu, text):
    """(text, {pK: array}) with every array constant of the ENTRY computation turned into a
    new entry parameter whose input is the constant's value, so XLA cannot constant-fold
    (the folded and the compiled semantics of XLA can differ); (None, None) if nothing lifts."""
    params, _ = parse_entry(hu, text)
    nxt = len(params)
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if re.match(r'^\s*ENTRY\b', ln)), None)
    if start is None:                     # no ENTRY keyword line: nothing to lift
        return None, None
    extra = {}
    for i in range(start + 1, len(lines)):
        if lines[i].strip() == '}':
            break
        p = hu.parse_instruction(lines[i])
        if not p or p['opcode'] != 'constant' or p['shape'].startswith('('):
            continue
        try:
            dt, dims, _ = hu.parse_array_shape(p['shape'])
        except ValueError:
            continue
        toks = LIT_TOKEN.findall(p['operands'])
        n = int(np.prod(dims)) if dims else 1
        if dt not in NP_DTYPE or dt in COMPLEX or n == 0 or len(toks) != n:
            continue
        extra[f'p{nxt}'] = literal_array(toks, dt, dims)
        lines[i] = (p['indent'] + ('ROOT ' if p['root'] else '') + p['name'] + ' = ' +
                    p['shape'] + f' parameter({nxt})')
        nxt += 1
    if not extra:
        return None, None
    return strip_entry_layout(hu, '\n'.join(lines) + '\n'), extra


# ------------------------------------------------------------------ outputs
def logical(a, dt_hint):
    """An output array as (values for display, bit view or None)."""
    if dt_hint == 'bf16' and a.dtype == np.uint16:
        import ml_dtypes
        return a.view(ml_dtypes.bfloat16).astype(np.float32), a
    if dt_hint in NARROW and a.dtype == np.uint8:
        return a.view(narrow_dtype(dt_hint)).astype(np.float32), a
    if a.dtype.kind == 'f':
        return a, a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.itemsize])
    if a.dtype.kind == 'c':
        # Bits of the (re, im) parts side by side: one unsigned integer pair per element.
        bits = np.ascontiguousarray(a).reshape(-1).view({8: np.uint32, 16: np.uint64}[a.itemsize]).reshape(a.shape + (2,))
        return a, bits
    return a, None


def output_types(hu, text):
    """Element type names of the entry root's leaves (for bf16 reinterpretation)."""
    _, instrs = parse_entry(hu, text)
    root = next((p for p in instrs if p['root']), instrs[-1] if instrs else None)
    if root is None:
        return []
    return re.findall(r'\b(pred|f8e\w+|f4e2m1fn|[suf]\d+|bf16|c64|c128)\[', root['shape'])


DEFAULT_TOL = {'f32': 1e-5, 'f64': 1e-5, 'f16': 1e-3, 'bf16': 2e-2,
               'c64': 1e-5, 'c128': 1e-5}   # hloc's defaults


def tolerances(n, types, dirs):
    """Per-output (rtol, atol): the directives', else hloc's default for the output's type."""
    out = []
    for i in range(n):
        t = types[i] if i < len(types) else None
        dflt = DEFAULT_TOL.get(t, 0.0)
        if dirs['exact']:
            out.append((0.0, 0.0))
        else:
            out.append(dirs['tolerance'].get(i, dirs['tolerance'].get(None, (dflt, dflt))))
    return out


def show_diffs(exp, got, types, tols, exact):
    """Lines listing up to SHOW out-of-tolerance (exact: bit-different) elements per output."""
    lines = []
    for i, key in enumerate(sorted(exp.keys(), key=lambda k: int(k[1:]))):
        if key not in got:
            lines.append(f'{key}: missing from hloc output')
            continue
        e, g = exp[key], got[key]
        if e.shape != g.shape or e.dtype != g.dtype:
            lines.append(f'{key}: XLA {e.dtype}{list(e.shape)} vs hloc {g.dtype}{list(g.shape)}')
            continue
        t = types[i] if i < len(types) else None
        ev, eb = logical(e, t)
        gv, gb = logical(g, t)
        if eb is not None:
            cplx = e.dtype.kind == 'c'
            ef, gf = ev.astype(np.complex128 if cplx else np.float64), gv.astype(np.complex128 if cplx else np.float64)
            both_nan = np.isnan(ef) & np.isnan(gf)
            if exact:
                differ = (eb != gb).any(axis=-1) if cplx else eb != gb
                bad = differ & ~both_nan
            else:
                rtol, atol = tols[i]
                with np.errstate(invalid='ignore', over='ignore'):
                    ok = (ef == gf) | both_nan | (np.abs(gf - ef) <= atol + rtol * np.abs(ef))
                bad = ~ok
        else:
            bad = ev != gv
        bad = np.asarray(bad).reshape(e.shape)
        idx = [()] if e.shape == () and bool(bad) else list(np.argwhere(bad))
        if len(idx) == 0:
            continue
        parts = []
        for ix in idx[:SHOW]:
            ix = tuple(int(x) for x in ix)
            xv, hv = ev[ix], gv[ix]
            s = f'[{",".join(map(str, ix))}] xla {fmt(xv)} hloc {fmt(hv)}'
            if eb is not None and e.dtype.kind == 'c':
                s += f' (|diff| {abs(complex(hv) - complex(xv)):.3g})'
            elif eb is not None:
                s += f' (bits {int(eb[ix]):#x} vs {int(gb[ix]):#x})'
            parts.append(s)
        lines.append(f'{key}: {len(idx)} of {e.size} differ: ' + '; '.join(parts))
    return lines


def fmt(x):
    if isinstance(x, (np.floating, float)):
        return repr(float(x))
    if isinstance(x, (np.complexfloating, complex)):
        return repr(complex(x))
    return str(x)


def error_stats(exp, got, types, tols):
    """Per float/complex output: `oK max|xla| M, max abs err A, max rel err R` (finite elements)."""
    lines = []
    for i, key in enumerate(sorted(exp.keys(), key=lambda k: int(k[1:]))):
        e, g = exp[key], got.get(key)
        if g is None or e.shape != g.shape or e.dtype != g.dtype:
            continue
        t = types[i] if i < len(types) else None
        ev, eb = logical(e, t)
        gv, _ = logical(g, t)
        if eb is None or e.size == 0:
            continue
        wide = np.complex128 if e.dtype.kind == 'c' else np.float64
        ef, gf = ev.astype(wide).ravel(), gv.astype(wide).ravel()
        fin = np.isfinite(ef) & np.isfinite(gf)
        if not fin.any():
            continue
        d, m = np.abs(gf[fin] - ef[fin]), np.abs(ef[fin])
        atol = tols[i][1] if i < len(tols) else 0.0
        big = m > atol
        rel = float((d[big] / m[big]).max()) if big.any() else 0.0
        lines.append(f'{key} {t}{list(e.shape)}: max|xla| {m.max():.3g}, max abs err {d.max():.3g}, max rel err {rel:.3g}')
    return lines


def bit_exact(exp, got, types):
    """Names of outputs that differ bit-wise (NaNs match NaNs)."""
    bad = []
    for i, key in enumerate(sorted(exp.keys(), key=lambda k: int(k[1:]))):
        e, g = exp[key], got.get(key)
        if g is None or e.shape != g.shape or e.dtype != g.dtype:
            bad.append(key)
            continue
        t = types[i] if i < len(types) else None
        ev, eb = logical(e, t)
        gv, gb = logical(g, t)
        if eb is None:
            same = np.array_equal(ev, gv)
        elif e.dtype.kind == 'c':
            nan = np.isnan(ev) & np.isnan(gv)
            same = bool(np.all((eb == gb).all(axis=-1) | nan))
        else:
            nan = np.isnan(ev.astype(np.float64)) & np.isnan(gv.astype(np.float64))
            same = bool(np.all((eb == gb) | nan))
        if not same:
            bad.append(key)
    return bad


# ------------------------------------------------------------------ one file
def oracle_cmd(args, oracle):
    """run_hlo.py (`oracle`) through tools/oracle_narrow.py, which reads and writes the fp8,
    fp4 and sub-byte integer types as hloc stores them."""
    return [args.python, os.path.join(REPO, 'tools', 'oracle_narrow.py'), '--shared',
            os.path.dirname(os.path.dirname(oracle))]


def hloc_check(args, path):
    """None if `hloc check` accepts the file, else the first error line."""
    try:
        c = subprocess.run([args.hloc, 'check', path], capture_output=True, text=True,
                           timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return 'hloc check timed out'
    if c.returncode == 0:
        return None
    out = c.stderr + c.stdout
    return next((ln for ln in out.splitlines() if ': error:' in ln), error_line(out)).strip()[:300]


def f64_referee(args, oracle, text, inputs, expected, got, types, failed, tmp):
    """For an f32-only module whose failing outputs are all f32: run XLA on the module upcast
    to f64 and return a note if the interpreter's error on every failing output is within
    1e-5 * max|f64 result| (accumulation order, not semantics), else None."""
    if re.search(r'\b(bf16|f16|f64)\[', text) or re.search(r'bitcast-convert|reduce-precision', text):
        return None
    if not failed or any(types[i] != 'f32' for i in failed if i < len(types)):
        return None
    text64 = re.sub(r'\bf32\[', 'f64[', text)
    path = os.path.join(tmp, 'referee_f64.hlo')
    with open(path, 'w') as fh:
        fh.write(text64)
    inp = os.path.join(tmp, 'referee_inputs.npz')
    np.savez(inp, **{k: (v.astype(np.float64) if v.dtype == np.float32 else v)
                     for k, v in inputs.items()})
    out = os.path.join(tmp, 'referee_f64.npz')
    try:
        r = subprocess.run(oracle_cmd(args, oracle) + [path, inp, '-o', out], capture_output=True,
                           text=True, timeout=args.timeout, env=dict(os.environ, JAX_ENABLE_X64='1'))
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        return None
    ref = np.load(out)
    notes = []
    for i in failed:
        k = f'o{i}'
        R, E, G = ref[k], expected[k].astype(np.float64), got[k].astype(np.float64)
        if not (np.isfinite(R).all() and np.isfinite(G).all()):
            return None
        scale = float(np.abs(R).max())
        ei, ex = float(np.abs(G - R).max()), float(np.abs(E - R).max())
        if ei > 1e-5 * scale:
            return None
        notes.append(f'{k}: max |error| vs f64 interp {ei:.3g}, XLA {ex:.3g}, max|f64 result| {scale:.3g}')
    return ['out of tolerance against XLA, but within 1e-5 * max|result| of XLA run in f64 '
            '(accumulation order):'] + notes


# An engine's refusal of an op it does not implement (a located error, not a mismatch).
UNSUPPORTED = re.compile(r'not supported by|unsupported|not implemented|no TPU lowering|cannot (lower|compile|run)', re.I)


def run_one(args, hu, oracle, path, variant):
    """[(engine, status, detail lines)] for one file; variant 'asis' or 'lifted' (see
    lift_constants). XLA runs once; each engine of --engine is compared with it."""
    r = run_variant(args, hu, oracle, path, variant)
    if isinstance(r, tuple):
        r = [(e, r[0], r[1]) for e in args.engine]
    try:
        with open(path) as fh:
            reason = directives(fh.read())['xfail'].get(variant)
    except (OSError, ValueError):
        reason = None
    return [(e, 'XFAIL', [reason] + d) if st == 'FAIL' and reason else (e, st, d) for e, st, d in r]


def run_variant(args, hu, oracle, path, variant):
    rel = os.path.relpath(path, REPO)
    name = re.sub(r'[^\w.-]', '_', rel) + ('' if variant == 'asis' else '.' + variant)
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as e:
        return 'FAIL', [f'cannot read: {e}']
    why = hloc_check(args, path)
    if why:
        return 'SKIP', ['hloc check rejects: ' + why]
    if re.search(r'constant\(\{\.\.\.\}\)', text):
        return 'SKIP', ['constants printed elided (`{...}`): their values are unknown']
    try:
        inputs, why = make_inputs(hu, text, args.seed, rel)
        dirs = directives(text)
    except ValueError as e:
        return 'FAIL', [f'cannot prepare inputs: {e}']
    if inputs is None:
        return 'SKIP', [why]
    tmp = tempfile.mkdtemp(prefix='oracle-interp-')
    try:
        if variant == 'lifted':
            text, extra = lift_constants(hu, text)
            if text is None:
                return 'SKIP', ['no constants to lift']
            inputs.update(extra)
            path = os.path.join(tmp, os.path.basename(path))
            with open(path, 'w') as fh:
                fh.write(text)
            why = hloc_check(args, path)
            if why:
                return 'FAIL', ['hloc check rejects the lifted module: ' + why]
        inp, exp, got = (os.path.join(tmp, f) for f in ('inputs.npz', 'expected.npz', 'got.npz'))
        np.savez(inp, **inputs)
        env = dict(os.environ, JAX_ENABLE_X64='1')
        try:
            r = subprocess.run(oracle_cmd(args, oracle) + [path, inp, '-o', exp], capture_output=True,
                               text=True, timeout=args.timeout, env=env)
        except subprocess.TimeoutExpired:
            return 'SKIP', [f'XLA timed out after {args.timeout}s']
        if r.returncode < 0:
            import signal
            try:
                sig = signal.Signals(-r.returncode).name
            except ValueError:
                sig = str(-r.returncode)
            out = (r.stdout + r.stderr).strip()
            return 'SKIP', [f'XLA crashed ({sig})' + (': ' + error_line(out) if out else '')]
        if r.returncode != 0:
            return 'SKIP', [f'XLA rejects (exit {r.returncode}): ' + error_line(r.stdout + r.stderr)]
        expected = dict(np.load(exp))
        def engine_run(engine):
            got = os.path.join(tmp, f'got.{engine}.npz')
            cmd = [args.hloc, 'run', path, '--engine', engine, '--inputs', inp, '--expect', exp, '-o', got]
            if engine == 'tpu':
                cmd += ['--precision', 'highest']   # f32-accurate MXU products, as XLA's CPU
            types = output_types(hu, text)
            tols = tolerances(len(expected), types, dirs)
            if dirs['tolerance'] or dirs['exact']:
                tj = os.path.join(tmp, 'tolerances.json')
                with open(tj, 'w') as fh:
                    json.dump({'outputs': [{'name': f'o{i}', 'tolerance': {'rtol': r, 'atol': a}}
                                           for i, (r, a) in enumerate(tols)]}, fh)
                cmd += ['--tolerances', tj]
            try:
                h = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            except subprocess.TimeoutExpired:
                return 'FAIL', [f'hloc run timed out after {args.timeout}s']
            gotv = dict(np.load(got)) if os.path.exists(got) else None
            if h.returncode != 0:
                lines = [ln.strip() for ln in h.stderr.splitlines() if 'error' in ln]
                if not lines:
                    lines = [error_line(h.stderr + h.stdout)]
                if gotv is not None:
                    lines += show_diffs(expected, gotv, types, tols, dirs['exact'])
                    if args.errors:
                        lines += error_stats(expected, gotv, types, tols)
                    failed = sorted({int(m) for m in re.findall(r'error: o(\d+):', h.stderr)})
                    note = None if dirs['exact'] else f64_referee(
                        args, oracle, text, inputs, expected, gotv, types, failed, tmp)
                    if note:
                        return 'NEAR', note + lines
                else:
                    lines = [ln for ln in (h.stderr.strip().splitlines()[-TAIL:])]
                    refusal = [ln.strip() for ln in h.stderr.splitlines() if UNSUPPORTED.search(ln)]
                    if refusal:
                        return 'UNSUPPORTED', refusal[:1]
                return 'FAIL', lines
            if dirs['exact'] and gotv is not None:
                bad = bit_exact(expected, gotv, types)
                if bad:
                    return 'FAIL', ['not bit-exact: ' + ', '.join(bad)] + \
                        show_diffs(expected, gotv, types, tols, True)
            return 'PASS', error_stats(expected, gotv, types, tols) if args.errors and gotv else []
        out = []
        for engine in args.engine:
            status, detail = engine_run(engine)
            hit = [d for d in detail[:6] if UNSUPPORTED.search(d)]
            if status == 'FAIL' and hit:
                status, detail = 'UNSUPPORTED', hit[:1]
            out.append((engine, status, detail))
        return out
    finally:
        if args.keep and os.listdir(tmp):
            dst = os.path.join(args.keep, name)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(tmp, dst)
        shutil.rmtree(tmp, ignore_errors=True)


def default_files():
    files = []
    for pat in ('hlo-tests/cases/shape/*.hlo', 'hlo-tests/cases/dynamic/*.hlo',
                'tools/interp-cases/*.hlo'):
        files += sorted(glob.glob(os.path.join(REPO, pat)))
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('files', nargs='*', help='HLO files (default: see above)')
    add_oracle_args(ap, 'only files whose path contains SUBSTR')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--keep', help='keep inputs/expected/got npz per file under this directory')
    ap.add_argument('--errors', action='store_true',
                    help='print max |xla|, max abs and max rel error per float/complex output')
    ap.add_argument('--timeout', type=float, default=120.0)
    ap.add_argument('--engine', action='append', choices=('interp', 'jit', 'tpu'),
                    help='the engine(s) to compare with XLA (repeatable; default: interp)')
    ap.add_argument('--dir', action='append', help='run every .hlo file of this directory '
                    '(repeatable; e.g. ../shared/external-hlo)')
    ap.add_argument('--variants', choices=('both', 'asis', 'lifted'), default='both',
                    help='run modules as written, with ENTRY constants lifted to parameters, '
                         'or both (default)')
    args = ap.parse_args()
    args.engine = args.engine or ['interp']
    oracle = oracle_path(args, 'oracle_interp')
    hu = load_hlo_util(args.shared)
    listed = list(args.files) + [f for d in (args.dir or []) for f in sorted(glob.glob(os.path.join(d, '*.hlo')))]
    files = [os.path.abspath(f) for f in (listed or default_files())]
    if args.substr:
        files = [f for f in files if args.substr in f]
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    statuses = ('PASS', 'FAIL', 'NEAR', 'XFAIL', 'UNSUPPORTED', 'SKIP')
    counts = {e: {k: 0 for k in statuses} for e in args.engine}
    t0 = time.perf_counter()
    variants = ['asis', 'lifted'] if args.variants == 'both' else [args.variants]
    work = [(f, v) for f in files for v in variants]
    many = len(args.engine) > 1
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = pool.map(lambda w: run_one(args, hu, oracle, *w), work)
        prev = {}
        for (f, v), per_engine in zip(work, results):
            for engine, status, detail in per_engine:
                if v == 'lifted' and (detail == ['no constants to lift'] or
                                      (status == 'SKIP' and prev.get(engine) == (f, status, detail))):
                    continue                      # nothing new beyond the as-written line
                prev[engine] = (f, status, detail)
                counts[engine][status] += 1
                rel = os.path.relpath(f, REPO) + ('' if v == 'asis' else f' [{v}]') + (f' ({engine})' if many else '')
                if status in ('SKIP', 'UNSUPPORTED'):
                    print(f'{status} {rel}: {detail[0]}', flush=True)
                elif status in ('XFAIL', 'NEAR'):
                    print(f'{status} {rel}: {detail[0]}\n' + indent(detail[1:]), flush=True)
                else:
                    print(f'{status} {rel}' + ('\n' + indent(detail) if detail else ''), flush=True)
    print(f'elapsed {time.perf_counter() - t0:.1f}s')
    print(f'{"engine":<8} ' + ' '.join(f'{k.lower():>11}' for k in statuses))
    for e in args.engine:
        print(f'{e:<8} ' + ' '.join(f'{counts[e][k]:>11}' for k in statuses))
    print('(pass/near: matches XLA (near: within f64-referee bounds); fail: a mismatch, its cause above; '
          'unsupported: the engine refuses an op with a located error; skip: hloc check or XLA refuses, or no inputs)')
    return 1 if any(c['FAIL'] for c in counts.values()) else 0


if __name__ == '__main__':
    sys.exit(main())
