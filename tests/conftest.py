"""Shared test helpers."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def own_home() -> Path:
    """Give this test process (and every command it starts) a home, config, data, cache and state folder of
    its own, before nicrig is imported (it reads them at import): decoders a user installed
    (``~/.local/share/libsigrokdecode/decoders``), PulseView settings or nicrig's overview cache never change a
    result, and no test writes into the user's home. Each pytest-xdist worker gets its own; removed at exit.
    Made once a process: a test importing ``tests.conftest`` runs this module again under that name."""
    if os.environ.get("NICRIG_TEST_HOME_OF") == str(os.getpid()):
        return Path(os.environ["HOME"])
    os.environ["NICRIG_TEST_HOME_OF"] = str(os.getpid())
    home = Path(tempfile.mkdtemp(prefix="nicrig-test-home-"))
    atexit.register(shutil.rmtree, home, True)
    os.environ["HOME"] = str(home)
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                     ("XDG_CACHE_HOME", ".cache"), ("XDG_STATE_HOME", ".local/state")):
        os.environ[var] = str(home / sub)
        (home / sub).mkdir(parents=True)
    os.environ.pop("XDG_DATA_DIRS", None)
    os.environ.pop("SIGROKDECODE_DIR", None)
    return home


TEST_HOME = own_home()

import pytest  # noqa: E402  (after the home is set: nothing imported may have read the user's)
from hypothesis import settings
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.model import Scenario
from nicrig.acquisition.sim.rig import Recording, simulate

# Commands run by tests write their progress lines (nicrig.progress) only where a test asks for them
# (tests/test_progress.py): on a loaded machine a slow run would otherwise add lines to the stderr that
# tests of error messages read.
os.environ.setdefault("NICRIG_PROGRESS_S", "3600")

# Property tests judge behaviour, not speed: hypothesis' default 200 ms deadline per example fails
# correct code on a loaded 2-core machine (CI shares it).
settings.register_profile("nicrig", deadline=None)
settings.load_profile("nicrig")


def as_from_a_shell() -> None:
    """``preexec_fn`` for a command a test interrupts: it starts as a terminal's shell starts it, with
    SIGINT at its default and no signal blocked, however the test run itself was started.

    A run started in the background of a non-interactive shell (``make test &`` in a script, a CI
    runner's job) has SIGINT ignored in every process (bash ignores SIGINT and SIGQUIT for asynchronous
    commands when job control is off); Python keeps an ignored SIGINT at startup and installs no
    KeyboardInterrupt, and a child inherits it, so Ctrl-C would never reach the command under test.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


@pytest.fixture(autouse=True)
def sigint_left_as_found() -> Iterator[None]:
    """A test must leave SIGINT's handler and the main thread's signal mask as it found them: the
    commands later tests start inherit an ignored or blocked SIGINT."""
    before = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    yield
    after = signal.getsignal(signal.SIGINT), signal.pthread_sigmask(signal.SIG_BLOCK, [])
    assert after == before, f"the test changed SIGINT's handler or the signal mask: {before} -> {after}"


@pytest.fixture(autouse=True)
def closed_widgets_deleted(request: pytest.FixtureRequest) -> Iterator[None]:
    """Widgets a test's qtbot closed are deleted when it ends. Their deleteLater waits for an event loop the
    test does not return to, and a window keeps what it maps from its capture's cache open (a descriptor
    each) until it is collected: a worker running hundreds of tests would pass the 1024 descriptors
    select() takes."""
    yield
    if "qtbot" in request.fixturenames:
        from PySide6 import QtCore, QtWidgets

        app = QtWidgets.QApplication.instance()
        if app is not None:
            app.sendPostedEvents(None, QtCore.QEvent.Type.DeferredDelete)
        gc.collect()


@pytest.fixture(scope="session")
def linted_files() -> dict[Path, float]:
    """Report files already checked in this test run (path: modification time)."""
    return {}


@pytest.fixture(autouse=True)
def reports_keep_their_rules(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                             tmp_path_factory: pytest.TempPathFactory, linted_files: dict[Path, float]
                             ) -> Iterator[None]:
    """Every report the test suite writes is checked against its own claims (``nicrig.analysis.lint``): those
    rendered in this process as they are rendered, and those a command wrote under the session's temporary
    folder (other processes, module fixtures) when the test that wrote them ends. A test of a report broken on
    purpose keeps the renderers as they were imported, before this wraps them."""
    from nicrig.analysis import lint, render

    rendered: list[str] = []
    for fmt in ("html", "json"):
        original = getattr(render, f"to_{fmt}")

        def checked(report, _original=original):
            text = _original(report)
            rendered.append(text)
            return text

        monkeypatch.setattr(render, f"to_{fmt}", checked)
        monkeypatch.setitem(render.RENDERERS, fmt, checked)
    yield
    found = [p for text in rendered for p in lint.problems(lint.read(text))]
    base = tmp_path_factory.getbasetemp()
    for path in [*base.rglob("*.html"), *base.rglob("*.json")]:
        try:
            stamp = path.stat().st_mtime
            if linted_files.get(path) == stamp:
                continue
            linted_files[path] = stamp
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        if lint.is_report(text):
            found += [f"{path.name}: {p}" for p in lint.problems(lint.read(text))]
    assert not found, "reports break their rules:\n" + "\n".join(found[:20])


def run_unprivileged(argv: Sequence[str], **kwargs) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as an ordinary user: as root, as ``nobody`` with every capability dropped.

    Permission checks mean nothing to root, so tests of "not writable" run through this.
    """
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip(reason="running as root without setpriv: cannot test as an ordinary user")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                  "--inh-caps=-all", "--bounding-set=-all"]
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, **kwargs)


@pytest.fixture
def read_only_folder() -> Iterator[Path]:
    """A folder nobody may write to, inside a folder everybody may enter (pytest's tmp_path is private)."""
    top = Path(tempfile.mkdtemp(prefix="nicrig-ro-"))
    top.chmod(0o755)
    ro = top / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        yield ro
    finally:
        ro.chmod(0o755)
        shutil.rmtree(top)


def simulate_set(folder: Path, name: str, *, nic: str = "intel-pro1000", bus: str = "pci64-66",
                 host: str = "supermicro-370dle", recording: Recording = Recording(), workers: int | None = None,
                 recv_bus: str | None = None, **scenario) -> Path:
    """Simulate ``Scenario(**scenario)`` on the named (or TOML-file) profiles into ``folder/name.h5``; host B on
    ``recv_bus`` when given."""
    out = folder / f"{name}.h5"
    simulate(Scenario(**scenario), profiles.load("bus", bus), profiles.load("nic", nic),
             profiles.load("host", host), out, recording, workers=workers,
             recv_bus=profiles.load("bus", recv_bus) if recv_bus else None)
    return out


def csr_addresses(nic: dict, accesses: Sequence[str]) -> list[int]:
    """The bus addresses of a NIC's register ``accesses`` (``'w:0x0434'``), ``nic`` as a capture's ``simulation``
    attribute records the profile."""
    return [nic["bar0"][0] + int(a.split(":")[1], 16) for a in accesses]


def isr_exit_forms(nic: dict) -> list[list[int]]:
    """The addresses of the interrupt service's closing accesses in each form it takes by the causes it served
    (``isr_exit_csr``'s tags), longest first; ``nic`` as :func:`csr_addresses` has it."""
    profile = profiles.NicProfile(**{k: tuple(v) if isinstance(v, list) else v for k, v in nic.items()})
    forms = {profile.isr_exit_for(rx, tx) for rx in (False, True) for tx in (False, True)}
    return [csr_addresses(nic, f) for f in sorted(forms, key=len, reverse=True) if f]


def as_written_by_older_nicrig(path: Path) -> None:
    """Rewrite ``path`` as nicrig wrote capture sets and results files before Fletcher32 and derived-table
    companions: the same groups, attributes and data, every dataset gzip level 1 + shuffle without a
    checksum, empty tables contiguous, no ``capture_id``, and the companion's tables (``decoded/``) and
    root attributes (``gui_session``) inside the file, the companion removed."""
    import h5py
    from nicrig.companion import companion_path

    gzip = {"compression": "gzip", "compression_opts": 1, "shuffle": True}

    def copy(src: h5py.Group, dst: h5py.Group, skip: frozenset[str] = frozenset()) -> None:
        for k, v in src.attrs.items():
            if k not in skip:
                dst.attrs[k] = v
        for name, obj in src.items():
            if isinstance(obj, h5py.Group):
                copy(obj, dst.require_group(name))
                continue
            data = obj[()]
            if obj.name.startswith("/sources/"):      # samples and timestamps: growable, chunked
                ds = dst.create_dataset(name, data=data, chunks=obj.chunks, maxshape=obj.maxshape, **gzip)
            elif len(data):                            # a table with rows
                ds = dst.create_dataset(name, data=data, chunks=True, **gzip)
            else:                                      # an empty table: contiguous
                ds = dst.create_dataset(name, data=data)
            for k, v in obj.attrs.items():
                ds.attrs[k] = v

    tmp = path.with_name(path.name + ".old")
    derived = companion_path(path)
    with h5py.File(path, "r") as src, h5py.File(tmp, "w", libver=("v110", "latest")) as dst:
        copy(src, dst, frozenset({"capture_id"}))
        if derived.is_file():
            with h5py.File(derived, "r") as d:
                copy(d, dst, frozenset(d.attrs) - {"gui_session"})
    os.replace(tmp, path)
    derived.unlink(missing_ok=True)


def wait_accepting(host: str, port: int, server: subprocess.Popen, timeout_s: float = 120.0) -> None:
    """Return once ``server`` accepts TCP connections on ``host``:``port``; fail if it exits or
    ``timeout_s`` passes (its imports alone take seconds on a loaded machine)."""
    end = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection((host, port), 1).close()
            return
        except OSError:
            assert server.poll() is None, f"the server meant to listen on port {port} exited ({server.returncode})"
            assert time.monotonic() < end, f"nothing accepted connections on port {port} within {timeout_s:g} s"
            time.sleep(0.1)


@contextmanager
def udpmon_daemon_on_loopback() -> Iterator[int]:
    """A ``nicrig udpmon serve`` on 127.0.0.1 (no secret), started and stopped around the block; its port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    daemon = subprocess.Popen([sys.executable, "-m", "nicrig", "udpmon", "serve", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_accepting("127.0.0.1", port, daemon)
        yield port
    finally:
        daemon.terminate()
        daemon.wait(10)


def copy_capture(src: Path, dst: Path) -> Path:
    """Copy a capture set with its companion file of derived tables (``nicrig.companion``), when it has one."""
    from nicrig.companion import companion_path

    shutil.copy(src, dst)
    if companion_path(src).exists():
        shutil.copy(companion_path(src), companion_path(dst))
    return dst
