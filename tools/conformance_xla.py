#!/usr/bin/env python3
"""Accept/reject conformance of `hloc` against XLA's own HLO parser.

Runs every module of the golden suites that test accepting and refusing text
(hlo-tests/cases/parse and hlo-tests/cases/verify; more with --dir) through
`hloc check` and through XLA's parser (`xla_client.hlo.hlo_module_from_text` in the
oracle's Python), and tabulates the verdicts:

    both accept | both reject | hloc rejects, XLA's parser accepts | hloc accepts, XLA rejects

"hloc rejects, XLA's parser accepts" is expected only for checks that XLA makes in its
verifier, not its parser (replica groups against the device count, shapes of
async-done, shape inference): such a case says `xla: verifier` in a comment, or `hloc
parse` (the parser alone) accepts it and only `hloc check` refuses it. A case
using syntax of XLA versions newer than the oracle's says `xla: newer` (or XLA's only
complaint is an attribute of NEWER_ATTRS), and may be refused by the oracle's parser. A
case that XLA's parser refuses (its own hlo_parser_test.cc expects the error) but the
oracle's build of `hlo_module_from_text` lets through says `xla: parser test`. Every other
disagreement is a conformance bug: listed, and exit status 1.

    python3 tools/conformance_xla.py                    # both suites
    python3 tools/conformance_xla.py --dir ../shared/external-hlo

Options: --hloc PATH, --python PATH, --shared DIR, -k SUBSTR, -j N (as the other oracle
scripts). Standard library only.
"""
import argparse
import glob
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import re

from oracle_common import REPO, add_oracle_args, error_line

# Attributes of XLA versions other than the oracle's that hloc accepts (its KEPT_ATTRS
# table, and `is_stable` on topk, which it interprets); `original_value` is from the
# versions before the oracle's, which renamed it.
NEWER_ATTRS = {"debug_attributes", "slice_sizes", "has_dynamic_root", "is_stable", "original_value"}

XLA_PARSE = r'''
import sys
from jax._src.lib import xla_client as xc
text = open(sys.argv[1], encoding='utf-8', errors='replace').read()
try:
    xc.hlo.hlo_module_from_text(text)
    print('ACCEPT')
except Exception as e:
    print('REJECT ' + str(e).replace('\n', ' ')[:300])
'''


def hloc_verdict(args, cmd, path):
    r = subprocess.run([args.hloc, cmd, path], capture_output=True, text=True)
    first = next((ln for ln in r.stderr.splitlines() if ': error:' in ln), None)
    return ('ACCEPT', '') if r.returncode == 0 else ('REJECT', (first or error_line(r.stderr, tool_errors=True)).split(': error: ', 1)[-1][:200])


def verdicts(args, path):
    xla = subprocess.run([args.python, '-c', XLA_PARSE, path], capture_output=True, text=True)
    out = (xla.stdout or '').strip().splitlines()
    if not out:
        # The parser itself crashed (XLA CHECK-fails on some invalid text): a rejection.
        x = ('REJECT', 'XLA aborted: ' + error_line(xla.stderr or '?'))
    else:
        line = out[-1]
        x = ('ACCEPT', '') if line == 'ACCEPT' else ('REJECT', line[7:])
    return path, hloc_verdict(args, 'check', path), x, hloc_verdict(args, 'parse', path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_oracle_args(ap, 'only files whose path contains SUBSTR')
    ap.add_argument('--dir', action='append', help='a directory of .hlo files (repeatable)')
    args = ap.parse_args()
    for p in (args.hloc, args.python):
        if not os.path.exists(p):
            sys.exit(f'conformance_xla: not found: {p}')
    dirs = args.dir or [os.path.join(REPO, 'hlo-tests', 'cases', s) for s in ('parse', 'verify')]
    files = sorted(f for d in dirs for f in glob.glob(os.path.join(d, '*.hlo')))
    if args.substr:
        files = [f for f in files if args.substr in f]
    with ThreadPoolExecutor(args.jobs) as ex:
        results = list(ex.map(lambda f: verdicts(args, f), files))
    counts = {'both accept': 0, 'both reject': 0, 'hloc rejects, XLA verifier rejects': 0,
              "hloc rejects as XLA's parser tests require, the oracle's build accepts": 0,
              'hloc accepts, newer than the oracle': 0, 'conformance bugs': 0}
    bugs = []
    for path, o, x, p in results:
        name = os.path.relpath(path, REPO)
        text = open(path, encoding='utf-8', errors='replace').read()
        newer = re.search(r'unexpected attribute "([\w-]+)"', x[1])
        if o[0] == x[0]:
            counts['both accept' if o[0] == 'ACCEPT' else 'both reject'] += 1
        elif o[0] == 'REJECT' and ('xla: verifier' in text or p[0] == 'ACCEPT'):
            # `hloc parse` reads it as XLA's parser does; `hloc check` goes on to what
            # XLA's verifier and compiler check (shapes, dynamic dimensions, ...).
            counts['hloc rejects, XLA verifier rejects'] += 1
            print(f'verifier-level  {name}: hloc: {o[1]}')
        elif o[0] == 'REJECT' and 'xla: parser test' in text:
            # XLA's parser (and hlo_parser_test.cc) refuses it; the oracle's build of
            # `hlo_module_from_text` lets it through.
            counts["hloc rejects as XLA's parser tests require, the oracle's build accepts"] += 1
            print(f'parser-test     {name}: hloc: {o[1]}')
        elif o[0] == 'ACCEPT' and ('xla: newer' in text or (newer and newer.group(1) in NEWER_ATTRS)):
            counts['hloc accepts, newer than the oracle'] += 1
            print(f'newer           {name}: XLA: {x[1][:160]}')
        else:
            counts['conformance bugs'] += 1
            bugs.append(name)
            why = f'hloc: {o[1]}' if o[0] == 'REJECT' else f'XLA: {x[1]}'
            print(f'BUG             {name}: hloc {o[0].lower()}s, XLA {x[0].lower()}s; {why}')
    lenient = [os.path.relpath(path, REPO) for path, o, x, p in results if x[0] == 'REJECT' and p[0] == 'ACCEPT' and o[0] == 'REJECT']
    for name in lenient:
        print(f'parse-lenient   {name}: `hloc parse` prints it, `hloc check` refuses it')
    print(f'{len(results)} modules: ' + ', '.join(f'{v} {k}' for k, v in counts.items())
          + f'; of the refused ones, {len(lenient)} only by `hloc check`')
    sys.exit(1 if bugs else 0)


if __name__ == '__main__':
    main()
