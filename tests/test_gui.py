"""The desktop GUI, driven as a user would (pytest-qt, offscreen): lanes, cursors, event table, decoding,
measurements, results views, sessions, screenshots, and bad files."""

from __future__ import annotations

import contextlib
import dataclasses
import re

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from nicrig.acquisition.capture import CaptureSet
from nicrig.udpmon.results import (
    LatencyVisit,
    ResultsFile,
    StreamPoint,
    point_row,
    write_latency,
    write_stream,
)

from nicrig.cli import main

pytest.importorskip("pytestqt", reason="pytest-qt is not installed")
from conftest import copy_capture, simulate_set
from nicrig.gui.app import MainWindow, export_widget
from nicrig.gui.events import KINDS
from nicrig.gui.lanes import format_ns
from PySide6 import QtCore, QtGui, QtWidgets


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A decoded request-response capture (seed 002 figure 4.7's setting: Intel PRO/1000, 64-bit 66 MHz PCI)."""
    folder = tmp_path_factory.mktemp("gui")
    path = simulate_set(folder, "fig47", kind="latency", size_bytes=1400, request_bytes=64, count=2)
    assert main(["decode", str(path)]) == 0
    return path


@pytest.fixture
def fresh(capture: Path, tmp_path: Path) -> Path:
    """A private copy of the capture (tests that save sessions or decode must not share the file)."""
    return copy_capture(capture, tmp_path / capture.name)


@pytest.fixture
def window(qtbot, fresh: Path) -> MainWindow:
    w = MainWindow([fresh])
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    w.wait_jobs()
    return w


def _lane_ids(w: MainWindow) -> set[str]:
    return {item.lane.id for item in w.timeline.items}


def test_every_source_has_its_lanes_and_decoded_lanes_on_one_axis(window: MainWindow) -> None:
    ids = _lane_ids(window)
    for lane in ("send_pci/", "send_pci/FRAME#", "send_pci/INTA#", "send_pci/decoded/pci", "send_pci/decoded/irq",
                 "probe/TX_EN", "probe/decoded/ethernet/tx", "probe/decoded/ethernet/rx", "probe/decoded/linkactivity",
                 "recv_pci/decoded/pci", "recv_pci/decoded/irq"):
        assert lane in ids, lane
    # the sending bus above the wire above the receiving bus (seed 002's figures)
    order = [item.lane.source for item in window.timeline.items]
    assert order.index("send_pci") < order.index("probe") < order.index("recv_pci")
    # the lanes' names on the left, the time below, and no other axis (a top one repeated the time in raw ns)
    axes = window.timeline.plot.getPlotItem().axes
    assert {side for side, axis in axes.items() if axis["item"].isVisible()} == {"left", "bottom"}
    window.timeline.zoom_all()
    drawn = {item.lane.id: item.drawing for item in window.timeline.items}
    frame = drawn["send_pci/FRAME#"]
    assert len(frame.x0) > 10 and set(np.unique(frame.state)) <= {0, 1, 2}
    pci = drawn["send_pci/decoded/pci"]
    assert len(pci.rows) + len(pci.dense_x0) > 0


def test_cursors_on_a_known_event_pair_give_the_truth_delta_t(window: MainWindow, fresh: Path) -> None:
    """First data word of the request on the sending bus, then on the receiving bus: the simulator's truth."""
    with CaptureSet.open(fresh) as cs:
        send = cs.read_table("truth/send_pci/transactions")
        recv = cs.read_table("truth/recv_pci/transactions")
        dec_send = cs.read_table("decoded/send_pci/pci")
        dec_recv = cs.read_table("decoded/recv_pci/pci")
    t_send = send["t_start_ps"][send["purpose"] == b"tx_data"][0] / 1000
    t_recv = recv["t_start_ps"][recv["purpose"] == b"rx_data"][0] / 1000
    # the user clicks those transactions in the event table: cursor A on the first, then B on the second
    events = window.events
    rows = events.model.rows
    a = int(np.flatnonzero(np.isclose(events.events.t_ns[rows], dec_send["t_ns"][np.argmin(abs(dec_send["t_ns"] - t_send))]))[0])
    b = int(np.flatnonzero(np.isclose(events.events.t_ns[rows], dec_recv["t_ns"][np.argmin(abs(dec_recv["t_ns"] - t_recv))]))[0])
    events.click_row(a)
    first = window.timeline.cursor_positions()[0]
    events.click_row(b)
    second = window.timeline.cursor_positions()[0]
    window.timeline.set_cursors(first, second)
    dt = window.timeline.cursor_positions()[1] - window.timeline.cursor_positions()[0]
    assert abs(dt - (t_recv - t_send)) <= 1.0  # decoded times are whole ns
    assert f"Δt = B - A = {format_ns(dt, 6)}" in window.timeline.readout.text()
    assert "1/Δt" in window.timeline.readout.text()
    # the readout reads as one line of text, the difference in bold, each part shown whole, and a user selects
    # and copies it but cannot edit it
    from PySide6.QtTest import QTest

    readout = window.timeline.readout
    times, difference = readout.times, readout.difference
    assert difference.font().bold() and not times.font().bold()
    assert times.text() == f"A = {format_ns(first, 7)}    B = {format_ns(second, 7)}"
    for field in (times, difference):
        assert field.width() >= field.fontMetrics().horizontalAdvance(field.text())
    assert times.geometry().right() < difference.geometry().left()
    QTest.mouseDClick(difference, QtCore.Qt.MouseButton.LeftButton, pos=QtCore.QPoint(4, difference.height() // 2))
    assert difference.selectedText() == "Δt"
    QTest.keyClicks(difference, "x")
    QTest.keyClick(difference, QtCore.Qt.Key.Key_A, QtCore.Qt.KeyboardModifier.ControlModifier)
    QTest.keyClick(difference, QtCore.Qt.Key.Key_C, QtCore.Qt.KeyboardModifier.ControlModifier)
    assert QtWidgets.QApplication.clipboard().text() == difference.text() == readout.text().split("    ", 2)[2]
    # deskew the receiving bus by +250 ns: its events move with it, the truth pair is 250 ns further apart
    window.timeline.set_offset("recv_pci", 250.0)
    window._refresh_events()
    moved = window.events.events
    recv_rows = [i for i in range(len(moved)) if moved.lanes[int(moved.lane[i])].source == "recv_pci"]
    assert np.isclose(moved.t_ns[recv_rows].min(), dec_recv["t_ns"].min() + 250.0)


def test_clicking_a_row_zooms_to_it_and_the_cursor_selects_its_row(window: MainWindow, qtbot) -> None:
    events = window.events
    events.search.setText("PAUSE")
    events.refilter()
    assert len(events.model.rows) == 0  # a request-response run has no flow control
    events.search.setText("")
    for kind, box in events.kind_boxes.items():
        box.setChecked(kind == "frame")
    assert len(events.model.rows) == 4  # request and response, each seen once on the probe, two exchanges
    events.kind_boxes["interrupt"].setChecked(True)
    k = 2
    i = int(events.model.rows[k])
    t0, t1 = events.events.t_ns[i], events.events.t_end_ns[i]
    # a real mouse click on the row's cell, the focus in the search box: only that row is painted again, not the
    # table's header (a whole row selected would mark every column) nor its other rows
    rect = events.view.visualRect(events.model.index(k, 5))
    painted: list[tuple[QtCore.QObject, QtCore.QRect]] = []

    class Paints(QtCore.QObject):
        def eventFilter(self, watched: QtCore.QObject, event: QtCore.QEvent) -> bool:
            painted.extend([(watched, event.rect())] if event.type() == QtCore.QEvent.Type.Paint else [])
            return False

    paints = Paints()
    table = events.view
    for widget in (table, table.viewport(), table.horizontalHeader(), table.horizontalHeader().viewport()):
        widget.installEventFilter(paints)
    events.search.setFocus()
    QtWidgets.QApplication.processEvents()
    painted.clear()
    qtbot.mouseClick(table.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())
    QtWidgets.QApplication.processEvents()
    assert table.hasFocus() and table.selectionModel().selectedRows()[0].row() == k
    row = QtCore.QRect(0, rect.top(), table.viewport().width(), rect.height())
    assert painted and all(widget is table.viewport() and row.contains(r) for widget, r in painted)
    lane = events.events.lanes[int(events.events.lane[i])]
    assert [events.model.data(events.model.index(k, c)) for c in range(6)] == [
        format_ns(float(t0), 8), format_ns(float(t1 - t0)), lane.source, lane.title, KINDS[events.events.kind[i]],
        events.events.text(i)]
    v0, v1 = window.timeline.view_range()
    assert v0 < t0 and t1 < v1 and (v1 - v0) < 3 * max(t1 - t0, 10.0)
    assert window.timeline.cursor_positions() == pytest.approx((t0, t1))
    # moving cursor A highlights the row of the event at or before it
    window.timeline.set_cursors(float(events.events.t_ns[int(events.model.rows[1])]) + 0.5, t1)
    assert events.view.selectionModel().selectedRows()[0].row() == 1
    # a row clicked stays under the pointer; one out of sight is brought into the middle
    for box in events.kind_boxes.values():
        box.setChecked(True)
    view, bar = events.view, events.view.verticalScrollBar()
    QtWidgets.QApplication.processEvents()  # the table laid out for its rows
    assert bar.maximum() > 0  # more rows than the table shows
    bar.setValue(bar.maximum())
    k = view.rowAt(view.rowHeight(0) * 3 // 2)  # near the top: centred, it would scroll the table
    rect = view.visualRect(events.model.index(k, 5))
    qtbot.mouseClick(view.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())
    assert bar.value() == bar.maximum() and view.selectionModel().selectedRows()[0].row() == k
    last = len(events.model.rows) - 1
    window.timeline.set_cursors(float(events.events.t_ns[int(events.model.rows[last])]) + 0.5, t1)
    assert view.viewport().rect().contains(view.visualRect(events.model.index(last, 0)))
    # the keyboard's focus, given with no current row, starts at the first: the down arrow moves to the second
    events.search.setFocus()
    view.setCurrentIndex(QtCore.QModelIndex())
    view.setFocus(QtCore.Qt.FocusReason.TabFocusReason)
    qtbot.keyClick(view, QtCore.Qt.Key.Key_Down)
    assert view.selectionModel().selectedRows()[0].row() == 1


def test_values_of_every_lane_at_the_cursors(window: MainWindow, monkeypatch: pytest.MonkeyPatch) -> None:
    with CaptureSet.open(window.doc.path) as cs:
        irq = cs.read_table("decoded/recv_pci/irq")
    mid = float(irq["t_ns"][0] + irq["t_end_ns"][0]) / 2
    window.timeline.set_cursors(mid, mid + 1e6)
    looked_up: list[tuple[str, float]] = []
    for name, data in window.doc.data.items():
        sample_at = data.cache.sample_at
        monkeypatch.setattr(data.cache, "sample_at", lambda t, f=sample_at, n=name: looked_up.append((n, t)) or f(t))
    panel = window.cursor_panel
    assert panel._timer.isActive()  # read after a pause
    started: list[int] = []
    start = panel._timer.start
    monkeypatch.setattr(panel._timer, "start", lambda: started.append(1) or start())
    window.timeline.plot.grab()
    assert started == [1] and panel._timer.isActive()  # the pause counted from the last frame
    window.cursor_panel.refresh()
    # a source's lanes at a cursor show one sample: looked up once
    assert looked_up and len(looked_up) == len(set(looked_up)) <= 2 * len(window.doc.data)
    table = window.cursor_panel.values
    cells = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}
    assert cells["recv_pci: INTA#"] == "0"  # asserted (active low)
    assert cells["send_pci: FRAME#"] in ("0", "1")
    assert cells["recv_pci: interrupts"].startswith("interrupt asserted")
    # the value columns as wide as their values, changed together
    window.timeline.set_cursors(mid + 1e6, mid)
    window.cursor_panel.refresh()
    assert {table.item(r, 0).text(): table.item(r, 2).text() for r in range(table.rowCount())} == cells
    for c in (1, 2):
        texts = [table.item(r, c).text() for r in range(table.rowCount())]
        assert table.columnWidth(c) >= max(table.fontMetrics().horizontalAdvance(t) for t in texts)


def test_cursors_and_markers_far_from_the_view_leave_it_until_a_view_comes_near(window: MainWindow) -> None:
    """A cursor or marker far outside the view is taken out of the view box (pyqtgraph would place its name again at
    every frame) and put back when a view comes near enough for its name to show; its time stays what it was."""
    tl = window.timeline
    lo, hi = window.doc.extent_ns()
    a, b, m = lo + 0.1 * (hi - lo), lo + 0.2 * (hi - lo), lo + 0.15 * (hi - lo)
    tl.set_cursors(a, b)
    tl.add_marker("M", m)
    lines = [*tl.cursors, *tl.marker_lines]
    tl.vb.setXRange(lo + 0.6 * (hi - lo), lo + 0.7 * (hi - lo), padding=0)
    assert all(line.parentItem() is None for line in lines)
    assert tl.cursor_positions() == pytest.approx((a, b)) and tl.doc.session.markers == [("M", m)]
    # B's name is right of its line: a view starting a few pixels after B shows it, so B is back
    per_px = (tl.view_range()[1] - tl.view_range()[0]) / tl.pixels()
    tl.vb.setXRange(b + 5 * per_px, b + 5 * per_px + 0.1 * (hi - lo), padding=0)
    assert tl.cursors[1].parentItem() is not None and tl.cursors[0].parentItem() is None
    tl.vb.setXRange(lo + 0.05 * (hi - lo), lo + 0.25 * (hi - lo), padding=0)
    assert all(line.parentItem() is not None for line in lines)
    t0, t1 = tl.view_range()
    for line in lines:  # drawn where they are, their names beside them
        x = tl.vb.mapViewToScene(QtCore.QPointF(line.value(), 0)).x()
        name = line.label.sceneBoundingRect()
        assert abs(name.center().x() - x) <= name.width()
        assert t0 <= line.value() <= t1
    tl.set_cursors(hi + (hi - lo), hi + 2 * (hi - lo))
    assert all(line.parentItem() is None for line in tl.cursors)
    tl.cursors_into_view()
    assert all(line.parentItem() is not None for line in tl.cursors)


def test_a_prepared_capture_reads_the_cursor_values_after_its_first_frame(window: MainWindow, qtbot,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each value at the cursors is a read of stored samples or decoded rows: none is read before the first view
    is painted (they show as loading until then, never a wrong value), and all are read after it."""
    from nicrig.gui.lanes import Lane

    opened: list[MainWindow] = []
    frames_at_read: list[int] = []
    value_text = Lane.value_text

    def counted(self: Lane, *args: object) -> str:
        frames_at_read.append(opened[0].timeline.plot.frames if opened else 0)
        return value_text(self, *args)

    monkeypatch.setattr(Lane, "value_text", counted)
    again = MainWindow([window.doc.path])  # its overview and decoded lanes are in the cache the fixture prepared
    opened.append(again)
    qtbot.addWidget(again)
    table = again.cursor_panel.values
    assert table.rowCount() > 20 and not frames_at_read
    assert {table.item(r, c).text() for r in range(table.rowCount()) for c in (1, 2)} == {"loading"}
    again.resize(1400, 900)
    again.show()
    qtbot.waitUntil(lambda: again.cursor_panel.values_read, timeout=10_000)
    assert frames_at_read and min(frames_at_read) >= 1
    cells = {table.item(r, 0).text(): table.item(r, 1).text() for r in range(table.rowCount())}
    assert cells["send_pci: FRAME#"] in ("0", "1") and "loading" not in cells.values()


def test_a_window_draws_its_lanes_once_for_the_size_of_its_first_frame(window: MainWindow, qtbot,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The window is laid out before its first frame (the view resized several times): its lanes are drawn once,
    as that frame is painted, at its final width, and that frame paints them (no second frame to catch up)."""
    from nicrig.gui.timeline import LanesItem

    drawn: list[tuple[int, int, int]] = []  # (frames painted, lanes, view's width) at each drawing of the lanes
    painted: list[int] = []  # lanes each paint of the lanes had
    show_lanes, paint = LanesItem.show_lanes, LanesItem.paint
    opened: list[MainWindow] = []

    def counted(self: LanesItem, items: list, *args: object) -> None:
        tl = opened[0].timeline if opened else None
        drawn.append((tl.plot.frames, len(items), tl.pixels()) if tl else (-1, len(items), 0))
        show_lanes(self, items, *args)

    monkeypatch.setattr(LanesItem, "show_lanes", counted)
    monkeypatch.setattr(LanesItem, "paint", lambda self, p, *a: painted.append(len(self.items)) or paint(self, p, *a))
    again = MainWindow([window.doc.path])
    opened.append(again)
    qtbot.addWidget(again)
    again.resize(1400, 900)
    again.show()
    tl = again.timeline
    qtbot.waitUntil(lambda: tl.plot.frames >= 1)
    assert len(drawn) == 1 and drawn[0] == (0, len(tl.items), tl.pixels()) and len(tl.items) > 20
    assert painted and painted[0] == len(tl.items)
    assert tl.items[0].view == pytest.approx(tl.view_range())
    assert tl.lanes_item.view == pytest.approx(tl.view_range())


def test_measurements_come_from_the_bus_analysis_and_label_the_phases(window: MainWindow) -> None:
    lo, hi = window.doc.extent_ns()
    window.measurements.measure(lo, hi)
    window.wait_jobs()
    names = [m.name.strip() for m in window.measurements.results]
    for expected in ("CSR setup (sending driver)", "DMA on the sending bus", "frame on the wire",
                     "first word -> first word (propagation)", "receive DMA -> interrupt (coalescence)"):
        assert expected in names
    labels = {item.lane.id for item in window.timeline.items}
    assert {"send_pci/phases", "probe/phases", "recv_pci/phases"} <= labels
    # the propagation span is the truth's first word to first word
    with CaptureSet.open(window.doc.path) as cs:
        send = cs.read_table("truth/send_pci/transactions")
        recv = cs.read_table("truth/recv_pci/transactions")
    # a first word is the first that moves data: a read the bridge retried (no data phase) carries none
    def first_word(tx: np.ndarray, purpose: bytes) -> int:
        return int(tx["t_start_ps"][(tx["purpose"] == purpose) & (tx["data_phases"] > 0)][0])
    truth = first_word(recv, b"rx_data") - first_word(send, b"tx_data")
    prop = next(m for m in window.measurements.results if "propagation" in m.name)
    # the analysis takes the first *data* phase (after the address phase): within two bus clocks of the truth
    assert abs((prop.t1_ns - prop.t0_ns) - truth / 1000) <= 2 * 15.0
    window.measurements.mark()
    assert any("CSR setup" in name for name, _ in window.doc.session.markers)
    # every time to what the 66 MHz sample clock resolves (two 15 ns stamps: 21 ns, so 0.01 us at the finest),
    # with its 95% half-width: two significant digits at most, the value to the same place
    times = [m.value for m in window.measurements.results if m.value.endswith(" us") or " us (" in m.value]
    assert times and "±" in prop.value
    for text in times:
        for value, half in re.findall(r"(\d[\d,]*(?:\.\d+)?) ± (\d[\d,]*(?:\.\d+)?) us", text):
            assert len(value.partition(".")[2]) == len(half.partition(".")[2]) <= 2, text
            assert len(half.replace(".", "").lstrip("0")) <= 2 and float(half) > 0, text
        assert not re.search(r"\d\.\d{3}", text), text


def test_a_bus_median_carries_its_scatter_and_the_sample_clock() -> None:
    from nicrig.analysis import bus
    from nicrig.gui.measurements import _spread, clock_step_us

    step = clock_step_us({"send_pci": 15.0}, "send_pci")
    assert step == pytest.approx(0.015 * 2 ** 0.5)
    several = bus.spread([1.2, 1.3, 1.25, 1.27, 1.22, 1.31, 1.29])
    assert _spread("DMA", several, step_us=step).value == "median 1.27 ± 0.06 us (min 1.20, max 1.31; n=7)"
    assert _spread("DMA", bus.spread([1.23456]), step_us=step).value == "1.23 ± 0.01 us"
    # too few for a distribution-free interval: the median and its range, to the clock's resolution
    assert _spread("DMA", bus.spread([1.2, 1.3]), step_us=step).value == "median 1.25 us (min 1.20, max 1.30; n=2)"


def test_a_bus_occupancy_is_given_to_one_clock_of_the_window() -> None:
    from nicrig.analysis import bus
    from nicrig.gui.measurements import _occupancy, clock_step_us

    step = clock_step_us({"send_pci": 15.0}, "send_pci")
    long = bus.Occupancy(window_us=10_000.0, busy_us=4228.0, busy_pct=42.28, frames=909, busy_per_frame_us=4.65,
                         frame_period_us=11.0)
    assert _occupancy(long, step) == "42.2800 ± 0.0001 %"  # a clock in 10 ms
    short = dataclasses.replace(long, window_us=1.0, busy_us=0.4228)  # a clock of 21 ns is 2 % of 1 us
    assert _occupancy(short, step) == "42 ± 1 %"
    assert _occupancy(short, None) == "42.28 %"  # no clock known: four significant digits


def test_session_is_saved_with_the_file(qtbot, fresh: Path) -> None:
    w = MainWindow([fresh])
    qtbot.addWidget(w)
    w.show()
    w.wait_jobs()
    w.timeline.set_offset("probe", -42.0)
    w.timeline.add_marker("request on the wire", 2500.0)
    item = w.lanes_panel.tree.topLevelItem(0).child(0)
    hidden_id = item.data(0, QtCore.Qt.ItemDataRole.UserRole)
    item.setCheckState(0, QtCore.Qt.CheckState.Unchecked)
    assert hidden_id not in _lane_ids(w)
    w.save_session()
    w.close()
    w2 = MainWindow([fresh])
    qtbot.addWidget(w2)
    assert w2.doc.session.offset("probe") == -42.0
    assert ("request on the wire", 2500.0) in w2.doc.session.markers
    assert hidden_id not in _lane_ids(w2)
    assert w2.lanes_panel.spins["probe"].value() == -42.0
    w2.close()


def test_decoding_runs_in_the_background_and_adds_lanes(qtbot, tmp_path: Path) -> None:
    raw = simulate_set(tmp_path, "raw", kind="latency", size_bytes=200, count=1)
    w = MainWindow([raw])
    qtbot.addWidget(w)
    w.show()
    assert not any(lane.kind == "decoded" for lane in w.doc.lanes)
    w.decode()
    assert w.jobs and w.cancel_button.isVisible()
    QtWidgets.QApplication.processEvents()  # the window keeps answering while it decodes
    w.wait_jobs()
    assert not w.errors
    assert "send_pci/decoded/pci" in _lane_ids(w)
    assert len(w.events.events) > 0


def test_cancelled_decoding_leaves_a_valid_file(qtbot, tmp_path: Path) -> None:
    raw = simulate_set(tmp_path, "raw", kind="stream", size_bytes=1400, count=40, spacing_us=20.0)
    w = MainWindow([raw])
    qtbot.addWidget(w)
    w.show()
    w.wait_jobs()
    w.decode()
    w.cancel_jobs()
    w.wait_jobs()
    assert not w.errors
    assert w.timeline.isEnabled()
    with CaptureSet.open(raw) as cs:  # still readable, only whole tables
        for name in cs.table_names():
            cs.read_table(name)


@pytest.mark.parametrize("content", [b"", b"garbage" * 100, "truncated"])
def test_a_corrupt_file_gives_a_dialog_and_no_crash(qtbot, capture: Path, tmp_path: Path,
                                                     content: bytes | str) -> None:
    bad = tmp_path / "bad.h5"
    if content == "truncated":
        data = capture.read_bytes()
        bad.write_bytes(data[: len(data) // 3])
    else:
        bad.write_bytes(content)
    w = MainWindow([bad])
    qtbot.addWidget(w)
    w.show()
    QtWidgets.QApplication.processEvents()
    assert w.errors and str(bad) in w.errors[0]
    dialogs = [d for d in w.findChildren(QtWidgets.QMessageBox) if d.isVisible()]
    assert dialogs and str(bad) in dialogs[0].text()
    assert w.doc is None
    # the window still works: open a good file afterwards
    assert w.open_file(capture)
    assert w.timeline is not None


def test_a_decode_error_shows_the_library_message(qtbot, fresh: Path, monkeypatch) -> None:
    w = MainWindow([fresh])
    qtbot.addWidget(w)
    w.show()
    w.wait_jobs()
    import nicrig.gui.app as app_module

    def failing(path: Path, progress=None) -> dict:
        from nicrig.decoders.sigrok_cli import DecodeError

        raise DecodeError(f"{path}: sigrok-cli is not installed (Debian: apt-get install sigrok-cli)")

    monkeypatch.setattr(app_module, "decode_file", failing)
    w.decode()
    w.wait_jobs()
    assert w.errors and "sigrok-cli is not installed" in w.errors[-1]
    assert w.timeline.isEnabled() and w.doc.cs.source_names  # reopened, still usable


@pytest.fixture
def results_files(tmp_path: Path) -> tuple[Path, Path]:
    """A latency and a stream results file written by the udpmon writers from synthetic measurements."""
    rng = np.random.default_rng(3)
    sizes = list(range(64, 3000, 256))
    visits = [LatencyVisit(r, p, s, 0, 0, (20_000 + 12 * s + rng.normal(0, 300, 20)).astype(np.int64))
              for r in range(10) for p, s in enumerate(rng.permutation(sizes))]
    lat = tmp_path / "lat.h5"
    with ResultsFile.create(lat) as rf:
        rf.set_run("latency", peer="127.0.0.1", argv=["test"], settings={}, remote={})
        write_latency(rf, visits, mtu=1500, bin_us=1.0)
    points = []
    for k, (size, spacing) in enumerate((s, sp) for s in (64, 1472) for sp in (0, 10, 20, 40)):
        sent = 1_000_000 + np.arange(1000, dtype=np.int64) * int(spacing * 1000)
        seq = np.arange(1000)[300:] if spacing < 15 and size == 1472 else np.arange(1000)
        gap_ns = max(spacing, 12) * 1000 * size / 1472
        points.append(StreamPoint(point=k, round=0, position=k, size_bytes=size, spacing_us=spacing, count=1000,
                                  t0_ns=1_000_000, sent_ns=sent, seq=seq,
                                  kernel_ns=(5_000_000 + seq * gap_ns).astype(np.int64),
                                  local_cpu_busy_pct=50 + spacing, remote_cpu_busy_pct=60 - spacing))
    stream = tmp_path / "stream.h5"
    with ResultsFile.create(stream) as rf:
        rf.set_run("stream", peer="127.0.0.1", argv=["test"], settings={}, remote={})
        write_stream(rf, points, [point_row(p, link_rate_bps=None, mtu=1500, wire_overhead=66) for p in points],
                     wire_overhead=66, bin_us=1.0, link_rate_bps=None)
    return lat, stream


def test_results_views_plot_fits_expected_slope_histograms_and_stream(qtbot, results_files) -> None:
    w = MainWindow(list(results_files))
    qtbot.addWidget(w)
    w.show()
    assert not w.errors
    latency, streams = w.results
    assert [latency.tabText(i) for i in range(latency.count())] == ["latency vs size", "RTT histograms"]
    assert [streams.tabText(i) for i in range(streams.count())] == ["throughput, loss, CPU"]
    # the synthetic 12 ns/byte slope, fitted by the one estimator, with its interval
    assert any(label.startswith("minimum fit, 1 frame(s): 0.012") for label in latency.fit_rows)
    assert latency.estimate.rounds == 10 and latency.estimate.order == "random"
    assert "expected slope 0.01175 us/byte" in latency.expected_note.text()  # seed 002 3.1: 64/66 path
    latency.path_edit.setText("pci32-33,gige,pci32-33")
    latency.show_expected()
    assert "expected slope 0.02300" in latency.expected_note.text()
    latency.path_edit.setText("pci99-1")
    latency.show_expected()
    assert "path element" in latency.expected_note.text()


def test_export_png_and_svg(window: MainWindow, tmp_path: Path) -> None:
    png = export_widget(window.timeline, tmp_path / "v.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = export_widget(window.timeline, tmp_path / "v.svg")
    assert b"<svg" in svg.read_bytes()[:2000]
    with pytest.raises(Exception, match="export as .png or .svg"):
        export_widget(window.timeline, tmp_path / "v.jpg")


def test_screenshot_command_renders_offscreen(capture: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "shot.png"
    assert main(["gui", str(capture), "--screenshot", str(out), "--view", "timeline", "--range=-2:100",
                 "--measure", "--size", "1200x800"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert main(["gui", str(capture), "--screenshot", str(tmp_path / "x.txt")]) == 2
    assert "name a .png or .svg" in capsys.readouterr().err
    assert main(["gui", str(tmp_path / "missing.h5"), "--screenshot", str(out)]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["gui", str(capture), "--screenshot", str(out), "--range", "a:b"]) == 2


def test_no_display_is_a_clear_error(monkeypatch, capsys) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    assert main(["gui"]) == 2
    assert "--screenshot" in capsys.readouterr().err
    # the file is checked first: its error is the one to fix, not the display
    assert main(["gui", "nothere.h5"]) == 2
    err = capsys.readouterr().err
    assert "nothere.h5" in err and "no such file" in err and "display" not in err and len(err.splitlines()) == 1



def test_painting_keeps_python_alive(window: MainWindow) -> None:
    """Each redraw makes thousands of Qt painter calls; a Qt binding that loses a reference per call (PySide6
    6.12.0 on Python 3.11) would abort the GUI after a while. Painting must leave None's count where it was."""
    import gc
    import sys

    window.timeline.zoom_all()
    window.wait_jobs()  # background jobs (overviews, decoding) move None's count on their own
    gc.collect()
    before = sys.getrefcount(None)
    for k in range(30):
        lo, hi = window.doc.extent_ns()
        window.timeline.vb.setXRange(lo, lo + (hi - lo) / (k + 1), padding=0)
        window.timeline.plot.viewport().repaint()
    window.wait_jobs()
    gc.collect()
    assert sys.getrefcount(None) - before > -500



def test_collections_pass_start_up_by_but_not_what_a_window_makes(qtbot, fresh: Path, monkeypatch) -> None:
    """The start-up objects are frozen once the window's modules are imported, so a full collection walks the
    windows' own objects only; nothing a window makes is frozen, the window included (a closed one is freed)."""
    import gc

    from nicrig.gui import heap

    assert heap._frozen  # by nicrig.gui.app's import
    gc.unfreeze()  # as the import left the process (the simulator in this one's fixtures thaws too)
    monkeypatch.setattr(heap, "_frozen", False)
    try:
        heap.freeze_start_up()
        heap.freeze_start_up()  # once per process
        w = MainWindow([fresh])
        qtbot.addWidget(w)
        w.show()
        w.wait_jobs()
        walked = {id(o) for o in gc.get_objects()}
        assert gc.get_freeze_count() > 10_000 and id(MainWindow) not in walked and id(np.ndarray) not in walked
        made = [w, w.doc, w.timeline, *w.doc.lanes, *(ln.boxes for ln in w.doc.lanes if ln.boxes)]
        assert all(id(o) in walked for o in made)
    finally:
        gc.unfreeze()  # the other tests' windows, frozen here, are freed when they close



def test_the_preparer_reports_its_progress_in_few_steps(fresh: Path, monkeypatch) -> None:
    """The preparer says how far the overview and the search index are a bounded number of times (once per
    growth or stored chunk flooded the window with thousands of messages), each ending at its total."""
    from nicrig.gui import prepare

    monkeypatch.setattr(prepare, "PROGRESS_STEPS", 2)
    said: list[dict] = []
    prepare.prepare(fresh, said.append, threads=1)
    tables = [m["text"] for m in said if "text" in m]
    assert len(tables) >= 4 and sum(1 for m in said if "end_ps" in m) == 3
    for title in ("building overview", "indexing events for search"):
        steps = [m["progress"] for m in said if m.get("title") == title]
        assert 2 <= len(steps) <= 3
        assert steps[-1][0] == steps[-1][1] and [d for d, _ in steps] == sorted(d for d, _ in steps)


def test_the_search_index_describes_every_row_as_its_labels_do(capture: Path, tmp_path: Path, monkeypatch) -> None:
    """Each row's description in the search index is its own longest label, lower-cased, though rows equal but
    for their time are described once (and the descriptions kept are dropped now and then on the way)."""
    from nicrig.gui import prepare
    from nicrig.gui.lanes import ROW_LABELS
    from nicrig.h5file import open_any

    monkeypatch.setattr(prepare, "CHUNKS_PER_TASK", 3)  # several batches, each with rows seen before
    monkeypatch.setattr(prepare, "KNOWN_DESCRIPTIONS", 2)
    with open_any(capture) as cs:
        tables = prepare.decoded_tables(cs.table_names())
        assert {d for _, _, d in tables} >= {"pci", "ethernet"}
        for table, _, decoder in tables:
            folder = tmp_path / table.replace("/", "-")
            folder.mkdir()
            prepare.prepare_text(cs, table, decoder, folder, lambda: None, lambda k: None)
            rows = cs.read_table(table)
            text = np.load(folder / "text.npy")
            assert len(text) == len(rows)
            want = [ROW_LABELS[decoder](row)[0].lower().encode() for row in rows]
            assert text.tolist() == want, table


# -- lanes drawn whole before, during and after the overview is built ------------------------------------------
PROBE_LANES = ("probe/TX_EN", "probe/RX_DV", "probe/LINK_ACT")
PENDING_RGB = (0xbb, 0xbb, 0xbb)  # the hatch of a stretch whose overview is still being built
LINE_RGB = (0x1b, 0x5e, 0x20)


def _lane_pixels(window: MainWindow, lane_id: str, without_text: bool = False) -> np.ndarray:
    """RGB pixels (rows x columns x 3) of one lane's band in the timeline as painted now (``without_text``: its
    words blanked, whose anti-aliased greys can be any colour)."""
    from PySide6 import QtGui

    tl = window.timeline
    item = next(i for i in tl.items if i.lane.id == lane_id)
    img = tl.plot.grab().toImage().convertToFormat(QtGui.QImage.Format.Format_RGB32)
    rgb = np.frombuffer(img.constBits(), np.uint8).reshape(img.height(), img.bytesPerLine() // 4, 4)[..., 2::-1]
    if without_text:
        rgb = rgb.copy()
        for rect, _ in item.written:
            r = rect.toAlignedRect()
            rgb[max(r.top(), 0):r.bottom() + 1, max(r.left(), 0):r.right() + 1] = 255
    t0, t1 = tl.view_range()
    top_left = tl.plot.mapFromScene(tl.vb.mapViewToScene(QtCore.QPointF(t0, item.y0)))
    bottom_right = tl.plot.mapFromScene(tl.vb.mapViewToScene(QtCore.QPointF(t1, item.y0 + item.h)))
    return rgb[top_left.y() + 1:bottom_right.y() - 1, top_left.x() + 1:bottom_right.x() - 1].copy()


def _has(pixels: np.ndarray, colour: tuple[int, int, int]) -> bool:
    return bool(np.all(pixels == colour, axis=-1).any())


def _ink_columns(pixels: np.ndarray) -> np.ndarray:
    """x of every pixel column with waveform ink (anything but the white background)."""
    return np.flatnonzero(np.any(pixels.astype(int).sum(axis=-1) < 600, axis=0))


def _open_at(qtbot, path: Path, view: tuple[float, float], build: bool = True) -> MainWindow:
    w = MainWindow([path])
    qtbot.addWidget(w)
    # wider than any window's least width (so every window is as wide), narrow enough that the probe holds more
    # samples than raw samples draw at 64 a pixel
    w.resize(1300, 900)
    w.show()
    if build:
        w.wait_jobs()
    w.timeline.vb.setXRange(*view, padding=0)
    w.timeline.set_cursors(view[0], view[0])  # cursors at the edge, off the lanes compared
    QtWidgets.QApplication.processEvents()
    w.timeline.redraw()
    QtWidgets.QApplication.processEvents()
    return w


def test_lanes_are_drawn_whole_before_during_and_after_the_overview_is_built(qtbot, tmp_path: Path,
                                                                            monkeypatch) -> None:
    """A capture never opened before (no cached overview): while the overview is not built the probe lanes are
    drawn from raw samples, once it is built they are repainted from it without a zoom, and the picture is
    the one a window opening the cached overview paints."""
    from nicrig.gui import overview
    from nicrig.gui.overview import RAW_SAMPLES_PER_PIXEL

    # Four exchanges: a probe long enough that the whole capture holds more samples than raw drawing takes.
    fresh = simulate_set(tmp_path, "four", kind="latency", size_bytes=1400, request_bytes=64, count=4)

    assert not any(folder.exists() for folder in overview.cache_paths(fresh))
    monkeypatch.setattr(MainWindow, "prepare_view", lambda self: None)  # "during": nothing built yet
    with CaptureSet.open(fresh) as cs:
        lo, hi = (t / 1000 for t in (cs.source("probe").times_ps(0, 1)[0], cs.source("probe").times_ps()[-1]))
    view = (lo, hi)
    w = _open_at(qtbot, fresh, view, build=False)
    probe = w.doc.data["probe"]
    assert not probe.pyramid.complete and probe.pyramid.built == 0
    assert probe.estimated_samples(lo * 1000, hi * 1000) > RAW_SAMPLES_PER_PIXEL * w.timeline.pixels()
    during = {lane: _lane_pixels(w, lane) for lane in PROBE_LANES}
    for lane, px in during.items():
        assert not _has(px, PENDING_RGB), f"{lane} hatched while the overview builds"
        assert _has(px, LINE_RGB), f"{lane} has no waveform"

    monkeypatch.undo()
    w.prepare_view()
    w.wait_jobs()
    QtWidgets.QApplication.processEvents()
    assert probe.pyramid.complete
    after = {lane: _lane_pixels(w, lane) for lane in PROBE_LANES}
    assert any(folder.exists() for folder in overview.cache_paths(fresh))

    cached = _open_at(qtbot, fresh, view)
    assert cached.doc.data["probe"].pyramid.complete and cached.timeline.pixels() == w.timeline.pixels()
    for lane in PROBE_LANES:
        again = _lane_pixels(cached, lane)
        assert not _has(after[lane], PENDING_RGB), f"{lane} still hatched after the overview was built"
        assert np.array_equal(after[lane], again), f"{lane} differs from the picture with a cached overview"
        # raw samples (during) and overview bins (after) put each edge in the same pixel, or the next
        ink_during, ink_after = _ink_columns(during[lane]), _ink_columns(again)
        assert len(ink_after) and np.abs(ink_during[:, None] - ink_after[None, :]).min(axis=1).max() <= 1, lane



def test_the_overview_growing_redraws_a_view_drawn_from_it_only(qtbot, fresh: Path, monkeypatch) -> None:
    """While the overview is built, each of its steps redraws a view drawn from it (which shows more at each), not
    one drawn from raw samples (the same picture whatever the overview holds, so the preparer keeps the cores)."""
    import shutil

    from nicrig.gui import lanes as lanes_module
    from nicrig.gui import overview

    for folder in overview.cache_paths(fresh):
        shutil.rmtree(folder, ignore_errors=True)
    monkeypatch.setattr(MainWindow, "prepare_view", lambda self: None)  # nothing built: the overview is empty
    w = MainWindow([fresh])
    qtbot.addWidget(w)
    w.resize(1300, 900)
    w.show()
    QtWidgets.QApplication.processEvents()
    tl = w.timeline
    assert not any(d.pyramid.complete for d in w.doc.data.values())
    redraws: list[tuple[float, float]] = []
    redraw = tl.redraw
    tl.redraw = lambda: redraws.append(tl.view_range()) or redraw()
    # every view drawn from the overview: wider than raw samples draw, even while it is built
    raw_per_pixel = lanes_module.RAW_SAMPLES_PER_PIXEL
    monkeypatch.setattr(lanes_module, "RAW_SAMPLES_PER_PIXEL", 0)
    monkeypatch.setattr(lanes_module, "RAW_SAMPLES_WHILE_BUILDING", 0)
    tl.zoom_all()
    tl.redraw()
    assert tl.growing
    redraws.clear()
    w._overview_progress()
    assert len(redraws) == 1
    monkeypatch.setattr(lanes_module, "RAW_SAMPLES_PER_PIXEL", raw_per_pixel)
    lo, _ = w.doc.extent_ns()
    tl.vb.setXRange(lo, lo + 1000.0, padding=0)  # a microsecond: raw samples
    tl.redraw()
    assert not tl.growing
    redraws.clear()
    w._overview_progress()
    assert redraws == []

# -- keyboard ---------------------------------------------------------------------------------------------------
def test_keyboard_zooms_pans_and_fits_as_in_pulseview(window: MainWindow, qtbot) -> None:
    from PySide6.QtTest import QTest

    Key, Ctrl = QtCore.Qt.Key, QtCore.Qt.KeyboardModifier.ControlModifier
    tl = window.timeline
    window.activateWindow()
    tl.plot.setFocus()
    qtbot.waitUntil(lambda: tl.plot.hasFocus())
    lo, hi = window.doc.extent_ns()
    tl.vb.setXRange(lo + 0.25 * (hi - lo), lo + 0.75 * (hi - lo), padding=0)
    t0, t1 = tl.view_range()

    QTest.keyClick(tl.plot, Key.Key_Plus, Ctrl)
    a, b = tl.view_range()
    assert b - a == pytest.approx((t1 - t0) / 2) and (a + b) / 2 == pytest.approx((t0 + t1) / 2)
    QTest.keyClick(tl.plot, Key.Key_Equal, Ctrl)   # Ctrl+plus without Shift
    assert tl.view_range()[1] - tl.view_range()[0] == pytest.approx((t1 - t0) / 4)
    QTest.keyClick(tl.plot, Key.Key_Minus, Ctrl)
    QTest.keyClick(tl.plot, Key.Key_Minus, Ctrl)
    assert tl.view_range() == pytest.approx((t0, t1))

    QTest.keyClick(tl.plot, Key.Key_Right)
    assert tl.view_range() == pytest.approx((t0 + 0.25 * (t1 - t0), t1 + 0.25 * (t1 - t0)))
    QTest.keyClick(tl.plot, Key.Key_Left)
    QTest.keyClick(tl.plot, Key.Key_Left)
    assert tl.view_range() == pytest.approx((t0 - 0.25 * (t1 - t0), t1 - 0.25 * (t1 - t0)))

    QTest.keyClick(tl.plot, Key.Key_0, Ctrl)
    assert tl.view_range() == pytest.approx((lo, hi))
    # the lanes follow the keys: what is drawn is the new window
    assert all(item.view == pytest.approx((lo, hi)) for item in tl.items)

    # the arrows belong to the timeline: in the event table they move the selection, not the view
    window.events.view.setFocus()
    qtbot.waitUntil(lambda: window.events.view.hasFocus())
    QTest.keyClick(window.events.view, Key.Key_Right)
    assert tl.view_range() == pytest.approx((lo, hi))

    keys = dict(window.keys())
    assert keys["Zoom in"].startswith("Ctrl++") and keys["Zoom out"] == "Ctrl+-"
    assert keys["Zoom to whole capture"] == "Ctrl+0" and keys["Pan to earlier"] == "Left"
    assert keys["Move a source in time (deskew)"] == "Shift+drag"


def test_a_simulated_capture_set_opens_with_its_results_views(qtbot, tmp_path: Path) -> None:
    path = tmp_path / "simlat.h5"
    assert main(["simulate", "--scenario", "latency", "--sizes", "64,800,1472", "--count", "4", "--rounds", "2",
                 "--order-seed", "1", "-o", str(path)]) == 0
    w = MainWindow([path])
    qtbot.addWidget(w)
    w.show()
    w.wait_jobs()
    assert not w.errors and w.doc is not None  # the capture's timeline, and beside it ...
    (view,) = w.results  # ... the results it carries, as a results file's
    assert [view.tabText(i) for i in range(view.count())] == ["latency vs size", "RTT histograms"]
    assert view.estimate.rounds == 2 and list(view.estimate.sizes) == [64, 800, 1472]


# -- the window while a deep capture is prepared in the background ---------------------------------------------
class _Reads:
    """Samples and table rows the window's thread reads from the file (what a slice of it can cost)."""

    def __init__(self, monkeypatch) -> None:
        import threading

        from nicrig.gui.chunks import StoredChunks
        from nicrig.gui.overview import SampleReader

        self.samples = self.rows = 0
        main = threading.main_thread()

        def counted(cls, name: str, attr: str) -> None:
            original = getattr(cls, name)

            def read(reader, *args, **kwargs):
                out = original(reader, *args, **kwargs)
                # stored chunks are read for tables' rows and for samples' times (those counted by the block cache)
                if threading.current_thread() is main and getattr(reader, "what", "table").startswith("table"):
                    setattr(self, attr, getattr(self, attr) + len(out[0] if isinstance(out, tuple) else
                                                                  next(iter(out.values())) if isinstance(out, dict)
                                                                  else out))
                return out

            monkeypatch.setattr(cls, name, read)

        # what is read from the file, not what is taken again from the block cache
        counted(SampleReader, "packed", "samples")
        counted(SampleReader, "times", "samples")
        counted(StoredChunks, "rows", "rows")
        counted(StoredChunks, "fields", "rows")


class _Probe(QtCore.QObject):
    """Posts itself an event again each time it gets one: every dispatch is one turn of the event loop, timed by
    Qt's own clock, with how many of the preparer's messages the window had taken by then."""

    def __init__(self, taken: list) -> None:
        super().__init__()
        self.taken, self.turns, self.running = taken, [], True
        self.clock = QtCore.QElapsedTimer()
        self.clock.start()
        QtCore.QCoreApplication.postEvent(self, QtCore.QEvent(QtCore.QEvent.Type.User))

    def event(self, ev: QtCore.QEvent) -> bool:
        if ev.type() != QtCore.QEvent.Type.User:
            return super().event(ev)
        self.turns.append((self.clock.nsecsElapsed(), len(self.taken)))
        if self.running:
            QtCore.QCoreApplication.postEvent(self, QtCore.QEvent(QtCore.QEvent.Type.User))
        return True


def test_the_window_answers_while_a_deep_capture_is_prepared(qtbot, fresh: Path, monkeypatch) -> None:
    """A deep capture is prepared in a process of its own: held stopped here, the window still draws (the decoded
    lanes as loading, not blank) and takes zoom, pan and drag at once; let go, each piece it sends is taken in a
    turn of the event loop of its own, reading nothing in bulk, so input waits for one piece at most."""
    import os
    import signal

    import nicrig.gui.app as app_module
    from nicrig.gui.background import ProcessJob
    from nicrig.gui.document import Document
    from nicrig.gui.overview import RAW_SAMPLES_WHILE_BUILDING
    from PySide6.QtTest import QTest

    monkeypatch.setattr(app_module, "PREPARED_HERE_SAMPLES", 0)  # prepared as a deep capture is
    start = ProcessJob.start

    def held(job: ProcessJob) -> None:  # the preparer stops itself before it starts: nothing prepared yet
        program, args = job.process.program(), job.process.arguments()
        job.process.setProgram("/bin/sh")
        job.process.setArguments(["-c", 'kill -STOP $$; exec "$0" "$@"', program, *args])
        start(job)

    monkeypatch.setattr(ProcessJob, "start", held)
    taken: list[tuple[str, int, int]] = []
    take = Document.take
    reads = _Reads(monkeypatch)

    def counted_take(doc: Document, message: dict) -> str | None:
        before = (reads.samples, reads.rows)
        what = take(doc, message)
        taken.append((str(what), reads.samples - before[0], reads.rows - before[1]))
        return what

    monkeypatch.setattr(Document, "take", counted_take)

    w = MainWindow([fresh])
    qtbot.addWidget(w)
    w.resize(1400, 900)
    w.show()
    qtbot.waitUntil(lambda: bool(w.jobs))  # started once the first view is painted
    (job,) = [j for j in w.jobs if isinstance(j, ProcessJob)]
    pid = int(job.process.processId())
    assert pid > 0 and pid != os.getpid()
    qtbot.waitUntil(lambda: Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "T")
    tl = w.timeline
    qtbot.waitUntil(lambda: tl.plot.frames > 0)
    doc = w.doc
    assert not taken and all(t.arrays is None for t in doc.decoded.values())
    assert not any(d.pyramid.complete for d in doc.data.values())
    lane = "send_pci/decoded/pci"
    assert _has(_lane_pixels(w, lane), PENDING_RGB), "a decoded lane still loading is drawn as such"
    assert tl.items[[i.lane.id for i in tl.items].index(lane)].lane.boxes is None

    # input while nothing is prepared: each one changes the view and paints it
    w.activateWindow()
    tl.plot.setFocus()
    qtbot.waitUntil(tl.plot.hasFocus)
    vp = tl.plot.viewport()

    def wheel() -> None:
        pos = QtCore.QPointF(vp.width() / 2, vp.height() / 2)
        QtWidgets.QApplication.sendEvent(vp, QtGui.QWheelEvent(
            pos, vp.mapToGlobal(pos), QtCore.QPoint(), QtCore.QPoint(0, 120), QtCore.Qt.MouseButton.NoButton,
            QtCore.Qt.KeyboardModifier.NoModifier, QtCore.Qt.ScrollPhase.NoScrollPhase, False))

    def drag() -> None:
        left, mid = QtCore.Qt.MouseButton.LeftButton, QtCore.QPoint(vp.width() // 2, vp.height() // 2)
        QTest.mousePress(vp, left, QtCore.Qt.KeyboardModifier.NoModifier, mid)
        QTest.mouseMove(vp, mid + QtCore.QPoint(120, 0))
        QTest.mouseRelease(vp, left, QtCore.Qt.KeyboardModifier.NoModifier, mid + QtCore.QPoint(120, 0))

    ctrl = QtCore.Qt.KeyboardModifier.ControlModifier
    inputs = [lambda: QTest.keyClick(tl.plot, QtCore.Qt.Key.Key_Minus, ctrl), wheel, drag,
              lambda: QTest.keyClick(tl.plot, QtCore.Qt.Key.Key_Right)]
    for send in inputs:
        view, frames, samples = tl.view_range(), tl.plot.frames, reads.samples
        send()
        qtbot.waitUntil(lambda: tl.plot.frames > frames)
        assert tl.view_range() != view
        # a view of a capture being prepared reads raw samples only for a window holding few of them
        assert reads.samples - samples <= RAW_SAMPLES_WHILE_BUILDING * len(doc.data)
    assert w.jobs == [job] and not taken and reads.rows == 0  # all that while, the preparer was held

    # let it go: one piece a turn of the event loop, each taken without reading samples or rows
    probe = _Probe(taken)
    os.kill(pid, signal.SIGCONT)
    qtbot.waitUntil(lambda: not w.jobs, timeout=120_000)
    probe.running = False
    assert not w.errors and doc.prepared
    assert {what for what, _, _ in taken} >= {"lanes", "pyramid", "text"}
    assert all(samples == 0 and rows == 0 for what, samples, rows in taken if what != "None")
    per_turn = np.diff([n for _, n in probe.turns])
    assert per_turn.max() <= 1, "several pieces taken in one turn: input would wait for all of them"
    gaps_ms = np.diff([t for t, _ in probe.turns]) / 1e6
    # Qt's clock on the turns, for a person to read (this machine's load sets them, not the window)
    print(f"event loop while prepared: {len(probe.turns)} turns, {len(taken)} pieces, longest turn "
          f"{gaps_ms.max():.1f} ms (median {np.median(gaps_ms):.2f} ms)")
    assert not _has(_lane_pixels(w, lane, without_text=True), PENDING_RGB)


def test_lanes_reordered_and_a_searched_event_jumped_to(window: MainWindow, qtbot) -> None:
    from PySide6.QtTest import QTest

    panel, tl = window.lanes_panel, window.timeline
    role = QtCore.Qt.ItemDataRole.UserRole
    ids = lambda: [item.lane.id for item in tl.items]  # noqa: E731
    group = panel.tree.topLevelItem(0)
    source = group.data(0, role)
    a, b = (group.child(k).data(0, role) for k in (0, 1))
    assert ids().index(a) < ids().index(b)
    panel.tree.setCurrentItem(group.child(0))
    panel._move(1)  # "Move down" (the panel is built anew)
    assert ids().index(b) < ids().index(a)
    assert [i.y0 for i in tl.items] == sorted(i.y0 for i in tl.items)  # drawn top to bottom in the new order
    panel.tree.setCurrentItem(panel.tree.topLevelItem(0))
    panel._move(1)  # the whole source below the next one
    assert ids().index(source) > ids().index(panel.tree.topLevelItem(0).data(0, role))

    # a search by a frame's words finds it; clicking it brings it into view
    events = window.events
    frame = next(i for i in range(len(events.events)) if events.events.text(i).startswith("UDP"))
    words = " ".join(events.events.text(frame).split()[:4]).upper()  # any case
    events.search.setFocus()
    QTest.keyClicks(events.search, words)
    QTest.keyClick(events.search, QtCore.Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not events.waiting and len(events.model.rows) >= 1)
    assert frame in set(events.model.rows.tolist())
    k = events.model.rows.tolist().index(frame)
    rect = events.view.visualRect(events.model.index(k, 5))
    qtbot.mouseClick(events.view.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())
    v0, v1 = tl.view_range()
    assert v0 < events.events.t_ns[frame] and events.events.t_end_ns[frame] < v1


def test_a_search_finding_few_events_has_their_views_words_ready_before_the_click(window: MainWindow, qtbot) -> None:
    """While the user reads a search's few results the window reads and lays out the labels their views show: the
    click then jumps to a view whose words are all made (no table read, no label made or measured in its frame)."""
    from nicrig.gui.timeline import lane_words
    from PySide6.QtTest import QTest

    events, tl = window.events, window.timeline
    frame = next(i for i in range(len(events.events)) if events.events.text(i).startswith("UDP"))
    words = " ".join(events.events.text(frame).split()[:4])
    lanes = [item.lane for item in tl.items if item.lane.kind == "decoded" and item.lane.boxes is not None]
    for lane in lanes:  # as after a long session: the kept labels were dropped
        lane.boxes._labels.clear()
    events.search.setFocus()
    QTest.keyClicks(events.search, words)
    QTest.keyClick(events.search, QtCore.Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not events.waiting and 1 <= len(events.model.rows))
    assert len(events.model.rows) <= 4
    QtWidgets.QApplication.processEvents()  # the window's next turns: the views of the events found are made
    QtWidgets.QApplication.processEvents()
    made: list[int] = []
    for lane in lanes:
        labeller = lane.boxes.labeller
        lane.boxes.labeller = lambda i, f=labeller: made.append(i) or f(i)
    measured = set(lane_words(tl.plot.viewport().font())._known)
    k = events.model.rows.tolist().index(frame)
    rect = events.view.visualRect(events.model.index(k, 5))
    qtbot.mouseClick(events.view.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())
    tl.plot.grab()  # the frame the click asked for
    labels = [text for item in tl.items if item.lane in lanes for _, text in item.written]
    assert events.events.text(frame) in labels or any(text.startswith(words) for text in labels)
    assert made == []
    assert set(labels) <= measured  # measured in the font the lanes are written in


def test_a_search_finding_few_events_has_their_views_samples_read_ahead(window: MainWindow, qtbot, monkeypatch
                                                                        ) -> None:
    """While the user reads a search's few results the raw samples their views draw are read on the read-ahead
    thread: the click's frame reads no sample from the file in the window's thread."""
    import threading

    from nicrig.gui import timeline
    from nicrig.gui.overview import Kept, SampleReader
    from PySide6.QtTest import QTest

    main, read_here, read_ahead = threading.main_thread(), [], []
    for name in ("packed", "times"):
        original = getattr(SampleReader, name)

        def counted(reader, s, e, *args, original=original):
            (read_here if threading.current_thread() is main else read_ahead).append((s, e))
            return original(reader, s, e, *args)

        monkeypatch.setattr(SampleReader, name, counted)
    events, tl, doc = window.events, window.timeline, window.doc
    monkeypatch.setattr(timeline, "SAMPLES_WAIT_S", 60.0)  # however slow this machine reads them
    tl.zoom_all()
    for data in doc.data.values():  # nothing kept yet: as far into a long capture
        data.cache._packed = Kept(data.cache._keep)
        data.cache._times = Kept(data.cache._keep)
    frame = next(i for i in range(len(events.events)) if events.events.text(i).startswith("UDP"))
    events.search.setFocus()
    events.search.selectAll()
    QTest.keyClicks(events.search, " ".join(events.events.text(frame).split()[:4]))
    QTest.keyClick(events.search, QtCore.Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: not events.waiting and 1 <= len(events.model.rows) <= 4)
    QtWidgets.QApplication.processEvents()  # the views made, once their samples are read ahead
    for data in doc.data.values():
        data.cache.ahead.wait()
    assert read_ahead
    read_here.clear()
    from nicrig.gui.lanes import SourceData

    columns = SourceData.columns
    drawn_here: list[float] = []
    monkeypatch.setattr(SourceData, "columns", lambda data, *a: drawn_here.append(a[0]) or columns(data, *a))
    k = events.model.rows.tolist().index(frame)
    rect = events.view.visualRect(events.model.index(k, 5))
    qtbot.mouseClick(events.view.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())
    tl.plot.grab()  # the frame the click asked for
    assert drawn_here == []  # its logic lanes drawn before the click
    v0, v1 = tl.view_range()
    assert v0 < events.events.t_ns[frame] and events.events.t_end_ns[frame] < v1
    assert any(d.settled() and d._last is not None and d._last[0][3] == -1 for d in doc.data.values())  # drawn raw
    assert read_here == []


def test_a_view_has_its_decoded_rows_read_ahead_for_their_labels(window: MainWindow, monkeypatch) -> None:
    """Redrawn, a view has the stored chunks of the decoded rows in it read on the read-ahead thread: a zoom in
    names its boxes from rows in memory, the rows HDF5 reads. A view whose rows lie in more chunks than
    ``READ_AHEAD_TABLE_CHUNKS`` has none read ahead (they wait for a view that names them)."""
    import threading

    from nicrig.gui import document, overview
    from nicrig.gui.chunks import StoredChunks

    reads: list[tuple[int, str]] = []
    original = StoredChunks.rows
    doc, tl = window.doc, window.timeline
    table = next(t for t in doc.decoded.values() if t.decoder == "pci" and len(t))

    def counted(self, k: int) -> np.ndarray:
        if self is table._chunks:  # the other tables' read-ahead runs beside it
            reads.append((k, threading.current_thread().name))
        return original(self, k)

    monkeypatch.setattr(StoredChunks, "rows", counted)
    lane = table.arrays[0]
    mid = len(lane.t_ns) // 2
    for limit, expect_read in ((0, False), (document.READ_AHEAD_TABLE_CHUNKS, True)):
        monkeypatch.setattr(document, "READ_AHEAD_TABLE_CHUNKS", limit)
        for t in doc.decoded.values():
            t._kept = overview.Kept(document.KEPT_TABLE_CHUNKS)  # nothing kept yet
        reads.clear()
        shift = doc.session.offset(table.source)
        tl.zoom_to(float(lane.t_ns[mid - 3]) + shift, float(lane.t_end_ns[mid + 3]) + shift)
        tl.redraw()  # the same view the second time: redrawn as a pan back to it would
        for t in doc.decoded.values():
            t.ahead.wait()
        assert bool(reads) == expect_read
        assert all(name.startswith("nicrig-read-ahead") for _, name in reads)
    v0, v1 = tl.view_range()
    first, last = table._rows_in(v0 - shift, v1 - shift)
    reads.clear()
    stored = table.ds[first:last + 1]  # through HDF5's own filters
    got = np.array([table.row(i) for i in range(first, last + 1)], dtype=stored.dtype)
    assert reads == []  # every row from memory
    np.testing.assert_array_equal(got, stored)


@contextlib.contextmanager
def small_table(tmp_path: Path) -> Iterator[Any]:
    """A decoded table of 100 rows, 4 a stored chunk, as the view reads it: one lane of boxes of 5 ns every 10 ns."""
    import h5py
    from nicrig.gui import document, lanes
    from nicrig.h5file import STORAGE

    t = np.arange(0.0, 1000.0, 10.0)
    with h5py.File(tmp_path / "t.h5", "w") as f:
        ds = f.create_dataset("rows", data=np.zeros(len(t), [("t_ns", "<i8")]), chunks=(4,), **STORAGE)
        table = document.DecodedTable("decoded/s/irq", "s", "irq", ds, tmp_path / "t.h5")
        table.arrays = [lanes._lane(t, t + 5, np.zeros(len(t), np.int8), np.zeros(len(t), "S12"))]
        yield table


def test_a_wheel_turn_in_reads_ahead_the_rows_of_the_view_it_expects_next(tmp_path: Path, monkeypatch) -> None:
    """A redraw after a wheel turn in reads ahead the stored chunks of the rows the next turn alike shows, not
    those of the whole view (most of which it does not show, and which every reader's sample blocks queued after
    them on the one read-ahead thread would wait for); without a next view expected, the view's own."""
    with small_table(tmp_path) as table:
        started: list[list[int]] = []
        monkeypatch.setattr(table.ahead, "replace", lambda work, chunks: started.append(chunks))
        table.read_ahead(0.0, 1000.0, then=(400.0, 490.0))  # rows 40 to 48
        table.read_ahead(0.0, 1000.0)
        assert started == [[10, 11, 12], list(range(25))]


def test_rows_read_ahead_for_a_view_no_longer_coming_give_way_to_the_next_views(tmp_path: Path, monkeypatch
                                                                                 ) -> None:
    """A wheel turn asking for the rows of another view than those still being read ahead has the earlier reading
    stop at its next chunk and its own read instead: every reader's pieces queued behind a view passed by (a
    source's sample blocks for the first view drawn from raw samples) would wait for it. Asked again for the same
    rows, the reading goes on."""
    import threading

    with small_table(tmp_path) as table:
        read, begun, go = [], threading.Event(), threading.Event()
        original = table._chunks.rows

        def held(k: int) -> np.ndarray:
            read.append(k)
            begun.set()
            go.wait()  # the first chunk is being read while the next turns come
            return original(k)

        monkeypatch.setattr(table._chunks, "rows", held)
        table.read_ahead(0.0, 1000.0, then=(400.0, 490.0))  # chunks 10 to 12
        begun.wait()
        table.read_ahead(0.0, 1000.0, then=(400.0, 490.0))  # the same rows: read on
        table.read_ahead(0.0, 1000.0, then=(800.0, 890.0))  # chunks 20 to 22
        go.set()
        table.ahead.wait()
        assert read == [10, 20, 21, 22]
        table.ahead.stop()


def test_warming_a_view_lays_out_exactly_the_words_its_frame_writes(window: MainWindow) -> None:
    """Made ready for a jump, a view's decoded lanes have laid out the labels the painter then writes there and no
    others: one choice of each box's words serves both (inside a box up to the next, beside it, a group's)."""
    from nicrig.gui.timeline import around, lane_words

    doc, tl = window.doc, window.timeline
    table = next(t for t in doc.decoded.values() if t.decoder == "pci" and len(t))
    lane = table.arrays[0]
    mid = len(lane.t_ns) // 2
    shift = doc.session.offset(table.source)
    # a few transactions named, then the whole capture (within the view's limits): crowded
    for first, last, margin in ((mid - 3, mid + 3, 0.25), (0, len(lane.t_ns) - 1, 0.02)):
        t0, t1 = around(float(lane.t_ns[first]) + shift, float(lane.t_end_ns[last]) + shift, margin)
        fm = lane_words(tl.plot.viewport().font())
        fm._laid.clear()
        tl.warm(t0, t1)
        laid = set(fm._laid)
        tl.vb.setXRange(t0, t1, padding=0)
        tl.plot.grab()
        written = {text for item in tl.items if item.lane.kind == "decoded" for _, text in item.written}
        assert written
        assert laid == written


def _wheel(widget: QtWidgets.QWidget, x: float, notches: float) -> None:
    """A wheel turn of ``notches`` (positive: away from the user) at ``x`` pixels of ``widget``, as Qt sends it."""
    pos = QtCore.QPointF(x, widget.height() / 2)
    ev = QtGui.QWheelEvent(pos, widget.mapToGlobal(pos), QtCore.QPoint(0, 0), QtCore.QPoint(0, round(120 * notches)),
                           QtCore.Qt.MouseButton.NoButton, QtCore.Qt.KeyboardModifier.NoModifier,
                           QtCore.Qt.ScrollPhase.NoScrollPhase, False)
    QtWidgets.QApplication.sendEvent(widget, ev)


def test_a_wheel_turn_in_has_the_next_turns_words_made_before_it(window: MainWindow, qtbot) -> None:
    """After a wheel turn zooming in, the window makes what the same turn again would show: the view predicted is
    the one that turn gives, and the words its frame writes (longer ones, its boxes being wider) were chosen and
    laid out once the frame before was painted, not within its own."""
    from nicrig.gui.timeline import lane_words

    doc, tl = window.doc, window.timeline
    table = next(t for t in doc.decoded.values() if t.decoder == "pci" and len(t))
    lane = table.arrays[0]
    mid = len(lane.t_ns) // 2
    shift = doc.session.offset(table.source)
    t_mid = (float(lane.t_ns[mid]) + float(lane.t_end_ns[mid])) / 2 + shift
    width = float(lane.t_end_ns[mid] - lane.t_ns[mid])
    tl.zoom_to(t_mid - 8 * width, t_mid + 8 * width)
    vp = tl.plot.viewport()
    x = tl.plot.mapFromScene(tl.vb.mapViewToScene(QtCore.QPointF(t_mid, 0))).x()
    _wheel(vp, x, 2)
    t0, t1 = tl.view_range()
    expected = tl._next_view
    assert expected is not None and expected[1] - expected[0] < t1 - t0
    qtbot.waitUntil(lambda: tl._next_view is None)  # the frame, then the idle turns after it
    laid = set(lane_words(vp.font())._laid)
    before = {text for item in tl.items if item.lane.kind == "decoded" for _, text in item.written}
    _wheel(vp, x, 2)
    tl.plot.grab()
    np.testing.assert_allclose(tl.view_range(), expected, rtol=0, atol=1e-6 * (t1 - t0))
    labels = {text for item in tl.items if item.lane.kind == "decoded" for _, text in item.written}
    assert labels - before  # words the turn before did not write
    assert labels <= laid
    # a drag after the turns says nothing of the next view: none is made
    from PySide6.QtTest import QTest

    left, y = QtCore.Qt.MouseButton.LeftButton, vp.height() // 2
    QTest.mousePress(vp, left, QtCore.Qt.KeyboardModifier.NoModifier, QtCore.QPoint(vp.width() // 2, y))
    QTest.mouseMove(vp, QtCore.QPoint(vp.width() // 2 + 120, y))
    QTest.mouseRelease(vp, left, QtCore.Qt.KeyboardModifier.NoModifier, QtCore.QPoint(vp.width() // 2 + 120, y))
    assert tl.view_range()[0] < expected[0]
    assert tl._next_view is None
