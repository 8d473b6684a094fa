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
from nicrig.analysis import bus, cpu, expected, figures, latency, load, suite, sweeps, throughput
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


def _num(v: float) -> str:
    """A measured number for a sentence or a figure label: four significant figures, whole units from 1000 on."""
    if not math.isfinite(v):
        return "–"
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


# -- udpmon latency ------------------------------------------------------------------------------

@dataclass(frozen=True)
class RttSummary:
    """One latency run from its singletons: statistics per size and the fits on minimum and mean per frame count."""

    by_size: dict[int, np.ndarray]
    stats: dict[int, latency.RttStats]
    sizes: np.ndarray
    frames: np.ndarray
    mins: np.ndarray
    means: np.ndarray
    fits: dict[str, list[latency.LineFit]]

    def one_frame(self, on: str) -> latency.LineFit | None:
        """The fit of single-frame responses on ``minimum`` or ``mean`` (None: fewer than three such sizes)."""
        return next((f for f in self.fits[on] if f.frames == 1), None)


def rtt_summary(rtt_table: np.ndarray, mtu: int) -> RttSummary:
    """Per-size statistics of a ``latency/rtt`` table and its line fits, outlier sizes rejected."""
    by_size = latency.rtt_by_size(rtt_table)
    stats = {s: latency.rtt_stats(v) for s, v in by_size.items()}
    sizes = np.array(sorted(stats), dtype=np.int64)
    mins = np.array([stats[s].min_us for s in sizes])
    means = np.array([stats[s].mean_us for s in sizes])
    return RttSummary(by_size, stats, sizes, np.array([latency.frames_per_message(int(s), mtu) for s in sizes]),
                      mins, means, {"minimum": latency.fit_latency(sizes, mins, mtu, reject_outliers=True),
                                    "mean": latency.fit_latency(sizes, means, mtu, reject_outliers=True)})


FIT_COLUMNS = ["fitted on", "frames", "sizes", "slope (us/byte)", "± 95% (us/byte)", "intercept (us)", "± 95% (us)",
               "r", "outlier sizes left out"]


def _fit_row(on: str, f: latency.LineFit) -> list[Any]:
    return [on, f.frames, f.points, f.slope_us_per_byte, f.slope_ci95, f.intercept_us, f.intercept_ci95, f.r,
            ", ".join(map(str, f.rejected_sizes)) or "none"]


def _fit_source(src: str) -> str:
    return (f"{src}: least squares on each size's minimum / mean RTT; sizes more than "
            f"{latency.OUTLIER_SIGMAS:g} robust sigmas off the Theil-Sen line left out")


def latency_section(name: str, rtt_table: np.ndarray, settings: dict[str, Any], options: Options,
                    loopback: bool) -> Section:
    """Latency results: statistics per size, fits per frame count, figures, interpretation."""
    src = f"{name}: latency/rtt"
    sec = Section(f"Request-response latency: {name}", name)
    mtu = int(settings.get("mtu", 1500))
    r = rtt_summary(rtt_table, mtu)
    by_size, stats, sizes, frames, mins, means, fits = r.by_size, r.stats, r.sizes, r.frames, r.mins, r.means, r.fits
    sec.items += [Item("response sizes", len(sizes), "", src),
                  Item("round trips", int((rtt_table["rtt_ns"] >= 0).sum()), "", src),
                  Item("timeouts", int((rtt_table["rtt_ns"] < 0).sum()), "", src)]
    sec.tables.append(Table(
        "RTT per response size", ["size (bytes)", "frames", "count", "timeouts", "min (us)", "median (us)",
                                  "mean (us)", "p99 (us)", "max (us)", "FWHM (us)"],
        [[int(s), int(f), stats[s].count, stats[s].timeouts, stats[s].min_us, stats[s].median_us, stats[s].mean_us,
          stats[s].percentiles_us[99], stats[s].max_us, stats[s].fwhm_us] for s, f in zip(sizes, frames)],
        f"{src} (rtt_ns per size_bytes; -1 = timeout)"))
    sec.tables.append(Table("RTT = intercept + slope x size, per frame count", FIT_COLUMNS,
                            [_fit_row(on, f) for on, fl in fits.items() for f in fl], _fit_source(src)))
    if len(sizes):
        sec.charts.append(Chart("RTT against response size", figures.latency_vs_size(
            sizes, mins, means, fits["minimum"], fits["mean"], frames),
            f"Minimum and mean RTT of each size with the fitted lines ({src})."))
        sec.charts.append(Chart("RTT histograms", figures.rtt_histograms(
            {s: v[v >= 0] / 1000 for s, v in by_size.items() if (v >= 0).any()}, float(settings.get("bin_us", 1.0))),
            f"Round trips of up to four sizes, 1-us bins unless the run said otherwise ({src})."))
    one = r.one_frame("minimum")
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

BEST_COLUMNS = ["size (bytes)", "best user rate (Mbit/s)", "at spacing (us)", "no loss from (us)",
                "link allows (Mbit/s)", "share of link (%)", "frame on wire (us)"]
POINT_COLUMNS = ["size (bytes)", "spacing (us)", "user (Mbit/s)", "wire (Mbit/s)", "lost", "lost (%)",
                 "receiver CPU idle (%)", "receiver interrupts per packet"]


def _best_row(c: throughput.SizeCurve) -> list[Any]:
    return [c.size_bytes, c.max_user_rate_mbps, c.spacing_at_max_us, c.knee_spacing_us, c.theoretical_max_user_mbps,
            100 * c.max_user_rate_mbps / c.theoretical_max_user_mbps, c.frame_time_on_wire_us]


def _point_rows(c: throughput.SizeCurve) -> list[list[Any]]:
    return [[c.size_bytes, c.spacing_us[k], c.user_rate_mbps[k], c.wire_rate_mbps[k], int(c.lost[k]), c.loss_pct[k],
             c.receiver_cpu_idle_pct[k], c.receiver_interrupts_per_packet[k]] for k in range(c.spacing_us.size)]


def _best_source(src: str) -> str:
    return f"{src} (user_rate_mbps, spacing_us, lost); link maxima computed as seed 000 3.3"


def _point_source(src: str) -> str:
    return f"{src} (user_rate_mbps, wire_rate_mbps, lost, remote_cpu_busy_pct, remote_interrupts, received)"


def stream_section(name: str, points: np.ndarray, settings: dict[str, Any], link_rate_bps: float | None) -> Section:
    src = f"{name}: stream/points"
    sec = Section(f"Throughput against transmit spacing: {name}", name)
    mtu = int(settings.get("mtu", 1500))
    curves = throughput.size_curves(points, link_rate_bps=link_rate_bps, mtu=mtu)
    sec.items.append(Item("link assumed", link_rate_bps / 1e6 if link_rate_bps else "none (loopback)",
                          "Mbit/s" if link_rate_bps else "", "--link-rate, or the results' interface"))
    sec.tables.append(Table("Best throughput per size (as seed 002 figure 9.1)", BEST_COLUMNS,
                            [_best_row(c) for c in curves], _best_source(src)))
    sec.tables.append(Table("Every point", POINT_COLUMNS, [r for c in curves for r in _point_rows(c)],
                            _point_source(src)))
    if curves:
        sec.charts.append(Chart("Throughput against transmit spacing", figures.throughput_vs_spacing(curves),
                                f"User rate per size (dotted: the offered load, size / spacing), loss, the receiving "
                                f"host's CPU idle time and interrupts per packet ({src})."))
    sec.text += [throughput.interpret_curve(c) for c in curves]
    return sec


# -- the CPU model, from the load tables ---------------------------------------------------------

#: Seed 004's coefficients for TCP on its hosts, jiffies: per MB, per 1000 packets, per 1000 interrupts.
SEED004_CPU = {"alpha": 0.1, "beta": 0.4, "gamma": 1.4}
SEED004_TEXT = ", ".join(f"{k} {v:g}" for k, v in SEED004_CPU.items()) + " jiffies"


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


def cpu_section(hosts: Sequence[HostLoad]) -> Section:
    """Seed 004's CPU model T = alpha N_MB + beta N_KP + gamma N_KI, fitted per host over every point given."""
    files = list(dict.fromkeys(file for h in hosts for file, _ in h.sources))
    sec = Section("CPU model (seed 004), from the load tables", ", ".join(files))
    rows, fits, text = [], {}, []
    for h in hosts:
        sources = ", ".join(sorted(load.interrupt_sources(h.rows)))
        try:
            fit = load.fit(h.rows)
        except UsageError as exc:
            rows.append([h.host, len(h.rows), *[None] * 7, sources, f"not fitted: {exc}"])
            text.append(f"{h.host}: not fitted: {exc}.")
            continue
        loose = _undetermined(fit)
        fits[h.host] = fit
        rows.append([h.host, fit.runs, fit.alpha_per_mbyte, fit.alpha_ci95, fit.beta_per_kpacket, fit.beta_ci95,
                     fit.gamma_per_kinterrupt, fit.gamma_ci95, fit.r_squared, sources,
                     f"{', '.join(loose)} undetermined (95% interval includes zero)" if loose else "fitted"])
        text.append(f"{h.host}: T = {fit.alpha_per_mbyte:.3g} N_MB + {fit.beta_per_kpacket:.3g} N_KP + "
                    f"{fit.gamma_per_kinterrupt:.3g} N_KI jiffies over {fit.runs} points (R² {fit.r_squared:.2f})"
                    + (f"; {', '.join(loose)} not determined by these points: their 95% interval includes zero "
                       "(a jiffy is 10 ms: run longer points over more sizes and interrupt rates)." if loose else "."))
    sec.tables.append(Table(
        "T = alpha N_MB + beta N_KP + gamma N_KI per host",
        ["host", "points", "alpha, per MB (jiffies)", "alpha ± 95%", "beta, per 1000 packets (jiffies)",
         "beta ± 95%", "gamma, per 1000 interrupts (jiffies)", "gamma ± 95%", "R²", "interrupts counted", "status"],
        rows,
        " | ".join(f"{h.host}: {h.source}" for h in hosts)
        + " (kernel_jiffies, megabytes, kilo_packets, kilo_interrupts of each host's rows)",
        note=f"least squares without intercept; seed 004 found {SEED004_TEXT} for TCP"))
    if fits:
        sec.charts.append(Chart("Kernel CPU time: observed against the model", figures.cpu_model(fits),
                                "Each point's system + irq + softirq jiffies on each host against its fitted model "
                                "(the load tables named under the table)."))
    text.append(f"Seed 004 found {SEED004_TEXT} (TCP, 1.6 GHz Pentium 4 hosts): the per-interrupt cost "
                "dominates, which interrupt coalescence reduces.")
    if any("host" in load.interrupt_sources(h.rows) for h in hosts):
        text.append("Where 'interrupts counted' says host, the interface has no interrupt lines of its own (veth, "
                    "loopback) and N_KI counts every interrupt of the host.")
    sec.text += text
    return sec


# -- udpmon suite and aggregate ------------------------------------------------------------------

BENCH_COLUMNS = ["#", "test", "seed 000 figures", "size (bytes)", "best loss-free offered load", "offered unit",
                 "throughput", "unit", "theoretical maximum", "% of theoretical", "lost at best trial",
                 "sent at best trial", "loss at best trial (%)", "trials", "limited by", "status"]
#: Bars longer than this share of the theoretical maximum are cut (TCP through memory reaches 1000s of %).
BAR_CAP_PCT = 150.0


def _bench_row(b: suite.Benchmark) -> list[Any]:
    return [b.seed_test, b.title, b.figures, b.size_bytes, b.best_loss_free_offered, b.offered_unit, b.throughput,
            b.unit, b.theoretical, b.percent_of_theoretical, b.lost, b.sent, b.loss_pct, b.trials, b.limited_by,
            b.status]


def _suite_source(name: str, prefixes: Sequence[str] = ("",)) -> str:
    tables = ", ".join(f"{p}suite/{t}" for p in prefixes for t in ("tests", "trials", "flows"))
    return (f"{name}: {tables}. Each trial's throughput: its flows' received, bytes, first_ns and last_ns "
            "(suite/flows); the best trial as udpmon chooses it; maxima at the link_mbps and mtu attributes of "
            "suite/tests")


def _suite_chart(title: str, runs: Sequence[tuple[str, suite.SuiteRun]], src: str) -> Chart:
    """Bars of every test's share of its maximum, one bar per run (or step) in each test's row."""
    names = list(dict.fromkeys(b.name for _, r in runs for b in r.benchmarks))
    series, notes = {}, {}
    for label, r in runs:
        got = [next((b for b in r.benchmarks if b.name == n), None) for n in names]
        series[label] = np.array([b.percent_of_theoretical if b else math.nan for b in got])
        notes[label] = [f"{_num(b.throughput)} of {_num(b.theoretical)} {b.unit}" if b else "" for b in got]
    categories = [f"{t.seed_test}. {t.title}" for t in (suite.TESTS_BY_NAME[n] for n in names)]
    return Chart(title, figures.grouped_bars(categories, series, "% of the theoretical maximum", notes=notes,
                                             reference=100.0, cap=BAR_CAP_PCT, unit="%"),
                 f"As seed 000 figures 5-11: each test's best throughput as a share of the most a perfect NIC could "
                 f"reach at the link rate, the value beside each bar; bars beyond {BAR_CAP_PCT:g}% are cut and "
                 f"labelled ({src}).")


def _interpret_suite(run: suite.SuiteRun) -> list[str]:
    """Seed 000 section 4.5's three readings, where the tests that show them were run."""
    by = {b.name: b for b in run.benchmarks}
    text = []
    if run.link_source.startswith("assumed"):
        text.append(f"The link rate was {run.link_source}: the maxima assume {run.link_mbps:g} Mbit/s.")
    over = [b.title for b in run.benchmarks if b.percent_of_theoretical > 105]
    if over:
        text.append(f"{', '.join(over)}: above the link's maximum, so no {run.link_mbps:g} Mbit/s Ethernet "
                    "link lay on the path (veth and loopback move data through memory).")
    lossy = [b.title for b in run.benchmarks if b.trials and not b.lossless]
    if lossy:
        text.append(f"No loss-free trial for {', '.join(lossy)}: the least lossy trial is shown; the hosts lost "
                    "datagrams or connection attempts at every rate tried (socket buffers, a descheduled receiver).")
    small = [b for b in (by.get("udp-send-18"), by.get("udp-recv-18")) if b is not None and b.trials]
    large = [b for b in (by.get("udp-send-1472"), by.get("udp-recv-1472")) if b is not None and b.trials]
    if small and large and max(b.percent_of_theoretical for b in small) < 50 <= min(
            b.percent_of_theoretical for b in large):
        text.append("Small datagrams reach under half their maximum while large ones do not: per-frame "
                    "overheads, not per-byte ones, limit this host (seed 000 4.2).")
    for size in (1472, 18):
        three, send, recv = (by.get(f"udp-{k}-{size}") for k in ("3way", "send", "recv"))
        if all(b is not None and b.trials for b in (three, send, recv)):
            both = send.throughput + recv.throughput
            share = three.throughput / both if both > 0 else math.nan
            if math.isfinite(share):
                text.append(f"3-way, {size}-byte datagrams: {_num(three.throughput)} Mbit/s, {100 * share:.0f}% "
                            f"of send + receive apart ({_num(both)})"
                            + (": send and receive paths share a limited resource (seed 000 4.3)." if share < 0.9
                               else ": the send and receive paths do not hold each other back (seed 000 4.3)."))
    bad = suite.disagreements(run.benchmarks)
    if bad:
        text.append(f"Rebuilt from the flows, {', '.join(bad)} differ from suite/tests: the file is "
                    "inconsistent.")
    return text


def suite_section(name: str, run: suite.SuiteRun) -> Section:
    """Seed 000's microbenchmarks (figures 5-11): each test's best trial against the theoretical maximum."""
    src = _suite_source(name)
    sec = Section(f"NIC microbenchmarks (seed 000): {name}", name)
    sec.items += [Item("link rate of the maxima", run.link_mbps, "Mbit/s",
                       f"{name}: suite/tests attribute link_mbps ({run.link_source})"),
                  Item("MTU of the TCP maxima", run.mtu, "bytes", f"{name}: suite/tests attribute mtu")]
    sec.tables.append(Table("Throughput per test against the theoretical maximum (seed 000 figures 5-11)",
                            BENCH_COLUMNS, [_bench_row(b) for b in run.benchmarks], src,
                            note="sent: datagrams (UDP), bytes (TCP), connection attempts; offered load per flow"))
    sec.charts.append(_suite_chart("Throughput per test, % of the theoretical maximum", [(name, run)], src))
    sec.text += _interpret_suite(run)
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


def aggregate_section(name: str, agg: suite.Aggregate, addresses: dict[str, str]) -> Section:
    """Flows to or from several daemons at once: each flow's rate and their total (seed 004's N senders)."""
    src = _aggregate_source(name)
    sec = Section(f"Aggregate throughput: {name}", name)
    sec.items += [Item("total, sum of the flows' rates", agg.sum_rate_mbps, "Mbit/s", src),
                  Item("total over the flows' common span", agg.span_rate_mbps, "Mbit/s",
                       f"{src}; defined when every flow arrived on one clock")]
    sec.tables.append(Table("Flows and their total", FLOW_COLUMNS, _flow_rows(agg, addresses), src,
                            note="sent and received: datagrams (UDP) or bytes (TCP)"))
    labels = [f.label for f in agg.flows] + ["total (sum)"]
    sec.charts.append(Chart("Throughput per flow and in total", figures.grouped_bars(
        labels, {name: np.array([f.rate_mbps for f in agg.flows] + [agg.sum_rate_mbps])}, "Mbit/s at the receiver",
        notes={name: [f"{_num(v)} Mbit/s" for v in [f.rate_mbps for f in agg.flows] + [agg.sum_rate_mbps]]}),
        f"Each flow's receiver rate and their sum ({src})."))
    sec.text += _interpret_aggregate(agg)
    return sec


def _interpret_aggregate(agg: suite.Aggregate) -> list[str]:
    rates = [f.rate_mbps for f in agg.flows]
    text = [f"{len(rates)} flows, {_num(agg.sum_rate_mbps)} Mbit/s together; the slowest "
            f"{_num(min(rates))}, the fastest {_num(max(rates))} Mbit/s"
            + (f"; {agg.lost} of {agg.sent} lost." if agg.lost else ", nothing lost.")]
    if math.isfinite(agg.span_rate_mbps):
        text.append(f"Over the span from the first arrival of any flow to the last of any: "
                    f"{_num(agg.span_rate_mbps)} Mbit/s; well below the sum, it says the flows did not all run at "
                    "the same time.")
    return text


def suite_correlation_section(runs: Sequence[tuple[str, str, suite.SuiteRun]]) -> Section:
    """Seed 000 Table 2's arithmetic over the suite runs given, (file, label, run) each: tests against tests.

    The items are the runs: files (one NIC or host pair each) and sweep steps.
    """
    columns, dropped = suite.throughput_columns([(label, r.benchmarks) for _, label, r in runs])
    names = list(columns)
    labels = [label for _, label, _ in runs]
    src = f"the throughput column of the tables above ({', '.join(labels)})"
    sec = Section("Microbenchmarks across runs (seed 000 Table 2)", ", ".join(dict.fromkeys(f for f, _, _ in runs)))
    sec.tables.append(Table("Throughput per run and test", ["run", *names],
                            [[label, *[float(columns[n][k]) for n in names]] for k, label in enumerate(labels)], src))
    if dropped:
        sec.text.append(f"Left out, not measured in every run: {', '.join(dropped)}.")
    if len(runs) < 3 or len(names) < 2:
        sec.text.append(f"Correlation undetermined: {len(runs)} run(s) and {len(names)} test(s) measured in all; "
                        "Pearson coefficients need at least 3 runs (NICs, files or sweep steps; seed 000 had six "
                        "NICs) and 2 tests.")
        return sec
    corr = cpu.correlation(columns, names, names)
    sec.tables.append(Table("Correlation coefficients between the tests (Pearson, as seed 000 Table 2)",
                            ["test", *names], [[n, *corr.coefficients[k].tolist()] for k, n in enumerate(names)],
                            f"{src}; {corr.items} runs"))
    flat = [n for n in names if np.ptp(columns[n]) == 0]
    if flat:
        sec.text.append(f"{', '.join(flat)} did not vary across the runs: no coefficient (–).")
    sec.text.append(f"Over {corr.items} runs: near ±1 two tests rise and fall together across the runs, near 0 they "
                    "do not. Seed 000 correlated each test with application throughput across six NICs; give the "
                    "applications' numbers with --correlation for that table. Few runs make the coefficients "
                    "indications, not proof.")
    return sec


# -- udpmon sweeps -------------------------------------------------------------------------------

def _per_step(said: Sequence[tuple[str, list[str]]]) -> list[str]:
    """Each step's sentences, a sentence several steps share said once with all their names."""
    steps: dict[str, list[str]] = {}
    for label, lines in said:
        for line in lines:
            steps.setdefault(line, []).append(label)
    return [f"{', '.join(labels)}: {line}" for line, labels in steps.items()]


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
            "Host load per step (seed 004's metrics)",
            ["step", "host", "points", "seconds", "throughput, mean (Mbit/s)", "interrupts/s", "packets per interrupt",
             "kernel CPU (% of one CPU)", "kernel jiffies per MB"], rows,
            _paths(name, [s for s, _ in loads], "load")
            + " (interval_s, clk_tck, kernel_jiffies, megabytes, kilo_packets, kilo_interrupts, throughput_mbps; "
              "sums over the step's points, then ratios)"))
    return sec


def _is_delay(setting: str) -> bool:
    """Whether a ``sweep/steps`` column is a delay in microseconds (ethtool -C): seed 002 section 8's RxInt, TxInt."""
    return setting.endswith(("usecs", "usecs_irq"))


def sweep_latency_section(name: str, parts: Sequence[tuple[sweeps.Step, np.ndarray, int]], *,
                          applied: np.ndarray | None, swept: Sequence[str],
                          loads: Sequence[tuple[sweeps.Step, np.ndarray]], loopback: bool) -> Section:
    """Latency per sweep step (seed 002 figure 8.1): mean RTT against size per setting, the fits of every step."""
    steps = [s for s, _, _ in parts]
    src = _paths(name, steps, "latency/rtt")
    sec = _sweep_section(name, "latency", steps, applied, swept, loads)
    summaries = [(step, rtt_summary(rtt, mtu)) for step, rtt, mtu in parts]
    rows, stacked = [], []
    for step, r in summaries:
        for s, f in zip(r.sizes, r.frames):
            st = r.stats[int(s)]
            rows.append([step.label, int(s), int(f), st.count, st.timeouts, st.min_us, st.median_us, st.mean_us,
                         st.percentiles_us[99]])
        mean = np.zeros(len(r.sizes), dtype=[("size_bytes", "<i8"), ("mean_us", "<f8")])
        mean["size_bytes"], mean["mean_us"] = r.sizes, r.means
        stacked.append((step, mean))
    sec.tables.append(Table("RTT per size and step", ["step", "size (bytes)", "frames", "count", "timeouts", "min (us)",
                                                      "median (us)", "mean (us)", "p99 (us)"], rows,
                            f"{src} (rtt_ns per size_bytes; -1 = timeout)"))
    first = summaries[0][1].one_frame("mean")
    base = {(on, f.frames): f.intercept_us for on, fl in summaries[0][1].fits.items() for f in fl}
    fit_rows = [[step.label, *_fit_row(on, f), f.intercept_us - base.get((on, f.frames), math.nan)]
                for step, r in summaries for on, fl in r.fits.items() for f in fl]
    sec.tables.append(Table("RTT = intercept + slope x size, per step and frame count",
                            ["step", *FIT_COLUMNS, f"intercept - {steps[0].label}'s (us)"], fit_rows, _fit_source(src)))
    intercepts = {step.label: f.intercept_us for step, r in summaries if (f := r.one_frame("mean")) is not None}
    sec.charts.append(Chart("Mean RTT against response size per setting (as seed 002 figure 8.1)",
                            figures.rtt_per_setting(sweeps.curves(steps, sweeps.stacked(stacked), "size_bytes",
                                                                  "mean_us"), intercepts),
                            f"The mean round trip of each size, one curve per sweep step, the single-frame fit's "
                            f"intercept in the legend ({src})."))
    if first is None:
        sec.text.append(f"{steps[0].label}: fewer than three single-frame sizes, no intercept to compare the steps "
                        "with.")
        return sec
    delays = [k for k in steps[0].settings if _is_delay(k)]
    for step, r in summaries[1:]:
        f = r.one_frame("mean")
        if f is None:
            continue
        line = (f"{step.label}: intercept {f.intercept_us:.1f} ± {f.intercept_ci95:.1f} us, "
                f"{f.intercept_us - first.intercept_us:+.1f} us against {steps[0].label}")
        added = [step.settings[k] - steps[0].settings[k] for k in delays]
        if len(added) == 1:
            line += f" for {added[0]:+d} us of {delays[0].replace('_', '-')}"
        sec.text.append(line + ".")
    if delays:
        sec.text.append("Seed 002 section 8: the RTT rises by about the added interrupt coalescence, a delay the "
                        "receiving NIC waits before interrupting.")
    if loopback:
        sec.text.append("Measured over loopback: no NIC lies on the path, so coalescence settings cannot act.")
    return sec


def sweep_stream_section(name: str, parts: Sequence[tuple[sweeps.Step, np.ndarray, int]], *,
                         link_rate_bps: float | None, applied: np.ndarray | None, swept: Sequence[str],
                         loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """Streams per sweep step (seed 002 figures 8.2, 8.3): throughput, loss, CPU and interrupts per setting."""
    steps = [s for s, _, _ in parts]
    src = _paths(name, steps, "stream/points")
    sec = _sweep_section(name, "stream", steps, applied, swept, loads)
    per_step = [(step, throughput.size_curves(points, link_rate_bps=link_rate_bps, mtu=mtu))
                for step, points, mtu in parts]
    several = len({c.size_bytes for _, cs in per_step for c in cs}) > 1
    curves = [(step, c) for step, cs in per_step for c in cs]
    sec.items.append(Item("link assumed", link_rate_bps / 1e6 if link_rate_bps else "none (loopback)",
                          "Mbit/s" if link_rate_bps else "", "--link-rate, or the results' interface"))
    sec.tables.append(Table("Best throughput per step and size", ["step", *BEST_COLUMNS],
                            [[step.label, *_best_row(c)] for step, c in curves], _best_source(src)))
    sec.tables.append(Table("Every point per step", ["step", *POINT_COLUMNS],
                            [[step.label, *r] for step, c in curves for r in _point_rows(c)], _point_source(src)))
    if curves:
        sec.charts.append(Chart(
            "Throughput against transmit spacing per setting (as seed 002 figures 8.2, 8.3)",
            figures.throughput_vs_spacing([c for _, c in curves],
                                          [f"{s.label}, {c.size_bytes} B" if several else s.label for s, c in curves]),
            f"User rate per sweep step (dotted: the offered load), loss, the receiving host's CPU idle time and "
            f"interrupts per packet ({src})."))
    sec.text += _per_step([(step.label, [throughput.interpret_curve(c)]) for step, c in curves])
    return sec


def sweep_suite_section(name: str, parts: Sequence[tuple[sweeps.Step, suite.SuiteRun]], *, applied: np.ndarray | None,
                        swept: Sequence[str], loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """Seed 000's microbenchmarks per sweep step: the figures 5-11 table of every step, bars per step."""
    steps = [s for s, _ in parts]
    src = _suite_source(name, [s.prefix for s in steps])
    sec = _sweep_section(name, "suite", steps, applied, swept, loads)
    sec.tables.append(Table("Throughput per step and test against the theoretical maximum (seed 000 figures 5-11)",
                            ["step", "link (Mbit/s)", "MTU", *BENCH_COLUMNS],
                            [[s.label, r.link_mbps, r.mtu, *_bench_row(b)] for s, r in parts for b in r.benchmarks],
                            src, note="sent: datagrams (UDP), bytes (TCP), connection attempts; offered load per flow"))
    sec.charts.append(_suite_chart("Throughput per test and step, % of the theoretical maximum",
                                   [(s.label, r) for s, r in parts], src))
    for n in dict.fromkeys(b.name for _, r in parts for b in r.benchmarks):
        got = [(s.label, b) for s, r in parts for b in r.benchmarks if b.name == n and math.isfinite(b.throughput)]
        if got:
            label, best = max(got, key=lambda x: x[1].throughput)
            sec.text.append(f"{best.title}: highest at {label}, {_num(best.throughput)} {best.unit} "
                            f"({best.percent_of_theoretical:.0f}% of {_num(best.theoretical)}).")
    sec.text += _per_step([(s.label, _interpret_suite(r)) for s, r in parts])
    return sec


def sweep_aggregate_section(name: str, parts: Sequence[tuple[sweeps.Step, suite.Aggregate]], addresses: dict[str, str],
                            *, applied: np.ndarray | None, swept: Sequence[str],
                            loads: Sequence[tuple[sweeps.Step, np.ndarray]]) -> Section:
    """Aggregates per sweep step: every flow's rate and the total, bars per step."""
    steps = [s for s, _ in parts]
    src = _aggregate_source(name, [s.prefix for s in steps])
    sec = _sweep_section(name, "aggregate", steps, applied, swept, loads)
    sec.tables.append(Table("Flows and their total per step", ["step", *FLOW_COLUMNS],
                            [[s.label, *row] for s, a in parts for row in _flow_rows(a, addresses)], src,
                            note="sent and received: datagrams (UDP) or bytes (TCP)"))
    hosts = list(dict.fromkeys(f.label for _, a in parts for f in a.flows))
    series = {s.label: np.array([next((f.rate_mbps for f in a.flows if f.label == h), math.nan) for h in hosts]
                                + [a.sum_rate_mbps]) for s, a in parts}
    sec.charts.append(Chart("Throughput per flow and in total, per setting", figures.grouped_bars(
        [*hosts, "total (sum)"], series, "Mbit/s at the receiver",
        notes={k: [f"{_num(v)}" for v in vals] for k, vals in series.items()}),
        f"Each flow's receiver rate and their sum, one bar per sweep step ({src})."))
    sec.text += _per_step([(s.label, _interpret_aggregate(a)) for s, a in parts])
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
