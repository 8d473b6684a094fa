"""The simulated instruments by model name, and building one."""

from __future__ import annotations

from collections.abc import Sequence

from nicrig.acquisition.instruments.probemap import ProbeMap
from nicrig.acquisition.instruments.sim.keysight import KeysightX3000, KeysightX4000
from nicrig.acquisition.instruments.sim.rigol import RigolMso5000
from nicrig.acquisition.instruments.sim.scope import SimScope
from nicrig.acquisition.instruments.sim.server import (
    IDLE_TIMEOUT_S,
    MAX_CONNECTIONS,
    Dialect,
    Fault,
    SimServer,
)
from nicrig.acquisition.instruments.sim.tektronix import (
    TektronixMso4,
    TektronixMso5,
    TektronixMso6,
)
from nicrig.acquisition.instruments.sim.wires import RigWires

from nicrig.errors import UsageError

MODELS: dict[str, type[Dialect]] = {
    cls.model: cls for cls in (KeysightX4000, KeysightX3000, RigolMso5000, TektronixMso4, TektronixMso5, TektronixMso6)
}


def make_server(model: str, wires: RigWires, pm: ProbeMap, *, host: str = "127.0.0.1", port: int = 0,
                faults: Sequence[Fault] = (), trigger_after_s: float = 0.2, max_connections: int = MAX_CONNECTIONS,
                idle_timeout_s: float = IDLE_TIMEOUT_S) -> SimServer:
    """A simulated ``model`` whose probes, wired as ``pm`` says, see ``wires``; listening, not yet serving."""
    if model not in MODELS:
        raise UsageError(f"unknown simulated model {model!r} (choose from: {', '.join(MODELS)})")
    absent = [s for s in pm.channels if s not in wires.levels]
    if absent:
        raise UsageError(f"probe map {pm.name!r} wires {', '.join(absent)}, which the simulated source "
                         f"{wires.source!r} does not have (it has: {', '.join(sorted(wires.levels))})")
    scope = SimScope(wires, pm, trigger_after_s=trigger_after_s)
    return SimServer(MODELS[model](scope), host, port, faults, max_connections=max_connections,
                     idle_timeout_s=idle_timeout_s)
