#!/usr/bin/env python3
"""Run a partitioned HLO program (what `hloc opt --passes sharding-propagation,spmd-partition`
prints) on real XLA across several processes, as a multi-host deployment runs it.

The launcher starts `--processes` workers on this machine. Each worker is one JAX process
with `--local-devices` CPU devices, joined by JAX's distributed runtime (a coordinator on
localhost) and its CPU collectives (gloo). Every worker:
  - compiles the same per-device program, exactly as printed (no normalization), for all
    the global devices, one per partition;
  - feeds its devices their shards of the global inputs (the global shardings of
    `--meta NAME.json`);
  - runs it and writes its devices' output shards.
The launcher assembles the global outputs from the shards and compares them with
`--expect` (the oracle's `compare`, the case's tolerances), or writes them with `-o`.

    python tools/xla_multiprocess.py PROG.hlo INPUTS.npz --meta NAME.json \\
        --expect OUTPUTS.npz [--processes 4 --local-devices 2]

Exit status: 0 when the outputs match (or were written), 1 otherwise; a worker that fails
is reported with its error output.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time


def oracle_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, '..', '..', 'shared', 'xla-oracle'))


def free_port():
    with socket.socket() as s:
        s.bind(('localhost', 0))
        return s.getsockname()[1]


def compile_partitioned(text, devs, backend):
    """The per-device program, exactly as printed, for `devs` (one partition each).

    As the oracle runs an already partitioned program on one process: N replicas of one
    partition (XLA's CPU compiler takes num_partitions > 1 only with its own SPMD
    partitioner), `partition-id` read as `replica-id`, shardings stripped. The device
    assignment names the global device ids, which are not 0..N-1 across processes."""
    import re
    import numpy as np
    import run_hlo
    from jax._src.lib import xla_client as xc
    text = run_hlo.prepare_text(text, False, strip_shardings=True)
    text = re.sub(r'\bpartition-id\(\)', 'replica-id()', text)
    text = re.sub(r',\s*num_partitions=\d+', '', text)
    module = run_hlo.parse_module(text)
    ps = run_hlo.program_shape(module)
    mlir = xc._xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    n = len(devs)
    opts = xc.CompileOptions()
    opts.num_partitions = 1
    opts.num_replicas = n
    opts.executable_build_options.num_partitions = 1
    opts.executable_build_options.num_replicas = n
    da = xc.DeviceAssignment.create(np.array([d.id for d in devs]).reshape(n, 1))
    opts.device_assignment = da
    opts.executable_build_options.device_assignment = da
    return backend.compile_and_load(mlir, xc.DeviceList(tuple(devs)), opts), ps


def worker(a):
    n = a.processes * a.local_devices
    flags = os.environ.get('XLA_FLAGS', '')
    os.environ['XLA_FLAGS'] = f'{flags} --xla_force_host_platform_device_count={a.local_devices}'
    sys.path.insert(0, a.oracle)
    import jax
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(coordinator_address=f'localhost:{a.port}',
                               num_processes=a.processes, process_id=a.worker)
    import numpy as np
    import jax.extend
    import run_hlo
    from hlo_util import from_storage, load_npz_list
    backend = jax.extend.backend.get_backend('cpu')
    devs = backend.devices()[:n]
    if len(devs) != n:
        raise SystemExit(f'{len(devs)} global devices, want {n}')
    exe, ps = compile_partitioned(open(a.hlo).read(), devs, backend)
    md = json.load(open(a.meta))
    in_sh = [run_hlo.sharding_from_text(s, devs) for s in md['sharding']['input_shardings']]
    out_sh = [run_hlo.sharding_from_text(s, devs) for s in md['sharding']['output_shardings']]
    arrays, _names = load_npz_list(a.inputs, 'p')
    if not arrays:
        arrays, _names = load_npz_list(a.inputs)
    pshapes = ps.parameter_shapes()
    if len(arrays) != len(pshapes) or len(arrays) != len(in_sh):
        raise SystemExit(f'module has {len(pshapes)} parameters, inputs {len(arrays)}, '
                         f'shardings {len(in_sh)}')
    bufs = []
    for arr, s, sh in zip(arrays, pshapes, in_sh):
        g = np.ascontiguousarray(from_storage(arr, s.numpy_dtype()))
        bufs.append(jax.make_array_from_callback(g.shape, sh, lambda idx, g=g: g[idx]))
    res = exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
    if len(res) != len(out_sh):
        raise SystemExit(f'{len(res)} outputs, {len(out_sh)} output shardings in --meta')
    local = list(exe.local_devices())
    pieces, index = {}, []
    for k, (shards, sh) in enumerate(zip(res, out_sh)):
        shards = [np.asarray(x) for x in shards]
        hs = sh._to_xla_hlo_sharding(shards[0].ndim)
        if hs.is_replicated():
            gshape = shards[0].shape
        else:
            tiles = list(hs.tile_assignment_dimensions())[:shards[0].ndim]
            gshape = tuple(d * t for d, t in zip(shards[0].shape, tiles))
        where = sh.devices_indices_map(gshape)
        for d, x in zip(local, shards):
            key = f'o{k}_d{d.id}'
            pieces[key] = x
            sl = [[s.start or 0, s.stop if s.stop is not None else gshape[j]]
                  for j, s in enumerate(where[d])]
            index.append(dict(key=key, output=k, shape=list(gshape), slices=sl))
    np.savez(os.path.join(a.out, f'worker{a.worker}.npz'), **pieces)
    with open(os.path.join(a.out, f'worker{a.worker}.json'), 'w') as f:
        json.dump(index, f)
    jax.distributed.shutdown()
    return 0


def launch(a):
    import numpy as np
    port = free_port()
    out = tempfile.mkdtemp(prefix='xla-mp-')
    common = [a.hlo, a.inputs, '--meta', a.meta, '--processes', str(a.processes),
              '--local-devices', str(a.local_devices), '--oracle', a.oracle,
              '--port', str(port), '--out', out]
    t0 = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *common,
                               '--worker', str(i)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(a.processes)]
    failed = []
    for i, p in enumerate(procs):
        try:
            so, se = p.communicate(timeout=a.timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            print(f'xla_multiprocess: worker {i} did not finish in {a.timeout} s', file=sys.stderr)
            return 1
        if p.returncode != 0:
            failed.append(f'worker {i} exited with {p.returncode}:\n{so}{se}')
    if failed:
        print('xla_multiprocess: ' + '\n'.join(failed), file=sys.stderr)
        return 1
    outs = {}
    for i in range(a.processes):
        data = np.load(os.path.join(out, f'worker{i}.npz'))
        for piece in json.load(open(os.path.join(out, f'worker{i}.json'))):
            x = data[piece['key']]
            k = piece['output']
            if k not in outs:
                outs[k] = (np.zeros(piece['shape'], x.dtype), np.zeros(piece['shape'], bool))
            val, seen = outs[k]
            sl = tuple(slice(s, e) for s, e in piece['slices'])
            val[sl] = x
            seen[sl] = True
    results = []
    for k in sorted(outs):
        val, seen = outs[k]
        if not seen.all():
            print(f'xla_multiprocess: output {k}: {int((~seen).sum())} elements on no device',
                  file=sys.stderr)
            return 1
        results.append(val)
    elapsed = time.perf_counter() - t0
    print(f'xla_multiprocess: {os.path.basename(a.hlo)}: {len(results)} outputs from '
          f'{a.processes} processes x {a.local_devices} devices in {elapsed:.1f} s')
    sys.path.insert(0, a.oracle)
    if a.output:
        from hlo_util import save_npz
        save_npz(a.output, results, 'o')
    if a.expect:
        import compare
        ok = compare.compare_lists(results, compare.load(a.expect), meta=a.meta,
                                   label=os.path.basename(a.hlo))
        return 0 if ok else 1
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('hlo', help='the partitioned (per-device) program')
    ap.add_argument('inputs', help='global inputs (.npz, p0..pN)')
    ap.add_argument('--meta', required=True,
                    help='NAME.json with sharding.input_shardings / output_shardings (global)')
    ap.add_argument('--expect', help='global outputs to compare with (exit 1 on mismatch)')
    ap.add_argument('-o', '--output', help='write the global outputs here (.npz)')
    ap.add_argument('--processes', type=int, default=4)
    ap.add_argument('--local-devices', type=int, default=2)
    ap.add_argument('--timeout', type=float, default=600, help='seconds per worker')
    ap.add_argument('--oracle', default=oracle_dir(), help='the xla-oracle directory')
    ap.add_argument('--worker', type=int, help=argparse.SUPPRESS)
    ap.add_argument('--port', type=int, help=argparse.SUPPRESS)
    ap.add_argument('--out', help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.processes < 1 or a.local_devices < 1:
        ap.error('--processes and --local-devices must be at least 1')
    return worker(a) if a.worker is not None else launch(a)


if __name__ == '__main__':
    sys.exit(main())
