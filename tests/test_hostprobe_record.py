"""The host probe's recording on the real kernel: tracefs instances, the mono clock, losses, restore after kills;
a recorder that stops answering; ``trace show``.

Needs root (tracefs); every test skips without it, except the non-root refusal and ``trace show`` (hand-made
traces).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import as_from_a_shell, run_unprivileged
from nicrig.acquisition.hostprobe import events as hp
from nicrig.acquisition.hostprobe import tracefs
from nicrig.h5file import open_any

NICRIG = [sys.executable, "-m", "nicrig"]
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="kernel tracing needs root")

#: A loopback UDP exchange that prints CLOCK_MONOTONIC around each send: 20 datagrams of 300 bytes.
EXCHANGE = """
import socket, time
r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); r.bind(("127.0.0.1", 0))
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(20):
    t0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    s.sendto(bytes(300), r.getsockname())
    t1 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    r.recv(2000)
    print(t0, t1, flush=True)
"""


def _instances() -> list[str]:
    return tracefs.nicrig_instances(tracefs.root())


def _descends(pid: int, ancestor: int) -> bool:
    """True when process ``pid`` is ``ancestor`` or one of its descendants (while both live)."""
    while pid > 1:
        if pid == ancestor:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            return False
    return False


def _wait_for(predicate, timeout_s: float = 60.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@root_only
def test_command_recorded_on_the_monotonic_clock(tmp_path: Path) -> None:
    out = tmp_path / "t.h5"
    p = subprocess.run([*NICRIG, "trace", "record", "-o", str(out), "--", sys.executable, "-c", EXCHANGE],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    sends = np.array([[int(x) for x in line.split()] for line in p.stdout.split("\n") if line.strip()])
    assert len(sends) == 20
    with open_any(out) as f:
        trace = hp.read(f, "local", raw=True)
    assert trace.clock == "mono"
    assert not tracefs.stale_instances(tracefs.root())
    # the command's system calls, and only its (the per-pid filter)
    sys_rows = trace.of("raw_syscalls:sys_enter")
    assert len(sys_rows) > 20 and set(sys_rows["pid"]) == set(trace.pids) and len(trace.pids) == 1
    # each datagram (300 bytes + 8 UDP + 20 IP) enters the stack inside its sendto call, on the same clock
    rx = trace.of("net:netif_rx")
    rx = rx[(rx["len"] == 328) & (rx["device"] == b"lo") & (rx["pid"] == trace.pids[0])]
    assert len(rx) == 20
    inside = [(t0 <= t <= t1) for (t0, t1), t in zip(sends, rx["time_ns"])]
    assert all(inside)
    # ... and is handed up by a NET_RX softirq's NAPI poll (the backlog), with one frame or more per poll
    polls = trace.of("napi:napi_poll")
    assert (polls["work"] >= 1).any() and (polls["work"] <= polls["budget"]).all()
    assert trace.symbols["softirq"][3] == "NET_RX"
    assert trace.raw is not None and trace.raw.shape[1] == trace.subbuf_size
    assert trace.lost == 0


@root_only
def test_pid_given_with_a_command_is_followed_too(tmp_path: Path) -> None:
    """``--pid`` beside ``-- COMMAND``: both threads' system calls (the --pid was silently dropped before)."""
    other = subprocess.Popen([sys.executable, "-c", "import os, time\nfor _ in range(400): os.getppid(); "
                              "time.sleep(0.01)"])
    out = tmp_path / "p.h5"
    try:
        p = subprocess.run([*NICRIG, "trace", "record", "--events", "syscalls", "--pid", str(other.pid), "-o",
                            str(out), "--", sys.executable, "-c", "import time; time.sleep(1)"],
                           capture_output=True, text=True, timeout=60)
    finally:
        other.kill()
        other.wait()
    assert p.returncode == 0, p.stderr
    with open_any(out) as f:
        trace = hp.read(f, "local")
    assert len(trace.pids) == 2 and other.pid in trace.pids
    assert set(trace.of("raw_syscalls:sys_enter")["pid"]) == set(trace.pids)


@root_only
def test_drops_carry_the_kernel_reason(tmp_path: Path) -> None:
    flood = ("import socket\n"
             "r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "r.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1); r.bind(('127.0.0.1', 0))\n"
             "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "for i in range(200): s.sendto(bytes(1000), r.getsockname())\n")
    out = tmp_path / "d.h5"
    p = subprocess.run([*NICRIG, "trace", "record", "--events", "skb,net", "-o", str(out), "--",
                        sys.executable, "-c", flood], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    with open_any(out) as f:
        trace = hp.read(f, "local")
    drops = trace.of("skb:kfree_skb")
    names = [trace.symbols["drop_reason"].get(int(r), "?") for r in drops["reason"]]
    assert names.count("SOCKET_RCVBUFF") > 100


@root_only
def test_losses_are_counted_not_hidden(tmp_path: Path) -> None:
    busy = "import os\nfor i in range(300000): os.getppid()\n"
    out = tmp_path / "l.h5"
    p = subprocess.run([*NICRIG, "trace", "record", "--events", "syscalls", "--buffer-kb", "64", "--json",
                        "-o", str(out), "--", sys.executable, "-c", busy], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    with open_any(out) as f:
        trace = hp.read(f, "local")
    recorded = len(trace.events)
    assert trace.lost > 0 and recorded < 2 * 300000
    assert '"lost_events": %d' % trace.lost in p.stdout


@root_only
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_instance_removed_whatever_ends_the_command(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "k.h5"
    p = subprocess.Popen([*NICRIG, "trace", "record", "--duration", "60", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_shell)
    try:
        assert "recording" in p.stderr.readline()  # tracing is on
        # The recording's own instance: other tests may record at the same time (pytest -n 2).
        mine = [name for name in _instances() if _descends(int(name.rsplit("-", 1)[1]), p.pid)]
        assert len(mine) == 1, mine
        p.send_signal(sig)
        p.wait(60)
    finally:
        if p.poll() is None:
            p.kill()
    assert _wait_for(lambda: mine[0] not in _instances()), "the instance outlived its recording"
    if sig == signal.SIGKILL:
        assert not out.exists()
    else:  # stopped early: what was recorded is kept
        assert p.returncode == 0, p.stderr.read()
        with open_any(out) as f:
            assert hp.hosts(f) == ["local"]


@root_only
def test_stale_instance_of_a_dead_owner_is_swept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    base = tracefs.root()
    stale = base / "instances" / f"{tracefs.INSTANCE_PREFIX}{dead.pid}"
    stale.mkdir()
    (stale / "events" / "irq" / "enable").write_text("1")
    try:
        p = subprocess.run([*NICRIG, "trace", "record", "--duration", "0.2", "--events", "irq", "-o",
                            str(tmp_path / "s.h5")], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0, p.stderr
        assert not stale.exists()
    finally:
        tracefs.remove_instance(stale)


def test_not_root_is_refused_with_exit_2(tmp_path: Path) -> None:
    p = run_unprivileged([*NICRIG, "trace", "record", "--duration", "1", "-o", "/tmp/never-written.h5"],
                         timeout=60)
    assert p.returncode == 2
    assert "needs root" in p.stderr and p.stderr.count("\n") == 1
    assert not Path("/tmp/never-written.h5").exists()


def _guardian_stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str) -> None:
    """Make :class:`Recording` start ``body`` (a shell script) instead of the real guardian."""
    from nicrig.acquisition.hostprobe import recorder

    script = tmp_path / "guardian"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    monkeypatch.setattr(recorder.sys, "executable", str(script))


@root_only
def test_a_guardian_that_never_answers_is_an_error_not_a_hang(tmp_path: Path, monkeypatch) -> None:
    """It reads its standard input to the end and says nothing: start() gives up, closes the pipe, reaps it
    (before, start() waited for it to exit while holding that pipe open: forever)."""
    from nicrig.acquisition.hostprobe.recorder import Recording, RecordSpec
    from nicrig.errors import NicrigError

    _guardian_stand_in(tmp_path, monkeypatch, "cat >/dev/null")  # the shell keeps standard output open
    rec = Recording(RecordSpec(events=("irq:irq_handler_entry",)), tmp_path / "spool")
    with pytest.raises(NicrigError, match="could not start: the recorder did not answer"):
        rec.start(timeout_s=0.5)
    assert rec._proc is None


@root_only
def test_a_guardian_that_never_reports_is_an_error_not_a_traceback(tmp_path: Path, monkeypatch) -> None:
    """Ready, then deaf to ``stop``: stop() kills it after its timeout and says so as a NicrigError."""
    from nicrig.acquisition.hostprobe.recorder import Recording, RecordSpec
    from nicrig.errors import NicrigError

    _guardian_stand_in(tmp_path, monkeypatch,
                       "echo '{\"ready\": \"nicrig-0\", \"start_ns\": 1}'; exec sleep 600")
    rec = Recording(RecordSpec(events=("irq:irq_handler_entry",)), tmp_path / "spool")
    rec.start(timeout_s=20)
    with pytest.raises(NicrigError, match="tracing failed: the recorder did not answer"):
        rec.stop(timeout_s=0.5)


def test_show_summarises_each_host_of_a_file(tmp_path: Path) -> None:
    """``trace show`` of a file holding a (hand-made) host trace: the text line and the JSON document."""
    from nicrig.acquisition.capture import CaptureSet

    events = np.zeros(3, hp.EVENT_DTYPE)
    events["time_ns"], events["event"] = [10, 20, 30], [0, 1, 0]
    losses = np.zeros(2, hp.LOSSES_DTYPE)
    losses["cpu"], losses["dropped_events"], losses["overrun"] = [0, 1], [0, 4], [1, 0]
    trace = hp.HostTrace(host="local", events=events, event_names=["irq:irq_handler_entry", "irq:irq_handler_exit"],
                         losses=losses, clock="mono", start_ns=0, end_ns=2_000_000_000, hostname="box")
    out = tmp_path / "t.h5"
    with CaptureSet.create(out) as cs:
        hp.write(cs, trace)
    p = subprocess.run([*NICRIG, "trace", "show", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == f"{out}: host local (box), clock mono, 2.000 s, 3 events, 5 lost"
    p = subprocess.run([*NICRIG, "trace", "show", str(out), "--json"], capture_output=True, text=True, timeout=60)
    doc = json.loads(p.stdout)
    assert doc["file"] == str(out) and [h["host"] for h in doc["hosts"]] == ["local"]
    assert doc["hosts"][0]["by_event"] == {"irq:irq_handler_entry": 2, "irq:irq_handler_exit": 1}
    assert doc["hosts"][0]["lost_events"] == 5 and doc["hosts"][0]["span_s"] == 2.0


def test_show_of_a_file_without_host_traces_is_an_error(tmp_path: Path) -> None:
    from nicrig.acquisition.capture import CaptureSet

    out = tmp_path / "empty.h5"
    CaptureSet.create(out).close()
    p = subprocess.run([*NICRIG, "trace", "show", str(out)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and p.stderr == f"nicrig: error: {out}: holds no host trace\n"
