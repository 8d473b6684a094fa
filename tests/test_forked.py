"""Forked workers (acquisition/sim/forked.py): results come back by task, errors come back as errors, a worker
that dies is reported, and leaving the pool leaves no process and no file behind."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from nicrig.acquisition.sim.forked import ForkPool, WorkerFailed

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="forked workers need POSIX fork")


def test_results_come_back_by_task_from_every_worker():
    table = np.arange(10)  # read by the children from their copy of this process's memory
    with ForkPool(2) as pool:
        for part in ([0, 1, 2], [3, 4], [5, 6, 7, 8, 9]):
            pool.submit(part, lambda i: (os.getpid(), table[i] ** 2))
        pool.collect()
        results = pool.results()
    assert {i: r[1] for i, r in results.items()} == {i: i * i for i in range(10)}
    assert os.getpid() not in {pid for pid, _ in results.values()}


def test_a_workers_error_is_raised_here_with_its_traceback():
    def fails(task):
        raise OSError(28, f"No space left on device ({task})")

    with ForkPool(1) as pool:
        pool.submit(["block 7"], fails)
        with pytest.raises(OSError, match=r"No space left on device \(block 7\)") as info:
            pool.collect()
    assert any("in a forked worker" in note and "fails" in note for note in info.value.__notes__)


def test_an_error_that_cannot_be_pickled_comes_back_as_text():
    class Local(Exception):  # defined in a function: pickle cannot find it again
        pass

    def fails(task):
        raise Local("half-rendered block")

    with ForkPool(1) as pool:
        pool.submit([1], fails)
        with pytest.raises(WorkerFailed, match="half-rendered block"):
            pool.collect()


def test_a_worker_that_dies_is_reported():
    with ForkPool(1) as pool:
        pool.submit([1], lambda task: os.kill(os.getpid(), signal.SIGKILL))
        with pytest.raises(WorkerFailed, match="killed by signal 9"):
            pool.collect()


def test_leaving_the_pool_stops_its_workers_and_removes_their_files():
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(KeyboardInterrupt), ForkPool(2) as pool:
            pool.submit([1], lambda task: os.read(read_end, 1))  # blocks until the pipe closes: never here
            assert pool.running == 1
            children = pool.children
            folder = pool.folder
            raise KeyboardInterrupt
    finally:
        os.close(write_end)
        os.close(read_end)
    for pid in children:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reaped by the pool
    assert not folder.exists()


def test_a_full_pool_waits_for_room_and_keeps_every_result():
    with ForkPool(1) as pool:
        for i in range(4):
            pool.submit([i], lambda task: task + 100)
            assert pool.running <= 1
        pool.collect()
        assert pool.results() == {0: 100, 1: 101, 2: 102, 3: 103}


def test_waiting_for_the_oldest_worker_takes_in_its_results_first():
    with ForkPool(2) as pool:
        assert not pool.wait_oldest()  # nobody running
        pool.submit(["slow"], lambda task: time.sleep(0.3) or task)
        pool.submit(["quick"], lambda task: task)
        assert pool.wait_oldest() and "slow" in pool.results()
        assert pool.wait_oldest() and pool.results() == {"slow": "slow", "quick": "quick"}
        assert not pool.wait_oldest() and pool.running == 0


def test_a_result_comes_back_as_soon_as_its_worker_has_it():
    """wait_for takes in a task's result while its worker is still busy with the next task of its batch."""
    read_end, write_end = os.pipe()
    try:
        with ForkPool(2) as pool:
            assert not pool.wait_for("first")  # nobody has it
            pool.submit(["first", "second"], lambda task: task if task == "first" else os.read(read_end, 1))
            assert pool.wait_for("first") and pool.results() == {"first": "first"}
            assert pool.running == 1  # still waiting to be let go on "second"
            os.write(write_end, b"x")
            assert pool.wait_for("second") and pool.results() == {"first": "first", "second": b"x"}
            pool.collect()
            assert pool.running == 0 and not pool.wait_for("third")
    finally:
        os.close(write_end)
        os.close(read_end)


def test_an_ended_workers_results_are_read_when_asked_for():
    """Noticing that a worker ended (``running``, at the model's checkpoints) leaves its results file unread
    until a result is asked for: unpickling blocks is not done between two steps of the model."""
    with ForkPool(2) as pool:
        pool.submit(["a", "b"], lambda task: task * 3)
        while pool.running:
            time.sleep(0.01)
        assert list(pool.folder.glob("*.pickle"))  # still there, unread
        assert pool.wait_for("b") and pool.pop("b") == "bbb"
        assert not list(pool.folder.glob("*.pickle"))
        assert pool.results() == {"a": "aaa"}


def test_results_before_a_failure_are_kept_and_the_failure_raised_when_reached():
    def second_fails(task):
        if task == 2:
            raise ValueError("block 2 does not render")
        return task * 10

    with ForkPool(1) as pool:
        pool.submit([1, 2, 3], second_fails)
        assert pool.wait_for(1) and pool.results() == {1: 10}
        with pytest.raises(ValueError, match="block 2 does not render"):
            pool.wait_for(2)
        assert 3 not in pool.results()


def test_a_failure_read_together_with_earlier_results_waits_until_its_task_is_asked_for(monkeypatch):
    """The child wrote task 1's result and task 2's error before the parent looked: both come in one read of
    the pipe, and asking for task 1 still gives its result (CI once raised block 2's error here)."""
    import nicrig.acquisition.sim.forked as forked

    go_r, go_w = os.pipe()
    held_r, held_w = os.pipe()
    write_record = forked._write_record

    def then_hold_on(f, told, record):  # after its error record the child says so and waits to be let go
        write_record(f, told, record)
        if not pickle.loads(record)[0]:
            os.write(held_w, b"x")
            os.read(go_r, 1)

    monkeypatch.setattr(forked, "_write_record", then_hold_on)  # in the child's copy of this process too
    try:
        with ForkPool(1) as pool:
            pool.submit([1, 2, 3], lambda task: task * 10 if task == 1 else 1 / 0)
            os.read(held_r, 1)  # both records are written and the child has not ended
            assert pool.running == 1
            assert pool.wait_for(1) and pool.results() == {1: 10}
            with pytest.raises(ZeroDivisionError):
                pool.wait_for(2)
            os.write(go_w, b"x")
    finally:
        for fd in (go_r, go_w, held_r, held_w):
            os.close(fd)


def test_an_ended_workers_failure_waits_until_its_task_is_asked_for():
    with ForkPool(1) as pool:
        pool.submit([1, 2, 3], lambda task: task * 10 if task == 1 else 1 / 0)
        while pool.running:
            time.sleep(0.01)
        assert pool.wait_for(1) and pool.pop(1) == 10
        with pytest.raises(ZeroDivisionError):
            pool.wait_for(3)
        assert pool.results() == {}


def test_a_worker_killed_halfway_is_reported_after_the_results_it_gave():
    with ForkPool(1) as pool:
        pool.submit([1, 2], lambda task: task if task == 1 else os.kill(os.getpid(), signal.SIGKILL))
        assert pool.wait_for(1)
        with pytest.raises(WorkerFailed, match="killed by signal 9"):
            pool.wait_for(2)


def test_a_worker_that_cannot_write_its_results_says_why_and_fails(monkeypatch, capfd):
    """A full disk under the results file: the worker's error is on standard error and the pool reports it
    failed (not a clean exit that left an empty file)."""
    import nicrig.acquisition.sim.forked as forked

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(forked, "_write_record", full_disk)  # in the child's copy of this process too
    with ForkPool(1) as pool:
        pool.submit([1], lambda task: task)
        with pytest.raises(WorkerFailed, match=r"without its results \(exit status 1;"):
            pool.collect()
    assert "No space left on device" in capfd.readouterr().err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_workers_die_with_a_parent_killed_before_it_could_stop_them(tmp_path):
    """SIGKILL leaves the pool no chance to stop its workers: the kernel does (PR_SET_PDEATHSIG)."""
    script = (
        "import os, sys, time\n"
        "from nicrig.acquisition.sim.forked import ForkPool\n"
        "pool = ForkPool(1)\n"
        "pool.submit([1], lambda task: time.sleep(600))\n"
        "print(*pool.children, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    worker = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    for _ in range(200):  # the kernel's signal, then init reaps it
        if not Path(f"/proc/{worker}").exists():
            break
        time.sleep(0.05)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail("the worker outlived its killed parent")


def pool_in_a_process(top: Path) -> tuple[subprocess.Popen, Path, int]:
    """A process holding a pool with one worker asleep, its folder in ``top``: (process, folder, worker)."""
    script = (
        "import time\n"
        "from nicrig.acquisition.sim.forked import ForkPool\n"
        "pool = ForkPool(1)\n"
        "pool.submit([1], lambda task: time.sleep(600))\n"
        "print(pool.folder, *pool.children, flush=True)\n"
        "time.sleep(600)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, TMPDIR=str(top)))
    assert proc.stdout is not None
    folder, worker = proc.stdout.readline().split()
    return proc, Path(folder), int(worker)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_the_next_pool_removes_the_folder_of_a_pool_killed_outright(tmp_path, monkeypatch):
    """A killed simulate left $TMPDIR/nicrig-workers-* (up to ~10 MB each) that nothing removed: the next pool
    removes every folder whose pool is gone (its owner lock free), and none of a pool still running."""
    import tempfile

    killed, left, worker = pool_in_a_process(tmp_path)
    (left / "1.pickle").write_bytes(bytes(1 << 20))  # what a worker had written
    alive, kept, _ = pool_in_a_process(tmp_path)
    fresh = tmp_path / "nicrig-workers-unowned"  # a folder without an owner file, as being made: left alone
    fresh.mkdir()
    try:
        killed.kill()
        killed.wait()
        for _ in range(200):  # the worker dies with it (PR_SET_PDEATHSIG), releasing the lock it shares
            if not Path(f"/proc/{worker}").exists():
                break
            time.sleep(0.05)
        assert left.is_dir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        with ForkPool(1) as pool:
            assert pool.folder.parent == tmp_path
            assert not left.exists() and kept.is_dir() and fresh.is_dir()
        assert not pool.folder.exists()
    finally:
        alive.kill()
        alive.wait()
