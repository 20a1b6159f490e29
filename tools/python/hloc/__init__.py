"""hloc: check, optimize, run and predict XLA HLO programs from Python.

The functions do what the ``hloc`` command line does, in this process, through the same
Rust code (the native module :mod:`hloc._hloc`)::

    import hloc
    hloc.check(text)                          # hloc check
    text = hloc.optimize(text)                # hloc opt
    outs = hloc.run(text, [x, y])             # hloc run (JIT; engine="interp", "tpu")
    report = hloc.predict(text, chips=8)      # hloc compile --chips 8 --json
    report = hloc.jax.predict(fn, *args, mesh_shape={"data": 4}, ...)  # from a JAX function
    step = hloc.TrainStep(text, params); loss = step.step(batch)  # resident training state
    plan = hloc.plan("maxtext-32b-1x-v5p-128")   # hloc plan: mesh, remat, batch split, ranked

``text`` is HLO text as JAX and XLA print it. Errors raise :class:`HloError` (its message
is the command line's diagnostic text; ``.line`` and ``.column`` locate the first error)
or :class:`InputError` (also a ``ValueError``); warnings are issued as
:class:`HloWarning`. Importing ``hloc`` does not import JAX.
"""

from __future__ import annotations

import json
import warnings as _warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from . import _arrays, _hloc
from ._errors import HloError, HloWarning, InputError
from ._plan import Plan
from ._report import Report
from ._train import TrainStep

if TYPE_CHECKING:
    import numpy

    from . import jax

__all__ = [
    "HloError",
    "HloWarning",
    "InputError",
    "Report",
    "TrainStep",
    "check",
    "default_passes",
    "jax",
    "jit_cache_stats",
    "optimize",
    "passes",
    "plan",
    "Plan",
    "predict",
    "run",
]

Engine = Literal["jit", "interp", "tpu"]
Chip = Literal["v2", "v3", "v4", "v5e", "v5p"]


def _warn(text: str) -> None:
    if text:
        _warnings.warn(text, HloWarning, stacklevel=3)


def check(text: str, *, path: str = "<string>") -> None:
    """Checks an HLO module as ``hloc check`` does: the structural verifier, shape
    inference, data-dependent shapes, infinite loops and sharding device counts.

    Args:
        text: the module's HLO text.
        path: the name diagnostics give the text (``path:line:col: error: ...``).

    Raises:
        HloError: on any error; its message is what ``hloc check`` prints for the same
            text, ``.line``/``.column`` the position of the first error.
    """
    _warn(_hloc.check(text, path))


def passes() -> list[str]:
    """Every pass :func:`optimize` can name (``hloc opt --list-passes``)."""
    return _hloc.pass_names()[0]


def default_passes() -> list[str]:
    """The passes of the default pipeline, in order (each once)."""
    return _hloc.pass_names()[1]


def optimize(text: str, passes: Sequence[str] | None = None, *, path: str = "<string>") -> str:
    """Optimizes an HLO module as ``hloc opt`` does and returns the printed module.

    Args:
        text: the module's HLO text (checked first, as by :func:`check`).
        passes: the passes to run, in order (names from :func:`hloc.passes`); ``None``
            runs the default pipeline (cleanup passes to a fixpoint, then fusion).
        path: the name diagnostics give the text.

    Returns:
        The optimized module as canonical HLO text (XLA parses and runs it).

    Raises:
        InputError: an unknown pass name.
        HloError: the module has errors, or a pass failed.
    """
    if isinstance(passes, str):
        raise InputError("passes is a list of pass names, not one string")
    names = None if passes is None else [str(p) for p in passes]
    out, warnings = _hloc.optimize(text, names, path)
    _warn(warnings)
    return out


def run(
    text: str,
    inputs: Sequence[Any],
    engine: Engine = "jit",
    devices: int = 1,
    *,
    chip: Chip = "v4",
    path: str = "<string>",
) -> list[numpy.ndarray]:
    """Runs an HLO module on host arrays as ``hloc run`` does.

    Args:
        text: the module's HLO text.
        inputs: one array per entry parameter, in order (numpy arrays, or anything
            ``numpy.asarray`` takes; bfloat16, fp8 and sub-byte types as ``ml_dtypes``
            arrays, bf16 also as ``uint16`` bit patterns). Checked against the
            parameters (count, dtype, dims) before anything runs.
        engine: ``"jit"`` (native code from the Cranelift JIT; its compiled programs are
            cached for the process, keyed by the module and the argument shapes),
            ``"interp"`` (the reference interpreter) or ``"tpu"`` (the TPU model of
            ``chip``: MXU products in bf16 passes as each dot states).
        devices: with more than one, SPMD: the module's shardings are propagated, the
            module partitioned and run on that many host devices (threads) or chips.
        chip: the chip of the ``tpu`` engine.
        path: the name diagnostics give the text.

    Returns:
        The outputs (the root tuple flattened), as numpy arrays.

    Raises:
        InputError: inputs that do not match the parameters (the message is
            ``hloc run --inputs``'s, the arrays named ``p0..pN`` from ``inputs``), an
            unknown engine.
        HloError: the module has errors, or an engine refused or failed.
    """
    native = [_arrays.to_native(i, a) for i, a in enumerate(inputs)]
    outs, warnings = _hloc.run(text, native, engine, int(devices), chip, path)
    _warn(warnings)
    return [_arrays.from_native(e, d, b) for e, d, b in outs]


def predict(
    text: str,
    chips: int,
    chip: Chip = "v4",
    slices: int = 1,
    model_flops: float | None = None,
    topology: str | None = None,
    *,
    path: str = "<string>",
) -> Report:
    """Predicts one step of a sharded program on TPU chips, as
    ``hloc compile FILE --config CHIP --chips N [--slices S] [--topology T]
    [--model-flops F] --json`` does: shardings propagated, the module partitioned for
    ``chips`` chips, the per-chip program optimized, lowered and simulated, collectives
    timed on the slice's ICI (and the DCN between slices).

    Args:
        text: the module's HLO text (with shardings; one without runs whole on each chip).
        chips: the number of chips (the shardings' device count).
        chip: the chip generation.
        slices: slices joined by the data-center network (consecutive device ids share a
            slice); must divide ``chips``.
        model_flops: the model's FLOPs per chip and step, for :attr:`Report.mfu_pct`.
        topology: each slice's ICI mesh (``"4x4x4"``); default: Cloud TPU's shape.
        path: the name diagnostics give the text.

    Raises:
        InputError: an unknown chip, a bad ``chips``/``slices``/``topology``.
        HloError: the module has errors, or partitioning or lowering failed.
    """
    if int(chips) < 1:
        raise InputError(f"chips must be at least 1, got {chips}")
    if int(slices) < 1 or int(chips) % int(slices):
        raise InputError(f"slices ({slices}) must be at least 1 and divide chips ({chips})")
    flops = None if model_flops is None else float(model_flops)
    s = None if int(slices) == 1 else int(slices)
    data, warnings = _hloc.predict(text, int(chips), chip, s, flops, topology, path)
    _warn(warnings)
    return Report(json.loads(data))


def plan(
    row: str | None = None,
    *,
    model: dict[str, Any] | None = None,
    chip: Chip | None = None,
    chips: int | None = None,
    slices: int | None = None,
    global_batch: int | None = None,
    tensor: Sequence[int] | None = None,
    remat: Sequence[str] | None = None,
    max_accum: int | None = None,
    jobs: int | None = None,
    svg: str | None = None,
    cache: str | None = None,
    rows: str | None = None,
    python: str | None = None,
    host_lowered: bool = False,
) -> Plan:
    """Picks the mesh, remat policy and batch split for a decoder on a TPU slice, as
    ``hloc plan ... --json`` does: every FSDP x tensor split of the slice (data parallel
    across slices), remat policy and gradient accumulation is enumerated, those whose HBM
    lower bound exceeds the chip are pruned, the rest built by the project's model
    generators (``tools/models``) and simulated in parallel, and ranked by step time.

    Args:
        row: a published row of ``rows.json`` (its model, chip, chips, slices and global
            batch; its configuration is marked ``published``).
        model: instead of ``row``, a row's ``model`` object (``family`` ``decoder-lm`` or
            ``decoder-lm-moe``, ``layers``, ``emb``, ``heads``, ``head_dim``, ``mlp``,
            ``vocab``, ``seq``, ...), with ``chip``, ``chips`` and ``global_batch``.
        chip: ``v4``, ``v5e`` or ``v5p``.
        chips: chips in all (every slice).
        slices: slices joined by the data-center network.
        global_batch: sequences per step over every chip.
        tensor: only these tensor-parallel degrees.
        remat: the policies to try (``none``, ``minimal``, ``full``).
        max_accum: the largest gradient accumulation tried.
        jobs: candidates simulated at once (default: the machine's cores).
        svg: also draw step time and HBM per configuration into this file.
        cache: where generated programs are kept (default: the project's target/plan).
        rows: the published rows file (default: ``../shared/tpu-published/rows.json``).
        python: a Python with jax for host-lowered programs (default: the XLA oracle's venv).
        host_lowered: lower on host devices even when the libtpu venv is there.

    Raises:
        InputError: a request the planner refuses (a tensor degree that does not divide a
            slice, a global batch that does not divide over the chips, an unknown chip, a
            model family it does not search), with the constraint named.
    """
    args: list[str] = ["--json"]
    tmp = None
    try:
        if model is not None:
            import os
            import tempfile

            fd, tmp = tempfile.mkstemp(suffix=".json", prefix="hloc-plan-model-")
            with os.fdopen(fd, "w") as f:
                json.dump(model, f)
            args += ["--model", tmp]
        if row is not None:
            args += ["--row", row]
        for flag, value in (
            ("--chip", chip),
            ("--chips", chips),
            ("--slices", slices),
            ("--global-batch", global_batch),
            ("--max-accum", max_accum),
            ("--jobs", jobs),
            ("--svg", svg),
            ("--cache", cache),
            ("--rows", rows),
            ("--python", python),
        ):
            if value is not None:
                args += [flag, str(value)]
        if tensor is not None:
            args += ["--tensor", ",".join(str(int(t)) for t in tensor)]
        if remat is not None:
            args += ["--remat", ",".join(remat)]
        if host_lowered:
            args.append("--host-lowered")
        return Plan(json.loads(_hloc.plan(args)))
    finally:
        if tmp is not None:
            import os

            os.unlink(tmp)


def jit_cache_stats() -> dict[str, float]:
    """The process-wide JIT cache of :func:`run`: ``hits``, ``misses`` (compiles) and
    ``compile_ms`` (total compile time)."""
    hits, misses, ms = _hloc.jit_cache_stats()
    return {"hits": hits, "misses": misses, "compile_ms": ms}


def __getattr__(name: str) -> Any:
    # `hloc.jax` is imported on first use, so `import hloc` never imports JAX.
    if name == "jax":
        import importlib

        return importlib.import_module(".jax", __name__)
    raise AttributeError(f"module 'hloc' has no attribute {name!r}")
