"""The timeline widget: every source's lanes on one time axis, two cursors, named markers, deskew by drag.

pyqtgraph gives the view (pan and zoom on x, the time axis with SI units) and
the cursor and marker lines. Each lane holds what ``lanes`` computed for the
current window (recomputed when the window changes); one graphics item paints
them all, each kind of line or box of every lane in one painter call from
arrays, so a frame costs a few dozen calls into Qt whatever the lanes hold.
Shift-drag on a lane moves its whole source in time (deskew); the offset is
kept in the session and can also be typed in the lanes panel.
"""

from __future__ import annotations

import bisect
import concurrent.futures
import math
from collections import Counter

import numpy as np
import pyqtgraph as pg
import shiboken6
from nicrig.gui import _levels
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
    kept,
    logic_drawings,
    vector_boxes,
    vector_changes,
)
from nicrig.gui.overview import RAW_SAMPLES_PER_PIXEL
from PySide6 import QtCore, QtGui, QtWidgets

#: Pixels assumed for the first view's width (before the window has its final size).
FIRST_VIEW_PIXELS = 1000
CURSOR_COLOURS = ("#e8590c", "#1c7ed6")
#: The view's background, under the lanes.
BACKGROUND = "#ffffff"
#: A pause (ms) after the last frame long enough to make the words of the view the next wheel turn shows: a wheel
#: spun faster is not held up by them.
PAUSE_MS = 30
#: Views whose drawings are kept made ahead (a search's few events).
MADE_VIEWS = 8
#: The longest a view made ahead waits for its raw samples being read ahead (s); the window's thread sleeps meanwhile.
SAMPLES_WAIT_S = 0.02
#: Width (px) the cursor readout keeps, whatever its text.
READOUT_WIDTH = 440
MARKER_COLOUR = "#555555"
#: Pixels beyond its name's width that a cursor or marker outside the view is kept in the view box within.
LINE_NAME_MARGIN = 40
#: Height (in lane heights) of the band below the lanes that holds the cursors' names.
CURSOR_BAND = 0.9
_BRUSHES = {name: QtGui.QBrush(QtGui.QColor(fill)) for name, (fill, _) in STYLES.items()}
_TEXT = {name: QtGui.QColor(text) for name, (_, text) in STYLES.items()}


def over(colour: QtGui.QColor, alpha: float, background: QtGui.QColor) -> QtGui.QColor:
    """``colour`` at opacity ``alpha`` (0 to 1) laid over ``background``, as one opaque colour."""
    mix = [round(b + alpha * (c - b)) for c, b in zip(colour.getRgb()[:3], background.getRgb()[:3])]
    return QtGui.QColor(*mix)


def _cosmetic(colour: str, width: float = 1.0) -> QtGui.QPen:
    pen = QtGui.QPen(QtGui.QColor(colour))
    pen.setCosmetic(True)
    pen.setWidthF(width)
    return pen


def draw_rects(p: QtGui.QPainter, x0: np.ndarray, x1: np.ndarray, top: np.ndarray | float,
               bottom: np.ndarray | float) -> None:
    """Rectangles ``[x0, x1] x [top, bottom]`` in one painter call, from one array laid out as QRectF's."""
    n = len(x0)
    if n:
        r = np.empty((n, 4))
        r[:, 0], r[:, 1], r[:, 2], r[:, 3] = x0, top, np.subtract(x1, x0), np.subtract(bottom, top)
        paint_rects(p, r)


def paint_rects(p: QtGui.QPainter, r: np.ndarray) -> None:
    """Rectangles laid out as QRectF's (rows of x, y, width, height: float64, C order) in one painter call."""
    if len(r):
        # QPainter::drawRects(const QRectF *, int): the array is read in place (a path of outlines is filled and
        # stroked an order of magnitude slower by Qt's raster engine)
        p.drawRects(shiboken6.wrapInstance(r.ctypes.data, QtCore.QRectF), len(r))


def paint_pixels(p: QtGui.QPainter, r: np.ndarray) -> None:
    """Rectangles of whole device pixels laid out as QRect's (rows of left, top, right, bottom, both edges included:
    int32, C order) in one painter call, filled with the painter's brush (its transform reset)."""
    if len(r):
        p.drawRects(shiboken6.wrapInstance(r.ctypes.data, QtCore.QRect), len(r))


def pixel_spans(to_px: QtGui.QTransform, x0: np.ndarray, x1: np.ndarray, y0: np.ndarray, y1: np.ndarray
                ) -> np.ndarray:
    """The device pixels an outlined rectangle ``[x0, x1] x [y0, y1]`` (item coordinates, ``to_px`` a scale and a
    shift to device pixels) covers with a 1-px cosmetic pen and its fill: from the pixel holding its left (top)
    edge to the one holding its right (bottom) edge, both included, as QRect's (:func:`paint_pixels`). Filling
    those paints what the outline and fill would, at a small part of the raster engine's cost: it strokes each
    rectangle's four sides alone, and fills a rectangle of fractional pixels by a slower path than whole ones."""
    left, right = pixel_edges(to_px.m11(), to_px.dx(), x0, x1)
    top, bottom = pixel_edges(to_px.m22(), to_px.dy(), y0, y1)
    r = np.empty((len(left), 4), np.int32)
    # beyond the device by far is clipped away wherever: kept within int32
    r[:, 0], r[:, 1], r[:, 2], r[:, 3] = (np.clip(v, -(1 << 30), 1 << 30) for v in (left, top, right - 1, bottom - 1))
    return r


def pixel_edges(scale: float, shift: float, v0: np.ndarray, v1: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Along one axis (``scale * v + shift`` device pixels): the first pixel a stretch ``[v0, v1]`` touches and the
    one after its last (whole pixels, either order of ``v0`` and ``v1``)."""
    a, b = np.floor(scale * v0 + shift), np.floor(scale * v1 + shift)
    return np.minimum(a, b), np.maximum(a, b) + 1


def draw_lines(p: QtGui.QPainter, x0: np.ndarray, y0: np.ndarray | float, x1: np.ndarray,
               y1: np.ndarray | float) -> None:
    """Segments ``(x0, y0) - (x1, y1)`` in one painter call, from one array laid out as QLineF's."""
    n = len(x0)
    if n:
        seg = np.empty((n, 4))
        seg[:, 0], seg[:, 1], seg[:, 2], seg[:, 3] = x0, y0, x1, y1
        paint_lines(p, seg)


def paint_lines(p: QtGui.QPainter, seg: np.ndarray) -> None:
    """Segments laid out as QLineF's (rows of x1, y1, x2, y2: float64, C order) in one painter call."""
    if len(seg):
        p.drawLines(shiboken6.wrapInstance(seg.ctypes.data, QtCore.QLineF), len(seg))


def groups(px0: np.ndarray, px1: np.ndarray, flag: np.ndarray, gap_px: float
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Things drawn in a lane (pixel extents, each right at or after its left) grouped where they are less than
    ``gap_px`` apart: each group's left and right, in order, and whether ``flag`` holds for all its things."""
    if not len(px0):
        return px0, px1, flag
    order = np.argsort(px0, kind="stable")
    a, b, s = px0[order], px1[order], flag[order]
    reach = np.maximum.accumulate(b)
    first = np.flatnonzero(np.concatenate(([True], a[1:] > reach[:-1] + gap_px)))
    last = np.concatenate((first[1:], [len(a)])) - 1
    # a group's right is the running maximum at its last thing (all before it end left of its first), and its
    # things all flagged where no unflagged one is counted between its first and its last: gathers, where a
    # reduction per group (``reduceat``) costs NumPy some hundred instructions a group
    unflagged = np.cumsum(~s)
    return a[first], reach[last], unflagged[last] - unflagged[first] + ~s[first] == 0


def styles_in(style: np.ndarray) -> list[int]:
    """The styles (indices into ``STYLE_NAMES``) present in ``style``, in order (a count per style: ``np.unique``
    sorts, and imports at every call)."""
    return np.flatnonzero(np.bincount(style.astype(np.intp), minlength=len(STYLE_NAMES))).tolist()


def zoomed(t0: float, t1: float, fraction: float, factor: float) -> tuple[float, float]:
    """The view ``[t0, t1]`` (ns) scaled by ``factor`` (below 1: zoomed in) about the time at ``fraction`` of its
    width from its left, which stays where it is on the screen (a wheel turned under the pointer)."""
    at, width = t0 + fraction * (t1 - t0), factor * (t1 - t0)
    return at - fraction * width, at + (1 - fraction) * width


def around(t0: float, t1: float, margin: float = 0.25) -> tuple[float, float]:
    """The view (ns) that shows ``[t0, t1]`` with ``margin`` of its length (10 ns at least) either side."""
    span = max(t1 - t0, 10.0)
    return t0 - margin * span, t1 + margin * span


def room_between(px0: np.ndarray, px1: np.ndarray, left: float, right: float, room: float) -> bool:
    """Whether a gap of at least ``room`` pixels is left between things drawn at ``[px0, px1]`` (pixels, in order,
    not overlapping: a lane's dense spans), or between them and the view's ``left`` and ``right``."""
    if not len(px0):
        return right - left >= room
    return bool(px0[0] - left >= room or right - px1[-1] >= room or
                (len(px0) > 1 and float(np.max(px0[1:] - px1[:-1])) >= room))


def next_starts(px: np.ndarray, of: np.ndarray, none: float) -> np.ndarray:
    """For each of ``px`` (pixels): the first of ``of`` more than half a pixel after it, ``none`` where there is
    none."""
    later = np.sort(of)
    k = np.searchsorted(later, np.asarray(px) + 0.5, side="right")
    return np.where(k < len(later), later[np.minimum(k, len(later) - 1)], none) if len(later) else \
        np.full(len(px), none)


class TextWidths:
    """A font's texts laid out once and kept (their widths in pixels and their glyphs): the same labels are
    measured and written again at every redraw, and laying a text out costs more than drawing it."""

    def __init__(self, font: QtGui.QFont):
        self.font = QtGui.QFont(font)
        self._metrics = QtGui.QFontMetrics(font)
        self.height = self._metrics.height()
        #: no text but an empty one is narrower than this (pixels)
        self.narrowest = min(self._metrics.horizontalAdvance(c) for c in "iIl1|.,:;'!")
        self._known: dict[str, int] = {}
        self._laid: dict[str, QtGui.QStaticText] = {}
        self._elided: dict[tuple[int, str], str] = {}

    def horizontalAdvance(self, text: str) -> int:  # noqa: N802 - QFontMetrics' name, which it stands in for
        found = self._known.get(text)  # asked for every label tried at every redraw: the hit without a call
        return found if found is not None else kept(self._known, text, lambda: self._metrics.horizontalAdvance(text))

    def elided(self, text: str, width: int) -> str:
        """``text`` cut to ``width`` pixels, an ellipsis at its end when cut."""
        return kept(self._elided, (width, text),
                    lambda: self._metrics.elidedText(text, QtCore.Qt.TextElideMode.ElideRight, width))

    def lay_out(self, text: str) -> None:
        """Lay ``text`` out now, as an unscaled painter in this font draws it (:meth:`draw` then only paints it)."""
        kept(self._laid, text, lambda: _static_text(text)).prepare(QtGui.QTransform(), self.font)

    def draw(self, p: QtGui.QPainter, x: float, y: float, text: str) -> None:
        """``text`` with its top left at (``x``, ``y``) pixels, in the painter's font (this one's)."""
        p.drawStaticText(QtCore.QPointF(x, y), kept(self._laid, text, lambda: _static_text(text)))

    def draw_centred(self, p: QtGui.QPainter, rect: QtCore.QRectF, text: str) -> None:
        """``text`` at ``rect``'s left, centred in its height (as ``drawText`` with ``AlignVCenter``)."""
        self.draw(p, rect.left(), rect.top() + (rect.height() - self.height) / 2, text)


def _static_text(text: str) -> QtGui.QStaticText:
    laid = QtGui.QStaticText(text)
    laid.setTextFormat(QtCore.Qt.TextFormat.PlainText)
    return laid


_WIDTHS: dict[str, TextWidths] = {}


def text_widths(font: QtGui.QFont) -> TextWidths:
    """The kept widths of ``font``'s texts."""
    key = font.key()
    if key not in _WIDTHS:
        _WIDTHS[key] = TextWidths(font)
    return _WIDTHS[key]


def lane_words(font: QtGui.QFont) -> TextWidths:
    """The kept widths of the lanes' words (headers and labels alike): ``font`` in bold."""
    bold = QtGui.QFont(font)
    bold.setBold(True)
    return text_widths(bold)


class Batch:
    """Primitives of every lane, gathered per layer (a pen and a brush) so that each layer is one painter call."""

    def __init__(self) -> None:
        self.layers: dict[str, list[tuple[np.ndarray, ...]]] = {}
        #: logic lanes' runs: start, end, state (0, 1, 2 changing), y of high and of low
        self.runs: list[tuple[np.ndarray, np.ndarray, np.ndarray, float, float]] = []

    def add(self, layer: str, x0: np.ndarray, y0: np.ndarray | float, x1: np.ndarray,
            y1: np.ndarray | float) -> None:
        """Rectangles ``[x0, x1] x [y0, y1]``."""
        n = len(x0)
        if n:
            self.layers.setdefault(layer, []).append((x0, y0 if np.ndim(y0) else np.full(n, y0), x1,
                                                      y1 if np.ndim(y1) else np.full(n, y1)))

    def _logic(self, to_px: QtGui.QTransform) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The logic lanes' runs, all lanes at once (``to_px``: the painter's transform, from the runs' times to
        pixels): the pixels of the held levels' lines and of the changing stretches' edges as rectangles (QRect's
        layout, device pixels), the few lines left to Qt (QLineF's) and the changing stretches' fills (QRectF's)
        (:mod:`nicrig.gui._levels`).

        A lane's runs follow one another without gaps: the high level and the changing stretches' tops are one line
        as long as they follow one another, the low level and their bottoms another (a crowded lane is a few long
        lines and its changes' edges, not four lines a change), and edges in neighbouring pixel columns one
        rectangle. A changing stretch is filled without a pen (its outline is drawn with the lines); one spanning two
        pixel columns at most shows nothing beside its sides (a crowded view's usual stretch) and is not filled."""
        if not self.runs:
            return np.zeros((0, 4), np.int32), np.zeros((0, 4)), np.zeros((0, 4))
        x0, x1 = (np.ascontiguousarray(np.concatenate([r[k] for r in self.runs]), np.float64) for k in (0, 1))
        state = np.ascontiguousarray(np.concatenate([r[2] for r in self.runs]), np.int8)
        pixels, lines, fills = np.empty((5 * len(x0), 4), np.int32), np.empty((5 * len(x0), 4)), np.empty((len(x0), 4))
        n_pixels, n_lines, n_fills = _levels.levels(
            x0, x1, state, np.array([len(r[0]) for r in self.runs], np.int64),
            np.array([r[3] for r in self.runs], np.float64), np.array([r[4] for r in self.runs], np.float64),
            to_px.m11(), to_px.dx(), to_px.m22(), to_px.dy(), pixels, lines, fills)
        return pixels[:n_pixels], lines[:n_lines], fills[:n_fills]

    def draw(self, p: QtGui.QPainter) -> None:
        """Backgrounds, changing stretches, lines, dense spans, wide boxes, then what is still loading."""
        pixels, lines, fills = self._logic(p.transform())
        order = ["header", "logic"] + [f"dense:{n}" for n in STYLE_NAMES] + [f"wide:{n}" for n in STYLE_NAMES] + \
            ["pending"]
        for layer in order:
            if layer == "logic":
                p.setPen(QtCore.Qt.PenStyle.NoPen)
                p.setBrush(LaneItem.BUSY)
                paint_rects(p, fills)
                p.setPen(LaneItem.LINE)
                paint_lines(p, lines)
                p.save()
                p.resetTransform()
                p.setPen(QtCore.Qt.PenStyle.NoPen)
                p.setBrush(LaneItem.LINE.color())
                paint_pixels(p, pixels)
                p.restore()
                continue
            parts = self.layers.get(layer)
            if not parts:
                continue
            x0, y0, x1, y1 = (np.concatenate([part[k] for part in parts]) for k in range(4))
            kind, _, style = layer.partition(":")
            if kind == "dense":  # outlined in its own colour, so even a sliver shows: filled with the outline's pixels
                spans = pixel_spans(p.transform(), x0, x1, y0, y1)
                p.save()
                p.resetTransform()
                p.setPen(QtCore.Qt.PenStyle.NoPen)
                p.setBrush(_BRUSHES.get(style))
                paint_pixels(p, spans)
                p.restore()
                continue
            pen, brush = {"header": (QtCore.Qt.PenStyle.NoPen, LaneItem.HEADER),
                          "pending": (QtCore.Qt.PenStyle.NoPen, LaneItem.PENDING),
                          "wide": (LaneItem.OUTLINE, _BRUSHES.get(style))}[kind]
            p.setPen(pen)
            p.setBrush(brush)
            draw_rects(p, x0, x1, y0, y1)


class LaneItem:
    """One lane's band ``[y0, y0 + h)`` of the view and what it draws there for the current window."""

    LINE = _cosmetic("#1b5e20")  # 1 px: wider cosmetic lines take Qt's slow stroker, several times the time
    # the line's green at 110/255 over the background, as one opaque colour: the raster engine fills an opaque
    # brush at about half the cost of blending a translucent one pixel by pixel, and only the faint grid is under it
    BUSY = QtGui.QBrush(over(QtGui.QColor(27, 94, 32), 110 / 255, QtGui.QColor(BACKGROUND)))
    PENDING = QtGui.QBrush(QtGui.QColor("#bbbbbb"), QtCore.Qt.BrushStyle.BDiagPattern)
    HEADER = QtGui.QBrush(QtGui.QColor("#e9edf2"))
    OUTLINE = _cosmetic("#222222", 0.8)

    def __init__(self, lane: Lane, y0: float, h: float):
        self.lane, self.y0, self.h = lane, y0, h
        self.drawing: LogicDrawing | BoxDrawing | None = None
        self.header = ""
        self.view = (0.0, 1.0)
        self.shift_ns = 0.0
        #: the texts the last paint wrote, each with its rectangle (pixels of the view): what a reader sees
        self.written: list[tuple[QtCore.QRectF, str]] = []
        self._drawn: tuple[np.ndarray, ...] = ()  # what :attr:`extents` is made of, kept as the paint had it
        self._group_words: dict[tuple[int, int], list[str]] = {}

    @property
    def extents(self) -> np.ndarray:
        """(left, right, top, bottom) pixels of every box and dense span the last paint drew (made when asked:
        only readers of the picture ask)."""
        if not self._drawn:
            return np.zeros((0, 4))
        box_px0, box_px1, box_ya, box_yb, dense_px0, dense_px1, ya, yb = self._drawn
        return np.concatenate([np.column_stack([box_px0, box_px1, box_ya, box_yb]),
                               np.column_stack([dense_px0, dense_px1, np.full(len(dense_px0), ya),
                                                np.full(len(dense_px0), yb)])])

    def set_drawing(self, drawing: LogicDrawing | BoxDrawing | None, view: tuple[float, float],
                    shift_ns: float = 0.0) -> None:
        self.drawing, self.view, self.shift_ns = drawing, view, shift_ns

    def collect(self, batch: Batch) -> None:
        """Add the lane's lines and rectangles to ``batch``."""
        if self.lane.kind == "header":
            batch.add("header", np.array([self.view[0]]), self.y0, np.array([self.view[1]]), self.y0 + self.h)
        elif isinstance(self.drawing, LogicDrawing):
            self._logic(batch, self.drawing)
        elif isinstance(self.drawing, BoxDrawing):
            self._boxes(batch, self.drawing)
        elif self.lane.kind == "decoded":  # its boxes are still being prepared
            self._pending(batch, self.view[0])

    def paint_text(self, p: QtGui.QPainter, fm: TextWidths) -> None:
        """The lane's words, in the painter's font (``fm``'s): a header's, or the labels of boxes wide enough."""
        self.written, self._drawn = [], ()
        if self.lane.kind == "header":
            self._text_at_left(p, self.header, fm)
        elif isinstance(self.drawing, BoxDrawing):
            self.label_boxes(p.transform(), fm, p)

    def _text_at_left(self, p: QtGui.QPainter, text: str, fm: TextWidths) -> None:
        tr = p.transform()
        x = tr.m11() * self.view[0] + tr.dx() + 6
        y0, y1 = tr.m22() * self.y0 + tr.dy(), tr.m22() * (self.y0 + self.h) + tr.dy()
        p.resetTransform()
        p.setPen(QtGui.QColor("#1d2b3a"))
        room = tr.m11() * self.view[1] + tr.dx() - x - 6
        text = fm.elided(text, int(max(room, 0)))
        rect = QtCore.QRectF(x, min(y0, y1), fm.horizontalAdvance(text), abs(y1 - y0))
        fm.draw_centred(p, rect, text)
        self.written.append((rect, text))
        p.setTransform(tr)

    def _logic(self, batch: Batch, d: LogicDrawing) -> None:
        batch.runs.append((d.x0, d.x1, d.state, self.y0 + 0.2 * self.h, self.y0 + 0.8 * self.h))
        self._pending(batch, d.covered_x)

    def _pending(self, batch: Batch, covered_x: float) -> None:
        if covered_x < self.view[1]:
            batch.add("pending", np.array([max(covered_x, self.view[0])]), self.y0, np.array([self.view[1]]),
                      self.y0 + self.h)

    def _bands(self, d: BoxDrawing) -> tuple[np.ndarray, np.ndarray]:
        """Top and bottom (view units) of each wide box: one band, or two alternating rows for callouts."""
        if not self.lane.callouts:
            n = len(d.rows)
            return np.full(n, self.y0 + 0.12 * self.h), np.full(n, self.y0 + 0.88 * self.h)
        row = d.rows % 2
        top = self.y0 + 0.06 * self.h + row * 0.47 * self.h
        return top, top + 0.41 * self.h

    def _boxes(self, batch: Batch, d: BoxDrawing) -> None:
        top, bottom = self._bands(d)
        y0, y1 = self.y0 + 0.12 * self.h, self.y0 + 0.88 * self.h
        for k in styles_in(d.dense_style):
            sel = d.dense_style == k
            batch.add(f"dense:{STYLE_NAMES[k]}", d.dense_x0[sel], y0, d.dense_x1[sel], y1)
        # wide boxes over the dense spans they may share pixels with
        for k in styles_in(d.style):
            sel = d.style == k
            batch.add(f"wide:{STYLE_NAMES[k]}", d.x0[sel], top[sel], d.x1[sel], bottom[sel])

    def label_boxes(self, tr: QtGui.QTransform, fm: TextWidths, p: QtGui.QPainter | None = None) -> None:
        """Each box's longest label that fits: inside it, up to where the next box starts; a measured phase's,
        or a box too narrow to draw alone but with room after it, beside it. No label runs into another.

        ``tr`` maps the drawing's units to pixels. Written with ``p`` (whose transform is ``tr``); without a
        painter, the same labels are only laid out (:meth:`TextWidths.lay_out`): a view about to be shown then
        paints them without laying them out within its frame."""
        d = self.drawing
        if not isinstance(d, BoxDrawing) or self.lane.boxes is None or not (len(d.rows) or len(d.dense_x0)):
            return
        top, bottom = self._bands(d)
        sx, dx, sy, dy = tr.m11(), tr.dx(), tr.m22(), tr.dy()
        view_px0, view_px1 = sx * self.view[0] + dx, sx * self.view[1] + dx
        if p is not None:
            p.save()  # restored whatever happens: a painter left without its transform takes Qt down
            p.resetTransform()
        try:
            box_px0, box_px1 = sx * d.x0 + dx, sx * d.x1 + dx
            dense_px0, dense_px1 = sx * d.dense_x0 + dx, sx * d.dense_x1 + dx
            ya, yb = sorted((sy * (self.y0 + 0.12 * self.h) + dy, sy * (self.y0 + 0.88 * self.h) + dy))
            shortest = fm.horizontalAdvance("IRQ") + 6
            if not len(box_px0) and not room_between(dense_px0, dense_px1, view_px0, view_px1, shortest):
                # dense spans only, none with room for a word beside it (a wide view's usual crowded lane): the
                # pass below would name nothing
                self._drawn = (box_px0, box_px1, box_px0, box_px1, dense_px0, dense_px1, ya, yb)
                return
            spans: dict[tuple[int, int], list[tuple[float, float]]] = {}  # per text height: written (left, right)

            def clear(key: tuple[int, int], a: float, b: float) -> bool:
                """No text written at this height overlaps [a, b] (the texts of a height are kept sorted)."""
                taken = spans.setdefault(key, [])
                k = bisect.bisect(taken, (a, b))
                return (k == 0 or taken[k - 1][1] < a) and (k == len(taken) or taken[k][0] > b)

            pen: list[QtGui.QColor | None] = [None]

            def write(labels: list[str], left: float, right: float, ya: float, yb: float, colour: QtGui.QColor,
                      flush_right: bool = False) -> bool:
                """The longest of ``labels`` that fits between ``left`` and ``right`` (against ``right`` when
                ``flush_right``) clear of every text written (the bands a lane writes in are its whole height or, for
                callouts, its upper and lower halves, so texts of different heights do not meet)."""
                key = (round(ya), round(yb))
                for text in labels:
                    width = fm.horizontalAdvance(text)
                    x0 = right - 3 - width if flush_right else left + 3
                    if x0 < left + 3:
                        continue
                    if x0 + width <= right - 3 and clear(key, x0, x0 + width):
                        if p is None:
                            fm.lay_out(text)
                        else:
                            if pen[0] is not colour:
                                p.setPen(colour)
                                pen[0] = colour
                            fm.draw(p, x0, ya + (yb - ya - fm.height) / 2, text)
                        self.written.append((QtCore.QRectF(x0, ya, width, yb - ya), text))
                        bisect.insort(spans[key], (x0, x0 + width))
                        return True
                return False

            # where the next box (of the same band, for callouts) starts after each box: its label stops there
            if self.lane.callouts:
                band = d.rows % 2
                next_box = np.full(len(box_px0), view_px1)
                for b in (0, 1):
                    mine = band == b
                    next_box[mine] = next_starts(box_px0[mine], box_px0[mine], view_px1)
            else:
                next_box = next_starts(box_px0, np.concatenate([box_px0, dense_px0]), view_px1)
            left, right = np.maximum(box_px0, view_px0), np.minimum(np.minimum(box_px1, view_px1), next_box)
            # a box without room for the narrowest letter is not named inside (nor are its labels made)
            candidates = np.ones(len(box_px0), bool) if self.lane.callouts else right - left - 6 >= fm.narrowest
            named = np.zeros(len(box_px0), bool)
            ya_all, yb_all = np.minimum(sy * top + dy, sy * bottom + dy), np.maximum(sy * top + dy, sy * bottom + dy)
            order = np.flatnonzero(candidates)[np.argsort(box_px0[candidates], kind="stable")]
            # the candidates' numbers as Python's (a NumPy scalar read costs several times a list's)
            picked = (a[order].tolist() for a in (ya_all, yb_all, d.rows, d.style, left, right, next_box))
            colours = [_TEXT[name] for name in STYLE_NAMES]
            dark = QtGui.QColor("#111111")
            for i, ya, yb, row, style, a, b, after_box in zip(order.tolist(), *picked):
                labels = self.lane.boxes.labels(row)
                # a phase is better named beside its box than abbreviated inside it
                inside = labels[:2] if self.lane.callouts else labels
                named[i] = done = write(inside, a, b, ya, yb, colours[style])
                if not done and self.lane.callouts:
                    named[i] = write(labels, b + 2, after_box, ya, yb, dark)
            # boxes too narrow to draw alone or to name inside: a group of them (things with no room for a word
            # between them) none of which is named is named beside it, after it or else before it, by a word (a lone
            # letter beside a tick would say nothing)
            g0, g1, nameless = groups(np.concatenate([box_px0, dense_px0]), np.concatenate([box_px1, dense_px1]),
                                      np.concatenate([~named, np.ones(len(dense_px0), bool)]), shortest)
            after = np.minimum(np.concatenate((g0[1:], [view_px1])), view_px1)
            before = np.maximum(np.concatenate(([view_px0], g1[:-1])), view_px0)
            ks = np.flatnonzero(nameless & (np.maximum(after - g1, g0 - before) >= shortest))
            # the rows starting in each group, half a pixel either side (the group's edges are its boxes' times
            # rounded to pixels)
            starts = self.lane.boxes.t_ns
            first = np.searchsorted(starts, (g0[ks] - 0.5 - dx) / sx - self.shift_ns, side="left")
            end = np.searchsorted(starts, (g1[ks] + 0.5 - dx) / sx - self.shift_ns, side="right")
            for k, a, b in zip(ks.tolist(), first.tolist(), end.tolist()):
                words = self._sliver_words(a, b)
                if words and not write(words, float(g1[k]) + 1, float(after[k]), ya, yb, dark):
                    write(words, float(before[k]), float(g0[k]) - 1, ya, yb, dark, flush_right=True)
            self._drawn = (box_px0, box_px1, ya_all, yb_all, dense_px0, dense_px1, ya, yb)
        finally:
            if p is not None:
                p.restore()

    def _sliver_words(self, first: int, end: int, most: int = 64, kinds_at_most: int = 3) -> list[str]:
        """Names for the lane's boxes ``[first, end)``, longest first: one box's own words; for several, the word
        they share and their count (a batch of packets sent in one call: "sent ×6"), else each kind's count
        ("STOP#, CSR ×4"); none for more kinds than ``kinds_at_most`` or more boxes than ``most``. Kept: a pan
        names the same boxes again."""
        if end - first > most:
            return []
        return kept(self._group_words, (first, end),
                    lambda: group_words([self.lane.boxes.labels(r) for r in range(first, end)], kinds_at_most))


def group_words(labels: list[list[str]], kinds_at_most: int) -> list[str]:
    """Names for a group of boxes with these ``labels`` (each box's, longest first; see
    :meth:`LaneItem._sliver_words`): lone letters say nothing beside a tick and are left out."""
    words = [w for w in ([t for t in own if len(t) > 1] for own in labels) if w]
    if len(words) < 2:
        return words[0] if words else []
    shared = [w for w in words[0][1:] if all(w in other for other in words[1:])]
    if shared:
        return [f"{w} ×{len(words)}" for w in shared]
    kinds = Counter(w[-1] for w in words)  # each box by its shortest word, in order of appearance
    if len(kinds) > kinds_at_most:
        return []
    return [", ".join(f"{k} ×{n}" if n > 1 else k for k, n in kinds.items())]


class LanesItem(pg.GraphicsObject):
    """Paints every lane of the timeline: each layer of all lanes in one painter call, then their words."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[LaneItem] = []
        self.view = (0.0, 1.0)
        self.height = 1.0

    def boundingRect(self) -> QtCore.QRectF:
        return QtCore.QRectF(self.view[0], 0.0, max(self.view[1] - self.view[0], 1e-9), self.height)

    def show_lanes(self, items: list[LaneItem], height: float, view: tuple[float, float]) -> None:
        """Paint ``items`` (their drawings made for ``view``) next."""
        self.prepareGeometryChange()
        self.items, self.height, self.view = items, height, view
        self.update()

    def paint(self, p: QtGui.QPainter, *args: object) -> None:
        batch = Batch()
        for item in self.items:
            item.collect(batch)
        batch.draw(p)
        words = lane_words(p.font())
        p.setFont(words.font)
        for item in self.items:
            item.paint_text(p, words)


class SteadyLabelAxis(pg.AxisItem):
    """An axis whose label is set again only when its words change."""

    _label_text: str | None = None

    def _updateLabel(self) -> None:  # noqa: N802 - pyqtgraph's name
        # called at every change of range (on the hidden axes too, a rich-text layout each, dozens before the first
        # frame): the label's words change with the SI prefix only, and setting them lays the axis out again
        text = self.labelString()
        if text != self._label_text:
            self._label_text = text
            super()._updateLabel()
        else:
            self.picture = None
            self.update()


class TimeAxis(SteadyLabelAxis):
    """The time axis, painted straight from pyqtgraph's tick values and strings: a line per tick level and a
    word per tick in a few painter calls (the generic axis recorded a picture of each tick and played it
    back at every frame, more time than every lane took), and its grid behind the lanes."""

    def tickSpacing(self, minVal: float, maxVal: float, size: float) -> list[tuple[float, float]]:  # noqa: N803
        # the two levels painted: a third's ticks would be made, and told apart from the others', at every frame
        return super().tickSpacing(minVal, maxVal, size)[:2]

    def paint(self, p: QtGui.QPainter, *args: object) -> None:
        view = self.linkedView()
        bounds = self.mapRectFromParent(self.geometry())
        lo, hi = self.range
        if view is None or hi <= lo or bounds.width() <= 0:
            return
        left, width, top = bounds.left(), bounds.width(), bounds.top()
        grid_top = view.mapRectToItem(self, view.boundingRect()).top() if self.grid is not False else top
        scene = self.scene()
        background = scene.views()[0].backgroundBrush().color() if scene and scene.views() else \
            QtGui.QColor("white")
        p.setRenderHint(QtGui.QPainter.RenderHint.Antialiasing, False)
        p.setPen(self.pen())
        p.drawLine(QtCore.QPointF(left, top), QtCore.QPointF(left + width, top))
        font = self.style["tickFont"] or p.font()
        p.setFont(font)
        widths = text_widths(font)
        taken: list[tuple[float, float]] = []  # label extents (px) drawn so far: a finer level fills between
        tick_pen, text_pen = self.tickPen(), self.textPen()
        for level, (spacing, values) in enumerate(self.tickValues(lo, hi, width)):
            x = left + (np.asarray(values, dtype=np.float64) - lo) * (width / (hi - lo))
            keep = (x >= left) & (x <= left + width)
            x = x[keep]
            pen = QtGui.QPen(tick_pen)
            colour = QtGui.QColor(pen.color())
            if self.grid is not False:
                # behind the lanes (the axis is below the view), a translucent line is its colour over the
                # background: filled opaque, a pixel column is a fast fill where a translucent line is blended
                # pixel by pixel
                shade = over(colour, self.grid / (level + 1) / 255, background)
                for xi in x.tolist():
                    p.fillRect(QtCore.QRectF(math.floor(xi), grid_top, 1, top - grid_top), shade)
            colour.setAlpha(int(255 / (level + 1)))
            pen.setColor(colour)
            p.setPen(pen)
            draw_lines(p, x, top, x, top + self.style["tickLength"] / (1 + 0.5 * level))
            strings = self.tickStrings([v for v, k in zip(values, keep) if k], self.autoSIPrefixScale * self.scale,
                                       spacing)
            p.setPen(text_pen)
            y = top + max(0, self.style["tickLength"]) + self.style["tickTextOffset"][1]
            for xi, text in zip(x, strings):
                w = widths.horizontalAdvance(text)
                a, b = xi - w / 2 - 4, xi + w / 2 + 4
                if (level and any(a < t1 and t0 < b for t0, t1 in taken)) or xi + w / 2 > left + width + 2:
                    continue  # crowded, or cut by the axis' end
                taken.append((a, b))
                widths.draw(p, xi - w / 2, y, text)


class TimelinePlot(pg.PlotWidget):
    """The plot, counting the frames it paints (what a script or test waits for after an input); ``shown``
    once the first is painted."""

    shown = QtCore.Signal()
    painted = QtCore.Signal()
    #: the first frame is about to be painted (the window is laid out)
    first = QtCore.Signal()

    def __init__(self, *args: object, **kwargs: object):
        super().__init__(*args, **kwargs)
        self.frames = 0

    def paintEvent(self, ev: QtGui.QPaintEvent) -> None:
        if not self.frames:
            self.first.emit()
        super().paintEvent(ev)
        self.frames += 1
        if self.frames == 1:
            self.shown.emit()
        self.painted.emit()


class TimelineViewBox(pg.ViewBox):
    """Pan and zoom in time only; Shift-drag on a lane moves its source (deskew)."""

    def __init__(self, timeline: Timeline):
        super().__init__(enableMenu=False)
        self.timeline = timeline
        self._deskew: tuple[str, float, float] | None = None

    def wheelEvent(self, ev, axis=None):
        # where the wheel turns, as a fraction of the view, and how far: the next turn is taken to be alike
        if self.state["mouseEnabled"][0]:
            t0, t1 = self.viewRange()[0]
            if t1 > t0:
                at = self.mapToView(ev.pos()).x()
                self.timeline.zooming = ((at - t0) / (t1 - t0), 1.02 ** (ev.delta() * self.state["wheelScaleFactor"]))
        super().wheelEvent(ev, axis)

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


class CursorReadout(QtWidgets.QWidget):
    """The cursors' times and their difference on one line, selectable and copyable, the difference in bold.

    Read-only line edits, not a selectable label: such a label lays its text out as a document at every move of a
    cursor (some 4 M instructions, a sixth of a redraw's), a line edit as one line.
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.times, self.difference = QtWidgets.QLineEdit(), QtWidgets.QLineEdit()
        bold = self.difference.font()
        bold.setBold(True)
        self.difference.setFont(bold)
        layout = QtWidgets.QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        for field in (self.times, self.difference):
            field.setReadOnly(True)
            field.setFrame(False)
            # read as a label's text: no field's background, and focus (for a copy) only when clicked
            palette = field.palette()
            palette.setColor(QtGui.QPalette.ColorRole.Base, QtCore.Qt.GlobalColor.transparent)
            field.setPalette(palette)
            field.setFocusPolicy(QtCore.Qt.FocusPolicy.ClickFocus)
            layout.addWidget(field)
        layout.addStretch(1)
        self.setMinimumWidth(READOUT_WIDTH)

    def show_cursors(self, a: float, b: float) -> None:
        """Show cursor times ``a`` and ``b`` (ns), ``b - a`` and its inverse."""
        dt = b - a
        inv = f"1/Δt = {format_hz(1e9 / abs(dt))}" if dt else "1/Δt = -"
        self._set(self.times, f"A = {format_ns(a, 7)}    B = {format_ns(b, 7)}")
        self._set(self.difference, f"Δt = B - A = {format_ns(dt, 6)}    {inv}")

    @staticmethod
    def _set(field: QtWidgets.QLineEdit, text: str) -> None:
        field.setText(text)
        field.setCursorPosition(0)  # its start in sight when the window is narrower than the text
        # as wide as the longest text it showed: the fields read as one line and stand still as the cursors move
        # (and the window is not laid out again at each move)
        width = field.fontMetrics().horizontalAdvance(text) + 2 * field.fontMetrics().averageCharWidth()
        if width > field.width() or field.minimumWidth() == 0:
            field.setFixedWidth(max(width, field.minimumWidth()))

    def text(self) -> str:
        """The readout as one line of plain text."""
        return f"{self.times.text()}    {self.difference.text()}"


class Timeline(QtWidgets.QWidget):
    """Lanes of every source on one shared time axis (ns, zero at the trigger)."""

    cursorsChanged = QtCore.Signal(float, float)
    viewChanged = QtCore.Signal(float, float)
    offsetChanged = QtCore.Signal(str, float)
    markersChanged = QtCore.Signal()

    def __init__(self, doc: Document, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.doc = doc
        self.readout = CursorReadout()
        # the readout's length follows the cursors: the window's width must not (a zoom would widen it)
        self.readout.setSizePolicy(QtWidgets.QSizePolicy.Policy.Ignored, QtWidgets.QSizePolicy.Policy.Preferred)
        self.vb = TimelineViewBox(self)
        self.vb.invertY(True)
        self.vb.setMouseEnabled(x=True, y=False)
        self.vb.disableAutoRange()
        self.plot = TimelinePlot(viewBox=self.vb, background=BACKGROUND, axisItems={
            "bottom": TimeAxis("bottom"), **{side: SteadyLabelAxis(side) for side in ("left", "top", "right")}})
        pi = self.plot.getPlotItem()
        pi.hideButtons()
        # axis items given are shown: the top one would repeat the time in raw ns with a grid of its own over the
        # lanes, and the right one the lanes' heights (a frame's dearest item, played back from a picture)
        for side in ("top", "right"):
            pi.hideAxis(side)
        pi.showGrid(x=True, y=False, alpha=0.15)
        bottom = pi.getAxis("bottom")
        bottom.setLabel("time from trigger", units="s")
        bottom.setScale(1e-9)
        bottom.enableAutoSIPrefix(True)
        bottom.setZValue(self.vb.zValue() - 1)  # its grid behind the lanes, not over their boxes and words
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
        #: the view was drawn from an overview still being built: it shows more as the overview grows
        self.growing = False
        self.lanes_item = LanesItem()
        self.vb.addItem(self.lanes_item, ignoreBounds=True)
        # the names in a band of their own below the lanes, A's left of its line and B's right of its: close
        # cursors keep both names, and no lane's text is under them
        self.cursors = [pg.InfiniteLine(0, movable=True, pen=pg.mkPen(c, width=1.5), label=n,
                                        labelOpts={"color": c, "fill": "#ffffffd0", "anchors": [side, side]})
                        for n, c, side in zip("AB", CURSOR_COLOURS, ((1, 0.5), (0, 0.5)))]
        for line in self.cursors:
            line.setZValue(20)
            self.vb.addItem(line, ignoreBounds=True)
            line.sigPositionChanged.connect(self._cursors_moved)
        self.marker_lines: list[pg.InfiniteLine] = []
        #: the wheel turn being drawn: where (a fraction of the view's width) and by what factor it scales the view
        self.zooming: tuple[float, float] | None = None
        # the view the next wheel turn in shows: its words are made in a pause after the last frame
        self._next_view: tuple[float, float] | None = None
        #: the lanes' drawings made ahead for views about to be shown (the events a search found), by view: each
        #: decoded lane's by its id, each source's logic lanes' by ("logic", source, their bits)
        self._made: dict[tuple, dict[object, object]] = {}
        self._ahead = QtCore.QTimer(self, singleShot=True, interval=PAUSE_MS)
        self._ahead.timeout.connect(self._warm_next)
        self.plot.painted.connect(lambda: self._ahead.start() if self._next_view is not None else None)
        self.vb.sigXRangeChanged.connect(lambda *_: self.redraw())
        self.vb.sigResized.connect(lambda *_: self.redraw())
        # until its first frame the window is laid out, and the view resized several times: the lanes are drawn once,
        # as that frame is painted, for the size it has
        self._laid_out = False
        self.plot.first.connect(self._first_frame)
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
        self.items = []
        self._made = {}  # made for the lanes as they were
        y = 0.0
        ticks = []
        for lane in self.doc.visible_lanes():
            item = LaneItem(lane, y, lane.height)
            self.items.append(item)
            ticks.append((y + lane.height / 2, "" if lane.kind == "header" else lane.title))
            y += lane.height
        self.total_height = max(y, 1.0) + CURSOR_BAND
        for line in self.cursors:
            line.label.setPosition(1 - CURSOR_BAND / 2 / self.total_height)
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
        # disabled while a writer has the file; not laid out yet, drawn as the first frame is painted
        if not self.isEnabled() or not self._laid_out:
            return
        t0, t1 = self.view_range()
        px = self.pixels()
        made = self._made.pop(self._view_key(t0, t1, px), {})
        for item in self.items:
            if item.lane.kind != "logic":
                drawing = made[item.lane.id] if item.lane.id in made else self._drawing(item, t0, t1, px)
                item.set_drawing(drawing, (t0, t1), self.doc.session.offset(item.lane.source))
        for source, items in self._channels().items():
            key = ("logic", source, tuple(it.lane.bit for it in items))
            drawings = made[key] if key in made else self._logic_drawings(source, items, t0, t1, px)
            for item, drawing in zip(items, drawings):
                item.set_drawing(drawing, (t0, t1))
        self.growing = not all(self.doc.data[item.lane.source].settled() for item in self.items
                               if item.lane.kind in ("logic", "vector"))
        self.lines_near_view()
        self.lanes_item.show_lanes(self.items, self.total_height, (t0, t1))
        # labels of the rows a zoom in from here names: their stored chunks read while the frame is painted (those
        # of the view the next turn of the wheel shows, when this one's are too many), and that view's words
        # chosen and laid out after it; only after a wheel turn in (a drag, a key or a jump says nothing of the next
        # view: their frames would make words for a view that does not come)
        zooming, self.zooming = self.zooming, None
        self._next_view = zoomed(t0, t1, *zooming) if zooming and zooming[1] < 1 else None
        self.doc.read_ahead(t0, t1, self._next_view)
        # the view's transform now, not when the frame is painted: moved there, the items it carries would
        # be found changed after the frame and painted again in a second one
        self.vb.updateMatrix()
        self.viewChanged.emit(t0, t1)

    def _channels(self) -> dict[str, list[LaneItem]]:
        """The logic lanes of each source (drawn together, from one read of its samples)."""
        channels: dict[str, list[LaneItem]] = {}
        for item in self.items:
            if item.lane.kind == "logic":
                channels.setdefault(item.lane.source, []).append(item)
        return channels

    def _logic_drawings(self, source: str, items: list[LaneItem], t0: float, t1: float, px: int
                        ) -> list[LogicDrawing]:
        shift = self.doc.session.offset(source)
        cols = self.doc.data[source].columns((t0 - shift) * 1000.0, (t1 - shift) * 1000.0, px)
        return logic_drawings(cols, [it.lane.bit for it in items], shift)

    def _view_key(self, t0: float, t1: float, px: int) -> tuple:
        return t0, t1, px, tuple(sorted(self.doc.session.offsets_ns.items()))

    def _first_frame(self) -> None:
        self._laid_out = True
        self.redraw()

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
        # too many values to show: draw where any bit of the vector changes
        return logic_drawings(vector_changes(data.columns(f0, f1, px), lane.bits), [0], shift)[0]

    # -- cursors and markers -------------------------------------------------------------------
    def cursor_positions(self) -> tuple[float, float]:
        return float(self.cursors[0].value()), float(self.cursors[1].value())

    def cursors_to_view(self) -> None:
        """Both cursors to a quarter and three quarters of the view."""
        t0, t1 = self.view_range()
        self.set_cursors(t0 + 0.25 * (t1 - t0), t0 + 0.75 * (t1 - t0))

    def cursors_into_view(self) -> None:
        """Cursors to the view (:meth:`cursors_to_view`) when one is outside it."""
        t0, t1 = self.view_range()
        if not all(t0 <= c <= t1 for c in self.cursor_positions()):
            self.cursors_to_view()

    def set_cursors(self, a: float, b: float) -> None:
        for line, pos in zip(self.cursors, (a, b)):
            line.blockSignals(True)
            line.setValue(pos)
            line.blockSignals(False)
        self._cursors_moved()

    def lines_near_view(self) -> None:
        """Keep in the view box only the cursors and markers that are in the view or whose names may reach into it:
        pyqtgraph places every line's name again at every change of the view (some 2 ms a frame for two cursors
        far outside it), and a line is put back when a view comes near it."""
        t0, t1 = self.view_range()
        per_px = (t1 - t0) / self.pixels()
        for line in (*self.cursors, *self.marker_lines):
            reach = (line.label.textItem.boundingRect().width() + LINE_NAME_MARGIN) * per_px
            near = t0 - reach <= float(line.value()) <= t1 + reach
            shown = line.parentItem() is not None
            if near and not shown:
                self.vb.addItem(line, ignoreBounds=True)
            elif shown and not near and not line.moving:  # a line being dragged stays the mouse's
                self.vb.removeItem(line)

    def _cursors_moved(self) -> None:
        self.lines_near_view()
        a, b = self.cursor_positions()
        self.readout.show_cursors(a, b)
        self.doc.session.cursors_ns = (a, b)
        self.cursorsChanged.emit(a, b)

    def set_markers(self, markers: list[tuple[str, float]]) -> None:
        for line in self.marker_lines:
            if line.parentItem() is not None:
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
        self.lines_near_view()
        self.markersChanged.emit()

    def _marker_moved(self) -> None:
        self.doc.session.markers = [(name, float(line.value()))
                                    for (name, _), line in zip(self.doc.session.markers, self.marker_lines)]
        self.markersChanged.emit()

    def add_marker(self, name: str, t: float) -> None:
        self.set_markers(self.doc.session.markers + [(name, t)])

    # -- view --------------------------------------------------------------------------------
    def zoom_to(self, t0: float, t1: float, margin: float = 0.25) -> None:
        self.vb.setXRange(*around(t0, t1, margin), padding=0)

    def warm(self, t0: float, t1: float, samples: bool = False) -> None:
        """Make what the decoded lanes write in a view of ``[t0, t1]`` (ns): their boxes' labels read from the
        tables, chosen as the painter chooses them, measured and laid out, so that a jump there (an event chosen in
        the table) paints at once instead of reading and laying out its words within the frame. Their drawings are
        kept for that view; with ``samples`` (read ahead for it), the logic lanes' too, when drawn from raw samples
        (a view drawn from an overview still being built is drawn again as it grows)."""
        if not self.isEnabled() or t1 <= t0:
            return
        fm = lane_words(self.plot.viewport().font())
        now = self.vb.childTransform()  # the lanes' heights in pixels as painted now; the time axis, the view's
        sx = self.vb.width() / (t1 - t0)
        tr = QtGui.QTransform(sx, 0.0, 0.0, now.m22(), -sx * t0, now.dy())
        px = self.pixels()
        made: dict[object, object] = {}
        for item in self.items:
            if item.lane.kind != "decoded" or item.lane.boxes is None:
                continue
            ahead = LaneItem(item.lane, item.y0, item.h)
            ahead._group_words = item._group_words  # the words of groups of boxes, made once for both
            made[item.lane.id] = drawing = self._drawing(item, t0, t1, px)
            ahead.set_drawing(drawing, (t0, t1), self.doc.session.offset(item.lane.source))
            ahead.label_boxes(tr, fm)
        channels = self._channels() if samples else {}
        reading = [f for f in (self.doc.data[s].cache.ahead.future for s in channels) if f is not None and not f.done()]
        # the samples being read ahead for the view: a short wait (the window's thread asleep), else not drawn ahead
        if not reading or not concurrent.futures.wait(reading, timeout=SAMPLES_WAIT_S).not_done:
            for source, items in channels.items():
                drawings = self._logic_drawings(source, items, t0, t1, px)
                if self.doc.data[source].settled():
                    made[("logic", source, tuple(it.lane.bit for it in items))] = drawings
        while len(self._made) >= MADE_VIEWS:  # the oldest views made give way
            del self._made[next(iter(self._made))]
        self._made[self._view_key(t0, t1, px)] = made

    def warm_found(self, views: list[tuple[float, float]]) -> None:
        """Make ready the views ``[t0, t1]`` (ns) of a search's few events (:meth:`warm`, their samples read ahead
        by :meth:`read_ahead_samples`), one at a time after the list is shown: a click on one then jumps to a view
        drawn and named already."""
        for view in views:
            QtCore.QTimer.singleShot(0, self, lambda view=view: self.warm(*view, samples=True))

    def read_ahead_samples(self, views: list[tuple[float, float]]) -> None:
        """Read ahead, on the read-ahead thread, the raw samples the logic and vector lanes draw in the views
        ``[t0, t1]`` (ns) about to be shown: a jump to one then draws from memory instead of inflating the stored
        blocks within its frame."""
        px = self.pixels()
        for source in {item.lane.source for item in self.items if item.lane.kind in ("logic", "vector")}:
            shift = self.doc.session.offset(source)
            self.doc.data[source].read_ahead([((t0 - shift) * 1000.0, (t1 - shift) * 1000.0) for t0, t1 in views], px)

    def _warm_next(self) -> None:
        """Make the words of the view the next wheel turn shows (:meth:`warm`), in a pause of ``PAUSE_MS`` after the
        last frame: that turn then only paints them."""
        if self._next_view is not None:
            view, self._next_view = self._next_view, None
            self.warm(*view)

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
