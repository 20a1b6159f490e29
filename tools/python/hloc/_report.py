"""The result of :func:`hloc.predict`."""

from __future__ import annotations

import copy
import importlib
from typing import Any


class Report:
    """A predicted training step on TPU chips: the report ``hloc compile --chips N --json``
    prints, for the slowest chip.

    :meth:`to_dict` is that JSON object, field for field (``peak_rss_bytes`` is this
    process's peak resident memory, as the command's is its own); the properties read the
    headline figures from it.
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def step_time_us(self) -> float:
        """The step's time on the slowest chip, in microseconds."""
        return float(self._data["step_time_us"])

    @property
    def compute_us(self) -> float:
        """The part of the step that is compute (the step less exposed communication), µs."""
        return float(self._data["compute_cycles"] / self._data["clock_hz"] * 1e6)

    @property
    def exposed_comm_us(self) -> float:
        """Communication not hidden behind compute, µs."""
        return float(self._data["exposed_comm_cycles"] / self._data["clock_hz"] * 1e6)

    @property
    def hbm_peak_bytes(self) -> int:
        """The peak bytes one chip's HBM holds during the step."""
        return int(self._data["hbm_peak_bytes"])

    @property
    def hbm_capacity_bytes(self) -> int:
        """One chip's HBM capacity, in bytes."""
        return int(self._data["hbm_capacity_bytes"])

    @property
    def hbm_fits(self) -> bool:
        """Whether the step's peak fits in one chip's HBM."""
        return bool(self._data["hbm_fits"])

    @property
    def hfu_pct(self) -> float:
        """Hardware FLOPs utilization: the FLOPs the program executes over the chip's peak, %."""
        return float(self._data["hfu_pct"])

    @property
    def mfu_pct(self) -> float | None:
        """Model FLOPs utilization, %, when ``model_flops`` was given; else ``None``."""
        v = self._data.get("mfu_pct")
        return None if v is None else float(v)

    @property
    def chips(self) -> int:
        """The number of chips simulated."""
        return int(self._data["chips"])

    @property
    def collectives(self) -> list[dict[str, Any]]:
        """The per-chip program's collectives: ``{"kind", "count", "bytes"}`` per kind."""
        return copy.deepcopy(self._data["collectives"])

    @property
    def per_op(self) -> list[dict[str, Any]]:
        """One dict per op of the lowered program (name, class, calls, cycles, share of the
        step, FLOPs, HBM bytes, roofline bound, ...), slowest first."""
        return copy.deepcopy(self._data["per_op"])

    def to_dict(self) -> dict[str, Any]:
        """The whole report: the JSON object of ``hloc compile --chips N --json``."""
        return copy.deepcopy(self._data)

    def to_pandas(self) -> Any:
        """The per-op table as a :class:`pandas.DataFrame` (needs pandas)."""
        try:
            pandas = importlib.import_module("pandas")
        except ImportError as e:
            raise ImportError(
                "Report.to_pandas needs pandas (pip install pandas); "
                "Report.per_op has the same rows as a list of dicts"
            ) from e
        return pandas.DataFrame(self.per_op)

    def __repr__(self) -> str:
        return (
            f"Report({self.chips} chips of {self._data.get('config')}: step "
            f"{self.step_time_us:.1f} us = compute {self.compute_us:.1f} us + exposed "
            f"communication {self.exposed_comm_us:.1f} us; HBM peak {self.hbm_peak_bytes} of "
            f"{self.hbm_capacity_bytes} bytes, {'fits' if self.hbm_fits else 'does not fit'})"
        )
