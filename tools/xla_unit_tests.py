#!/usr/bin/env python3
"""hloc against the expectations of XLA's own unit tests, read from XLA's test sources.

XLA's test files are not part of this repository: point the script at a checkout of
openxla/xla (or copies of the two files).

    python3 tools/xla_unit_tests.py sharding  XLA/xla/service/sharding_propagation_test.cc
    python3 tools/xla_unit_tests.py parser    XLA/xla/service/hlo_parser_test.cc
    python3 tools/xla_unit_tests.py roundtrip XLA/xla/service/hlo_parser_test.cc

- `sharding`: every SPMD-mode test (`ShardingPropagation(/*is_spmd=*/true, ...)`) is run
  through `hloc opt --passes sharding-propagation`; the propagation flags the test passes
  to the pass's constructor (`allow_spmd_sharding_propagation_to_output/_parameters`)
  are written into the module header, which is where hloc reads them. Each
  `EXPECT_THAT(x, op::Sharding("..."))`, `op::NoSharding()` and
  `EXPECT_FALSE(x->has_sharding())` on an instruction found by name, as the entry root,
  an entry parameter or an operand of those is one expectation; shardings compare by
  meaning (iota and explicit device lists, `last_tile_dim_replicate` and
  `last_tile_dims`, metadata ignored). Metadata checks, `changed` flags and tests whose
  module is built in C++ are not counted.
- `parser`: every test whose module must be refused (`ExpectHasSubstr(...status()...)`,
  `StatusIs(...)`, `EXPECT_FALSE(...ok())`) goes through `hloc check`; lists those
  accepted and any crash.
- `roundtrip`: the modules of `CreateTestCases` / `CreateShortTestCases` go through
  `hloc parse`; the oracle's XLA parses the original and our printed text, and the two
  modules XLA prints back must be equal.

Options: --hloc PATH (default <repo>/target/release/hloc), --python PATH (the oracle's,
for `roundtrip`), -k SUBSTR, -v. Standard library only (the oracle's Python for
`roundtrip`). Exit status 0; the summary line is the result.
"""
import argparse
import itertools
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------- shardings by meaning


def iota(dims, perm):
    n = 1
    for d in dims:
        n *= d
    # reshape range(n) to dims, transpose by perm, flatten
    strides = [1] * len(dims)
    for i in range(len(dims) - 2, -1, -1):
        strides[i] = strides[i + 1] * dims[i + 1]
    tdims = [dims[p] for p in perm]
    out = []
    for idx in itertools.product(*[range(d) for d in tdims]):
        src = 0
        for k, p in enumerate(perm):
            src += idx[k] * strides[p]
        out.append(src)
    return out


def split_top(s, sep=','):
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '{[(':
            depth += 1
        elif ch in '}])':
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    if cur.strip():
        parts.append(cur)
    return parts


def strip_meta(s):
    # remove metadata={...} inside a sharding
    out = ''
    i = 0
    while i < len(s):
        m = re.match(r'\s*metadata=\{', s[i:])
        if m:
            j = i + m.end()
            depth = 1
            while depth:
                if s[j] == '{':
                    depth += 1
                elif s[j] == '}':
                    depth -= 1
                j += 1
            i = j
            continue
        out += s[i]
        i += 1
    return out


def leaf(s):
    s = strip_meta(s).strip()
    s = re.sub(r'\s*(shard_as|shard_like)\s+\d+', '', s)
    if s in ('replicated', ''):
        return ('replicated',)
    if s == 'manual':
        return ('manual',)
    if s == 'unknown':
        return ('unknown',)
    m = re.fullmatch(r'maximal device=(\d+)', s)
    if m:
        return ('maximal', int(m.group(1)))
    s = re.sub(r'\]\s+', ']', s)
    m = re.match(r'devices=\[([\d,]+)\]', s)
    if not m:
        raise ValueError('sharding ' + s)
    dims = [int(x) for x in m.group(1).split(',')]
    rest = s[m.end():]
    m2 = re.match(r'<=\[([\d,]+)\](?:T\(([\d,]+)\))?', rest)
    if m2:
        idims = [int(x) for x in m2.group(1).split(',')]
        perm = [int(x) for x in m2.group(2).split(',')] if m2.group(2) else list(range(len(idims)))
        devs = iota(idims, perm)
        rest = rest[m2.end():]
    else:
        m2 = re.match(r'([\d,]+)', rest)
        devs = [int(x) for x in m2.group(1).split(',')]
        rest = rest[m2.end():]
    rest = rest.strip()
    types = []
    if rest.startswith('last_tile_dim_replicate'):
        types = ['replicated']
    elif rest.startswith('last_tile_dims='):
        inner = rest[rest.index('{') + 1:rest.index('}')]
        types = [t.strip() for t in inner.split(',')]
    elif rest:
        raise ValueError('sharding tail ' + rest)
    return canon(dims, devs, types)


def canon(dims, devs, types):
    nd = len(dims) - len(types)
    data = dims[:nd]
    # drop subgroup dims of size 1
    keep = [(d, t) for d, t in zip(dims[nd:], types)]
    # reorder/merge subgroup types: XLA sorts them (manual before replicated) and merges
    if all(d == 1 for d in data) and all(t == 'replicated' for _, t in keep):
        return ('replicated',)
    if all(d == 1 for d in data) and all(t == 'manual' for _, t in keep):
        return ('manual',)
    if all(d == 1 for _, d in [(0, x[0]) for x in keep]) and keep:
        # all subgroup dims are 1
        keep = []
    # drop size-1 subgroup dims
    keep2 = [(d, t) for d, t in keep if d != 1]
    if len(keep2) != len(keep):
        # reshaping out size-1 dims doesn't change the device order
        keep = keep2
    return ('tiled', tuple(data), tuple(devs), tuple(keep))


def parse_sharding(s):
    """A sharding string, with or without outer braces -> canonical value."""
    s = s.strip()
    if s.startswith('{') and s.endswith('}'):
        s = s[1:-1].strip()
    if s.startswith('{'):
        return ('tuple', tuple(parse_sharding(p) for p in split_top(s)))
    return leaf(s)


# ---------------------------------------------------------------- sharding propagation

def strip_comments(s):
    s = re.sub(r'/\*.*?\*/', '', s, flags=re.S)
    s = re.sub(r'//[^\n]*', '', s)
    return s


def tests(src):
    starts = [m for m in re.finditer(r'^(TEST_P|TEST_F)\(\s*(\w+),\s*(\w+)\)', src, re.M)]
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(src)
        yield m.group(3), m.group(2), src[m.end():end]


def balanced(s, i):
    """s[i] == '(' -> index after the matching ')'."""
    depth = 0
    j = i
    while j < len(s):
        if s[j] == '(':
            depth += 1
        elif s[j] == ')':
            depth -= 1
            if depth == 0:
                return j + 1
        elif s[j] == '"':
            j += 1
            while s[j] != '"':
                if s[j] == '\\':
                    j += 1
                j += 1
        j += 1
    return len(s)


def cstrings(s):
    return ''.join(re.findall(r'"((?:[^"\\]|\\.)*)"', s))


def parse_test(name, fixture, body):
    raws = re.findall(r'R"\((.*?)\)"', body, re.S)
    if not raws:
        return None
    hlo = raws[0]
    code = re.sub(r'R"\((.*?)\)"', 'RAW', body, flags=re.S)
    code = strip_comments(code)
    k = code.find('ShardingPropagation(')
    if k < 0:
        return None
    e = balanced(code, k + len('ShardingPropagation'))
    args = split_top(code[k + len('ShardingPropagation') + 1:e - 1])
    args = [a.strip() for a in args]
    spmd = args[0] if args else 'false'
    if spmd not in ('true', 'false'):
        return None
    flags = {}
    for idx, key in ((2, 'allow_spmd_sharding_propagation_to_output'),
                     (3, 'allow_spmd_sharding_propagation_to_parameters')):
        if len(args) > idx:
            a = args[idx].replace('GetParam().allow_root_sharding_propagation', 'true')
            a = a.replace(' ', '')
            if not re.fullmatch(r'\{(true|false)(,(true|false))*\}', a):
                return None
            flags[key] = a
    # expectations after the Run call
    rest = code[e:]
    # drop metadata checks
    rest = re.sub(r'if \(GetParam\(\)\.propagate_metadata[^{]*\{', 'if (META) {', rest)
    # drop else branches of allow_root_sharding_propagation
    env = {}
    exps = []
    for stmt in split_stmts(rest):
        st = ' '.join(stmt.split())
        m = re.match(r'(?:(?:const )?(?:auto|HloInstruction)\s*\*\s*)?(\w+)\s*=\s*(.*)$', st)
        if m:
            ex = expr(m.group(2), env)
            env[m.group(1)] = ex
            continue
        m = re.match(r'(?:EXPECT|ASSERT)_THAT\((.*),\s*op::Sharding\((.*)\)\s*\)$', st)
        if m:
            ex = expr(m.group(1), env)
            exps.append((m.group(1), ex, ('sharding', cstrings(m.group(2)))))
            continue
        m = re.match(r'(?:EXPECT|ASSERT)_THAT\((.*),\s*op::NoSharding\(\)\s*\)$', st)
        if m:
            exps.append((m.group(1), expr(m.group(1), env), ('none',)))
            continue
        m = re.match(r'(?:EXPECT|ASSERT)_FALSE\((.*)->has_sharding\(\)\)$', st)
        if m:
            exps.append((m.group(1), expr(m.group(1), env), ('none',)))
            continue
    return dict(name=name, hlo=hlo, spmd=spmd == 'true', flags=flags, exps=exps)


def split_stmts(code):
    out, depth, cur = [], 0, ''
    for ch in code:
        if ch == '(':
            depth += 1
        elif ch == ')':
            depth = max(depth - 1, 0)
        if ch == ';' and depth == 0:
            out.append(cur.strip())
            cur = ''
        elif ch in '{}' and depth == 0:
            out.append(cur.strip())
            cur = ''
        else:
            cur += ch
    return out


def expr(s, env):
    s = s.strip().replace('module.get()', 'M').replace('module->', 'M->')
    s = s.replace('M->entry_computation()->', 'E->')
    m = re.fullmatch(r'FindInstruction\(M,\s*"([\w.\-]+)"\)', s)
    if m:
        return ('find', m.group(1))
    if s == 'E->root_instruction()':
        return ('root',)
    m = re.fullmatch(r'E->parameter_instruction\((\d+)\)', s)
    if m:
        return ('param', int(m.group(1)))
    m = re.fullmatch(r'(.*)->operand\((\d+)\)', s)
    if m:
        base = expr(m.group(1), env)
        return ('operand', base, int(m.group(2))) if base else None
    if re.fullmatch(r'\w+', s):
        return env.get(s)
    return None


INSTR = re.compile(r'^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$')


def parse_out(text):
    """hloc's printed module -> {name: (sharding or None, operands)}, root, params."""
    comps = []
    cur = None
    for line in text.splitlines():
        if re.match(r'^(ENTRY\s+)?%?[\w.\-]+.*\{\s*$', line) and '=' not in line.split('{')[0]:
            cur = dict(entry=line.startswith('ENTRY'), instrs={}, root=None, params={})
            comps.append(cur)
            continue
        m = INSTR.match(line)
        if not m or cur is None:
            continue
        root, name, rhs = m.groups()
        sh = None
        k = rhs.find('sharding={')
        if k >= 0:
            j = k + len('sharding=')
            depth = 0
            i = j
            while True:
                if rhs[i] == '{':
                    depth += 1
                elif rhs[i] == '}':
                    depth -= 1
                    if depth == 0:
                        break
                i += 1
            sh = rhs[j:i + 1]
        # operands: first paren group after opcode
        mo = re.search(r'\s([a-z][\w\-]*)\(', rhs)
        ops = []
        if mo:
            e = balanced(rhs, mo.end() - 1)
            inner = rhs[mo.end():e - 1]
            ops = [o.strip().split()[-1].lstrip('%') for o in split_top(inner) if o.strip()]
            if mo.group(1) == 'parameter':
                cur['params'][int(inner)] = name
        cur['instrs'][name] = (sh, ops)
        if root:
            cur['root'] = name
    return comps


def resolve(ex, comps):
    entry = next(c for c in comps if c['entry'])
    if ex is None:
        return None
    if ex[0] == 'find':
        for c in comps:
            if ex[1] in c['instrs']:
                return c, ex[1]
        return None
    if ex[0] == 'root':
        return entry, entry['root']
    if ex[0] == 'param':
        return entry, entry['params'].get(ex[1])
    if ex[0] == 'operand':
        b = resolve(ex[1], comps)
        if not b:
            return None
        c, n = b
        ops = c['instrs'][n][1]
        return (c, ops[ex[2]]) if ex[2] < len(ops) else None
    return None


def run_case(t, hloc):
    hlo = t['hlo']
    for k in t['flags']:
        hlo = re.sub(r',\s*' + k + r'=\{[^}]*\}', '', hlo)
    hdr = ''.join(', %s=%s' % kv for kv in t['flags'].items())
    hlo = re.sub(r'^(\s*HloModule\s+[\w.\-]+)', lambda m: m.group(1) + hdr, hlo, count=1, flags=re.M)
    with tempfile.NamedTemporaryFile('w', suffix='.hlo', delete=False) as f:
        f.write(hlo)
        path = f.name
    p = subprocess.run([hloc, 'opt', '--passes', 'sharding-propagation', path],
                       capture_output=True, text=True, timeout=60)
    os.unlink(path)
    res = []
    if p.returncode != 0:
        err = (p.stderr.strip().splitlines() or ['?'])[0]
        return [(e, False, 'hloc failed: ' + err) for e in t['exps']]
    comps = parse_out(p.stdout)
    for e in t['exps']:
        src, ex, want = e
        r = resolve(ex, comps)
        if r is None or r[1] is None:
            res.append((e, False, 'cannot find ' + src))
            continue
        c, n = r
        got = c['instrs'][n][0] if n in c['instrs'] else None
        if want[0] == 'none':
            res.append((e, got is None, 'got %s' % got))
            continue
        if got is None:
            res.append((e, False, '%s: no sharding, want %s' % (n, want[1])))
            continue
        try:
            ok = parse_sharding(got) == parse_sharding(want[1])
        except Exception as x:  # noqa
            res.append((e, False, 'norm error %s' % x))
            continue
        res.append((e, ok, '%s: got %s want %s' % (n, got, want[1])))
    return res



def sharding(args):
    src = open(args.file, encoding='utf-8').read()
    cases, skipped = [], []
    for name, fixture, body in tests(src):
        t = parse_test(name, fixture, body)
        if t is None or not t['spmd']:
            if t is None:
                skipped.append(name)
            continue
        if not t['exps']:
            skipped.append(name)
            continue
        if args.k and args.k not in name:
            continue
        cases.append(t)
    with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        results = list(ex.map(lambda t: run_case(t, args.hloc), cases))
    total = ok = full = 0
    for t, rs in zip(cases, results):
        good = sum(1 for r in rs if r[1])
        total += len(rs)
        ok += good
        full += good == len(rs)
        if good != len(rs) or args.v:
            print('%s %d/%d' % (t['name'], good, len(rs)))
            for _, g, msg in rs:
                if not g or args.v:
                    print('   ', 'ok ' if g else 'BAD', msg)
    print('sharding propagation: %d/%d expectations met (%.1f%%), %d/%d SPMD-mode tests fully; '
          '%d tests not read (module built in C++, or no sharding expectation)'
          % (ok, total, 100.0 * ok / max(total, 1), full, len(cases), len(skipped)))


# ---------------------------------------------------------------- parser

def raw_tests(src):
    """(name, first raw-string module, code with raw strings blanked) of each TEST_F."""
    starts = list(re.finditer(r'^TEST_F\(\s*(\w+),\s*(\w+)\)', src, re.M))
    for i, m in enumerate(starts):
        body = src[m.end(): starts[i + 1].start() if i + 1 < len(starts) else len(src)]
        raws = re.findall(r'R"\((.*?)\)"', body, re.S)
        code = re.sub(r'R"\((.*?)\)"', 'RAW', body, flags=re.S)
        if raws:
            yield m.group(2), raws[0], code


MUST_REJECT = re.compile(r'ExpectHasSubstr\(|StatusIs\(|EXPECT_FALSE\([^;]*ParseAndReturn'
                         r'|EXPECT_FALSE\([^;]*\.ok\(\)|ASSERT_FALSE\([^;]*ok\(\)|Not\(IsOk'
                         r'|IsError|EXPECT_THAT\([^;]*status\(\)[^;]*HasSubstr')


def hloc_on(hloc, cmd, text):
    with tempfile.NamedTemporaryFile('w', suffix='.hlo', delete=False) as f:
        f.write(text)
        path = f.name
    try:
        return subprocess.run([hloc, cmd, path], capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(path)


def parser(args):
    src = open(args.file, encoding='utf-8').read()
    cases = [(n, t) for n, t, code in raw_tests(src)
             if MUST_REJECT.search(code) and (not args.k or args.k in n)]
    with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        runs = list(ex.map(lambda c: hloc_on(args.hloc, 'check', c[1]), cases))
    accepted = [n for (n, _), r in zip(cases, runs) if r.returncode == 0]
    crashed = [n for (n, _), r in zip(cases, runs) if r.returncode not in (0, 1, 2)]
    for n in accepted:
        print('accepted', n)
    for n in crashed:
        print('CRASH', n)
    print('parser: %d/%d must-reject modules refused, %d crashes'
          % (len(cases) - len(accepted) - len(crashed), len(cases), len(crashed)))


# ---------------------------------------------------------------- round trip

ROUNDTRIP_ORACLE = r'''
import sys
from jax._src.lib import xla_client as xc
def show(path):
    try:
        return xc.hlo.hlo_module_from_text(open(path).read()).to_string()
    except Exception as e:
        return 'REFUSED ' + str(e).replace('\n', ' ')[:200]
a, b = show(sys.argv[1]), show(sys.argv[2])
print('SAME' if a == b else ('ORIGINAL ' + a if a.startswith('REFUSED') else
      ('OURS ' + b if b.startswith('REFUSED') else 'DIFFER')))
'''


def roundtrip(args):
    src = open(args.file, encoding='utf-8').read()
    cases = []
    for fn in ('std::vector<TestData> CreateTestCases()',
               'std::vector<TestData> CreateShortTestCases()'):
        i = src.find(fn)
        if i < 0:
            continue
        sec = src[i:src.index('\n});\n', i)]
        cases += [(m.group(1), m.group(2)) for m in
                  re.finditer(r'\{\s*"(\w+)",\s*R"\((.*?)\)"', sec, re.S)
                  if not args.k or args.k in m.group(1)]

    def one(case):
        name, text = case
        with tempfile.TemporaryDirectory() as d:
            orig, ours = os.path.join(d, 'a.hlo'), os.path.join(d, 'b.hlo')
            open(orig, 'w').write(text)
            r = subprocess.run([args.hloc, 'parse', orig, '-o', ours], capture_output=True, text=True)
            if r.returncode != 0:
                return name, 'hloc refuses: ' + (r.stderr.splitlines() or ['?'])[0]
            x = subprocess.run([args.python, '-c', ROUNDTRIP_ORACLE, orig, ours],
                               capture_output=True, text=True)
            return name, (x.stdout.strip().splitlines() or ['oracle crashed'])[-1]
    with ThreadPoolExecutor(os.cpu_count() or 2) as ex:
        out = list(ex.map(one, cases))
    same = sum(1 for _, v in out if v == 'SAME')
    other = sum(1 for _, v in out if v.startswith('ORIGINAL'))
    for n, v in out:
        if v != 'SAME' or args.v:
            print(n, v[:240])
    print('round trip: %d/%d modules print back as XLA reads the original (%d the oracle\'s '
          'XLA refuses as written)' % (same, len(out), other))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('suite', choices=['sharding', 'parser', 'roundtrip'])
    ap.add_argument('file', help="XLA's test source")
    ap.add_argument('--hloc', default=os.path.join(REPO, 'target', 'release', 'hloc'))
    ap.add_argument('--python', default=os.environ.get('ORACLE_PYTHON', os.path.expanduser(
        '~/.cache/xla-oracle-venv/bin/python')))
    ap.add_argument('-k', default=None)
    ap.add_argument('-v', action='store_true')
    args = ap.parse_args()
    for p in (args.file, args.hloc):
        if not os.path.exists(p):
            sys.exit(f'xla_unit_tests: not found: {p}')
    {'sharding': sharding, 'parser': parser, 'roundtrip': roundtrip}[args.suite](args)


if __name__ == '__main__':
    main()
