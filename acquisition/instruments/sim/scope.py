"""What every simulated instrument does, whatever SCPI dialect it speaks: settings, arming, triggering, records.

One :class:`SimScope` stands for the instrument's acquisition system. Its
sample rate is the rig wires' rate divided by a whole number; a record is
``points`` samples with ``pre`` of them before the trigger, which is the
first edge of the trigger wire (a probe-map signal, or TRIG for the external
trigger input) with at least ``pre`` samples before it. A trigger wire that
never has such an edge never triggers, as on a real instrument.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np
from nicrig.acquisition.instruments.probemap import ProbeMap, pod_bytes
from nicrig.acquisition.instruments.sim.wires import RigWires

#: The external trigger input is wired to the master's trigger output.
EXTERNAL = "TRIG"
#: Standard Event Status Register bits (IEEE 488.2 section 11.5.1): operation complete, and the error classes by
#: SCPI error code hundreds (-1xx command, -2xx execution, -3xx device-specific, -4xx query).
ESR_OPC = 1
ESR_ERROR_BITS = {1: 32, 2: 16, 3: 8, 4: 4}


#: Entries the error queue holds (SCPI asks for at least two; instruments hold 20 to 100).
ERROR_QUEUE_LENGTH = 30
#: What replaces the last entry of a full queue (SCPI-1999 volume 2 §21.8, SYSTem:ERRor).
QUEUE_OVERFLOW = (-350, "Queue overflow")


def esr_bit(code: int) -> int:
    """The Standard Event Status Register bit an error ``code`` sets (device-specific for codes outside -100..-499)."""
    return ESR_ERROR_BITS.get(abs(code) // 100, 8)


class ScpiError(Exception):
    """A SCPI error the instrument queues (``-113,"Undefined header"``) instead of answering."""

    def __init__(self, code: int, message: str):
        super().__init__(f"{code},{message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Record:
    """One acquisition: each pod's bytes, ``pre`` samples before the trigger, ``xincrement_s`` apart."""

    pods: dict[int, np.ndarray]
    pre: int
    xincrement_s: float

    @property
    def points(self) -> int:
        return len(next(iter(self.pods.values())))

    @property
    def xorigin_s(self) -> float:
        """Time of the first sample, the trigger being t = 0."""
        return -self.pre * self.xincrement_s


def find_trigger(level: np.ndarray, slope: str, first: int) -> int | None:
    """Index of the first ``slope`` edge (``rising``, ``falling``, ``either``) at or after ``first``."""
    prev, cur = level[:-1], level[1:]
    edges = {"rising": (prev == 0) & (cur == 1), "falling": (prev == 1) & (cur == 0)}
    hits = edges["rising"] | edges["falling"] if slope == "either" else edges[slope]
    idx = np.flatnonzero(hits[max(first, 1) - 1:])
    return int(idx[0]) + max(first, 1) if idx.size else None


def window(level: np.ndarray, start: int, n: int) -> np.ndarray:
    """Samples ``[start, start + n)``, the first and last values held outside the wire's span."""
    idx = np.clip(np.arange(start, start + n), 0, len(level) - 1)
    return level[idx]


class SimScope:
    """The acquisition system of a simulated instrument (thread-safe through :attr:`lock`)."""

    def __init__(self, wires: RigWires, pm: ProbeMap, *, trigger_after_s: float = 0.2):
        self.wires = wires
        self.pm = pm
        self.trigger_after_s = trigger_after_s
        self.lock = threading.RLock()
        self.errors: deque[tuple[int, str]] = deque()
        self.decimation = 1
        self.points = 1000
        self.pre_fraction = 0.1
        self.trigger_wire = pm.channels[0]
        self.trigger_slope = "falling"
        self.thresholds: dict[int, float] = {}
        self.state = "stopped"  # stopped -> armed -> done
        self.triggered_flag = False  # cleared when read (Keysight :TER?)
        self.record: Record | None = None
        self._armed_at = 0.0
        self._pending: Record | None = None
        self.opc_requested = False  # *OPC sent while an acquisition was pending
        self.esr = 0  # Standard Event Status Register
        #: Errors the instrument queues whenever it is armed (fault injection).
        self.arm_errors: list[tuple[int, str]] = []

    # -- settings -------------------------------------------------------------------------------
    @property
    def max_rate_hz(self) -> float:
        return self.wires.rate_hz

    @property
    def rate_hz(self) -> float:
        return self.max_rate_hz / self.decimation

    def set_rate(self, rate_hz: float) -> None:
        """The highest rate this instrument has at or below ``rate_hz`` (max rate / a whole number)."""
        if not math.isfinite(rate_hz) or rate_hz <= 0 or rate_hz > self.max_rate_hz * (1 + 1e-6):
            raise ScpiError(-222, "Data out of range")
        self.decimation = max(1, math.ceil(self.max_rate_hz / rate_hz - 1e-6))

    def fit_rate(self, span_s: float) -> float:
        """Sample at the highest rate that spreads :attr:`points` over at least ``span_s`` seconds; that rate."""
        self.decimation = max(1, math.ceil(self.max_rate_hz * span_s / self.points - 1e-6))
        return self.rate_hz

    def set_points(self, points: int) -> None:
        if not 100 <= points <= 50_000_000:
            raise ScpiError(-222, "Data out of range")
        self.points = int(points)

    def wire_of(self, pod: int, bit: int) -> str | None:
        """The signal on ``(pod, bit)``, None when nothing is wired there."""
        return self.pm.signals.get((pod, bit))

    def push_error(self, code: int, message: str) -> None:
        """Queue an error as SCPI-1999 volume 2 §21.8 (SYSTem:ERRor) says: first in, first out; when the
        queue is full its most recent entry is replaced by -350 "Queue overflow", and errors arriving while it
        is full are not queued (the oldest, usually the cause, are kept). The ESR bit is set either way."""
        with self.lock:
            self.esr |= esr_bit(code)
            if len(self.errors) < ERROR_QUEUE_LENGTH:
                self.errors.append((code, message))
            elif self.errors[-1][0] != QUEUE_OVERFLOW[0]:
                self.errors[-1] = QUEUE_OVERFLOW
                self.esr |= esr_bit(QUEUE_OVERFLOW[0])

    # -- acquisition ----------------------------------------------------------------------------
    def arm(self) -> None:
        """Start a single acquisition: it triggers ``trigger_after_s`` from now if the trigger wire has an edge."""
        with self.lock:
            self.state = "armed"
            self.triggered_flag = False
            self._armed_at = time.monotonic()
            self._pending = self._acquire()
            for code, message in self.arm_errors:
                self.push_error(code, message)

    def stop(self) -> None:
        with self.lock:
            self.update()
            if self.state == "armed":
                self.state = "stopped"
                self._complete_opc()

    def update(self) -> str:
        """Advance the state with the clock; return it."""
        with self.lock:
            if (self.state == "armed" and self._pending is not None
                    and time.monotonic() - self._armed_at >= self.trigger_after_s):
                self.record, self._pending = self._pending, None
                self.state = "done"
                self.triggered_flag = True
                self._complete_opc()
            return self.state

    def _complete_opc(self) -> None:
        """The acquisition is over: a pending ``*OPC`` sets the ESR's operation-complete bit."""
        if self.opc_requested:
            self.esr |= ESR_OPC
            self.opc_requested = False

    def _acquire(self) -> Record | None:
        d = self.decimation
        pre = round(self.points * self.pre_fraction)
        levels = {name: lv[::d] for name, lv in self.wires.levels.items()}
        trig_level = levels.get(self.trigger_wire)
        if trig_level is None:
            return None  # nothing wired to the trigger input: it never fires
        trig = find_trigger(trig_level, self.trigger_slope, pre)
        if trig is None:
            return None
        seen = {name: window(levels[name], trig - pre, self.points) for name in self.pm.channels}
        return Record(pods=pod_bytes(self.pm, seen, self.points), pre=pre, xincrement_s=d / self.max_rate_hz)

    def require_record(self) -> Record:
        """The last record, or the SCPI error a real instrument gives when there is none."""
        self.update()
        if self.record is None:
            raise ScpiError(-230, "Data corrupt or stale; no acquisition")
        return self.record
