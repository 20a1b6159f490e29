"""The Pallas kernels of an HLO module: each `tpu_custom_call` custom-call with its result
and operand shapes, the cost estimate Pallas attached (when it did), and what its Mosaic
body says: the grid (`iteration_bounds`; a dynamic bound, printed as null, is a count read
from a scalar-prefetch operand at run time), each block's shape (`window_params`), the
number of scalar-prefetch operands (they come first) and the dimension semantics
(parallel or arbitrary). The body is MLIR bytecode, base64 in `backend_config`; it is
decoded with the TPU dialect of the installed jax (run in the libtpu venv).

    python pallas_info.py MODULE.hlo [--json] [--all]

Without --all, kernels with the same body signature (name, shapes, grid, blocks) are
printed once with a count.
"""
import base64
import json
import re
import sys

_CALL = re.compile(
    r'^\s*(?:ROOT )?%?(\S+) = (.*?) custom-call\((.*?)\), custom_call_target="tpu_custom_call"'
    r'(.*)$', re.M)


_NEXT = re.compile(r'\n\s+(?:ROOT )?%?[\w.\-]+ = |\n}\s*\n')


def _balanced(text, start):
    """The {...} starting at text[start] (which is '{'), braces inside strings skipped."""
    depth, i, in_str = 0, start, False
    while i < len(text):
        c = text[i]
        if in_str:
            if c == '\\':
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == '{':
            depth += 1
        elif c == '}':
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1
    return text[start:]


def _shapes(text):
    return re.findall(r'(?:pred|[a-z]+\d+)\[[0-9,]*\]', text)


def kernels(hlo_text):
    """One dict per tpu_custom_call of the module."""
    out = []
    for m in _CALL.finditer(hlo_text):
        name, result, rest = m.group(1), m.group(2), m.group(4)
        entry = dict(name=name, result=_shapes(result))
        layout = re.search(r'operand_layout_constraints=\{(.*?)\}, (?:frontend_attributes|'
                           r'backend_config|metadata)', rest)
        entry['operands'] = _shapes(layout.group(1)) if layout else []
        # The attributes may go on over the next lines (the lowered module pretty-prints
        # cost_estimate and kernel_metadata): read them up to the next instruction.
        nxt = _NEXT.search(hlo_text, m.end())
        instr = hlo_text[m.start(4):nxt.start() if nxt else len(hlo_text)]
        cfg = {}
        at = instr.find('backend_config=')
        if at >= 0:
            try:
                cfg = json.loads(_balanced(instr, instr.index('{', at)).replace('\n', ' '))
            except json.JSONDecodeError:
                cfg = {}
        meta = re.search(r'"xprof_metadata":\s*"((?:[^"\\]|\\.)*)"', instr)
        if meta:
            try:
                entry['kernel_metadata'] = json.loads(json.loads(f'"{meta.group(1)}"'))
            except json.JSONDecodeError:
                entry['kernel_metadata'] = meta.group(1)
        call = cfg.get('custom_call_config', cfg)
        if 'cost_estimate' in call:
            entry['cost_estimate'] = {k: float(v) for k, v in call['cost_estimate'].items()}
        if 'body' in call:
            entry.update(_mosaic(call['body']))
        out.append(entry)
    return out


def _mosaic(body):
    """Grid, blocks and semantics from a Mosaic body (base64 MLIR bytecode)."""
    from jax._src.interpreters import mlir as jmlir
    from jax._src.lib import tpu
    from jaxlib.mlir import ir
    from jaxlib.mlir.passmanager import PassManager
    ctx = jmlir.make_ir_context()
    tpu.register_dialect(ctx)
    with ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(base64.b64decode(body))
        PassManager.parse('builtin.module(mosaic-serde{serialize=false})').run(module.operation)
        text = str(module)
    head = re.search(r'func\.func @(\w+)\(', text)
    info = {}
    if not head:
        return info
    info['kernel'] = head.group(1)
    at = text.find(' attributes {', head.end())
    attrs = _balanced(text, at + len(' attributes ')) if at >= 0 else ''
    dyn = -(2 ** 63)
    grid = re.search(r'iteration_bounds = array<i64(?::\s*([^>]*))?>', attrs)
    if grid:
        info['grid'] = [None if int(v) == dyn else int(v)
                        for v in (grid.group(1) or '').split(',') if v.strip()]
    info['dimension_semantics'] = re.findall(r'dimension_semantics<(\w+)>', attrs)
    info['blocks'] = [[int(v) for v in w.split(',') if v.strip()] for w in
                      re.findall(r'window_bounds = array<i64(?::\s*([^>]*))?>', attrs)]
    prefetch = re.search(r'scalar_prefetch = (\d+)', attrs)
    info['scalar_prefetch'] = int(prefetch.group(1)) if prefetch else 0
    scratch = re.search(r'scratch_operands = (\d+)', attrs)
    info['scratch_operands'] = int(scratch.group(1)) if scratch else 0
    return info


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('module')
    ap.add_argument('--json', action='store_true')
    ap.add_argument('--all', action='store_true', help='every call, not one per signature')
    a = ap.parse_args(argv)
    found = kernels(open(a.module).read())
    if not a.all:
        groups = {}
        for k in found:
            key = json.dumps({x: k.get(x) for x in ('kernel', 'result', 'operands', 'grid',
                                                     'blocks')}, sort_keys=True)
            if key in groups:
                groups[key]['count'] += 1
            else:
                groups[key] = dict(k, count=1)
        found = list(groups.values())
    if a.json:
        print(json.dumps(found, indent=1))
        return
    for k in found:
        print(f'{k["name"]} ({k.get("kernel", "?")}, x{k.get("count", 1)}): '
              f'{", ".join(k["operands"])} -> {", ".join(k["result"])}')
        print(f'  grid {k.get("grid")} {k.get("dimension_semantics")}, blocks {k.get("blocks")}, '
              f'scalar prefetch {k.get("scalar_prefetch")}, scratch {k.get("scratch_operands")}')
        for key in ('cost_estimate', 'kernel_metadata'):
            if key in k:
                print(f'  {key} {k[key]}')


if __name__ == '__main__':
    main(sys.argv[1:])
