"""Killed outright (SIGKILL) at many points of their write phase, nicrig's writers lose nothing.

Decode, import, export, report, simulate and acquire are each started as a user starts them and
killed at a spread of instants: at fixed delays after the start (compute and write phases alike)
and at delays after their temporary file appears (inside the write phase). After every kill,
everything is read back with nicrig itself: the capture's raw samples are byte for byte what
they were (derived data never opens them for writing), its derived tables are the old ones or
the new ones, complete, ``nicrig verify`` finds no damage, and what an acquisition had captured
before the kill opens without h5clear.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import as_written_by_older_nicrig, simulate_set
from nicrig.acquisition.capture import CaptureSet
from nicrig.companion import companion_path
from nicrig.errors import NicrigError

#: Seconds after the start at which a run is killed: before, during and after its compute.
START_DELAYS = (0.3, 0.8, 1.4, 2.0, 3.0)
#: Seconds after its temporary file appears at which a run is killed: inside the write phase.
WRITE_DELAYS = (0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.15)


def nicrig(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "nicrig", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _kill(argv: Sequence[str | Path], *, after_s: float | None = None, when: Callable[[], bool] | None = None,
          then_s: float = 0.0) -> tuple[int | None, bool]:
    """Start ``nicrig argv``; SIGKILL it ``after_s`` after the start, or ``then_s`` after ``when()`` holds.

    Returns the exit status when the run finished before it could be killed (else None) and whether it was
    killed while ``when()`` held: it is stopped (SIGSTOP) first, so that ``when()`` is read with the run
    frozen at the instant it is killed.
    """
    proc = subprocess.Popen([sys.executable, "-m", "nicrig", *map(str, argv)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while proc.poll() is None:
            if after_s is not None and time.monotonic() - t0 >= after_s:
                break
            if when is not None and when():
                time.sleep(then_s)
                break
            time.sleep(0.0005)
        if proc.poll() is not None:
            return proc.returncode, False
        proc.send_signal(signal.SIGSTOP)
        while not _stopped(proc.pid) and proc.poll() is None:
            time.sleep(0.0005)
        if proc.poll() is not None:
            return proc.returncode, False
        held = when is not None and when()
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        return None, held
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal (state T in /proc/PID/stat, proc(5))."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


#: Runs tried at most for one kill inside the write phase, when each run's write phase passed between
#: two looks for its temporary file (a fast machine, a small job).
WRITE_PHASE_TRIES = 30


def _kill_points(argv: Sequence[str | Path], partial_glob: tuple[Path, str], reset: Callable[[], None],
                 check: Callable[[int | None], None]) -> int:
    """Kill ``argv`` at the delays of START_DELAYS, then at those of WRITE_DELAYS after its temporary file
    (one matching ``partial_glob`` that was not there before the run: killed runs leave theirs) appears,
    calling ``reset()`` before and ``check(status)`` after each. Each list stops at the first run that
    finished before its kill: a longer delay would only repeat it. Returns how many runs were killed inside
    their write phase: with their temporary file still there, the rename that completes the output not yet
    done. That is at least one: the run is started again (at most WRITE_PHASE_TRIES times) until one is
    caught there, or the test fails saying so."""
    folder, pattern = partial_glob

    def run(*, after_s: float | None = None, then_s: float = 0.0) -> tuple[int | None, bool]:
        reset()
        before = set(folder.glob(pattern))
        written = None if after_s is not None else lambda: any(p not in before for p in folder.glob(pattern))
        status, held = _kill(argv, after_s=after_s, when=written, then_s=then_s)
        check(status)
        return status, held

    for after in START_DELAYS:
        if run(after_s=after)[0] is not None:
            break
    inside = 0
    for then in WRITE_DELAYS:
        status, held = run(then_s=then)
        inside += held
        if status is not None:
            break
    tries = 0
    while not inside and tries < WRITE_PHASE_TRIES:
        inside += run()[1]
        tries += 1
    assert inside, f"nicrig {' '.join(map(str, argv))}: no run of {len(WRITE_DELAYS) + tries} killed inside its " \
                   f"write phase ({pattern} gone before each run could be stopped)"
    return inside


def _tables(path: Path) -> dict[str, np.ndarray]:
    with CaptureSet.open(path) as cs:
        return {t: cs.read_table(t) for t in cs.table_names() if t.startswith("decoded/")}


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(a[k].tobytes() == b[k].tobytes() for k in a)


@pytest.fixture(scope="module")
def capture(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("crash")
    return simulate_set(folder, "cap", kind="stream", size_bytes=1400, count=60)


# -- decode -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("old_layout", [False, True], ids=["companion", "decoded-inside-capture"])
def test_killed_decode_leaves_the_old_or_the_new_tables_complete(capture, tmp_path, old_layout):
    path = tmp_path / "cap.h5"
    shutil.copy(capture, path)
    assert nicrig("decode", path, "--source", "send_pci").returncode == 0
    if old_layout:  # a capture set written by an older nicrig, its decoded tables inside it
        as_written_by_older_nicrig(path)
    old = _tables(path)
    assert set(old) == {"decoded/send_pci/pci", "decoded/send_pci/irq"}
    raw = _digest(path)
    base = tmp_path / "base.derived.h5"
    derived = companion_path(path)
    if derived.exists():
        shutil.copy(derived, base)
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    shutil.copy(path, new_dir / "cap.h5")
    if derived.exists():
        shutil.copy(derived, companion_path(new_dir / "cap.h5"))
    assert nicrig("decode", new_dir / "cap.h5", "--force").returncode == 0
    new = _tables(new_dir / "cap.h5")
    assert set(new) > set(old)

    def reset() -> None:
        if base.exists():
            shutil.copy(base, derived)
        else:
            derived.unlink(missing_ok=True)

    outcomes: list[str] = []

    def check(status: int | None) -> None:
        assert status in (None, 0)
        assert _digest(path) == raw                         # the raw capture was never written
        now = _tables(path)
        outcomes.append("new" if _same(now, new) else "old" if _same(now, old) else "MIXED")
        assert outcomes[-1] != "MIXED", sorted(now)
        r = nicrig("verify", path)
        assert r.returncode == 0, r.stdout

    _kill_points(["decode", path, "--force", "--workers", "1"], (tmp_path, f".{derived.name}.*.partial"), reset,
                 check)
    assert "old" in outcomes, outcomes     # a kill inside the write phase, before the rename, keeps the old tables


def test_repeated_forced_decodes_do_not_grow_anything(capture, tmp_path):
    path = tmp_path / "cap.h5"
    shutil.copy(capture, path)
    raw = _digest(path)
    sizes = []
    for _ in range(4):
        assert nicrig("decode", path, "--force").returncode == 0
        sizes.append(companion_path(path).stat().st_size)
    assert _digest(path) == raw
    assert max(sizes) - min(sizes) <= 64, sizes      # each companion holds the current tables, nothing else
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cap.derived.h5", "cap.h5"]


# -- import -----------------------------------------------------------------------------------------
def test_killed_import_leaves_no_file_or_a_complete_one(capture, tmp_path):
    vcd = tmp_path / "probe.vcd"
    assert nicrig("export", capture, "--source", "send_pci", "-o", vcd).returncode == 0
    with CaptureSet.open(capture) as cs:
        want = cs.source("send_pci").read_packed()
    out = tmp_path / "imp.h5"

    def reset() -> None:
        out.unlink(missing_ok=True)

    def check(status: int | None) -> None:
        assert status in (None, 0)
        if out.exists():
            with CaptureSet.open(out) as cs:
                assert np.array_equal(cs.source("send_pci").read_packed(), want)

    _kill_points(["import", vcd, "-o", out, "--source", "send_pci"], (tmp_path, ".imp.h5.*.partial"), reset, check)
    # what the killed runs left: named as unfinished, never offered to be renamed into a file every command refuses
    out.unlink(missing_ok=True)
    left = sorted(tmp_path.glob(".imp.h5.*.partial"))
    assert left
    said = nicrig("info", out)
    assert said.returncode == 2 and left[0].name in said.stderr and "incomplete" in said.stderr
    assert "delete it" in said.stderr and "rename" not in said.stderr


def test_killed_import_append_leaves_the_old_set_or_the_new_one(capture, tmp_path):
    vcd = tmp_path / "probe.vcd"
    assert nicrig("export", capture, "--source", "probe", "-o", vcd).returncode == 0
    base = tmp_path / "base.h5"
    shutil.copy(capture, base)
    with CaptureSet.open(base) as cs:
        old_sources = cs.source_names
        old_samples = {n: cs.source(n).read_packed() for n in old_sources}
    path = tmp_path / "set.h5"
    outcomes: list[str] = []

    def reset() -> None:
        shutil.copy(base, path)

    def check(status: int | None) -> None:
        assert status in (None, 0)
        with CaptureSet.open(path) as cs:
            names = cs.source_names
            for n in old_sources:
                assert np.array_equal(cs.source(n).read_packed(), old_samples[n])
            if names == old_sources:
                outcomes.append("old")
            else:
                assert sorted(names) == sorted([*old_sources, "again"])
                again = cs.source("again")
                assert again.num_samples > 0 and again.notes    # complete: notes come last
                outcomes.append("new")
        assert nicrig("verify", path).returncode == 0

    _kill_points(["import", vcd, "-o", path, "--append", "--source", "again"], (tmp_path, ".set.h5.*.partial"),
                 reset, check)
    assert "old" in outcomes, outcomes


# -- export and report: they only read the capture ------------------------------------------------
def _content(out: Path) -> object:
    """What a finished output holds: a .sr's members (a zip stamps member times), a report's end, a VCD's
    value changes (its header has the date)."""
    if out.suffix == ".sr":
        with zipfile.ZipFile(out) as z:
            return {name: z.read(name) for name in z.namelist()}
    if out.suffix == ".html":
        return out.read_text().rstrip().endswith("</html>")
    return out.read_text().split("$enddefinitions", 1)[1]


@pytest.mark.parametrize("argv, name", [
    (["export", "{cap}", "--source", "send_pci", "-o", "{out}"], "out.sr"),
    (["export", "{cap}", "--source", "probe", "-o", "{out}"], "out.vcd"),
    (["report", "{cap}", "-o", "{out}"], "out.html"),
])
def test_killed_export_or_report_leaves_the_capture_and_no_half_output(capture, tmp_path, argv, name):
    path = tmp_path / "cap.h5"
    shutil.copy(capture, path)
    assert nicrig("decode", path).returncode == 0
    raw, tables = _digest(path), _tables(path)
    out = tmp_path / name
    args = [a.format(cap=path, out=out) for a in argv]
    full = nicrig(*args)
    assert full.returncode == 0, full.stderr
    complete = _content(out)
    out.unlink()

    def reset() -> None:
        out.unlink(missing_ok=True)

    def check(status: int | None) -> None:
        assert status in (None, 0)
        assert _digest(path) == raw and _same(_tables(path), tables)
        if out.exists():
            assert _content(out) == complete

    _kill_points(args, (tmp_path, f".{name}.*.partial"), reset, check)


# -- simulate -----------------------------------------------------------------------------------------
def test_killed_simulate_leaves_the_old_file_or_the_new_one(tmp_path):
    out = tmp_path / "sim.h5"
    argv = ["simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66", "--size", "1400",
            "--spacing-us", "11", "--count", "80", "--force", "-o", out]
    assert nicrig(*argv).returncode == 0
    old = _digest(out)
    shutil.copy(out, tmp_path / "base.h5")

    def reset() -> None:
        shutil.copy(tmp_path / "base.h5", out)

    def check(status: int | None) -> None:
        assert status in (None, 0)
        with CaptureSet.open(out) as cs:
            assert len(cs.source_names) == 3 and not cs.unclosed
            if _digest(out) != old:                            # the new one: complete
                assert all(cs.source(n).num_samples for n in cs.source_names)
                assert "truth/packets" in cs.table_names()

    _kill_points(argv, (tmp_path, ".sim.h5.*.partial"), reset, check)


# -- acquire ---------------------------------------------------------------------------------------
def test_killed_acquire_keeps_what_was_captured(tmp_path):
    from test_acquire_cli import sim_process

    out = tmp_path / "cut.h5"
    kept: list[int] = []
    for wait_for in (1000, 2000):
        # a server of its own for each run: the one block that hangs counts the server's blocks, not the run's
        with sim_process("--model", "rigol-mso5000", "--fault", "slow=30@5") as (resource, _):
            out.unlink(missing_ok=True)
            proc = subprocess.Popen([sys.executable, "-m", "nicrig", "acquire", resource, "--probe-map",
                                     "pci-control", "--source", "send_pci", "--sample-rate", "266.67MHz",
                                     "--record-length", "10000", "--batch-points", "1000", "--trigger", "FRAME#",
                                     "--io-timeout", "60", "-o", str(out)],
                                    stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            deadline = time.monotonic() + 90
            while time.monotonic() < deadline:   # the 5th block hangs: 2 batches of 1000 arrive before it
                try:
                    with CaptureSet.open(out, swmr=True) as cs:
                        if cs.source("send_pci").num_samples >= wait_for:
                            break
                except NicrigError:
                    pass
                time.sleep(0.05)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            # read back as any nicrig command reads it: no h5clear, no SWMR flag to give
            with CaptureSet.open(out) as cs:
                assert cs.unclosed
                n = cs.source("send_pci").num_samples
                assert n >= wait_for
                assert cs.source("send_pci").read_packed().shape == (n, cs.source("send_pci").unitsize)
                # what was asked for was recorded before the first sample: the capture says it is short
                assert cs.source("send_pci").samples_expected == 10_000 and cs.source("send_pci").short
                kept.append(n)
            info = nicrig("info", out)
            assert info.returncode == 0 and "NOT CLOSED by its writer" in info.stdout
            assert f"SHORT     {n} of the 10000 samples its instrument announced" in info.stdout
            verified = nicrig("verify", out)
            assert verified.returncode == 1 and f"{out}: SHORT" in verified.stdout
            assert f"holds {n:,} of the 10,000 samples its instrument announced" in verified.stdout
            decoded = nicrig("decode", out)
            assert decoded.returncode == 0, decoded.stderr
            assert "decoded/send_pci/pci" in _tables(out)
    assert kept == sorted(kept), kept
    assert json.loads(nicrig("info", "--json", out).stdout)["unclosed"] is True
    reported = nicrig("report", out, "-o", tmp_path / "r.json")
    assert reported.returncode == 0 and "short recording" in reported.stderr
    assert f"SHORT RECORDING: source 'send_pci' holds {kept[-1]:,} of the 10,000" in (tmp_path / "r.json").read_text()
    assert os.path.exists(companion_path(out))
