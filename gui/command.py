"""``nicrig gui [FILE ...]``: the desktop GUI; ``--screenshot OUT.png`` renders offscreen and exits.

Qt is imported only when the command runs, so ``nicrig --help`` stays fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

VIEWS = ("window", "timeline", "events", "latency", "histograms", "stream")


def _pair(text: str, what: str) -> tuple[float, float]:
    from nicrig.errors import UsageError

    a, sep, b = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return float(a), float(b)
    except ValueError:
        raise UsageError(f"{what} {text!r}: give two numbers as FROM:TO") from None


def _size(text: str) -> tuple[int, int]:
    from nicrig.errors import UsageError

    w, sep, h = text.lower().partition("x")
    try:
        size = int(w), int(h)
    except ValueError:
        raise UsageError(f"--size {text!r}: give WIDTHxHEIGHT in pixels, e.g. 1600x900") from None
    if not sep or not (320 <= size[0] <= 8000 and 240 <= size[1] <= 8000):
        raise UsageError(f"--size {text!r}: 320x240 to 8000x8000 pixels")
    return size


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="*", type=Path, metavar="FILE",
                   help="a capture set and/or udpmon results files to open")
    p.add_argument("--screenshot", type=Path, metavar="OUT.png",
                   help="render offscreen into OUT.png (or .svg) and exit, without a display")
    p.add_argument("--view", choices=VIEWS, default="window",
                   help="what --screenshot shows: the whole window (default), the timeline, the event table, "
                        "or a results view")
    p.add_argument("--range", dest="range_us", metavar="FROM:TO",
                   help="time window to show, us from the trigger (default: the saved view or all)")
    p.add_argument("--cursors", metavar="A:B", help="cursor positions, us from the trigger")
    p.add_argument("--measure", action="store_true",
                   help="measure the range between the cursors and mark what was found (bus-level analysis)")
    p.add_argument("--size", default="1600x1000", metavar="WxH", help="window size for --screenshot (1600x1000)")


def _has_display() -> bool:
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def _quiet_offscreen(kind: object, context: object, message: str) -> None:
    """Qt's messages on stderr, less the offscreen platform's notice about size hints."""
    if "propagateSizeHints" not in message:
        sys.stderr.write(message + "\n")


def run(args: argparse.Namespace) -> int:
    from nicrig.errors import UsageError
    from nicrig.h5file import open_any

    size = _size(args.size)
    view_us = _pair(args.range_us, "--range") if args.range_us else None
    cursors_us = _pair(args.cursors, "--cursors") if args.cursors else None
    if args.screenshot is not None:
        if args.screenshot.suffix.lower() not in (".png", ".svg"):
            raise UsageError(f"--screenshot {args.screenshot}: name a .png or .svg file")
        folder = args.screenshot.parent if str(args.screenshot.parent) else Path(".")
        if not folder.is_dir():
            raise UsageError(f"--screenshot {args.screenshot}: folder {folder} does not exist")
    # The files named on the command line first, before any display: a missing or damaged file is the
    # error to fix, whatever the display (files opened later from the window get a dialog instead).
    for f in args.files:
        open_any(f).close()
    if args.screenshot is not None:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    elif not _has_display() and os.environ.get("QT_QPA_PLATFORM", "") != "offscreen":
        raise UsageError("no display (DISPLAY is not set): run nicrig gui on a desktop, "
                         "or render pictures with --screenshot OUT.png")

    from nicrig.gui.app import MainWindow
    from nicrig.gui.screenshot import render
    from PySide6 import QtCore, QtWidgets

    if args.screenshot is not None:
        # The offscreen platform warns that it cannot resize top-level windows
        # to their hints; a picture of a given size does not need that.
        QtCore.qInstallMessageHandler(_quiet_offscreen)
    app = QtWidgets.QApplication.instance() or QtWidgets.QApplication(["nicrig"])
    window = MainWindow(args.files)
    if args.screenshot is None:
        window.show()
        if view_us or cursors_us or args.measure:
            render(window, None, "window", view_us, cursors_us, args.measure, wait=False)
        return int(app.exec())
    if window.errors:
        raise UsageError("; ".join(window.errors))
    window.resize(*size)
    render(window, args.screenshot, args.view, view_us, cursors_us, args.measure)
    window.close()
    errors = window.errors
    # deleted now, not at the application's end: a program rendering many pictures in one process would keep
    # every window's mapped cache files (a descriptor each) open until then
    window.deleteLater()
    app.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
    del window
    if errors:
        raise UsageError("; ".join(errors))
    print(f"wrote {args.screenshot}")
    return 0
