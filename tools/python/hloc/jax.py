"""Predict a JAX function's sharded step on TPU chips (``hloc.jax.predict``), and pick its
mesh (``hloc.jax.plan``).

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


class JaxPlan:
    """The meshes :func:`plan` tried for a JAX step, ranked: those that fit in HBM by step
    time, then those over capacity, then those the step could not be built or predicted
    for (with the reason)."""

    def __init__(self, chip: str, chips: int, candidates: list[dict[str, Any]]) -> None:
        self.chip = chip
        self.chips = chips
        self.candidates = candidates

    @property
    def best(self) -> dict[str, Any] | None:
        """The fastest mesh that fits, or ``None`` when none does."""
        return next((c for c in self.candidates if c["state"] == "fits"), None)

    def to_pandas(self) -> Any:
        """The candidates as a ``pandas.DataFrame`` (the reports left out)."""
        try:
            pd = importlib.import_module("pandas")
        except ImportError as e:
            raise ImportError("JaxPlan.to_pandas needs pandas: pip install pandas") from e
        return pd.DataFrame([{k: v for k, v in c.items() if k != "report"} for c in self.candidates])

    def __str__(self) -> str:
        lines = [f"{len(self.candidates)} meshes of {self.chips} {self.chip} chips"]
        for i, c in enumerate(self.candidates, 1):
            mesh = " x ".join(f"{k} {v}" for k, v in c["mesh_shape"].items())
            if c["state"] in ("fits", "does not fit"):
                mfu = "" if c["mfu_pct"] is None else f"  MFU {c['mfu_pct']:.1f}%"
                lines.append(
                    f"{i:>3}  {mesh:<32} {c['step_time_us'] / 1e3:>10.3f} ms  "
                    f"HBM {c['hbm_peak_bytes'] / 2**30:.1f} / {c['hbm_capacity_bytes'] / 2**30:.1f} GiB"
                    f"  exposed comm {c['exposed_comm_us'] / 1e3:.3f} ms{mfu}  {c['state']}"
                )
            else:
                lines.append(f"{i:>3}  {mesh:<32} {c['state']}: {c['error']}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        best = self.best
        return f"<hloc.jax.JaxPlan: {len(self.candidates)} meshes, best: {best['mesh_shape'] if best else None}>"


def _meshes(chips: int, axes: list[str], sizes: Mapping[str, Any] | None) -> list[dict[str, int]]:
    """Every assignment of sizes to ``axes`` whose product is ``chips`` (each size a
    divisor; ``sizes[axis]`` restricts an axis to those values), in a fixed order."""
    divisors = [d for d in range(1, chips + 1) if chips % d == 0]
    out: list[dict[str, int]] = []

    def walk(i: int, left: int, acc: dict[str, int]) -> None:
        if i == len(axes):
            if left == 1:
                out.append(dict(acc))
            return
        allowed = sizes.get(axes[i]) if sizes else None
        for d in divisors:
            if left % d or (allowed is not None and d not in allowed):
                continue
            acc[axes[i]] = d
            walk(i + 1, left // d, acc)
            del acc[axes[i]]

    walk(0, chips, {})
    return out


def plan(
    step_for: Callable[[dict[str, int]], tuple[Any, Any, Any, Any]],
    *,
    chips: int,
    axes: Any,
    chip: str = "v5p",
    slices: int = 1,
    model_flops: float | None = None,
    sizes: Mapping[str, Any] | None = None,
    jobs: int | None = None,
    **jit_kwargs: Any,
) -> JaxPlan:
    """Picks the mesh for a JAX step on ``chips`` TPU chips: every assignment of sizes to
    the mesh ``axes`` whose product is ``chips`` is built by ``step_for``, lowered over
    that many host devices (see :func:`lower`) and predicted by :func:`hloc.predict`
    (the predictions run in parallel, outside the GIL), and the meshes are ranked by
    predicted step time among those that fit in HBM.

    Args:
        step_for: given a mesh shape (``{"data": 8, "model": 2}``), returns
            ``(fn, abstract_args, in_shardings, out_shardings)`` for that mesh (the
            shardings as :func:`predict` takes them); raising ``ValueError`` says the step
            cannot use that mesh (recorded with the reason, not fatal).
        chips: the chips of the slice (or slices).
        axes: the mesh's axis names, outermost first.
        chip: the chip generation.
        slices: slices joined by the data-center network (must divide ``chips``).
        model_flops: the model's FLOPs per chip and step, for MFU.
        sizes: the sizes allowed per axis (``{"model": [1, 2, 4]}``); default: every
            divisor.
        jobs: predictions at once (default: the machine's cores).
        jit_kwargs: passed to ``jax.jit`` (e.g. ``donate_argnums``).

    Raises:
        InputError: ``chips``, ``slices``, ``axes`` or ``sizes`` admit no mesh.
        ImportError: JAX is not installed.
    """
    from concurrent.futures import ThreadPoolExecutor

    from ._errors import InputError

    names = [str(a) for a in ([axes] if isinstance(axes, str) else axes)]
    if int(chips) < 1 or not names or len(set(names)) != len(names):
        raise InputError(f"a plan needs chips >= 1 and distinct axis names, got chips={chips}, axes={names}")
    if int(slices) < 1 or int(chips) % int(slices):
        raise InputError(f"{slices} slices do not divide {chips} chips")
    for axis, allowed in (sizes or {}).items():
        if axis not in names:
            raise InputError(f"sizes names the axis {axis!r}, which is not one of {names}")
        bad = [s for s in allowed if int(s) < 1 or int(chips) % int(s)]
        if bad:
            raise InputError(f"sizes {bad} of axis {axis!r} do not divide {chips} chips")
    meshes = _meshes(int(chips), names, sizes)
    if not meshes:
        raise InputError(f"no mesh over axes {names} with the allowed sizes has {chips} devices")
    _import_jax(int(chips))
    candidates: list[dict[str, Any]] = []
    futures = []
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        for mesh in meshes:
            c: dict[str, Any] = {"mesh_shape": mesh}
            candidates.append(c)
            try:
                fn, args, ins, outs = step_for(dict(mesh))
                text = lower(fn, *args, mesh_shape=mesh, in_shardings=ins,
                             out_shardings=outs, **jit_kwargs)
            except ValueError as e:
                c.update(state="skipped", error=str(e))
                continue
            except Exception as e:  # noqa: BLE001 (a mesh JAX refuses is that mesh's failure)
                c.update(state="failed", error=f"{type(e).__name__}: {e}")
                continue
            name = getattr(fn, "__name__", "fn")
            futures.append((c, pool.submit(
                _predict, text, chips=int(chips), chip=chip,  # type: ignore[arg-type]
                slices=int(slices), model_flops=model_flops, path=f"<jax {name} {mesh}>")))
        for c, f in futures:
            try:
                r = f.result()
            except Exception as e:  # noqa: BLE001 (a prediction error is that mesh's failure)
                c.update(state="failed", error=f"{type(e).__name__}: {e}")
                continue
            c.update(
                state="fits" if r.hbm_fits else "does not fit",
                step_time_us=r.step_time_us,
                exposed_comm_us=r.exposed_comm_us,
                hbm_peak_bytes=r.hbm_peak_bytes,
                hbm_capacity_bytes=r.hbm_capacity_bytes,
                mfu_pct=r.mfu_pct,
                report=r,
            )
    order = {"fits": 0, "does not fit": 1, "failed": 2, "skipped": 3}
    candidates.sort(key=lambda c: (order[c["state"]], c.get("step_time_us", 0.0)))
    return JaxPlan(chip, int(chips), candidates)
