"""The simulated rig's wires, as one instrument's probes see them.

The simulated instrument records one source of the simulated rig
(``send_pci``, ``recv_pci`` or ``probe``, docs/simulator.md): the rig is
simulated once, the source is rendered in timing mode at ``samples_per_clock``
samples per bus clock (the state-mode GMII probe is stretched to that rate with
a ``GTX_CLK`` wire), and two lab wires are added:

* ``TRIG``: the master instrument's trigger output, high for 1 us from the
  rig's trigger (the first FRAME# on the sending bus, t = 0), arriving
  ``trigger_delay_ps`` late (cable and trigger-path delay). Slaves trigger on
  it, and a scope's external trigger input is wired to it.
* ``REF``: a reference edge every instrument sees at the same instant,
  ``ref_delay_ps`` after the trigger, undelayed: the deskew calibration lines
  the instruments up on it.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from nicrig.acquisition.capture import CaptureSet, unpack_bits
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.model import Scenario
from nicrig.acquisition.sim.rig import Recording, simulate

from nicrig.errors import UsageError

#: Width of the master's trigger-output pulse on the TRIG wire (ps).
TRIG_PULSE_PS = 1_000_000
LAB_WIRES = ("TRIG", "REF")


@dataclass(frozen=True)
class RigWires:
    """Every wire of one rig source at ``rate_hz``; ``times_ps[i]`` is sample ``i`` on the rig's timeline."""

    source: str
    rate_hz: float
    levels: dict[str, np.ndarray]
    times_ps: np.ndarray

    @property
    def samples(self) -> int:
        return len(self.times_ps)


def stretch_state(packed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """State-mode samples shown at ``k`` samples per clock, with a clock wire; ``(samples, clock)``.

    The convention of the PCI renderer's timing mode: clock ``c``'s edge is
    sample ``c*k``, the state sampled at it is shown on samples ``(c-1)*k+1 .. c*k``,
    and the clock is high on the first ``k // 2`` samples from each edge.
    """
    s = np.arange(len(packed) * k, dtype=np.int64)
    state = np.minimum((s + k - 1) // k, len(packed) - 1)
    return packed[state], (s % k < k // 2).astype(np.uint8)


def delayed(level: np.ndarray, shift: int) -> np.ndarray:
    """``level`` seen ``shift`` samples late (early when negative); beyond the ends the end values hold."""
    if shift == 0 or len(level) == 0:
        return level
    idx = np.clip(np.arange(len(level)) - shift, 0, len(level) - 1)
    return level[idx]


def lab_wires(times_ps: np.ndarray, rate_hz: float, trigger_delay_ps: int, ref_delay_ps: int) -> dict[str, np.ndarray]:
    """TRIG (the master's trigger-out pulse, ``trigger_delay_ps`` late) and REF (a step) on the rig's timeline."""
    trig = ((times_ps >= 0) & (times_ps < TRIG_PULSE_PS)).astype(np.uint8)
    shift = round(trigger_delay_ps * rate_hz / 1e12)
    return {"TRIG": delayed(trig, shift), "REF": (times_ps >= ref_delay_ps).astype(np.uint8)}


def render(source: str, scenario: Scenario, *, bus: str = "pci64-66", nic: str = "intel-pro1000",
           host: str = "supermicro-370dle", samples_per_clock: int = 4, with_ad: bool = False,
           trigger_delay_ps: int = 0, ref_delay_ps: int = 2_000_000) -> RigWires:
    """Simulate the rig and return ``source``'s wires plus TRIG and REF (see the module docstring)."""
    if not 2 <= samples_per_clock <= 64:
        raise UsageError("samples per clock must be 2 to 64")
    with tempfile.TemporaryDirectory(prefix="nicrig-siminstr-") as tmp:
        path = Path(tmp) / "rig.h5"
        # workers=1: the instrument server calls this from a handler thread; a fork beside live threads is
        # what forked workers avoid (acquisition/sim/forked.py), and a short record gains little from them.
        simulate(scenario, profiles.load("bus", bus), profiles.load("nic", nic), profiles.load("host", host), path,
                 Recording(with_ad=with_ad, samples_per_clock=samples_per_clock), workers=1)
        with CaptureSet.open(path) as cs:
            if source not in cs.source_names:
                raise UsageError(f"the simulated rig has no source {source!r} (sources: {', '.join(cs.source_names)})")
            src = cs.source(source)
            packed = src.read_packed()
            channels = list(src.channels)
            t0 = int(src.times_ps(0, 1)[0])
            if src.mode == "state":
                packed, clock = stretch_state(packed, samples_per_clock)
                rate = float(src.samplerate_hz) * samples_per_clock  # type: ignore[operator]
            else:
                clock, rate = None, float(src.samplerate_hz)  # type: ignore[arg-type]
    bits = unpack_bits(packed, len(channels))
    levels = {name: np.ascontiguousarray(bits[:, k]) for k, name in enumerate(channels)}
    if clock is not None:
        levels["GTX_CLK"] = clock
    times = t0 + np.rint(np.arange(len(packed), dtype=np.float64) * (1e12 / rate)).astype(np.int64)
    levels.update(lab_wires(times, rate, trigger_delay_ps, ref_delay_ps))
    return RigWires(source=source, rate_hz=rate, levels=levels, times_ps=times)
