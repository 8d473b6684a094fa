"""Swept udpmon runs (``--sweep``): the steps, and each step's results stacked into one table with a step column.

A swept results file holds one whole run per step under ``sweep/step<k>/``
and the steps' settings in ``sweep/steps`` (``docs/formats.md``). Hughes-Jones et al. 2003
section 8 draws one curve per interrupt-coalescing setting: mean RTT
against response size (figure 8.1), throughput against transmit spacing
(8.2, 8.3); :func:`nicrig.udpmon.sweep.curves` cuts a stacked table into
those curves, labelled with each step's settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from nicrig.udpmon import sweep as W

#: ``sweep/steps`` columns that are not settings.
STEP_COLUMNS = ("step", "label")


@dataclass(frozen=True)
class Step:
    """One step of a sweep: its number, its settings as text (``rx-usecs=20 mtu=9000``) and as numbers.

    ``settings`` maps the ``sweep/steps`` column names (``rx_usecs``, ``mtu``,
    booleans as 0/1) to the values in force.
    """

    index: int
    label: str
    settings: dict[str, int]

    @property
    def prefix(self) -> str:
        """Where the step's tables are: ``sweep/step<k>/``."""
        return f"sweep/step{self.index}/"


def steps_of(table: np.ndarray) -> list[Step]:
    """The steps of a ``sweep/steps`` table, in step order (ValueError when it has none)."""
    if len(table) == 0:
        raise ValueError("sweep/steps has no step")
    names = [n for n in table.dtype.names if n not in STEP_COLUMNS]
    return [Step(int(r["step"]), r["label"].decode() if isinstance(r["label"], bytes) else str(r["label"]),
                 {n: int(r[n]) for n in names}) for r in np.sort(table, order="step")]


def mtu_of(step: Step, default: int) -> int:
    """The step's MTU when the sweep set one, else the run's."""
    return int(step.settings.get("mtu", default))


def stacked(parts: Sequence[tuple[Step, np.ndarray]]) -> np.ndarray:
    """Each step's table with a leading ``step`` column, one after the other (as udpmon's ``sweep/<kind>``)."""
    return np.concatenate([W.with_step(s.index, t) for s, t in parts])


def steps_table(steps: Sequence[Step]) -> np.ndarray:
    """The ``step``/``label`` rows :func:`nicrig.udpmon.sweep.curves` labels its curves with."""
    return np.array([(s.index, s.label.encode()) for s in steps], dtype=[("step", "<i4"), ("label", "S96")])


def curves(steps: Sequence[Step], table: np.ndarray, x: str, y: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One (x, y) curve per step of a stacked table, keyed by the step's settings (Hughes-Jones et al.
    2003, figures 8.1, 8.2)."""
    return W.curves(steps_table(steps), table, x, y)
