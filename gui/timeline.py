"""The timeline widget: every source's lanes on one time axis, two cursors, named markers, deskew by drag.

pyqtgraph gives the view (pan and zoom on x, the time axis with SI units) and
the cursor and marker lines; each lane is one graphics item that paints what
``lanes`` computed for the current window, redrawn when the window changes.
Shift-drag on a lane moves its whole source in time (deskew); the offset is
kept in the session and can also be typed in the lanes panel.
"""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from nicrig.gui.document import Document
from nicrig.gui.lanes import (
    STYLE_NAMES,
    STYLES,
    BoxDrawing,
    Lane,
    LogicDrawing,
    box_drawing,
    format_hz,
    format_ns,
    logic_drawing,
    vector_boxes,
    vector_changes,
)
from nicrig.gui.overview import RAW_SAMPLES_PER_PIXEL
from PySide6 import QtCore, QtGui, QtWidgets

#: Pixels assumed for the first view's width (before the window has its final size).
FIRST_VIEW_PIXELS = 1000
CURSOR_COLOURS = ("#e8590c", "#1c7ed6")
#: Width (px) the cursor readout keeps, whatever its text.
READOUT_WIDTH = 440
MARKER_COLOUR = "#555555"
_BRUSHES = {name: QtGui.QBrush(QtGui.QColor(fill)) for name, (fill, _) in STYLES.items()}
_TEXT = {name: QtGui.QColor(text) for name, (_, text) in STYLES.items()}


def _cosmetic(colour: str, width: float = 1.0) -> QtGui.QPen:
    pen = QtGui.QPen(QtGui.QColor(colour))
    pen.setCosmetic(True)
    pen.setWidthF(width)
    return pen


_OUTLINES = {name: _cosmetic(fill) for name, (fill, _) in STYLES.items()}


def rects_path(x0: np.ndarray, x1: np.ndarray, top: np.ndarray | float, bottom: np.ndarray | float
               ) -> QtGui.QPainterPath:
    """Rectangles ``[x0, x1] x [top, bottom]`` as one path (a closed outline each): one painter call for all."""
    n = len(x0)
    x = np.column_stack([x0, x1, x1, x0, x0]).ravel()
    y = np.column_stack([np.broadcast_to(top, n), np.broadcast_to(top, n), np.broadcast_to(bottom, n),
                         np.broadcast_to(bottom, n), np.broadcast_to(top, n)]).ravel()
    connect = np.tile(np.array([0, 1, 1, 1, 1], np.int32), n)
    return pg.arrayToQPath(x, y, connect=connect, finiteCheck=False)


class LaneItem(pg.GraphicsObject):
    """Paints one lane's drawing in the band ``[y0, y0 + h)`` of the view."""

    LINE = _cosmetic("#1b5e20", 1.3)
    BUSY = QtGui.QBrush(QtGui.QColor(27, 94, 32, 110))
    PENDING = QtGui.QBrush(QtGui.QColor("#bbbbbb"), QtCore.Qt.BrushStyle.BDiagPattern)
    OUTLINE = _cosmetic("#222222", 0.8)

    def __init__(self, lane: Lane, y0: float, h: float):
        super().__init__()
        self.lane, self.y0, self.h = lane, y0, h
        self.drawing: LogicDrawing | BoxDrawing | None = None
        self.header = ""
        self.view = (0.0, 1.0)

    def boundingRect(self) -> QtCore.QRectF:
        return QtCore.QRectF(self.view[0], self.y0, max(self.view[1] - self.view[0], 1e-9), self.h)

    def set_drawing(self, drawing: LogicDrawing | BoxDrawing | None, view: tuple[float, float]) -> None:
        self.prepareGeometryChange()
        self.drawing, self.view = drawing, view
        self.update()

    def paint(self, p: QtGui.QPainter, *args: object) -> None:
        if self.lane.kind == "header":
            p.fillRect(self.boundingRect(), QtGui.QColor("#e9edf2"))
            self._text_at_left(p, self.header)
        elif isinstance(self.drawing, LogicDrawing):
            self._paint_logic(p, self.drawing)
        elif isinstance(self.drawing, BoxDrawing):
            self._paint_boxes(p, self.drawing)
        elif self.lane.kind == "decoded":  # its boxes are still being prepared
            self._paint_pending(p, self.view[0])

    def _text_at_left(self, p: QtGui.QPainter, text: str) -> None:
        tr = p.transform()
        x = tr.m11() * self.view[0] + tr.dx() + 6
        y0, y1 = tr.m22() * self.y0 + tr.dy(), tr.m22() * (self.y0 + self.h) + tr.dy()
        p.resetTransform()
        font = p.font()
        font.setBold(True)
        p.setFont(font)
        p.setPen(QtGui.QColor("#1d2b3a"))
        p.drawText(QtCore.QRectF(x, min(y0, y1), 2000, abs(y1 - y0)), QtCore.Qt.AlignmentFlag.AlignVCenter, text)
        p.setTransform(tr)

    def _paint_logic(self, p: QtGui.QPainter, d: LogicDrawing) -> None:
        hi, lo = self.y0 + 0.2 * self.h, self.y0 + 0.8 * self.h
        const = d.state != 2
        y = np.where(d.state == 1, hi, lo)
        # horizontal runs, then a vertical mark wherever the level changes between held runs
        xs = [np.column_stack([d.x0[const], d.x1[const]]).ravel()]
        ys = [np.repeat(y[const], 2)]
        change = np.flatnonzero(const[:-1] & const[1:] & (d.state[:-1] != d.state[1:]))
        xs.append(np.repeat(d.x1[change], 2))
        ys.append(np.tile([hi, lo], len(change)))
        x, yy = np.concatenate(xs), np.concatenate(ys)
        if len(x):
            p.setPen(self.LINE)
            p.drawPath(pg.arrayToQPath(x, yy, connect="pairs"))
        busy = ~const
        if busy.any():
            p.setPen(self.LINE)
            p.setBrush(self.BUSY)
            p.drawPath(rects_path(d.x0[busy], d.x1[busy], hi, lo))
        self._paint_pending(p, d.covered_x)

    def _paint_pending(self, p: QtGui.QPainter, covered_x: float) -> None:
        if covered_x >= self.view[1]:
            return
        x0 = max(covered_x, self.view[0])
        p.setPen(QtCore.Qt.PenStyle.NoPen)
        p.setBrush(self.PENDING)
        p.drawRect(QtCore.QRectF(x0, self.y0, self.view[1] - x0, self.h))

    def _bands(self, d: BoxDrawing) -> tuple[np.ndarray, np.ndarray]:
        """Top and bottom (view units) of each wide box: one band, or two alternating rows for callouts."""
        if not self.lane.callouts:
            n = len(d.rows)
            return np.full(n, self.y0 + 0.12 * self.h), np.full(n, self.y0 + 0.88 * self.h)
        row = d.rows % 2
        top = self.y0 + 0.06 * self.h + row * 0.47 * self.h
        return top, top + 0.41 * self.h

    def _paint_boxes(self, p: QtGui.QPainter, d: BoxDrawing) -> None:
        top, bottom = self._bands(d)
        y0, y1 = self.y0 + 0.12 * self.h, self.y0 + 0.88 * self.h
        for s in np.unique(d.dense_style):
            sel = d.dense_style == s
            # a dense span is outlined in its own colour, so even a sliver shows it
            p.setPen(_OUTLINES[STYLE_NAMES[int(s)]])
            p.setBrush(_BRUSHES[STYLE_NAMES[int(s)]])
            p.drawPath(rects_path(d.dense_x0[sel], d.dense_x1[sel], y0, y1))
        # wide boxes over the dense spans they may share pixels with, one path per style
        p.setPen(self.OUTLINE)
        for s in np.unique(d.style):
            sel = d.style == s
            p.setBrush(_BRUSHES[STYLE_NAMES[int(s)]])
            p.drawPath(rects_path(d.x0[sel], d.x1[sel], top[sel], bottom[sel]))
        self._paint_labels(p, d, top, bottom)

    def _paint_labels(self, p: QtGui.QPainter, d: BoxDrawing, top: np.ndarray, bottom: np.ndarray) -> None:
        if not len(d.rows) or self.lane.boxes is None:
            return
        tr = p.transform()
        sx, dx, sy, dy = tr.m11(), tr.dx(), tr.m22(), tr.dy()
        view_px0, view_px1 = sx * self.view[0] + dx, sx * self.view[1] + dx
        p.resetTransform()
        fm = QtGui.QFontMetrics(p.font())
        rows = d.rows % 2 if self.lane.callouts else np.zeros(len(d.rows), np.int64)
        for i, (row, a, b, s) in enumerate(zip(d.rows, d.x0, d.x1, d.style)):
            left = max(sx * a + dx, view_px0)
            right = min(sx * b + dx, view_px1)
            ya, yb = sorted((sy * top[i] + dy, sy * bottom[i] + dy))
            labels = self.lane.boxes.labels(row)
            room = right - left - 6
            # a phase is better named beside its box than abbreviated inside it
            inside = labels[:2] if self.lane.callouts else labels
            text = next((t for t in inside if fm.horizontalAdvance(t) <= room), None)
            colour = _TEXT[STYLE_NAMES[int(s)]]
            if text is None and self.lane.callouts:
                # beside the box, up to the next box of the same row
                later = np.flatnonzero((rows == rows[i]) & (np.arange(len(rows)) > i))
                limit = sx * d.x0[later[0]] + dx if len(later) else view_px1
                left, room = right + 2, min(limit, view_px1) - right - 6
                text = next((t for t in labels if fm.horizontalAdvance(t) <= room), None)
                colour = QtGui.QColor("#111111")
            if text is None:
                continue
            p.setPen(colour)
            p.drawText(QtCore.QRectF(left + 3, ya, max(room, 1), yb - ya), QtCore.Qt.AlignmentFlag.AlignVCenter, text)
        p.setTransform(tr)


class TimelinePlot(pg.PlotWidget):
    """The plot, counting the frames it paints (what a script or test waits for after an input)."""

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)
        self.frames = 0

    def paintEvent(self, ev: QtGui.QPaintEvent) -> None:
        super().paintEvent(ev)
        self.frames += 1


class TimelineViewBox(pg.ViewBox):
    """Pan and zoom in time only; Shift-drag on a lane moves its source (deskew)."""

    def __init__(self, timeline: Timeline):
        super().__init__(enableMenu=False)
        self.timeline = timeline
        self._deskew: tuple[str, float, float] | None = None

    def mouseDragEvent(self, ev, axis=None):
        mods = ev.modifiers()
        if ev.button() == QtCore.Qt.MouseButton.LeftButton and mods & QtCore.Qt.KeyboardModifier.ShiftModifier:
            ev.accept()
            here = self.mapSceneToView(ev.scenePos())
            if ev.isStart() or self._deskew is None:
                start = self.mapSceneToView(ev.buttonDownScenePos())
                lane = self.timeline.lane_at(start.y())
                if lane is None:
                    return
                src = lane.source
                self._deskew = (src, self.timeline.doc.session.offset(src), start.x())
            src, off0, x0 = self._deskew
            self.timeline.set_offset(src, off0 + here.x() - x0)
            if ev.isFinish():
                self._deskew = None
            return
        super().mouseDragEvent(ev, axis)


class Timeline(QtWidgets.QWidget):
    """Lanes of every source on one shared time axis (ns, zero at the trigger)."""

    cursorsChanged = QtCore.Signal(float, float)
    viewChanged = QtCore.Signal(float, float)
    offsetChanged = QtCore.Signal(str, float)
    markersChanged = QtCore.Signal()

    def __init__(self, doc: Document, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.readout = QtWidgets.QLabel()
        self.readout.setTextInteractionFlags(QtCore.Qt.TextInteractionFlag.TextSelectableByMouse)
        # the readout's length follows the cursors: the window's width must not (a zoom would widen it)
        self.readout.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.readout.setMinimumWidth(READOUT_WIDTH)
        self.vb = TimelineViewBox(self)
        self.vb.invertY(True)
        self.vb.setMouseEnabled(x=True, y=False)
        self.vb.disableAutoRange()
        self.plot = TimelinePlot(viewBox=self.vb, background="w")
        pi = self.plot.getPlotItem()
        pi.hideButtons()
        pi.showGrid(x=True, y=False, alpha=0.15)
        bottom = pi.getAxis("bottom")
        bottom.setLabel("time from trigger", units="s")
        bottom.setScale(1e-9)
        bottom.enableAutoSIPrefix(True)
        for ax in ("bottom", "left"):
            pi.getAxis(ax).setTextPen("#222222")
            pi.getAxis(ax).setPen("#888888")
        pi.getAxis("left").setWidth(150)
        # the lane names change with the lanes, not with zoom or pan: painted once into a pixmap and kept
        pi.getAxis("left").setCacheMode(QtWidgets.QGraphicsItem.CacheMode.DeviceCoordinateCache)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.readout)
        layout.addWidget(self.plot, 1)
        self.items: list[LaneItem] = []
        self.cursors = [pg.InfiniteLine(0, movable=True, pen=pg.mkPen(c, width=1.5), label=n,
                                        labelOpts={"position": 0.985, "color": c, "fill": "#ffffffd0"})
                        for n, c in zip("AB", CURSOR_COLOURS)]
        for line in self.cursors:
            line.setZValue(20)
            self.vb.addItem(line, ignoreBounds=True)
            line.sigPositionChanged.connect(self._cursors_moved)
        self.marker_lines: list[pg.InfiniteLine] = []
        self.vb.sigXRangeChanged.connect(lambda *_: self.redraw())
        self.vb.sigResized.connect(lambda *_: self.redraw())
        self.layout_lanes()
        self._init_view()

    # -- geometry ----------------------------------------------------------------------------
    def _init_view(self) -> None:
        s = self.doc.session
        lo, hi = self.doc.extent_ns()
        span = max(hi - lo, 1.0)
        self.vb.setLimits(xMin=lo - 0.05 * span, xMax=hi + 0.05 * span, minXRange=1.0)
        t0, t1 = s.view_ns or self.first_view()
        a, b = s.cursors_ns or (t0 + 0.25 * (t1 - t0), t0 + 0.5 * (t1 - t0))
        for line, pos in zip(self.cursors, (a, b)):
            line.blockSignals(True)
            line.setValue(pos)
            line.blockSignals(False)
        self.set_markers(s.markers)
        self.vb.setXRange(t0, t1, padding=0)
        self._cursors_moved()

    def first_view(self) -> tuple[float, float]:
        """The whole capture when every source can be drawn at once (small, or its overview cached);
        otherwise the stretch from the start that raw samples draw, while the overview builds. A traced udpmon
        run without bus sources: its first packets (:meth:`Document.packets_view_ns`)."""
        lo, hi = self.doc.extent_ns()
        packets = None if self.doc.data else self.doc.packets_view_ns()
        if packets is not None:  # a traced udpmon run: its first packets, with the hosts' events around them
            return packets
        span = hi - lo
        for data in self.doc.data.values():
            if data.pyramid.complete or data.source.num_samples < 2:
                continue
            per_ns = (data.source.num_samples - 1) / max((data.end_ps - data.first_ps) / 1000, 1e-9)
            span = min(span, RAW_SAMPLES_PER_PIXEL * FIRST_VIEW_PIXELS / per_ns)
        return lo, lo + span

    def layout_lanes(self) -> None:
        """Place the visible lanes top to bottom and name them on the left axis."""
        for item in self.items:
            self.vb.removeItem(item)
        self.items = []
        y = 0.0
        ticks = []
        for lane in self.doc.visible_lanes():
            item = LaneItem(lane, y, lane.height)
            self.vb.addItem(item, ignoreBounds=True)
            self.items.append(item)
            ticks.append((y + lane.height / 2, "" if lane.kind == "header" else lane.title))
            y += lane.height
        self.total_height = max(y, 1.0)
        self.plot.getPlotItem().getAxis("left").setTicks([ticks, []])
        self.vb.setLimits(yMin=0, yMax=self.total_height)
        self.vb.setYRange(0, self.total_height, padding=0)
        self.plot.setMinimumHeight(int(min(self.total_height, 12) * 14) + 60)
        self.redraw()

    def lane_at(self, y: float) -> Lane | None:
        for item in self.items:
            if item.y0 <= y < item.y0 + item.h:
                return item.lane
        return None

    def view_range(self) -> tuple[float, float]:
        t0, t1 = self.vb.viewRange()[0]
        return float(t0), float(t1)

    def pixels(self) -> int:
        return max(int(self.vb.width()), 1)

    # -- drawing -----------------------------------------------------------------------------
    def redraw(self) -> None:
        """Recompute every visible lane for the current window (what zoom and pan cost)."""
        if not self.items or not self.isEnabled():  # disabled while a writer has the file
            return
        t0, t1 = self.view_range()
        px = self.pixels()
        for item in self.items:
            item.set_drawing(self._drawing(item, t0, t1, px), (t0, t1))
        self.viewChanged.emit(t0, t1)

    def _drawing(self, item: LaneItem, t0: float, t1: float, px: int) -> LogicDrawing | BoxDrawing | None:
        lane = item.lane
        shift = self.doc.session.offset(lane.source)
        if lane.kind == "header" and lane.source not in self.doc.data:  # a host or udpmon's packets
            item.header = f"{lane.title}   deskew {format_ns(shift)}"
            return None
        if lane.kind == "header":
            src = self.doc.data[lane.source].source
            rate = f", {format_hz(src.samplerate_hz)}" if src.samplerate_hz else ""
            item.header = (f"{lane.source}   {src.num_samples:,} samples ({src.mode}{rate}), "
                           f"deskew {format_ns(shift)}")
            return None
        if lane.kind == "decoded":
            if lane.boxes is None:  # still being prepared
                return None
            return box_drawing(lane.boxes, t0, t1, px, shift, min_px=0.0 if lane.callouts else 3.0)
        data = self.doc.data[lane.source]
        f0, f1 = (t0 - shift) * 1000.0, (t1 - shift) * 1000.0
        if lane.kind == "vector" and data.estimated_samples(f0, f1) <= px * 2:
            return box_drawing(vector_boxes(data, lane.bits, f0, f1), t0, t1, px, shift)
        cols = data.columns(f0, f1, px)
        if lane.kind == "vector":
            # too many values to show: draw where any bit of the vector changes
            return logic_drawing(vector_changes(cols, lane.bits), 0, shift)
        return logic_drawing(cols, lane.bit, shift)

    # -- cursors and markers -------------------------------------------------------------------
    def cursor_positions(self) -> tuple[float, float]:
        return float(self.cursors[0].value()), float(self.cursors[1].value())

    def set_cursors(self, a: float, b: float) -> None:
        for line, pos in zip(self.cursors, (a, b)):
            line.blockSignals(True)
            line.setValue(pos)
            line.blockSignals(False)
        self._cursors_moved()

    def _cursors_moved(self) -> None:
        a, b = self.cursor_positions()
        dt = b - a
        inv = f"1/Δt = {format_hz(1e9 / abs(dt))}" if dt else "1/Δt = -"
        self.readout.setText(f"  A = {format_ns(a, 7)}    B = {format_ns(b, 7)}    "
                             f"<b>Δt = B - A = {format_ns(dt, 6)}</b>    {inv}")
        self.doc.session.cursors_ns = (a, b)
        self.cursorsChanged.emit(a, b)

    def set_markers(self, markers: list[tuple[str, float]]) -> None:
        for line in self.marker_lines:
            self.vb.removeItem(line)
        self.marker_lines = []
        self.doc.session.markers = list(markers)
        for i, (name, t) in enumerate(markers):
            line = pg.InfiniteLine(t, movable=True, pen=pg.mkPen(MARKER_COLOUR, width=1, style=QtCore.Qt.PenStyle.DashLine),
                                   label=name, labelOpts={"position": 0.04 + 0.045 * (i % 4), "color": "#222222",
                                                          "fill": "#fff8dcE0", "anchors": [(0, 0.5), (0, 0.5)]})
            line.setZValue(15)
            line.sigPositionChangeFinished.connect(self._marker_moved)
            self.vb.addItem(line, ignoreBounds=True)
            self.marker_lines.append(line)
        self.markersChanged.emit()

    def _marker_moved(self) -> None:
        self.doc.session.markers = [(name, float(line.value()))
                                    for (name, _), line in zip(self.doc.session.markers, self.marker_lines)]
        self.markersChanged.emit()

    def add_marker(self, name: str, t: float) -> None:
        self.set_markers(self.doc.session.markers + [(name, t)])

    # -- view --------------------------------------------------------------------------------
    def zoom_to(self, t0: float, t1: float, margin: float = 0.25) -> None:
        span = max(t1 - t0, 10.0)
        self.vb.setXRange(t0 - margin * span, t1 + margin * span, padding=0)

    def zoom_all(self) -> None:
        lo, hi = self.doc.extent_ns()
        self.vb.setXRange(lo, hi, padding=0)

    def zoom_by(self, factor: float) -> None:
        """Zoom about the middle of the view: ``factor`` > 1 shows that many times less time, < 1 more."""
        t0, t1 = self.view_range()
        mid, half = (t0 + t1) / 2, (t1 - t0) / (2 * factor)
        self.vb.setXRange(mid - half, mid + half, padding=0)

    def pan_by(self, fraction: float) -> None:
        """Move the view by ``fraction`` of its width: negative to earlier times, positive to later."""
        t0, t1 = self.view_range()
        step = fraction * (t1 - t0)
        self.vb.setXRange(t0 + step, t1 + step, padding=0)

    def set_offset(self, source: str, offset_ns: float) -> None:
        self.doc.session.offsets_ns[source] = float(offset_ns)
        self.redraw()
        self.offsetChanged.emit(source, float(offset_ns))
