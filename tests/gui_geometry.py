"""What a picture of the GUI lets a person read, from the widgets' own geometry (not from pixels).

Each function returns the problems it finds, one sentence each (empty: none):

* ``timeline_problems``: a cursor outside the view; a lane's text (box labels, names beside boxes, source headers,
  as :class:`nicrig.gui.timeline.LaneItem` records what it wrote) wider than its rectangle, outside the view or
  its lane, over another text or a cursor's name, or half over a box; a lane name wider than the axis holding it;
* ``table_problems``: a column (partly) out of its table's sight, or a value wider than its column (a stretched
  column that elides is allowed to be narrower than its names);
* ``legend_problems``: a plot's legend over its data area;
* ``window_problems``: all of these for what the window shows now (the timeline or a results view, and the
  tables of its visible docks).

Call them after the window has painted (``export_widget`` or ``grab()``): the texts are those of the last paint.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6 import QtCore, QtGui, QtWidgets


def _viewport_rect(tl, item: QtWidgets.QGraphicsItem) -> QtCore.QRectF:
    return QtCore.QRectF(tl.plot.mapFromScene(item.sceneBoundingRect()).boundingRect())


def timeline_problems(tl) -> list[str]:
    out = []
    t0, t1 = tl.view_range()
    for name, t in zip("AB", tl.cursor_positions()):
        if not t0 <= t <= t1:
            out.append(f"cursor {name} at {t:.0f} ns is outside the view {t0:.0f}..{t1:.0f} ns")
    view = _viewport_rect(tl, tl.vb)
    names = [(_viewport_rect(tl, line.label), f"cursor {line.label.textItem.toPlainText()}") for line in tl.cursors]
    if names[0][0].intersects(names[1][0]):
        out.append("the cursors' names overlap")
    texts = list(names)
    for item in tl.items:
        top = tl.plot.mapFromScene(tl.vb.mapViewToScene(QtCore.QPointF(t0, item.y0))).y()
        bottom = tl.plot.mapFromScene(tl.vb.mapViewToScene(QtCore.QPointF(t0, item.y0 + item.h))).y()
        fm = QtGui.QFontMetrics(tl.plot.font())
        for rect, text in item.written:
            where = f"lane {item.lane.id!r}: {text!r}"
            if fm.horizontalAdvance(text) > rect.width() + 0.5:
                out.append(f"{where} is wider than its room")
            if rect.left() < view.left() - 0.5 or rect.right() > view.right() + 0.5:
                out.append(f"{where} runs out of the view")
            if rect.top() < min(top, bottom) - 0.5 or rect.bottom() > max(top, bottom) + 0.5:
                out.append(f"{where} runs out of its lane")
            boxes = [QtCore.QRectF(a, t, b - a, u - t) for a, b, t, u in item.extents]
            over = [box for box in boxes if box.intersects(rect.adjusted(0.5, 0.5, -0.5, -0.5))]
            if over and not any(box.adjusted(-0.5, -0.5, 0.5, 0.5).contains(rect) for box in over):
                out.append(f"{where} lies half over a box")
            texts.append((rect, where))
    for i, (a, what_a) in enumerate(texts):
        for b, what_b in texts[i + 1:]:
            if a.intersects(b):
                out.append(f"{what_a} overlaps {what_b}")
    axis = tl.plot.getPlotItem().getAxis("left")
    fm = QtGui.QFontMetrics(axis.style.get("tickFont") or tl.plot.font())
    for item in tl.items:
        if item.lane.kind != "header" and fm.horizontalAdvance(item.lane.title) > axis.width() - 8:
            out.append(f"lane name {item.lane.title!r} is wider than the axis ({axis.width():.0f} px)")
    return out


def table_problems(view: QtWidgets.QAbstractItemView) -> list[str]:
    if not view.isVisible():
        return []
    header = view.horizontalHeader() if isinstance(view, QtWidgets.QTableView) else view.header()
    model = view.model()
    width = view.viewport().width()
    first = max(view.rowAt(0) if isinstance(view, QtWidgets.QTableView) else 0, 0)
    last = view.rowAt(view.viewport().height() - 1) if isinstance(view, QtWidgets.QTableView) else -1
    rows = range(first, (last if last >= 0 else model.rowCount() - 1) + 1) if isinstance(view, QtWidgets.QTableView) \
        else range(0)
    out = []
    for c in range(header.count()):
        if header.isSectionHidden(c):
            continue
        title = model.headerData(c, QtCore.Qt.Orientation.Horizontal) or c
        x, size = header.sectionViewportPosition(c), header.sectionSize(c)
        if x < -0.5 or x + size > width + 1:
            out.append(f"column {title!r} is out of sight ({x}..{x + size} of {width} px)")
        stretched = header.sectionResizeMode(c) == QtWidgets.QHeaderView.ResizeMode.Stretch or (
            header.stretchLastSection() and c == header.count() - 1)
        if stretched and view.textElideMode() != QtCore.Qt.TextElideMode.ElideNone:
            continue
        for r in rows:
            need = view.sizeHintForIndex(model.index(r, c)).width()
            if need > size:
                out.append(f"column {title!r}: row {r}'s {model.index(r, c).data()!r} needs {need} px of {size}")
    return out


def legend_problems(plot: pg.PlotItem) -> list[str]:
    legend = plot.legend
    if legend is None or not legend.isVisible():
        return []
    if legend.sceneBoundingRect().intersects(plot.vb.sceneBoundingRect()):
        return [f"the legend of {plot.titleLabel.text!r} lies over its data"]
    return []


def window_problems(window) -> list[str]:
    out = []
    shown = window.tabs.currentWidget()
    if window.timeline is not None and shown is window.timeline:
        out += timeline_problems(window.timeline)
    for plot in shown.findChildren(pg.PlotWidget):
        if plot.isVisible() and plot is not getattr(window.timeline, "plot", None):
            out += legend_problems(plot.getPlotItem())
    for layout in shown.findChildren(pg.GraphicsLayoutWidget):
        if layout.isVisible():
            out += [p for item in layout.ci.items for p in legend_problems(item) if isinstance(item, pg.PlotItem)]
    for dock in window.findChildren(QtWidgets.QDockWidget):
        if dock.isVisible():
            for view in dock.widget().findChildren(QtWidgets.QTableView) + dock.widget().findChildren(
                    QtWidgets.QTreeView):
                out += [f"{dock.windowTitle()}: {p}" for p in table_problems(view)]
    return out
