"""The measurements panel: bus-level timing of the range between the cursors, from ``nicrig.analysis.bus``,
and the host probe's kernel-event figures of each traced host there, from ``nicrig.analysis.hostprobe``.

The arithmetic (CSR setup, DMA duration, send bus -> wire -> receive bus
propagation, PAUSE gaps, interrupt latency) belongs to the analysis package;
this panel only cuts the decoded tables to the range (with the session's
deskew applied, so what is measured is what is shown), runs the analysis in a
background job and lists the results. Each result with a time span can be
put on the timeline as a named marker.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from nicrig.analysis import bus, nic_registers
from nicrig.analysis.quantity import K95, measured, number, places, rectangular, resolved
from nicrig.gui.background import Job
from nicrig.gui.lanes import STYLE_NAMES, Boxes, format_ns
from nicrig.gui.sizing import fit_columns
from PySide6 import QtWidgets

from nicrig.errors import UsageError

if TYPE_CHECKING:
    from nicrig.acquisition.hostprobe.events import HostTrace
    from nicrig.gui.app import MainWindow


@dataclass(frozen=True)
class Measurement:
    """One line of the panel: what, its value as text, and the span (ns) it measured on ``source``'s lanes."""

    name: str
    value: str
    t0_ns: float | None = None
    t1_ns: float | None = None
    source: str = ""
    label: str = ""  # the phase's name on the timeline ("" = not drawn as a phase)


@dataclass(frozen=True)
class Rig:
    """Which sources play which part: sending bus, receiving bus, link probe (None when absent)."""

    send: str | None
    recv: str | None
    probe: str | None


def rig_roles(sources: list[str], tables: dict[str, np.ndarray]) -> Rig:
    """The sending and receiving buses (first and last PCI source in the timeline's order) and the probe."""
    pci = [s for s in sources if f"{s}/pci" in tables]
    probe = next((s for s in sources if f"{s}/ethernet" in tables), None)
    return Rig(pci[0] if pci else None, pci[-1] if len(pci) > 1 else None, probe)


def tables_in_range(tables: dict[str, np.ndarray], t0_ns: float, t1_ns: float) -> dict[str, np.ndarray]:
    """Rows of each decoded table that overlap ``[t0_ns, t1_ns]`` (tables keyed ``source/decoder``)."""
    return {name: table[(table["t_end_ns"] >= t0_ns) & (table["t_ns"] <= t1_ns)] for name, table in tables.items()}


def clock_step_us(periods_ns: dict[str, float] | None, *sources: str) -> float | None:
    """The resolution (us) of a time between an event of ``sources[0]`` and one of ``sources[-1]``, each stamped
    to its source's sample clock in ``periods_ns`` (:func:`nicrig.analysis.resolution.capture`); None when a
    clock is not known."""
    from nicrig.analysis import resolution

    periods = [(periods_ns or {}).get(s) for s in (sources[0], sources[-1])] if sources else [None]
    if any(p is None or not p > 0 for p in periods):
        return None
    return resolution.capture(periods).step_ns / 1000


def _time(v_us: float, step_us: float | None, unit: str = "us") -> str:
    """One time read from two time stamps: to the capture's resolution ``step_us`` (a rectangular Type B
    component, GUM §F.2.2.1), four significant digits where no clock is known."""
    if step_us is None:
        return f"{number(v_us)} {unit}"
    return measured(v_us, K95 * rectangular(step_us), unit, step=step_us)


def _span(name: str, a: float, b: float, source: str, label: str = "", step_us: float | None = None
          ) -> Measurement:
    ok = math.isfinite(a) and math.isfinite(b)
    text = (format_ns(b - a) if step_us is None else _time((b - a) / 1000, step_us)) if ok else "not found"
    return Measurement(name, text, a if ok else None, b if ok else None, source, label if ok else "")


def _spread(name: str, sp: bus.Spread, unit: str = "us", counts: bool = False, step_us: float | None = None
            ) -> Measurement | None:
    """A median with its range; ``counts``: whole numbers (a median of two may end in .5), shown without decimals.
    Times: the median with its 95% half-width (the values' scatter and the capture's resolution ``step_us``),
    the range to that resolution; one value: to the resolution alone."""
    if sp.empty:
        return None
    if counts:
        show = lambda v: f"{v:g}"  # noqa: E731
        median = f"{show(sp.median)} {unit}"
    elif step_us is None:
        show = number
        median = f"{measured(sp.median, sp.median_ci95)} {unit}"
    else:
        at = places(K95 * rectangular(step_us), step_us)
        show = lambda v: number(v, decimals=at)  # noqa: E731
        half = math.hypot(sp.median_ci95, K95 * rectangular(step_us))
        median = (measured(sp.median, half, unit, step=step_us) if math.isfinite(half)
                  else f"{show(sp.median)} {unit}")
    if sp.count == 1:
        return Measurement(name, _time(sp.median, step_us, unit) if not counts else median)
    return Measurement(name, f"median {median} (min {show(sp.minimum)}, max {show(sp.maximum)}; n={sp.count})")


def _occupancy(occ: bus.Occupancy, step_us: float | None) -> str:
    """The share of the window the bus was busy, to one clock of the window (its two ends cut a transaction
    anywhere within a clock)."""
    if step_us is None or not occ.window_us > 0:
        return f"{number(occ.busy_pct)} %"
    return _time(occ.busy_pct, 100 * step_us / occ.window_us, "%")


def path_measurements(p: bus.FramePath, rig: Rig, way: str, periods_ns: dict[str, float] | None = None
                      ) -> list[Measurement]:
    """One frame's trip (Hughes-Jones et al. 2003, figure 4.7): CSR setup, DMA, wire, receive DMA, interrupt,
    service; each time to the resolution of the sample clocks (``periods_ns`` per source) of its two ends."""
    s, r, w = rig.send or "", rig.recv or "", rig.probe or ""
    if way == "in":
        s, r = r, s

    def span(name: str, a: float, b: float, ends: tuple[str, str], source: str = "", label: str = "") -> Measurement:
        return _span(name, a, b, source, label, clock_step_us(periods_ns, *ends))

    head = Measurement(f"frame seq {p.seq} ({way}), {p.length_bytes} B", "")
    return [head,
            span("  CSR setup (sending driver)", p.send_csr_start_ns, p.send_csr_end_ns, (s, s), s, "CSR setup"),
            span("  DMA on the sending bus", p.send_first_word_ns, p.send_dma_end_ns, (s, s), s, "DMA"),
            span("  sending bus first word -> wire", p.send_first_word_ns, p.wire_start_ns, (s, w)),
            span("  frame on the wire", p.wire_start_ns, p.wire_end_ns, (w, w), w, "frame on the wire"),
            span("  wire -> receiving bus first word", p.wire_end_ns, p.recv_first_word_ns, (w, r)),
            span("  first word -> first word (propagation)", p.send_first_word_ns, p.recv_first_word_ns, (s, r)),
            span("  DMA on the receiving bus", p.recv_first_word_ns, p.recv_dma_end_ns, (r, r), r, "DMA"),
            span("  receive DMA -> interrupt (coalescence)", p.recv_dma_end_ns, p.recv_interrupt_ns, (r, r), r,
                 "waiting for the interrupt"),
            span("  interrupt -> CSR service", p.recv_interrupt_ns, p.recv_service_start_ns, (r, r), r, "interrupt"),
            span("  CSR service (receiving driver)", p.recv_service_start_ns, p.recv_service_end_ns, (r, r), r,
                 "CSR service"),
            span("  sending software -> receiving service", p.send_csr_start_ns, p.recv_service_end_ns, (s, r))]


def host_measurements(trace: HostTrace, t0_ns: float, t1_ns: float, shift_ns: float) -> list[Measurement]:
    """The host probe's measurements (``nicrig.analysis.hostprobe``) of one host's events in the view's
    ``[t0_ns, t1_ns]``; ``shift_ns``: view time minus the host's CLOCK_MONOTONIC (base, offset, deskew)."""
    from nicrig.analysis import hostprobe

    a, b = int(t0_ns - shift_ns), int(t1_ns - shift_ns)
    cut = dataclasses.replace(trace, events=hostprobe.within(trace.events, a, b), start_ns=a, end_ns=b)
    span = (b - a) / 1e9

    def per_s(count: int) -> str:
        """Events per second of the view, to its resolution: one event in the view's span."""
        return resolved(count / span, rectangular(1 / span)) if span else "-"

    runs = hostprobe.softirq_spans(cut, hostprobe.NET_RX)
    ps = hostprobe.poll_stats(hostprobe.polls(cut))
    _, raised = hostprobe.trigger_delays(cut)
    median, p90, n = hostprobe.quantiles_us(raised)
    cpus = max(len(trace.losses), 1)
    out = [Measurement(f"host {trace.host}: kernel events", ""),
           Measurement("  hard IRQs per s", per_s(len(cut.of("irq:irq_handler_entry")))),
           Measurement("  NET_RX softirq runs per s", per_s(len(runs))),
           Measurement("  NAPI polls, frames per poll (most)",
                       f"{ps.polls}, {number(ps.mean_frames)} ({ps.max_frames} of {ps.budget})"),
           Measurement("  CPU in NET_RX", f"{number(100 * hostprobe.busy_share(runs, a, b, cpus))} %"),
           Measurement("  raise -> NET_RX median, p90", f"{number(median)} us, {number(p90)} us ({n})" if n else "-")]
    out += [Measurement(f"  dropped: {reason}", str(count)) for reason, count in hostprobe.drops(cut).items()]
    return out


def measure_range(tables: dict[str, np.ndarray], sources: list[str], t0_ns: float, t1_ns: float,
                  max_paths: int = 6, hosts: list[tuple[HostTrace, float]] = (),
                  devices: dict[str, str] | None = None, periods_ns: dict[str, float] | None = None
                  ) -> list[Measurement]:
    """Bus-level measurements (``nicrig.analysis.bus``) of the decoded tables in ``[t0_ns, t1_ns]``, and the
    host probe's of each (trace, view minus CLOCK_MONOTONIC) in ``hosts``. ``devices``: each source's PCI
    ``vendor:device``, whose register map (``nicrig.analysis.nic_registers``) names the accesses where AD
    was probed, as the report does. ``periods_ns``: each source's sample period, the resolution every time is
    rounded to (with a median's scatter where there are several values)."""
    rig = rig_roles(sources, tables)
    host_rows = [m for trace, shift in hosts for m in host_measurements(trace, t0_ns, t1_ns, shift)]
    if rig.send is None and rig.probe is None:
        if host_rows:
            return host_rows
        raise UsageError("nothing to measure: no decoded PCI or Ethernet table (decode the capture set first)")
    cut = tables_in_range(tables, t0_ns, t1_ns)

    def get(source: str | None, decoder: str) -> np.ndarray | None:
        return cut.get(f"{source}/{decoder}") if source else None

    tl = bus.bus_timeline(get(rig.send, "pci"), get(rig.send, "irq"), get(rig.recv, "pci"), get(rig.recv, "irq"),
                          get(rig.probe, "ethernet"),
                          registers=nic_registers.for_device((devices or {}).get(rig.send or "")))
    out: list[Measurement] = []
    for paths, way in ((tl.paths_out, "out"), (tl.paths_in, "in")):
        for p in paths[:max_paths]:
            out += path_measurements(p, rig, way, periods_ns)
    for host, name in ((tl.send, rig.send), (tl.recv, rig.recv)):
        if host is None:
            continue
        out.append(Measurement(f"{name}: summary", ""))
        step = clock_step_us(periods_ns, name)
        rows = [_spread("  CSR setup per send", host.csr.send_setup_us, step_us=step),
                _spread("  CSR accesses per receive ring refill outside the service", host.csr.refill_accesses,
                        "accesses", counts=True),
                _spread("  DMA per sent frame (fetch)", host.dma.fetch_us, step_us=step),
                _spread("  DMA per received frame", host.dma.receive_us, step_us=step),
                _spread("  DMA burst", host.dma.burst_us, step_us=step),
                Measurement("  STOP# (retries) on CSR / DMA",
                            f"{host.stops.csr_with_stop} ({host.stops.retries}) / {host.stops.dma_with_stop}"),
                Measurement("  bus occupancy", _occupancy(host.occupancy, step))]
        it = host.interrupts
        if it is not None:
            rows += [_spread("  DMA -> interrupt (coalescence)", it.dma_to_interrupt_us, step_us=step),
                     _spread("  interrupt -> CSR service", it.interrupt_to_csr_us, step_us=step),
                     Measurement("  interrupts, frames per interrupt",
                                 f"{it.interrupts}, {number(it.frames_per_interrupt)}")]
        out += [m for m in rows if m is not None]
    if tl.pause is not None and tl.pause.frames:
        pz = tl.pause
        step = clock_step_us(periods_ns, rig.probe or "")
        out.append(Measurement("PAUSE frames (XOFF / XON)", f"{pz.xoff} / {pz.xon}"))
        out += [m for m in (_spread("  gap they cause", pz.gap_us, step_us=step),
                            _spread("  period", pz.period_us, step_us=step)) if m]
        for f in pz.frames[:max_paths]:
            if math.isfinite(f.gap_us):
                out.append(Measurement(f"  PAUSE {f.quanta} quanta ({f.direction})", f"gap {_time(f.gap_us, step)}",
                                       f.t_ns, f.t_ns + f.gap_us * 1000, rig.probe or "", "PAUSE gap"))
    return out + host_rows


def phase_boxes(results: list[Measurement], source: str) -> Boxes:
    """The measured phases on ``source`` as labelled boxes for a timeline lane (times with deskew)."""
    rows = sorted((m for m in results if m.label and m.source == source and m.t0_ns is not None),
                  key=lambda m: m.t0_ns)
    t0 = np.array([m.t0_ns for m in rows], dtype=np.float64)
    t1 = np.array([m.t1_ns for m in rows], dtype=np.float64)

    def labels(i: int) -> list[str]:
        m = rows[i]
        return [f"{m.label} {m.value}", m.label, m.label.split()[0], m.label[0]]

    style = np.full(len(rows), STYLE_NAMES.index("phase"), np.int8)
    return Boxes(t0, t1, style, labels, np.full(len(rows), b"phase", dtype="S12"))


class MeasurementsPanel(QtWidgets.QWidget):
    """Results of the last measurement, with a button to run one and one to mark its spans."""

    def __init__(self, window: MainWindow):
        super().__init__(window)
        self.window_ = window
        self.results: list[Measurement] = []
        self.table = QtWidgets.QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["measurement", "value"])
        self.table.verticalHeader().setVisible(False)
        fit_columns(self.table)
        self.table.cellDoubleClicked.connect(self._goto)
        run = QtWidgets.QPushButton("Measure A..B")
        run.setToolTip("bus-level timing of the range between the cursors (nicrig.analysis.bus)")
        run.clicked.connect(window.measure)
        mark = QtWidgets.QPushButton("Mark on timeline")
        mark.clicked.connect(self.mark)
        self.note = QtWidgets.QLabel("Place cursors A and B around a message, then Measure.")
        self.note.setWordWrap(True)
        row = QtWidgets.QHBoxLayout()
        row.addWidget(run)
        row.addWidget(mark)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(row)
        layout.addWidget(self.note)
        layout.addWidget(self.table, 1)

    def measure(self, t0_ns: float, t1_ns: float) -> Job | None:
        """Measure the range in a background job; the table fills when it ends."""
        doc = self.window_.doc
        if doc is None:
            return None
        sources = doc.source_order()
        hosts = [(t, doc.host_shift_ns(t)) for t in doc.traces]
        devices = {name: str(doc.data[name].source.bus.get("device") or "") if name in doc.data else ""
                   for name in sources}
        periods = {name: 1e9 / rate for name in sources if name in doc.data
                   and (rate := doc.data[name].source.samplerate_hz or doc.data[name].source.bus.get("clock_hz"))}
        job = Job("measuring", lambda progress: measure_range(doc.tables_in_range(t0_ns, t1_ns), sources, t0_ns, t1_ns,
                                                              hosts=hosts, devices=devices, periods_ns=periods), self)
        self.note.setText(f"measuring {t0_ns / 1000:.3f} .. {t1_ns / 1000:.3f} us ...")
        return self.window_.start_job(job, on_done=self.show_results)

    def show_results(self, results: list[Measurement]) -> None:
        self.results = list(results)
        self.window_.show_phases(self.results)
        self.table.setRowCount(len(self.results))
        for r, m in enumerate(self.results):
            for c, text in enumerate((m.name, m.value)):
                item = QtWidgets.QTableWidgetItem(text)
                item.setToolTip(text)
                self.table.setItem(r, c, item)
        self.note.setText(f"{len(self.results)} measurements" if self.results else
                          "nothing to measure in this range (decode the capture set first?)")

    def mark(self) -> None:
        """Put a named marker at the start of every measured phase."""
        tl = self.window_.timeline
        if tl is None:
            return
        markers = list(tl.doc.session.markers)
        names = {n for n, _ in markers}
        for m in self.results:
            name = f"{m.source}: {m.label}"
            if m.label and m.t0_ns is not None and name not in names:
                markers.append((name, m.t0_ns))
                names.add(name)
        tl.set_markers(markers)

    def _goto(self, row: int, _col: int) -> None:
        m = self.results[row]
        tl = self.window_.timeline
        if tl is not None and m.t0_ns is not None:
            t1 = m.t1_ns if m.t1_ns is not None else m.t0_ns
            tl.zoom_to(m.t0_ns, t1)
            tl.set_cursors(m.t0_ns, t1)
