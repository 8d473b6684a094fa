"""Progress of long commands on standard error: a rich bar on a terminal, else a line every few seconds.

Every long command (decode, simulate, import, export, verify, report, trace
export, udpmon latency, stream, suite and sweeps) reports through :class:`Progress`, so a run whose standard
error goes to a log or a pipe (a batch job, ``2>run.log``, CI) still shows it
is alive: ``nicrig udpmon stream: 3 of 12 streams (25%), 9 s``, written every
``NICRIG_PROGRESS_S`` seconds (default 5; the first after one interval, so
short runs print nothing) while the work goes on, even within one long step.
``NICRIG_PROGRESS_S=0`` writes a line at every step instead.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any, TextIO

DEFAULT_INTERVAL_S = 5.0


def interval_s() -> float:
    """Seconds between progress lines off a terminal: ``NICRIG_PROGRESS_S`` if it is a number >= 0, else 5."""
    try:
        value = float(os.environ.get("NICRIG_PROGRESS_S", ""))
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value >= 0 else DEFAULT_INTERVAL_S


def progress_line(label: str, done: float, total: float | None, unit: str, elapsed_s: float) -> str:
    """One line of progress: ``nicrig udpmon stream: 3 of 12 streams (25%), 9 s``; a task that counts
    nothing (no total, no unit) says only how long it has run."""
    if total is None and not unit:
        return f"nicrig {label}, {elapsed_s:.0f} s"
    count = f"{done:,.0f} of {total:,.0f} {unit}" if total else f"{done:,.0f} {unit}"
    share = f" ({100 * done / total:.0f}%)" if total else ""
    return f"nicrig {label}: {count.rstrip()}{share}, {elapsed_s:.0f} s"


class Progress:
    """Tasks of one long command: ``with Progress() as p: update = p.task(label, total, unit)``.

    ``update(done)``, or ``update(done, total)`` when the total is learnt late,
    moves the task. On a terminal each task is a rich bar, gone at the end;
    otherwise a line naming the task that moved last is written every
    :func:`interval_s` seconds.
    """

    def __init__(self, stream: TextIO | None = None, *, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.interval = interval_s()
        self._bar: Any = None
        self._start = 0.0
        self._current: tuple[str, float, float | None, str] | None = None
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def __enter__(self) -> Progress:
        self._start = self.clock()
        if self.tty:
            from rich.console import Console
            from rich.progress import BarColumn, TaskProgressColumn, TimeRemainingColumn
            from rich.progress import Progress as Bars

            # standard output stays where it goes: only when it is the terminal too do its lines pass above the bar
            self._bar = Bars("[progress.description]{task.description}", BarColumn(), TaskProgressColumn(),
                             TimeRemainingColumn(), console=Console(file=self.stream), transient=True,
                             redirect_stdout=sys.stdout.isatty())
            self._bar.start()
        elif self.interval > 0:
            self._ticker = threading.Thread(target=self._tick, name="nicrig-progress", daemon=True)
            # The ticker is born with every signal blocked, so the kernel delivers Ctrl+C and SIGTERM to the
            # main thread: there they interrupt the blocking call (a paced send, a socket read) at once.
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
            try:
                self._ticker.start()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            self._write()

    def _write(self) -> None:
        current = self._current
        if current is not None:
            print(progress_line(*current, self.clock() - self._start), file=self.stream, flush=True)

    def task(self, label: str, total: float | None = None, unit: str = "") -> Callable[..., None]:
        """A new task named ``label`` counting ``unit``; returns ``update(done, total=None)``."""
        totals = [total]
        bar_task = self._bar.add_task(label, total=total) if self._bar is not None else None

        def update(done: float, new_total: float | None = None) -> None:
            if new_total is not None:
                totals[0] = new_total
            if self._bar is not None:
                self._bar.update(bar_task, completed=done, total=totals[0])
                return
            self._current = (label, done, totals[0], unit)
            if self.interval == 0:
                self._write()
        return update
