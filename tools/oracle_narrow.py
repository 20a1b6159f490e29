#!/usr/bin/env python3
"""run_hlo.py (<shared>/xla-oracle) with hloc's .npz conventions for the narrow types.

    python tools/oracle_narrow.py --shared ../shared MODULE.hlo INPUTS.npz -o OUTPUTS.npz

numpy cannot store ml_dtypes' fp8/fp4/int4 arrays (np.savez writes them as raw `V1`
bytes, `<f1` for float8_e5m2, which numpy cannot load back), so hloc stores them as
numbers numpy has (ir/io/src/npz.rs's module doc):
  * fp8 types and f4e2m1fn: uint8 bit patterns (f4: low four bits);
  * s4/s2 (and s1): int8 values; u4/u2 (and u1): uint8 values;
  * bf16: uint16 bit patterns (run_hlo's own convention).
run_hlo.py only knows the bf16 rule; this wrapper teaches hlo_util.from_storage and
to_storage the others, then runs run_hlo.main with the remaining arguments, so inputs are
read and outputs written exactly as hloc reads and writes them. oracle_interp.py runs XLA
through it.
"""
import os
import sys

import numpy as np

# Element type names as ml_dtypes spells them.
NARROW_FLOATS = ('float8_e4m3fn', 'float8_e5m2', 'float8_e4m3', 'float8_e4m3fnuz',
                 'float8_e5m2fnuz', 'float8_e4m3b11fnuz', 'float8_e3m4', 'float8_e8m0fnu',
                 'float4_e2m1fn')
SIGNED_SUB = ('int4', 'int2', 'int1')
UNSIGNED_SUB = ('uint4', 'uint2', 'uint1')


def _dtypes(names):
    import ml_dtypes
    return {np.dtype(getattr(ml_dtypes, n)) for n in names if hasattr(ml_dtypes, n)}


def install(hlo_util):
    floats, signed, unsigned = _dtypes(NARROW_FLOATS), _dtypes(SIGNED_SUB), _dtypes(UNSIGNED_SUB)
    from_storage, to_storage = hlo_util.from_storage, hlo_util.to_storage

    def from_storage2(a, want_dtype=None):
        a = np.asarray(a)
        if want_dtype is not None:
            want = np.dtype(want_dtype)
            if want in floats and a.dtype in (np.uint8, np.int8):
                return a.view(np.uint8).view(want)
            if want in signed and a.dtype == np.int8:
                return a.astype(want)
            if want in unsigned and a.dtype == np.uint8:
                return a.astype(want)
        return from_storage(a, want_dtype)

    def to_storage2(a):
        a = np.asarray(a)
        if a.dtype in floats:
            return a.view(np.uint8)
        if a.dtype in signed:
            return a.astype(np.int8)
        if a.dtype in unsigned:
            return a.astype(np.uint8)
        return to_storage(a)

    hlo_util.from_storage, hlo_util.to_storage = from_storage2, to_storage2


def main():
    argv = sys.argv[1:]
    shared = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), '..', 'shared')
    if argv[:1] == ['--shared']:
        shared, argv = argv[1], argv[2:]
    sys.path.insert(0, os.path.join(shared, 'xla-oracle'))
    import hlo_util
    install(hlo_util)
    import run_hlo
    return run_hlo.main(argv)


if __name__ == '__main__':
    sys.exit(main())
