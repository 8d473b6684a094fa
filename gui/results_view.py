"""udpmon results files as plots: latency vs size with fit lines and expected slope, RTT histograms,
throughput, loss and CPU vs spacing (seed 002 figures 4.1, 4.2, 6.4 and 6.5).

Every curve is read from the results file's own tables (``docs/formats.md``):
``latency/sizes``, ``latency/fit_min`` and ``latency/fit_mean`` (the fits the
run stored), ``latency/histogram``, ``stream/points``. The expected slope comes
from ``nicrig.analysis.expected`` for the path the user picks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyqtgraph as pg
from nicrig.udpmon.results import ResultsFile
from PySide6 import QtCore, QtWidgets

from nicrig.errors import NicrigError

#: The path of seed 002's back-to-back hosts on 64-bit 66 MHz PCI (section 3.1), until the user types another.
DEFAULT_PATH = "pci64-66,gige,pci64-66"
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _plot(title: str, x: str, y: str) -> pg.PlotWidget:
    w = pg.PlotWidget(background="w", title=title)
    w.showGrid(x=True, y=True, alpha=0.25)
    w.setLabel("bottom", x)
    w.setLabel("left", y)
    w.addLegend(offset=(-10, 10))
    return w


def _tables(path: Path) -> tuple[str, dict[str, np.ndarray], dict[str, dict]]:
    with ResultsFile.open(path) as rf:
        names = rf.table_names()
        return rf.run_kind, {n: rf.read_table(n) for n in names if n != "latency/rtt"}, \
            {n: rf.table_attrs(n) for n in names}


class ResultsView(QtWidgets.QTabWidget):
    """The plots a results file supports (latency runs and stream runs have different ones)."""

    def __init__(self, path: str | Path, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.path = Path(path)
        self.kind, self.tables, self.attrs = _tables(self.path)
        if "latency/sizes" in self.tables:
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
        fits = self.tables.get("latency/fit_min", np.zeros(0))
        seen = ", ".join(f"{int(f['frames'])} frame(s) {f['slope_us_per_byte']:.5f}" for f in fits)
        self.expected_note.setText(f"expected slope {slope:.5f} us/byte; fitted on the minimum RTT: "
                                   f"{seen or 'no fit (fewer than 3 sizes per frame count)'} us/byte")

    def _latency(self) -> QtWidgets.QWidget:
        sizes = self.tables["latency/sizes"]
        w = _plot(f"UDP request-response latency ({self.path.name})", "response size (bytes)", "RTT (us)")
        for col, colour, symbol in (("min_us", PALETTE[0], "o"), ("mean_us", PALETTE[1], "t")):
            w.plot(sizes["size_bytes"], sizes[col], pen=None, symbol=symbol, symbolSize=6, symbolBrush=colour,
                   symbolPen=None, name=col.replace("_us", " RTT"))
        self.fit_rows: list[str] = []
        for table, colour in (("latency/fit_min", PALETTE[0]), ("latency/fit_mean", PALETTE[1])):
            for fit in self.tables.get(table, np.zeros(0)):
                sel = sizes["frames"] == fit["frames"]
                if not sel.any():
                    continue
                x = np.array([sizes["size_bytes"][sel].min(), sizes["size_bytes"][sel].max()], dtype=float)
                label = (f"{table.split('_')[1]} fit, {int(fit['frames'])} frame(s): "
                         f"{fit['slope_us_per_byte']:.5f} ± {fit['slope_ci95']:.5f} us/byte, "
                         f"intercept {fit['intercept_us']:.2f} us")
                w.plot(x, fit["intercept_us"] + fit["slope_us_per_byte"] * x, pen=pg.mkPen(colour, width=2),
                       name=label)
                self.fit_rows.append(label)
        self.latency_plot = w
        return w

    def add_expected_slope(self, slope_us_per_byte: float, label: str) -> None:
        """Draw a line of the expected slope through the smallest size's minimum RTT."""
        sizes = self.tables["latency/sizes"]
        ok = np.isfinite(sizes["min_us"])
        if not ok.any():
            return
        x = np.array([sizes["size_bytes"][ok].min(), sizes["size_bytes"][ok].max()], dtype=float)
        y0 = float(sizes["min_us"][ok][np.argmin(sizes["size_bytes"][ok])])
        if self._expected_item is not None:
            self.latency_plot.removeItem(self._expected_item)
        self._expected_item = self.latency_plot.plot(
            x, y0 + slope_us_per_byte * (x - x[0]), pen=pg.mkPen("#444444", width=2, style=QtCore.Qt.PenStyle.DashLine),
            name=f"expected slope {slope_us_per_byte:.5f} us/byte ({label})")

    def _histograms(self) -> QtWidgets.QWidget:
        hist = self.tables.get("latency/histogram", np.zeros(0, [("size_bytes", "<i4"), ("bin_us", "<f8"),
                                                                 ("count", "<i8")]))
        width = float(self.attrs.get("latency/histogram", {}).get("bin_width_us", 1.0))
        sizes = self.tables["latency/sizes"]
        w = _plot("RTT histograms", "RTT (us)", "count")
        present = [int(s) for s in np.unique(hist["size_bytes"])]
        # a handful of sizes across the range, as seed 002 figure 6.4 shows 64, 512, 1024, 1400
        picks = present if len(present) <= 4 else [present[i] for i in np.linspace(0, len(present) - 1, 4).astype(int)]
        for k, size in enumerate(picks):
            rows = hist[hist["size_bytes"] == size]
            fwhm = sizes["fwhm_us"][sizes["size_bytes"] == size]
            name = f"{size} B" + (f", FWHM {float(fwhm[0]):.2f} us" if len(fwhm) else "")
            x = np.append(rows["bin_us"], rows["bin_us"][-1] + width) if len(rows) else np.zeros(0)
            w.plot(x, rows["count"], stepMode="center", pen=pg.mkPen(PALETTE[k % len(PALETTE)], width=2), name=name)
        shown = sizes[np.isin(sizes["size_bytes"], picks)]
        if len(shown) and np.isfinite(shown["p99_us"]).any():
            # the body of the distributions, as seed 002 figure 6.4 shows them; the tail is in the file
            lo, hi = np.nanmin(shown["min_us"]), np.nanmax(shown["p99_us"])
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
                                             ("CPU busy (local solid, remote dashed)", "%"))):
            p = box.addPlot(row=row, col=0, title=title)
            p.showGrid(x=True, y=True, alpha=0.25)
            p.setLabel("left", ylab)
            p.setLabel("bottom", "transmit spacing (us)")
            p.addLegend(offset=(-10, 5))
            plots.append(p)
        for k, size in enumerate(np.unique(pts["size_bytes"])):
            sel = pts[pts["size_bytes"] == size]
            sel = sel[np.argsort(sel["spacing_us"])]
            colour = PALETTE[k % len(PALETTE)]
            x = sel["spacing_us"]
            plots[0].plot(x, sel["user_rate_mbps"], pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=5,
                          symbolBrush=colour, name=f"{int(size)} B")
            loss = np.where(sel["sent"] > 0, 100.0 * sel["lost"] / np.maximum(sel["sent"], 1), np.nan)
            plots[1].plot(x, loss, pen=pg.mkPen(colour, width=2), symbol="o", symbolSize=5, symbolBrush=colour,
                          name=f"{int(size)} B")
            plots[2].plot(x, sel["local_cpu_busy_pct"], pen=pg.mkPen(colour, width=2), name=f"{int(size)} B")
            plots[2].plot(x, sel["remote_cpu_busy_pct"], pen=pg.mkPen(colour, width=2,
                                                                      style=QtCore.Qt.PenStyle.DashLine))
        return box
