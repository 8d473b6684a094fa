"""How finely each kind of nicrig data resolves time: the step a Type B uncertainty is made from.

A time stamp read from a clock is quantised to the clock's step; its error is
rectangular, with standard uncertainty step / sqrt(12) (GUM §F.2.2.1). Where a
measured time is the sum of several such waits (a simulated round trip waits
for a bus clock edge each time it crosses a host's bus), the variances add:
the time is resolved as one rectangular step of sqrt(sum of the steps'
squares), the *equivalent step* :class:`Resolution` holds.

* a udpmon results file: whole nanoseconds (1 ns), the engine's CLOCK_MONOTONIC
  read in ns;
* a simulated results file: the simulated rig's clocks. A request-response
  round trip crosses the two hosts' buses four times (the request out of one
  and into the other, the response back) and the wire twice; one datagram of
  a stream crosses each bus once and the wire once;
* a capture: the sample clock of each source (one sample per bus clock in
  state mode); a time between two events is two stamps, each read to its
  source's step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nicrig.analysis.quantity import number

#: A results file stores times in whole nanoseconds.
RESULTS_FILE_NS = 1.0
#: The simulated link's GMII clock: 125 MHz, a frame starts on one of its edges.
SIM_GMII_NS = 8.0
#: Bus and wire crossings of the measured time per kind of simulated run: (bus crossings, wire crossings).
SIM_CROSSINGS = {"latency": (4, 2), "stream": (2, 1)}


@dataclass(frozen=True)
class Resolution:
    """The equivalent step (ns) a measured time is resolved to, and where it comes from, in words."""

    step_ns: float
    text: str


def combined(steps_ns: list[float]) -> float:
    """The equivalent step of a sum of independently quantised times: sqrt of the sum of their squares."""
    return math.sqrt(sum(s * s for s in steps_ns))


def results(simulation: Mapping[str, Any] | None, kind: str) -> Resolution:
    """The resolution of a results file's times: 1 ns for a run between real hosts; for a simulated run the
    rig's bus and wire clocks the measured time crosses (the ``bus`` profile its ``simulation`` attribute names)."""
    if not simulation:
        return Resolution(RESULTS_FILE_NS, "the results file's 1 ns")
    from nicrig.acquisition.sim import profiles
    from nicrig.errors import NicrigError

    name = str(simulation.get("bus", ""))
    try:
        period_ns = 1e9 / profiles.load("bus", name).clock_hz
    except NicrigError:
        return Resolution(RESULTS_FILE_NS, f"the results file's 1 ns (the simulated bus {name!r} is not known here)")
    buses, wires = SIM_CROSSINGS.get(kind, (1, 0))
    step = max(combined([period_ns] * buses + [SIM_GMII_NS] * wires), RESULTS_FILE_NS)
    return Resolution(step, f"{number(step, decimals=0)} ns: {buses} crossings of the simulated "
                            f"{number(period_ns, decimals=0)} ns bus clock and {wires} of the "
                            f"{number(SIM_GMII_NS, decimals=0)} ns wire clock, each waiting for an edge")


def capture(periods_ns: list[float]) -> Resolution:
    """The resolution of a time between two events of capture sources sampled every ``periods_ns`` (one
    period per event: two events of one source, or one of each of two)."""
    step = combined(periods_ns)
    said = " and ".join(f"{number(p, decimals=0 if p >= 1 else 3)} ns" for p in periods_ns)
    return Resolution(step, f"{number(step, decimals=0 if step >= 1 else 3)} ns: two time stamps read to "
                            f"the sample clocks of {said}")
