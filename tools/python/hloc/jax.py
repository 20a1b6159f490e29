"""Predict a JAX function's sharded step on TPU chips: ``hloc.jax.predict``.

JAX is optional: this module imports it only when :func:`predict` is called (and
``import hloc`` does not import this module until ``hloc.jax`` is used).
"""

from __future__ import annotations

import importlib
import math
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

from . import predict as _predict
from ._report import Report

_FLAG = "--xla_force_host_platform_device_count"


def _host_device_count_flag(flags: str) -> int | None:
    m = re.search(_FLAG + r"=(\d+)", flags)
    return int(m.group(1)) if m else None


def _backends_initialized(jax: Any) -> bool:
    try:
        xla_bridge = importlib.import_module("jax._src.xla_bridge")
        return bool(xla_bridge.backends_are_initialized())
    except Exception:  # a JAX without this private function: assume it is initialized
        return True


def _import_jax(n: int) -> Any:
    """JAX with at least ``n`` host (CPU) devices: asks for them through ``XLA_FLAGS``
    when JAX's backends are not started yet, else checks that it has them."""
    if "jax" not in sys.modules or not _backends_initialized(sys.modules["jax"]):
        flags = os.environ.get("XLA_FLAGS", "")
        have = _host_device_count_flag(flags)
        if have is None or have < n:
            flags = re.sub(_FLAG + r"=\d+", "", flags).strip()
            os.environ["XLA_FLAGS"] = f"{flags} {_FLAG}={n}".strip()
    try:
        jax = importlib.import_module("jax")
    except ImportError as e:
        raise ImportError(
            "hloc.jax.predict needs JAX (pip install jax): it lowers the function with "
            "jax.jit over a mesh of host CPU devices"
        ) from e
    cpus = jax.devices("cpu")
    if len(cpus) < n:
        raise RuntimeError(
            f"hloc.jax.predict: the mesh needs {n} host devices but JAX was started with "
            f"{len(cpus)}; set XLA_FLAGS={_FLAG}={n} in the environment before JAX is "
            f"imported (or import hloc.jax and call predict before using JAX)"
        )
    return jax


def lower(
    fn: Callable[..., Any],
    *abstract_args: Any,
    mesh_shape: Mapping[str, int],
    in_shardings: Any,
    out_shardings: Any,
    **jit_kwargs: Any,
) -> str:
    """``fn`` jitted with these shardings over a mesh of host CPU devices and lowered
    for ``abstract_args`` (``jax.ShapeDtypeStruct`` or arrays): its HLO text.

    ``in_shardings``/``out_shardings`` are pytrees of ``jax.sharding.PartitionSpec`` (made
    ``NamedSharding`` over the mesh) or of shardings; ``jit_kwargs`` go to ``jax.jit``
    (e.g. ``donate_argnums``)."""
    sizes = [int(s) for s in mesh_shape.values()]
    if not sizes or any(s < 1 for s in sizes):
        raise ValueError(f"mesh_shape needs axes of at least one device, got {dict(mesh_shape)}")
    n = math.prod(sizes)
    jax = _import_jax(n)
    import numpy as np

    sharding = importlib.import_module("jax.sharding")
    Mesh, NamedSharding, PartitionSpec = sharding.Mesh, sharding.NamedSharding, sharding.PartitionSpec
    mesh = Mesh(np.array(jax.devices("cpu")[:n]).reshape(sizes), tuple(mesh_shape.keys()))

    def named(tree: Any) -> Any:
        return jax.tree.map(
            lambda s: NamedSharding(mesh, s) if isinstance(s, PartitionSpec) else s,
            tree,
            is_leaf=lambda s: isinstance(s, PartitionSpec),
        )

    jitted = jax.jit(
        fn, in_shardings=named(in_shardings), out_shardings=named(out_shardings), **jit_kwargs
    )
    lowered = jitted.lower(*abstract_args)
    return str(lowered.as_text(dialect="hlo"))


def predict(
    fn: Callable[..., Any],
    *abstract_args: Any,
    mesh_shape: Mapping[str, int],
    in_shardings: Any,
    out_shardings: Any,
    chip: str = "v5p",
    **kw: Any,
) -> Report:
    """Predicts one step of ``fn`` on TPU chips: ``fn`` is lowered with
    ``jax.jit(fn, in_shardings=..., out_shardings=...)`` over a ``jax.sharding.Mesh`` of
    ``prod(mesh_shape.values())`` host CPU devices (see :func:`lower`), and its HLO text
    goes to :func:`hloc.predict` with ``chips`` = the mesh's devices.

    Args:
        fn: the step (e.g. a training step).
        abstract_args: its arguments (``jax.ShapeDtypeStruct`` or arrays; only their
            shapes and dtypes are used).
        mesh_shape: the mesh's axes and sizes, in order (``{"data": 4, "model": 2}``).
        in_shardings: a ``PartitionSpec`` (or sharding) per argument, as ``jax.jit``
            takes them.
        out_shardings: the same for the outputs.
        chip: the chip generation (``v2``, ``v3``, ``v4``, ``v5e``, ``v5p``).
        kw: ``slices``, ``model_flops``, ``topology`` for :func:`hloc.predict`; any other
            keyword goes to ``jax.jit`` (e.g. ``donate_argnums``).

    Raises:
        ImportError: JAX is not installed.
        RuntimeError: JAX already runs with fewer host devices than the mesh needs (set
            ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` before importing JAX).
    """
    predict_kw = {k: kw.pop(k) for k in ("slices", "model_flops", "topology") if k in kw}
    text = lower(
        fn,
        *abstract_args,
        mesh_shape=mesh_shape,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        **kw,
    )
    n = math.prod(int(s) for s in mesh_shape.values())
    name = getattr(fn, "__name__", "fn")
    return _predict(text, chips=n, chip=chip, path=f"<jax {name}>", **predict_kw)  # type: ignore[arg-type]
