"""Run the simulated rig and record it as a capture set, as the real rig's instruments would.

Sources written (docs/simulator.md):

* ``send_pci`` / ``recv_pci``: each host's PCI bus as a state-mode logic
  analyzer records it (one sample per rising clock edge, timestamps in ps),
  or in timing mode with a ``CLK`` channel when ``samples_per_clock`` is given;
* ``probe``: the GMII at host A (TX = A to B, RX = B to A), one sample per
  125 MHz clock;

plus ground truth under ``truth/``. The trigger (zero of the common
timeline) is the first FRAME# on the sending bus.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
from nicrig.acquisition.capture import CaptureSet, SourceSpec, unitsize_for
from nicrig.acquisition.sim import gmii, pci_bus
from nicrig.acquisition.sim.model import (
    GMII_PERIOD_PS,
    INTERRUPT_DTYPE,
    PACKET_DTYPE,
    BusRecord,
    Rig,
    RigRun,
    Scenario,
)
from nicrig.acquisition.sim.profiles import BusProfile, HostProfile, NicProfile

BLOCK_CLOCKS = 1 << 20
MSI_WINDOW = [0xFEE00000, 0x100000]
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Recording:
    """How the simulated instruments record: AD/C/BE#/PAR or control lines only; state or timing mode."""

    with_ad: bool = False
    samples_per_clock: int | None = None


def _clock_times(phase_ps: int, period_ps: float, clocks: np.ndarray) -> np.ndarray:
    """Times (ps) of rising edges ``clocks`` of a clock with this phase and period (as ``BusRecord.time_of``)."""
    return phase_ps + np.rint(np.asarray(clocks, dtype=np.float64) * period_ps).astype(np.int64)


def _with_columns(table: np.ndarray, **columns: np.ndarray) -> np.ndarray:
    """``table`` with extra columns appended (NumPy's recfunctions does this a row at a time)."""
    extra = [(name, np.asarray(col).dtype.str) for name, col in columns.items()]
    out = np.empty(len(table), dtype=table.dtype.descr + extra)
    for name in table.dtype.names:
        out[name] = table[name]
    for name, col in columns.items():
        out[name] = col
    return out


def _blocks(n_clocks: int) -> Iterator[tuple[int, int]]:
    """Clock ranges to render and append one at a time, so memory stays bounded for deep captures."""
    for c0 in range(0, n_clocks, BLOCK_CLOCKS):
        yield c0, min(n_clocks, c0 + BLOCK_CLOCKS)


def _write_pci(cs: CaptureSet, name: str, bus: BusRecord, run: RigRun, nic: NicProfile, host: HostProfile,
               rec: Recording, progress: Progress | None) -> None:
    prof = bus.profile
    n_clocks = bus.clock_at_or_after(run.end_ps)
    irqs = [(a, b if b >= 0 else n_clocks) for a, b in bus.interrupts]
    renderer = pci_bus.PciRenderer(bus.transactions, width_bits=prof.width_bits, with_ad=rec.with_ad,
                                   interrupts=irqs)
    timing = rec.samples_per_clock is not None
    channels = pci_bus.channels_for(prof.width_bits, rec.with_ad, timing)
    roles = pci_bus.roles_for(prof.width_bits, rec.with_ad, timing)
    meta = {
        "kind": prof.kind,
        "profile": prof.name,
        "width_bits": prof.width_bits,
        "clock_hz": prof.clock_hz,
        "bars": [list(nic.bar0)],
        "msi_window": MSI_WINDOW,
        "device": nic.vendor_device,
        "nic": nic.name,
        "host": host.name,
    }
    trig_clk = bus.clock_at_or_after(run.trigger_ps)
    if timing:
        k = int(rec.samples_per_clock)  # type: ignore[arg-type]
        rate = prof.clock_hz * k
        # Sample j of the timing capture lies at phase + j/k clock periods.
        trig_sample = trig_clk * k
        offset = bus.time_of(trig_clk) - run.trigger_ps
        spec = SourceSpec(name, channels, "timing", samplerate_hz=rate, trigger_sample=trig_sample,
                          offset_ps=offset, bus=meta, roles=roles,
                          instrument={"model": "nicrig simulated logic analyzer", "mode": "timing",
                                      "samples_per_clock": k})
        w = cs.add_source(spec)
        for c0, c1 in _blocks(n_clocks):
            w.append(renderer.render(c0, c1, samples_per_clock=k))
            if progress:
                progress(name, c1, n_clocks)
    else:
        offset = bus.time_of(trig_clk) - run.trigger_ps
        spec = SourceSpec(name, channels, "state", samplerate_hz=prof.clock_hz, trigger_sample=trig_clk,
                          offset_ps=offset, bus=meta, roles=roles,
                          instrument={"model": "nicrig simulated logic analyzer", "mode": "state",
                                      "clock": "PCI CLK rising edge"})
        w = cs.add_source(spec)
        for c0, c1 in _blocks(n_clocks):
            w.append(renderer.render(c0, c1), _clock_times(bus.phase_ps, prof.period_ps, np.arange(c0, c1)))
            if progress:
                progress(name, c1, n_clocks)
    truth = renderer.truth()
    table = _with_columns(
        truth,
        t_start_ps=_clock_times(bus.phase_ps, prof.period_ps, truth["ss"]) - run.trigger_ps,
        t_end_ps=_clock_times(bus.phase_ps, prof.period_ps, truth["es"]) - run.trigger_ps,
        purpose=np.array(bus.purposes, dtype="S20")[np.argsort([t.start_clk for t in bus.transactions],
                                                               kind="stable")],
    )
    cs.write_table(f"truth/{name}/transactions", table,
                   units={"ss": "clock", "es": "clock", "t_start_ps": "ps", "t_end_ps": "ps", "bytes": "byte"},
                   description=f"every PCI transaction the model put on {name}, in bus order")
    clocks = np.array(irqs, dtype=np.int64).reshape(-1, 2)
    irq = np.zeros(len(clocks), dtype=[("ss", "<i8"), ("es", "<i8"), ("t_assert_ps", "<i8"), ("t_deassert_ps", "<i8")])
    irq["ss"], irq["es"] = clocks[:, 0], clocks[:, 1]
    irq["t_assert_ps"] = _clock_times(bus.phase_ps, prof.period_ps, irq["ss"]) - run.trigger_ps
    irq["t_deassert_ps"] = _clock_times(bus.phase_ps, prof.period_ps, irq["es"]) - run.trigger_ps
    cs.write_table(f"truth/{name}/interrupts", irq, units={"t_assert_ps": "ps", "t_deassert_ps": "ps"},
                   description=f"INTA# low intervals on {name}")


#: The probe's channels: the GMII at host A, and a frame-presence wire for A to B
#: like seed 002's Gigabit Ethernet probe card (figure 4.3's bottom traces).
PROBE_CHANNELS = [*gmii.CHANNELS, "LINK_ACT"]
_LINK_ACT_BIT, _TX_EN_BIT = PROBE_CHANNELS.index("LINK_ACT"), PROBE_CHANNELS.index("TX_EN")


def _with_link_activity(block: np.ndarray) -> np.ndarray:
    """GMII samples with LINK_ACT added: high while A's frame (preamble to FCS) is on the medium."""
    out = np.zeros((len(block), unitsize_for(len(PROBE_CHANNELS))), dtype=np.uint8)
    out[:, :block.shape[1]] = block
    tx_en = (block[:, _TX_EN_BIT // 8] >> (_TX_EN_BIT % 8)) & 1
    out[:, _LINK_ACT_BIT // 8] |= tx_en << (_LINK_ACT_BIT % 8)
    return out


def _write_probe(cs: CaptureSet, run: RigRun, progress: Progress | None) -> None:
    n_clocks = max(1, math.ceil((run.end_ps - run.probe_phase_ps) / GMII_PERIOD_PS))
    renderer = gmii.GmiiRenderer(run.probe_tx, run.probe_rx)
    trig = max(0, math.ceil((run.trigger_ps - run.probe_phase_ps) / GMII_PERIOD_PS))
    offset = run.probe_phase_ps + trig * GMII_PERIOD_PS - run.trigger_ps
    spec = SourceSpec("probe", PROBE_CHANNELS, "state", samplerate_hz=125e6, trigger_sample=trig,
                      offset_ps=offset, bus={"kind": "gmii", "link_rate_bps": 1e9, "at": "host A (send)"},
                      roles={**gmii.ROLES, "act": "LINK_ACT"},
                      instrument={"model": "nicrig simulated GMII probe", "mode": "state",
                                  "clock": "125 MHz GTX_CLK"})
    w = cs.add_source(spec)
    for c0, c1 in _blocks(n_clocks):
        w.append(_with_link_activity(renderer.render(c0, c1)),
                 _clock_times(run.probe_phase_ps, GMII_PERIOD_PS, np.arange(c0, c1)))
        if progress:
            progress("probe", c1, n_clocks)
    truth = renderer.truth()
    table = _with_columns(
        truth,
        t_start_ps=_clock_times(run.probe_phase_ps, GMII_PERIOD_PS, truth["ss"]) - run.trigger_ps,
        t_end_ps=_clock_times(run.probe_phase_ps, GMII_PERIOD_PS, truth["es"]) - run.trigger_ps,
    )
    cs.write_table("truth/probe/frames", table, units={"ss": "clock", "es": "clock", "t_start_ps": "ps",
                                                       "t_end_ps": "ps", "length": "byte"},
                   description="every frame on the link at host A's GMII, both directions")


def _packets_table(run: RigRun) -> np.ndarray:
    rows = np.array(run.packets, dtype=PACKET_DTYPE)
    for col in ("t_app_send_ps", "t_wire_start_ps", "t_app_recv_ps"):
        known = rows[col] >= 0
        rows[col][known] -= run.trigger_ps
    return rows


def simulate(scenario: Scenario, bus: BusProfile, nic: NicProfile, host: HostProfile, out: str | os.PathLike[str],
             recording: Recording = Recording(), progress: Progress | None = None) -> RigRun:
    """Simulate ``scenario`` and write the capture set ``out`` atomically; return the model's run."""
    with CaptureSet.create(out, notes=f"simulated {scenario.kind} scenario, {nic.name} on {bus.name}") as cs:
        run = Rig(scenario, bus, nic, host).run()
        for name, record in run.buses.items():
            _write_pci(cs, name, record, run, nic, host, recording, progress)
        _write_probe(cs, run, progress)
        cs.write_table("truth/packets", _packets_table(run),
                       units={"t_app_send_ps": "ps", "t_wire_start_ps": "ps", "t_app_recv_ps": "ps",
                              "size_bytes": "byte"},
                       description="every UDP message the applications sent; -1 = never (lost)")
        irq = np.array(run.interrupts, dtype=INTERRUPT_DTYPE)
        for col in ("t_assert_ps", "t_deassert_ps"):
            irq[col][irq[col] >= 0] -= run.trigger_ps
        cs.write_table("truth/interrupts", irq, units={"t_assert_ps": "ps", "t_deassert_ps": "ps"},
                       description="interrupts of both hosts with the frames each service handled")
        cs.attrs["simulation"] = json.dumps({
            "scenario": asdict(scenario), "bus": asdict(run.buses["send_pci"].profile), "nic": asdict(nic),
            "host": asdict(host),
            "recording": asdict(recording), "counters": run.counters,
        }, sort_keys=True)
    return run
