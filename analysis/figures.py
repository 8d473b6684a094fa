"""The report's figures, drawn with matplotlib (no display needed) and returned as PNG bytes with what they show.

Each figure is one a reader of Hughes-Jones et al. 2003 recognises: RTT
against response size with the fitted lines (figures 4.1, 4.5), RTT
histograms (6.4), throughput against transmit spacing with loss and CPU (4.2,
6.2), one curve per interrupt-coalescing (or MTU) setting (8.1, 8.2), the
signals of one frame on both buses and the link as a logic analyzer shows them
(4.3, 4.7), and the gaps PAUSE frames leave in a stream (4.9); Pai, Rixner and
Kim 2004's microbenchmark throughputs against their theoretical maxima
(figures 5-11) as bars.

Every function returns a :class:`Drawing`: the PNG and how many marks (points,
bars, boxes) each panel draws, so a report can tell a figure that shows
nothing (:data:`MIN_MARKS`) and say so in a sentence instead. A panel with
nothing to show (no loss at any spacing, CPU not measured) is left out and
named in :attr:`Drawing.left_out`; legends sit outside the data.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from matplotlib.figure import Figure

from nicrig.analysis.bus import BusActivity, FramePath
from nicrig.analysis.cpu import CpuModelFit
from nicrig.analysis.latency import LatencyEstimate, histogram
from nicrig.analysis.throughput import SizeCurve

DPI = 100
COLOURS = {"csr": "#d62728", "fetch": "#1f77b4", "receive": "#2ca02c", "writeback": "#9467bd",
           "other": "#7f7f7f", "irq": "#ff7f0e", "wire": "#17becf"}


#: A panel shows something when it draws at least this many marks (one point on an axis shows no relation).
MIN_MARKS = 2


@dataclass(frozen=True)
class Drawing:
    """A figure's PNG, the marks each panel draws, and the panels left out for having nothing to show (a few
    words each: "loss: nothing was lost")."""

    png: bytes
    panels: tuple[int, ...]
    left_out: tuple[str, ...] = ()

    @property
    def shows_something(self) -> bool:
        return bool(self.panels) and min(self.panels) >= MIN_MARKS


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def _marks(*arrays: np.ndarray) -> int:
    """How many (x, y) points with all coordinates finite."""
    ok = np.ones(np.shape(arrays[0]), dtype=bool)
    for a in arrays:
        ok &= np.isfinite(np.asarray(a, dtype=np.float64))
    return int(ok.sum())


def _legend_below(ax, n: int) -> None:
    """The legend under the axes, where it covers no data."""
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(0.0, -0.16), ncol=1 if n > 3 else n, frameon=False)


#: Marker and colour of each statistic a visit is reduced to.
STATISTIC_STYLE = {"minimum": ("s", "#2ca02c"), "mean": ("o", "#1f77b4"), "main mode": ("D", "#9467bd")}


def latency_vs_size(est: LatencyEstimate) -> Drawing:
    """Each size's per-round values (mean over the rounds, 95% bars) and the lines through them per frame count
    with their slope and intercept, suspect sizes circled: the minimum and main mode above, the mean (which the
    long tail of round trips can put on another scale) below. Legends under each panel, off the points; the
    axes' numbers are plain (no offset such as "+1.966e2" for the reader to add)."""
    from nicrig.analysis.quantity import measured

    panels = [[st for st in ("minimum", "main mode") if st in est.values], ["mean"] if "mean" in est.values else []]
    panels = [p for p in panels if p]
    fig = Figure(figsize=(8, 4.2 * len(panels)))
    sizes = est.sizes.astype(np.float64)
    marks = []
    for k, stats in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, k + 1)
        shown = 0
        for stat in stats:
            values = est.values[stat]
            marker, colour = STATISTIC_STYLE[stat]
            ci = np.where(np.isfinite(est.values_ci95[stat]), est.values_ci95[stat], 0.0)
            ax.errorbar(sizes, values, yerr=ci, fmt=marker, ms=3, color=colour, elinewidth=0.8, capsize=1.5,
                        label=f"{stat} per round")
            shown += _marks(sizes, values)
            bad = est.suspect[stat]
            if bad.any():
                ax.plot(sizes[bad], values[bad], "o", ms=9, mfc="none", mec="#d62728", mew=1.2, label="suspect")
            for f in est.fits.get(stat, []):
                x = sizes[est.frames == f.frames]
                xs = np.array([x.min(), x.max()])
                ax.plot(xs, f.intercept_us + f.slope_us_per_byte * xs, "-", color=colour, lw=1.2,
                        label=f"{stat}, {f.frames} frame(s): {measured(f.slope_us_per_byte, f.slope_ci95, 'us/byte')}"
                              f", {measured(f.intercept_us, f.intercept_ci95, 'us')}")
        marks.append(shown)
        ax.set_ylabel("round-trip time (us)")
        ax.ticklabel_format(axis="y", useOffset=False)
        ax.grid(alpha=0.3)
        ax.set_xlabel("response size (bytes)")
        _legend_below(ax, len(ax.get_legend_handles_labels()[0]))
    fig.tight_layout()
    return Drawing(_png(fig), tuple(marks))


def rtt_histograms(rtt_us: dict[int, np.ndarray], fwhm_us: Mapping[int, tuple[float, float]],
                   bin_us: float = 1.0) -> Drawing:
    """RTT histograms of the sizes given (:func:`nicrig.analysis.latency.histogram_sizes` picks them), each titled
    with its FWHM and 95% half-width; a panel's marks are its round trips."""
    from nicrig.analysis.quantity import measured

    sizes = sorted(rtt_us)
    fig = Figure(figsize=(8, 2.2 * max(len(sizes), 1)))
    for n, s in enumerate(sizes):
        ax = fig.add_subplot(len(sizes), 1, n + 1)
        edges, counts = histogram(rtt_us[s], bin_us)
        # the peak and its near tail; far stragglers would squeeze the peak into one pixel (and cost a bar each)
        right = max(float(np.percentile(rtt_us[s], 95)), edges[0] + 20 * bin_us)
        beyond = int((rtt_us[s] > right).sum())
        shown = edges <= right
        ax.stairs(counts[shown], np.append(edges[shown], edges[shown][-1] + bin_us), fill=True, color="#1f77b4")
        ax.set_xlim(edges[0] - bin_us, right + bin_us)
        width, ci = fwhm_us.get(s, (math.nan, math.nan))
        ax.set_title(f"{s} bytes: FWHM {measured(width, ci, 'us')}"
                     + (f" ({beyond} beyond {right:.0f} us not shown)" if beyond else ""), fontsize=9)
        ax.set_ylabel("count")
        ax.grid(alpha=0.3)
        ax.set_xlabel("round-trip time (us)")
    fig.tight_layout()
    return Drawing(_png(fig), tuple(int(np.size(rtt_us[s])) for s in sizes))


def throughput_vs_spacing(curves: Sequence[SizeCurve], labels: Sequence[str] | None = None) -> Drawing:
    """User rate (offered load dotted) against spacing per curve; loss, receiver CPU idle and interrupts below,
    each only where it has something to show (loss only where some was lost, CPU and interrupts only where
    measured): the others are named in :attr:`Drawing.left_out`.

    A curve is labelled with its size unless ``labels`` names each (a sweep's
    setting: Hughes-Jones et al. 2003, figures 8.2, 8.3).
    """
    lost = any((c.lost > 0).any() for c in curves)
    idle = any(np.isfinite(c.receiver_cpu_idle_pct).any() for c in curves)
    irq = any(np.isfinite(c.receiver_interrupts_per_packet).any() for c in curves)
    below = [(name, field) for name, field, keep in (
        ("lost (%)", "loss_pct", lost), ("receiver CPU idle (%)", "receiver_cpu_idle_pct", idle),
        ("receiver interrupts\nper packet", "receiver_interrupts_per_packet", irq)) if keep]
    left_out = [why for why, keep in (("loss: nothing was lost at any spacing", lost),
                                      ("receiver CPU idle: not measured", idle),
                                      ("receiver interrupts: not counted", irq)) if not keep]
    fig = Figure(figsize=(8, 2.6 + 1.9 * len(below)))
    axes = [fig.add_subplot(1 + len(below), 1, k + 1) for k in range(1 + len(below))]
    rate = axes[0]
    marks = [0] * len(axes)
    for n, c in enumerate(curves):
        ci = np.where(np.isfinite(c.user_rate_ci95_mbps), c.user_rate_ci95_mbps, 0.0)
        line, _, _ = rate.errorbar(c.spacing_us, c.user_rate_mbps, yerr=ci, fmt="o-", ms=3, elinewidth=0.8,
                                   capsize=1.5, label=labels[n] if labels is not None else f"{c.size_bytes} B")
        marks[0] += _marks(c.spacing_us, c.user_rate_mbps)
        finite = np.isfinite(c.offered_mbps)
        rate.plot(c.spacing_us[finite], c.offered_mbps[finite], ":", color=line.get_color(), lw=0.8)
        for k, (_, field) in enumerate(below, start=1):
            y = getattr(c, field)
            axes[k].plot(c.spacing_us, y, "o-", ms=3, color=line.get_color())
            marks[k] += _marks(c.spacing_us, y)
    top = max((np.nanmax(c.user_rate_mbps) for c in curves if np.isfinite(c.user_rate_mbps).any()), default=1)
    rate.set_ylim(0, top * 1.15)
    rate.set_ylabel("user rate (Mbit/s)")
    _legend_below(rate, len(curves))
    for k, (name, field) in enumerate(below, start=1):
        axes[k].set_ylabel(name)
        peak = max((np.nanmax(getattr(c, field)) for c in curves if np.isfinite(getattr(c, field)).any()), default=0)
        # from zero (a share or a count has no negative side); CPU time on its whole 0-100% scale
        axes[k].set_ylim(0, 100 if field == "receiver_cpu_idle_pct" else (peak * 1.15 if peak > 0 else 1.0))
    axes[-1].set_xlabel("transmit spacing (us)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.ticklabel_format(axis="y", useOffset=False)
    fig.tight_layout()
    return Drawing(_png(fig), tuple(marks), tuple(left_out))


def _lane(ax, y: float, spans: list[tuple[float, float]], colour: str, separate: bool = False) -> int:
    """Boxes on lane ``y`` (how many); ``separate`` outlines them in white so back-to-back ones stay apart."""
    if spans:
        ax.broken_barh([(a / 1000, max((b - a) / 1000, 0.02)) for a, b in spans], (y - 0.35, 0.7),
                       facecolor=colour, edgecolor="white" if separate else colour, linewidth=0.4)
    return len(spans)


def bus_timeline(path: FramePath, sender: BusActivity, receiver: BusActivity, sender_irq: np.ndarray | None,
                 receiver_irq: np.ndarray | None, wire: np.ndarray | None = None, margin_us: float = 5.0) -> Drawing:
    """One frame's journey as a logic analyzer shows it: both buses' CSR accesses, DMA and INTA#, and the wire;
    its marks are the boxes drawn.

    ``wire``: the link's frames (an ``ethernet`` table), drawn faint around the frame followed.
    """
    times = [t for t in (path.send_csr_start_ns, path.send_first_word_ns, path.wire_start_ns,
                         path.recv_service_end_ns, path.recv_dma_end_ns, path.wire_end_ns) if np.isfinite(t)]
    t0, t1 = min(times) - margin_us * 1000, max(times) + margin_us * 1000
    fig = Figure(figsize=(9, 3.6))
    ax = fig.add_subplot()
    lanes: list[str] = []
    boxes = 0

    def bus_lanes(name: str, act: BusActivity, irq: np.ndarray | None) -> int:
        base = len(lanes)
        lanes.extend([f"{name} CSR", f"{name} DMA", f"{name} INTA#"])
        n = _lane(ax, base, [(c.start_ns, c.end_ns) for c in act.clusters if c.end_ns >= t0 and c.start_ns <= t1],
                  COLOURS["csr"])
        for role in ("fetch", "receive", "writeback", "other"):
            n += _lane(ax, base + 1, [(t.start_ns, t.end_ns) for t in act.transfers
                                      if t.role == role and t.end_ns >= t0 and t.start_ns <= t1], COLOURS[role])
        if irq is not None:
            n += _lane(ax, base + 2, [(float(a), float(b)) for a, b in zip(irq["t_ns"], irq["t_end_ns"])
                                      if b >= t0 and a <= t1], COLOURS["irq"])
        return n

    boxes += bus_lanes("send", sender, sender_irq)
    lanes.append("wire")
    if wire is not None:
        _lane(ax, len(lanes) - 1, [(float(a), float(b)) for a, b in zip(wire["t_ns"], wire["t_end_ns"])
                                   if b >= t0 and a <= t1], "#c7eef3", separate=True)
    boxes += _lane(ax, len(lanes) - 1, [(path.wire_start_ns, path.wire_end_ns)], COLOURS["wire"])
    boxes += bus_lanes("recv", receiver, receiver_irq)
    ax.set_yticks(range(len(lanes)), lanes, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(t0 / 1000, t1 / 1000)
    ax.set_xlabel("time on the capture's timeline (us)")
    ax.grid(axis="x", alpha=0.3)
    handles = [ax.bar(0, 0, color=COLOURS[k], label=k) for k in ("csr", "fetch", "receive", "writeback", "irq",
                                                                "wire")]
    ax.legend(handles=handles, fontsize=7, ncol=6, loc="upper center", bbox_to_anchor=(0.5, -0.22))
    return Drawing(_png(fig), (boxes,))


def wire_gaps(frames: np.ndarray, pause_times_ns: Sequence[float], title: str) -> Drawing:
    """Gap before each data frame on the wire against time, PAUSE frames marked (Hughes-Jones et al. 2003,
    figure 4.9)."""
    start, end = frames["t_ns"].astype(np.float64), frames["t_end_ns"].astype(np.float64)
    fig = Figure(figsize=(8, 3))
    ax = fig.add_subplot()
    ax.plot(start[1:] / 1000, (start[1:] - end[:-1]) / 1000, ".", ms=3, label="gap before frame")
    for n, t in enumerate(pause_times_ns):
        ax.axvline(t / 1000, color="#d62728", lw=0.8, alpha=0.7, label="PAUSE" if n == 0 else None)
    ax.set_yscale("log")
    ax.set_xlabel("time on the capture's timeline (us)")
    ax.set_ylabel("gap (us)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    _legend_below(ax, 2)
    return Drawing(_png(fig), (max(len(frames) - 1, 0),))


def cpu_model(fits: Mapping[str, CpuModelFit]) -> Drawing:
    """Observed kernel CPU time per run against each fitted model's prediction, one marker series per host."""
    fig = Figure(figsize=(5.5, 4))
    ax = fig.add_subplot()
    top = 1e-9
    for host, fit in fits.items():
        ax.plot(fit.predicted, fit.observed, "o", ms=4, label=host)
        top = max(top, float(fit.predicted.max()), float(fit.observed.max()))
    ax.plot([0, top], [0, top], ":", color="k", lw=0.8)
    unit = next(iter(fits.values())).unit if fits else "jiffies"
    ax.set_xlabel(f"model: alpha N_MB + beta N_KP + gamma N_KI ({unit})")
    ax.set_ylabel(f"observed ({unit})")
    ax.grid(alpha=0.3)
    if len(fits) > 1:
        _legend_below(ax, len(fits))
    return Drawing(_png(fig), (sum(_marks(f.predicted, f.observed) for f in fits.values()),))


def host_load_vs_spacing(curves: Mapping[str, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> Drawing:
    """Per host and size (the keys): interrupts + NET_RX softirq runs per packet and the NET_RX CPU share against
    the transmit spacing, as Hughes-Jones et al. 2003 §8 drew interrupts and CPU against spacing."""
    fig = Figure(figsize=(9, 3.6))
    per, cpu = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    marks = [0, 0]
    for label, (spacing, per_packet, cpu_pct) in curves.items():
        order = np.argsort(spacing)
        per.plot(spacing[order], per_packet[order], "o-", ms=4, label=label)
        cpu.plot(spacing[order], cpu_pct[order], "o-", ms=4, label=label)
        marks = [marks[0] + _marks(spacing, per_packet), marks[1] + _marks(spacing, cpu_pct)]
    per.set_ylabel("NET_RX softirq runs per packet")
    cpu.set_ylabel("CPU time in NET_RX softirqs (%)")
    for ax in (per, cpu):
        ax.set_xlabel("transmit spacing (us)")
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    _legend_below(per, len(curves))
    return Drawing(_png(fig), tuple(marks))


def rtt_per_setting(curves: Mapping[str, tuple[np.ndarray, np.ndarray]],
                    intercepts_us: Mapping[str, tuple[float, float]],
                    ylabel: str = "mean round-trip time (us)") -> Drawing:
    """RTT against response size, one curve per sweep step (Hughes-Jones et al. 2003, figure 8.1), its intercept
    and 95% half-width in the legend."""
    from nicrig.analysis.quantity import measured

    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot()
    marks = 0
    for label, (x, y) in curves.items():
        b, ci = intercepts_us.get(label, (math.nan, math.nan))
        ax.plot(x, y, "o-", ms=3, lw=1, label=label + (f" (intercept {measured(b, ci, 'us')})"
                                                       if math.isfinite(b) else ""))
        marks += _marks(x, y)
    ax.set_xlabel("response size (bytes)")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    _legend_below(ax, len(curves))
    return Drawing(_png(fig), (marks,))


def grouped_bars(categories: Sequence[str], series: Mapping[str, np.ndarray], xlabel: str, *,
                 notes: Mapping[str, Sequence[str]] | None = None, reference: float | None = None,
                 cap: float | None = None, unit: str = "") -> Drawing:
    """Horizontal bars, one row per category and one bar per series in it (a sweep step, or the one run).

    ``notes`` writes a text beside each bar (the absolute value when the bars
    are shares); ``reference`` draws a vertical line (100 % of the maximum);
    bars beyond ``cap`` are cut there and their value (with ``unit``) written
    at the edge, so one wild value (TCP through memory on veth) leaves the
    rest readable.
    """
    n = max(len(series), 1)
    fig = Figure(figsize=(8, 0.9 + 0.32 * n * len(categories) + 0.25 * len(categories)))
    ax = fig.add_subplot()
    height = 0.8 / n
    y = np.arange(len(categories), dtype=np.float64)
    finite = [float(np.nanmax(v)) for v in series.values() if np.isfinite(v).any()]
    top = max([*finite, reference or 0.0, 1e-9])
    limit = min(top, cap) * 1.15 if cap is not None else top * 1.15
    for k, (label, values) in enumerate(series.items()):
        pos = y + (k - (n - 1) / 2) * height
        shown = np.where(np.isfinite(values), np.minimum(values, limit), 0.0)
        ax.barh(pos, shown, height=height * 0.9, label=label)
        for p, v, text in zip(pos, values, (notes or {}).get(label, [""] * len(values))):
            if not math.isfinite(v):
                ax.text(0, p, " not measured", va="center", fontsize=6)
            elif v > limit:
                ax.text(limit, p, f" → {v:.0f}{unit}  {text}", va="center", fontsize=6)
            elif text:
                ax.text(v, p, f" {text}", va="center", fontsize=6)
    if reference is not None:
        ax.axvline(reference, color="k", lw=0.8, ls=":")
    ax.set_xlim(0, limit * (1.25 if notes else 1.05))
    ax.set_yticks(y, list(categories), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.grid(axis="x", alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return Drawing(_png(fig), (sum(int(np.isfinite(v).sum()) for v in series.values()),))
