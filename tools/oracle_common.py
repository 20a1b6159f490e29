"""Helpers shared by the oracle scripts (oracle_roundtrip.py, oracle_interp.py).

Standard library only.
"""
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def error_line(text, tool_errors=False):
    """The last `SomeError: ...` line of a traceback, else the last line.

    With tool_errors, lines of a tool's own `error: ...` output count too, and exception
    lines are recognized after their indentation.
    """
    if tool_errors:
        lines = [ln for ln in text.strip().splitlines() if ln.strip()] or ['?']
        errs = [ln for ln in lines if re.match(r'^[\w.]*(Error|Exception)\b', ln.strip())
                or re.search(r'\berror\b', ln)]
    else:
        lines = text.strip().splitlines() or ['?']
        errs = [ln for ln in lines if re.match(r'^[\w.]*(Error|Exception)\b', ln)]
    return (errs or lines)[-1].strip()[:300]


def add_oracle_args(ap, k_help):
    """The options every oracle script takes: --hloc, --python, --shared, -k, -j."""
    ap.add_argument('--hloc', default=os.path.join(REPO, 'target', 'debug', 'hloc'))
    ap.add_argument('--python', default=os.environ.get('ORACLE_PYTHON') or
                    os.path.expanduser('~/.cache/xla-oracle-venv/bin/python'))
    ap.add_argument('--shared', default=os.path.join(os.path.dirname(REPO), 'shared'))
    ap.add_argument('-k', dest='substr', help=k_help)
    ap.add_argument('-j', dest='jobs', type=int, default=2, help='parallel jobs (default 2)')


def oracle_path(args, prog):
    """<shared>/xla-oracle/run_hlo.py; exits if it, hloc or the Python is missing."""
    oracle = os.path.join(args.shared, 'xla-oracle', 'run_hlo.py')
    for path in (args.hloc, args.python, oracle):
        if not os.path.exists(path):
            sys.exit(f'{prog}: not found: {path}')
    return oracle
