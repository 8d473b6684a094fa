"""Simulated SCPI instruments for tests: real TCP servers on 127.0.0.1, driven through PyVISA + pyvisa-py.

    with serve("rigol-mso5000") as srv:            # a server thread on a free port
        outcome = acquire_one(srv, tmp / "x.h5", record_length=10_000)

The rig is simulated once per (source, count) and shared: a short stream, the
first message 30 us in, so records of a few thousand samples have room for
their pre-trigger part.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import pyvisa
from nicrig.acquisition.instruments import probemap, rigconfig, session
from nicrig.acquisition.instruments.sim import wires as simwires
from nicrig.acquisition.instruments.sim.models import make_server
from nicrig.acquisition.instruments.sim.server import SimServer, parse_fault
from nicrig.acquisition.sim.model import Scenario

SCENARIO = Scenario(kind="stream", size_bytes=1400, count=8, spacing_us=15.0, start_us=30.0)
PROBE_MAPS = {"send_pci": "pci-control", "recv_pci": "pci-control", "probe": "gmii-probe"}


@functools.cache
def rig_wires(source: str = "send_pci", trigger_delay_ps: int = 0) -> simwires.RigWires:
    return simwires.render(source, SCENARIO, samples_per_clock=4, trigger_delay_ps=trigger_delay_ps)


@contextmanager
def serve(model: str, source: str = "send_pci", *, faults: Sequence[str] = (), trigger_after_s: float = 0.05,
          trigger_delay_ps: int = 0, probe_map: str | None = None, **bounds: Any) -> Iterator[SimServer]:
    """A simulated ``model`` serving on a free port; ``bounds``: ``max_connections``, ``idle_timeout_s``."""
    pm = probemap.load(probe_map or PROBE_MAPS[source])
    srv = make_server(model, rig_wires(source, trigger_delay_ps), pm, faults=[parse_fault(f) for f in faults],
                      trigger_after_s=trigger_after_s, **bounds).start()
    try:
        yield srv
    finally:
        srv.close()


def config(srv: SimServer, source: str = "send_pci", **kw: Any) -> rigconfig.InstrumentConfig:
    values: dict[str, Any] = {"source": source, "resource": srv.resource, "probe_map": PROBE_MAPS[source],
                              "sample_rate_hz": srv.dialect.scope.max_rate_hz, "record_length": 10_000,
                              "trigger": rigconfig.parse_trigger("FRAME#"), "batch_points": 4_000,
                              "io_timeout_s": 2.0}
    values.update(kw)
    return rigconfig.InstrumentConfig(**values)


def member(cfg: rigconfig.InstrumentConfig) -> session.Member:
    inst, settings = rigconfig.open_instrument(cfg)
    return session.Member(inst, settings, offset_ps=cfg.offset_ps, bus=cfg.bus)


def acquire_one(srv: SimServer, out: Path, *, timeout_s: float = 5.0, **kw: Any) -> session.Outcome:
    m = member(config(srv, **kw))
    session.prepare([m])
    return session.run([m], out, timeout_s=timeout_s)


def first_edge(level: np.ndarray, falling: bool, at_or_after: int) -> int:
    """Index of the first falling (or rising) edge at or after ``at_or_after`` (test's own arithmetic)."""
    before, after = (1, 0) if falling else (0, 1)
    edges = np.flatnonzero((level[:-1] == before) & (level[1:] == after)) + 1
    return int(edges[edges >= at_or_after][0])


@pytest.fixture
def visa():
    """``visa(srv)``: the simulator opened through plain PyVISA + pyvisa-py (a SOCKET resource), closed after."""
    rm = pyvisa.ResourceManager("@py")
    opened = []

    def open_(srv: SimServer, timeout_ms: int = 3000) -> Any:
        res = rm.open_resource(srv.resource, read_termination="\n", write_termination="\n", timeout=timeout_ms)
        opened.append(res)
        return res
    yield open_
    for res in opened:
        res.close()
    rm.close()
