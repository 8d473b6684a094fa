"""Reports: the analyses of a set of nicrig files as one self-contained HTML page, JSON or CSV.

A report is a list of sections, each holding named numbers (:class:`Item`),
tables, figures (PNG) and sentences that interpret them. Every number and
table names its **source**: the file and the table (and columns) it was
computed from, so a reader can recompute it from the raw rows kept there.
Every measured number carries its 95% interval, which includes the
resolution of the time stamps it comes from (:mod:`nicrig.analysis.resolution`;
tables state it, and the Type B part of each interval, in ``resolution``).
Every sentence (:class:`~nicrig.analysis.sentence.Sentence`) states numbers the
section's tables or items show, formatted alike
(:mod:`nicrig.analysis.quantity`) and quoting the cells they come from, and a
physical reading only where the data resolve it; a figure with nothing to show
becomes a sentence saying why. :mod:`nicrig.analysis.render` draws the report
and :mod:`nicrig.analysis.lint` checks it.

* udpmon latency results: the one latency estimator
  (:func:`nicrig.analysis.latency.estimate`): per-size statistics, the
  per-round values, host states, the lines per statistic and frame count
  with intervals from the rounds, and what they support saying
  (Hughes-Jones et al. 2003, §3.1, §4).
* udpmon stream results: rates (recomputed from the received datagrams with
  :func:`nicrig.analysis.throughput.receive_rate`), loss, CPU and interrupts
  against spacing, per size and spacing over the rounds; the knee, the best
  rate against the link's (Hughes-Jones et al. 2003, §3.2, §9.1; Pai, Rixner
  and Kim 2004, §3.3); over all stream files, Geist et al.'s CPU model (n.d.).
* decoded capture sets: the bus-level timeline of :mod:`nicrig.analysis.bus`.
* a CSV of microbenchmark and application throughputs: Pai, Rixner and Kim 2004, Table 2.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.analysis import (bus, cpu, expected, figures, hostprobe, latency, load, nic_registers, packetpath,
                            resolution, suite, sweeps, throughput)
from nicrig.analysis.citations import GEIST, HUGHES_JONES, PAI, REFERENCES, cited
from nicrig.analysis.latency import FIT_COLUMNS, FITS_TABLE, STAT_LABEL
from nicrig.analysis.quantity import number, rectangular, setting
from nicrig.analysis.sentence import Quotes, Sentence, prefixed
from nicrig.analysis.throughput import BEST_COLUMNS, BEST_TABLE, POINT_COLUMNS, POINTS_TABLE
from nicrig.errors import UsageError

#: Frames listed one by one in a capture's timeline table (the rest in its median rows).
TIMELINE_ROWS = 8
#: PAUSE frames listed one by one.
PAUSE_ROWS = 12
#: A delay from DMA to INTA# above this is interrupt coalescence rather than the NIC's reaction time.
COALESCENCE_MIN_US = 5.0
#: Times decoded from captures are whole nanoseconds: three decimals in microseconds.
NS_DECIMALS = 3


@dataclass
class Item:
    """One number of the report, its 95% half-width (if any), unit, where it came from, what was expected."""

    label: str
    value: Any
    unit: str
    source: str
    expected: Any = None
    ci95: Any = None
    #: decimals of a value without an uncertainty, its measurement's resolution (times from ns tables: 3 in us)
    decimals: int | None = None
    #: the standard uncertainty the time stamps' resolution gives the value (Type B, part of ``ci95``)
    resolution_u: float | None = None


@dataclass
class Table:
    """Rows under named columns. ``uncertainty`` maps a value column to the column holding its 95% half-width
    (the page rounds the value to it); ``decimals`` fixes a column's decimals; ``resolution`` maps a value column
    to the standard uncertainty its time stamps' resolution gives it (Type B, the column's unit; one number, or
    one per row), part of its half-width or, without one, what its decimals follow; ``resolution_text`` says what
    that resolution is; ``excerpt`` says which rows these are when they are not all of them ("first 8 of 2000
    rows"); ``settings`` are columns of values the run was given (a spacing), printed as given."""

    title: str
    columns: list[str]
    rows: list[list[Any]]
    source: str
    note: str = ""
    excerpt: str = ""
    uncertainty: dict[str, str] = field(default_factory=dict)
    decimals: dict[str, int] = field(default_factory=dict)
    settings: tuple[str, ...] = ()
    resolution: dict[str, Any] = field(default_factory=dict)
    resolution_text: str = ""

    def resolution_u(self, column: str, row: int) -> float | None:
        """The Type B standard uncertainty of a cell (None: none stated)."""
        r = self.resolution.get(column)
        return r[row] if isinstance(r, (list, tuple)) else r


def excerpt(shown: int, total: int, what: str = "rows") -> str:
    """"first 8 of 2000 rows" when ``shown`` < ``total``, else nothing."""
    return f"first {shown} of {total:,} {what}" if shown < total else ""


@dataclass
class Chart:
    """A figure: its PNG, caption and the marks each panel draws (:class:`nicrig.analysis.figures.Drawing`)."""

    title: str
    png: bytes
    caption: str
    panels: tuple[int, ...] = ()


def chart(sec: Section, title: str, drawing: figures.Drawing, caption: str, nothing: str,
          given: Sequence[str] = ()) -> None:
    """Add a figure to ``sec``, or, when it shows nothing (a single point, an empty panel), the sentence
    ``nothing`` saying why instead (``given``: the settings it names). Panels the drawing left out are named in
    the caption."""
    if not drawing.shows_something:
        sec.text.append(Sentence(f"{title}: no figure, {nothing}.", given=given))
        return
    left = f" Not drawn: {'; '.join(drawing.left_out)}." if drawing.left_out else ""
    sec.charts.append(Chart(title, drawing.png, caption + left, drawing.panels))


@dataclass
class Section:
    """A part of the report. ``template`` names the template that draws it (``sections/<template>.html.j2``;
    ``generic`` draws text, items, figures and tables), ``data`` anything more such a template needs;
    ``simulated`` says what the simulated rig modelled when no real hosts measured the file."""

    title: str
    file: str
    items: list[Item] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    template: str = "generic"
    data: dict[str, Any] = field(default_factory=dict)
    simulated: str = ""
    anchor: str = ""


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


# -- udpmon latency ------------------------------------------------------------------------------

#: The stats table's columns of times read straight from the round trips (to the time stamps' resolution).
RTT_TIME_COLUMNS = ("min (us)", "median (us)", "mean (us)", "p99 (us)", "max (us)")


def _stats_table(est: latency.LatencyEstimate, src: str, step: str | None = None,
                 res: resolution.Resolution | None = None) -> Table:
    head = ["step"] if step is not None else []
    rows = []
    for s, f in zip(est.sizes, est.frames):
        st = est.stats[int(s)]
        rows.append([*([step] if step is not None else []), int(s), int(f), st.count, st.timeouts, st.min_us,
                     st.median_us, st.mean_us, st.percentiles_us[99], st.max_us, st.fwhm_us, st.fwhm_ci95_us])
    u_q = rectangular(est.step_us)
    return Table(latency.STATS_TABLE + (" and step" if step is not None else ""),
                 [*head, "size (bytes)", "frames", "count", "timeouts", *RTT_TIME_COLUMNS, "FWHM (us)",
                  "FWHM ± 95% (us)"], rows,
                 f"{src} (rtt_ns per size_bytes over every round; -1 = timeout); FWHM (full width at half maximum "
                 "of the highest peak) from a kernel density estimate at the interpolated half-maximum crossings",
                 uncertainty={"FWHM (us)": "FWHM ± 95% (us)"},
                 resolution={**{c: u_q for c in RTT_TIME_COLUMNS}, "FWHM (us)": math.sqrt(2) * u_q},
                 resolution_text=res.text if res else "")


def _rounds_table(est: latency.LatencyEstimate, src: str, res: resolution.Resolution | None = None) -> Table:
    stats = list(est.values)
    columns = ["size (bytes)", "frames", "rounds"]
    unc = {}
    for stat in stats:
        # the mean over the rounds of each visit's statistic: not the size's overall minimum (the first table's)
        v, u = f"{STAT_LABEL[stat]} (us, mean of the rounds)", f"{STAT_LABEL[stat]} ± 95% (us)"
        columns += [v, u]
        unc[v] = u
    columns.append("suspect (left out of the line on)")
    rows = []
    for k, s in enumerate(est.sizes):
        row = [int(s), int(est.frames[k]), int(est.visits[k])]
        for stat in stats:
            row += [float(est.values[stat][k]), float(est.values_ci95[stat][k])]
        row.append(", ".join(stat for stat in stats if est.suspect[stat][k]) or "–")
        rows.append(row)
    return Table("Per-round values the lines go through", columns, rows,
                 f"{src}: each visit (a size in one round, latency/rtt's round column) reduced to its "
                 f"{', '.join(STAT_LABEL[stat] for stat in stats)}, then the mean over the rounds with a Student t 95% "
                 "interval",
                 uncertainty=unc, resolution={v: [float(u) for u in est.values_resolution_u[stat]]
                                              for stat, v in zip(stats, unc)},
                 resolution_text=res.text if res else "")


#: Correlations and shares of variance: three decimals say all they can.
FIT_DECIMALS = {"r": 3, "R²": 3}
FIT_UNCERTAINTY = {latency.SLOPE: latency.SLOPE_U, latency.INTERCEPT: latency.INTERCEPT_U}


def _fit_row(f: latency.LineFit) -> list[Any]:
    return [STAT_LABEL[f.statistic], f.frames, f.points, f.rounds, f.slope_us_per_byte, f.slope_ci95,
            f.intercept_us, f.intercept_ci95, f.r, f.r_squared if f.r_squared >= 0 else None, f.lack_of_fit_p,
            ", ".join(map(str, f.suspect_sizes)) or "none"]


def _fit_resolution(fits: Sequence[latency.LineFit]) -> dict[str, list[float]]:
    return {latency.SLOPE: [f.slope_resolution_u for f in fits],
            latency.INTERCEPT: [f.intercept_resolution_u for f in fits]}


def _fit_source(src: str, est: latency.LatencyEstimate) -> str:
    return (f"{src}: least squares through each round's per-size values, per frame count; the line is the mean of "
            f"the rounds' lines; 95% intervals: {est.interval_method}; a size is suspect when its mean residual "
            f"over the rounds is more than one resolution step and beyond the "
            f"{100 * latency.rounds.FLAG_ALPHA:g}% Bonferroni bound; R² below zero (–) when the line fits the "
            "per-size values worse than their mean")


def _modes_table(est: latency.LatencyEstimate, src: str) -> Table:
    return Table(latency.MODES_TABLE,
                 [latency.MODE_LOCATION, "above the fastest mode (us)", "round trips", latency.MODE_SHARE,
                  "main mode"],
                 [[m.location_us, m.offset_us, m.count, 100 * m.share, "yes" if m.main else ""] for m in est.modes],
                 f"{src}: peaks of a kernel density estimate of every round trip less its size's "
                 f"{latency.BASELINE_PERCENTILE}th percentile, the kernel no narrower than the time stamps' "
                 f"resolution and peaks closer than {latency.density.MODE_MIN_STEPS} resolution steps taken as one; "
                 "each mode runs "
                 "from valley to valley; the RTT at the smallest size is that size's percentile plus the peak",
                 decimals={latency.MODE_LOCATION: 1, "above the fastest mode (us)": 1, latency.MODE_SHARE: 0})


def simulated_text(simulation: dict[str, Any] | None) -> str:
    """What a simulated file modelled, for the section's banner ("" for a run between real hosts)."""
    if simulation is None:
        return ""
    said = ", ".join(f"{k} {v}" for k, v in simulation.items() if isinstance(v, (str, int, float)))
    return "no real hosts measured this file: the simulated rig did" + (f" ({said})" if said else "")


def latency_section(name: str, rtt_table: np.ndarray, settings: dict[str, Any], options: Options,
                    loopback: bool, simulation: dict[str, Any] | None = None) -> Section:
    """Latency results: statistics per size, per-round values, modes, lines per statistic, what they support."""
    src = f"{name}: latency/rtt"
    sec = Section(f"Request-response latency: {name}", name, simulated=simulated_text(simulation))
    mtu = int(settings.get("mtu", 1500))
    res = resolution.results(simulation, "latency")
    est = latency.estimate(rtt_table, mtu, step_ns=res.step_ns)
    sec.items += [Item("response sizes", len(est.sizes), "", src),
                  Item("round trips", est.round_trips, "", src),
                  Item("timeouts", est.timeouts, "", src),
                  Item("rounds", est.rounds, "", f"{src} (round)"),
                  Item("order of the sizes in each round", est.order, "", f"{src} (position)"
                       + (f"; random order seeded with {settings['order_seed']} (settings)"
                          if "order_seed" in settings else "")),
                  Item("statistic the lines are fitted on", STAT_LABEL[est.statistic], "", src),
                  Item(latency.RESOLUTION_ITEM, res.step_ns, "ns",
                       f"{src}: {res.text}", decimals=0)]
    sec.tables.append(_stats_table(est, src, res=res))
    sec.tables.append(_rounds_table(est, src, res))
    if len(est.modes) > 1:
        sec.tables.append(_modes_table(est, src))
    fits = [f for fl in est.fits.values() for f in fl]
    sec.tables.append(Table(FITS_TABLE, FIT_COLUMNS, [_fit_row(f) for f in fits], _fit_source(src, est),
                            uncertainty=FIT_UNCERTAINTY, decimals=FIT_DECIMALS, resolution=_fit_resolution(fits),
                            resolution_text=res.text))
    slope = (float(expected.expected_slope_us_per_byte(list(options.path), options.path_mode))
             if options.path else None)
    path = f"{', '.join(e.name for e in options.path)}, {options.path_mode}" if options.path else ""
    one = est.fit(frames=1)
    if slope is not None:
        sec.items.append(Item(f"slope, 1 frame, on the {STAT_LABEL[est.statistic]}",
                              one.slope_us_per_byte if one else None, "us/byte", src, expected=slope,
                              ci95=one.slope_ci95 if one else None,
                              resolution_u=one.slope_resolution_u if one else None))
    sec.text += latency.readings(est, loopback=loopback, expected_slope_us_per_byte=slope, path=path)
    if len(est.sizes):
        chart(sec, "RTT against response size", figures.latency_vs_size(est),
              f"Each size's per-round {', '.join(STAT_LABEL[s] for s in est.values)} (mean over the rounds, 95% "
              f"bars), the lines fitted through them per frame count (legend: slope and intercept), suspect sizes "
              f"circled in red ({src}).",
              f"{len(est.sizes)} response size was measured ({int(est.sizes[0])} bytes), a single point; its "
              "values are in the tables" if len(est.sizes) == 1 else "fewer than two sizes got responses")
        answered = {s: v[v >= 0] / 1000 for s, v in latency.rtt_by_size(rtt_table).items() if (v >= 0).any()}
        shown = latency.histogram_sizes(sorted(answered))
        run_bin_us = float(settings.get("bin_us", 1.0))
        bin_us = latency.drawing_bin_us([answered[s] for s in shown], run_bin_us, res.step_ns / 1000)
        finer = (f" (in the run's {setting(run_bin_us)} us bins the round trips but the slowest 5% would span fewer "
                 f"than {latency.HISTOGRAM_MIN_BINS})" if bin_us < run_bin_us else "")
        counts = [int(answered[s].size) for s in shown]
        if counts and min(counts) >= latency.density.MIN_VALUES:
            chart(sec, "RTT histograms", figures.rtt_histograms(
                {s: answered[s] for s in shown},
                {int(s): (est.stats[int(s)].fwhm_us, est.stats[int(s)].fwhm_ci95_us) for s in est.sizes}, bin_us),
                f"Round trips of {len(shown)} of the {len(answered)} sizes that got responses "
                f"({', '.join(map(str, shown))} bytes) in bins of {setting(bin_us)} us{finer}, with the FWHM of the table "
                f"({src}).", "no size got responses")
        elif counts:
            sec.text.append(Sentence(
                f"No RTT histograms: {min(counts)} round trips of a size are too few to show a distribution (at "
                f"least {latency.density.MIN_VALUES} are needed); every round trip's statistics are in the tables."))
    return sec


# -- udpmon stream -------------------------------------------------------------------------------

RATE_UNCERTAINTY = {BEST_COLUMNS[1]: BEST_COLUMNS[2], POINT_COLUMNS[3]: POINT_COLUMNS[4],
                    BEST_COLUMNS[6]: BEST_COLUMNS[7]}
SPACING_COLUMNS = ("spacing (us)", "at spacing (us)", "no loss from (us)")
#: CPU time comes from jiffies (10 ms): whole percents.
CPU_DECIMALS = {"receiver CPU idle (%)": 0}


def _best_row(c: throughput.SizeCurve) -> list[Any]:
    return [c.size_bytes, c.max_user_rate_mbps, c.max_user_rate_ci95_mbps, c.spacing_at_max_us, c.knee_spacing_us,
            c.theoretical_max_user_mbps, 100 * c.max_user_rate_mbps / c.theoretical_max_user_mbps,
            100 * c.max_user_rate_ci95_mbps / c.theoretical_max_user_mbps, c.frame_time_on_wire_us]


def _best_resolution(curves: Sequence[throughput.SizeCurve]) -> dict[str, list[float]]:
    return {BEST_COLUMNS[1]: [c.max_user_rate_resolution_u_mbps for c in curves],
            BEST_COLUMNS[6]: [100 * c.max_user_rate_resolution_u_mbps / c.theoretical_max_user_mbps for c in curves]}


def _point_rows(c: throughput.SizeCurve) -> list[list[Any]]:
    return [[c.size_bytes, c.spacing_us[k], int(c.rounds[k]), c.user_rate_mbps[k], c.user_rate_ci95_mbps[k],
             c.wire_rate_mbps[k], int(c.sent[k]), int(c.lost[k]), c.loss_pct[k], c.receiver_cpu_idle_pct[k],
             c.receiver_interrupts_per_packet[k]] for k in range(c.spacing_us.size)]


def _point_resolution(curves: Sequence[throughput.SizeCurve]) -> dict[str, list[float]]:
    return {POINT_COLUMNS[3]: [float(u) for c in curves for u in (c.user_rate_resolution_u_mbps
                                                                  if c.user_rate_resolution_u_mbps is not None
                                                                  else np.zeros(c.spacing_us.size))]}


def _best_source(src: str) -> str:
    return (f"{src} (user rates recomputed from stream/received, spacing_us, lost); link maxima computed as "
            f"{PAI}, §3.3")


def _point_source(src: str) -> str:
    return (f"{src} per size and spacing over the rounds: user rate from stream/received (receive_rate: bursts "
            "timestamped together spread back at the wire's pace, never above the link), mean over the rounds with "
            "a Student t 95% interval (one round: the interval from the stream's blocks) and the time stamps' "
            "resolution; wire_rate_mbps, sent, lost, remote_cpu_busy_pct, remote_interrupts, received")


def stream_curves(points: np.ndarray, received: np.ndarray | None, settings: dict[str, Any],
                  link_rate_bps: float | None, wire_overhead: int,
                  step_ns: float = resolution.RESULTS_FILE_NS) -> list[throughput.SizeCurve]:
    """The per-size curves of a stream run, its rates recomputed from the raw datagrams (time stamps read to
    ``step_ns``) at ``link_rate_bps``."""
    mtu = int(settings.get("mtu", 1500))
    if received is not None:
        points = throughput.rates_from_received(points, received, link_rate_bps=link_rate_bps, mtu=mtu,
                                                wire_overhead=wire_overhead, step_ns=step_ns)
    return throughput.size_curves(points, link_rate_bps=link_rate_bps, mtu=mtu)


def _link_item(link_rate_bps: float | None) -> Item:
    return Item("link the rates are held to", link_rate_bps / 1e6 if link_rate_bps else "none (no link stated)",
                "Mbit/s" if link_rate_bps else "", "--link-rate, else the stream/points attribute link_mbps, else "
                "1 Gbit/s (none over loopback)")


def _stream_chart(sec: Section, title: str, curves: Sequence[throughput.SizeCurve], caption: str,
                  labels: Sequence[str] | None = None) -> None:
    spacings = sorted({float(v) for c in curves for v in c.spacing_us})
    chart(sec, title, figures.throughput_vs_spacing(curves, labels), caption,
          f"one spacing was measured ({setting(spacings[0])} us), a single point on each axis; its numbers are "
          "in the tables" if len(spacings) == 1 else "no rate was measured",
          given=[f"{setting(v)} us" for v in spacings])


def stream_section(name: str, curves: list[throughput.SizeCurve], link_rate_bps: float | None,
                   simulation: dict[str, Any] | None = None) -> Section:
    src = f"{name}: stream/points"
    sec = Section(f"Throughput against transmit spacing: {name}", name, simulated=simulated_text(simulation))
    res = resolution.results(simulation, "stream")
    sec.items.append(_link_item(link_rate_bps))
    sec.tables.append(Table(BEST_TABLE, BEST_COLUMNS, [_best_row(c) for c in curves], _best_source(src),
                            uncertainty=RATE_UNCERTAINTY, settings=SPACING_COLUMNS, resolution=_best_resolution(curves),
                            resolution_text=res.text))
    sec.tables.append(Table(POINTS_TABLE, POINT_COLUMNS, [r for c in curves for r in _point_rows(c)],
                            _point_source(src), uncertainty=RATE_UNCERTAINTY, settings=SPACING_COLUMNS,
                            decimals=CPU_DECIMALS, resolution=_point_resolution(curves), resolution_text=res.text))
    sec.text += [throughput.interpret_curve(c) for c in curves]
    if curves:
        _stream_chart(sec, "Throughput against transmit spacing", curves,
                      f"User rate per size with 95% bars (dotted: the offered load, size / spacing), loss, the "
                      f"receiving host's CPU idle time and interrupts per packet ({src}).")
    return sec


# -- the CPU model, from the load tables ---------------------------------------------------------

#: Geist et al.'s coefficients for TCP on their hosts, jiffies: per MB, per 1000 packets, per 1000 interrupts.
GEIST_TCP = {"alpha": 0.1, "beta": 0.4, "gamma": 1.4}
GEIST_TCP_TEXT = ", ".join(f"{k} {v:g}" for k, v in GEIST_TCP.items()) + " jiffies"
CPU_TABLE = "T = alpha N_MB + beta N_KP + gamma N_KI per host"
CPU_COLUMNS = ["host", "points", "alpha, per MB (jiffies)", "alpha ± 95%", "beta, per 1000 packets (jiffies)",
               "beta ± 95%", "gamma, per 1000 interrupts (jiffies)", "gamma ± 95%", "R²", "interrupts counted",
               "status"]


@dataclass(frozen=True)
class HostLoad:
    """One host's ``load`` rows from every file (and sweep step) given, and the (file, table) they came from."""

    host: str
    sources: tuple[tuple[str, str], ...]
    rows: np.ndarray

    @property
    def source(self) -> str:
        """``a.h5: load; b.h5: sweep/step0/load, sweep/step1/load``."""
        tables: dict[str, list[str]] = {}
        for file, table in self.sources:
            tables.setdefault(file, []).append(table)
        return "; ".join(f"{file}: {', '.join(t)}" for file, t in tables.items())


def _undetermined(fit: cpu.CpuModelFit) -> list[str]:
    """The coefficients whose 95% interval includes zero."""
    return [name for name, v, ci in (("alpha", fit.alpha_per_mbyte, fit.alpha_ci95),
                                     ("beta", fit.beta_per_kpacket, fit.beta_ci95),
                                     ("gamma", fit.gamma_per_kinterrupt, fit.gamma_ci95)) if abs(v) <= ci]


def _coefficients(q: Quotes, host: str, fit: cpu.CpuModelFit) -> str:
    """"alpha 0.12 ± 0.22, beta 0.26 ± 0.31, gamma 27.9 ± 5.1", each as the table prints it (quoted)."""
    return ", ".join(f"{name} {q.measured(CPU_TABLE, CPU_COLUMNS[k], CPU_COLUMNS[k + 1], value, ci, row=host)}"
                     for k, name, value, ci in ((2, "alpha", fit.alpha_per_mbyte, fit.alpha_ci95),
                                                (4, "beta", fit.beta_per_kpacket, fit.beta_ci95),
                                                (6, "gamma", fit.gamma_per_kinterrupt, fit.gamma_ci95)))


def cpu_section(hosts: Sequence[HostLoad]) -> Section:
    """Geist et al.'s CPU model T = alpha N_MB + beta N_KP + gamma N_KI, fitted per host over every point given."""
    files = list(dict.fromkeys(file for h in hosts for file, _ in h.sources))
    sec = Section(f"CPU model ({GEIST}), from the load tables", ", ".join(files))
    rows, fits, text = [], {}, []
    q = Quotes()
    for h in hosts:
        sources = ", ".join(sorted(load.interrupt_sources(h.rows)))
        try:
            fit = load.fit(h.rows)
        except UsageError as exc:
            rows.append([h.host, len(h.rows), *[None] * 7, sources, f"not fitted: {exc}"])
            text.append(Sentence(f"{h.host}: not fitted: {exc}."))
            continue
        loose = _undetermined(fit)
        fits[h.host] = fit
        rows.append([h.host, fit.runs, fit.alpha_per_mbyte, fit.alpha_ci95, fit.beta_per_kpacket, fit.beta_ci95,
                     fit.gamma_per_kinterrupt, fit.gamma_ci95, fit.r_squared, sources,
                     f"{', '.join(loose)} undetermined (95% interval includes zero)" if loose else "fitted"])
        text.append(q.sentence(
            f"{h.host}: T = alpha N_MB + beta N_KP + gamma N_KI with {_coefficients(q, h.host, fit)} jiffies over "
            f"{q(CPU_TABLE, CPU_COLUMNS[1], str(fit.runs), h.host)} points (R² {q(CPU_TABLE, 'R²', number(fit.r_squared, decimals=2), h.host)})"
            + (f"; {', '.join(loose)} not determined by these points: their 95% interval includes zero "
               "(a jiffy is 10 ms: run longer points over more sizes and interrupt rates)." if loose else "."),
            given=["10 ms"]))
    sec.tables.append(Table(
        CPU_TABLE, CPU_COLUMNS, rows,
        " | ".join(f"{h.host}: {h.source}" for h in hosts)
        + " (kernel_jiffies, megabytes, kilo_packets, kilo_interrupts of each host's rows)",
        note=f"least squares without intercept; {GEIST} found {GEIST_TCP_TEXT} for TCP",
        uncertainty={CPU_COLUMNS[2]: CPU_COLUMNS[3], CPU_COLUMNS[4]: CPU_COLUMNS[5], CPU_COLUMNS[6]: CPU_COLUMNS[7]},
        decimals={"R²": 2}))
    text.append(Sentence(f"{GEIST} found {GEIST_TCP_TEXT} (TCP, 1.6 GHz Pentium 4 hosts): the per-interrupt cost "
                         "dominates, which interrupt coalescence reduces.", given=[GEIST_TCP_TEXT]))
    if any("host" in load.interrupt_sources(h.rows) for h in hosts):
        text.append(Sentence("Where 'interrupts counted' says host, the interface has no interrupt lines of its own "
                             "(veth, loopback) and N_KI counts every interrupt of the host."))
    sec.text += text
    if fits:
        chart(sec, "Kernel CPU time: observed against the model", figures.cpu_model(fits),
              "Each point's system + irq + softirq jiffies on each host against its fitted model (the load tables "
              "named under the table).", "fewer than two points were fitted")
    return sec


# -- udpmon suite and aggregate ------------------------------------------------------------------

BENCH_COLUMNS = ["#", "test", f"{PAI}, figures", "size (bytes)", "best loss-free offered load", "offered unit",
                 "throughput", "unit", "theoretical maximum", "% of theoretical", "lost at best trial",
                 "sent at best trial", "loss at best trial (%)", "trials", "limited by", "status"]
#: Bars longer than this share of the theoretical maximum are cut (TCP through memory reaches 1000s of %).
BAR_CAP_PCT = 150.0


def _bench_row(b: suite.Benchmark, line_rate: bool) -> list[Any]:
    """A test's row; without a line rate (loopback, veth) no maximum and no share of one."""
    return [b.paper_test, b.title, b.figures, b.size_bytes, b.best_loss_free_offered, b.offered_unit, b.throughput,
            b.unit, b.theoretical if line_rate else None, b.percent_of_theoretical if line_rate else None, b.lost,
            b.sent, b.loss_pct, b.trials, b.limited_by, b.status]


def _suite_source(name: str, prefixes: Sequence[str] = ("",)) -> str:
    tables = ", ".join(f"{p}suite/{t}" for p in prefixes for t in ("tests", "trials", "flows"))
    return (f"{name}: {tables}. Each trial's throughput: its flows' received, bytes, first_ns and last_ns "
            "(suite/flows); the best trial as udpmon chooses it; maxima at the link_mbps and mtu attributes of "
            "suite/tests")


def _suite_chart(sec: Section, title: str, runs: Sequence[tuple[str, suite.SuiteRun]], src: str) -> None:
    """Bars of every test's share of its maximum, one bar per run (or step) in each test's row; none where no run
    has a line rate to compare with."""
    runs = [(label, r) for label, r in runs if r.line_rate_known]
    if not runs:
        sec.text.append(Sentence(f"{title}: no figure, the interface states no line rate (loopback and veth move "
                                 "data through memory), so there is no maximum to show a share of; the throughputs "
                                 "are in the table."))
        return
    names = list(dict.fromkeys(b.name for _, r in runs for b in r.benchmarks))
    series, notes = {}, {}
    for label, r in runs:
        got = [next((b for b in r.benchmarks if b.name == n), None) for n in names]
        series[label] = np.array([b.percent_of_theoretical if b else math.nan for b in got])
        notes[label] = [f"{number(b.throughput)} of {number(b.theoretical)} {b.unit}" if b else "" for b in got]
    categories = [f"{t.paper_test}. {t.title}" for t in (suite.TESTS_BY_NAME[n] for n in names)]
    chart(sec, title, figures.grouped_bars(categories, series, "% of the theoretical maximum", notes=notes,
                                           reference=100.0, cap=BAR_CAP_PCT, unit="%"),
          f"As {PAI}, figures 5-11: each test's best throughput as a share of the most a perfect NIC could reach at "
          f"the link rate, the value beside each bar; bars beyond {BAR_CAP_PCT:g}% are cut and labelled ({src}).",
          "fewer than two tests were measured")


def _interpret_suite(run: suite.SuiteRun, table: str) -> list[Sentence]:
    """Pai, Rixner and Kim's three readings (§4.5), where the tests that show them were run, quoting ``table``."""
    by = {b.name: b for b in run.benchmarks}
    text = []
    q = Quotes()
    if not run.line_rate_known:
        text.append(Sentence(f"The interface states no line rate ({run.link_source.removeprefix('assumed: ')}): "
                             "loopback and veth have none to compare these throughputs with, so the table gives no "
                             "theoretical maximum and no share of one."))
    over = [b.title for b in run.benchmarks if b.percent_of_theoretical > 105]
    if over and run.line_rate_known:
        text.append(Sentence(f"{', '.join(over)}: above the link's maximum, so no {run.link_mbps:g} Mbit/s Ethernet "
                             "link lay on the path (veth and loopback move data through memory).",
                             given=[f"{run.link_mbps:g} Mbit/s"]))
    lossy = [b.title for b in run.benchmarks if b.trials and not b.lossless]
    if lossy:
        text.append(Sentence(f"No loss-free trial for {', '.join(lossy)}: the least lossy trial is shown; the hosts "
                             "lost datagrams or connection attempts at every rate tried (socket buffers, a descheduled "
                             "receiver)."))
    small = [b for b in (by.get("udp-send-18"), by.get("udp-recv-18")) if b is not None and b.trials]
    large = [b for b in (by.get("udp-send-1472"), by.get("udp-recv-1472")) if b is not None and b.trials]
    if run.line_rate_known and small and large and max(b.percent_of_theoretical for b in small) < 50 <= min(
            b.percent_of_theoretical for b in large):
        text.append(Sentence("Small datagrams reach under half their maximum while large ones do not: per-frame "
                             f"overheads, not per-byte ones, limit this host ({PAI}, §4.2)."))
    for size in (1472, 18):
        three, send, recv = (by.get(f"udp-{k}-{size}") for k in ("3way", "send", "recv"))
        if all(b is not None and b.trials for b in (three, send, recv)):
            both = send.throughput + recv.throughput
            share = three.throughput / both if both > 0 else math.nan
            if math.isfinite(share):
                said = q(table, "throughput", number(three.throughput))
                text.append(q.sentence(
                    f"3-way, {size}-byte datagrams: {said} Mbit/s, {100 * share:.0f}% of send + receive apart "
                    f"({number(both)} Mbit/s)"
                    + (f": send and receive paths share a limited resource ({PAI}, §4.3)." if share < 0.9
                       else f": the send and receive paths do not hold each other back ({PAI}, §4.3)."),
                    given=[f"{100 * share:.0f}%", f"{number(both)} Mbit/s"]))
    bad = suite.disagreements(run.benchmarks)
    if bad:
        text.append(Sentence(f"Rebuilt from the flows, {', '.join(bad)} differ from suite/tests: the file is "
                             "inconsistent."))
    return text


SUITE_TABLE = f"Throughput per test against the theoretical maximum ({PAI}, figures 5-11)"


def suite_section(name: str, run: suite.SuiteRun) -> Section:
    """Pai, Rixner and Kim's microbenchmarks (figures 5-11): each test's best trial against the theoretical
    maximum, where the interface states a line rate."""
    src = _suite_source(name)
    sec = Section(f"NIC microbenchmarks ({PAI}): {name}", name)
    sec.items += [Item("link rate of the maxima", run.link_mbps if run.line_rate_known else "none stated",
                       "Mbit/s" if run.line_rate_known else "",
                       f"{name}: suite/tests attribute link_mbps ({run.link_source})"),
                  Item("MTU of the TCP maxima", run.mtu, "bytes", f"{name}: suite/tests attribute mtu")]
    sec.tables.append(Table(SUITE_TABLE, BENCH_COLUMNS, [_bench_row(b, run.line_rate_known) for b in run.benchmarks],
                            src, note="sent: datagrams (UDP), bytes (TCP), connection attempts; offered load per flow"))
    sec.text += _interpret_suite(run, SUITE_TABLE)
    _suite_chart(sec, "Throughput per test, % of the theoretical maximum", [(name, run)], src)
    return sec


FLOW_COLUMNS = ["host", "address", "direction", "protocol", "size (bytes)", "sent", "received", "lost", "lost (%)",
                "Mbit/s"]


def _flow_rows(agg: suite.Aggregate, addresses: dict[str, str]) -> list[list[Any]]:
    rows = [[f.label, addresses.get(f.label, ""), f.direction, f.protocol, f.size_bytes, f.sent, f.received, f.lost,
             100 * f.lost / f.sent if f.sent else math.nan, f.rate_mbps] for f in agg.flows]
    first = agg.flows[0]
    rows.append(["total (sum)", "", first.direction, first.protocol, None, agg.sent, agg.received, agg.lost,
                 100 * agg.lost / agg.sent if agg.sent else math.nan, agg.sum_rate_mbps])
    return rows


def _aggregate_source(name: str, prefixes: Sequence[str] = ("",)) -> str:
    return (f"{name}: {', '.join(p + 'aggregate/flows' for p in prefixes)} (sent, received, lost, bytes, first_ns, "
            "last_ns of each flow), hosts (address); the total sums the flows as aggregate/total does")


FLOWS_TABLE = "Flows and their total"


def aggregate_section(name: str, agg: suite.Aggregate, addresses: dict[str, str]) -> Section:
    """Flows to or from several daemons at once: each flow's rate and their total (Geist et al.'s N senders)."""
    src = _aggregate_source(name)
    sec = Section(f"Aggregate throughput: {name}", name)
    sec.items += [Item("total, sum of the flows' rates", agg.sum_rate_mbps, "Mbit/s", src),
                  Item("total over the flows' common span", agg.span_rate_mbps, "Mbit/s",
                       f"{src}; defined when every flow arrived on one clock")]
    sec.tables.append(Table(FLOWS_TABLE, FLOW_COLUMNS, _flow_rows(agg, addresses), src,
                            note="sent and received: datagrams (UDP) or bytes (TCP)"))
    sec.text += _interpret_aggregate(agg, FLOWS_TABLE)
    labels = [f.label for f in agg.flows] + ["total (sum)"]
    chart(sec, "Throughput per flow and in total", figures.grouped_bars(
        labels, {name: np.array([f.rate_mbps for f in agg.flows] + [agg.sum_rate_mbps])}, "Mbit/s at the receiver",
        notes={name: [f"{number(v)} Mbit/s" for v in [f.rate_mbps for f in agg.flows] + [agg.sum_rate_mbps]]}),
        f"Each flow's receiver rate and their sum ({src}).", "no flow has a rate")
    return sec


def _interpret_aggregate(agg: suite.Aggregate, table: str) -> list[Sentence]:
    """What the flows of ``table`` add up to; the rate over their common span from the section's item (a sweep's
    section has none: there it is stated as given)."""
    q = Quotes()
    rates = [f.rate_mbps for f in agg.flows]
    text = [q.sentence(f"{len(rates)} flows, {q(table, 'Mbit/s', number(agg.sum_rate_mbps))} Mbit/s "
                       f"together; the slowest {q(table, 'Mbit/s', number(min(rates)))}, the fastest "
                       f"{q(table, 'Mbit/s', number(max(rates)))} Mbit/s"
                       + (f"; {agg.lost} of {agg.sent} lost." if agg.lost else ", nothing lost."))]
    if math.isfinite(agg.span_rate_mbps):
        span = (q("", "total over the flows' common span", number(agg.span_rate_mbps)) if table == FLOWS_TABLE
                else number(agg.span_rate_mbps))
        text.append(q.sentence(f"Over the span from the first arrival of any flow to the last of any: {span} Mbit/s; "
                               "well below the sum, it says the flows did not all run at the same time.",
                               given=[] if table == FLOWS_TABLE else [f"{span} Mbit/s"]))
    return text


def suite_correlation_section(runs: Sequence[tuple[str, str, suite.SuiteRun]]) -> Section:
    """Pai, Rixner and Kim's Table 2 arithmetic over the suite runs given, (file, label, run) each: tests against
    tests.

    The items are the runs: files (one NIC or host pair each) and sweep steps.
    """
    columns, dropped = suite.throughput_columns([(label, r.benchmarks) for _, label, r in runs])
    names = list(columns)
    labels = [label for _, label, _ in runs]
    src = f"the throughput column of the tables above ({', '.join(labels)})"
    sec = Section(f"Microbenchmarks across runs ({PAI}, Table 2)", ", ".join(dict.fromkeys(f for f, _, _ in runs)))
    sec.tables.append(Table("Throughput per run and test", ["run", *names],
                            [[label, *[float(columns[n][k]) for n in names]] for k, label in enumerate(labels)], src))
    if dropped:
        sec.text.append(Sentence(f"Left out, not measured in every run: {', '.join(dropped)}."))
    if len(runs) < 3 or len(names) < 2:
        sec.text.append(Sentence(f"Correlation undetermined: {len(runs)} run(s) and {len(names)} test(s) measured in "
                                 f"all; Pearson coefficients need at least 3 runs (NICs, files or sweep steps; {PAI} "
                                 "had six NICs) and 2 tests."))
        return sec
    corr = cpu.correlation(columns, names, names)
    sec.tables.append(Table(f"Correlation coefficients between the tests (Pearson, as {PAI}, Table 2)",
                            ["test", *names], [[n, *corr.coefficients[k].tolist()] for k, n in enumerate(names)],
                            f"{src}; {corr.items} runs", decimals={n: 2 for n in names}))
    flat = [n for n in names if np.ptp(columns[n]) == 0]
    if flat:
        sec.text.append(Sentence(f"{', '.join(flat)} did not vary across the runs: no coefficient (–)."))
    sec.text.append(Sentence(
        f"Over {corr.items} runs: near ±1 two tests rise and fall together across the runs, near 0 they do not. "
        f"{PAI} correlated each test with application throughput across six NICs; give the applications' numbers "
        "with --correlation for that table. Few runs make the coefficients indications, not proof."))
    return sec


# -- udpmon sweeps -------------------------------------------------------------------------------

def _per_step(said: Sequence[tuple[str, list[str]]]) -> list[Sentence]:
    """Each step's sentences, a sentence several steps share said once with all their names."""
    steps: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    for label, lines in said:
        for line in lines:
            steps.setdefault(line, []).append(label)
            first.setdefault(line, line)
    return [prefixed(f"{', '.join(labels)}: ", first[line]) for line, labels in steps.items()]


def _paths(name: str, steps: Sequence[sweeps.Step], table: str) -> str:
    return f"{name}: " + ", ".join(f"{s.prefix}{table}" for s in steps)


def _sweep_section(name: str, kind: str, steps: Sequence[sweeps.Step], applied: np.ndarray | None,
                   swept: Sequence[str], loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """A swept run's section with what every sweep section shows: the steps, the settings read back, host load."""
    names = " and ".join(dict.fromkeys(k.replace("_", "-") for s in steps for k in s.settings))
    sec = Section(f"Sweep of {names} ({kind}): {name}", name)
    sec.items += [Item("swept", "; ".join(swept) or ", ".join(s.label for s in steps), "",
                       f"{name}: settings attribute (sweep)"),
                  Item("steps", len(steps), "", f"{name}: sweep/steps")]
    if applied is not None and len(applied):
        label = {s.index: s.label for s in steps}
        sec.tables.append(Table("Settings in force per step (read back from each host)",
                                ["step", "host", "interface", "setting", "before", "value"],
                                [[label.get(int(r["step"]), int(r["step"])), *(r[c].decode() for c in
                                  ("host", "interface", "setting", "before", "value"))] for r in applied],
                                f"{name}: sweep/applied"))
    rows = []
    for step, table in loads:
        for host, mine in load.by_host(table).items():
            m = load.host_metrics(mine)
            rows.append([step.label, host, m.points, m.interval_s, m.throughput_mbps, m.interrupts_per_s,
                         m.packets_per_interrupt, m.kernel_cpu_pct, m.kernel_jiffies_per_mbyte])
    if rows:
        sec.tables.append(Table(
            f"Host load per step (the metrics of {GEIST})",
            ["step", "host", "points", "seconds", "throughput, mean (Mbit/s)", "interrupts/s", "packets per interrupt",
             "kernel CPU (% of one CPU)", "kernel jiffies per MB"], rows,
            _paths(name, [s for s, _ in loads], "load")
            + " (interval_s, clk_tck, kernel_jiffies, megabytes, kilo_packets, kilo_interrupts, throughput_mbps; "
              "sums over the step's points, then ratios)"))
    return sec


def _is_delay(setting: str) -> bool:
    """Whether a ``sweep/steps`` column is a delay in microseconds (ethtool -C): Hughes-Jones et al. 2003, §8's
    RxInt, TxInt."""
    return setting.endswith(("usecs", "usecs_irq"))


SWEEP_FITS_TABLE = "RTT = intercept + slope x size, per step, statistic and frame count"


def sweep_latency_section(name: str, parts: Sequence[tuple[sweeps.Step, np.ndarray, int]], *,
                          applied: np.ndarray | None, swept: Sequence[str],
                          loads: Sequence[tuple[sweeps.Step, np.ndarray]], loopback: bool) -> Section:
    """Latency per sweep step (Hughes-Jones et al. 2003, figure 8.1): mean RTT against size per setting, the lines
    of every step, and each step's intercept against the first step's where both are resolved."""
    steps = [s for s, _, _ in parts]
    src = _paths(name, steps, "latency/rtt")
    sec = _sweep_section(name, "latency", steps, applied, swept, loads)
    res = resolution.results(None, "latency")
    estimates = [(step, latency.estimate(rtt, mtu, step_ns=res.step_ns)) for step, rtt, mtu in parts]
    stats = [_stats_table(est, src, step.label, res) for step, est in estimates]
    sec.tables.append(Table(stats[0].title, stats[0].columns, [r for t in stats for r in t.rows], stats[0].source,
                            uncertainty=stats[0].uncertainty, decimals=stats[0].decimals,
                            resolution=stats[0].resolution, resolution_text=res.text))
    first_step, first = estimates[0]
    base = {(f.statistic, f.frames): f for fl in first.fits.values() for f in fl}
    fits = [(step, f) for step, est in estimates for fl in est.fits.values() for f in fl]
    change = f"intercept - {first_step.label}'s (us)"
    fit_rows = [[step.label, *_fit_row(f), *_change(f, base.get((f.statistic, f.frames)))] for step, f in fits]
    sec.tables.append(Table(SWEEP_FITS_TABLE, ["step", *FIT_COLUMNS, change, f"{change[:-5]} ± 95% (us)"], fit_rows,
                            _fit_source(src, first),
                            uncertainty={**FIT_UNCERTAINTY, change: f"{change[:-5]} ± 95% (us)"},
                            decimals=FIT_DECIMALS, resolution=_fit_resolution([f for _, f in fits]),
                            resolution_text=res.text))
    sec.text += _main_mode_defined(estimates)
    sec.text += latency.lack_of_fit_said([f.lack_of_fit_p for _, f in fits])
    sec.text += _step_intercepts(estimates, change)
    if loopback:
        sec.text.append(Sentence("Measured over loopback: no NIC lies on the path, so coalescence settings cannot "
                                 "act."))
    stacked = []
    for step, est in estimates:
        mean = np.zeros(len(est.sizes), dtype=[("size_bytes", "<i8"), ("mean_us", "<f8")])
        mean["size_bytes"], mean["mean_us"] = est.sizes, [est.stats[int(x)].mean_us for x in est.sizes]
        stacked.append((step, mean))
    intercepts = {step.label: (f.intercept_us, f.intercept_ci95) for step, est in estimates
                  if (f := est.fit("mean")) is not None}
    chart(sec, f"Mean RTT against response size per setting (as {HUGHES_JONES}, figure 8.1)",
          figures.rtt_per_setting(sweeps.curves(steps, sweeps.stacked(stacked), "size_bytes", "mean_us"), intercepts),
          f"The mean round trip of each size (the table's mean column), one curve per sweep step, the intercept of "
          f"the line on the mean in the legend ({src}).", "fewer than two sizes were measured")
    return sec


def _main_mode_defined(estimates: Sequence[tuple[sweeps.Step, latency.LatencyEstimate]]) -> list[Sentence]:
    """The sentence that defines the main mode, first of a sweep section's text, when the round trips of any step
    have several modes: that step's rows of the fits table are on the main-mode median, and the sentences
    comparing the steps may name it, whichever step comes first and whichever of them says it first."""
    labels = [step.label for step, est in estimates if est.statistic == "main mode"]
    if not labels:
        return []
    return [Sentence(f"{', '.join(labels)}: the round trips fall into several modes (host states, peaks of their "
                     "density separated by a valley), which the minimum and the mean mix, so the lines are also "
                     "fitted on the main-mode median: per round and size, the median of the round trips in the main "
                     "mode, the mode holding the most round trips.", defines=["main mode"])]


def _change(f: latency.LineFit, base: latency.LineFit | None) -> list[float]:
    """A step's intercept less the first step's and its 95% half-width (the two are independent runs)."""
    if base is None:
        return [math.nan, math.nan]
    return [f.intercept_us - base.intercept_us, math.hypot(f.intercept_ci95, base.intercept_ci95)]


def _step_intercepts(estimates: Sequence[tuple[sweeps.Step, latency.LatencyEstimate]],
                     change: str) -> list[Sentence]:
    """Each step's single-frame intercept against the first step's, on the statistic the readings use, where both
    lines are resolved; otherwise what is not. Quotes the sweep's fits table (``change``: its difference column)."""
    (first_step, first), text = estimates[0], []
    base = first.fit(first.statistic)
    why = latency.unresolved(base, first, SWEEP_FITS_TABLE, first_step.label)
    if why is not None:
        return [Sentence(f"{first_step.label}: the intercepts are not compared, {why}.", why.cites, given=why.given,
                         defines=why.defines)]
    delays = [k for k in first_step.settings if _is_delay(k)]
    q = Quotes()
    for step, est in estimates[1:]:
        f = est.fit(first.statistic)
        if first.statistic not in est.fits:  # one mode: no main-mode line, however many sizes were measured
            text.append(Sentence(f"{step.label}: not compared with {first_step.label}, whose intercept is on the "
                                 f"{STAT_LABEL[first.statistic]}: its round trips have one mode, so it has no such "
                                 "line."))
            continue
        why = latency.unresolved(f, est, SWEEP_FITS_TABLE, step.label)
        if why is not None:
            text.append(Sentence(f"{step.label}: not compared with {first_step.label}, {why}.", why.cites,
                                 given=why.given, defines=why.defines))
            continue
        diff, diff_ci = _change(f, base)
        said = q.measured(SWEEP_FITS_TABLE, latency.INTERCEPT, latency.INTERCEPT_U, f.intercept_us,
                          f.intercept_ci95, "us", step.label)
        moved = q.measured(SWEEP_FITS_TABLE, change, f"{change[:-5]} ± 95% (us)", diff, diff_ci, "us", step.label)
        line = f"{step.label}: intercept on the {STAT_LABEL[f.statistic]} {said}, {moved} against {first_step.label}"
        added = [step.settings[k] - first_step.settings[k] for k in delays]
        given = []
        if len(added) == 1:
            line += f" for {added[0]:+d} us of {delays[0].replace('_', '-')}"
            given.append(f"{added[0]:+d} us")
        text.append(q.sentence(line + ".", given=given))
    if delays and len(estimates) > 1:
        text.append(Sentence(f"{HUGHES_JONES}, §8: the RTT rises by about the added interrupt coalescence, a delay "
                             "the receiving NIC waits before interrupting."))
    return text


SWEEP_BEST_TABLE, SWEEP_POINTS_TABLE = "Best throughput per step and size", "Every size and spacing per step"


def sweep_stream_section(name: str, parts: Sequence[tuple[sweeps.Step, list[throughput.SizeCurve]]], *,
                         link_rate_bps: float | None, applied: np.ndarray | None, swept: Sequence[str],
                         loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """Streams per sweep step (Hughes-Jones et al. 2003, figures 8.2, 8.3): throughput, loss, CPU and interrupts
    per setting."""
    steps = [s for s, _ in parts]
    src = _paths(name, steps, "stream/points")
    sec = _sweep_section(name, "stream", steps, applied, swept, loads)
    several = len({c.size_bytes for _, cs in parts for c in cs}) > 1
    curves = [(step, c) for step, cs in parts for c in cs]
    res = resolution.results(None, "stream")
    sec.items.append(_link_item(link_rate_bps))
    sec.tables.append(Table(SWEEP_BEST_TABLE, ["step", *BEST_COLUMNS],
                            [[step.label, *_best_row(c)] for step, c in curves], _best_source(src),
                            uncertainty=RATE_UNCERTAINTY, settings=SPACING_COLUMNS,
                            resolution=_best_resolution([c for _, c in curves]), resolution_text=res.text))
    sec.tables.append(Table(SWEEP_POINTS_TABLE, ["step", *POINT_COLUMNS],
                            [[step.label, *r] for step, c in curves for r in _point_rows(c)], _point_source(src),
                            uncertainty=RATE_UNCERTAINTY, settings=SPACING_COLUMNS, decimals=CPU_DECIMALS,
                            resolution=_point_resolution([c for _, c in curves]), resolution_text=res.text))
    sec.text += _per_step([(step.label, [throughput.interpret_curve(c, SWEEP_BEST_TABLE, SWEEP_POINTS_TABLE,
                                                                      step.label)]) for step, c in curves])
    if curves:
        _stream_chart(sec, f"Throughput against transmit spacing per setting (as {HUGHES_JONES}, figures 8.2, 8.3)",
                      [c for _, c in curves],
                      f"User rate per sweep step with 95% bars (dotted: the offered load), loss, the receiving host's "
                      f"CPU idle time and interrupts per packet ({src}).",
                      [f"{s.label}, {c.size_bytes} B" if several else s.label for s, c in curves])
    return sec


SWEEP_SUITE_TABLE = f"Throughput per step and test against the theoretical maximum ({PAI}, figures 5-11)"


def sweep_suite_section(name: str, parts: Sequence[tuple[sweeps.Step, suite.SuiteRun]], *, applied: np.ndarray | None,
                        swept: Sequence[str], loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """Pai, Rixner and Kim's microbenchmarks per sweep step: the figures 5-11 table of every step, bars per step."""
    steps = [s for s, _ in parts]
    src = _suite_source(name, [s.prefix for s in steps])
    sec = _sweep_section(name, "suite", steps, applied, swept, loads)
    sec.tables.append(Table(SWEEP_SUITE_TABLE, ["step", "link (Mbit/s)", "MTU", *BENCH_COLUMNS],
                            [[s.label, r.link_mbps if r.line_rate_known else None, r.mtu,
                              *_bench_row(b, r.line_rate_known)] for s, r in parts for b in r.benchmarks],
                            src, note="sent: datagrams (UDP), bytes (TCP), connection attempts; offered load per flow"))
    q = Quotes()
    for n in dict.fromkeys(b.name for _, r in parts for b in r.benchmarks):
        got = [(s.label, r, b) for s, r in parts for b in r.benchmarks if b.name == n and math.isfinite(b.throughput)]
        if got:
            label, run, best = max(got, key=lambda x: x[2].throughput)
            share = (f" ({q(SWEEP_SUITE_TABLE, '% of theoretical', number(best.percent_of_theoretical), label)}% of "
                     f"{q(SWEEP_SUITE_TABLE, 'theoretical maximum', number(best.theoretical), label)})"
                     if run.line_rate_known else "")
            sec.text.append(q.sentence(f"{best.title}: highest at {label}, "
                                       f"{q(SWEEP_SUITE_TABLE, 'throughput', number(best.throughput), label)} "
                                       f"{best.unit}{share}."))
    sec.text += _per_step([(s.label, _interpret_suite(r, SWEEP_SUITE_TABLE)) for s, r in parts])
    _suite_chart(sec, "Throughput per test and step, % of the theoretical maximum", [(s.label, r) for s, r in parts],
                 src)
    return sec


def sweep_aggregate_section(name: str, parts: Sequence[tuple[sweeps.Step, suite.Aggregate]], addresses: dict[str, str],
                            *, applied: np.ndarray | None, swept: Sequence[str],
                            loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """Aggregates per sweep step: every flow's rate and the total, bars per step."""
    steps = [s for s, _ in parts]
    src = _aggregate_source(name, [s.prefix for s in steps])
    sec = _sweep_section(name, "aggregate", steps, applied, swept, loads)
    table = "Flows and their total per step"
    sec.tables.append(Table(table, ["step", *FLOW_COLUMNS],
                            [[s.label, *row] for s, a in parts for row in _flow_rows(a, addresses)], src,
                            note="sent and received: datagrams (UDP) or bytes (TCP)"))
    hosts = list(dict.fromkeys(f.label for _, a in parts for f in a.flows))
    series = {s.label: np.array([next((f.rate_mbps for f in a.flows if f.label == h), math.nan) for h in hosts]
                                + [a.sum_rate_mbps]) for s, a in parts}
    sec.text += _per_step([(s.label, _interpret_aggregate(a, table)) for s, a in parts])
    chart(sec, "Throughput per flow and in total, per setting", figures.grouped_bars(
        [*hosts, "total (sum)"], series, "Mbit/s at the receiver",
        notes={k: [f"{number(v)}" for v in vals] for k, vals in series.items()}),
        f"Each flow's receiver rate and their sum, one bar per sweep step ({src}).", "no flow has a rate")
    return sec


# -- capture sets --------------------------------------------------------------------------------

def _row(p: bus.FramePath) -> list[Any]:
    return [p.seq, p.length_bytes, p.csr_setup_us, p.send_dma_to_wire_us, p.on_wire_us, p.wire_to_recv_dma_us,
            p.first_word_to_first_word_us, p.recv_dma_to_interrupt_us, p.software_to_service_us]


TIMELINE_COLUMNS = ["frame", "frame length (bytes)", "sender's CSR setup (us)", "sender's first word -> wire (us)",
                    "on the wire (us)", "wire -> receiver's first word (us)", "first word -> first word (us)",
                    "receiver's DMA end -> the INTA# that announced it (us)",
                    "sender's CSR -> receiver's service (us)"]


def _by_length(paths: Sequence[bus.FramePath]) -> dict[int, list[bus.FramePath]]:
    """The frames of each length, shortest first."""
    return {n: [p for p in paths if p.length_bytes == n] for n in sorted({p.length_bytes for p in paths})}


def _step_medians(paths: Sequence[bus.FramePath]) -> tuple[np.ndarray, np.ndarray]:
    """Per step of the timeline (its columns after frame and length): the median (us) over the frames in which
    the step was seen, and how many frames those are. The table's median rows and the sentences use these."""
    values = np.array([_row(p)[2:] for p in paths], dtype=np.float64).reshape(len(paths), len(TIMELINE_COLUMNS) - 2)
    seen = np.isfinite(values)
    med = np.array([np.median(values[seen[:, k], k]) if seen[:, k].any() else math.nan
                    for k in range(values.shape[1])])
    return med, seen.sum(axis=0)


@dataclass(frozen=True)
class Clocks:
    """The sample periods (ns) of a capture set's sources (absent: not known), and what they resolve: a time
    between two events is two time stamps, each read to its source's period (:func:`resolution.capture`)."""

    periods: dict[str, float]

    def u_us(self, a: str, b: str) -> float | None:
        """The standard uncertainty (us) of a time from an event of source ``a`` to one of ``b``."""
        if a not in self.periods or b not in self.periods:
            return None
        return rectangular(resolution.capture([self.periods[a], self.periods[b]]).step_ns) / 1000

    def text(self) -> str:
        said = ", ".join(f"{n} every {number(p, decimals=0 if p >= 1 else 3)} ns" for n, p in self.periods.items())
        return (f"time stamps are samples ({said}); a time between two events carries both stamps' resolution, a "
                "rectangular Type B component each" if said else "")


#: The sources of the two events each timeline column runs between: "send" the sending bus, "recv" the
#: receiving one, "probe" the link.
TIMELINE_SOURCES = {"sender's CSR setup (us)": ("send", "send"), "sender's first word -> wire (us)": ("send", "probe"),
                    "on the wire (us)": ("probe", "probe"), "wire -> receiver's first word (us)": ("probe", "recv"),
                    "first word -> first word (us)": ("send", "recv"),
                    "receiver's DMA end -> the INTA# that announced it (us)": ("recv", "recv"),
                    "sender's CSR -> receiver's service (us)": ("send", "recv")}


def _timeline_table(title: str, paths: Sequence[bus.FramePath], src: str, clocks: Clocks | None = None,
                    sources: dict[str, str] | None = None) -> Table:
    """The first frames one by one, then per frame length (frames of different lengths take different times on
    the bus and the wire) a row of medians and a row saying how many frames each median is of: a phase the
    analysis could not find for a frame (NaN) is left out of its median, and its count says so. ``sources`` maps
    "send", "recv" and "probe" to the capture's sources, whose ``clocks`` resolve each column."""
    rows: list[list[Any]] = [_row(p) for p in paths[:TIMELINE_ROWS]]
    for length, mine in _by_length(paths).items():
        med, known = _step_medians(mine)
        rows.append([f"median of {len(mine)} frames", length, *med.tolist()])
        rows.append(["frames each median is of", length, *known.tolist()])
    shown = min(TIMELINE_ROWS, len(paths))
    res = ({c: clocks.u_us(sources[a], sources[b]) for c, (a, b) in TIMELINE_SOURCES.items()}
           if clocks is not None and sources is not None else {})
    return Table(title, TIMELINE_COLUMNS, rows, src,
                 excerpt=(f"first {shown} of {len(paths):,} frames, then the median of each frame length and how "
                          "many frames each is of" if shown < len(paths)
                          else "every frame, then the median of each frame length and how many frames each is of"),
                 decimals={c: NS_DECIMALS for c in TIMELINE_COLUMNS[2:] if res.get(c) is None},
                 resolution={c: u for c, u in res.items() if u is not None},
                 resolution_text=clocks.text() if clocks is not None else "",
                 note="'the INTA# that announced it': the first interrupt after the frame's DMA; with coalescence "
                      "a frame waits for the timer a DMA before it started, or for the next interrupt when it "
                      "arrived while one was pending (the bus measurements' 'DMA -> INTA#' is the timer itself)")


def _labelling_note(buses: list[bus.HostBus | None], names: list[str]) -> str:
    """What the bus table must say of the CSR rows a bus (``names``: its sources) did not measure as the driver's
    sequences: a service the bus could not cut from its update, or sequences it could not learn at all (the
    accesses then labelled as runs)."""
    def on(flag: str) -> str:
        return " and ".join(n for n, b in zip(names, buses) if b is not None and getattr(b.activity, flag))

    uncut, unlearnt = on("service_uncut"), on("sequences_unlearnt")
    note = ""
    if uncut:
        note += (f"; {uncut}: the bus did not show where the interrupt service's first CSR accesses end and its "
                 "update begins (DMA ran through the services, hiding the CPU's time between them): the service's "
                 "row holds both, the update is not measured")
    if unlearnt:
        rows = ", ".join(f"'{r}'" for r in SEQUENCE_ROWS)
        note += (f"; {unlearnt}: the driver's register sequences could not be learnt from this capture (fewer than "
                 "two send setups or interrupt services alike), so the CSR accesses are labelled as runs at most "
                 f"{bus.CSR_GAP_NS:g} ns of idle bus apart, cut where a fetch or a service begins: a send is the run "
                 "just before a fetch, a service the run from the access that cleared INTA#, an update the next run "
                 f"after it. The rows {rows} (and the step-by-step tables' CSR columns) are of these runs, not "
                 "measured as the driver's sequences: a run may hold a refill or the accesses of two sequences that "
                 f"came within {bus.CSR_GAP_NS:g} ns, or only part of one; the rows from the access that cleared "
                 "INTA# and the DMA, interrupt and bus rows do not depend on them")
    return note


def _bus_rows(label: str, pick: Any, buses: list[bus.HostBus | None], unit: str) -> list[Any]:
    """A quantity on each bus, and for a median how many events it is the median of."""
    cells: list[Any] = []
    for b in buses:
        try:
            value = pick(b) if b is not None else None
        except (AttributeError, TypeError, KeyError):  # a bus without interrupts, DMA or CSR accesses
            value = None
        if isinstance(value, bus.Spread):
            cells += [value.median, value.count]
        else:
            cells += [value, None]
    return [label, *cells, unit]


BUS_TABLE, LINK_TABLE = "Bus measurements", "Data frames on the link"
#: The bus table's rows measured on the driver's register sequences (send setup, service, update).
SETUP_ROW, SETUP_ACCESSES_ROW, SETUP_TO_FETCH_ROW = ("CSR setup per send, median", "CSR accesses per send, median",
                                                     "CSR setup end -> fetch, median")
SERVICE_ROW, UPDATE_ROW = "interrupt service's first CSR accesses, median", "interrupt service's CSR update, median"
TO_UPDATE_ROW = "INTA# -> CSR update, median"
SEQUENCE_ROWS = (SETUP_ROW, SETUP_ACCESSES_ROW, SETUP_TO_FETCH_ROW, SERVICE_ROW, UPDATE_ROW, TO_UPDATE_ROW)
#: The bus table's rows the sentences quote.
TIMER_ROW = "first DMA after the previous interrupt -> INTA# (the coalescence timer), median"
#: The time from one interrupt to the next: what a count of interrupts over a stream measures (Hughes-Jones et al.
#: 2003, §4.2.1: "one interrupt for approximately every 33 (~400 us) packets sent").
INTERVAL_ROW = "INTA# to the next INTA#, median"
BUSY_ROW, BUSY_PER_FRAME_ROW, PERIOD_ROW = "bus busy", "bus busy per frame", "frame period, mean"


def capture_section(name: str, tables: dict[str, np.ndarray | None], meta: dict[str, dict[str, Any]],
                    options: Options) -> Section:
    """A decoded capture set of the rig: buses, link, flow control, expected against observed. A source's
    ``sample_period_ns`` in ``meta`` is the resolution of its time stamps."""
    send_s, recv_s, probe_s = options.send_source, options.recv_source, options.probe_source
    sec = Section(f"Bus-level timeline: {name}", name)
    clocks = Clocks({n: float(m["sample_period_ns"]) for n, m in meta.items()
                     if n in (send_s, recv_s, probe_s) and m.get("sample_period_ns")})
    link = float(meta.get(probe_s, {}).get("link_rate_bps") or options.link_rate_bps or 1e9)
    tl = bus.bus_timeline(tables.get(f"{send_s}/pci"), tables.get(f"{send_s}/irq"), tables.get(f"{recv_s}/pci"),
                          tables.get(f"{recv_s}/irq"), tables.get(f"{probe_s}/ethernet"), link_rate_bps=link,
                          registers=nic_registers.for_device(meta.get(send_s, {}).get("device")))
    used = [f"decoded/{k}" for k, v in tables.items() if v is not None]
    src_all = f"{name}: " + ", ".join(used)
    src_send = f"{name}: decoded/{send_s}/pci, decoded/{send_s}/irq"
    src_recv = f"{name}: decoded/{recv_s}/pci, decoded/{recv_s}/irq"
    src_eth = f"{name}: decoded/{probe_s}/ethernet"
    out_title = f"Frames from {send_s} to {recv_s}, step by step"
    if tl.paths_out:
        sec.tables.append(_timeline_table(out_title, tl.paths_out, src_all, clocks,
                                          {"send": send_s, "recv": recv_s, "probe": probe_s}))
    if tl.paths_in:
        sec.tables.append(_timeline_table(f"Frames from {recv_s} to {send_s}, step by step", tl.paths_in, src_all,
                                          clocks, {"send": recv_s, "recv": send_s, "probe": probe_s}))
    buses = [tl.send, tl.recv]
    rows = [
        _bus_rows("bus clock period", lambda b: b.dma.clock_period_ns, buses, "ns"),
        _bus_rows("peak rate (one word per clock)", lambda b: b.dma.peak_mbytes_per_s, buses, "MB/s"),
        _bus_rows("DMA rate during data phases", lambda b: b.dma.burst_data_rate_mbytes_per_s, buses, "MB/s"),
        _bus_rows("DMA rate over whole bursts", lambda b: b.dma.burst_rate_mbytes_per_s, buses, "MB/s"),
        _bus_rows("DMA burst, median", lambda b: b.dma.burst_us, buses, "us"),
        _bus_rows("fetch per frame (descriptor + data), median", lambda b: b.dma.fetch_us, buses, "us"),
        _bus_rows("fetch per frame, its data alone, median", lambda b: b.dma.fetch_data_us, buses, "us"),
        _bus_rows("receive per frame (data + descriptor), median", lambda b: b.dma.receive_us, buses, "us"),
        _bus_rows("fetch rate per frame, median", lambda b: b.dma.fetch_rate_mbytes_per_s, buses, "MB/s"),
        _bus_rows("receive rate per frame, median", lambda b: b.dma.receive_rate_mbytes_per_s, buses,
                  "MB/s"),
        _bus_rows(SETUP_ROW, lambda b: b.csr.send_setup_us, buses, "us"),
        _bus_rows(SETUP_ACCESSES_ROW, lambda b: b.csr.send_accesses, buses, ""),
        _bus_rows(SETUP_TO_FETCH_ROW, lambda b: b.csr.send_to_dma_us, buses, "us"),
        _bus_rows(SERVICE_ROW, lambda b: b.csr.service_us, buses, "us"),
        _bus_rows(UPDATE_ROW, lambda b: b.csr.update_us, buses, "us"),
        _bus_rows("CSR accesses per receive ring refill outside the service, median", lambda b: b.csr.refill_accesses,
                  buses, ""),
        _bus_rows("CSR accesses retried (STOP#)", lambda b: b.csr.retries, buses, ""),
        _bus_rows("transactions with STOP#", lambda b: b.stops.with_stop, buses, ""),
        _bus_rows("  of them DMA disconnects", lambda b: b.stops.disconnects_with_data
                  + b.stops.disconnects_without_data, buses, ""),
        _bus_rows("interrupts", lambda b: b.interrupts.interrupts, buses, ""),
        _bus_rows("frames per interrupt", lambda b: b.interrupts.frames_per_interrupt, buses, ""),
        _bus_rows(INTERVAL_ROW, lambda b: b.interrupts.interval_us, buses, "us"),
        _bus_rows(TIMER_ROW, lambda b: b.interrupts.dma_to_interrupt_us, buses, "us"),
        _bus_rows("INTA# -> first CSR access, median", lambda b: b.interrupts.interrupt_to_csr_us, buses,
                  "us"),
        _bus_rows("DMA -> first CSR access, median", lambda b: b.interrupts.dma_to_csr_us, buses, "us"),
        _bus_rows(TO_UPDATE_ROW, lambda b: b.interrupts.interrupt_to_update_us, buses, "us"),
        _bus_rows(BUSY_ROW, lambda b: b.occupancy.busy_pct, buses, "%"),
        _bus_rows(BUSY_PER_FRAME_ROW, lambda b: b.occupancy.busy_per_frame_us, buses, "us"),
        _bus_rows(PERIOD_ROW, lambda b: b.occupancy.frame_period_us, buses, "us"),
        _bus_rows("target wait clocks per DMA transaction",
                  lambda b: b.waits["dma"].target_wait_clocks_per_transaction, buses, "clocks"),
        _bus_rows("master wait clocks per DMA transaction",
                  lambda b: b.waits["dma"].master_wait_clocks_per_transaction, buses, "clocks"),
        _bus_rows("target wait clocks per CSR access",
                  lambda b: b.waits["csr"].target_wait_clocks_per_transaction, buses, "clocks"),
    ]
    # times on one bus are two of its stamps; the frame period is two of the link's
    res = {source: [(clocks.u_us(probe_s, probe_s) if r[0] == PERIOD_ROW else clocks.u_us(source, source))
                    if r[-1] == "us" else None for r in rows] for source in (send_s, recv_s)}
    sec.tables.append(Table(BUS_TABLE, ["quantity", send_s, f"{send_s}: events", recv_s, f"{recv_s}: events", "unit"],
                            rows, f"{src_send} | {src_recv} (+ {src_eth} to tie DMA to frames)",
                            note="events: how many bursts, transfers, CSR runs or interrupts a median is the median "
                                 "of; bus busy over the whole periods from the first data frame on the link to the "
                                 "last (N frames, N - 1 periods), per frame: per period"
                                 + _labelling_note(buses, [send_s, recv_s]),
                            resolution={k: v for k, v in res.items() if any(u is not None for u in v)},
                            resolution_text=clocks.text()))
    _expected_rows(sec, tl, meta, send_s, recv_s, link, src_send, src_eth, clocks.u_us(probe_s, probe_s),
                   clocks.text())
    _wire_and_pause(sec, tl, tables.get(f"{probe_s}/ethernet"), src_eth, clocks.u_us(probe_s, probe_s),
                    clocks.text())
    sec.text += _interpret_capture(tl, options, send_s, recv_s, sec, out_title)
    if tl.paths_out and tl.send and tl.recv:
        first = next((p for p in tl.paths_out if np.isfinite(p.recv_service_end_ns)), tl.paths_out[0])
        chart(sec, f"Frame seq {first.seq} across both buses and the wire", figures.bus_timeline(
            first, tl.send.activity, tl.recv.activity, tables.get(f"{send_s}/irq"), tables.get(f"{recv_s}/irq"),
            tables.get(f"{probe_s}/ethernet")),
            f"CSR clusters, DMA transfers by role and INTA# on each bus, and the frame on the wire ({src_all}).",
            "the capture holds too little of the frame's path")
    return sec


def _expected_rows(sec: Section, tl: bus.BusTimeline, meta: dict[str, dict[str, Any]], send_s: str, recv_s: str,
                   link: float, src_send: str, src_eth: str, wire_u: float | None, clocks_text: str = "") -> None:
    rows, res = [], []
    for name, hb in ((send_s, tl.send), (recv_s, tl.recv)):
        element = expected.element_from_bus(meta.get(name, {}))
        if hb is None or element is None:
            continue
        rows.append([f"{name}: DMA rate during data phases (MB/s)", element.mbytes_per_s,
                     hb.dma.burst_data_rate_mbytes_per_s, f"{element.name} (source metadata)"])
        res.append(None)
    if tl.wire_out is not None:
        rows.append(["frame on the wire, median (us)", tl.wire_out.expected_on_wire_us.median,
                     tl.wire_out.on_wire_us.median, f"(length + 8) x 8 bit times at {link / 1e9:g} Gbit/s"])
        res.append(wire_u)
    if tl.pause is not None and tl.pause.xoff:
        unresumed = [p for p in tl.pause.frames if not math.isfinite(p.xon_after_us)]
        if unresumed:
            rows.append(["gap after a PAUSE not ended by XON, median (us)", float(np.median(
                [p.pause_us for p in unresumed])), float(np.nanmedian([p.gap_us for p in unresumed])),
                "quanta x 512 bit times"])
            res.append(wire_u)
    send_bus, recv_bus = (expected.element_from_bus(meta.get(n, {})) for n in (send_s, recv_s))
    if send_bus is not None and recv_bus is not None:
        path = [send_bus, expected.ethernet(link), recv_bus]
        sec.items.append(Item("RTT slope for this rig (bus + wire + bus, no copies): a capture measures no RTT, "
                              "see a latency run", None, "us/byte",
                              f"{HUGHES_JONES}, §3.1 arithmetic on {', '.join(e.name for e in path)}",
                              expected=float(expected.expected_slope_us_per_byte(path))))
    if rows:
        sec.tables.append(Table("Expected against observed", ["quantity", "expected", "observed", "expected from"],
                                rows, f"{src_send}, {src_eth}; expectations from the sources' bus metadata",
                                resolution={"observed": res} if any(u is not None for u in res) else {},
                                resolution_text=clocks_text))


PAUSE_TIMES = ("time (us)", "asks (us)", "gap left (us)", "XON after (us)")
LINK_TIMES = ("on wire, median (us)", "period, median (us)", "gap, median (us)")


def _wire_and_pause(sec: Section, tl: bus.BusTimeline, ethernet: np.ndarray | None, src_eth: str,
                    wire_u: float | None, clocks_text: str) -> None:
    wt = [(d, w) for d, w in (("from the sending host", tl.wire_out), ("to the sending host", tl.wire_in))
          if w is not None]
    resolved_cols = {c: wire_u for c in LINK_TIMES} if wire_u is not None else {}
    if wt:
        sec.tables.append(Table(LINK_TABLE, ["direction", "frames", *LINK_TIMES],
                                [[d, w.frames, w.on_wire_us.median, w.period_us.median, w.gap_us.median]
                                 for d, w in wt], src_eth,
                                decimals={} if resolved_cols else {c: NS_DECIMALS for c in LINK_TIMES},
                                resolution=resolved_cols, resolution_text=clocks_text))
    p = tl.pause
    if p is None or not p.xoff:
        return
    timed = {"decimals": None if wire_u is not None else NS_DECIMALS, "resolution_u": wire_u}
    sec.items += [Item("PAUSE frames (XOFF)", p.xoff, "", src_eth), Item("XON (PAUSE 0)", p.xon, "", src_eth),
                  Item("quanta", ", ".join(map(str, p.quanta)), "x 512 bit times", src_eth),
                  Item("PAUSE period, median", p.period_us.median, "us", src_eth, **timed),
                  Item("gap they left, median", p.gap_us.median, "us", src_eth, **timed),
                  Item("usual gap between data frames", p.usual_gap_us, "us", src_eth, **timed)]
    shown = p.frames[:PAUSE_ROWS]
    measured_cols = ("time (us)", "gap left (us)", "XON after (us)")  # "asks" is the quanta's arithmetic
    sec.tables.append(Table("PAUSE frames", ["time (us)", "sent by", "quanta", "asks (us)", "gap left (us)",
                                             "XON after (us)"],
                            [[f.t_ns / 1000, "receiver" if f.direction == "rx" else "sender", f.quanta, f.pause_us,
                              f.gap_us, f.xon_after_us] for f in shown],
                            src_eth, excerpt=excerpt(len(shown), len(p.frames), "PAUSE frames"),
                            decimals={c: NS_DECIMALS for c in PAUSE_TIMES if wire_u is None or c not in measured_cols},
                            resolution={c: wire_u for c in measured_cols} if wire_u is not None else {},
                            resolution_text=clocks_text))
    if ethernet is not None:
        data = bus.data_frames(ethernet, b"tx")
        if len(data) > 1:
            chart(sec, "Gaps in the stream and PAUSE frames", figures.wire_gaps(
                data, [f.t_ns for f in p.frames], "gap before each data frame from the sending host"),
                f"As {HUGHES_JONES}, figure 4.9: regular gaps where the receiver's PAUSE frames stop the sender "
                f"({src_eth}).", "fewer than two data frames")


def _interrupt_text(name: str, it: bus.InterruptTiming, paths: Sequence[bus.FramePath],
                    sec: Section | None = None, timeline: str = "") -> list[Sentence]:
    """What a bus's interrupts show, in the numbers of its 'Bus measurements' rows and the timeline's (quoted
    from ``sec``'s tables as they print them; ``timeline``: the title of the table of the frames it received)."""
    delay = it.dma_to_interrupt_us.median
    if not math.isfinite(delay):
        return []
    q = Quotes()
    per = q(BUS_TABLE, name, _cell(sec, BUS_TABLE, name, "frames per interrupt", it.frames_per_interrupt),
            "frames per interrupt")
    delay_text = q(BUS_TABLE, name, _cell(sec, BUS_TABLE, name, TIMER_ROW, delay), TIMER_ROW)
    timer = f"{delay_text} us (median of {it.dma_to_interrupt_us.count} interrupts)"
    if delay <= COALESCENCE_MIN_US:
        return [q.sentence(f"{name}: INTA# comes {timer} after the DMA that gave it cause, {per} frames per "
                           f"interrupt: no interrupt coalescence ({HUGHES_JONES}, §4.1.3).")]
    if it.frames_per_interrupt < 1.5:
        out = [q.sentence(f"{name}: the NIC waits {timer} after the DMA that gives it cause before it raises INTA#, "
                          f"a coalescence timer; with {per} frames per interrupt this traffic gave it nothing to "
                          f"gather, so the wait adds latency without saving interrupts ({HUGHES_JONES}, §8).")]
    else:
        out = [q.sentence(f"{name}: INTA# comes {timer} after the first DMA that gave it cause, {per} frames per "
                          f"interrupt: interrupt coalescence ({HUGHES_JONES}, §4.2.3: ~70 us with 64 x 1.024 us).")]
    waits = [p.recv_dma_to_interrupt_us for p in paths if math.isfinite(p.recv_dma_to_interrupt_us)]
    if waits:
        wait = float(np.median(waits))
        if wait > delay + max(COALESCENCE_MIN_US, 0.2 * delay):
            column = "receiver's DMA end -> the INTA# that announced it (us)"
            said = q(timeline, column, _cell(sec, timeline, column, None, wait))
            delay_text = q(BUS_TABLE, name, delay_text, TIMER_ROW)
            out.append(q.sentence(
                f"{name}: a frame waited a median {said} us from its DMA to the INTA# that announced it "
                f"({len(waits)} frames, the timeline's column), longer than the {delay_text} us timer: frames that "
                "arrived while an interrupt was pending or being served waited for a later one."))
    return out


def _cell(sec: Section | None, title: str, column: str, row: str | None, value: Any) -> str:
    """``value`` as ``sec``'s table ``title`` prints it in ``column`` (in the row labelled ``row``, or a median
    row), by the table's own rule; without the table, as such a table prints it when no sample clock is known:
    a bus measurement to four digits, a timeline's time to the ns the decoded tables hold."""
    t = next((t for t in sec.tables if t.title == title), None) if sec is not None else None
    if t is None:
        return number(value, decimals=NS_DECIMALS) if row is None else number(value)
    from nicrig.analysis.render import value_text

    k = next((i for i, r in enumerate(t.rows) if row is not None and r[0] == row), None)
    if k is None:  # a median row: the resolution of the column's times
        k = next((i for i, r in enumerate(t.rows) if str(r[0]).startswith("median of")), 0)
    return value_text(t, column, k, value)


def _interpret_capture(tl: bus.BusTimeline, options: Options, send_s: str, recv_s: str,
                       sec: Section | None = None, out_title: str = "") -> list[Sentence]:
    """The capture's sentences, quoting ``sec``'s tables (``out_title``: the frames from ``send_s`` to
    ``recv_s``)."""
    text = []
    in_title = f"Frames from {recv_s} to {send_s}, step by step"
    q = Quotes()
    for name, hb, paths, timeline in ((send_s, tl.send, tl.paths_in, in_title),
                                      (recv_s, tl.recv, tl.paths_out, out_title)):
        if hb is None:
            continue
        it = hb.interrupts
        if it is not None and it.interrupts:
            text += _interrupt_text(name, it, paths, sec, timeline)
        if hb.csr.accesses and hb.csr.retries:
            text.append(Sentence(f"{name}: {hb.csr.retries} of {hb.csr.accesses + hb.csr.retries} CSR accesses were "
                                 "refused with STOP# and retried: the NIC takes register accesses slower than the "
                                 f"host offers them ({HUGHES_JONES}, §6.1.3)."))
        occ = hb.occupancy
        if math.isfinite(occ.busy_pct) and occ.frames:
            busy = q(BUS_TABLE, name, _cell(sec, BUS_TABLE, name, BUSY_ROW, occ.busy_pct), BUSY_ROW)
            per = q(BUS_TABLE, name, _cell(sec, BUS_TABLE, name, BUSY_PER_FRAME_ROW, occ.busy_per_frame_us),
                    BUSY_PER_FRAME_ROW)
            period = q(BUS_TABLE, name, _cell(sec, BUS_TABLE, name, PERIOD_ROW, occ.frame_period_us), PERIOD_ROW)
            text.append(q.sentence(
                f"{name}: the bus was busy {busy}% of the time between the first and the last data frame on the "
                f"link, {per} us per frame, one frame every {period} us on average ({occ.frames} periods)"
                + (f": little room for other devices such as a disk controller ({HUGHES_JONES}, §9)."
                   if occ.busy_pct > 60 else ".")))
    p = tl.pause
    if p is not None and p.xoff:
        period, gap, usual = (q("", label, _item_value(sec, label, v)) for label, v in (
            ("PAUSE period, median", p.period_us.median), ("gap they left, median", p.gap_us.median),
            ("usual gap between data frames", p.usual_gap_us)))
        text.append(q.sentence(
            f"Flow control: the receiver sent {p.xoff} PAUSE frames (quanta {', '.join(map(str, p.quanta))}), one "
            f"every {period} us (median); each left a gap of {gap} us in the stream, against {usual} us otherwise "
            f"({HUGHES_JONES}, §4.2.3: gaps every ~900 us)."))
    service, words = (TIMELINE_COLUMNS.index(c) - 2 for c in ("sender's CSR -> receiver's service (us)",
                                                               "first word -> first word (us)"))
    runs = (" (runs of CSR accesses, not the driver's sequences: see the bus table)"
            if any(hb is not None and hb.activity.sequences_unlearnt for hb in (tl.send, tl.recv)) else "")
    for length, frames in _by_length(tl.paths_out).items():
        med, seen = _step_medians(frames)  # the numbers of the timeline table's median row
        if not seen[service]:
            continue
        one_way = float(med[service])
        one_way_text = q(out_title, TIMELINE_COLUMNS[service + 2],
                         _cell(sec, out_title, TIMELINE_COLUMNS[service + 2], None, one_way))
        column = TIMELINE_COLUMNS[words + 2]
        words_text = q(out_title, column, _cell(sec, out_title, column, None, med[words])) if seen[words] else ""
        first_words = f"; first word to first word {words_text} us (median of {seen[words]})" if seen[words] else ""
        text.append(q.sentence(
            f"{length}-byte frames from {send_s} to {recv_s}: from the sending driver's first CSR access to the "
            f"receiving service's{runs}, "
            f"{one_way_text} us (median of {seen[service]}){first_words} ({HUGHES_JONES}, "
            "§4.1.3: 36 and 23 us for 1400 bytes)."))
        if options.rtt_intercept_us is not None:
            sw = bus.host_software_time_us(options.rtt_intercept_us, one_way)
            given = f"{number(options.rtt_intercept_us)} us"
            text.append(Sentence(
                f"With the RTT intercept of {given} given: IP stack and application ~{number(sw)} us per node, "
                f"(intercept - {one_way_text}) / 2 as {HUGHES_JONES}, §4.1.3 estimates it.",
                given=[given, f"{number(sw)} us"]))
    return text


def _item_value(sec: Section | None, label: str, value: Any) -> str:
    """An item's value as the page prints it, without its ± (the sentence quotes the value)."""
    item = next((i for i in sec.items if i.label == label), None) if sec is not None else None
    if item is None:
        return number(value, decimals=NS_DECIMALS)
    from nicrig.analysis.render import item_text

    return item_text(item.value, item.ci95, item.decimals, item.resolution_u).split(" ± ")[0]


# -- the host probe: kernel trace events ------------------------------------------------------------

HOST_PROBE_POINT_COLUMNS = ["point", "size (bytes)", "spacing (us)", "host", "packets", "interrupts per packet",
                            "NET_RX runs per packet", "frames per poll", "NET_RX CPU (%)",
                            "received inside a NET_RX run (%)", "received in a NAPI poll (%)"]


@dataclass(frozen=True)
class StreamWindows:
    """A stream run's points for the host probe: size, spacing and the span each was sent in (near host clock)."""

    point: np.ndarray
    size_bytes: np.ndarray
    spacing_us: np.ndarray
    t0_ns: np.ndarray
    t1_ns: np.ndarray


def stream_windows(points: np.ndarray, sent: np.ndarray, received: np.ndarray | None = None,
                   far_offset_ns: float = 0.0, tail_ns: int = 2_000_000) -> StreamWindows:
    """Each point's first send to its last (plus ``tail_ns`` for the last packets to arrive) or, when later, the
    far engine's last return from a receive call (``received``, on the far clock: ``far_offset_ns`` puts it
    on the near one), from stream/sent and stream/received."""
    ok = sent[sent["t_ns"] >= 0]
    t0 = np.array([ok["t_ns"][ok["point"] == p].min(initial=np.iinfo(np.int64).max) for p in points["point"]])
    t1 = np.array([ok["t_ns"][ok["point"] == p].max(initial=0) for p in points["point"]]) + tail_ns
    if received is not None:
        back = received[received["user_ns"] >= 0]
        last = np.array([back["user_ns"][back["point"] == p].max(initial=0) for p in points["point"]])
        t1 = np.maximum(t1, last + int(round(far_offset_ns)) + 1)
    return StreamWindows(points["point"], points["size_bytes"], points["spacing_us"], t0, t1)


def _host_probe_row(t: Any, device: str | None) -> tuple[list[Any], list[Any]]:
    span = hostprobe.span_s(t)
    irqs = len(t.of("irq:irq_handler_entry"))
    mine = len(hostprobe.device_irqs(t, device)) if device else 0
    runs = len(hostprobe.softirq_spans(t, hostprobe.NET_RX))
    frames = len(hostprobe.packets(t, "net:netif_receive_skb", device))
    ps = hostprobe.poll_stats(hostprobe.polls(t))
    irq_d, raise_d = hostprobe.trigger_delays(t, device)
    per_s = (lambda n: n / span if span else math.nan)
    rates = [t.host, device or "all", span, per_s(irqs), per_s(mine), per_s(runs), frames,
             frames / mine if mine else None, ps.polls, ps.mean_frames, ps.max_frames, ps.budget, ps.empty]
    delays = [t.host, *hostprobe.quantiles_us(irq_d), *hostprobe.quantiles_us(raise_d)]
    return rates, delays


#: The delay columns of the host probe's table: to 10 ns, coarser than the two 1 ns time stamps each is made of.
DELAY_COLUMNS = ("IRQ to NET_RX median", "p90", "raise to NET_RX median")


#: A delay between two kernel events: two CLOCK_MONOTONIC time stamps in whole ns.
DELAY_RESOLUTION = resolution.capture([1.0, 1.0])


def _median_p90(values_ns: Any) -> list[Any]:
    """[median, its 95% half-width, 90th percentile, its half-width (us), count] of delays in ns."""
    step = DELAY_RESOLUTION.step_ns
    return [*hostprobe.quantile_us(values_ns, 0.5, step), *hostprobe.quantile_us(values_ns, 0.9, step),
            len(values_ns)]


def _datagram_paths(sec: Section, name: str, paths: packetpath.StreamPaths) -> None:
    """The tables of each datagram's path through the kernel, paired with the engine's record of it, and of what
    could not be paired and why."""
    rows: list[list[Any]] = []
    s, r = paths.sent, paths.received
    if s is not None and s.paired:
        d = s.paths
        rows += [[paths.sender, "the engine's clock read before its send call", "device transmit (net_dev_xmit)",
                  *_median_p90(d["xmit_ns"] - d["engine_ns"])],
                 [paths.sender, "its message in the send call (sendmmsg)", "device transmit (net_dev_xmit)",
                  *_median_p90(d["xmit_ns"] - d["message_ns"])]]
    if r is not None and r.paired:
        d = r.paths
        rows += [[paths.receiver, "stack receive (netif_receive_skb)", "queued on the socket (sk_data_ready)",
                  *_median_p90(d["wake_ns"] - d["receive_ns"])],
                 [paths.receiver, "queued on the socket (sk_data_ready)", "the engine's receive call returned",
                  *_median_p90(d["return_ns"] - d["wake_ns"])],
                 [paths.receiver, "stack receive (netif_receive_skb)", "the engine's receive call returned",
                  *_median_p90(d["return_ns"] - d["receive_ns"])]]
    if len(paths.same_buffer_ns):
        rows.append([f"{paths.sender} to {paths.receiver} (one kernel)", "device transmit (net_dev_xmit)",
                     "stack receive (netif_receive_skb), the same buffer",
                     *_median_p90(paths.same_buffer_ns)])
    sec.tables.append(Table(
        "Each datagram's path through the kernel, paired with the engine's record of it (us)",
        ["host", "from", "to", "median", "median ± 95%", "p90", "p90 ± 95%", "datagrams"], rows,
        f"{name}: host_trace/<host>/events joined to stream/sent, stream/received and stream/points "
        "(send_thread, recv_thread)",
        note="every delay is one datagram's own: its system call found from the engine's clock and thread, its "
             "buffer and socket from the kernel's events in that call (nicrig.analysis.packetpath); datagrams "
             "that could not be paired so are counted in the next table and left out here",
        uncertainty={"median": "median ± 95%", "p90": "p90 ± 95%"},
        resolution={c: rectangular(DELAY_RESOLUTION.step_ns) / 1000 for c in ("median", "p90")},
        resolution_text="CLOCK_MONOTONIC time stamps in whole ns; each delay is two of them"))
    pair_rows = []
    for host, table, pairing in ((paths.sender, "stream/sent", s), (paths.receiver, "stream/received", r)):
        if pairing is None:
            continue
        why = "; ".join(f"{reason}: {n}" for reason, n in pairing.unpaired.most_common() if n)
        extra = "; ".join(f"{reason}: {n}" for reason, n in pairing.unrecorded.most_common() if n)
        pair_rows.append([host, table, pairing.datagrams, pairing.paired, pairing.datagrams - pairing.paired,
                          why or "-", extra or "-"])
    sec.tables.append(Table(
        "Datagrams paired with their kernel events, and why the rest are not",
        ["host", "engine's record", "datagrams", "paired", "not paired", "why not (datagrams)",
         "kernel datagrams without an engine record"], pair_rows,
        f"{name}: stream/sent, stream/received, host_trace/<host>/events"))


def host_probe_section(name: str, traces: Sequence[Any], devices: dict[str, str | None],
                       stream: StreamWindows | None = None, paths: packetpath.StreamPaths | None = None) -> Section:
    """The host probe's section of a file: per host, interrupts and NAPI polls (Geist et al.), the delays from
    interrupt to poll, each datagram's path through the kernel where the engine recorded it (a stream run),
    drops by reason, and per stream point the interrupt and CPU curves of Hughes-Jones et al. 2003 §8."""
    src = f"{name}: host_trace/<host>/events"
    sec = Section(f"Host probe: kernel events of {', '.join(t.host for t in traces)}: {name}", name,
                  template="hostprobe", data={"losses": {t.host: t.lost for t in traces if t.lost},
                                              "unreadable": {t.host: t.unreadable_subbuffers for t in traces
                                                             if t.unreadable_subbuffers},
                                              "unknown": {t.host: t.unknown_records for t in traces
                                                          if t.unknown_records},
                                              "truncated": {t.host: t.truncated for t in traces if t.truncated}})
    for t in traces:
        sec.items.append(Item(f"{t.host} ({t.hostname}): events recorded", len(t.events), "events",
                              f"{name}: host_trace/{t.host}/events"))
        sec.items.append(Item(f"{t.host}: events the kernel lost", t.lost, "events",
                              f"{name}: host_trace/{t.host}/losses (dropped_events + overrun)"))
        sec.items.append(Item(f"{t.host}: sub-buffers that could not be read (events lost)", t.unreadable_subbuffers,
                              "sub-buffers", f"{name}: host_trace/{t.host}/losses (unreadable_subbuffers)"))
        sec.items.append(Item(f"{t.host}: records of events without a format (not decoded)", t.unknown_records,
                              "records", f"{name}: host_trace/{t.host}/losses (unknown_records)"))
        if t.clock_reference:
            sec.items.append(Item(f"{t.host}: clock offset to {t.clock_reference}", t.clock_offset_ns / 1000, "us",
                                  f"{name}: host_trace/{t.host} attributes (min-RTT clock exchanges)",
                                  ci95=t.clock_offset_uncertainty_ns / 1000))
    rows = [_host_probe_row(t, devices.get(t.host)) for t in traces]
    sec.tables.append(Table(
        f"Interrupts and NAPI polls (the metrics of {GEIST})",
        ["host", "device", "span (s)", "hard IRQs per s (all)", "the device's IRQs per s",
         "NET_RX softirq runs per s", "frames received",
         "frames per interrupt", "NAPI polls", "frames per poll (mean of non-empty)", "most frames in a poll",
         "poll budget", "empty polls"], [r for r, _ in rows],
        f"{src} (irq_handler_entry, softirq_entry/exit vec 3, netif_receive_skb, napi_poll)",
        note="the device's interrupts: handlers named after it (eth0-TxRx-0 for eth0); frames per interrupt is "
             "empty where it raised none (veth, loopback: packets are queued in software and polled from the "
             "per-CPU backlog)", decimals={"span (s)": 3}))
    sec.tables.append(Table(
        "Delays from interrupt to poll (us)",
        ["host", "IRQ to NET_RX median", "p90", "n", "raise to NET_RX median", "p90", "n"], [d for _, d in rows],
        f"{src} (irq_handler_entry, softirq_raise/entry)",
        note="for each NET_RX softirq run, the last interrupt of the device (or NET_RX raise) on its CPU since the "
             "previous run",
        decimals={c: 2 for c in DELAY_COLUMNS},
        resolution={c: rectangular(DELAY_RESOLUTION.step_ns) / 1000 for c in DELAY_COLUMNS},
        resolution_text="CLOCK_MONOTONIC time stamps in whole ns; each delay is two of them"))
    if paths is not None:
        _datagram_paths(sec, name, paths)
    drop_rows = [[t.host, reason, count] for t in traces for reason, count in hostprobe.drops(t).items()]
    sec.tables.append(Table("Packets the kernel dropped, by reason", ["host", "reason", "packets"], drop_rows,
                            f"{src} (skb:kfree_skb reason; names from the kernel's own table)",
                            note="" if drop_rows else "no drops recorded"))
    if stream is not None and len(stream.point):
        _host_probe_points(sec, name, traces, devices, stream)
    sec.text.append(Sentence(
        "The host probe sees from the host side what " + HUGHES_JONES + " saw on the PCI buses: the interrupt, the "
        "poll that takes N frames per interrupt (the coalescence " + GEIST + " tuned), the stack and the "
        "application's system calls. Times are each host's CLOCK_MONOTONIC, the udpmon engine's clock; a "
        "datagram's delays use one host's events only."))
    if paths is None:
        sec.text.append(Sentence(
            "Delays of single datagrams are shown for stream runs only: their engines record every datagram and the "
            "threads that sent and received it, which is what pairs a datagram with its kernel events."))
    for host, lost in sec.data["losses"].items():
        sec.text.append(f"{host}: the kernel lost {lost} events (ring buffer full): counts and rates above are "
                        "lower bounds.")
    for host, pages in sec.data["unreadable"].items():
        sec.text.append(f"{host}: {pages} recorded sub-buffers could not be read, and their events are lost: "
                        "counts and rates above are lower bounds.")
    for host, records in sec.data["unknown"].items():
        sec.text.append(f"{host}: {records} records of events the stored formats do not describe were present "
                        "but not decoded.")
    return sec


def _host_probe_points(sec: Section, name: str, traces: Sequence[Any], devices: dict[str, str | None],
                       stream: StreamWindows) -> None:
    rows, curves = [], {}
    for t in traces:
        # the near host sends the stream, a daemon receives it; its times are on its own clock
        event = "net:net_dev_xmit" if t.host == "local" else "net:netif_receive_skb"
        shift = -int(round(t.clock_offset_ns))
        per_size: dict[int, list[tuple[float, float, float]]] = {}
        for k in range(len(stream.point)):
            size = int(stream.size_bytes[k])
            pl = hostprobe.point_load(t, devices.get(t.host), size, int(stream.t0_ns[k]) + shift,
                                      int(stream.t1_ns[k]) + shift, event)
            delivered: list[float | None] = [None, None]  # the receiving host's delivery path only
            if event == "net:netif_receive_skb":
                d = hostprobe.deliveries(t, devices.get(t.host), size, int(stream.t0_ns[k]) + shift,
                                         int(stream.t1_ns[k]) + shift)
                if len(d.receive_ns):
                    delivered = [100 * float(d.softirq.mean()), 100 * float((d.poll >= 0).mean())]
            rows.append([int(stream.point[k]), size, float(stream.spacing_us[k]), t.host, pl.packets,
                         pl.interrupts_per_packet, pl.net_rx_per_packet, pl.frames_per_poll, pl.net_rx_cpu_pct,
                         *delivered])
            per_size.setdefault(size, []).append((float(stream.spacing_us[k]), pl.net_rx_per_packet,
                                                  pl.net_rx_cpu_pct))
        for size, pts in per_size.items():
            a = np.array(pts, dtype=float)
            curves[f"{t.host}, {size} B"] = (a[:, 0], a[:, 1], a[:, 2])
    sec.tables.append(Table(f"Per stream point: interrupts and CPU against spacing ({HUGHES_JONES}, §8)",
                            HOST_PROBE_POINT_COLUMNS, rows,
                            f"{name}: stream/points, stream/sent (each point's span) and host_trace/<host>/events",
                            settings=("spacing (us)",), decimals={"NET_RX CPU (%)": 2},
                            note="received inside a NET_RX run / in a NAPI poll: the receiving host's packets of "
                                 "the point (netif_receive_skb) inside a NET_RX softirq run on their CPU, and "
                                 "followed on it by a napi_poll that took them; empty for the sending host"))
    chart(sec, "NET_RX softirq runs per packet and CPU in NET_RX against spacing",
          figures.host_load_vs_spacing(curves),
          "Per host and size, over each point's span (the far host's on its own clock, shifted by the estimated "
          f"offset) ({name}: host_trace, stream/sent).", "fewer than two spacings were measured")


# -- references and correlation ------------------------------------------------------------------

def reference_section(options: Options, sections: Sequence[Section] = ()) -> Section:
    """Hughes-Jones et al.'s expected slopes and Pai et al.'s link maxima, computed; the given path's expected
    slope; the sources the report (``sections`` and this one) cites, and only those."""
    sec = Section("Reference: expected slopes and link maxima", "")
    sec.tables.append(Table(
        f"Expected RTT slopes, PCI - Gigabit Ethernet - PCI ({HUGHES_JONES}, §3.1)",
        ["element or path", f"us/byte (as {HUGHES_JONES} print it)", "exact", "note"],
        [[r.label, str(r.printed), f"{r.us_per_byte.numerator}/{r.us_per_byte.denominator}", r.note]
         for r in expected.hughes_jones_2003_slopes()],
        "computed: 1 / (bus width x clock) per PCI element, 8 ns per byte at 1 Gbit/s; paths are store and "
        "forward (PCI + Ethernet + PCI, copies excluded)"))
    maxima = throughput.pai_rixner_kim_2004_maxima()
    sec.tables.append(Table(f"Theoretical maxima at 1 Gbit/s ({PAI}, §3.3)",
                            ["test", "Mbit/s", f"as {PAI} print it (truncated)"],
                            [[k, v, math.floor(v)] for k, v in maxima.items()],
                            "computed: payload / (payload + headers + preamble + gap), frames of at least 64 bytes",
                            decimals={"Mbit/s": 1}))
    if options.path:
        slope = expected.expected_slope_us_per_byte(list(options.path), options.path_mode)
        sec.tables.append(Table(
            "The path given (--path)", ["element", "us/byte", "MB/s"],
            [[e.name, float(e.us_per_byte), e.mbytes_per_s] for e in options.path]
            + [[f"expected slope ({options.path_mode})", float(slope), float(1 / slope)]], "--path"))
    texts = [t for s in [*sections, sec] for t in section_texts(s)]
    sec.tables.append(Table("Sources cited", ["short name", "reference"],
                            [[k, REFERENCES[k]] for k in cited(texts)], "the works the report's text cites"))
    return sec


def section_texts(s: Section) -> list[str]:
    """Everything a section says in words: title, sentences, items, figure titles and captions, table titles,
    columns, cells of words, sources and notes."""
    out = [s.title, *s.text, *(f"{i.label} {i.source}" for i in s.items),
           *(f"{c.title} {c.caption}" for c in s.charts)]
    for t in s.tables:
        out += [t.title, t.source, t.note, *t.columns, *(str(v) for r in t.rows for v in r if isinstance(v, str))]
    return out


def correlation_section(name: str, labels: list[str], columns: dict[str, np.ndarray]) -> Section:
    """Pai, Rixner and Kim's Table 2 for a CSV: columns named ``app:NAME`` are applications, the others
    microbenchmarks."""
    apps = [c for c in columns if c.startswith("app:")]
    benches = [c for c in columns if not c.startswith("app:")]
    corr = cpu.correlation(columns, benches, apps)
    sec = Section(f"Microbenchmarks against applications: {name}", name)
    sec.tables.append(Table(f"Correlation coefficients (Pearson, as {PAI}, Table 2)",
                            ["microbenchmark", *[a[4:] for a in apps]],
                            [[b, *corr.coefficients[k].tolist()] for k, b in enumerate(benches)],
                            f"{name}: {corr.items} items ({', '.join(labels)})"))
    sec.text.append(Sentence("Near ±1: the microbenchmark predicts the application across these items; near 0: it "
                             f"does not. With few items ({PAI} had six NICs) the coefficients are indications, not "
                             "proof."))
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


# -- the wire ------------------------------------------------------------------------------------

WIRE_DIRECTIONS = {b"tx": "outbound", b"rx": "inbound", b"": "direction not stated"}
#: Bits a frame occupies on the wire besides its octets: preamble and SFD (8 octets), the minimum gap (12).
WIRE_EXTRA_OCTETS = 20


def _wire_rows(eth: np.ndarray) -> list[list[Any]]:
    rows = []
    for d, label in WIRE_DIRECTIONS.items():
        mine = np.sort(eth[eth["direction"] == d], order="t_ns")
        if not len(mine):
            continue
        t = mine["t_ns"].astype(np.float64)
        span = t[-1] - t[0]
        bits = float(((mine["length"][:-1].astype(np.float64) + WIRE_EXTRA_OCTETS) * 8).sum())
        rate = bits / span * 1e3 if span > 0 else math.nan  # bit/ns -> Mbit/s
        spacing = np.diff(t) / 1000
        p10, med, p90 = np.percentile(spacing, [10, 50, 90]) if len(spacing) else (math.nan,) * 3
        rows.append([label, len(mine), int((mine["pause_quanta"] >= 0).sum()), int((~mine["fcs_ok"]).sum()), rate,
                     med, p10, p90])
    return rows


def wire_section(name: str, source: str, eth: np.ndarray, described: dict[str, Any],
                 pairing: Any = None, link_rate_bps: float = 1e9, spacing: dict[int, float] | None = None,
                 stamp_ns: float = 1.0) -> Section:
    """A wire source: its frames by direction (spacing, rate, PAUSE, FCS), what the capture lost and, for a
    udpmon run recorded with ``--capture``, every datagram against its frame on the wire
    (:mod:`nicrig.analysis.wire`); ``spacing``: a stream's spacing per point; ``stamp_ns``: the coarsest
    interface's time stamp unit (ns, at least the table's 1 ns)."""
    src = f"{name}: decoded/{source}/ethernet"
    sec = Section(f"Wire: {source} of {name}", name)
    ifaces = described["interfaces"]
    sec.items.append(Item("frames captured", described["frames"], "frames", f"{name}: wire/{source}/frames"))
    drops = sum(max(i["os_drops"], 0) + max(i["if_drops"], 0) for i in ifaces)
    sec.items.append(Item("frames the capture dropped (socket or interface)", drops, "frames",
                          f"{name}: wire/{source}/interfaces (os_drops, if_drops)"))
    clocks = ", ".join(sorted({i["clock"] for i in ifaces}))
    between = resolution.capture([stamp_ns, stamp_ns])  # a time between two frames: two stamps' units
    wire_u = rectangular(between.step_ns) / 1000
    stamps_text = (f"frame time stamps in units of {number(stamp_ns, decimals=0 if stamp_ns >= 1 else 3)} ns; a time "
                   "between two frames carries both stamps' resolution, a rectangular Type B component each")
    spacing_cols = ("spacing, median (us)", "spacing, p10 (us)", "spacing, p90 (us)")
    sec.tables.append(Table("Frames on the wire, by direction", [
        "direction", "frames", "PAUSE frames", "FCS errors", "wire rate (Mbit/s)", "spacing, median (us)",
        "spacing, p10 (us)", "spacing, p90 (us)"], _wire_rows(eth), src,
        note=f"wire rate: (length + {WIRE_EXTRA_OCTETS}) octets a frame (preamble, SFD, minimum gap) over the span "
             f"of the direction's frames; time stamps by the {clocks} clock",
        resolution={c: wire_u for c in spacing_cols}, resolution_text=stamps_text))
    pause = bus.pause_summary(eth, link_rate_bps)
    if pause.xoff:
        from types import SimpleNamespace

        _wire_and_pause(sec, SimpleNamespace(wire_out=None, wire_in=None, pause=pause), eth, src, wire_u, stamps_text)
    if described["damage"]:
        sec.text.append(f"The capture file was damaged: {described['damage']}; the frames before it are analysed.")
    if pairing is not None:
        _pairing(sec, name, source, pairing, spacing, stamp_ns)
    return sec


def _pairing(sec: Section, name: str, source: str, p: Any, spacing: dict[int, float] | None, stamp_ns: float) -> None:
    from nicrig.analysis import wire

    tables = "stream/sent, stream/received, stream/points" if p.kind == "stream" else "latency/rtt, latency/visits"
    src = f"{name}: {tables}, decoded/{source}/ethernet"
    rows = p.rows
    # the engine's clock is read to 1 ns, a frame's stamp to its unit; the far engine's clock adds its offset's
    # interval
    step_ns = resolution.combined([1.0, stamp_ns])
    out_half, in_half = step_ns / 2, step_ns / 2 + p.far_uncertainty_ns
    sec.items.append(Item("datagrams sent", p.sent, "datagrams", src))
    sec.items.append(Item("of them paired with their frame on the wire", p.on_wire, "datagrams", src))
    sec.items.append(Item("share paired", 100 * p.share, "%", src, decimals=2))
    sec.items.append(Item("sent without a frame on the wire", p.sent - p.on_wire, "datagrams", src))
    sec.items.append(Item("received (engine records) with their frame", p.received_on_wire, "datagrams", src))
    sec.items.append(Item("received without a frame on the wire", p.received - p.received_on_wire, "datagrams", src))
    sec.items.append(Item("frames of the tests matching no datagram sent", p.stray_frames, "frames", src))
    h2w, w2h = rows["host_to_wire_ns"], rows["wire_to_host_ns"]
    delay_u = rectangular(step_ns) / 1000
    for label, col, half in (("send call to frame on the wire, median", h2w, out_half),
                             ("frame on the wire to receive call return, median", w2h, in_half)):
        d = wire.delays(col)
        sec.items.append(Item(label, d.median_ns / 1000, "us", src, ci95=wire.median_ci95_ns(col, half) / 1000,
                              resolution_u=delay_u))
    per = "point" if p.kind == "stream" else "visit"
    table_rows = []
    for k in np.unique(rows["point"]):
        mine = rows[rows["point"] == k]
        a, b = wire.delays(mine["host_to_wire_ns"]), wire.delays(mine["wire_to_host_ns"])
        table_rows.append([int(k), int(mine["size_bytes"][0]), *([spacing.get(int(k))] if spacing else []),
                           len(mine), a.count, a.median_ns / 1000,
                           a.p90_ns / 1000, b.count, b.median_ns / 1000, b.p90_ns / 1000])
    sec.tables.append(Table(
        f"Each datagram against its frame on the wire, per {per}",
        [per, "size (bytes)", *(["spacing (us)"] if spacing else []), "datagrams", "with frame out", "send to wire, median (us)", "p90 (us)",
         "received with frame", "wire to receive, median (us)", "p90 (us)"], table_rows, src,
        note="a datagram is matched to its frames by the kind and sequence number of its nicrig header and its UDP "
             f"ports, within its {per}'s time; send to wire: the send call to its first frame outbound; wire to "
             "receive: its last frame on the receiving side (inbound, or outbound on a capture at the sending end) "
             "to the receive call's return" + (f" (the far engine's clock moved by {p.far_offset_ns / 1000:.3f} us)"
                                                if p.far_offset_ns else ""),
        resolution={c: delay_u for c in ("send to wire, median (us)", "p90 (us)", "wire to receive, median (us)")},
        resolution_text=f"a delay runs from the engine's clock, read to 1 ns, to a frame's time stamp, in units of "
                        f"{number(stamp_ns, decimals=0 if stamp_ns >= 1 else 3)} ns: a rectangular Type B component "
                        "each", settings=("spacing (us)",) if spacing else ()))
    q = Quotes()
    sec.text.append(q.sentence(
        f"{q('', 'of them paired with their frame on the wire', str(p.on_wire))} of "
        f"{q('', 'datagrams sent', str(p.sent))} datagrams "
        f"({q('', 'share paired', number(100 * p.share, decimals=2))} %) were paired with their frame on the wire; "
        f"{q('', 'sent without a frame on the wire', str(p.sent - p.on_wire))} were sent without one and "
        f"{q('', 'received without a frame on the wire', str(p.received - p.received_on_wire))} received without "
        "one; no delay above pairs one datagram's record with another's frame."))
