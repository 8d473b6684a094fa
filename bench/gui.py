"""GUI speed on a deep capture: time to a first view, and redraw time of zoom and pan.

Goals: a 100 M-sample capture opens with a first view in under a
second, and zoom/pan redraws in under 50 ms, on the project's 2-core machine.
The capture is simulated (a 1400-byte stream, Intel PRO/1000 on 64-bit 66 MHz
PCI: both buses in state mode and the GMII probe) and decoded; the GUI runs
offscreen (``QT_QPA_PLATFORM=offscreen``), which paints into memory as a
window does.

Measured, each as the median (and worst) of repeated runs:

* open, no overview cached: ``MainWindow(file)`` to the first view painted
  (the overview then builds in the background; its time is reported too);
* open, overview cached: the same with the overview beside the file;
* redraw: a zoom or pan step (``setXRange``) to the lanes recomputed and the
  view painted, at zoom levels from the whole capture to a few clocks.

Run: ``.venv/bin/python bench/gui.py`` (``--samples 100e6``; ``--keep DIR`` to reuse the capture).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

GOAL_OPEN_S = 1.0
GOAL_REDRAW_S = 0.050
SAMPLES_PER_US = 66.666667 * 2 + 125.0  # two 66.67 MHz buses and the 125 MHz probe
SPACING_US = 40.0


def _nicrig(*args: str) -> None:
    exe = Path(sys.executable).with_name("nicrig")
    subprocess.run([str(exe), *args], check=True, stdout=subprocess.DEVNULL)


def make_capture(folder: Path, samples: float, decode: bool) -> Path:
    out = folder / f"deep-{samples:.0e}.h5"
    if not out.exists():
        count = int(samples / SAMPLES_PER_US / SPACING_US)
        t = time.perf_counter()
        _nicrig("simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66", "--size", "1400",
                "--spacing-us", str(SPACING_US), "--count", str(count), "--rounds", "1", "--capture-count", "0",
                "-o", str(out))
        print(f"simulated {out.name} in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        if decode:
            t = time.perf_counter()
            _nicrig("decode", str(out))
            print(f"decoded in {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return out


def _clear_overview(path: Path) -> None:
    from nicrig.gui.overview import cache_paths

    for folder in cache_paths(path):
        shutil.rmtree(folder, ignore_errors=True)


def time_open(app, path: Path) -> tuple[float, object]:
    from nicrig.gui.app import MainWindow

    t = time.perf_counter()
    w = MainWindow([path])
    w.resize(1600, 1000)
    w.show()
    app.processEvents()
    w.timeline.redraw()
    w.timeline.plot.viewport().repaint()
    return time.perf_counter() - t, w


def time_redraws(app, window, steps: int) -> list[tuple[str, float, float, int]]:
    """Per zoom level: (what, median s, worst s, samples in view) of zoom and pan steps."""
    tl = window.timeline
    lo, hi = window.doc.extent_ns()
    rows = []
    span = hi - lo
    while span > 200:
        times = []
        centre = lo + (hi - lo) * 0.37
        for k in range(steps):
            # alternate a zoom step and a pan step, as a user does with wheel and drag
            width = span * (1.25 if k % 2 else 1.0)
            c = centre + (k - steps / 2) * span * 0.1
            t = time.perf_counter()
            tl.vb.setXRange(c - width / 2, c + width / 2, padding=0)
            tl.plot.viewport().repaint()
            times.append(time.perf_counter() - t)
        app.processEvents()
        n = sum(d.estimated_samples((c - span / 2) * 1000, (c + span / 2) * 1000) for d in window.doc.data.values())
        rows.append((f"{span / 1000:,.1f} us wide", statistics.median(times), max(times), n))
        span /= 10
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=float, default=100e6, help="total samples of the capture (default 100e6)")
    ap.add_argument("--keep", type=Path, help="folder to keep (and reuse) the capture in")
    ap.add_argument("--no-decode", action="store_true", help="do not decode (no decoded lanes)")
    ap.add_argument("--repeat", type=int, default=5, help="opening runs per case")
    ap.add_argument("--steps", type=int, default=20, help="redraws per zoom level")
    args = ap.parse_args()

    from PySide6 import QtWidgets

    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["bench"])
    folder = args.keep or Path(tempfile.mkdtemp(prefix="nicrig-bench-gui-"))
    folder.mkdir(parents=True, exist_ok=True)
    try:
        path = make_capture(folder, args.samples, not args.no_decode)
        from nicrig.acquisition.capture import CaptureSet

        with CaptureSet.open(path) as cs:
            sizes = {n: s.num_samples for n, s in cs.sources.items()}
            tables = {t: cs.table_info(t)["rows"] for t in cs.table_names() if t.startswith("decoded/")}
        total = sum(sizes.values())
        print(f"capture: {path.name}, {total:,} samples ({', '.join(f'{n} {v:,}' for n, v in sizes.items())}), "
              f"{path.stat().st_size / 1e6:.0f} MB; decoded rows: {sum(tables.values()):,}")

        cold, build = [], []
        for _ in range(args.repeat):
            _clear_overview(path)
            s, w = time_open(app, path)
            cold.append(s)
            t = time.perf_counter()
            w.wait_jobs()
            build.append(time.perf_counter() - t + s)
            w.close()
            w.deleteLater()
            app.processEvents()
        warm = []
        for _ in range(args.repeat):
            s, w = time_open(app, path)
            warm.append(s)
            if len(warm) < args.repeat:
                w.close()
                w.deleteLater()
                app.processEvents()
        redraws = time_redraws(app, w, args.steps)
        w.close()
        w.deleteLater()
        app.processEvents()

        print()
        print(f"{'case':44s} {'median s':>9s} {'worst s':>8s}  goal")
        print(f"{'open, no overview cached: first view':44s} {statistics.median(cold):9.3f} {max(cold):8.3f}"
              f"  < {GOAL_OPEN_S:g} s")
        print(f"{'open, no overview cached: overview complete':44s} {statistics.median(build):9.3f} "
              f"{max(build):8.3f}  (background)")
        print(f"{'open, overview cached: first view (all)':44s} {statistics.median(warm):9.3f} {max(warm):8.3f}"
              f"  < {GOAL_OPEN_S:g} s")
        print()
        print(f"{'zoom/pan redraw, view':44s} {'median ms':>9s} {'worst ms':>8s}  samples in view")
        for what, med, worst, n in redraws:
            print(f"{what:44s} {med * 1000:9.1f} {worst * 1000:8.1f}  {n:,}")
        worst_med = max(r[1] for r in redraws)
        print()
        print(f"first view: {statistics.median(cold):.3f} s cold, {statistics.median(warm):.3f} s cached = "
              f"{max(statistics.median(cold), statistics.median(warm)) / GOAL_OPEN_S:.2f} x the {GOAL_OPEN_S:g} s goal")
        print(f"redraw: worst median {worst_med * 1000:.1f} ms = {worst_med / GOAL_REDRAW_S:.2f} x the "
              f"{GOAL_REDRAW_S * 1000:g} ms goal")
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
