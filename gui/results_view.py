"""udpmon results files as plots: latency vs size with fit lines and expected slope, RTT histograms,
throughput, loss and CPU vs spacing (Hughes-Jones et al. 2003, figures 4.1, 4.2, 6.4 and 6.5).

The latency view runs the one latency estimator
(:func:`nicrig.analysis.latency.estimate`) on the file's singletons
(``latency/rtt``), as ``nicrig report`` and ``nicrig udpmon latency`` do: the
per-round values with their 95% bars, the lines on each statistic, suspect
sizes marked, the FWHM of each size. The stream view draws
:func:`nicrig.analysis.throughput.size_curves` of ``stream/points`` (each
size and spacing over the rounds). The expected slope comes from
``nicrig.analysis.expected`` for the path the user picks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from nicrig.analysis import latency, resolution, throughput
from nicrig.analysis.quantity import measured, number
from nicrig.udpmon.results import open_results
from PySide6 import QtCore, QtWidgets

from nicrig.errors import NicrigError

#: The path of the back-to-back hosts on 64-bit 66 MHz PCI of Hughes-Jones et al. 2003 (§3.1), until the user
#: types another.
DEFAULT_PATH = "pci64-66,gige,pci64-66"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _plot(title: str, x: str, y: str, legend_columns: int = 1) -> pg.PlotWidget:
    w = pg.PlotWidget(background="w", title=title)
    w.showGrid(x=True, y=True, alpha=0.25)
    w.setLabel("bottom", x)
    w.setLabel("left", y)
    legend_below(w.getPlotItem(), legend_columns)
    return w


def legend_below(plot: pg.PlotItem, columns: int) -> pg.LegendItem:
    """The plot's legend in a row of its own under the axis, where it hides no data; the entries of items
    plotted with a ``name`` go into it."""
    legend = pg.LegendItem(colCount=columns, labelTextColor="#222222")
    plot.layout.addItem(legend, 4, 1)
    plot.legend = legend
    return legend


def _tables(path: Path) -> tuple[str, dict[str, np.ndarray], dict[str, dict], dict, dict | None]:
    with open_results(path) as rf:
        names = rf.table_names()
        settings = json.loads(rf.attrs.get("settings", "{}"))
        return rf.run_kind, {n: rf.read_table(n) for n in names if n.startswith(("latency/", "stream/points"))}, \
            {n: rf.table_attrs(n) for n in names}, settings, rf.simulation


class ResultsView(QtWidgets.QTabWidget):
    """The plots a results file supports (latency runs and stream runs have different ones); ``path`` may be a
    simulated capture set carrying its results."""

    def __init__(self, path: str | Path, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.path = Path(path)
        self.kind, self.tables, self.attrs, settings, simulation = _tables(self.path)
        if "latency/rtt" in self.tables:
            self.estimate = latency.estimate(self.tables["latency/rtt"], int(settings.get("mtu", 1500)),
                                             step_ns=resolution.results(simulation, "latency").step_ns)
            self.addTab(self._latency_page(), "latency vs size")
            self.addTab(self._histograms(), "RTT histograms")
        if "stream/points" in self.tables:
            self.addTab(self._stream(), "throughput, loss, CPU")

    # -- latency -----------------------------------------------------------------------------
    def _latency_page(self) -> QtWidgets.QWidget:
        page = QtWidgets.QWidget()
        self.path_edit = QtWidgets.QLineEdit(DEFAULT_PATH)
        self.path_edit.setToolTip("elements a byte meets, in order: pci32-33, pci64-66, pcix64-133, "
                                  "pcie3x8:mps=256, gige, eth10g, memcpy:2000 (MB/s)")
        show = QtWidgets.QPushButton("Show expected slope")
        self.expected_note = QtWidgets.QLabel()
        self.expected_note.setWordWrap(True)  # a long comparison wraps instead of widening the window
        row = QtWidgets.QHBoxLayout()
        row.addWidget(QtWidgets.QLabel("path:"))
        row.addWidget(self.path_edit, 1)
        row.addWidget(show)
        layout = QtWidgets.QVBoxLayout(page)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(row)
        layout.addWidget(self.expected_note)
        layout.addWidget(self._latency(), 1)
        self._expected_item: pg.PlotDataItem | None = None
        show.clicked.connect(self.show_expected)
        self.path_edit.returnPressed.connect(self.show_expected)
        self.show_expected()
        return page

    def show_expected(self) -> None:
        """Expected slope of the typed path (``nicrig.analysis.expected``), drawn and compared with the fits."""
        from nicrig.analysis import expected

        try:
            slope = float(expected.expected_slope_us_per_byte(expected.parse_path(self.path_edit.text())))
        except NicrigError as exc:
            self.expected_note.setText(f"<span style='color:#b00'>{exc}</span>")
            return
        self.add_expected_slope(slope, self.path_edit.text())
        est = self.estimate
        fit = est.fit(frames=1)
        seen = ", ".join(f"{f.frames} frame(s) {measured(f.slope_us_per_byte, f.slope_ci95)}"
                         for f in est.fits.get(est.statistic, []))
        why = latency.unresolved(fit, est)
        self.expected_note.setText(
            f"expected slope {number(slope)} us/byte; fitted on the {est.statistic}: "
            f"{seen or 'no line (fewer than 3 sizes per frame count)'} us/byte"
            + (f" — not compared: {why}" if why else ""))

    def _latency(self) -> QtWidgets.QWidget:
        est = self.estimate
        w = _plot(f"UDP request-response latency ({self.path.name}): per-round values, 95% bars",
                  "response size (bytes)", "RTT (us)", legend_columns=2)
        x = est.sizes.astype(float)
        self.fit_rows: list[str] = []
        for k, (stat, values) in enumerate(est.values.items()):
            colour = PALETTE[k % len(PALETTE)]
            ok = np.isfinite(values)
            w.plot(x[ok], values[ok], pen=None, symbol="o", symbolSize=6, symbolBrush=colour, symbolPen=None,
                   name=f"{stat} per round")
            ci = np.where(np.isfinite(est.values_ci95[stat]), est.values_ci95[stat], 0.0)
            w.addItem(pg.ErrorBarItem(x=x[ok], y=values[ok], height=2 * ci[ok], pen=pg.mkPen(colour)))
            bad = est.suspect[stat]
            if bad.any():
                w.plot(x[bad], values[bad], pen=None, symbol="o", symbolSize=14, symbolBrush=None,
                       symbolPen=pg.mkPen("#d62728", width=2), name=f"suspect on the {stat}")
            for f in est.fits.get(stat, []):
                xs = x[est.frames == f.frames]
                ends = np.array([xs.min(), xs.max()])
                label = (f"{stat} fit, {f.frames} frame(s): {measured(f.slope_us_per_byte, f.slope_ci95, 'us/byte')}"
                         f", intercept {measured(f.intercept_us, f.intercept_ci95, 'us')}")
                w.plot(ends, f.intercept_us + f.slope_us_per_byte * ends, pen=pg.mkPen(colour, width=2), name=label)
                self.fit_rows.append(label)
        self.latency_plot = w
        return w

    def add_expected_slope(self, slope_us_per_byte: float, label: str) -> None:
        """Draw a line of the expected slope through the smallest size's value of the readings' statistic."""
        est = self.estimate
        values = est.values[est.statistic]
        ok = np.isfinite(values)
        if not ok.any():
            return
        x = np.array([est.sizes[ok].min(), est.sizes[ok].max()], dtype=float)
        y0 = float(values[ok][np.argmin(est.sizes[ok])])
        if self._expected_item is not None:
            self.latency_plot.removeItem(self._expected_item)
        self._expected_item = self.latency_plot.plot(
            x, y0 + slope_us_per_byte * (x - x[0]), pen=pg.mkPen("#444444", width=2, style=QtCore.Qt.PenStyle.DashLine),
            name=f"expected slope {number(slope_us_per_byte)} us/byte ({label})")

    def _histograms(self) -> QtWidgets.QWidget:
        hist = self.tables.get("latency/histogram", np.zeros(0, [("size_bytes", "<i4"), ("bin_us", "<f8"),
                                                                 ("count", "<i8")]))
        width = float(self.attrs.get("latency/histogram", {}).get("bin_width_us", 1.0))
        est = self.estimate
        w = _plot("RTT histograms", "RTT (us)", "count", legend_columns=2)
        present = [int(s) for s in np.unique(hist["size_bytes"])]
        picks = latency.histogram_sizes(present)
        for k, size in enumerate(picks):
            rows = hist[hist["size_bytes"] == size]
            st = est.stats.get(size)
            name = f"{size} B" + (f", FWHM {measured(st.fwhm_us, st.fwhm_ci95_us, 'us')}" if st else "")
            x = np.append(rows["bin_us"], rows["bin_us"][-1] + width) if len(rows) else np.zeros(0)
            w.plot(x, rows["count"], stepMode="center", pen=pg.mkPen(PALETTE[k % len(PALETTE)], width=2), name=name)
        shown = [est.stats[s] for s in picks if s in est.stats and est.stats[s].count]
        if shown:
            # the body of the distributions, as Hughes-Jones et al. figure 6.4 shows them; the tail is in the file
            # (a busy host's tail can reach milliseconds: the view ends ten widths past the median at most)
            lo = min(st.min_us for st in shown)
            hi = max(min(st.percentiles_us[99], st.median_us + 10 * st.fwhm_us)
                     if np.isfinite(st.fwhm_us) else st.percentiles_us[99] for st in shown)
            w.setXRange(lo - 0.1 * (hi - lo) - width, hi + 0.2 * (hi - lo) + width, padding=0)
        return w

    # -- stream ------------------------------------------------------------------------------
    def _stream(self) -> QtWidgets.QWidget:
        pts = self.tables["stream/points"]
        box = pg.GraphicsLayoutWidget()
        box.setBackground("w")
        plots = []
        for row, (title, ylab) in enumerate((("received user data rate", "Mbit/s"),
                                             ("packet loss", "% of sent"),
                                             ("CPU busy (local: solid, dots; remote: dashed, squares)", "%"))):
            p = box.addPlot(row=row, col=0, title=title)
            p.showGrid(x=True, y=True, alpha=0.25)
            p.setLabel("left", ylab)
            p.setLabel("bottom", "transmit spacing (us)")
            p.getAxis("left").enableAutoSIPrefix(False)  # a scale factor beside "%" reads as a unit
            legend_below(p, columns=8)
            plots.append(p)
        attrs = self.attrs.get("stream/points", {})
        link = float(attrs.get("link_mbps", np.nan)) * 1e6
        worst_loss = 0.0
        for k, c in enumerate(throughput.size_curves(pts, link_rate_bps=link if np.isfinite(link) else None)):
            colour = PALETTE[k % len(PALETTE)]
            x = c.spacing_us
            plots[0].plot(x, c.user_rate_mbps, pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=5,
                          symbolBrush=colour, name=f"{c.size_bytes} B")
            ci = np.where(np.isfinite(c.user_rate_ci95_mbps), c.user_rate_ci95_mbps, 0.0)
            plots[0].addItem(pg.ErrorBarItem(x=x, y=c.user_rate_mbps, height=2 * ci, pen=pg.mkPen(colour)))
            plots[1].plot(x, c.loss_pct, pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=5, symbolBrush=colour,
                          name=f"{c.size_bytes} B")
            # the remote curve's hollow squares stay in sight where it lies on the local one (both hosts busy), and
            # grow with each size, so that sizes on one value nest rather than hide each other
            local, remote = 100 - c.sender_cpu_idle_pct, 100 - c.receiver_cpu_idle_pct
            if np.isfinite(local).any():  # a simulated run records no CPU
                plots[2].plot(x, local, pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=5, symbolBrush=colour,
                              name=f"{c.size_bytes} B")
            if np.isfinite(remote).any():
                plots[2].plot(x, remote, pen=pg.mkPen(colour, width=2, style=QtCore.Qt.PenStyle.DashLine),
                              symbol="s", symbolSize=min(10 + 4 * k, 26), symbolBrush=None,
                              symbolPen=pg.mkPen(colour, width=1.5),
                              name=None if np.isfinite(local).any() else f"{c.size_bytes} B")
            worst_loss = max(worst_loss, float(np.nanmax(c.loss_pct, initial=0.0)))
        # shares from zero: no loss reads as a line on the floor, a busy CPU as one near the top
        plots[1].setYRange(0, max(1.0, 1.1 * worst_loss))
        plots[2].setYRange(0, 105)
        return box
