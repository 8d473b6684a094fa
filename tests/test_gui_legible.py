"""The pictures `make demo` writes, made as it makes them, checked for what a person can read from the widgets'
own geometry (tests/gui_geometry.py): cursors inside the view, every text whole and clear of the others and of
the boxes it does not name, every table's columns in sight and wide enough for their values, legends off the data.
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from pathlib import Path

import pytest

pytest.importorskip("pytestqt", reason="pytest-qt is not installed")
from conftest import simulate_set
from gui_geometry import window_problems
from nicrig.acquisition.capture import CaptureSet
from nicrig.gui.app import MainWindow
from nicrig.gui.screenshot import render

from nicrig.cli import main


@pytest.fixture(scope="module")
def fig47(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's request and response (Intel PRO/1000, 64-bit 66 MHz PCI), decoded."""
    path = simulate_set(tmp_path_factory.mktemp("legible"), "fig47", kind="latency", size_bytes=1400,
                        request_bytes=64, count=3)
    assert main(["decode", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def paused(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's stream, 1400 bytes every 11 us to a receiver on 32-bit 33 MHz PCI whose DMA falls behind the
    wire, just long enough for its first PAUSE."""
    path = simulate_set(tmp_path_factory.mktemp("legible"), "stream", kind="stream", size_bytes=1400, spacing_us=11,
                        count=150, recv_bus="pci32-33")
    assert main(["decode", str(path)]) == 0
    return path


def _picture(qtbot, files: list[Path], out: Path, view: str, size: tuple[int, int], view_us=None,
             measure: bool = False) -> MainWindow:
    w = MainWindow(files)
    qtbot.addWidget(w)
    w.resize(*size)
    render(w, out, view, view_us, None, measure)
    assert out.stat().st_size > 10_000
    return w


def test_the_whole_window_shows_every_measurement_and_cursor_value(qtbot, fig47: Path, tmp_path: Path) -> None:
    w = _picture(qtbot, [fig47], tmp_path / "window.png", "window", (1920, 1080), (-3, 135), measure=True)
    assert w.measurements.table.rowCount() > 20 and w.cursor_panel.values.rowCount() > 20
    assert window_problems(w) == []


def test_the_measured_timeline_names_its_phases_legibly(qtbot, fig47: Path, tmp_path: Path) -> None:
    w = _picture(qtbot, [fig47], tmp_path / "fig47.png", "timeline", (1600, 1000), (-3, 135), measure=True)
    phases = [t for item in w.timeline.items if item.lane.title == "measured phases" for _, t in item.written]
    assert any(t.startswith("CSR setup") for t in phases) and any("DMA" in t for t in phases)
    assert window_problems(w) == []


def test_a_group_of_thin_transactions_is_named_by_what_it_holds(qtbot, fig47: Path, tmp_path: Path) -> None:
    """Transactions too thin to name one by one are named as the group drawn (no room for a word between its
    parts): the counts in the name add up to the transactions starting in that group."""
    import re

    import numpy as np
    from nicrig.gui.timeline import groups
    from PySide6 import QtGui

    w = _picture(qtbot, [fig47], tmp_path / "fig47.png", "timeline", (1600, 1000), (-3, 135))
    tl = w.timeline
    (t0, t1), view = tl.view_range(), tl.plot.mapFromScene(tl.vb.sceneBoundingRect()).boundingRect()
    gap = QtGui.QFontMetrics(tl.plot.font()).horizontalAdvance("IRQ") + 6
    checked = 0
    for item in (i for i in tl.items if i.lane.title == "PCI transactions"):
        g0, g1, _ = groups(item.extents[:, 0], item.extents[:, 1], np.ones(len(item.extents), bool), gap)
        starts = item.lane.boxes.t_ns + item.shift_ns
        for rect, text in item.written:
            if "×" not in text:
                continue
            k = int(np.argmin(np.minimum(abs(rect.left() - 4 - g1), abs(rect.right() + 4 - g0))))
            named = sum(int(n) if n else 1 for n in re.findall(r"(?:^|, )[^,×]+?(?: ×(\d+))?(?=,|$)", text))
            # the view's pixels mapped back to time here agree with the painter's to a fraction of a pixel: a
            # transaction starting within half a pixel of the group's edges is counted, one a pixel out is not
            within = [int(((starts >= a) & (starts <= b)).sum()) for a, b in
                      (t0 + (np.array([g0[k] - d, g1[k] + d]) - view.left()) / view.width() * (t1 - t0)
                       for d in (0.0, 1.0))]
            assert within[0] <= named <= within[1], (text, within)
            checked += 1
    assert checked >= 2


def test_pause_frames_are_named_and_the_cursors_come_into_the_view(qtbot, paused: Path, tmp_path: Path) -> None:
    with CaptureSet.open(paused) as cs:
        frames = cs.read_table("decoded/probe/ethernet")
    first = float(frames["t_ns"][frames["pause_quanta"] > 0][0]) / 1000
    view = (first - 1500, first + 1500)  # the cursors of the first view are well before it
    w = _picture(qtbot, [paused], tmp_path / "pause.png", "timeline", (1600, 1000), view)
    rx = next(item for item in w.timeline.items if item.lane.title == "frames B->A (rx)")
    words = [t.split()[0] for _, t in rx.written]
    assert "PAUSE" in words and "XON" in words, words
    assert window_problems(w) == []


def test_results_views_keep_their_legends_off_the_data(qtbot, tmp_path: Path) -> None:
    from test_gui import results_files

    latency, stream = results_files.__wrapped__(tmp_path)
    for path, view in ((latency, "latency"), (latency, "histograms"), (stream, "stream")):
        w = _picture(qtbot, [path], tmp_path / f"{view}.png", view, (1200, 800))
        assert window_problems(w) == [], view
