"""The result of :func:`hloc.plan`."""

from __future__ import annotations

import copy
import importlib
from typing import Any


class Plan:
    """A ranked plan: every candidate configuration of a model on a slice, as
    ``hloc plan --json`` prints it.

    :meth:`to_dict` is that JSON object, field for field; :attr:`configurations` lists the
    candidates in rank order (those that fit, fastest first; then those simulated over the
    chip's HBM; then failures; then those pruned by the HBM lower bound).
    """

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    @property
    def configurations(self) -> list[dict[str, Any]]:
        """Every candidate, in rank order: ``fsdp``, ``tensor``, ``dcn``, ``remat``,
        ``micro_batch``, ``accum``, ``state`` (``fits``, ``does not fit``, ``failed``,
        ``pruned``), and for simulated ones ``step_s``, ``tokens_per_s_per_chip``,
        ``mfu_pct``, ``hbm_peak_bytes``, ``exposed_comm_pct``, ..."""
        return copy.deepcopy(self._data["configurations"])

    @property
    def best(self) -> dict[str, Any] | None:
        """The fastest configuration that fits, or ``None`` when none does."""
        for c in self._data["configurations"]:
            if c.get("state") == "fits":
                found: dict[str, Any] = copy.deepcopy(c)
                return found
        return None

    @property
    def published(self) -> dict[str, Any] | None:
        """The published configuration of the row planned for, when there is one."""
        for c in self._data["configurations"]:
            if c.get("published"):
                mark: dict[str, Any] = copy.deepcopy(c)
                return mark
        return None

    @property
    def simulated(self) -> int:
        """How many candidates were simulated."""
        return int(self._data["simulated"])

    @property
    def pruned(self) -> int:
        """How many candidates the HBM lower bound ruled out before simulating."""
        return int(self._data["pruned"])

    def to_dict(self) -> dict[str, Any]:
        """The whole plan: the JSON object of ``hloc plan --json``."""
        return copy.deepcopy(self._data)

    def to_pandas(self) -> Any:
        """The candidates as a ``pandas.DataFrame`` (one row each, in rank order).

        Raises:
            ImportError: pandas is not installed.
        """
        try:
            pd = importlib.import_module("pandas")
        except ImportError as e:
            raise ImportError("Plan.to_pandas needs pandas: pip install pandas") from e
        return pd.DataFrame(self._data["configurations"])

    def __str__(self) -> str:
        lines = [
            f"plan on {self._data['chips']} {self._data['chip']} chips, global batch "
            f"{self._data['global_batch']}: {self._data['candidates']} candidates, "
            f"{self._data['simulated']} simulated, {self._data['pruned']} pruned"
        ]
        for c in self._data["configurations"]:
            if "step_s" not in c:
                continue
            mark = " *" if c.get("published") else ""
            lines.append(
                f"{c['rank']:>4}  {c['configuration']:<58} {c['step_s']:>9.3f} s  "
                f"{c['hbm_peak_bytes'] / 2**30:>6.1f} GiB  {c['state']}{mark}"
            )
        return "\n".join(lines)

    def __repr__(self) -> str:
        best = self.best
        what = best["configuration"] if best else "nothing fits"
        return f"<hloc.Plan: {self._data['candidates']} candidates, best: {what}>"
