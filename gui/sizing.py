"""Widgets sized to what they show: table columns as wide as their values, the docks beside the timeline as wide as
their tables (within a share of the window, so the timeline keeps the rest)."""

from __future__ import annotations

from PySide6 import QtCore, QtWidgets

#: The most of the window's width the docks on each side may take.
SIDE_SHARE = {QtCore.Qt.DockWidgetArea.LeftDockWidgetArea: 0.2, QtCore.Qt.DockWidgetArea.RightDockWidgetArea: 0.33}


def fit_columns(table: QtWidgets.QTableView) -> None:
    """Values as wide as they are; the first column (names, elided where they must be) takes the rest."""
    header = table.horizontalHeader()
    header.setStretchLastSection(False)
    header.setSectionResizeMode(QtWidgets.QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QtWidgets.QHeaderView.ResizeMode.Stretch)
    table.setTextElideMode(QtCore.Qt.TextElideMode.ElideRight)
    table.setWordWrap(False)  # a name too long for its column is elided on its line, not wrapped out of sight


def needed_width(view: QtWidgets.QAbstractItemView) -> int:
    """Pixels ``view`` needs to show every column whole: each column's widest text or title, its frame and a
    vertical scroll bar."""
    header = view.horizontalHeader() if isinstance(view, QtWidgets.QTableView) else \
        view.header() if isinstance(view, QtWidgets.QTreeView) else None
    total = sum(max(view.sizeHintForColumn(c), header.sectionSizeHint(c)) for c in range(header.count())) \
        if header is not None else view.sizeHintForColumn(0)
    return total + 2 * view.frameWidth() + view.verticalScrollBar().sizeHint().width()


def fit_docks(window: QtWidgets.QMainWindow) -> None:
    """Widen each side's docks to their widest table, up to :data:`SIDE_SHARE` of the window; the event list's
    columns (but its last, the description) to their contents."""
    docks = [d for d in window.findChildren(QtWidgets.QDockWidget) if d.isVisible()]
    for area, share in SIDE_SHARE.items():
        side = [d for d in docks if window.dockWidgetArea(d) == area]
        need = max((needed_width(v) + 8 for d in side for v in d.widget().findChildren(QtWidgets.QAbstractItemView)),
                   default=0)
        if side and need > side[0].width():
            window.resizeDocks(side[:1], [min(need, int(share * window.width()))], QtCore.Qt.Orientation.Horizontal)
    for d in docks:
        if window.dockWidgetArea(d) == QtCore.Qt.DockWidgetArea.BottomDockWidgetArea:
            for view in d.widget().findChildren(QtWidgets.QTableView):
                for c in range(view.horizontalHeader().count() - 1):
                    view.resizeColumnToContents(c)
