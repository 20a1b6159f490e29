#!/usr/bin/env python3
"""Run a directory of generated modules on XLA CPU, in one process (`hloc fuzz --xla`).

    python tools/xla_fuzz.py [--oracle DIR] CASES_DIR

For every `K.hlo` with `K.inputs.npz` (p0..pN) in CASES_DIR, the text is compiled exactly
as written (no rewriting) and run once; the outputs go to `K.outputs.npz` (o0..oM, bf16
as uint16), or XLA's error to `K.error`. One process for the batch: jax's start-up is paid
once. Cases already done (an outputs or error file) are skipped, and `K.running` marks the
case under way: when XLA itself crashes the process, the caller records the crash as that
case's result and starts the script again on the rest. `--oracle DIR` names the xla-oracle directory (default: `shared` beside the
project).
"""
import os
import sys


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    here = os.path.dirname(os.path.abspath(__file__))
    oracle = os.path.normpath(os.path.join(here, '..', '..', 'shared', 'xla-oracle'))
    if argv[:1] == ['--oracle'] and len(argv) > 2:
        oracle, argv = argv[1], argv[2:]
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    sys.path.insert(0, oracle)
    import jax
    # f64 and s64 parameters stay 64-bit on their way to the device.
    jax.config.update('jax_enable_x64', True)
    import numpy as np
    import run_hlo
    from hlo_util import save_npz
    cases = sorted(f[:-4] for f in os.listdir(argv[0]) if f.endswith('.hlo'))
    for k in cases:
        base = os.path.join(argv[0], k)
        if os.path.exists(base + '.outputs.npz') or os.path.exists(base + '.error'):
            continue
        with open(base + '.running', 'w'):
            pass
        try:
            with open(base + '.hlo') as f:
                text = f.read()
            exe, _module, ps = run_hlo.compile_text(text, normalize=False)
            z = np.load(base + '.inputs.npz')
            names = sorted(z.files, key=lambda n: int(n[1:]))
            arrays = run_hlo.coerce_inputs([z[n] for n in names], ps, names)
            outs = run_hlo.execute(exe, arrays)
            save_npz(base + '.outputs.npz', outs, 'o')
        except BaseException as e:  # noqa: BLE001 (XLA raises many kinds; each is a result)
            with open(base + '.error', 'w') as f:
                f.write(f'{type(e).__name__}: {e}\n')
        os.remove(base + '.running')
    return 0


if __name__ == '__main__':
    sys.exit(main())
