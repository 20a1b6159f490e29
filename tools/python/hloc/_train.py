"""A training step with resident state: :class:`hloc.TrainStep`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _arrays, _hloc


class TrainStep:
    """A training step compiled by the JIT whose state (parameters, optimizer state)
    stays resident between steps, as ``hlo_runtime::TrainStep``.

    The module follows JAX's convention ``step(state..., batch...) -> (loss,
    new_state...)``: its first ``len(state)`` parameters are the state, the rest the
    batch; output 0 is the loss and outputs ``1..len(state)`` replace the state (further
    outputs, e.g. metrics, are kept in :attr:`outputs`). The program for each batch shape
    comes from the process-wide JIT cache (compiled once per shape).

    Example::

        step = hloc.TrainStep(text, [w1, b1, w2, b2])
        for x, y in batches:
            loss = step.step([x, y])
        step.save("ckpt.safetensors")
    """

    def __init__(
        self,
        text: str,
        state: Sequence[Any],
        *,
        names: Sequence[str] | None = None,
        path: str = "<string>",
    ) -> None:
        """Args:
            text: the step's HLO text (checked as by :func:`hloc.check`).
            state: the initial state, one array per leading parameter.
            names: the state tensors' names in checkpoints (default ``state.0``, ...).
            path: the name diagnostics give the text.

        Raises:
            HloError: the module has errors.
            InputError: the state does not fit the leading parameters.
        """
        native = [_arrays.to_native(i, a) for i, a in enumerate(state)]
        self._step = _hloc.TrainStep(text, native, None if names is None else list(names), path)

    def step(self, batch: Sequence[Any]) -> float:
        """Runs one step on ``batch`` (the remaining parameters, in order); the loss.

        Raises:
            InputError: the batch does not fit the parameters (the message of
                ``hloc run --inputs``, the state being ``p0..``).
        """
        offset = len(self._step.names())
        native = [_arrays.to_native(offset + i, a) for i, a in enumerate(batch)]
        return float(self._step.step(native))

    @property
    def state(self) -> list[np.ndarray]:
        """The current state (copies)."""
        return [_arrays.from_native(e, d, b) for e, d, b in self._step.state()]

    @property
    def outputs(self) -> list[np.ndarray]:
        """The last step's outputs (0: the loss; then the previous state; then metrics)."""
        return [_arrays.from_native(e, d, b) for e, d, b in self._step.outputs()]

    @property
    def steps(self) -> int:
        """How many steps ran (a restored checkpoint's count included)."""
        return int(self._step.steps())

    @property
    def names(self) -> list[str]:
        """The state tensors' names."""
        return list(self._step.names())

    def save(self, file: str | os.PathLike[str]) -> None:
        """Writes the state and the step count to ``file`` (safetensors), atomically."""
        self._step.save(os.fspath(file))

    def restore(self, file: str | os.PathLike[str]) -> int:
        """Replaces the state and the step count with the checkpoint ``file`` (written by
        :meth:`save` for the same module); returns the step count."""
        return int(self._step.restore(os.fspath(file)))
