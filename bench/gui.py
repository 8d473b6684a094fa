"""GUI speed on deep captures: first view, overview, and every input's time to its painted frame.

A lab engineer's capture is deep: a logic analyzer's full memory on both buses plus the probe. The
captures are simulated (a 1400-byte stream every 40 us, Intel PRO/1000 on 64-bit 66 MHz PCI: both
buses in state mode and the GMII probe) at ``--samples`` (default 100 M and 1 G samples in all) and
decoded (``nicrig decode``); each is measured as the user opens it after decoding, and without its
decoded tables (the same capture file under another name, without the companion that holds them).
The GUI runs offscreen (``QT_QPA_PLATFORM=offscreen``), which paints into memory as a window does,
1600x1000, in a fresh process per case (its memory is the case's own).

Measured per case, each input timed from the event (sent as Qt sends a user's: key presses, wheel
turns, mouse drags and clicks) to the frame it causes painted, in wall time and in the GUI thread's CPU
time (the machine is shared: the CPU time is what the GUI itself spent):

* first view, no overview cached: ``MainWindow(file)`` to the first frame (what is not prepared yet is
  drawn as loading), then the decoded lanes drawn, the overview complete and the search index ready,
  all prepared in the background (``--repeat`` openings), and the CPU time the preparing process took
  (its two threads' sum: the machine's load does not move it as it moves wall times);
* first view, overview cached (``--repeat`` openings);
* redraw: a zoom in, zoom out and pan by keys and wheel at views from the whole capture to 0.4 us
  (``--steps`` inputs each), once the window has listed its events;
* a scripted session (decoded cases): open, zoom in by 10 wheel turns to one PCI transaction, pan by
  20 mouse drags, search an event in the event table, jump to it (a click on its row), zoom out
  (Ctrl+0);
* memory: the GUI process's resident set at its largest, and the preparing process's;
* the machine's floor, in the same process: wheel turns to their frames on an empty plot of the same size.

Ratios are to the goals: a first view <= 1 s cold and <= 0.5 s cached, the overview <= 10 s, every
redraw <= 16 ms median (one frame at 60 Hz) and <= 33 ms worst, < 2 GB resident; the redraws' medians are
also given over the floor's, and the baseline's over this version's.

Run: ``.venv/bin/python bench/gui.py`` (``--samples 1e8,1e9``; ``--keep DIR`` to keep the captures
and reuse them: the 1 G-sample one takes several minutes to simulate and decode and 470 MB).
``--baseline-python CLONE/.venv/bin/python`` measures the same cases with an earlier version (a clone
with its own venv) in the same run and shows its medians in brackets; ``--verbose`` also lists each session
input's times in order (which wheel turn or drag is the worst), with the time the GUI thread was blocked in it:
its wall time less its CPU time and its wait for a CPU (Linux's schedstat), what it waited for besides the
machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

FRAME_S = 1 / 60
GOAL_COLD_S = 1.0
GOAL_CACHED_S = 0.5
GOAL_OVERVIEW_S = 10.0
GOAL_WORST_S = 0.033
GOAL_RSS_MB = 2048
SAMPLES_PER_US = 66.666667 * 2 + 125.0  # two 66.67 MHz buses and the 125 MHz probe
SPACING_US = 40.0
SIZE = (1600, 1000)
#: Views of the redraw cases (ns wide; None: the whole capture).
VIEWS_NS = (None, 4e6, 4e5, 4e4, 4e3, 400.0)


def _nicrig(*args: str) -> None:
    exe = Path(sys.executable).with_name("nicrig")
    subprocess.run([str(exe), *args], check=True, stdout=subprocess.DEVNULL)


def make_capture(folder: Path, samples: float) -> tuple[Path, Path]:
    """The decoded capture (simulated when not in ``folder`` yet, decoded unless up to date) and the same capture
    without its decoded tables (a second name of the file: its companion, which holds them, is not beside it)."""
    out = folder / f"deep-{samples:.0e}.h5"
    if not out.exists():
        count = int(samples / SAMPLES_PER_US / SPACING_US)
        t = time.perf_counter()
        _nicrig("simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66", "--size", "1400",
                "--spacing-us", str(SPACING_US), "--count", str(count), "--rounds", "1", "--capture-count", "0",
                "-o", str(out))
        print(f"simulated {out.name} in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    # Also for a capture kept from a run stopped while decoding: decode skips the tables already up to date.
    t = time.perf_counter()
    _nicrig("decode", str(out))
    print(f"decoded in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    raw = folder / f"raw-{samples:.0e}.h5"
    if not raw.exists():
        os.link(out, raw)
    return out, raw


# -- one case, in a process of its own -------------------------------------------------------------------------

def frames(viewport: Any) -> Any:
    """A counter of the frames ``viewport`` paints (an event filter on it: a paint event it sees is painted by the
    time the event loop returns)."""
    from PySide6 import QtCore

    class Frames(QtCore.QObject):
        count = 0

        def eventFilter(self, obj: Any, ev: Any) -> bool:  # noqa: N802 - Qt's name
            if ev.type() == QtCore.QEvent.Type.Paint:
                self.count += 1
            return False

    counter = Frames(viewport)
    viewport.installEventFilter(counter)
    return counter


class Clock:
    """Times from an input to the next frame the timeline paints."""

    def __init__(self, app: Any, counter: Any):
        self.app, self.frames = app, counter

    def settle(self) -> None:
        from PySide6 import QtCore

        for _ in range(3):
            self.app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.AllEvents)

    def frame(self, send: Any, after_s: float = 0.0) -> tuple[float, float, float]:
        """(wall s, GUI thread CPU s, its wait for a CPU s: :func:`queued_s`) from calling ``send()`` (which sends
        the input) to the frame it causes, sent at least ``after_s`` after the previous frame."""
        self.settle()
        time.sleep(after_s)
        before = self.frames.count
        w0, c0, q0 = time.perf_counter(), time.thread_time(), queued_s()
        send()
        wait_until(self.app, lambda: self.frames.count != before, 60.0)
        return time.perf_counter() - w0, time.thread_time() - c0, queued_s() - q0


def queued_s() -> float:
    """How long (s) the calling thread has waited, runnable, for a CPU (Linux's per-thread schedstat; 0 where there
    is none): an input's wall time less its CPU time and this wait is the time its thread was blocked (on a lock,
    another thread, or the event loop asleep until its next event: a few ms at times on an empty plot)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def wait_until(app: Any, done: Any, timeout_s: float = 1800.0) -> None:
    """Run the event loop as a window's does (asleep until an event comes) until ``done()``."""
    from PySide6 import QtCore

    tick = QtCore.QTimer(interval=5)  # wakes the loop to look at done() again
    tick.start()
    start = time.perf_counter()
    while not done():
        app.processEvents(QtCore.QEventLoop.ProcessEventsFlag.WaitForMoreEvents)
        if time.perf_counter() - start > timeout_s:
            raise RuntimeError("the window did not get there")
    tick.stop()


def _wheel(widget: Any, x: float, steps: float) -> None:
    """A wheel turn of ``steps`` notches (positive: away from the user, zoom in) at ``x`` pixels of ``widget``."""
    from PySide6 import QtCore, QtGui, QtWidgets

    pos = QtCore.QPointF(x, widget.height() / 2)
    ev = QtGui.QWheelEvent(pos, widget.mapToGlobal(pos), QtCore.QPoint(0, 0), QtCore.QPoint(0, round(120 * steps)),
                           QtCore.Qt.MouseButton.NoButton, QtCore.Qt.KeyboardModifier.NoModifier,
                           QtCore.Qt.ScrollPhase.NoScrollPhase, False)
    QtWidgets.QApplication.sendEvent(widget, ev)


def _drag(widget: Any, dx: int) -> None:
    from PySide6 import QtCore
    from PySide6.QtTest import QTest

    left = QtCore.Qt.MouseButton.LeftButton
    y = widget.height() // 2
    start = QtCore.QPoint(widget.width() // 2, y)
    QTest.mousePress(widget, left, QtCore.Qt.KeyboardModifier.NoModifier, start)
    QTest.mouseMove(widget, QtCore.QPoint(start.x() + dx, y))
    QTest.mouseRelease(widget, left, QtCore.Qt.KeyboardModifier.NoModifier, QtCore.QPoint(start.x() + dx, y))


def _key(widget: Any, key: Any, ctrl: bool = False) -> None:
    from PySide6 import QtCore
    from PySide6.QtTest import QTest

    QTest.keyClick(widget, key, QtCore.Qt.KeyboardModifier.ControlModifier if ctrl else
                   QtCore.Qt.KeyboardModifier.NoModifier)


def _x_of(window: Any, t_ns: float) -> float:
    """The viewport's x (pixels) of time ``t_ns``."""
    from PySide6 import QtCore

    tl = window.timeline
    return tl.plot.mapFromScene(tl.vb.mapViewToScene(QtCore.QPointF(t_ns, 0))).x()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _open(app: Any, path: Path) -> tuple[Any, float, float]:
    """A window on ``path``: (window, wall s, CPU s) to its first frame."""
    from nicrig.gui.app import MainWindow

    w0, c0 = time.perf_counter(), time.thread_time()
    window = MainWindow([path])
    window.frames = frames(window.timeline.plot.viewport())
    window.resize(*SIZE)
    window.show()
    plot = window.timeline.plot
    wait_until(app, lambda: window.frames.count > 0)
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    window.activateWindow()  # keys go to the timeline, as after a click into it
    plot.setFocus()
    wait_until(app, plot.hasFocus, 10.0)
    return window, wall, cpu


def _close(app: Any, window: Any) -> None:
    """Close ``window`` and delete it as the event loop of a running application would (processEvents alone
    keeps deferred deletions: every window would stay in memory)."""
    from PySide6 import QtCore

    window.close()
    window.deleteLater()
    QtCore.QCoreApplication.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete.value)
    app.processEvents()


def _opened_cold(app: Any, path: Path) -> dict[str, Any]:
    """First view with nothing prepared, then when each prepared part is shown."""
    from nicrig.gui.overview import cache_paths

    for folder in cache_paths(path):
        shutil.rmtree(folder, ignore_errors=True)
    window, wall, cpu = _open(app, path)
    t0 = time.perf_counter() - wall
    doc = window.doc
    seen: dict[str, float] = {}

    # a version that read the decoded tables whole drew their lanes in the first view, and described the events
    # for a search when the first came
    decoded = getattr(doc, "decoded", {})

    def look() -> bool:
        now = time.perf_counter() - t0
        if all(t.arrays is not None for t in decoded.values()):
            seen.setdefault("lanes", wall if not hasattr(doc, "decoded") else now)
        if all(d.pyramid.complete for d in doc.data.values()):
            seen.setdefault("overview", now)
        if all(t.text is not None for t in decoded.values()):
            seen.setdefault("text", now)
        return not window.jobs

    wait_until(app, look)
    end = time.perf_counter() - t0
    _close(app, window)
    return {"first": wall, "first_cpu": cpu, "lanes": seen.get("lanes", end), "overview": seen.get("overview", end),
            "text": seen["text"] if hasattr(doc, "decoded") else None}


def _redraws(app: Any, window: Any, steps: int) -> list[dict[str, Any]]:
    """Per view: the times of ``steps`` inputs alternating zoom in, zoom out (keys, then the wheel) and pan."""
    from PySide6 import QtCore

    clock = Clock(app, window.frames)
    tl = window.timeline
    lo, hi = window.doc.extent_ns()
    out = []
    for width in VIEWS_NS:
        span = (hi - lo) if width is None else width
        centre = lo + 0.37 * (hi - lo)
        tl.vb.setXRange(centre - span / 2, centre + span / 2, padding=0)
        clock.settle()
        times = []
        for k in range(steps):
            kind = k % 4
            if kind == 0:
                send = (lambda: _key(tl.plot, QtCore.Qt.Key.Key_Plus, ctrl=True))
            elif kind == 1:
                send = (lambda: _key(tl.plot, QtCore.Qt.Key.Key_Minus, ctrl=True))
            elif kind == 2:
                send = (lambda: _key(tl.plot, QtCore.Qt.Key.Key_Right if k % 8 == 2 else QtCore.Qt.Key.Key_Left))
            else:
                send = (lambda: _wheel(tl.plot.viewport(), tl.plot.viewport().width() / 2, 1 if k % 8 == 3 else -1))
            times.append(clock.frame(send))
        out.append({"view": "whole capture" if width is None else width, "wall": [t[0] for t in times],
                    "cpu": [t[1] for t in times]})
    return out


def _session(app: Any, path: Path) -> dict[str, Any]:
    """Open, zoom in to one transaction, pan, search an event, jump to it, zoom out."""
    import numpy as np
    import pyqtgraph as pg
    from nicrig.gui.events import KINDS
    from PySide6 import QtCore
    from PySide6.QtTest import QTest

    q0 = queued_s()
    window, wall, cpu = _open(app, path)
    steps: dict[str, list[tuple[float, float, float]]] = {"open": [(wall, cpu, queued_s() - q0)]}
    window.wait_jobs()
    clock = Clock(app, window.frames)
    tl = window.timeline
    tl.zoom_all()
    clock.settle()
    pci = next(ln for ln in window.doc.lanes if ln.id.endswith("/decoded/pci") and ln.boxes is not None)
    target = int(np.searchsorted(pci.boxes.t_ns, 0.61 * float(pci.boxes.t_ns[-1])))
    t_target = (float(pci.boxes.t_ns[target]) + float(pci.boxes.t_end_ns[target])) / 2 + \
        window.doc.session.offset(pci.source)
    goal = 4 * max(float(pci.boxes.t_end_ns[target] - pci.boxes.t_ns[target]), 50.0)
    lo, hi = tl.view_range()
    notches = np.log(goal / (hi - lo)) / np.log(1.02 ** (-15)) / 10  # pyqtgraph: 1.02 ** (-delta / 8) per turn
    vp = tl.plot.viewport()
    steps["zoom in (wheel)"] = [clock.frame(lambda: _wheel(vp, _x_of(window, t_target), notches)) for _ in range(10)]
    # pyqtgraph takes at most mouseRateLimit moves a second and drops the others: a drag whose one move comes
    # sooner after the last drag's would be taken for a click (a hand's drags are further apart)
    apart = 1.0 / pg.getConfigOption("mouseRateLimit")
    steps["pan (drag)"] = [clock.frame(lambda k=k: _drag(vp, 160 if k % 4 < 2 else -160), apart) for k in range(20)]
    events = window.events
    seq = None
    for k in range(len(events.events)):
        kind = events.events.kind[k]
        if (kind.decode() if isinstance(kind, bytes) else KINDS[kind]) == "frame":
            seq = k
            if k > len(events.events) // 2:
                break
    text = events.events.text(seq)
    words = text.split()
    needle = " ".join(words[:4])  # "UDP seq N 1400": one frame

    def search() -> None:
        events.search.setFocus()
        events.search.selectAll()
        QTest.keyClicks(events.search, needle)
        QTest.keyClick(events.search, QtCore.Qt.Key.Key_Return)

    w0, c0, q0 = time.perf_counter(), time.thread_time(), queued_s()
    search()
    wait_until(app, lambda: not events.count.text().startswith("searching") and not window.jobs)
    clock.settle()
    steps["search an event"] = [(time.perf_counter() - w0, time.thread_time() - c0, queued_s() - q0)]
    found = len(events.model.rows)

    def click() -> None:
        rect = events.view.visualRect(events.model.index(0, 5))
        QTest.mouseClick(events.view.viewport(), QtCore.Qt.MouseButton.LeftButton, pos=rect.center())

    steps["jump to it (click its row)"] = [clock.frame(click)]
    steps["zoom out (Ctrl+0)"] = [clock.frame(lambda: _key(tl.plot, QtCore.Qt.Key.Key_0, ctrl=True))]
    _close(app, window)
    return {"steps": {k: {"wall": [t[0] for t in v], "cpu": [t[1] for t in v], "queued": [t[2] for t in v]}
                      for k, v in steps.items()},
            "search": needle, "found": found}


def _floor(app: Any, steps: int) -> dict[str, list[float]]:
    """The machine's floor: wheel turns (zoom in and out) to their painted frames on an empty pyqtgraph plot of the
    window's size: what Qt and the view cost on this machine, at this moment, with nothing to draw."""
    import pyqtgraph as pg

    plot = pg.PlotWidget()
    plot.resize(*SIZE)
    plot.show()
    plot.setXRange(0.0, 1e9, padding=0)
    vp = plot.viewport()
    counter = frames(vp)
    wait_until(app, lambda: counter.count > 0)
    clock = Clock(app, counter)
    times = [clock.frame(lambda k=k: _wheel(vp, vp.width() * (0.3 + 0.1 * (k % 4)), 1 if k % 2 else -1))
             for k in range(steps * len(VIEWS_NS))]
    plot.close()
    plot.deleteLater()
    app.processEvents()
    return {"wall": [t[0] for t in times], "cpu": [t[1] for t in times]}


def run_case(path: Path, repeat: int, steps: int, session: bool) -> dict[str, Any]:
    """Every measurement of one capture (this process's own)."""
    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["bench"])
    cold = [_opened_cold(app, path) for _ in range(repeat)]
    rss_cold = _rss_mb()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)  # the preparing processes, ended and reaped
    prepare_cpu = (children.ru_utime + children.ru_stime) / repeat
    cached = []
    for _ in range(repeat):
        window, wall, cpu = _open(app, path)
        cached.append((wall, cpu))
        if len(cached) < repeat:
            _close(app, window)
    # the redraws of the window as it is once it has listed its events: while it lists them (0.4 s at 1 G) a
    # thread of its own holds the interpreter for tens of ms at a time, which the first view's case measures
    window.wait_jobs()
    redraws = _redraws(app, window, steps)
    _close(app, window)
    out = {"cold": cold, "cached": cached, "redraws": redraws, "floor": _floor(app, steps), "rss_mb": rss_cold,
           "prepare_cpu_s": prepare_cpu,
           "rss_children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}
    if session:
        out["session"] = _session(app, path)
    out["rss_mb"] = max(out["rss_mb"], _rss_mb())
    return out


# -- the table ---------------------------------------------------------------------------------------------------

def _ms(values: list[float]) -> str:
    return f"{statistics.median(values) * 1000:.0f} / {max(values) * 1000:.0f}"


def _s(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} / {max(values):.2f}"


def table(results: dict[str, dict[str, Any]], before: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """One row per measurement, one column per case: median / worst (wall time), the median's ratio to its goal,
    and the median of the version ``before`` in brackets."""
    cases = list(results)
    rows: list[tuple[str, list[str], str]] = []

    def row(what: str, goal_text: str, values: Any, unit: str, goal: float | None = None) -> None:
        cells = []
        for c in cases:
            got = values(results[c])
            if not got:
                cells.append("-")
                continue
            text = _ms(got) if unit == "ms" else _s(got)
            if goal:
                text += f" {statistics.median(got) / goal:.2f}x"
            old = values(before[c]) if before and c in before else None
            if old:
                text += f" ({statistics.median(old) * (1000 if unit == 'ms' else 1):.{0 if unit == 'ms' else 2}f})"
            cells.append(text)
        rows.append((f"{what} ({unit})", cells, goal_text))

    def cold(key: str) -> Any:
        return lambda r: [c[key] for c in r["cold"] if c.get(key) is not None] if r["decoded"] or key != "text" else []

    row("first view, no overview cached", f"<= {GOAL_COLD_S:g} s", cold("first"), "s", GOAL_COLD_S)
    row("  GUI thread CPU", "", cold("first_cpu"), "s")
    row("  decoded lanes drawn", "", lambda r: cold("lanes")(r) if r["decoded"] else [], "s")
    row("  overview complete", f"<= {GOAL_OVERVIEW_S:g} s", cold("overview"), "s", GOAL_OVERVIEW_S)
    row("  search index ready", "", cold("text"), "s")
    row("  preparing process CPU, all of it", "", lambda r: [r["prepare_cpu_s"]] if r.get("prepare_cpu_s") else [],
        "s")
    row("first view, overview cached", f"<= {GOAL_CACHED_S:g} s", lambda r: [w for w, _ in r["cached"]], "s",
        GOAL_CACHED_S)
    row("  GUI thread CPU", "", lambda r: [c for _, c in r["cached"]], "s")
    for k, width in enumerate(VIEWS_NS):
        name = "whole capture" if width is None else (f"{width / 1e6:g} ms" if width >= 1e6 else f"{width / 1e3:g} us")
        row(f"redraw, {name} in view", "<= 16 / 33 ms", lambda r, k=k: r["redraws"][k]["wall"], "ms", FRAME_S)
        row("  GUI thread CPU", "", lambda r, k=k: r["redraws"][k]["cpu"], "ms")
    row("floor: empty plot, wheel turns", "", lambda r: r["floor"]["wall"] if "floor" in r else [], "ms")
    row("  GUI thread CPU", "", lambda r: r["floor"]["cpu"] if "floor" in r else [], "ms")
    steps = next((r["session"]["steps"] for r in results.values() if "session" in r), {})
    for step in steps:
        unit = "s" if step == "open" else "ms"
        goal = (GOAL_CACHED_S, f"<= {GOAL_CACHED_S:g} s") if step == "open" else (FRAME_S, "<= 16 / 33 ms")
        row(f"session: {step}", goal[1], lambda r, step=step: r["session"]["steps"][step]["wall"]
            if "session" in r else [], unit, goal[0])
        row("  GUI thread CPU", "", lambda r, step=step: r["session"]["steps"][step]["cpu"] if "session" in r else [],
            unit)
    row("largest resident set, GUI", f"< {GOAL_RSS_MB / 1024:g} GB", lambda r: [r["rss_mb"] / 1024], "GB",
        GOAL_RSS_MB / 1024)
    row("  preparing process", "", lambda r: [r["rss_children_mb"] / 1024] if r["rss_children_mb"] else [], "GB")
    width = max(len(w) for w, _, _ in rows)
    cols = [max([len(c)] + [len(cells[i]) for _, cells, _ in rows]) for i, c in enumerate(cases)]
    out = ["  ".join([f"{'median / worst, x goal (before)':{width}s}"] + [f"{c:>{n}s}" for c, n in zip(cases, cols)]
                     + ["goal"])]
    for what, cells, goal in rows:
        out.append("  ".join([f"{what:{width}s}"] + [f"{c:>{n}s}" for c, n in zip(cells, cols)] + [goal]).rstrip())
    return out


def ratios(results: dict[str, dict[str, Any]], before: dict[str, dict[str, Any]]) -> list[str]:
    """Per case: the redraws' medians (GUI thread CPU in brackets) over the floor's, measured in the same process,
    and the version ``before``'s over this one's."""
    out = []
    for case, r in results.items():
        def medians(res: dict[str, Any], key: str) -> list[float]:
            return [statistics.median(v[key]) for v in res["redraws"]]

        wall, cpu = medians(r, "wall"), medians(r, "cpu")
        line = (f"{case}: redraw medians {min(wall) * 1000:.0f}-{max(wall) * 1000:.0f} ms = "
                f"{min(wall) / statistics.median(r['floor']['wall']):.1f}-"
                f"{max(wall) / statistics.median(r['floor']['wall']):.1f}x the floor "
                f"(CPU {min(cpu) / statistics.median(r['floor']['cpu']):.1f}-"
                f"{max(cpu) / statistics.median(r['floor']['cpu']):.1f}x)")
        if case in before:
            old = medians(before[case], "wall")
            cold = statistics.median([c["first"] for c in before[case]["cold"]]) / \
                statistics.median([c["first"] for c in r["cold"]])
            line += (f"; the baseline's redraws {min(o / n for o, n in zip(old, wall)):.1f}-"
                     f"{max(o / n for o, n in zip(old, wall)):.1f}x slower, its cold first view {cold:.1f}x")
        out.append(line)
    return out


def session_inputs(results: dict[str, dict[str, Any]], before: dict[str, dict[str, Any]]) -> list[str]:
    """Each session step's inputs in order, ``wall/CPU/blocked`` ms each (blocked: the wall time less the GUI
    thread's CPU time and its wait for a CPU), per case and version."""
    out = []
    for version, res in (("", results), (" (baseline)", before)):
        for case, r in res.items():
            for step, times in r.get("session", {}).get("steps", {}).items():
                if step != "open":
                    each = " ".join(f"{w * 1000:.0f}/{c * 1000:.0f}/{max(w - c - q, 0.0) * 1000:.0f}"
                                    for w, c, q in zip(times["wall"], times["cpu"], times["queued"]))
                    out.append(f"{case}{version}, session: {step}, each input's wall/CPU/blocked (ms): {each}")
    return out


def _linked(folder: Path, tag: str, path: Path, decoded: bool) -> Path:
    """A second name of the capture (with its companion when ``decoded``): each version keeps its own cache."""
    from nicrig.companion import companion_path

    out = folder / f"{tag}-{path.name}"
    if not out.exists():
        os.link(path, out)
    if decoded and not companion_path(out).exists():
        os.link(companion_path(path), companion_path(out))
    return out


def measure(python: str, path: Path, args: argparse.Namespace, session: bool) -> dict[str, Any]:
    """One case in a process of its own, run by ``python`` (its nicrig is the version measured)."""
    cmd = [python, __file__, "--case", str(path), "--repeat", str(args.repeat), "--steps", str(args.steps)]
    done = subprocess.run(cmd + (["--session"] if session else []), check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", default="1e8,1e9", help="total samples of each capture, comma-separated (1e8,1e9)")
    ap.add_argument("--keep", type=Path, help="folder to keep (and reuse) the captures in")
    ap.add_argument("--repeat", type=int, default=3, help="openings per case (3)")
    ap.add_argument("--steps", type=int, default=12, help="inputs per view of the redraw cases (12)")
    ap.add_argument("--baseline-python", help="the Python of another nicrig install (a clone of an earlier "
                                              "version with its own venv): its medians in brackets, same run")
    ap.add_argument("--verbose", action="store_true",
                    help="also each session input's wall and CPU time and the time its thread was blocked, in order "
                         "(which turn or drag is the worst, and why)")
    ap.add_argument("--case", type=Path, help=argparse.SUPPRESS)  # one case, in this process: JSON on stdout
    ap.add_argument("--session", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.case is not None:
        print(json.dumps(run_case(args.case, args.repeat, args.steps, args.session)))
        return 0

    folder = args.keep or Path(tempfile.mkdtemp(prefix="nicrig-bench-gui-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        results: dict[str, dict[str, Any]] = {}
        before: dict[str, dict[str, Any]] = {}
        load0 = os.getloadavg()
        for samples in (float(s) for s in args.samples.split(",")):
            decoded, raw = make_capture(folder, samples)
            from nicrig.acquisition.capture import CaptureSet

            with CaptureSet.open(decoded) as cs:
                total = sum(s.num_samples for s in cs.sources.values())
                rows = sum(cs.table_info(t)["rows"] for t in cs.table_names() if t.startswith("decoded/"))
            print(f"{decoded.name}: {total:,} samples, {decoded.stat().st_size / 1e6:.0f} MB, "
                  f"{rows:,} decoded rows", file=sys.stderr)
            for path, is_decoded in ((raw, False), (decoded, True)):
                name = f"{samples / 1e6:g} M{' decoded' if is_decoded else ''}"
                results[name] = {**measure(sys.executable, path, args, is_decoded), "decoded": is_decoded}
                print(f"measured {name}", file=sys.stderr)
                if args.baseline_python:
                    base = _linked(folder, "baseline", path, is_decoded)
                    before[name] = {**measure(args.baseline_python, base, args, is_decoded), "decoded": is_decoded}
                    print(f"measured {name} with the baseline", file=sys.stderr)
        load1 = os.getloadavg()
        print(f"machine: {os.cpu_count()} CPUs; load average before: {' '.join(f'{v:.2f}' for v in load0)}, "
              f"after: {' '.join(f'{v:.2f}' for v in load1)}")
        for line in table(results, before) + ratios(results, before):
            print(line)
        if args.verbose:
            for line in session_inputs(results, before):
                print(line)
        sessions = [r["session"] for r in results.values() if "session" in r]
        if sessions:
            print(f"session search: {sessions[0]['search']!r} found {sessions[0]['found']} event(s)")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
