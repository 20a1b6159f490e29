"""Times XLA's own HLO text parser (jax/jaxlib, the oracle venv) on the given files.

Prints one line per file: the median seconds of `hlo_module_from_text`, or `-` if XLA
rejects the file. Used by `hloc bench parse`.
"""
import sys
import time

from jax._src.lib import xla_client as xc


def main(argv):
    repeat = 3
    if argv[:1] == ["--repeat"]:
        repeat, argv = int(argv[1]), argv[2:]
    for path in argv:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        times = []
        try:
            for _ in range(repeat):
                t = time.perf_counter()
                xc.hlo.hlo_module_from_text(text)
                times.append(time.perf_counter() - t)
        except Exception:  # XLA rejects the module: no time to report
            print("-", flush=True)
            continue
        times.sort()
        print(times[len(times) // 2], flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
