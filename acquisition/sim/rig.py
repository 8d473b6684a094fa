"""Run the simulated rig and record it as a capture set, as the real rig's instruments would.

Sources written (docs/simulator.md):

* ``send_pci`` / ``recv_pci``: each host's PCI bus as a state-mode logic
  analyzer records it (one sample per rising clock edge, timestamps in ps),
  or in timing mode with a ``CLK`` channel when ``samples_per_clock`` is given;
* ``probe``: the GMII at host A (TX = A to B, RX = B to A), one sample per
  125 MHz clock;

plus ground truth under ``truth/``, and the applications' own measurements
as udpmon results in the group ``results/`` (:mod:`nicrig.acquisition.sim.application`).
The trigger (zero of the common timeline) is the first FRAME# on the sending
bus. The instruments record the whole run, or, as a logic analyzer whose
memory fills, only the exchanges of the run's first ``Recording.messages``
messages (the results always cover every message).
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace

import numpy as np
from nicrig.acquisition.capture import CaptureSet, SourceSpec, unitsize_for
from nicrig.acquisition.sim import application, gmii, pci_bus
from nicrig.acquisition.sim.ethernet import frame_time_on_wire_ns
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
from nicrig.udpmon.results import RESULTS_GROUP, ResultsFile

BLOCK_CLOCKS = 1 << 20
#: The recording runs on this long after the last exchange it holds (us), as after the run's end.
TAIL_US = 20.0
#: A recording that stops early stops at least this long after the end of every transaction and frame it holds
#: (ns): a few clocks of idle bus, so that the decoders see each one end.
STOP_MARGIN_NS = 200
MSI_WINDOW = [0xFEE00000, 0x100000]
Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class Recording:
    """How the simulated instruments record: AD/C/BE#/PAR or control lines only; state or timing mode; the
    exchanges of the first ``messages`` messages host A's application sent (stream datagrams or requests), or the
    whole run (0)."""

    with_ad: bool = False
    samples_per_clock: int | None = None
    messages: int = 0


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


def source_clocks(run: RigRun, name: str) -> int:
    """Clocks (samples in state mode) that source ``name`` (``send_pci``, ``recv_pci``, ``probe``) records."""
    if name == "probe":
        return max(1, math.ceil((run.end_ps - run.probe_phase_ps) / GMII_PERIOD_PS))
    return run.buses[name].clock_at_or_after(run.end_ps)


def _write_pci(cs: CaptureSet, name: str, bus: BusRecord, run: RigRun, nic: NicProfile, host: HostProfile,
               rec: Recording, progress: Progress | None) -> None:
    prof = bus.profile
    n_clocks = source_clocks(run, name)
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
    n_clocks = source_clocks(run, "probe")
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


@dataclass(frozen=True)
class _Sources:
    """What the instruments recorded of a run, and how: everything rendering a source needs."""

    run: RigRun
    nic: NicProfile
    host: HostProfile
    recording: Recording

    @property
    def names(self) -> list[str]:
        return [*self.run.buses, "probe"]

    def write(self, cs: CaptureSet, name: str, progress: Progress | None) -> None:
        """Render source ``name`` into ``cs``, with its ground truth (``truth/<name>/``)."""
        if name == "probe":
            _write_probe(cs, self.run, progress)
        else:
            _write_pci(cs, name, self.run.buses[name], self.run, self.nic, self.host, self.recording, progress)


def _write_sources(cs: CaptureSet, sources: _Sources, workers: int | None, progress: Progress | None) -> None:
    """Render every source of ``sources`` into ``cs``, on threads of their own when there are CPUs for them.

    NumPy's array operations and HDF5's filters (checksum, shuffle, deflate: h5py lets go of the GIL while
    HDF5 runs, though it lets one thread into HDF5 at a time) do not need the interpreter, so one source
    renders while another is compressed. ``workers`` threads (default: one per source given two usable
    CPUs; 1: one after the other here) write the same samples, timestamps and tables either way.
    """
    names = sources.names
    workers = (len(names) if _usable_cpus() >= 2 else 1) if workers is None else min(len(names), workers)
    if workers < 2:
        for name in names:
            sources.write(cs, name, progress)
        return
    cs.group("truth", create=True)  # made here: threads making it at once would race
    stop = threading.Event()

    def progress_unless_stopped(name: str, done: int, total: int) -> None:
        """Called after every block: where a thread gives up once another failed or the user interrupted."""
        if stop.is_set():
            raise _Stopped
        if progress:
            progress(name, done, total)

    with ThreadPoolExecutor(workers, thread_name_prefix="nicrig-source") as pool:
        try:
            for done in [pool.submit(sources.write, cs, name, progress_unless_stopped) for name in names]:
                done.result()
        except BaseException:
            stop.set()  # the other threads stop after their current block instead of rendering to the end
            raise


class _Stopped(Exception):
    """A source's thread stops: another failed, or the user interrupted (the error that says so is theirs)."""


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _transaction_spans_ps(bus: BusRecord) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (ps, the clock after the last busy one) of every transaction on ``bus``."""
    width = bus.profile.width_bits
    start = np.array([t.start_clk for t in bus.transactions], dtype=np.int64)
    end = start + np.array([pci_bus.busy_clocks(t, width) for t in bus.transactions], dtype=np.int64)
    return (_clock_times(bus.phase_ps, bus.profile.period_ps, start),
            _clock_times(bus.phase_ps, bus.profile.period_ps, end))


def quiet_instant_ps(spans: Sequence[tuple[np.ndarray, np.ndarray]], t_ps: int, margin_ps: int) -> int:
    """The first instant at or after ``t_ps`` at least ``margin_ps`` after the end of every one of ``spans``
    (starts, ends) begun before it: where an instrument can stop without cutting a transaction or a frame."""
    moved = True
    while moved:
        moved = False
        for start, stop in spans:
            end = stop + margin_ps
            inside = (start < t_ps) & (end > t_ps)
            if inside.any():
                t_ps, moved = int(end[inside].max()), True
    return t_ps


def recorded_part(run: RigRun, messages: int, link_rate_bps: float = application.LINK_RATE_BPS) -> RigRun:
    """What instruments that stop after the first ``messages`` exchanges recorded of ``run`` (all of it for 0).

    The recording ends :data:`TAIL_US` after the last of those exchanges
    (its response received, or its datagram received or sent), or where the
    next message's application sends it if that comes first (but not before
    the last exchange has ended: a stream's backlog may still be in flight),
    at the first instant no transaction and no frame is in progress;
    everything that started before stays, everything after goes, and an
    interrupt still pending stays asserted to the end.
    """
    packets = np.array(run.packets, dtype=PACKET_DTYPE)
    first = np.sort(packets["seq"][np.isin(packets["kind"], (b"stream", b"request"))])
    if messages <= 0 or messages >= first.size:
        return run
    mine = packets[np.isin(packets["seq"], first[:messages])]
    last = int(max(mine["t_app_send_ps"].max(), mine["t_app_recv_ps"].max()))
    following = int(packets["t_app_send_ps"][packets["seq"] == first[messages]].min())
    stop = max(last, min(last + round(TAIL_US * 1e6), following))
    spans = [_transaction_spans_ps(b) for b in run.buses.values()]
    for frames in (run.probe_tx, run.probe_rx):
        start = run.probe_phase_ps + np.array([clk for clk, _ in frames], dtype=np.int64) * GMII_PERIOD_PS
        on_wire = np.array([round(frame_time_on_wire_ns(len(f.data), link_rate_bps) * 1000) for _, f in frames],
                           dtype=np.int64)
        spans.append((start, start + on_wire))
    end = quiet_instant_ps(spans, stop, STOP_MARGIN_NS * 1000)
    buses = {}
    for name, bus in run.buses.items():
        keep = [bus.time_of(t.start_clk) < end for t in bus.transactions]
        clk = bus.clock_at_or_after(end)
        buses[name] = replace(bus, transactions=[t for t, k in zip(bus.transactions, keep) if k],
                              purposes=[p for p, k in zip(bus.purposes, keep) if k],
                              interrupts=[[a, b if 0 <= b < clk else -1] for a, b in bus.interrupts if a < clk])

    def before(frames: list) -> list:
        return [(clk, f) for clk, f in frames if run.probe_phase_ps + clk * GMII_PERIOD_PS < end]

    return replace(run, buses=buses, probe_tx=before(run.probe_tx), probe_rx=before(run.probe_rx),
                   interrupts=[(h, a, d if 0 <= d < end else -1, rx, tx)
                               for h, a, d, rx, tx in run.interrupts if a < end], end_ps=end)


def _packets_table(run: RigRun) -> np.ndarray:
    rows = np.array(run.packets, dtype=PACKET_DTYPE)
    for col in ("t_app_send_ps", "t_wire_start_ps", "t_app_recv_ps"):
        known = rows[col] >= 0
        rows[col][known] -= run.trigger_ps
    return rows


def simulate(scenario: Scenario, bus: BusProfile, nic: NicProfile, host: HostProfile, out: str | os.PathLike[str],
             recording: Recording = Recording(), progress: Progress | None = None, *,
             settings: Mapping[str, Any] | None = None, argv: Sequence[str] | None = None,
             workers: int | None = None) -> RigRun:
    """Simulate ``scenario`` and write the capture set ``out`` atomically; return the model's run.

    ``settings`` (what the command line asked, beyond the scenario) and ``argv``
    go into the results' root attributes (``docs/formats.md``). ``workers``:
    threads rendering the sources at once (default: one per source on a
    machine with two CPUs or more; 1: one after the other; the capture set
    is the same).
    """
    with CaptureSet.create(out, notes=f"simulated {scenario.kind} scenario, {nic.name} on {bus.name}") as cs:
        run = Rig(scenario, bus, nic, host).run()
        recorded = recorded_part(run, recording.messages)
        _write_sources(cs, _Sources(recorded, nic, host, recording), workers, progress)
        cs.write_table("truth/packets", _packets_table(run),
                       units={"t_app_send_ps": "ps", "t_wire_start_ps": "ps", "t_app_recv_ps": "ps",
                              "size_bytes": "byte"},
                       description="every UDP message the applications sent; -1 = never (lost)")
        irq = np.array(recorded.interrupts, dtype=INTERRUPT_DTYPE)
        for col in ("t_assert_ps", "t_deassert_ps"):
            irq[col][irq[col] >= 0] -= run.trigger_ps
        cs.write_table("truth/interrupts", irq, units={"t_assert_ps": "ps", "t_deassert_ps": "ps"},
                       description="interrupts of both hosts with the frames each service handled")
        cs.attrs["simulation"] = json.dumps({
            "scenario": asdict(scenario), "bus": asdict(run.buses["send_pci"].profile), "nic": asdict(nic),
            "host": asdict(host),
            "recording": asdict(recording), "counters": run.counters,
        }, sort_keys=True)
        rf = cs.nested(ResultsFile, RESULTS_GROUP, create=True,
                       notes=f"the applications' measurements of this simulated {scenario.kind} run")
        application.write_results(
            rf, run, scenario, settings=application.settings_of(scenario, **(settings or {})),
            argv=list(sys.argv if argv is None else argv),
            simulation={"nic": nic.name, "bus": bus.name, "host": host.name,
                        "timeline": {"trigger_ns": run.trigger_ps / 1000,
                                     "recorded_until_ns": recorded.end_ps / 1000}})
    return run
