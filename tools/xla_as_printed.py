#!/usr/bin/env python3
"""The oracle's `run_hlo.py`, with the text compiled exactly as it is written.

`run_hlo.py` rewrites optimized text by default when it sees fusions, bitcasts or a
schedule (fusions to calls, bitcasts to transposes, layouts stripped). A test of what
`hloc` prints must not be helped that way: a module XLA cannot compile as printed has to
fail. This entry point turns that rewriting off for good and refuses a `--normalize`
argument; everything else is `run_hlo.py`'s (same arguments, output and exit status).

    python tools/xla_as_printed.py [--oracle DIR] FILE.hlo INPUTS.npz [run_hlo.py arguments]

`--oracle DIR` (first) names the xla-oracle directory; by default the one in the
`shared` directory beside the project.
"""
import os
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if any(a == '--normalize' or a.startswith('--normalize=') for a in argv):
        print('xla_as_printed: the text runs as printed; --normalize is not taken',
              file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    oracle = os.path.normpath(os.path.join(here, '..', '..', 'shared', 'xla-oracle'))
    if argv[:1] == ['--oracle'] and len(argv) > 1:
        oracle, argv = argv[1], argv[2:]
    sys.path.insert(0, oracle)
    import run_hlo
    # `prepare_text` asks this before rewriting; the answer is always no.
    run_hlo.needs_normalization = lambda text: False
    return run_hlo.main(argv)


if __name__ == '__main__':
    sys.exit(main())
