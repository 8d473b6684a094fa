"""Work done in forked processes while this one goes on: how the simulated rig renders its sources on a
second CPU while the model (one Python thread, bound by the interpreter) still runs.

A forked child starts with a copy of this process's memory, so it can read the model's records as they
are at that moment without their being pickled and sent; only the child's results (compressed blocks of
samples, tables) come back, through a file, a record a task as each is done (a byte on a pipe says so).
A child never calls into HDF5 (the parent may have a file
open: a child that flushed or closed it would write into the parent's file), turns off the cyclic
garbage collector (which could finalize the parent's HDF5 objects) and leaves with ``os._exit`` (no
``atexit`` handlers, which would close the parent's files).
"""

from __future__ import annotations

import ctypes
import fcntl
import gc
import os
import pickle
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

Task = Hashable
#: prctl(2) option: the signal this process gets when its parent dies (linux/prctl.h).
_PR_SET_PDEATHSIG = 1
#: A pool's folder in $TMPDIR: this prefix, then mkdtemp's random part.
FOLDER_PREFIX = "nicrig-workers-"
#: The file in a pool's folder whose flock(2) says the pool (or a child of it) is alive.
_OWNER = ".owner"
#: A folder without an owner file (made by a nicrig before it had one) is left alone this long, seconds.
_UNOWNED_GRACE_S = 86400.0


def clear_abandoned(top: Path) -> list[Path]:
    """Remove the folders of pools killed outright (SIGKILL, power loss) from ``top``; what was removed.

    A pool holds an exclusive flock(2) on its folder's owner file from the moment the file has its name until
    it removes the folder; the lock belongs to the open file, which its children share, so it is released
    only when the pool and every child are gone. A folder whose lock can be taken has no owner left. Folders
    of other users, links and the folders of a nicrig too old to lock them (unless a day old) are left.
    """
    removed = []
    for folder in top.glob(FOLDER_PREFIX + "*"):
        try:
            info = folder.lstat()
            if not folder.is_dir() or folder.is_symlink() or info.st_uid != os.getuid():
                continue
            fd = os.open(folder / _OWNER, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            if time.time() - info.st_mtime > _UNOWNED_GRACE_S:
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its pool is alive
            continue
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed


def _owned_folder() -> tuple[Path, int]:
    """A new pool folder in $TMPDIR and the descriptor holding its owner lock (see :func:`clear_abandoned`):
    the lock is taken before the owner file gets its name, so no cleaner ever sees it unlocked."""
    folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX))
    fd, name = tempfile.mkstemp(dir=folder, prefix=".owner-")
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(name, folder / _OWNER)
    return folder, fd


class WorkerFailed(RuntimeError):
    """A forked worker died without reporting (killed, out of memory) or its error could not be sent back."""


def can_fork() -> bool:
    """Whether this platform forks (POSIX); elsewhere the work is done in this process."""
    return hasattr(os, "fork")


@dataclass
class _Worker:
    """A child, running or ended with records not yet read: the tasks it was given, the file it writes their
    results to (one pickled record a task, in order) and the pipe on which it says each record is complete
    (a byte a record)."""

    tasks: list[Task]
    out: Path
    ready: int  # the pipe's read end
    file: BinaryIO | None = None  # opened at the first complete record
    taken: int = 0  # records read so far
    status: int = 0  # its exit status (os.waitpid), once it has ended
    # The error that ended it, read with the records before it: raised when a task from it on is asked for,
    # not while an earlier one is (a child can have written both before the parent looks).
    failure: BaseException | None = None


class ForkPool:
    """Runs batches of tasks in forked children, at most ``limit`` at once; collects their results by task,
    each as soon as its child has it (:meth:`wait_for`), not only when the child's batch is done.

    Use as a context manager: leaving it kills and reaps children still running (an error or Ctrl-C in
    this process) and removes the result files. A child's exception is raised again here, with the
    child's traceback as a note.
    """

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError("a pool needs room for at least one worker")
        self.limit = limit
        self._running: dict[int, _Worker] = {}
        # Ended, their records not read yet: reading (unpickling blocks) waits until a result is asked for,
        # so that noticing a child has ended costs the caller (the model, between two steps) next to nothing.
        self._ended: dict[int, _Worker] = {}
        self._results: dict[Task, Any] = {}
        clear_abandoned(Path(tempfile.gettempdir()))  # what pools killed outright left (up to ~10 MB each)
        self._folder, self._owner = _owned_folder()
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
        """Children still running (their results are read when asked for)."""
        self._poll(block=False)
        return len(self._running)

    def submit(self, tasks: Iterable[Task], work: Callable[[Task], Any]) -> None:
        """Fork a child that runs ``work(task)`` for each of ``tasks``, waiting for room first."""
        tasks = list(tasks)
        while len(self._running) >= self.limit:
            self.wait_oldest()
        self._serial += 1
        out = self._folder / f"{self._serial}.pickle"
        ready, told = os.pipe()
        # A Ctrl-C between the fork and the child's being noted would leave a worker nobody stops: it is
        # held back until then (the child, whose mask this is too, ignores it).
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:  # pragma: no cover - the child's coverage is not collected
                os.close(ready)
                _child(tasks, work, out, told, held, parent)
            # Closed here at once, before any other fork, so that the child's exit is the pipe's end.
            os.close(told)
            self._running[pid] = _Worker(tasks, out, ready)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)

    def collect(self, block: bool = True) -> None:
        """Take in the results of finished children (``block``: wait for all of them)."""
        self._poll(block)
        for pid in list(self._ended):
            self._reap(pid)

    def wait_oldest(self) -> bool:
        """Take in the results of the child started first of those still running, waiting for it to end;
        False when none is running."""
        if not self._running:
            return False
        oldest = next(iter(self._running))
        self._end(*os.waitpid(oldest, 0))
        self._reap(oldest)
        return True

    def wait_for(self, task: Task) -> bool:
        """Wait until ``task``'s result is in :meth:`results` (as soon as its child has it, while that child
        goes on with its other tasks); False if no running child has the task."""
        while task not in self._results:
            ended = next((pid for pid, w in self._ended.items() if task in w.tasks), None)
            if ended is not None:
                worker = self._ended[ended]
                self._take(worker, len(_read_all(worker.ready)))
                if task not in self._results or worker.failure is None:
                    self._reap(ended)  # read to the end; raises if it ended without the task's result
                continue
            pid = next((pid for pid, w in self._running.items() if task in w.tasks), None)
            if pid is None:
                return False
            worker = self._running[pid]
            if worker.failure is not None:  # its last record: nothing more to come
                raise worker.failure
            told = os.read(worker.ready, 4096)
            if told:
                self._take(worker, len(told))
            else:  # the child has ended
                self._end(*os.waitpid(pid, 0))
        return True

    def pop(self, task: Task) -> Any:
        """``task``'s result, taken in (:meth:`wait_for`), and forgotten here."""
        return self._results.pop(task)

    def results(self) -> dict[Task, Any]:
        """Every result taken in so far, those of the children noted as ended included, by task."""
        for pid in list(self._ended):
            self._reap(pid)
        return self._results

    def close(self) -> None:
        for pid in self._running:
            os.kill(pid, signal.SIGKILL)
        for pid, worker in list(self._running.items()):
            os.waitpid(pid, 0)
            self._close(worker)
        for worker in self._ended.values():
            self._close(worker)
        self._running.clear()
        self._ended.clear()
        for path in self._folder.iterdir():
            path.unlink()
        self._folder.rmdir()
        os.close(self._owner)

    def _take(self, worker: _Worker, records: int) -> None:
        """Read ``records`` more of ``worker``'s complete records: results, or the error that ended it (kept as
        ``worker.failure``)."""
        if not records:
            return
        try:
            if worker.file is None:
                worker.file = open(worker.out, "rb")
            loaded = [pickle.load(worker.file) for _ in range(records)]
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            raise WorkerFailed(f"a rendering worker's results could not be read back: {exc}") from None
        for ok, *payload in loaded:
            worker.taken += 1
            if ok:
                task, result = payload
                self._results[task] = result
                continue
            error, text = payload
            if error is None:
                error = WorkerFailed(f"a rendering worker failed:\n{text}")
            else:
                error.add_note(f"in a forked worker:\n{text}")
            worker.failure = error

    def _poll(self, block: bool) -> None:
        """Note the children that have ended (``block``: wait for all of them)."""
        # Our own children by pid: waiting for any child would take the exit status of one the caller
        # started some other way (a subprocess) from under it.
        for pid in list(self._running):
            done, status = os.waitpid(pid, 0 if block else os.WNOHANG)
            if done:
                self._end(done, status)

    def _end(self, pid: int, status: int) -> None:
        worker = self._ended[pid] = self._running.pop(pid)
        worker.status = status

    def _reap(self, pid: int) -> None:
        """Take in an ended child's remaining records; it must have given every task's result."""
        worker = self._ended.pop(pid)
        try:
            self._take(worker, len(_read_all(worker.ready)))
            if worker.failure is not None:
                raise worker.failure
            if worker.taken < len(worker.tasks):
                raise WorkerFailed(f"a rendering worker ended without its results ({_how(worker.status)}; "
                                   "what it could say is on standard error)")
        finally:
            self._close(worker)

    @staticmethod
    def _close(worker: _Worker) -> None:
        os.close(worker.ready)
        if worker.file is not None:
            worker.file.close()
        worker.out.unlink(missing_ok=True)


def _read_all(fd: int) -> bytes:
    """Everything left in pipe ``fd`` whose writers have all gone."""
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
    return b"".join(chunks)


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


#: mallopt(3) parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Allocations glibc serves from the heap rather than a mapping of their own, up to its maximum (32 MiB on 64-bit).
_HEAP_UP_TO = 32 << 20


def _keep_freed_memory() -> None:  # pragma: no cover - runs in the child
    """Have glibc's malloc keep what this worker frees for its next allocations. A worker's tasks make and drop
    the same large arrays again and again (a block's lines and times, a million samples each): by default each
    above 128 KiB is a mapping of its own, unmapped when freed and faulted in page by page when made again.
    The workers of an 18,000-frame ``nicrig simulate`` spent ~30% of their CPU time in the kernel, most of it
    on page faults: 380k faults before, 310k with this (the rest: each worker's first blocks, and the pages
    of the model's records it reads). Elsewhere nothing."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None)
        libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_UP_TO)
        libc.mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    except (OSError, AttributeError):  # not glibc
        return


def _record(*fields: Any) -> bytes:
    """One record of a results file, pickled."""
    return pickle.dumps(fields, protocol=pickle.HIGHEST_PROTOCOL)


def _write_record(f: BinaryIO, told: int, record: bytes) -> None:
    """Append a record to the results file and, once it is there whole, say so on the pipe."""
    f.write(record)
    f.flush()
    os.write(told, b"\0")


def _child(tasks: list[Task], work: Callable[[Task], Any], out: Path, told: int, mask: Iterable[int],
           parent: int) -> None:  # pragma: no cover
    """The forked child: do the work, writing ``(True, task, result)`` for each task as soon as it is done, or
    ``(False, error, traceback)`` when one fails; exit."""
    code = 0
    try:
        with open(out, "wb") as f:
            try:
                gc.disable()
                # Ctrl-C reaches the whole process group: the parent handles it and kills its workers.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler: a SIGTERM here ends the worker
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
                _die_with(parent)
                _keep_freed_memory()
                for task in tasks:
                    _write_record(f, told, _record(True, task, work(task)))
            except BaseException as exc:  # noqa: BLE001 - everything goes back to the parent
                code = 1
                text = traceback.format_exc()
                try:
                    failure = _record(False, exc, text)
                except Exception:  # noqa: BLE001 - an error that does not pickle goes back as text
                    failure = _record(False, None, text)
                _write_record(f, told, failure)
    except BaseException:  # noqa: BLE001 - no results file (a full disk): why goes where the parent's errors go
        code = 1
        # Straight to the descriptor: sys.stderr's lock may have been held by another of the parent's threads
        # (a progress ticker) when it forked, and would never be released here.
        os.write(2, traceback.format_exc().encode(errors="replace"))
    finally:
        os._exit(code)
