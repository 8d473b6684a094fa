"""Rendering a view of the main window into a picture (``nicrig gui --screenshot``, docs, tests)."""

from __future__ import annotations

from pathlib import Path

from nicrig.gui.app import MainWindow, export_widget
from nicrig.gui.sizing import fit_docks
from PySide6 import QtWidgets

from nicrig.errors import UsageError

RESULT_TABS = {"latency": "latency vs size", "histograms": "RTT histograms", "stream": "throughput, loss, CPU"}


def settle(window: MainWindow, rounds: int = 5) -> None:
    """Let layouts, redraws and queued signals run (offscreen there is no event loop of its own)."""
    for _ in range(rounds):
        QtWidgets.QApplication.processEvents()
    if window.timeline is not None:
        window.timeline.redraw()
    QtWidgets.QApplication.processEvents()


def _results_tab(window: MainWindow, view: str) -> QtWidgets.QWidget:
    for results in window.results:
        for i in range(results.count()):
            if results.tabText(i) == RESULT_TABS[view]:
                window.tabs.setCurrentWidget(results)
                results.setCurrentIndex(i)
                return results
    raise UsageError(f"--view {view}: no results file with that view is open")


def render(window: MainWindow, path: Path | None, view: str, view_us: tuple[float, float] | None,
           cursors_us: tuple[float, float] | None, measure: bool, wait: bool = True) -> None:
    """Show ``view`` with the given window and cursors (us), optionally measured and marked; save it to ``path``."""
    window.show()
    settle(window)
    if wait:
        window.wait_jobs()
    tl = window.timeline
    if tl is not None:
        window.tabs.setCurrentWidget(tl)
        if view_us:
            tl.vb.setXRange(view_us[0] * 1000, view_us[1] * 1000, padding=0)
        if cursors_us:
            tl.set_cursors(cursors_us[0] * 1000, cursors_us[1] * 1000)
        else:  # a picture shows its cursors: ones left from another view come into this one
            tl.cursors_into_view()
        if measure and window.measurements is not None:
            window.measurements.measure(*sorted(tl.cursor_positions() if cursors_us else tl.view_range()))
            window.wait_jobs()
            propagation = [m for m in window.measurements.results if "propagation" in m.name and m.t0_ns is not None]
            if propagation and not cursors_us:
                tl.set_cursors(propagation[0].t0_ns, propagation[0].t1_ns)
    widget: QtWidgets.QWidget = window
    if view == "timeline":
        if tl is None:
            raise UsageError("--view timeline: open a capture set")
        widget = tl
    elif view == "events":
        if window.events is None:
            raise UsageError("--view events: open a capture set")
        widget = window.events
    elif view in RESULT_TABS:
        widget = _results_tab(window, view)
    elif tl is None and window.results:
        window.tabs.setCurrentWidget(window.results[0])
    if view in ("window", "events"):  # pictures of the docks: their tables whole
        settle(window)
        fit_docks(window)
    elif path is not None:  # a picture of one view: the window's width and height are its own
        for dock in window.findChildren(QtWidgets.QDockWidget):
            dock.hide()
    settle(window)
    if path is not None:
        export_widget(widget, path)
