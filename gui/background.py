"""Work off the GUI thread: decoding, analysis and overview building, with progress and cancel.

A :class:`Job` runs a function in a ``QThread``. The function gets a
``progress(done, total)`` callable; once the user cancels, that callable raises
:class:`Cancelled`, which is how nicrig's long operations are stopped (the
decode engine writes its tables atomically, so a cancelled run leaves the
file valid). Results and errors come back to the GUI thread as signals; an
error carries the library's own message (a :class:`NicrigError` says what to fix).
"""

from __future__ import annotations

import traceback
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
