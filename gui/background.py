"""Work off the GUI thread: decoding, analysis and preparing the view, with progress and cancel.

A :class:`Job` runs a function in a ``QThread``. The function gets a
``progress(done, total)`` callable; once the user cancels, that callable raises
:class:`Cancelled`, which is how nicrig's long operations are stopped (the
decode engine writes its tables atomically, so a cancelled run leaves the
file valid). Results and errors come back to the GUI thread as signals; an
error carries the library's own message (a :class:`NicrigError` says what to fix).
A function may also send messages (``message``) as it goes.

A :class:`ProcessJob` runs a Python module in a process of its own instead
(the view's preparation of a deep capture): its standard output is read one
JSON message a line, as Qt reports it, so the window's thread only ever
takes finished messages, and the interpreter it runs in is never shared with
the work.
"""

from __future__ import annotations

import json
import sys
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from PySide6 import QtCore

from nicrig.errors import NicrigError


class Cancelled(Exception):
    """The user cancelled the job."""


def error_text(exc: BaseException) -> str:
    """What the error dialog says: the library's message, or the exception for a bug."""
    if isinstance(exc, NicrigError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class Job(QtCore.QThread):
    """``fn(progress)`` in a thread. Signals: ``progressed(done, total)``, ``succeeded(result)``, ``failed(text)``."""

    progressed = QtCore.Signal(int, int)
    succeeded = QtCore.Signal(object)
    failed = QtCore.Signal(str)
    cancelled = QtCore.Signal()
    message = QtCore.Signal(object)

    def __init__(self, title: str, fn: Callable[[Callable[[int, int], None]], Any],
                 parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.title = title
        self._fn = fn
        self._cancel = False
        self.result: Any = None
        self.error: str | None = None

    def cancel(self) -> None:
        self._cancel = True

    @property
    def is_cancelled(self) -> bool:
        return self._cancel

    def _progress(self, done: int, total: int) -> None:
        if self._cancel:
            raise Cancelled()
        self.progressed.emit(int(min(done, 2**31 - 1)), int(min(total, 2**31 - 1)))

    def run(self) -> None:
        try:
            self.result = self._fn(self._progress)
        except Cancelled:
            self.cancelled.emit()
            return
        except BaseException as exc:  # noqa: BLE001 - every failure must reach the user as a dialog
            if self._cancel:
                self.cancelled.emit()
                return
            self.error = error_text(exc)
            if not isinstance(exc, NicrigError):
                traceback.print_exc()
            self.failed.emit(self.error)
            return
        self.succeeded.emit(self.result)


class ProcessJob(QtCore.QObject):
    """``python -m MODULE ARGS...`` in a process of its own, with :class:`Job`'s signals; each line it prints is a
    JSON message (``{"progress": [done, total], "title": ...}`` moves the progress bar), its exit status says how
    it ended (0 done, 1 an error on standard error, 3 stopped)."""

    progressed = QtCore.Signal(int, int)
    succeeded = QtCore.Signal(object)
    failed = QtCore.Signal(str)
    cancelled = QtCore.Signal()
    message = QtCore.Signal(object)
    finished = QtCore.Signal()

    def __init__(self, title: str, module: str, args: list[str], parent: QtCore.QObject | None = None):
        super().__init__(parent)
        self.title = title
        self._cancel = False
        self._buffer = b""
        self._lines: deque[bytes] = deque()
        self._ended_with: tuple[int, QtCore.QProcess.ExitStatus] | None = None
        self._taking = False
        self.process = QtCore.QProcess(self)
        self.process.setProgram(sys.executable)
        self.process.setArguments(["-m", module, *args])
        self.process.readyReadStandardOutput.connect(self._read)
        self.process.finished.connect(self._ended)
        self.process.errorOccurred.connect(self._error)

    @property
    def is_cancelled(self) -> bool:
        return self._cancel

    def start(self) -> None:
        self.process.start()

    def cancel(self) -> None:
        self._cancel = True
        if self.process.state() != QtCore.QProcess.ProcessState.NotRunning:
            self.process.terminate()

    def wait(self, msecs: int = 60_000) -> bool:
        """Until the process has ended (its last messages are taken by the event loop)."""
        if self.process.state() != QtCore.QProcess.ProcessState.NotRunning:
            self.process.waitForFinished(msecs)
        return self.process.state() == QtCore.QProcess.ProcessState.NotRunning

    def _read(self) -> None:
        self._buffer += bytes(self.process.readAllStandardOutput().data())
        *lines, self._buffer = self._buffer.split(b"\n")
        self._lines.extend(line for line in lines if line.strip())
        self._take_soon()

    def _take_soon(self) -> None:
        if not self._taking:
            self._taking = True
            QtCore.QTimer.singleShot(0, self._take)

    def _take(self) -> None:
        """One message, then back to the event loop: however many came at once, input waits for one at most."""
        self._taking = False
        if self._lines:
            msg = json.loads(self._lines.popleft())
            if "progress" in msg:
                done, total = msg["progress"]
                self.progressed.emit(int(min(done, 2**31 - 1)), int(min(total, 2**31 - 1)))
            self.message.emit(msg)
        if self._lines:
            self._take_soon()
        elif self._ended_with is not None:
            self._finish(*self._ended_with)

    def _ended(self, code: int, status: QtCore.QProcess.ExitStatus) -> None:
        self._read()
        self._ended_with = (code, status)

    def _finish(self, code: int, status: QtCore.QProcess.ExitStatus) -> None:
        if self._cancel or code == 3:
            self.cancelled.emit()
        elif status != QtCore.QProcess.ExitStatus.NormalExit or code != 0:
            err = bytes(self.process.readAllStandardError().data()).decode("utf-8", "replace").strip()
            self.failed.emit(err.splitlines()[-1] if err else f"{self.title}: the process ended with status {code}")
        else:
            self.succeeded.emit(None)
        self.finished.emit()

    def _error(self, error: QtCore.QProcess.ProcessError) -> None:
        if error == QtCore.QProcess.ProcessError.FailedToStart:
            self.failed.emit(f"{self.title}: cannot start {sys.executable}")
            self.finished.emit()
