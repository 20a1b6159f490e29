#!/usr/bin/env bash
# Idempotent setup of the venv that runs XLA's own TPU compiler (libtpu) ahead of time on
# this host, without a TPU: `python tools/models/models.py --tpu TOPOLOGY --tpu-out DIR`
# and the XLA TPU columns of `hloc validate` use it. Optional for a user; .ci/run installs it.
#
# Creates a venv at $HLOC_LIBTPU_VENV (default ~/.cache/hloc-libtpu-venv) with the oracle's
# JAX and the libtpu build `jax[tpu]==0.10.2` installs, kept apart from the XLA oracle's
# CPU venv:
#   jax==0.10.2 jaxlib==0.10.2 libtpu==0.0.42.1 numpy==2.4.6
# Re-running is cheap: if the venv already imports the pinned versions it exits at once.
# Set PYTHON=/path/to/python3.11+ to choose the interpreter.
#
# Usage:
#   bash tools/models/setup_libtpu.sh   # prints the venv path; its bin/python runs models.py --tpu
set -euo pipefail

VENV="${HLOC_LIBTPU_VENV:-$HOME/.cache/hloc-libtpu-venv}"
PY="${PYTHON:-python3}"
PINS=(jax==0.10.2 jaxlib==0.10.2 libtpu==0.0.42.1 numpy==2.4.6)

check() {
  "$VENV/bin/python" - <<'EOF' 2>/dev/null
import importlib.metadata as md
import jax, jaxlib, numpy
assert jax.__version__ == "0.10.2", jax.__version__
assert jaxlib.__version__ == "0.10.2", jaxlib.__version__
assert md.version("libtpu") == "0.0.42.1", md.version("libtpu")
assert numpy.__version__ == "2.4.6", numpy.__version__
from jax.experimental import topologies, mesh_utils  # noqa: F401
EOF
}

if [ -x "$VENV/bin/python" ] && check; then
  echo "libtpu venv ready: $(cd "$VENV" && pwd)"
  exit 0
fi

"$PY" - <<'EOF'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"jax 0.10.2 needs Python >= 3.11, {sys.executable} is {sys.version.split()[0]} "
             "(set PYTHON=/path/to/python3.11+)")
EOF

if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --disable-pip-version-check -q "${PINS[@]}"

if ! check; then
  echo "libtpu venv at $VENV does not import the pinned stack" >&2
  exit 1
fi
# A topology compiles ahead of time with no TPU attached (libtpu's warnings about the
# missing TPU environment go to stderr and are harmless).
"$VENV/bin/python" - <<'EOF' 2>/dev/null
from jax.experimental import topologies
topo = topologies.get_topology_desc(platform="tpu", topology_name="v4:2x2x1",
                                    chip_config_name="megacore")
print("libtpu venv ready:", len(topo.devices), "devices of", topo.devices[0].device_kind,
      "on topology v4:2x2x1")
EOF
