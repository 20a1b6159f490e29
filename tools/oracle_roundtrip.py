#!/usr/bin/env python3
"""Round-trip every corpus case through `hloc parse` and check the result on real XLA.

For each case NAME in <shared>/corpus and each of NAME.hlo and NAME.debug.hlo (when
present), runs `hloc parse` into a temporary file, then runs the XLA oracle
(<shared>/xla-oracle/run_hlo.py) on the printed text with NAME.inputs.npz,
`--expect NAME.outputs.npz --meta NAME.json`, plus `--partitions N` for sharded
cases (N = number of mesh devices in the json's `sharding` block).  Cases whose
json says `expect: "reject"` are still parsed by hloc, but are reported as SKIP
when XLA rejects them as expected (FAIL if XLA runs them).

With `--opt`, the module is first optimized by `hloc opt` (the default pipeline, or the
passes of `--opt-passes a,b,c`) instead of only printed by `hloc parse`: the optimized,
fused module must reproduce XLA's outputs on XLA itself.

Prints one line per (case, variant): PASS, FAIL (with the last lines of the error)
or SKIP (reason), then `N passed, M failed, K skipped`.  Exit status 1 if any FAIL.

    python3 tools/oracle_roundtrip.py                  # whole corpus, 2 jobs
    python3 tools/oracle_roundtrip.py -k dot_ -j 4     # cases whose name contains "dot_"
    python3 tools/oracle_roundtrip.py --opt            # `hloc opt` output on XLA

Options: --hloc PATH (default <repo>/target/debug/hloc), --python PATH (default
$ORACLE_PYTHON or ~/.cache/xla-oracle-venv/bin/python), --shared DIR (default
<repo>/../shared), -k SUBSTR, -j N.  Standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from oracle_common import REPO, add_oracle_args, error_line, oracle_path

AS_PRINTED = os.path.join(os.path.dirname(os.path.abspath(__file__)), 'xla_as_printed.py')
VARIANTS = ('.hlo', '.debug.hlo')
TAIL = 6  # error lines shown for a FAIL


def tail(text, n=TAIL):
    """The last n non-empty lines, indented; a traceback's exception line is always kept."""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()][-n:]
    err = error_line(text)
    if err not in (ln.strip() for ln in lines):
        lines.insert(0, err)
    return '\n'.join('    ' + ln for ln in lines)


def find_cases(corpus, substr):
    """Yields (name, meta) for every NAME.json that has a NAME.hlo beside it."""
    for f in sorted(os.listdir(corpus)):
        name = f[:-len('.json')]
        if f.endswith('.json') and (not substr or substr in name) \
                and os.path.exists(os.path.join(corpus, name + '.hlo')):
            with open(os.path.join(corpus, f)) as fh:
                yield name, json.load(fh)


def hloc_cmd(args):
    """`hloc parse`, or `hloc opt [--passes ...]` with --opt."""
    if not args.opt:
        return [args.hloc, 'parse']
    return [args.hloc, 'opt'] + (['--passes', args.opt_passes] if args.opt_passes else [])


def run_one(args, corpus, oracle, name, meta, suffix):
    """Returns (status, detail) for one (case, variant)."""
    base = os.path.join(corpus, name)
    with tempfile.TemporaryDirectory(prefix='roundtrip-') as tmp:
        printed = os.path.join(tmp, name + suffix)
        try:
            p = subprocess.run(hloc_cmd(args) + [base + suffix], capture_output=True,
                               text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return 'FAIL', f'    hloc {hloc_cmd(args)[1]} timed out'
        if p.returncode != 0:
            if meta.get('expect') == 'reject':
                return 'SKIP', 'hloc rejects as the corpus expects: ' + error_line(p.stderr, True)
            if args.opt and 'dynamic shape introduced here' in p.stderr:
                # Data-dependent shapes are rejected by design before any pass runs.
                return 'SKIP', 'hloc rejects data-dependent shapes by design'
            return 'FAIL', f'    hloc {hloc_cmd(args)[1]} exit {p.returncode}:\n' + tail(p.stderr)
        with open(printed, 'w') as fh:
            fh.write(p.stdout)
        # Exactly as printed: xla_as_printed.py keeps the oracle's rewriting off.
        cmd = [args.python, AS_PRINTED, '--oracle', os.path.dirname(oracle), printed,
               base + '.inputs.npz',
               '--expect', base + '.outputs.npz', '--meta', base + '.json']
        if 'sharding' in meta:
            cmd += ['--partitions', str(len(meta['sharding']['mesh']['devices']))]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return 'FAIL', '    run_hlo.py timed out'
    out = r.stdout + r.stderr
    if meta.get('expect') == 'reject':
        if r.returncode == 0:
            return 'FAIL', '    XLA ran a module the corpus marks expect=reject'
        return 'SKIP', 'XLA rejects as expected: ' + error_line(out)
    if r.returncode != 0:
        return 'FAIL', f'    run_hlo.py exit {r.returncode}:\n' + tail(out)
    return 'PASS', ''


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_oracle_args(ap, 'only cases whose name contains SUBSTR')
    ap.add_argument('--opt', action='store_true', help='optimize with `hloc opt` before running on XLA')
    ap.add_argument('--opt-passes', help='with --opt: the passes to run (default: the default pipeline)')
    args = ap.parse_args()
    corpus = os.path.join(args.shared, 'corpus')
    oracle = oracle_path(args, 'oracle_roundtrip')

    work = [(name, meta, suffix) for name, meta in find_cases(corpus, args.substr)
            for suffix in VARIANTS if os.path.exists(os.path.join(corpus, name + suffix))]
    counts = {'PASS': 0, 'FAIL': 0, 'SKIP': 0}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = pool.map(lambda w: run_one(args, corpus, oracle, *w), work)
        for (name, _, suffix), (status, detail) in zip(work, results):
            counts[status] += 1
            sep = '\n' if status == 'FAIL' else ' '
            print(f'{status} {name}{suffix}' + (sep + detail if detail else ''), flush=True)
    print(f'elapsed {time.perf_counter() - t0:.1f}s')
    print(f'{counts["PASS"]} passed, {counts["FAIL"]} failed, {counts["SKIP"]} skipped')
    return 1 if counts['FAIL'] else 0


if __name__ == '__main__':
    sys.exit(main())
