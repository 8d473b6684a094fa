"""The main window: timeline, lanes panel, cursors and measurements, event table, results views.

Long work (building overviews, decoding, analysis) runs in :class:`Job` threads
with a progress bar and a Cancel button in the status bar; errors show in a
dialog with the library's message. Opening a file that is not a readable
nicrig file shows that message too, and the window stays usable.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from nicrig.decoders.batch import decode_file
from nicrig.gui import heap, prepare
from nicrig.gui.background import Job, ProcessJob, error_text
from nicrig.gui.document import Document
from nicrig.gui.events import FILTERED_HERE, EventList, EventPanel
from nicrig.gui.lanes import Lane, format_ns
from nicrig.gui.measurements import Measurement, MeasurementsPanel, phase_boxes
from nicrig.gui.results_view import ResultsView
from nicrig.gui.sizing import fit_columns
from nicrig.gui.timeline import Timeline, around
from nicrig.udpmon.results import RESULTS_GROUP
from PySide6 import QtCore, QtGui, QtSvg, QtWidgets

from nicrig.atomic import replacing
from nicrig.errors import NicrigError, UsageError
from nicrig.h5file import open_any

#: While the overview grows, the timeline is drawn again at most this often (ms); decoded lanes that come
#: within RELAYOUT_MS of each other are laid out together.
REDRAW_MS = 250
RELAYOUT_MS = 50
#: A capture set of up to this many samples and decoded rows is prepared for the view in a thread of the window's
#: process (at once); a deeper one in a process of its own, so that the window's interpreter stays free.
PREPARED_HERE_SAMPLES = 1 << 22
PREPARED_HERE_ROWS = 100_000
#: Keyboard zoom (Ctrl+plus/minus) changes the time shown by this factor; the arrows pan by this part of it.
ZOOM_STEP = 2.0
PAN_STEP = 0.25
MOUSE = (("Zoom about the pointer", "wheel"), ("Pan", "drag"), ("Move a source in time (deskew)", "Shift+drag"),
         ("Move a cursor or marker", "drag its line"))


class LanesPanel(QtWidgets.QWidget):
    """Show, hide and reorder lanes (within their source's group, and groups), and type each source's deskew."""

    changed = QtCore.Signal()

    def __init__(self, timeline: Timeline, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.timeline = timeline
        self.tree = QtWidgets.QTreeWidget()
        self.tree.setHeaderLabels(["lane", "deskew (ns)"])
        self.tree.setColumnWidth(0, 190)
        self.spins: dict[str, QtWidgets.QDoubleSpinBox] = {}
        up, down = QtWidgets.QPushButton("Move up"), QtWidgets.QPushButton("Move down")
        up.clicked.connect(lambda: self._move(-1))
        down.clicked.connect(lambda: self._move(1))
        buttons = QtWidgets.QHBoxLayout()
        buttons.addWidget(up)
        buttons.addWidget(down)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        hint = QtWidgets.QLabel("Shift-drag a lane in the timeline to deskew its source.")
        hint.setWordWrap(True)
        layout.addWidget(hint)
        self.tree.itemChanged.connect(self._checked)
        timeline.offsetChanged.connect(self._offset_shown)
        self.rebuild()

    @property
    def doc(self) -> Document:
        return self.timeline.doc

    def rebuild(self) -> None:
        self.tree.blockSignals(True)
        self.tree.clear()
        self.spins = {}
        hidden = set(self.doc.session.hidden)
        by_id = {lane.id: lane for lane in self.doc.lanes}
        order = [i for i in self.doc.session.order if i in by_id] + \
                [lane.id for lane in self.doc.lanes if lane.id not in set(self.doc.session.order)]
        groups: dict[str, QtWidgets.QTreeWidgetItem] = {}
        for lane_id in order:
            lane = by_id[lane_id]
            if lane.kind == "header":
                item = QtWidgets.QTreeWidgetItem([lane.source])
                item.setData(0, QtCore.Qt.ItemDataRole.UserRole, lane.id)
                self.tree.addTopLevelItem(item)
                groups[lane.source] = item
                spin = QtWidgets.QDoubleSpinBox()
                spin.setRange(-1e9, 1e9)
                spin.setDecimals(3)
                spin.setSuffix(" ns")
                spin.setValue(self.doc.session.offset(lane.source))
                spin.valueChanged.connect(lambda v, s=lane.source: self.timeline.set_offset(s, v))
                self.tree.setItemWidget(item, 1, spin)
                self.spins[lane.source] = spin
        for lane_id in order:
            lane = by_id[lane_id]
            if lane.kind == "header":
                continue
            item = QtWidgets.QTreeWidgetItem([lane.title])
            item.setData(0, QtCore.Qt.ItemDataRole.UserRole, lane.id)
            item.setFlags(item.flags() | QtCore.Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(0, QtCore.Qt.CheckState.Unchecked if lane.id in hidden else QtCore.Qt.CheckState.Checked)
            groups[lane.source].addChild(item)
        self.tree.expandAll()
        self.tree.blockSignals(False)

    def _current_order(self) -> list[str]:
        out = []
        for g in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(g)
            out.append(top.data(0, QtCore.Qt.ItemDataRole.UserRole))
            out += [top.child(k).data(0, QtCore.Qt.ItemDataRole.UserRole) for k in range(top.childCount())]
        return out

    def _checked(self, item: QtWidgets.QTreeWidgetItem, column: int) -> None:
        lane_id = item.data(0, QtCore.Qt.ItemDataRole.UserRole)
        hidden = [h for h in self.doc.session.hidden if h != lane_id]
        if item.checkState(0) == QtCore.Qt.CheckState.Unchecked:
            hidden.append(lane_id)
        self.doc.session.hidden = hidden
        self.timeline.layout_lanes()
        self.changed.emit()

    def _move(self, step: int) -> None:
        item = self.tree.currentItem()
        if item is None:
            return
        parent = item.parent()
        if parent is None:
            idx = self.tree.indexOfTopLevelItem(item)
            if 0 <= idx + step < self.tree.topLevelItemCount():
                self.tree.takeTopLevelItem(idx)
                self.tree.insertTopLevelItem(idx + step, item)
        else:
            idx = parent.indexOfChild(item)
            if 0 <= idx + step < parent.childCount():
                parent.takeChild(idx)
                parent.insertChild(idx + step, item)
        self.doc.session.order = self._current_order()
        self.rebuild()
        self.timeline.layout_lanes()
        self.changed.emit()

    def _offset_shown(self, source: str, value: float) -> None:
        spin = self.spins.get(source)
        if spin is not None and abs(spin.value() - value) > 1e-6:
            spin.blockSignals(True)
            spin.setValue(value)
            spin.blockSignals(False)


class CursorPanel(QtWidgets.QWidget):
    """Every shown lane's value at cursors A and B, and the named markers."""

    def __init__(self, timeline: Timeline, parent: QtWidgets.QWidget | None = None):
        super().__init__(parent)
        self.timeline = timeline
        self.values = QtWidgets.QTableWidget(0, 3)
        self.values.setHorizontalHeaderLabels(["lane", "at A", "at B"])
        self.values.verticalHeader().setVisible(False)
        self.values.verticalHeader().setDefaultSectionSize(19)
        fit_columns(self.values)
        self.markers = QtWidgets.QListWidget()
        add, remove, goto = (QtWidgets.QPushButton("Add at A..."), QtWidgets.QPushButton("Remove"),
                             QtWidgets.QPushButton("Go to"))
        add.clicked.connect(self.add_marker)
        remove.clicked.connect(self.remove_marker)
        goto.clicked.connect(self.goto_marker)
        self.markers.itemDoubleClicked.connect(lambda *_: self.goto_marker())
        row = QtWidgets.QHBoxLayout()
        for b in (add, remove, goto):
            row.addWidget(b)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addWidget(QtWidgets.QLabel("Values at the cursors"))
        layout.addWidget(self.values, 3)
        layout.addWidget(QtWidgets.QLabel("Markers"))
        layout.addWidget(self.markers, 1)
        layout.addLayout(row)
        self._timer = QtCore.QTimer(self, singleShot=True, interval=60)
        self._timer.timeout.connect(self.refresh)
        timeline.cursorsChanged.connect(lambda *_: self._timer.start())
        # read in a pause after the last frame: the values of a jump's cursors are not read within the next input's
        # frame (a few ms of searches and reads)
        timeline.plot.painted.connect(lambda: self._timer.start() if self._timer.isActive() else None)
        timeline.markersChanged.connect(self.refresh_markers)
        # each lane's value is a read of its own (a stored chunk of samples or of decoded rows): they are read once
        # the first view is painted, the lanes listed as loading until then
        #: whether the values shown were read (False: every value shows as loading)
        self.values_read = False
        self.refresh(reading=False)
        timeline.plot.shown.connect(self._timer.start)
        self.refresh_markers()

    def refresh(self, reading: bool = True) -> None:
        """Every shown lane's values at the cursors; without ``reading``, its name with its values as loading."""
        tl = self.timeline
        if not tl.isEnabled() or tl.doc.closed:  # the file is closed for a writer, or for good
            return
        a, b = tl.cursor_positions()
        lanes = [item.lane for item in tl.items if item.lane.kind != "header"]
        self.values.setRowCount(len(lanes))
        model = self.values.model()
        changed: list[tuple[int, int]] = []
        # the cells told of as one change (the rows and columns that span them): a signal a cell had the value
        # columns fit their values again, each over every row, before the next cell was set
        blocked = model.blockSignals(True)
        try:
            for r, lane in enumerate(lanes):
                data = tl.doc.data.get(lane.source)
                shift = tl.doc.session.offset(lane.source)
                values = [lane.value_text(data, t, shift) for t in (a, b)] if reading else ["loading", "loading"]
                cells = [f"{lane.source}: {lane.title}", *values]
                for c, text in enumerate(cells):
                    # a cell's item is kept and only a changed text set: a new item per cell and move made the
                    # table model take every row out and in again (a frame's time for a few dozen lanes)
                    item = self.values.item(r, c)
                    if item is None:
                        item = QtWidgets.QTableWidgetItem(text)
                        item.setToolTip(text)
                        self.values.setItem(r, c, item)
                        changed.append((r, c))
                    elif item.text() != text:
                        item.setText(text)
                        item.setToolTip(text)
                        changed.append((r, c))
        finally:
            model.blockSignals(blocked)
        if changed:
            rows, columns = zip(*changed)
            model.dataChanged.emit(model.index(min(rows), min(columns)), model.index(max(rows), max(columns)))
        self.values_read = reading

    def settle(self) -> None:
        """Read the values a pending refresh would, or the first (a script's or test's wait includes them)."""
        if self._timer.isActive() or not self.values_read:
            self._timer.stop()
            self.refresh()

    def refresh_markers(self) -> None:
        self.markers.clear()
        for name, t in self.timeline.doc.session.markers:
            self.markers.addItem(f"{name}  @ {format_ns(t, 7)}")

    def add_marker(self) -> None:
        a, _ = self.timeline.cursor_positions()
        name, ok = QtWidgets.QInputDialog.getText(self, "New marker", "Name:",
                                                  text=f"M{len(self.timeline.doc.session.markers) + 1}")
        if ok and name.strip():
            self.timeline.add_marker(name.strip(), a)

    def remove_marker(self) -> None:
        row = self.markers.currentRow()
        if row >= 0:
            markers = list(self.timeline.doc.session.markers)
            del markers[row]
            self.timeline.set_markers(markers)

    def goto_marker(self) -> None:
        row = self.markers.currentRow()
        if row >= 0:
            t = self.timeline.doc.session.markers[row][1]
            t0, t1 = self.timeline.view_range()
            self.timeline.vb.setXRange(t - (t1 - t0) / 2, t + (t1 - t0) / 2, padding=0)


def traced_results(path: Path) -> bool:
    """Whether a results file holds host traces or a wire source (then it has a timeline too)."""
    from nicrig.acquisition import wire
    from nicrig.acquisition.hostprobe import events as hp

    with open_any(path) as f:
        return bool(hp.hosts(f) or wire.names(f))


class MainWindow(QtWidgets.QMainWindow):
    """``nicrig gui``: one capture set and any number of udpmon results files."""

    def __init__(self, files: list[Path] | None = None):
        super().__init__()
        self.setWindowTitle("nicrig")
        self.resize(1500, 950)
        self.tabs = QtWidgets.QTabWidget()
        self.setCentralWidget(self.tabs)
        self.doc: Document | None = None
        self.timeline: Timeline | None = None
        self.events: EventPanel | None = None
        self.measurements: MeasurementsPanel | None = None
        self.lanes_panel: LanesPanel | None = None
        self.cursor_panel: CursorPanel | None = None
        self._results: list[ResultsView] = []
        #: results views of capture sets that carry their results, made when first shown or asked for
        self._later: dict[QtWidgets.QWidget, Path] = {}
        self.jobs: list[Job | ProcessJob] = []
        self._events_job: Job | None = None
        self._events_again = False
        self._prepare_pending = False
        self.errors: list[str] = []
        self._docks: list[QtWidgets.QDockWidget] = []
        self._build_status()
        self._build_actions()
        self._redraw_timer = QtCore.QTimer(self, interval=REDRAW_MS, singleShot=True)
        self._redraw_timer.timeout.connect(self._overview_progress)
        self._relayout_timer = QtCore.QTimer(self, interval=RELAYOUT_MS, singleShot=True)
        self._relayout_timer.timeout.connect(self._lanes_arrived)
        self.tabs.currentChanged.connect(lambda _: self._make_results(self.tabs.currentWidget()))
        for f in files or []:
            self.open_file(Path(f))

    # -- chrome ------------------------------------------------------------------------------
    def _build_status(self) -> None:
        self.progress = QtWidgets.QProgressBar()
        self.progress.setMaximumWidth(260)
        self.progress.setVisible(False)
        self.job_label = QtWidgets.QLabel()
        self.cancel_button = QtWidgets.QPushButton("Cancel")
        self.cancel_button.setVisible(False)
        self.cancel_button.clicked.connect(self.cancel_jobs)
        bar = self.statusBar()
        bar.addPermanentWidget(self.job_label)
        bar.addPermanentWidget(self.progress)
        bar.addPermanentWidget(self.cancel_button)

    def _action(self, menu: QtWidgets.QMenu, text: str, slot: Callable[[], Any], shortcut: str | None = None,
                toolbar: QtWidgets.QToolBar | None = None) -> QtGui.QAction:
        act = QtGui.QAction(text, self)
        if shortcut:
            # "Ctrl++, Ctrl+=": several keys for one action (Ctrl+= is Ctrl+plus without Shift on US keyboards)
            act.setShortcuts([QtGui.QKeySequence(k.strip()) for k in shortcut.split(", ")])
        act.triggered.connect(slot)
        menu.addAction(act)
        if toolbar is not None:
            toolbar.addAction(act)
        return act

    def _build_actions(self) -> None:
        bar = self.addToolBar("main")
        bar.setMovable(False)
        m = self.menuBar().addMenu("&File")
        self._action(m, "Open...", self.ask_open, "Ctrl+O", bar)
        self._action(m, "Save session", self.save_session, "Ctrl+S", bar)
        self._action(m, "Export view as PNG or SVG...", self.ask_export, "Ctrl+E", bar)
        m.addSeparator()
        self._action(m, "Quit", self.close, "Ctrl+Q")
        v = self.menuBar().addMenu("&View")
        self._action(v, "Zoom in", lambda: self._timeline_do(lambda tl: tl.zoom_by(ZOOM_STEP)), "Ctrl++, Ctrl+=")
        self._action(v, "Zoom out", lambda: self._timeline_do(lambda tl: tl.zoom_by(1 / ZOOM_STEP)), "Ctrl+-")
        # the arrows pan only while the timeline has the focus: the tables and lists keep theirs
        self.pan_actions = [
            self._action(v, "Pan to earlier", lambda: self._timeline_do(lambda tl: tl.pan_by(-PAN_STEP)), "Left"),
            self._action(v, "Pan to later", lambda: self._timeline_do(lambda tl: tl.pan_by(PAN_STEP)), "Right"),
        ]
        for act in self.pan_actions:
            act.setShortcutContext(QtCore.Qt.ShortcutContext.WidgetWithChildrenShortcut)
        self._action(v, "Zoom to whole capture", self.zoom_all, "Ctrl+0", bar)
        self._action(v, "Zoom to cursors", self.zoom_cursors, "Ctrl+Z", bar)
        self._action(v, "Cursors to view", self.cursors_to_view, None, bar)
        self._action(v, "Add marker at cursor A...", self.add_marker, "Ctrl+M", bar)
        c = self.menuBar().addMenu("&Capture")
        self._action(c, "Decode", self.decode, "Ctrl+D", bar)
        self._action(c, "Measure the range between the cursors", self.measure, "Ctrl+R", bar)
        h = self.menuBar().addMenu("&Help")
        self._action(h, "Keyboard and mouse", self.show_keys, "F1")

    def keys(self) -> list[tuple[str, str]]:
        """(what, keys) of every menu command with a shortcut, then what the mouse does in the timeline."""
        rows = []
        for menu in self.menuBar().findChildren(QtWidgets.QMenu):
            for act in menu.actions():
                if act.shortcuts():
                    keys = " or ".join(k.toString(QtGui.QKeySequence.SequenceFormat.NativeText)
                                       for k in act.shortcuts())
                    rows.append((act.text().replace("&", ""), keys))
        return rows + list(MOUSE)

    def show_keys(self) -> None:
        rows = "".join(f"<tr><td>{what}</td><td><b>{keys}</b></td></tr>" for what, keys in self.keys())
        QtWidgets.QMessageBox.information(self, "Keyboard and mouse", f"<table cellspacing=4>{rows}</table>")

    # -- files -------------------------------------------------------------------------------
    def ask_open(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open a capture set or results file", "",
                                                        "nicrig files (*.h5 *.hdf5);;all files (*)")
        if path:
            self.open_file(Path(path))

    def show_error(self, title: str, text: str) -> None:
        """An error dialog (non-blocking, so a script or test driving the window goes on)."""
        self.errors.append(text)
        box = QtWidgets.QMessageBox(QtWidgets.QMessageBox.Icon.Critical, title, text,
                                    QtWidgets.QMessageBox.StandardButton.Ok, self)
        box.setAttribute(QtCore.Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.statusBar().showMessage(text, 15000)

    def open_file(self, path: Path) -> bool:
        """Open a capture set (replacing the one shown) or add a results file's views; a simulated capture set
        brings the views of the results it carries too."""
        try:
            opened = open_any(path)
            kind = type(opened)
            carries_results = opened.has_nested(RESULTS_GROUP)
        except NicrigError as exc:
            self.show_error("Cannot open file", str(exc))
            return False
        try:
            if kind.FORMAT_NAME != "nicrig-results":
                self._open_capture(path, opened)  # the timeline keeps it open
            else:
                opened.close()
            if kind.FORMAT_NAME == "nicrig-results":
                view = ResultsView(path)
                self._results.append(view)
                self.tabs.addTab(view, f"results: {path.name}")
                if self.doc is None and traced_results(path):  # its host lanes and packets on the timeline
                    self._open_capture(path)
            elif carries_results:  # made when first shown: the timeline comes first
                later = QtWidgets.QWidget()
                self._later[later] = path
                self.tabs.addTab(later, f"results: {path.name}")
        except (NicrigError, OSError, KeyError, ValueError) as exc:
            self.show_error("Cannot open file", error_text(exc) if isinstance(exc, NicrigError) else f"{path}: {exc}")
            return False
        return True

    @property
    def results(self) -> list[ResultsView]:
        """The results views of the open files."""
        for later in list(self._later):
            self._make_results(later)
        return self._results

    def _make_results(self, later: QtWidgets.QWidget | None) -> None:
        path = self._later.pop(later, None)  # type: ignore[arg-type]
        if path is None:
            return
        view = ResultsView(path)
        self._results.append(view)
        index = self.tabs.indexOf(later)
        current = self.tabs.currentIndex()
        self.tabs.blockSignals(True)
        self.tabs.removeTab(index)
        self.tabs.insertTab(index, view, f"results: {path.name}")
        self.tabs.setCurrentIndex(current)
        self.tabs.blockSignals(False)
        later.deleteLater()  # type: ignore[union-attr]

    def _open_capture(self, path: Path, opened: Any = None) -> None:
        doc = Document(path, opened)
        self.close_capture()
        self.doc = doc
        if not doc.session.order and not doc.session.hidden:
            doc.session.hidden = doc.default_hidden()
        self.timeline = Timeline(doc)
        self.timeline.addActions(self.pan_actions)
        self.tabs.insertTab(0, self.timeline, f"timeline: {path.name}")
        self.tabs.setCurrentIndex(0)
        self.events = EventPanel(EventList.from_lanes([], {}), background=self._in_background)
        self.events.activated.connect(self.show_event)
        self.events.found.connect(self._warm_found)
        self.lanes_panel = LanesPanel(self.timeline)
        self.cursor_panel = CursorPanel(self.timeline)
        self.measurements = MeasurementsPanel(self)
        self._dock("Events", self.events, QtCore.Qt.DockWidgetArea.BottomDockWidgetArea)
        self._dock("Lanes", self.lanes_panel, QtCore.Qt.DockWidgetArea.LeftDockWidgetArea)
        self._dock("Cursors and markers", self.cursor_panel, QtCore.Qt.DockWidgetArea.RightDockWidgetArea)
        self._dock("Measurements", self.measurements, QtCore.Qt.DockWidgetArea.RightDockWidgetArea)
        events, lanes, cursors, _ = self._docks
        self.resizeDocks([events], [210], QtCore.Qt.Orientation.Vertical)
        self.resizeDocks([lanes, cursors], [250, 360], QtCore.Qt.Orientation.Horizontal)
        self.timeline.cursorsChanged.connect(lambda a, b: self.events.highlight_time(a) if self.events else None)
        self.timeline.offsetChanged.connect(lambda *_: self._refresh_events())
        self.setWindowTitle(f"nicrig - {path}")
        if doc.session_note:
            self.statusBar().showMessage(doc.session_note, 8000)
        # the event list and the preparer start once the first view is painted: until then the window has the
        # machine
        self._prepare_pending = True
        self.timeline.plot.shown.connect(self._start_preparing)

    def _dock(self, title: str, widget: QtWidgets.QWidget, area: QtCore.Qt.DockWidgetArea) -> None:
        dock = QtWidgets.QDockWidget(title, self)
        dock.setObjectName(title)
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        self._docks.append(dock)

    def close_capture(self) -> None:
        self.cancel_jobs(wait=True)
        for dock in self._docks:
            self.removeDockWidget(dock)
            dock.deleteLater()
        self._docks = []
        if self.timeline is not None:
            self.tabs.removeTab(self.tabs.indexOf(self.timeline))
            self.timeline.deleteLater()
        if self.doc is not None:
            self.doc.close()
        self.doc = self.timeline = self.events = None

    def _refresh_events(self) -> None:
        """List the decoded lanes' events again (their lanes or a deskew changed); a long list in the background."""
        doc, panel = self.doc, self.events
        if doc is None or panel is None:
            return
        lanes, offsets = list(doc.lanes), dict(doc.session.offsets_ns)
        if sum(len(ln.boxes) for ln in lanes if ln.boxes is not None and ln.kind == "decoded") <= FILTERED_HERE:
            panel.set_events(EventList.from_lanes(lanes, offsets))
            return
        if self._events_job is not None:  # one at a time: the latest lanes once it ends
            self._events_again = True
            return

        def ended() -> None:
            self._events_job = None
            if self._events_again:
                self._events_again = False
                self._refresh_events()

        job = Job("listing events", lambda progress: EventList.from_lanes(lanes, offsets), self)
        self._events_job = job
        self.start_job(job, on_done=lambda events: panel.set_events(events) if self.events is panel else None,
                       on_end=ended, quiet=True)

    def _in_background(self, title: str, work: Callable[[], Any], done: Callable[[Any], None]) -> None:
        self.start_job(Job(title, lambda progress: work(), self), on_done=done, quiet=True)

    # -- jobs --------------------------------------------------------------------------------
    def start_job(self, job: Job | ProcessJob, on_done: Callable[[Any], None] | None = None,
                  on_end: Callable[[], None] | None = None, quiet: bool = False) -> Job | ProcessJob:
        """Run ``job`` with the status bar's progress and Cancel; ``on_end`` runs however it ends."""
        self.jobs.append(job)

        def progressed(done: int, total: int) -> None:
            self.progress.setRange(0, max(total, 1))
            self.progress.setValue(done)

        def ended() -> None:
            if job in self.jobs:
                self.jobs.remove(job)
            busy = bool(self.jobs)
            self.progress.setVisible(busy)
            self.cancel_button.setVisible(busy)
            self.job_label.setText(self.jobs[-1].title if busy else "")
            if on_end is not None:
                on_end()

        job.progressed.connect(progressed)
        job.succeeded.connect(lambda result: on_done(result) if on_done else None)
        job.failed.connect(lambda text: self.show_error(f"{job.title} failed", text))
        job.cancelled.connect(lambda: self.statusBar().showMessage(f"{job.title}: cancelled", 8000))
        job.finished.connect(ended)
        if not quiet:
            self.progress.setVisible(True)
            self.cancel_button.setVisible(True)
            self.job_label.setText(job.title)
        job.start()
        return job

    def cancel_jobs(self, wait: bool = False) -> None:
        for job in list(self.jobs):
            job.cancel()
            if wait:
                job.wait()

    def wait_jobs(self, timeout_ms: int = 600_000) -> None:
        """Process events until every job has ended (scripts, screenshots and tests)."""
        self._start_preparing()
        deadline = QtCore.QDeadlineTimer(timeout_ms)
        while self.jobs and not deadline.hasExpired():
            QtWidgets.QApplication.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents, 50)
            QtCore.QThread.msleep(5)
        QtWidgets.QApplication.processEvents()
        if self.cursor_panel is not None:
            self.cursor_panel.settle()

    def _start_preparing(self) -> None:
        if self._prepare_pending:
            self._prepare_pending = False
            self._refresh_events()
            self.prepare_view()

    def prepare_view(self) -> None:
        """Prepare what the view lacks (pyramids, decoded lanes, the search index) in the background: the timeline
        draws what is ready and marks the rest as loading, and takes each piece as it comes."""
        doc = self.doc
        if doc is None or doc.prepared:
            return
        samples = sum(d.source.num_samples for d in doc.data.values())
        rows = sum(len(t) for t in doc.decoded.values())
        job: Job | ProcessJob
        if samples <= PREPARED_HERE_SAMPLES and rows <= PREPARED_HERE_ROWS:
            def work(progress: Callable[[int, int], None]) -> None:
                def emit(message: dict[str, Any]) -> None:
                    if "progress" in message:
                        progress(*message["progress"])  # raises once cancelled
                    job.message.emit(message)

                prepare.prepare(doc.path, emit, lambda: job.is_cancelled)

            job = Job("preparing the view", work, self)
        else:
            job = ProcessJob("preparing the view", "nicrig.gui.prepare", [str(doc.path)], self)
        job.message.connect(lambda message, d=doc: self._prepared(d, message))
        self.start_job(job, on_end=self._prepare_ended)

    def _prepared(self, doc: Document, message: dict[str, Any]) -> None:
        """A piece the preparer finished: show it."""
        if doc is not self.doc or self.timeline is None:
            return
        if "title" in message and self.jobs:
            self.job_label.setText(message["title"])
        what = doc.take(message)
        if what == "lanes" and not self._relayout_timer.isActive():
            self._relayout_timer.start()
        elif what == "pyramid" and not self._redraw_timer.isActive():
            self._redraw_timer.start()
        elif what == "text" and self.events is not None and self.events.waiting:
            self.events.refilter()

    def _overview_progress(self) -> None:
        # a view drawn from raw samples (the first view, a narrow one) is the same picture whatever the overview
        # holds: redrawn at every step it took the preparer's cores for nothing
        if self.timeline is not None and self.timeline.growing:
            self.timeline.redraw()

    def _lanes_arrived(self) -> None:
        """Decoded lanes came (those of a few tables at once, mostly): show them, and list their events."""
        if self.timeline is None:
            return
        if self.lanes_panel is not None:
            self.lanes_panel.rebuild()
        self.timeline.layout_lanes()
        self._refresh_events()

    def _prepare_ended(self) -> None:
        self._redraw_timer.stop()
        if self._relayout_timer.isActive():
            self._relayout_timer.stop()
            self._lanes_arrived()
        if self.timeline is not None:
            self.timeline.redraw()
        if self.events is not None and self.events.waiting:
            self.events.refilter()

    def decode(self) -> None:
        """Decode every source of the capture set in the background, then show the new lanes."""
        doc = self.doc
        if doc is None:
            self.show_error("Decode", "open a capture set first")
            return
        self.cancel_jobs(wait=True)
        self.timeline.setEnabled(False)
        if self.events is not None:  # its rows' words are read from the tables, which close now
            self.events.set_events(EventList.from_lanes([], {}))
        doc.detach()
        # the batch engine writes each table atomically: a cancel (raised from progress) leaves the file valid
        job = Job("decoding", lambda progress: decode_file(doc.path, progress=progress), self)

        def reattach() -> None:
            try:
                doc.reattach()
            except NicrigError as exc:
                self.show_error("Cannot reopen the capture set", str(exc))
                return
            self.timeline.setEnabled(True)
            self.lanes_panel.rebuild()
            self.timeline.layout_lanes()
            self._refresh_events()
            self.prepare_view()

        self.start_job(job, on_done=self._decoded, on_end=reattach)

    def _decoded(self, result: dict[str, Any]) -> None:
        rows = sum(n for per_source in result.values() if isinstance(per_source, dict)
                   for n in per_source.values() if isinstance(n, int))
        self.statusBar().showMessage(f"decoded: {rows:,} rows in {len(result)} sources", 10000)

    def show_phases(self, results: list[Measurement]) -> None:
        """Measured phases (CSR setup, DMA, wire, interrupt ...) as a labelled lane on each source."""
        doc = self.doc
        if doc is None or self.timeline is None:
            return
        doc.phase_lanes = {}
        for source in doc.source_order():
            boxes = phase_boxes(results, source)
            if len(boxes):
                # phases are measured on the deskewed timeline: the lane must not be moved again
                boxes.t_ns = boxes.t_ns - doc.session.offset(source)
                boxes.t_end_ns = boxes.t_end_ns - doc.session.offset(source)
                doc.phase_lanes[source] = Lane(f"{source}/phases", source, "measured phases", "decoded",
                                               boxes=boxes, height=2.2, group=source, callouts=True)
        doc.build_lanes()
        self.lanes_panel.rebuild()
        self.timeline.layout_lanes()

    def measure(self) -> None:
        if self.measurements is not None and self.timeline is not None:
            self.measurements.measure(*sorted(self.timeline.cursor_positions()))

    # -- view --------------------------------------------------------------------------------
    def show_event(self, t0: float, t1: float) -> None:
        if self.timeline is not None:
            self.timeline.zoom_to(t0, t1)
            self.timeline.set_cursors(t0, t1)

    def _warm_found(self, spans: list[tuple[float, float]]) -> None:
        """The views a click on each of a search's few events shows, made ready one at a time after the list is
        shown (each a few ms of the window's thread, while the user reads the list), their raw samples read on the
        read-ahead thread."""
        views = [around(t0, t1) for t0, t1 in spans]
        self._timeline_do(lambda tl: tl.read_ahead_samples(views))
        self._timeline_do(lambda tl: tl.warm_found(views))

    def _timeline_do(self, what: Callable[[Timeline], None]) -> None:
        if self.timeline is not None:
            what(self.timeline)

    def zoom_all(self) -> None:
        if self.timeline is not None:
            self.timeline.zoom_all()

    def zoom_cursors(self) -> None:
        if self.timeline is not None:
            a, b = sorted(self.timeline.cursor_positions())
            self.timeline.zoom_to(a, b, margin=0.1)

    def cursors_to_view(self) -> None:
        if self.timeline is not None:
            self.timeline.cursors_to_view()

    def add_marker(self) -> None:
        if self.cursor_panel is not None:
            self.cursor_panel.add_marker()

    def save_session(self) -> None:
        doc = self.doc
        if doc is None:
            return
        if self.timeline is not None:
            doc.session.view_ns = self.timeline.view_range()
        self.cancel_jobs(wait=True)
        try:
            where = doc.save_session()
        except NicrigError as exc:
            self.show_error("Cannot save the session", str(exc))
            return
        finally:  # the file was opened again: its lanes read its tables anew
            if self.timeline is not None:
                self.timeline.layout_lanes()
        self.statusBar().showMessage(f"session saved in {where}", 8000)
        self.prepare_view()

    def ask_export(self) -> None:
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export the view", "view.png",
                                                        "PNG image (*.png);;SVG drawing (*.svg)")
        if path:
            try:
                export_widget(self.tabs.currentWidget(), Path(path))
            except NicrigError as exc:
                self.show_error("Export failed", str(exc))

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.cancel_jobs(wait=True)
        if self.doc is not None:
            self.doc.close()
        super().closeEvent(event)


def export_widget(widget: QtWidgets.QWidget, path: Path) -> Path:
    """Save what ``widget`` shows as PNG (pixels) or SVG (vector), chosen by the file's suffix; written as every
    file nicrig writes (:func:`nicrig.atomic.replacing`: whole or not at all, a link at ``path`` replaced, never
    written through)."""
    suffix = path.suffix.lower()
    if suffix not in (".svg", ".png"):
        raise UsageError(f"{path}: export as .png or .svg")
    with replacing(path) as tmp:
        if suffix == ".svg":
            gen = QtSvg.QSvgGenerator()
            gen.setFileName(str(tmp))
            gen.setSize(widget.size())
            gen.setViewBox(widget.rect())
            gen.setTitle("nicrig view")
            painter = QtGui.QPainter(gen)
            try:
                widget.render(painter, QtCore.QPoint())
            finally:
                painter.end()
        elif not widget.grab().save(str(tmp), "PNG"):
            raise UsageError(f"{path}: cannot write the image")
    return path


# what the process holds once the window's modules are imported lives as long as it: frozen, never walked
heap.freeze_start_up()
