"""Signals that end a command as Ctrl-C does.

A job scheduler, ``timeout`` or ``kill`` stops a command with SIGTERM, a closed terminal with SIGHUP;
either would end the process where it stands. Within :func:`signals_interrupt` they raise
KeyboardInterrupt instead, so the command cleans up as on Ctrl-C (settings put back, unfinished files
removed, workers stopped) and exits 130 (``nicrig: interrupted``).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt for the duration (handlers as before after it); from a
    thread other than the main one, where Python cannot set handlers, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
