"""The event table: transactions, frames, PAUSE frames and interrupts of every source, in time order.

:class:`EventList` merges the decoded lanes' boxes into one time-sorted list and
filters it with NumPy (kind, text search), so a capture with hundreds of
thousands of transactions filters at once; the Qt model shows the filtered
rows on demand. Clicking a row asks the timeline to zoom to it; the cursor's
time selects the row at or before it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from nicrig.gui.lanes import STYLE_NAMES, STYLES, Lane, format_ns
from PySide6 import QtCore, QtGui, QtWidgets

KINDS = ("transaction", "frame", "PAUSE", "interrupt")
#: Descriptions searched per NumPy call (a bounded stretch without a break for the window's thread).
SEARCH_SLICE = 1 << 18
#: Events the panel filters in the window's thread; a longer list is filtered in the background.
FILTERED_HERE = 200_000
#: A search finding at most this many events announces them (``found``): the window makes their views' words
#: while the user reads the list.
FEW_FOUND = 4
COLUMNS = ("time", "duration", "source", "lane", "kind", "event")


@dataclass
class EventList:
    """All events, sorted by start; ``lane`` and ``row`` point back at the box each came from."""

    lanes: list[Lane]
    t_ns: np.ndarray
    t_end_ns: np.ndarray
    kind: np.ndarray  # index into KINDS
    lane: np.ndarray
    row: np.ndarray

    @classmethod
    def from_lanes(cls, lanes: list[Lane], shifts: dict[str, float]) -> EventList:
        """Events of the decoded lanes (link activity repeats the frames, so it is left out)."""
        use = [ln for ln in lanes if ln.boxes is not None and ln.kind == "decoded" and len(ln.boxes)
               and ln.boxes.category[0] in tuple(k.encode() for k in KINDS)]
        if not use:
            z = np.zeros(0)
            return cls(use, z, z, np.zeros(0, np.uint8), np.zeros(0, np.int32), np.zeros(0, np.int64))
        t = np.concatenate([ln.boxes.t_ns + shifts.get(ln.source, 0.0) for ln in use])  # type: ignore[union-attr]
        # each lane's rows are in time order already: the stable sort merges runs
        order = np.argsort(t, kind="stable")
        t = t[order]
        # one column at a time, each sorted as soon as it is made: a few bytes an event at the most
        te = np.concatenate([ln.boxes.t_end_ns + shifts.get(ln.source, 0.0) for ln in use])[order]  # type: ignore
        kind = np.concatenate([_kinds(ln.boxes.category) for ln in use])[order]  # type: ignore[union-attr]
        lane = np.repeat(np.arange(len(use), dtype=np.int32), [len(ln.boxes) for ln in use])[order]  # type: ignore
        starts = np.cumsum([0] + [len(ln.boxes) for ln in use])  # type: ignore[arg-type]
        row = order - starts[lane]
        return cls(use, t, te, kind, lane, row)

    def __len__(self) -> int:
        return len(self.t_ns)

    def text(self, i: int) -> str:
        """The event's full description (the lane's longest label)."""
        return self.lanes[int(self.lane[i])].boxes.labels(int(self.row[i]))[0]  # type: ignore[union-attr]

    def searchable(self) -> float:
        """The part of the events (0 to 1) whose descriptions the search can read now."""
        ready = sum(len(ln.boxes) for ln in self.lanes if ln.boxes.search_text() is not None)  # type: ignore[union-attr]
        return ready / max(sum(len(ln.boxes) for ln in self.lanes), 1)  # type: ignore[union-attr]

    def select(self, kinds: set[str], search: str = "") -> np.ndarray | None:
        """Indices of the events of ``kinds`` whose description or source contains ``search`` (any case); None
        while a lane's descriptions are still being prepared."""
        keep = np.isin(self.kind, [KINDS.index(k) for k in kinds])
        needle = search.strip().lower()
        if needle:
            masks = []
            for ln in self.lanes:
                text = ln.boxes.search_text()  # type: ignore[union-attr]
                if needle in ln.source.lower():
                    masks.append(np.ones(len(ln.boxes), bool))  # type: ignore[arg-type]
                    continue
                if text is None:
                    return None
                word = needle.encode()
                masks.append(np.concatenate([np.strings.find(text[k:k + SEARCH_SLICE], word) >= 0
                                             for k in range(0, len(text), SEARCH_SLICE)] or [np.zeros(0, bool)]))
            starts = np.cumsum([0] + [len(m) for m in masks])
            keep &= np.concatenate(masks)[starts[self.lane] + self.row]
        return np.flatnonzero(keep)


def _kinds(category: np.ndarray) -> np.ndarray:
    """A lane's event kinds (bytes) as indices into KINDS (``len(KINDS)``: none of them)."""
    out = np.full(len(category), len(KINDS), np.uint8)
    for k, name in enumerate(KINDS):
        out[category == name.encode()] = k
    return out


class EventModel(QtCore.QAbstractTableModel):
    """The filtered events as a table (rows computed when shown)."""

    def __init__(self, events: EventList, parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.events = events
        self.rows = np.arange(len(events))

    def set_rows(self, rows: np.ndarray) -> None:
        self.beginResetModel()
        self.rows = rows
        self.endResetModel()

    def rowCount(self, parent=QtCore.QModelIndex()) -> int:  # noqa: B008 - Qt's signature
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent=QtCore.QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(COLUMNS)

    def headerData(self, section: int, orientation, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if role == QtCore.Qt.ItemDataRole.DisplayRole and orientation == QtCore.Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: QtCore.QModelIndex, role=QtCore.Qt.ItemDataRole.DisplayRole):
        if not index.isValid():
            return None
        ev = self.events
        i = int(self.rows[index.row()])
        col = index.column()
        if role == QtCore.Qt.ItemDataRole.DisplayRole:
            # only the cell's own text: a row painted asks for each of its cells (a selected row, at each click)
            if col == 0:
                return format_ns(float(ev.t_ns[i]), 8)
            if col == 1:
                return format_ns(float(ev.t_end_ns[i] - ev.t_ns[i]))
            if col == 4:
                return KINDS[ev.kind[i]]
            if col == 5:
                return ev.text(i)
            lane = ev.lanes[int(ev.lane[i])]
            return lane.source if col == 2 else lane.title
        if role == QtCore.Qt.ItemDataRole.DecorationRole and col == 4:
            lane = ev.lanes[int(ev.lane[i])]
            style = STYLE_NAMES[int(lane.boxes.style[int(ev.row[i])])]  # type: ignore[union-attr]
            return QtGui.QColor(STYLES[style][0])
        return None


class ColumnHeader(QtWidgets.QHeaderView):
    """The table's column names, which do not follow its selection (marking no column for a selected row).

    Qt's header paints again every column a selection spans, and the current cell's column, at each change of
    them: for a row selected, the whole header, unchanged.
    """

    def __init__(self, parent: QtWidgets.QWidget | None = None):
        super().__init__(QtCore.Qt.Orientation.Horizontal, parent)
        self.setHighlightSections(False)

    def visualRegionForSelection(self, selection: QtCore.QItemSelection) -> QtGui.QRegion:
        return QtGui.QRegion()

    def currentChanged(self, current: QtCore.QModelIndex, previous: QtCore.QModelIndex) -> None:
        pass


class EventTable(QtWidgets.QTableView):
    """The events' table; a change of its focus paints again the rows that show it, the selected and current ones.

    Qt's item views paint the whole table and its header again when they gain or lose the focus (a click on a row
    found by the search moves the focus from the search box), though only those rows' colours differ.
    """

    def focusInEvent(self, event: QtGui.QFocusEvent) -> None:
        # as Qt's: the keyboard's focus starts at the first row (the arrow keys move on from it)
        if event.reason() != QtCore.Qt.FocusReason.MouseFocusReason and not self.currentIndex().isValid() \
                and self.model() is not None and self.model().rowCount():
            self.selectionModel().setCurrentIndex(self.model().index(0, 0),
                                                  QtCore.QItemSelectionModel.SelectionFlag.NoUpdate)
        self._paint_focused_rows()

    def focusOutEvent(self, event: QtGui.QFocusEvent) -> None:
        self._paint_focused_rows()

    def _paint_focused_rows(self) -> None:
        rows = {index.row() for index in self.selectionModel().selectedRows()}
        if self.currentIndex().isValid():
            rows.add(self.currentIndex().row())
        width = self.viewport().width()
        for row in rows:
            self.viewport().update(0, self.rowViewportPosition(row), width, self.rowHeight(row))


class EventPanel(QtWidgets.QWidget):
    """Filter by kind, search, and the table; ``activated(t0_ns, t1_ns)`` when a row is clicked.

    ``background(title, work, done)``, when the window gives one, runs the filtering of a long list off the
    window's thread and hands ``done`` its result."""

    activated = QtCore.Signal(float, float)
    #: a search found a few events: their (start, end) ns, in the list's order
    found = QtCore.Signal(object)

    def __init__(self, events: EventList, parent: QtWidgets.QWidget | None = None,
                 background: Callable[[str, Callable[[], Any], Callable[[Any], None]], None] | None = None):
        super().__init__(parent)
        self.background = background
        self.model = EventModel(events, self)
        self._t_rows = events.t_ns
        #: a search waits for descriptions still being prepared
        self.waiting = False
        self.view = EventTable()
        self.view.setHorizontalHeader(ColumnHeader(self.view))
        self.view.setModel(self.model)
        self.view.setSelectionBehavior(QtWidgets.QAbstractItemView.SelectionBehavior.SelectRows)
        self.view.setSelectionMode(QtWidgets.QAbstractItemView.SelectionMode.SingleSelection)
        self.view.verticalHeader().setVisible(False)
        self.view.verticalHeader().setDefaultSectionSize(20)
        self.view.horizontalHeader().setStretchLastSection(True)
        for col, width in enumerate((120, 80, 80, 130, 90)):
            self.view.setColumnWidth(col, width)
        self.view.clicked.connect(self._clicked)
        self.kind_boxes = {}
        bar = QtWidgets.QHBoxLayout()
        for k in KINDS:
            box = QtWidgets.QCheckBox(k)
            box.setChecked(True)
            box.toggled.connect(self.refilter)
            self.kind_boxes[k] = box
            bar.addWidget(box)
        self.search = QtWidgets.QLineEdit()
        self.search.setPlaceholderText("search (address, seq, PAUSE, STOP#, source ...)")
        self.search.setClearButtonEnabled(True)
        self.search.returnPressed.connect(self.refilter)
        self.search.textChanged.connect(lambda text: self.refilter() if not text else None)
        bar.addWidget(self.search, 1)
        self.count = QtWidgets.QLabel()
        bar.addWidget(self.count)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        self.refilter()

    @property
    def events(self) -> EventList:
        return self.model.events

    def set_events(self, events: EventList) -> None:
        self.model.events = events
        self.refilter()

    def refilter(self) -> None:
        """Show the events of the checked kinds that the search finds (off the window's thread for a long list)."""
        kinds = {k for k, box in self.kind_boxes.items() if box.isChecked()}
        search, events = self.search.text(), self.events
        if self.background is not None and len(events) > FILTERED_HERE:
            self.count.setText("searching ...")
            self.background("searching events", lambda: events.select(kinds, search),
                            lambda rows: self._filtered(events, rows))
        else:
            self._filtered(events, events.select(kinds, search))

    def _filtered(self, events: EventList, rows: np.ndarray | None) -> None:
        if events is not self.events:  # replaced while it was filtered
            return
        self.waiting = rows is None
        if rows is None:
            self.count.setText(f"the search waits for the events' descriptions ({events.searchable():.0%} ready)")
            return
        self.model.set_rows(rows)
        self._t_rows = events.t_ns[rows]
        self.count.setText(f"{len(rows):,} of {len(events):,}")
        if self.search.text().strip() and 0 < len(rows) <= FEW_FOUND:
            self.found.emit([(float(events.t_ns[i]), float(events.t_end_ns[i])) for i in rows.tolist()])

    def _clicked(self, index: QtCore.QModelIndex) -> None:
        i = int(self.model.rows[index.row()])
        self.activated.emit(float(self.events.t_ns[i]), float(self.events.t_end_ns[i]))

    def click_row(self, row: int) -> None:
        """Select and activate table row ``row`` (what a mouse click does)."""
        index = self.model.index(row, 0)
        self.view.selectRow(row)
        self._clicked(index)

    def highlight_time(self, t_ns: float) -> int | None:
        """Select the shown row at or before ``t_ns`` (the cursor's event); its table row, or None."""
        if not len(self._t_rows):
            return None
        k = int(np.searchsorted(self._t_rows, t_ns, side="right")) - 1
        if k < 0:
            return None
        self.view.selectRow(k)
        index = self.model.index(k, 0)
        # a row in sight stays where it is (a clicked one under the pointer, the table not painted again whole)
        if not self.view.viewport().rect().contains(self.view.visualRect(index)):
            self.view.scrollTo(index, QtWidgets.QAbstractItemView.ScrollHint.PositionAtCenter)
        return k
