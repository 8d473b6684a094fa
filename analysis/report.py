"""Reports: the analyses of a set of nicrig files as one self-contained HTML page, JSON or CSV.

A report is a list of sections, each holding named numbers (:class:`Item`),
tables, figures (PNG) and sentences that interpret them. Every number and
table names its **source**: the file and the table (and columns) it was
computed from, so a reader can recompute it from the raw rows kept there.

* udpmon latency results: per-size statistics and histograms, slope and
  intercept per frame count on the minimum and the mean (outliers rejected),
  observed against expected slope, what the intercept says (seed 002 3.1, 4).
* udpmon stream results: rates, loss, CPU and interrupts against spacing, the
  knee, the best rate against the link's (seed 002 3.2, 9.1; seed 000 3.3);
  over all stream files, seed 004's CPU model.
* decoded capture sets: the bus-level timeline of :mod:`nicrig.analysis.bus`.
* a CSV of microbenchmark and application throughputs: seed 000 Table 2.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from nicrig import __version__
from nicrig.analysis import bus, cpu, expected, figures, latency, throughput
from nicrig.errors import UsageError

#: Frames listed one by one in a capture's timeline table (the rest in its median row).
TIMELINE_ROWS = 8
#: PAUSE frames listed one by one.
PAUSE_ROWS = 12
#: A delay from DMA to INTA# above this is interrupt coalescence rather than the NIC's reaction time.
COALESCENCE_MIN_US = 5.0


@dataclass
class Item:
    """One number of the report, its unit, where it came from, and what was expected (if anything)."""

    label: str
    value: Any
    unit: str
    source: str
    expected: Any = None


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[Any]]
    source: str
    note: str = ""


@dataclass
class Chart:
    title: str
    png: bytes
    caption: str


@dataclass
class Section:
    title: str
    file: str
    items: list[Item] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


@dataclass
class Report:
    title: str
    created_utc: str
    inputs: list[dict[str, str]]
    sections: list[Section]
    problems: list[str]


@dataclass(frozen=True)
class Options:
    """What the command line adds to the files: the path to expect, the RTT intercept, the link, sources."""

    path: tuple[expected.PathElement, ...] = ()
    path_mode: expected.Mode = "store-and-forward"
    rtt_intercept_us: float | None = None
    link_rate_bps: float | None = None
    send_source: str = "send_pci"
    recv_source: str = "recv_pci"
    probe_source: str = "probe"


def _finite(v: Any) -> Any:
    """NaN and infinities as None (JSON has no NaN); Fractions and NumPy scalars as plain numbers."""
    if isinstance(v, Fraction):
        v = float(v)
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# -- udpmon latency ------------------------------------------------------------------------------

def latency_section(name: str, rtt_table: np.ndarray, settings: dict[str, Any], options: Options,
                    loopback: bool) -> Section:
    """Latency results: statistics per size, fits per frame count, figures, interpretation."""
    src = f"{name}: latency/rtt"
    sec = Section(f"Request-response latency: {name}", name)
    mtu = int(settings.get("mtu", 1500))
    by_size = latency.rtt_by_size(rtt_table)
    stats = {s: latency.rtt_stats(v) for s, v in by_size.items()}
    sizes = np.array(sorted(stats), dtype=np.int64)
    frames = np.array([latency.frames_per_message(int(s), mtu) for s in sizes])
    mins = np.array([stats[s].min_us for s in sizes])
    means = np.array([stats[s].mean_us for s in sizes])
    fits = {"minimum": latency.fit_latency(sizes, mins, mtu, reject_outliers=True),
            "mean": latency.fit_latency(sizes, means, mtu, reject_outliers=True)}
    sec.items += [Item("response sizes", len(sizes), "", src),
                  Item("round trips", int((rtt_table["rtt_ns"] >= 0).sum()), "", src),
                  Item("timeouts", int((rtt_table["rtt_ns"] < 0).sum()), "", src)]
    sec.tables.append(Table(
        "RTT per response size", ["size (bytes)", "frames", "count", "timeouts", "min (us)", "median (us)",
                                  "mean (us)", "p99 (us)", "max (us)", "FWHM (us)"],
        [[int(s), int(f), stats[s].count, stats[s].timeouts, stats[s].min_us, stats[s].median_us, stats[s].mean_us,
          stats[s].percentiles_us[99], stats[s].max_us, stats[s].fwhm_us] for s, f in zip(sizes, frames)],
        f"{src} (rtt_ns per size_bytes; -1 = timeout)"))
    rows = []
    for on, fl in fits.items():
        for f in fl:
            rows.append([on, f.frames, f.points, f.slope_us_per_byte, f.slope_ci95, f.intercept_us, f.intercept_ci95,
                         f.r, ", ".join(map(str, f.rejected_sizes)) or "none"])
    sec.tables.append(Table(
        "RTT = intercept + slope x size, per frame count", ["fitted on", "frames", "sizes", "slope (us/byte)",
                                                            "± 95% (us/byte)", "intercept (us)", "± 95% (us)", "r",
                                                            "outlier sizes left out"],
        rows, f"{src}: least squares on each size's minimum / mean RTT; sizes more than "
              f"{latency.OUTLIER_SIGMAS:g} robust sigmas off the Theil-Sen line left out"))
    if len(sizes):
        sec.charts.append(Chart("RTT against response size", figures.latency_vs_size(
            sizes, mins, means, fits["minimum"], fits["mean"], frames),
            f"Minimum and mean RTT of each size with the fitted lines ({src})."))
        sec.charts.append(Chart("RTT histograms", figures.rtt_histograms(
            {s: v[v >= 0] / 1000 for s, v in by_size.items() if (v >= 0).any()}, float(settings.get("bin_us", 1.0))),
            f"Round trips of up to four sizes, 1-us bins unless the run said otherwise ({src})."))
    one = next((f for f in fits["minimum"] if f.frames == 1), None)
    if one is None:
        sec.text.append("Fewer than three single-frame sizes: no slope or intercept to interpret.")
        return sec
    if loopback:
        sec.text.append(f"Measured over loopback: no NIC, bus or wire lies on the path, so the slope "
                        f"({one.slope_us_per_byte:.4g} us/byte) is the cost of copying the data through the stack, "
                        f"and the intercept ({one.intercept_us:.1f} us) that of the stack itself.")
    else:
        sec.text.append(latency.interpret_intercept(one.intercept_us, one.intercept_ci95).text)
    if options.path:
        slope = expected.expected_slope_us_per_byte(list(options.path), options.path_mode)
        verdict = expected.interpret_slope(one.slope_us_per_byte, one.slope_ci95, slope)
        sec.items.append(Item("slope, 1 frame, on minima", one.slope_us_per_byte, "us/byte", src,
                              expected=float(slope)))
        sec.text.append(verdict.text + f" (path: {', '.join(e.name for e in options.path)}, {options.path_mode})")
    return sec


# -- udpmon stream -------------------------------------------------------------------------------

def stream_section(name: str, points: np.ndarray, settings: dict[str, Any], link_rate_bps: float | None) -> Section:
    src = f"{name}: stream/points"
    sec = Section(f"Throughput against transmit spacing: {name}", name)
    mtu = int(settings.get("mtu", 1500))
    curves = throughput.size_curves(points, link_rate_bps=link_rate_bps, mtu=mtu)
    sec.items.append(Item("link assumed", link_rate_bps / 1e6 if link_rate_bps else "none (loopback)",
                          "Mbit/s" if link_rate_bps else "", "--link-rate, or the results' interface"))
    sec.tables.append(Table(
        "Best throughput per size (as seed 002 figure 9.1)",
        ["size (bytes)", "best user rate (Mbit/s)", "at spacing (us)", "no loss from (us)",
         "link allows (Mbit/s)", "share of link (%)", "frame on wire (us)"],
        [[c.size_bytes, c.max_user_rate_mbps, c.spacing_at_max_us, c.knee_spacing_us, c.theoretical_max_user_mbps,
          100 * c.max_user_rate_mbps / c.theoretical_max_user_mbps, c.frame_time_on_wire_us] for c in curves],
        f"{src} (user_rate_mbps, spacing_us, lost); link maxima computed as seed 000 3.3"))
    sec.tables.append(Table(
        "Every point", ["size (bytes)", "spacing (us)", "user (Mbit/s)", "wire (Mbit/s)", "lost", "lost (%)",
                        "receiver CPU idle (%)", "receiver interrupts per packet"],
        [[c.size_bytes, c.spacing_us[k], c.user_rate_mbps[k], c.wire_rate_mbps[k], int(c.lost[k]), c.loss_pct[k],
          c.receiver_cpu_idle_pct[k], c.receiver_interrupts_per_packet[k]]
         for c in curves for k in range(c.spacing_us.size)],
        f"{src} (user_rate_mbps, wire_rate_mbps, lost, remote_cpu_busy_pct, remote_interrupts, received)"))
    if curves:
        sec.charts.append(Chart("Throughput against transmit spacing", figures.throughput_vs_spacing(curves),
                                f"User rate per size (dotted: the offered load, size / spacing), loss, the receiving "
                                f"host's CPU idle time and interrupts per packet ({src})."))
    sec.text += [throughput.interpret_curve(c) for c in curves]
    return sec


def cpu_section(runs: list[tuple[str, cpu.CpuRuns]]) -> Section:
    """Seed 004's CPU model over the stream points of all stream files given."""
    names = ", ".join(n for n, _ in runs)
    src = f"{names}: stream/points (received, size_bytes, remote_interrupts) and counters (remote delta jiffies)"
    sec = Section("Receiver CPU model (seed 004)", names)
    cat = {k: np.concatenate([getattr(r, k) for _, r in runs]) for k in
           ("kernel_jiffies", "n_mbytes", "n_kpackets", "n_kinterrupts")}
    try:
        fit = cpu.fit_cpu_model(cat["kernel_jiffies"], cat["n_mbytes"], cat["n_kpackets"], cat["n_kinterrupts"])
    except UsageError as exc:
        sec.text.append(f"Not fitted: {exc}.")
        return sec
    sec.items += [
        Item("runs", fit.runs, "", src),
        Item("alpha, per MB (copies, checksums)", fit.alpha_per_mbyte, "jiffies", src, expected=0.1),
        Item("alpha ± 95%", fit.alpha_ci95, "jiffies", src),
        Item("beta, per 1000 packets (protocol)", fit.beta_per_kpacket, "jiffies", src, expected=0.4),
        Item("beta ± 95%", fit.beta_ci95, "jiffies", src),
        Item("gamma, per 1000 interrupts (context switches)", fit.gamma_per_kinterrupt, "jiffies", src, expected=1.4),
        Item("gamma ± 95%", fit.gamma_ci95, "jiffies", src),
        Item("R²", fit.r_squared, "", src)]
    sec.charts.append(Chart("Kernel CPU time: observed against the model", figures.cpu_model(fit),
                            f"Each stream point's system + irq + softirq jiffies on the receiver ({src})."))
    sec.text.append(f"T = {fit.alpha_per_mbyte:.3g} N_MB + {fit.beta_per_kpacket:.3g} N_KP + "
                    f"{fit.gamma_per_kinterrupt:.3g} N_KI jiffies over {fit.runs} runs; seed 004 found 0.1, 0.4 "
                    "and 1.4 for TCP on 1.6 GHz Pentium 4 hosts. Expected values shown are those.")
    loose = [name for name, v, ci in (("alpha", fit.alpha_per_mbyte, fit.alpha_ci95),
                                      ("beta", fit.beta_per_kpacket, fit.beta_ci95),
                                      ("gamma", fit.gamma_per_kinterrupt, fit.gamma_ci95)) if abs(v) <= ci]
    if loose:
        sec.text.append(f"{', '.join(loose)} not determined by these runs (the 95% interval includes zero): run "
                        "longer points (a jiffy is 10 ms) over more sizes and interrupt rates.")
    return sec


# -- capture sets --------------------------------------------------------------------------------

def _row(p: bus.FramePath) -> list[Any]:
    return [p.seq, p.length_bytes, p.csr_setup_us, p.send_dma_to_wire_us, p.on_wire_us, p.wire_to_recv_dma_us,
            p.first_word_to_first_word_us, p.recv_dma_to_interrupt_us, p.software_to_service_us]


TIMELINE_COLUMNS = ["seq", "frame (bytes)", "sender's CSR setup (us)", "sender's first word -> wire (us)",
                    "on the wire (us)", "wire -> receiver's first word (us)", "first word -> first word (us)",
                    "receiver's DMA -> INTA# (us)", "sender's CSR -> receiver's service (us)"]


def _timeline_table(title: str, paths: Sequence[bus.FramePath], src: str) -> Table:
    rows = [_row(p) for p in paths[:TIMELINE_ROWS]]
    if paths:
        med = np.nanmedian(np.array([_row(p) for p in paths], dtype=np.float64), axis=0)
        rows.append([f"median of {len(paths)}", *med[1:].tolist()])
    return Table(title, TIMELINE_COLUMNS, rows, src)


def _bus_rows(label: str, pick: Any, buses: list[bus.HostBus | None], unit: str) -> list[Any]:
    values = []
    for b in buses:
        try:
            values.append(pick(b) if b is not None else None)
        except (AttributeError, TypeError, KeyError):  # a bus without interrupts, DMA or CSR accesses
            values.append(None)
    return [label, *values, unit]


def capture_section(name: str, tables: dict[str, np.ndarray | None], meta: dict[str, dict[str, Any]],
                    options: Options) -> Section:
    """A decoded capture set of the rig: buses, link, flow control, expected against observed."""
    send_s, recv_s, probe_s = options.send_source, options.recv_source, options.probe_source
    sec = Section(f"Bus-level timeline: {name}", name)
    link = float(meta.get(probe_s, {}).get("link_rate_bps") or options.link_rate_bps or 1e9)
    tl = bus.bus_timeline(tables.get(f"{send_s}/pci"), tables.get(f"{send_s}/irq"), tables.get(f"{recv_s}/pci"),
                          tables.get(f"{recv_s}/irq"), tables.get(f"{probe_s}/ethernet"), link_rate_bps=link)
    used = [f"decoded/{k}" for k, v in tables.items() if v is not None]
    src_all = f"{name}: " + ", ".join(used)
    src_send = f"{name}: decoded/{send_s}/pci, decoded/{send_s}/irq"
    src_recv = f"{name}: decoded/{recv_s}/pci, decoded/{recv_s}/irq"
    src_eth = f"{name}: decoded/{probe_s}/ethernet"
    if tl.paths_out:
        sec.tables.append(_timeline_table(f"Frames from {send_s} to {recv_s}, step by step", tl.paths_out, src_all))
    if tl.paths_in:
        sec.tables.append(_timeline_table(f"Frames from {recv_s} to {send_s}, step by step", tl.paths_in, src_all))
    buses = [tl.send, tl.recv]
    rows = [
        _bus_rows("bus clock period", lambda b: b.dma.clock_period_ns, buses, "ns"),
        _bus_rows("peak rate (one word per clock)", lambda b: b.dma.peak_mbytes_per_s, buses, "MB/s"),
        _bus_rows("DMA rate during data phases", lambda b: b.dma.burst_data_rate_mbytes_per_s, buses, "MB/s"),
        _bus_rows("DMA rate over whole bursts", lambda b: b.dma.burst_rate_mbytes_per_s, buses, "MB/s"),
        _bus_rows("DMA burst, median", lambda b: b.dma.burst_us.median, buses, "us"),
        _bus_rows("fetch per frame (descriptor + data), median", lambda b: b.dma.fetch_us.median, buses, "us"),
        _bus_rows("receive per frame (data + descriptor), median", lambda b: b.dma.receive_us.median, buses, "us"),
        _bus_rows("fetch rate per frame, median", lambda b: b.dma.fetch_rate_mbytes_per_s.median, buses, "MB/s"),
        _bus_rows("receive rate per frame, median", lambda b: b.dma.receive_rate_mbytes_per_s.median, buses,
                  "MB/s"),
        _bus_rows("CSR setup per send, median", lambda b: b.csr.send_setup_us.median, buses, "us"),
        _bus_rows("CSR accesses per send, median", lambda b: b.csr.send_accesses.median, buses, ""),
        _bus_rows("CSR setup end -> fetch, median", lambda b: b.csr.send_to_dma_us.median, buses, "us"),
        _bus_rows("interrupt service's first CSR accesses, median", lambda b: b.csr.service_us.median, buses, "us"),
        _bus_rows("interrupt service's CSR update, median", lambda b: b.csr.update_us.median, buses, "us"),
        _bus_rows("CSR accesses retried (STOP#)", lambda b: b.csr.retries, buses, ""),
        _bus_rows("transactions with STOP#", lambda b: b.stops.with_stop, buses, ""),
        _bus_rows("  of them DMA disconnects", lambda b: b.stops.disconnects_with_data
                  + b.stops.disconnects_without_data, buses, ""),
        _bus_rows("interrupts", lambda b: b.interrupts.interrupts, buses, ""),
        _bus_rows("frames per interrupt", lambda b: b.interrupts.frames_per_interrupt, buses, ""),
        _bus_rows("DMA -> INTA# (coalescence), median", lambda b: b.interrupts.dma_to_interrupt_us.median, buses,
                  "us"),
        _bus_rows("INTA# -> first CSR access, median", lambda b: b.interrupts.interrupt_to_csr_us.median, buses,
                  "us"),
        _bus_rows("DMA -> first CSR access, median", lambda b: b.interrupts.dma_to_csr_us.median, buses, "us"),
        _bus_rows("INTA# -> CSR update, median", lambda b: b.interrupts.interrupt_to_update_us.median, buses, "us"),
        _bus_rows("bus busy", lambda b: b.occupancy.busy_pct, buses, "%"),
        _bus_rows("bus busy per frame", lambda b: b.occupancy.busy_per_frame_us, buses, "us"),
        _bus_rows("frame period", lambda b: b.occupancy.frame_period_us, buses, "us"),
        _bus_rows("target wait clocks per DMA transaction",
                  lambda b: b.waits["dma"].target_wait_clocks_per_transaction, buses, "clocks"),
        _bus_rows("master wait clocks per DMA transaction",
                  lambda b: b.waits["dma"].master_wait_clocks_per_transaction, buses, "clocks"),
        _bus_rows("target wait clocks per CSR access",
                  lambda b: b.waits["csr"].target_wait_clocks_per_transaction, buses, "clocks"),
    ]
    sec.tables.append(Table("Bus measurements", ["quantity", send_s, recv_s, "unit"], rows,
                            f"{src_send} | {src_recv} (+ {src_eth} to tie DMA to frames)"))
    _expected_rows(sec, tl, meta, send_s, recv_s, link, src_send, src_eth)
    _wire_and_pause(sec, tl, tables.get(f"{probe_s}/ethernet"), src_eth)
    if tl.paths_out and tl.send and tl.recv:
        first = next((p for p in tl.paths_out if np.isfinite(p.recv_service_end_ns)), tl.paths_out[0])
        sec.charts.append(Chart(f"Frame seq {first.seq} across both buses and the wire", figures.bus_timeline(
            first, tl.send.activity, tl.recv.activity, tables.get(f"{send_s}/irq"), tables.get(f"{recv_s}/irq"),
            tables.get(f"{probe_s}/ethernet")),
            f"CSR clusters, DMA transfers by role and INTA# on each bus, and the frame on the wire ({src_all})."))
    sec.text += _interpret_capture(tl, options, send_s, recv_s)
    return sec


def _expected_rows(sec: Section, tl: bus.BusTimeline, meta: dict[str, dict[str, Any]], send_s: str, recv_s: str,
                   link: float, src_send: str, src_eth: str) -> None:
    rows = []
    for name, hb in ((send_s, tl.send), (recv_s, tl.recv)):
        element = expected.element_from_bus(meta.get(name, {}))
        if hb is None or element is None:
            continue
        rows.append([f"{name}: DMA rate during data phases (MB/s)", element.mbytes_per_s,
                     hb.dma.burst_data_rate_mbytes_per_s, f"{element.name} (source metadata)"])
    if tl.wire_out is not None:
        rows.append(["frame on the wire, median (us)", tl.wire_out.expected_on_wire_us.median,
                     tl.wire_out.on_wire_us.median, f"(length + 8) x 8 bit times at {link / 1e9:g} Gbit/s"])
    if tl.pause is not None and tl.pause.xoff:
        unresumed = [p for p in tl.pause.frames if not math.isfinite(p.xon_after_us)]
        if unresumed:
            rows.append(["gap after a PAUSE not ended by XON, median (us)", float(np.median(
                [p.pause_us for p in unresumed])), float(np.nanmedian([p.gap_us for p in unresumed])),
                "quanta x 512 bit times"])
    send_bus, recv_bus = (expected.element_from_bus(meta.get(n, {})) for n in (send_s, recv_s))
    if send_bus is not None and recv_bus is not None:
        path = [send_bus, expected.ethernet(link), recv_bus]
        sec.items.append(Item("expected RTT slope for this rig (bus + wire + bus, no copies)",
                              float(expected.expected_slope_us_per_byte(path)), "us/byte",
                              f"seed 002 3.1 arithmetic on {', '.join(e.name for e in path)}"))
    if rows:
        sec.tables.append(Table("Expected against observed", ["quantity", "expected", "observed", "expected from"],
                                rows, f"{src_send}, {src_eth}; expectations from the sources' bus metadata"))


def _wire_and_pause(sec: Section, tl: bus.BusTimeline, ethernet: np.ndarray | None, src_eth: str) -> None:
    wt = [(d, w) for d, w in (("from the sending host", tl.wire_out), ("to the sending host", tl.wire_in))
          if w is not None]
    if wt:
        sec.tables.append(Table("Data frames on the link", ["direction", "frames", "on wire, median (us)",
                                                            "period, median (us)", "gap, median (us)"],
                                [[d, w.frames, w.on_wire_us.median, w.period_us.median, w.gap_us.median]
                                 for d, w in wt], src_eth))
    p = tl.pause
    if p is None or not p.xoff:
        return
    sec.items += [Item("PAUSE frames (XOFF)", p.xoff, "", src_eth), Item("XON (PAUSE 0)", p.xon, "", src_eth),
                  Item("quanta", ", ".join(map(str, p.quanta)), "x 512 bit times", src_eth),
                  Item("PAUSE period, median", p.period_us.median, "us", src_eth),
                  Item("gap they left, median", p.gap_us.median, "us", src_eth),
                  Item("usual gap between data frames", p.usual_gap_us, "us", src_eth)]
    sec.tables.append(Table("PAUSE frames", ["time (us)", "sent by", "quanta", "asks (us)", "gap left (us)",
                                             "XON after (us)"],
                            [[f.t_ns / 1000, "receiver" if f.direction == "rx" else "sender", f.quanta, f.pause_us,
                              f.gap_us, f.xon_after_us] for f in p.frames[:PAUSE_ROWS]],
                            src_eth, note=f"first {min(PAUSE_ROWS, len(p.frames))} of {len(p.frames)}"))
    if ethernet is not None:
        data = bus.data_frames(ethernet, b"tx")
        if len(data) > 1:
            sec.charts.append(Chart("Gaps in the stream and PAUSE frames", figures.wire_gaps(
                data, [f.t_ns for f in p.frames], "gap before each data frame from the sending host"),
                f"As seed 002 figure 4.9: regular gaps where the receiver's PAUSE frames stop the sender ({src_eth})."))


def _interpret_capture(tl: bus.BusTimeline, options: Options, send_s: str, recv_s: str) -> list[str]:
    text = []
    for name, hb in ((send_s, tl.send), (recv_s, tl.recv)):
        if hb is None:
            continue
        it = hb.interrupts
        if it is not None and it.interrupts:
            delay = it.dma_to_interrupt_us.median
            if math.isfinite(delay) and delay > COALESCENCE_MIN_US:
                text.append(f"{name}: interrupts come {delay:.1f} us after the DMA that caused them, "
                            f"{it.frames_per_interrupt:.1f} frames per interrupt: interrupt coalescence "
                            "(seed 002 4.2.3: ~70 us with 64 x 1.024 us).")
            elif math.isfinite(delay):
                text.append(f"{name}: an interrupt right after the DMA ({delay:.2f} us), "
                            f"{it.frames_per_interrupt:.1f} frames per interrupt: no coalescence (seed 002 4.1.3).")
        if hb.csr.accesses and hb.csr.retries:
            text.append(f"{name}: {hb.csr.retries} of {hb.csr.accesses + hb.csr.retries} CSR accesses were refused "
                        "with STOP# and retried: the NIC takes register accesses slower than the host offers "
                        "them (seed 002 6.1.3).")
        occ = hb.occupancy
        if math.isfinite(occ.busy_pct) and occ.frames:
            text.append(f"{name}: the bus was busy {occ.busy_pct:.0f}% of the time the frames took, "
                        f"{occ.busy_per_frame_us:.2f} us per frame every {occ.frame_period_us:.2f} us"
                        + (": little room for other devices such as a disk controller (seed 002 9)."
                           if occ.busy_pct > 60 else "."))
    p = tl.pause
    if p is not None and p.xoff:
        text.append(f"Flow control: the receiver sent {p.xoff} PAUSE frames (quanta {', '.join(map(str, p.quanta))}), "
                    f"one every {p.period_us.median:.0f} us; each left a gap of {p.gap_us.median:.1f} us in the "
                    f"stream, against {p.usual_gap_us:.2f} us otherwise (seed 002 4.2.3: gaps every ~900 us).")
    path = [q for q in tl.paths_out if math.isfinite(q.software_to_service_us)]
    if path:
        one_way = float(np.median([q.software_to_service_us for q in path]))
        f2f = float(np.nanmedian([q.first_word_to_first_word_us for q in path]))
        text.append(f"From the sending driver's first CSR access to the receiving service's: {one_way:.1f} us "
                    f"(median of {len(path)}); first word to first word {f2f:.1f} us (seed 002 4.1.3: 36 and 23 us).")
        if options.rtt_intercept_us is not None:
            sw = bus.host_software_time_us(options.rtt_intercept_us, one_way)
            text.append(f"With the RTT intercept of {options.rtt_intercept_us:g} us given: IP stack and application "
                        f"~{sw:.1f} us per node, (intercept - {one_way:.1f}) / 2 as seed 002 4.1.3 estimates it.")
    return text


# -- references and correlation ------------------------------------------------------------------

def reference_section(options: Options) -> Section:
    """Seed 002's expected slopes and seed 000's link maxima, computed; the given path's expected slope."""
    sec = Section("Reference: expected slopes and link maxima", "")
    sec.tables.append(Table(
        "Expected RTT slopes, PCI - Gigabit Ethernet - PCI (seed 002 section 3.1)",
        ["element or path", "us/byte (as the seed prints it)", "exact", "note"],
        [[r.label, str(r.printed), f"{r.us_per_byte.numerator}/{r.us_per_byte.denominator}", r.note]
         for r in expected.seed002_table()],
        "computed: 1 / (bus width x clock) per PCI element, 8 ns per byte at 1 Gbit/s; paths are store and "
        "forward (PCI + Ethernet + PCI, copies excluded)"))
    maxima = throughput.seed000_maxima()
    sec.tables.append(Table("Theoretical maxima at 1 Gbit/s (seed 000 section 3.3)",
                            ["test", "Mbit/s", "as the seed prints it (truncated)"],
                            [[k, v, math.floor(v)] for k, v in maxima.items()],
                            "computed: payload / (payload + headers + preamble + gap), frames of at least 64 bytes"))
    if options.path:
        slope = expected.expected_slope_us_per_byte(list(options.path), options.path_mode)
        sec.tables.append(Table(
            "The path given (--path)", ["element", "us/byte", "MB/s"],
            [[e.name, float(e.us_per_byte), e.mbytes_per_s] for e in options.path]
            + [[f"expected slope ({options.path_mode})", float(slope), float(1 / slope)]], "--path"))
    return sec


def correlation_section(name: str, labels: list[str], columns: dict[str, np.ndarray]) -> Section:
    """Seed 000 Table 2 for a CSV: columns named ``app:NAME`` are applications, the others microbenchmarks."""
    apps = [c for c in columns if c.startswith("app:")]
    benches = [c for c in columns if not c.startswith("app:")]
    corr = cpu.correlation(columns, benches, apps)
    sec = Section(f"Microbenchmarks against applications: {name}", name)
    sec.tables.append(Table("Correlation coefficients (Pearson, as seed 000 Table 2)",
                            ["microbenchmark", *[a[4:] for a in apps]],
                            [[b, *corr.coefficients[k].tolist()] for k, b in enumerate(benches)],
                            f"{name}: {corr.items} items ({', '.join(labels)})"))
    sec.text.append("Near ±1: the microbenchmark predicts the application across these items; near 0: it does not. "
                    "With few items (seed 000 had six NICs) the coefficients are indications, not proof.")
    return sec


def read_correlation_csv(path: str | Path) -> tuple[list[str], dict[str, np.ndarray]]:
    """A CSV with a header row: first column the item (NIC), then numeric columns."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{p}: cannot read: {exc}") from None
    rows = [r for r in csv.reader(io.StringIO(text)) if r and any(c.strip() for c in r)]
    if len(rows) < 2 or len(rows[0]) < 3:
        raise UsageError(f"{p}: needs a header row and data rows with an item column and at least two number columns")
    header = [h.strip() for h in rows[0]]
    labels, data = [], []
    for n, r in enumerate(rows[1:], start=2):
        if len(r) != len(header):
            raise UsageError(f"{p}: line {n} has {len(r)} cells, the header {len(header)}")
        try:
            data.append([float(c) for c in r[1:]])
        except ValueError:
            raise UsageError(f"{p}: line {n}: every cell after the first must be a number") from None
        labels.append(r[0].strip())
    arr = np.array(data, dtype=np.float64)
    return labels, {h: arr[:, k] for k, h in enumerate(header[1:])}


# -- rendering -----------------------------------------------------------------------------------

def new_report(title: str, inputs: list[dict[str, str]], sections: list[Section], problems: list[str]) -> Report:
    return Report(title, datetime.now(timezone.utc).isoformat(timespec="seconds"), inputs, sections, problems)


def to_json(report: Report) -> str:
    """Every item and table with its source; figures by title and caption (their data are the tables)."""
    def sec(s: Section) -> dict[str, Any]:
        return {"title": s.title, "file": s.file,
                "items": [{"label": i.label, "value": _finite(i.value), "unit": i.unit, "source": i.source,
                           "expected": _finite(i.expected)} for i in s.items],
                "tables": [{"title": t.title, "columns": t.columns, "source": t.source, "note": t.note,
                            "rows": [[_finite(v) for v in r] for r in t.rows]} for t in s.tables],
                "figures": [{"title": c.title, "caption": c.caption} for c in s.charts],
                "interpretation": s.text}
    return json.dumps({"title": report.title, "created_utc": report.created_utc, "nicrig_version": __version__,
                       "inputs": report.inputs, "problems": report.problems,
                       "sections": [sec(s) for s in report.sections]}, indent=1, allow_nan=False)


def to_csv(report: Report) -> str:
    """One row per number: section, file, table (empty for items), row, column, value, unit, source."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(["section", "file", "table", "row", "column", "value", "unit", "expected", "source"])
    for s in report.sections:
        for i in s.items:
            w.writerow([s.title, s.file, "", "", i.label, _cell(i.value), i.unit, _cell(i.expected), i.source])
        for t in s.tables:
            for n, r in enumerate(t.rows):
                for col, v in zip(t.columns, r):
                    w.writerow([s.title, s.file, t.title, n, col, _cell(v), "", "", t.source])
    return out.getvalue()


def _cell(v: Any) -> str:
    v = _finite(v)
    return "" if v is None else str(v)


def _fmt(v: Any) -> str:
    v = _finite(v)
    if v is None:
        return "–"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return html.escape(str(v))
    if isinstance(v, int):
        return f"{v:,}"
    return f"{v:.4g}" if abs(v) < 1000 else f"{v:,.1f}"


CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:70em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.25em;border-bottom:1px solid #ccc;margin-top:2em}h3{font-size:1em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.85em}
th,td{border:1px solid #ccc;padding:.2em .5em;text-align:right}th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}.src{color:#666;font-size:.8em}
.interp{background:#f6f9ff;border-left:3px solid #4a7bd0;padding:.5em 1em}
figure{margin:1em 0}figcaption{color:#444;font-size:.85em}img{max-width:100%}
.problems{background:#fff4f4;border-left:3px solid #c33;padding:.5em 1em}
"""


def to_html(report: Report) -> str:
    """One self-contained page: tables, figures as PNG data URIs, interpretation, sources."""
    e = html.escape
    parts = [f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{e(report.title)}</title>"
             f"<style>{CSS}</style></head><body><h1>{e(report.title)}</h1>",
             f"<p class=src>nicrig {e(__version__)}, {e(report.created_utc)}. Inputs: "
             + "; ".join(f"{e(i['path'])} ({e(i['kind'])})" for i in report.inputs) + "</p>"]
    if report.problems:
        parts.append("<div class=problems><b>Not analysed:</b><ul>"
                     + "".join(f"<li>{e(p)}</li>" for p in report.problems) + "</ul></div>")
    for s in report.sections:
        parts.append(f"<h2>{e(s.title)}</h2>")
        if s.text:
            parts.append("<div class=interp>" + "".join(f"<p>{e(t)}</p>" for t in s.text) + "</div>")
        if s.items:
            parts.append("<table><tr><th>quantity</th><th>value</th><th>unit</th><th>expected</th><th>source</th></tr>"
                         + "".join(f"<tr><td>{e(i.label)}</td><td>{_fmt(i.value)}</td><td>{e(i.unit)}</td>"
                                   f"<td>{'' if i.expected is None else _fmt(i.expected)}</td>"
                                   f"<td class=src>{e(i.source)}</td></tr>" for i in s.items) + "</table>")
        for c in s.charts:
            data = base64.b64encode(c.png).decode()
            parts.append(f"<figure><img alt='{e(c.title)}' src='data:image/png;base64,{data}'>"
                         f"<figcaption><b>{e(c.title)}.</b> {e(c.caption)}</figcaption></figure>")
        for t in s.tables:
            parts.append(f"<h3>{e(t.title)}</h3><table><tr>" + "".join(f"<th>{e(c)}</th>" for c in t.columns)
                         + "</tr>" + "".join("<tr>" + "".join(f"<td>{_fmt(v)}</td>" for v in r) + "</tr>"
                                             for r in t.rows) + "</table>"
                         + f"<p class=src>Source: {e(t.source)}{'. ' + e(t.note) if t.note else ''}</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


RENDERERS = {"html": to_html, "json": to_json, "csv": to_csv}
