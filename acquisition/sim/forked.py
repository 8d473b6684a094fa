"""Work done in forked processes while this one goes on: how the simulated rig renders its sources on a
second CPU while the model (one Python thread, bound by the interpreter) still runs.

A forked child starts with a copy of this process's memory, so it can read the model's records as they
are at that moment without their being pickled and sent; only the child's results (compressed blocks of
samples, tables) come back, through a file. A child never calls into HDF5 (the parent may have a file
open: a child that flushed or closed it would write into the parent's file), turns off the cyclic
garbage collector (which could finalize the parent's HDF5 objects) and leaves with ``os._exit`` (no
``atexit`` handlers, which would close the parent's files).
"""

from __future__ import annotations

import ctypes
import gc
import os
import pickle
import signal
import sys
import tempfile
import traceback
from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any

Task = Hashable
#: prctl(2) option: the signal this process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1


class WorkerFailed(RuntimeError):
    """A forked worker died without reporting (killed, out of memory) or its error could not be sent back."""


def can_fork() -> bool:
    """Whether this platform forks (POSIX); elsewhere the work is done in this process."""
    return hasattr(os, "fork")


class ForkPool:
    """Runs batches of tasks in forked children, at most ``limit`` at once; collects their results by task.

    Use as a context manager: leaving it kills and reaps children still running (an error or Ctrl-C in
    this process) and removes the result files. A child's exception is raised again here, with the
    child's traceback as a note.
    """

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError("a pool needs room for at least one worker")
        self.limit = limit
        self._running: dict[int, Path] = {}
        self._results: dict[Task, Any] = {}
        self._folder = Path(tempfile.mkdtemp(prefix="nicrig-workers-"))
        self._serial = 0

    def __enter__(self) -> ForkPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def children(self) -> list[int]:
        """Process ids of the children not yet collected."""
        return list(self._running)

    @property
    def folder(self) -> Path:
        """Where the children leave their results (removed with the pool)."""
        return self._folder

    @property
    def running(self) -> int:
        """Children still running (finished ones are collected first)."""
        self.collect(block=False)
        return len(self._running)

    def submit(self, tasks: Iterable[Task], work: Callable[[Task], Any]) -> None:
        """Fork a child that runs ``work(task)`` for each of ``tasks``, waiting for room first."""
        tasks = list(tasks)
        while len(self._running) >= self.limit:
            self.wait_oldest()
        self._serial += 1
        out = self._folder / f"{self._serial}.pickle"
        # A Ctrl-C between the fork and the child's being noted would leave a worker nobody stops: it is
        # held back until then (the child, whose mask this is too, ignores it).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                _child(tasks, work, out, held, parent)
            self._running[pid] = out
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def collect(self, block: bool = True) -> None:
        """Take in the results of finished children (``block``: wait for all of them)."""
        # Our own children by pid: waiting for any child would take the exit status of one the caller
        # started some other way (a subprocess) from under it.
        for pid in list(self._running):
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            if done:
                self._reap(done, status)

    def wait_oldest(self) -> bool:
        """Take in the results of the child started first of those still running, waiting for it to end;
        False when none is running."""
        if not self._running:
            return False
        oldest = next(iter(self._running))
        self._reap(*os.waitpid(oldest, 0))
        return True

    def results(self) -> dict[Task, Any]:
        """Every finished child's results so far, by task."""
        return self._results

    def close(self) -> None:
        for pid in self._running:
            os.kill(pid, signal.SIGKILL)
        for pid in list(self._running):
            os.waitpid(pid, 0)
        self._running.clear()
        for path in self._folder.iterdir():
            path.unlink()
        self._folder.rmdir()

    def _reap(self, pid: int, status: int) -> None:
        out = self._running.pop(pid)
        try:
            with open(out, "rb") as f:
                ok, payload = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            raise WorkerFailed(f"a rendering worker ended without its results ({_how(status)}; "
                               "what it could say is on standard error)") from None
        finally:
            out.unlink(missing_ok=True)
        if not ok:
            error, text = payload
            if error is None:
                raise WorkerFailed(f"a rendering worker failed:\n{text}")
            error.add_note(f"in a forked worker:\n{text}")
            raise error
        self._results.update(payload)


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit status {os.WEXITSTATUS(status)}"


def _die_with(parent: int) -> None:  # pragma: no cover - runs in the child
    """Have the kernel kill this worker when its parent dies (killed, say, where it could not stop its
    workers): Linux's PR_SET_PDEATHSIG; elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0 and os.getppid() != parent:
        os._exit(1)  # the parent died before the request took effect


def _child(tasks: list[Task], work: Callable[[Task], Any], out: Path, mask: Iterable[int],
           parent: int) -> None:  # pragma: no cover
    """The forked child: do the work, write ``(ok, results)`` or ``(False, (error, traceback))``, exit."""
    code = 0
    try:
        gc.disable()
        # Ctrl-C reaches the whole process group: the parent handles it and kills its workers.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler: a SIGTERM here ends the worker
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        _die_with(parent)
        outcome: tuple[bool, Any] = (True, {task: work(task) for task in tasks})
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
        code = 1
        outcome = (False, (exc, traceback.format_exc()))
    try:
        with open(out, "wb") as f:
            try:
                pickle.dump(outcome, f, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - an error that does not pickle goes back as text
                code = 1
                f.seek(0)
                f.truncate()
                pickle.dump((False, (None, outcome[1][1] if not outcome[0] else traceback.format_exc())), f)
    except BaseException:  # noqa: BLE001 - no results file (a full disk): why goes where the parent's errors go
        code = 1
        # Straight to the descriptor: sys.stderr's lock may have been held by another of the parent's threads
        # (a progress ticker) when it forked, and would never be released here.
        os.write(2, traceback.format_exc().encode(errors="replace"))
    finally:
        os._exit(code)
