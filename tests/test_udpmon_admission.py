"""Admission before authentication: no stranger can block ``nicrig udpmon serve``.

The policy pieces (:mod:`nicrig.udpmon.admission`) are checked on numbers;
the daemon is then attacked for real, as a separate process, by
``udpmon_attack.py`` -- silent holders reopened every few seconds, trickling
connections, hundreds of sockets -- from loopback and from a network
namespace, under a low descriptor limit, while a legitimate controller with
the secret connects. Bounds are generous (the machine may be loaded): the
tests check that the controller gets in, that threads and descriptors stay
bounded and that SIGTERM ends the daemon, not how fast.
"""

from __future__ import annotations

import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from nicrig.errors import UsageError
from nicrig.udpmon import admission as A
from nicrig.udpmon import daemon as D

from netns import netns_hosts

SECRET = b"correct horse battery staple 0123456789"
ATTACK = Path(__file__).with_name("udpmon_attack.py")
SERVE = ("import argparse, sys; from nicrig.udpmon import daemon; p = argparse.ArgumentParser(); "
         "daemon.add_serve_arguments(p); sys.exit(daemon.serve(p.parse_args(sys.argv[1:])))")
CLIENT = ("import sys, time; from nicrig.udpmon import protocol as P; from nicrig.udpmon.client import Controller\n"
          "t = time.monotonic(); c = Controller(sys.argv[1], int(sys.argv[2]), secret_file=sys.argv[3], timeout_s=60)\n"
          "try:\n    c.connect()\n"
          "except (P.BusyError, P.ConnectionClosed, P.Unreachable) as e:\n    print(f'turned away: {e}'); sys.exit(3)\n"
          "c.ping(); c.close(); print(f'served {time.monotonic() - t:.2f}')")
CLIENT_TURNED_AWAY = 3   # the daemon was busy, closed the connection before its greeting, or did not answer
MAX_THREADS = 8          # main + session + test worker + its timer, with room to spare
FD_HEADROOM = 40         # descriptors beyond the pre-authentication table: Python, session, test


# ----------------------------------------------------------------------------- the policy on numbers


def test_random_early_drop_follows_max_startups() -> None:
    s = A.Startups(start=10, rate_percent=30, full=100, per_source=5)
    assert A.drop_probability(0, s) == 0.0
    assert A.drop_probability(9, s) == 0.0
    assert A.drop_probability(10, s) == pytest.approx(0.30)
    assert A.drop_probability(55, s) == pytest.approx(0.30 + 0.70 * 45 / 90)
    assert A.drop_probability(100, s) == 1.0
    assert A.drop_probability(1000, s) == 1.0
    assert A.parse_startups("10:30:100", 5) == s
    assert A.parse_startups("20", 5) == A.Startups(start=20, rate_percent=100, full=20, per_source=5)
    for bad in ("10:30", "a:b:c", "50:30:10", "10:130:100", "0:30:10"):
        with pytest.raises(UsageError, match="max.startups"):
            A.parse_startups(bad, 5)


def test_sources_are_addresses_loopback_and_ipv6_slash_64() -> None:
    assert A.source_block("127.0.0.1") == A.source_block("127.9.8.7") == A.source_block("::1") \
        == A.source_block("::ffff:127.0.0.2") == A.LOOPBACK_BLOCK
    assert A.source_block("198.18.0.1") == "198.18.0.1"
    assert A.source_block("::ffff:198.18.0.1") == "198.18.0.1"
    assert A.source_block("2001:db8:1:2:aaaa::1") == A.source_block("2001:db8:1:2::ffff") == "2001:db8:1:2::/64"
    assert A.source_block("2001:db8:1:3::1") != A.source_block("2001:db8:1:2::1")


def test_penalties_accrue_are_enforced_past_the_minimum_and_run_out() -> None:
    now = [1000.0]
    p = A.Penalties(min_s=15, max_s=60, clock=lambda: now[0])
    p.add("198.18.0.1", "grace")          # 10 s: below the minimum, not enforced
    assert p.remaining_s("198.18.0.1") == 0.0
    p.add("198.18.0.1", "authfail")       # 15 s: not more than the minimum
    assert p.remaining_s("198.18.0.1") == 0.0
    p.add("198.18.0.1", "noauth")         # 16 s: enforced for all of it
    assert p.remaining_s("198.18.0.1") == pytest.approx(16)
    now[0] += 10
    assert p.remaining_s("198.18.0.1") == pytest.approx(6)
    now[0] += 7
    assert p.remaining_s("198.18.0.1") == 0.0
    for _ in range(20):
        p.add("198.18.0.2", "grace")
    assert p.remaining_s("198.18.0.2") == pytest.approx(60)  # capped at max
    for _ in range(20):
        p.add(A.LOOPBACK_BLOCK, "grace")
    assert p.remaining_s(A.LOOPBACK_BLOCK) == 0.0             # exempt


def test_penalties_remember_a_bounded_number_of_sources() -> None:
    now = [0.0]
    p = A.Penalties(min_s=1, max_sources=100, clock=lambda: now[0])
    for i in range(1000):
        now[0] += 0.001
        p.add(f"10.0.{i // 256}.{i % 256}", "grace")
    assert len(p) <= 100
    assert p.remaining_s("10.0.3.231") > 0  # the newest are kept


def test_descriptor_budget() -> None:
    assert A.fd_budget(1024, 20) == 1024 - 20 - 32
    assert A.fd_budget(40, 20) == 1


def test_log_lines_about_strangers_are_summed_up() -> None:
    lines: list[str] = []
    now = [0.0]
    note = D._LogThrottle(lines.append, clock=lambda: now[0])
    for i in range(500):
        now[0] += 0.01
        note("refused: busy", f"refused {i}")
    note.flush()
    assert lines == ["refused 0"]
    now[0] += D.LOG_SUMMARY_S
    note.flush()
    assert lines == ["refused 0", f"499 more like 'refused: busy' in the last {D.LOG_SUMMARY_S:g} s"]


# ----------------------------------------------------------------------------- the daemon under attack


@dataclass
class Served:
    proc: subprocess.Popen
    log: Path
    port: int
    opened: float = field(default_factory=time.monotonic)
    peak_threads: int = 0
    peak_fds: int = 0
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def sample(self) -> None:
        """Record the daemon's thread and descriptor counts every 50 ms until :meth:`stop_sampling`."""
        while not self._stop.wait(0.05):
            try:
                status = Path(f"/proc/{self.proc.pid}/status").read_text()
                fds = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
            except (FileNotFoundError, ProcessLookupError):
                return
            threads = int(re.search(r"^Threads:\s+(\d+)", status, re.M).group(1))
            self.peak_threads = max(self.peak_threads, threads)
            self.peak_fds = max(self.peak_fds, fds)
            self.samples += 1

    def stop_sampling(self) -> None:
        self._stop.set()


@contextmanager
def daemon_process(argv_prefix: list[str], bind: str, secret: Path, tmp: Path, *, nofile: int | None = None,
                   extra: tuple[str, ...] = ()) -> Iterator[Served]:
    """``nicrig udpmon serve`` as its own process (in a namespace when ``argv_prefix`` says so)."""
    log = tmp / "daemon.log"

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with open(log, "w") as err:
        proc = subprocess.Popen([*argv_prefix, sys.executable, "-c", SERVE, "--bind", bind, "--port", "0",
                                 "--secret-file", str(secret), *extra], stderr=err, preexec_fn=limit)
    try:
        end = time.monotonic() + 60
        while not (m := re.search(r"listening on \S+:(\d+) ", log.read_text())):
            assert proc.poll() is None and time.monotonic() < end, log.read_text()
            time.sleep(0.05)
        served = Served(proc, log, int(m.group(1)))
        sampler = threading.Thread(target=served.sample, daemon=True)
        sampler.start()
        yield served
        served.stop_sampling()
        sampler.join(5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def attack(argv_prefix: list[str], host: str, port: int, *, seconds: float, **kinds: int) -> subprocess.Popen:
    args = [f"--{k.replace('_', '-')}={v}" for k, v in kinds.items()]
    return subprocess.Popen([*argv_prefix, sys.executable, str(ATTACK), host, str(port), "--seconds", str(seconds),
                             *args], stdout=subprocess.PIPE, text=True)


def attack_counts(proc: subprocess.Popen) -> dict[str, int]:
    """End the attack (it prints its counts on SIGTERM) and return the counts."""
    proc.terminate()
    out, _ = proc.communicate(timeout=60)
    return json.loads(out.strip().splitlines()[-1])


def legitimate(argv_prefix: list[str], host: str, port: int, secret: Path, attempts: int = 5) -> str:
    """A controller with the secret connects and pings; its output (``served <s>``) or the failure.

    Strangers from the same source hold the slots of connections waiting to authenticate, so the
    daemon may turn the controller away (busy after a minute of its retries, or evicted before the
    greeting): like a user it runs the command again, up to ``attempts`` times.
    """
    for _ in range(attempts):
        r = subprocess.run([*argv_prefix, sys.executable, "-c", CLIENT, host, str(port), str(secret)],
                           capture_output=True, text=True, timeout=300)
        if r.returncode != CLIENT_TURNED_AWAY:
            break
    assert r.returncode == 0 and r.stdout.startswith("served"), (r.stdout, r.stderr)
    return r.stdout.strip()


def sigterm_ends(served: Served) -> str:
    """SIGTERM; the daemon must exit on its own (the spec is 2 s; the bound here allows for a loaded machine)."""
    served.proc.send_signal(signal.SIGTERM)
    assert served.proc.wait(timeout=30) == 0
    return served.log.read_text()


SUMMARY = re.compile(r"\d+ more like '([^']+)' in the last ")


def check_few_lines(served: Served, log: str, bound: int) -> None:
    """Strangers cost the log a few lines, not one per connection: fewer than ``bound`` besides the
    summaries, and one summary per kind of event every :data:`D.LOG_SUMMARY_S` however long a loaded
    machine made the test."""
    lines = log.splitlines()
    summaries = [m[1] for m in map(SUMMARY.search, lines) if m]
    assert len(lines) - len(summaries) < bound, log
    windows = math.ceil((time.monotonic() - served.opened) / D.LOG_SUMMARY_S) + 1
    assert all(summaries.count(kind) <= windows for kind in summaries), log


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    f = tmp_path / "secret"
    f.write_bytes(SECRET)
    f.chmod(0o600)
    return f


def check_bounded(served: Served, table: int) -> None:
    assert served.samples > 10
    assert served.peak_threads <= MAX_THREADS, served.peak_threads
    assert served.peak_fds <= table + FD_HEADROOM, served.peak_fds


def test_strangers_on_loopback_cannot_lock_out_a_controller(secret: Path, tmp_path: Path) -> None:
    with daemon_process([], "127.0.0.1", secret, tmp_path, nofile=128) as served:
        attacker = attack([], "127.0.0.1", served.port, seconds=120, holders=4, reopen_s=2.5, trickle=100,
                          flood=300)
        time.sleep(3)  # the attack is under way: holders have been reopened at least once
        results = [legitimate([], "127.0.0.1", served.port, secret) for _ in range(3)]
        assert attacker.poll() is None, "the attack ended before the controllers were done"
        counts = attack_counts(attacker)
        log = sigterm_ends(served)
    assert counts["connects"] > 400 and counts["closed_by_daemon"] > 300, counts
    check_bounded(served, D.Config().startups.full)
    assert log.count("auth=hmac-sha256 authenticated") == 3, log
    # hundreds of refusals, a few lines: the first of each kind and a summary per 10 s
    check_few_lines(served, log, 60)
    assert "stopped" in log and results


def test_low_descriptor_limit_is_respected(secret: Path, tmp_path: Path) -> None:
    with daemon_process([], "127.0.0.1", secret, tmp_path, nofile=48) as served:
        attacker = attack([], "127.0.0.1", served.port, seconds=120, holders=4, trickle=50, flood=300)
        time.sleep(2)
        legitimate([], "127.0.0.1", served.port, secret)
        attack_counts(attacker)
        log = sigterm_ends(served)
    assert served.peak_fds <= 48
    check_few_lines(served, log, 40)
    assert "auth=hmac-sha256 authenticated" in log


def test_descriptor_shortage_is_shed_without_a_log_flood(secret: Path, tmp_path: Path) -> None:
    """No descriptor left at all (limit lowered under the running daemon): accept fails with EMFILE.

    The daemon must shed the waiting connection through its reserve descriptor, back off and log a
    few lines; once the limit is raised again a controller gets in.
    """
    with daemon_process([], "127.0.0.1", secret, tmp_path) as served:
        pid = served.proc.pid
        open_now = len(os.listdir(f"/proc/{pid}/fd"))
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={open_now}:"], check=True)
        attacker = attack([], "127.0.0.1", served.port, seconds=120, holders=4, flood=100)
        time.sleep(4)
        assert "accept failed: Too many open files" in served.log.read_text()
        subprocess.run(["prlimit", f"--pid={pid}", "--nofile=1024:"], check=True)
        legitimate([], "127.0.0.1", served.port, secret)
        attack_counts(attacker)
        log = sigterm_ends(served)
    check_few_lines(served, log, 40)
    assert "auth=hmac-sha256 authenticated" in log


def test_strangers_from_a_namespace_and_loopback_cannot_lock_out_controllers(secret: Path, tmp_path: Path) -> None:
    with netns_hosts(3) as hosts:
        if not hosts.isolated:
            pytest.skip(f"no network namespaces: {hosts.fallback_reason}")
        a, b, c = hosts.a, hosts.b, hosts.c
        in_a, in_b, in_c = (["ip", "netns", "exec", h.netns] for h in (a, b, c))
        with daemon_process(in_b, "0.0.0.0", secret, tmp_path, nofile=256) as served:
            from_a = attack(in_a, b.address, served.port, seconds=120, holders=4, reopen_s=2.5, trickle=100,
                            flood=300)
            from_lo = attack(in_b, "127.0.0.1", served.port, seconds=120, holders=4, flood=100)
            time.sleep(3)
            legitimate(in_c, b.address, served.port, secret)
            legitimate(in_b, "127.0.0.1", served.port, secret)
            time.sleep(1)
            legitimate(in_c, b.address, served.port, secret)
            assert from_a.poll() is None and from_lo.poll() is None, "the attack ended too soon"
            counts = attack_counts(from_a)
            attack_counts(from_lo)
            log = sigterm_ends(served)
    check_bounded(served, D.Config().startups.full)
    assert counts["closed_by_daemon"] > 300, counts
    assert log.count("auth=hmac-sha256 authenticated") == 3, log
    assert f"{a.address} penalized" in log, log  # the namespace attacker is refused at accept in the end
    check_few_lines(served, log, 80)


def test_sigterm_ends_a_daemon_with_a_session_and_strangers(secret: Path, tmp_path: Path) -> None:
    with daemon_process([], "127.0.0.1", secret, tmp_path) as served:
        attacker = attack([], "127.0.0.1", served.port, seconds=120, holders=4, trickle=20, flood=50)
        session = subprocess.Popen(
            [sys.executable, "-c", "import sys, time; from nicrig.udpmon.client import Controller; "
             "c = Controller(sys.argv[1], int(sys.argv[2]), secret_file=sys.argv[3], timeout_s=60); c.connect(); "
             "print('in', flush=True); time.sleep(60)", "127.0.0.1", str(served.port), str(secret)],
            stdout=subprocess.PIPE, text=True)
        try:
            assert session.stdout is not None and session.stdout.readline().strip() == "in"
            time.sleep(1)
            log = sigterm_ends(served)
        finally:
            session.kill()
            session.wait()
            attack_counts(attacker)
    assert "authenticated" in log and "stopped" in log
