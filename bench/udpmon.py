#!/usr/bin/env python3
"""Benchmark: udpmon's latency, pacing and send rate beside sockperf and iperf3, on loopback.

Runs, in one go on this machine and only on 127.0.0.1:

1. **Round trips** (request and response of the same size, 64 and 1400 bytes,
   back to back): nicrig's engine (``request_response`` against the responder
   of a ``nicrig udpmon serve`` subprocess) beside ``sockperf ping-pong``
   against ``sockperf server``, like with like: busy polling on both ends
   (nicrig ``--busy-poll``, which makes the daemon's responder spin too,
   against ``sockperf server --nonblocked`` with ``ping-pong --nonblocked``)
   and blocking on both ends (both tools' default).
   sockperf's own log (``--full-log``, with ``--full-rtt`` so it holds round
   trips, not its default one-way latency = RTT/2) gives one RTT per message;
   nicrig runs as many round trips as sockperf's measured (post-warm-up) ones;
   both sets go through the same percentile code. A timeout or a dropped
   message counts as an infinite RTT. Goal (issue): median <= 1.05x and
   p99 <= 1.2x sockperf's.
2. **Receiver loss**: 1472-byte datagrams every 20 and 40 us to nicrig's
   receiver (``send_paced`` to a ``serve`` receiver) and to iperf3's
   (``iperf3 -u -l 1472 -b <same rate> -k <same count>``), rounds alternated
   and pooled. nicrig's loss is split into what its receive socket dropped
   (SO_MEMINFO / SO_RXQ_OVFL) and the rest. Goal: nicrig's loss <= iperf3's.
3. **Pacing**: 64-byte datagrams every 10 us, seen by one independent
   observer, ``dumpcap`` on ``lo`` (kernel packet-tap timestamps, ns
   resolution, read back with ``tshark``): nicrig's ``send_paced`` beside the
   simplest correct C pacer (``bench/pacer.c``, compiled here: busy-wait on
   CLOCK_MONOTONIC, one ``send()`` per packet), rounds alternated and pooled;
   goal: nicrig's p99 |spacing - 10 us| <= 1.2x the C pacer's (this VM's floor
   is above 1 us, so an absolute goal would measure the VM). Also shown:
   nicrig's own send times, ``iperf3 -u -b 51.2M -l 64`` with its default 1 ms
   pacing timer and with ``--pacing-timer 1``, and a floor row: a thread
   reading CLOCK_MONOTONIC in a loop for 1 s sees when it was not running
   (interrupts, the hypervisor), and a perfect pacer would be late by that.
4. **Peak 64-byte send rate**: ``send_paced`` with spacing 0 beside
   ``iperf3 -u -b 0 -l 64`` (packets/s from iperf3's own report), each to its
   own receiver. Goal: >= 1x iperf3.

Every comparison is repeated ``--rounds`` times, the tools' order
swapped each round, and pooled, so that the machine's drift between runs
(other load, idle states of the CPUs) does not all fall on one tool.

On loopback the sender's ``send()`` also runs the receive path, and every
process shares the machine's cores, so all of this is a CPU benchmark of the
tools, not of a NIC. Needs sockperf, iperf3, a C compiler and dumpcap/tshark
(root or capture rights for the pacing observer). The load average is printed
beside the numbers: other work on the machine moves them. Paste the table into
docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HOST = "127.0.0.1"
RTT_MEDIAN_GOAL = 1.05
RTT_P99_GOAL = 1.2
PACE_SIZE = 64
PACE_SPACING_NS = 10_000
PACE_P99_GOAL_NS = 1_000
# iperf3 counts payload bits: 64 B * 8 / 10 us = 51.2 Mbit/s (iperf3's rate suffixes are powers of 10).
PACE_IPERF_BPS = PACE_SIZE * 8 * 1_000_000_000 // PACE_SPACING_NS
PACE_C_GOAL = 1.2
LOSS_SIZE = 1472
LOSS_SPACINGS_NS = (20_000, 40_000)
PACER_C = Path(__file__).with_name("pacer.c")


# --------------------------------------------------------------------------
# processes and ports


def _free_port() -> int:
    """A port free for both TCP and UDP on 127.0.0.1 (iperf3 uses one number for both)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as t:
            t.bind((HOST, 0))
            port = t.getsockname()[1]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                try:
                    u.bind((HOST, port))
                except OSError:
                    continue
        return port
    sys.exit("bench: no free port on 127.0.0.1")


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, what: str, timeout_s: float = 10.0) -> str:
    """Wait until ``log`` holds a line matching ``pattern``; return that line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        m = re.search(pattern, text)
        if m:
            return m.group(0)
        if proc.poll() is not None:
            sys.exit(f"bench: {what} exited ({proc.returncode}):\n{text}")
        time.sleep(0.05)
    sys.exit(f"bench: {what} not ready after {timeout_s:g} s:\n{log.read_text(errors='replace')}")


class Procs:
    """Subprocesses that are always ended (by their own pid) when the bench leaves, however it leaves."""

    def __init__(self, tmp: Path, cpus: tuple[int, int] | None):
        self.tmp = tmp
        self.live: list[subprocess.Popen] = []
        self.cpus = cpus
        self.all_cpus = sorted(os.sched_getaffinity(0))  # before the bench pins itself

    def on(self, role: str, cmd: list[str]) -> list[str]:
        """``cmd`` pinned to the client's or the server's CPU, or to all ("any": the observer)."""
        if self.cpus is None:
            return cmd
        cpu = {"client": str(self.cpus[0]), "server": str(self.cpus[1]),
               "any": ",".join(str(c) for c in self.all_cpus)}[role]
        return ["taskset", "-c", cpu, *cmd]

    def start(self, cmd: list[str], name: str) -> tuple[subprocess.Popen, Path]:
        log = self.tmp / f"{name}.log"
        with log.open("wb") as f:
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        self.live.append(p)
        return p, log

    def end(self, p: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.live:
            self.live.remove(p)

    def close(self) -> None:
        for p in list(self.live):
            self.end(p, timeout_s=3.0)


def _run(cmd: list[str], timeout_s: float) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                           check=False)
    except subprocess.TimeoutExpired:
        sys.exit(f"bench: {' '.join(cmd)} took over {timeout_s:g} s")
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r.stdout


def _start_nicrig(procs: Procs):
    from nicrig.udpmon.client import Controller

    p, log = procs.start(procs.on("server", [sys.executable, "-m", "nicrig", "udpmon", "serve", "--bind", HOST,
                                             "--port", "0", "--max-rate-pps", "2000000", "--max-packets", "4000000"]),
                         "nicrig-serve")
    line = _wait_for(log, r"listening on 127\.0\.0\.1:(\d+)", p, "nicrig udpmon serve", timeout_s=120)
    ctl = Controller(HOST, int(line.rsplit(":", 1)[1]))
    ctl.connect()
    return ctl


# --------------------------------------------------------------------------
# statistics


def _percentiles(x_ns: np.ndarray, lost: int, qs: tuple[float, ...]) -> list[float]:
    """Percentiles (ns, nearest rank) of ``x_ns`` with ``lost`` more samples counted as infinite."""
    x = np.asarray(x_ns, dtype=np.float64)
    if lost:
        x = np.concatenate([x, np.full(lost, np.inf)])
    if len(x) == 0:
        return [float("nan")] * len(qs)
    return [float(v) for v in np.percentile(x, qs, method="inverted_cdf")]


def _spacing_error(t_ns: np.ndarray) -> tuple[float, float, float]:
    """(p50, p99, max) of |t[i+1] - t[i] - spacing| in ns."""
    d = np.abs(np.diff(t_ns.astype(np.int64)) - PACE_SPACING_NS)
    if len(d) == 0:
        return (float("nan"),) * 3
    p50, p99 = np.percentile(d, [50, 99])
    return float(p50), float(p99), float(d.max())


# --------------------------------------------------------------------------
# 1. round trips


def _sockperf_rtt(procs: Procs, size: int, busy: bool, seconds: int) -> tuple[np.ndarray, int]:
    port = _free_port()
    srv, log = procs.start(procs.on("server", ["sockperf", "server", "-i", HOST, "-p", str(port)]
                                    + (["--nonblocked"] if busy else [])), "sockperf-server")
    try:
        _wait_for(log, r"using \S+ to block", srv, "sockperf server")
        full = procs.tmp / "sockperf-full.csv"
        cmd = ["sockperf", "ping-pong", "-i", HOST, "-p", str(port), "-m", str(size), "-t", str(seconds),
               "--full-rtt", "--full-log", str(full)] + (["--nonblocked"] if busy else [])
        out = _run(procs.on("client", cmd), seconds + 30)
    finally:
        procs.end(srv)
    m = re.search(r"# dropped messages = (\d+)", out)
    dropped = int(m.group(1)) if m else 0
    rtt = []
    for line in full.read_text().splitlines():
        parts = line.split(",")
        if len(parts) == 4 and parts[0].strip().isdigit():
            rtt.append(float(parts[3]))  # usec, a round trip with --full-rtt
    full.unlink()
    if not rtt:
        sys.exit(f"bench: no round trips in sockperf's log:\n{out}")
    return np.asarray(rtt) * 1000.0, dropped


def _nicrig_rtt(ctl, size: int, busy: bool, count: int, test_id: int) -> tuple[np.ndarray, int, int]:
    from nicrig.udpmon import engine

    port = ctl.start_responder(test_id=test_id, max_response_bytes=size, max_rate_pps=2_000_000,
                               duration_s=120.0, busy_poll=busy)
    try:
        with engine.open_udp(connect=(HOST, port)) as sock:
            # warm-up, as sockperf has one (its first 400 ms are not in its log)
            engine.request_response(sock, count=min(count, 20_000), request_bytes=size, response_bytes=size,
                                    test_id=test_id, timeout_ns=1_000_000_000, busy_poll=busy, seed=test_id)
            lat = engine.request_response(sock, count=count, request_bytes=size, response_bytes=size,
                                          test_id=test_id, timeout_ns=1_000_000_000, busy_poll=busy,
                                          seed=test_id)
    finally:
        stats, _ = ctl.stop()
    refused = int(stats.get("engine", {}).get("refused_rate", 0))
    ok = lat.rtt_ns[lat.rtt_ns >= 0]
    return ok.astype(np.float64), int(count - len(ok)), refused


def bench_rtt(procs: Procs, ctl, sizes: list[int], seconds: int, rounds: int) -> list[dict]:
    """Both tools per (mode, size), ``rounds`` times with the order swapped each round; pooled per tool."""
    pooled: dict[tuple[bool, int, str], list] = {}
    counts: dict[tuple[bool, int], int] = {}
    test_id = 100
    for rnd in range(rounds):
        for busy in (True, False):
            for size in sizes:
                order = ("sockperf", "nicrig") if rnd % 2 == 0 else ("nicrig", "sockperf")
                for tool in order:
                    if tool == "sockperf":
                        x, lost = _sockperf_rtt(procs, size, busy, seconds)
                        counts.setdefault((busy, size), len(x) + lost)
                        refused = 0
                    else:
                        test_id += 1
                        # as many round trips as sockperf measured (its first run of this point)
                        n = counts.get((busy, size), 50_000)
                        x, lost, refused = _nicrig_rtt(ctl, size, busy, n, test_id)
                    acc = pooled.setdefault((busy, size, tool), [[], 0, 0])
                    acc[0].append(x)
                    acc[1] += lost
                    acc[2] += refused
    rows = []
    for busy in (True, False):
        for size in sizes:
            for tool in ("nicrig", "sockperf"):
                parts, lost, refused = pooled[(busy, size, tool)]
                x = np.concatenate(parts)
                p50, p99, p999 = _percentiles(x, lost, (50, 99, 99.9))
                flag = ("--busy-poll (both ends)" if tool == "nicrig" else "--nonblocked (both ends)") if busy else ""
                rows.append({"mode": "busy-poll" if busy else "blocking", "size": size, "tool": tool, "flag": flag,
                             "count": len(x) + lost, "lost": lost, "min": float(x.min()) if len(x) else float("nan"),
                             "p50": p50, "p99": p99, "p999": p999, "refused": refused})
    return rows


# --------------------------------------------------------------------------
# 2. pacing and 3. peak rate


class Capture:
    """dumpcap on lo for UDP to one port; yields the capture's timestamps (ns) of 64-byte datagrams."""

    def __init__(self, procs: Procs, port: int, name: str):
        self.procs, self.name = procs, name
        self.pcap = procs.tmp / f"{name}.pcapng"
        self.proc, self.log = procs.start(procs.on("any", ["dumpcap", "-q", "-i", "lo", "-f", f"udp and dst port {port}",
                                                           "-B", "64", "-a", "duration:60", "-w", str(self.pcap)]),
                                          name)
        _wait_for(self.log, r"Capturing on", self.proc, "dumpcap")
        time.sleep(0.3)

    def stop(self) -> tuple[np.ndarray, int]:
        """(timestamps of the datagrams of PACE_SIZE bytes, packets the capture dropped)."""
        time.sleep(0.2)
        self.procs.end(self.proc, signal.SIGINT)
        m = re.search(r"received/dropped on interface '[^']*': (\d+)/(\d+)", self.log.read_text(errors="replace"))
        dropped = int(m.group(2)) if m else -1
        out = _run(self.procs.on("any", ["tshark", "-r", str(self.pcap), "-T", "fields", "-e", "frame.time_epoch",
                                         "-e", "udp.length"]), 120)
        self.pcap.unlink()
        t = []
        want = str(PACE_SIZE + 8)
        for line in out.splitlines():
            stamp, _, length = line.partition("\t")
            if length.strip() == want:
                sec, _, frac = stamp.partition(".")
                t.append(int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9]))  # exact ns, no float
        return np.asarray(t, dtype=np.int64), dropped


def _nicrig_stream(ctl, count: int, spacing_ns: int, test_id: int, capture: Procs | None = None):
    """send_paced to a serve receiver; (send times, received, receiver kernel_ns, capture result or None)."""
    from nicrig.udpmon import engine

    port = ctl.start_receiver(test_id=test_id, max_packets=count, idle_timeout_ms=500, duration_s=120.0)
    cap = Capture(capture, port, f"cap-nicrig-{test_id}") if capture is not None else None
    try:
        with engine.open_udp(connect=(HOST, port)) as sock:
            sent = engine.send_paced(sock, count=count, size_bytes=PACE_SIZE, spacing_ns=spacing_ns,
                                     test_id=test_id, seed=test_id)
    finally:
        captured = cap.stop() if cap is not None else None
        _, arrays = ctl.stop()
    kern = arrays.get("kernel_ns", np.zeros(0, np.int64))
    return sent, len(arrays.get("seq", ())), kern[kern > 0], captured


def _iperf3(procs: Procs, client_args: list[str], timeout_s: float, capture: bool, name: str):
    """Run an iperf3 UDP client against a one-off server; (its JSON report, capture result or None)."""
    port = _free_port()
    srv, log = procs.start(procs.on("server", ["iperf3", "-s", "-1", "--forceflush", "-B", HOST, "-p", str(port)]),
                           f"iperf3-server-{name}")
    try:
        _wait_for(log, r"Server listening", srv, "iperf3 -s")
        cap = Capture(procs, port, f"cap-{name}") if capture else None
        try:
            out = _run(procs.on("client", ["iperf3", "-c", HOST, "-p", str(port), "-u", "-J", *client_args]),
                       timeout_s)
        finally:
            captured = cap.stop() if cap is not None else None
    finally:
        procs.end(srv)
    return json.loads(out), captured


def _errors(t_ns: np.ndarray) -> np.ndarray:
    """|t[i+1] - t[i] - spacing| in ns, one per gap."""
    return np.abs(np.diff(np.asarray(t_ns, dtype=np.int64)) - PACE_SPACING_NS)


def _c_pacer(procs: Procs) -> Path:
    """bench/pacer.c compiled for this machine (the reference pacer)."""
    binary = procs.tmp / "pacer"
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("bench: no C compiler (apt-get install gcc) for the reference pacer bench/pacer.c")
    _run([cc, "-O2", "-Wall", "-o", str(binary), str(PACER_C)], 120)
    return binary


def _c_stream(procs: Procs, ctl, pacer: Path, count: int, test_id: int) -> tuple[np.ndarray, int]:
    """The C pacer's stream to a serve receiver (its datagrams count there as foreign), seen by dumpcap."""
    port = ctl.start_receiver(test_id=test_id, max_packets=count, idle_timeout_ms=5000 + count * PACE_SPACING_NS // 10**6,
                              duration_s=120.0)
    cap = Capture(procs, port, f"cap-c-{test_id}")
    try:
        _run(procs.on("client", [str(pacer), HOST, str(port), str(PACE_SIZE), str(PACE_SPACING_NS), str(count)]),
             60 + count * 1e-4)
    finally:
        captured = cap.stop()
        ctl.stop()
    return captured


def bench_pacing(procs: Procs, ctl, count: int, observer: bool, rounds: int) -> list[dict]:
    rows = []
    sent, received, kern, _ = _nicrig_stream(ctl, count, PACE_SPACING_NS, 200)
    ok = sent[sent >= 0]
    rows.append({"tool": "nicrig send_paced", "observer": "own send times", "packets": len(ok),
                 "err": _spacing_error(ok), "span": (ok[-1] - ok[0]) / 1e9, "note": f"{count - len(ok)} send errors"})
    rows.append({"tool": "nicrig send_paced", "observer": "receiver SO_TIMESTAMPING", "packets": len(kern),
                 "err": _spacing_error(kern), "span": (kern[-1] - kern[0]) / 1e9 if len(kern) else float("nan"),
                 "note": f"{count - received} not received"})
    fl = machine_floor()
    rows.append({"tool": "a perfect pacer (floor)", "observer": "its clock reads, see docstring",
                 "packets": fl["packets"], "err": fl["err"], "span": fl["span"],
                 "note": f"{fl['gaps']} stalls > 1 us in 1 s, median {fl['gap_p50'] / 1e3:.1f} us"})
    if not observer:
        return rows
    pacer = _c_pacer(procs)
    pooled: dict[str, list] = {"nicrig": [[], 0, 0.0], "c": [[], 0, 0.0]}
    for rnd in range(rounds):
        for tool in (("nicrig", "c") if rnd % 2 == 0 else ("c", "nicrig")):
            if tool == "nicrig":
                _, _, _, (cap_t, cap_drop) = _nicrig_stream(ctl, count, PACE_SPACING_NS, 300 + rnd, capture=procs)
            else:
                cap_t, cap_drop = _c_stream(procs, ctl, pacer, count, 400 + rnd)
            acc = pooled[tool]
            acc[0].append(_errors(cap_t))
            acc[1] += max(cap_drop, 0)
            acc[2] += (cap_t[-1] - cap_t[0]) / 1e9 if len(cap_t) > 1 else 0.0
    for tool, label in (("nicrig", "nicrig send_paced"), ("c", "C reference (bench/pacer.c)")):
        errs, dropped, span = pooled[tool]
        d = np.concatenate(errs) if errs else np.zeros(0)
        err = (float(np.percentile(d, 50)), float(np.percentile(d, 99)), float(d.max())) if len(d) else (float("nan"),) * 3
        rows.append({"tool": label, "observer": f"dumpcap on lo, {rounds} round(s)", "packets": len(d) + len(errs),
                     "err": err, "span": span, "note": f"capture dropped {dropped}", "compare": tool})
    for timer in (None, 1):
        extra = [] if timer is None else ["--pacing-timer", str(timer)]
        report, (cap_t, cap_drop) = _iperf3(procs, ["-b", str(PACE_IPERF_BPS), "-l", str(PACE_SIZE),
                                                    "-k", str(count)] + extra, 60 + count * 1e-4, True,
                                            f"pace{timer or 0}")
        label = "iperf3 -u" + ("" if timer is None else f" --pacing-timer {timer}")
        rows.append({"tool": label, "observer": "dumpcap on lo", "packets": len(cap_t),
                     "err": _spacing_error(cap_t), "span": (cap_t[-1] - cap_t[0]) / 1e9 if len(cap_t) else float("nan"),
                     "note": f"capture dropped {cap_drop}, iperf3 sent {report['end']['sum_sent']['packets']}"})
    return rows


def _nicrig_loss(ctl, count: int, spacing_ns: int, test_id: int) -> tuple[int, int, int, int]:
    """(sent, lost, dropped by the receive socket, SO_RXQ_OVFL at the last datagram) of one nicrig stream."""
    from nicrig.udpmon import engine

    port = ctl.start_receiver(test_id=test_id, max_packets=count, idle_timeout_ms=1000, duration_s=120.0)
    try:
        with engine.open_udp(connect=(HOST, port)) as sock:
            t = engine.send_paced(sock, count=count, size_bytes=LOSS_SIZE, spacing_ns=spacing_ns, test_id=test_id,
                                  seed=test_id)
    finally:
        stats, arrays = ctl.stop()
    sent = int(np.count_nonzero(t >= 0))
    got = len(np.unique(arrays.get("seq", np.zeros(0, np.uint32))))
    far = stats.get("engine", {})
    return sent, sent - got, int(far.get("kernel_drops", -1)), int(far.get("rxq_ovfl", -1))


def bench_loss(procs: Procs, ctl, count: int, rounds: int) -> list[dict]:
    """nicrig's receiver and iperf3's at the same rates, ``rounds`` times, the order swapped each round; pooled."""
    rows = []
    test_id = 500
    for spacing in LOSS_SPACINGS_NS:
        acc = {"nicrig": [0, 0, 0, 0], "iperf3": [0, 0, 0, 0]}
        bps = LOSS_SIZE * 8 * 1_000_000_000 // spacing
        for rnd in range(rounds):
            for tool in (("nicrig", "iperf3") if rnd % 2 == 0 else ("iperf3", "nicrig")):
                if tool == "nicrig":
                    test_id += 1
                    sent, lost, drops, ovfl = _nicrig_loss(ctl, count, spacing, test_id)
                else:
                    report, _ = _iperf3(procs, ["-l", str(LOSS_SIZE), "-b", str(bps), "-k", str(count)],
                                        60 + count * spacing / 1e9, False, f"loss{spacing}-{rnd}")
                    end = report["end"]["sum"]
                    sent, lost, drops, ovfl = int(end["packets"]), int(end["lost_packets"]), -1, -1
                a = acc[tool]
                a[0] += sent
                a[1] += lost
                a[2] += max(drops, 0)
                a[3] += max(ovfl, 0)
        for tool in ("nicrig", "iperf3"):
            sent, lost, drops, ovfl = acc[tool]
            rows.append({"spacing_us": spacing / 1e3, "rate_mbps": bps / 1e6, "tool": tool, "sent": sent, "lost": lost,
                         "socket_drops": drops if tool == "nicrig" else None,
                         "rxq_ovfl": ovfl if tool == "nicrig" else None})
    return rows


def bench_peak(procs: Procs, ctl, count: int, seconds: int, rounds: int) -> list[dict]:
    """nicrig and iperf3 ``rounds`` times each, the order swapped each round; rates pooled (packets / seconds)."""
    acc = {"nicrig": [0, 0.0, 0], "iperf3": [0, 0.0, 0]}
    for rnd in range(rounds):
        for tool in (("nicrig", "iperf3") if rnd % 2 == 0 else ("iperf3", "nicrig")):
            if tool == "nicrig":
                sent, received, _, _ = _nicrig_stream(ctl, count, 0, 300 + rnd)
                ok = sent[sent >= 0]
                n, span = len(ok) - 1, (ok[-1] - ok[0]) / 1e9  # packets after the first / their span
            else:
                report, _ = _iperf3(procs, ["-b", "0", "-l", str(PACE_SIZE), "-t", str(seconds)], seconds + 60,
                                    False, f"peak{rnd}")
                s, r = report["end"]["sum_sent"], report["end"]["sum_received"]
                n, span = int(s["packets"]), float(s["seconds"])
                received = int(r["packets"]) - int(r["lost_packets"])
            a = acc[tool]
            a[0] += n
            a[1] += span
            a[2] += received
    return [{"tool": "nicrig send_paced, spacing 0", "packets": acc["nicrig"][0], "seconds": acc["nicrig"][1],
             "pps": acc["nicrig"][0] / acc["nicrig"][1], "received": acc["nicrig"][2]},
            {"tool": "iperf3 -u -b 0", "packets": acc["iperf3"][0], "seconds": acc["iperf3"][1],
             "pps": acc["iperf3"][0] / acc["iperf3"][1], "received": acc["iperf3"][2]}]


def machine_floor(seconds: float = 1.0) -> dict:
    """What a perfect pacer could do here: a thread reading CLOCK_MONOTONIC in a tight loop for ``seconds``.

    Every gap over 1 us between two reads is time the thread did not run (an interrupt, the
    hypervisor, another task). A pacer that sends each packet exactly when due, or at once when a
    gap ends, would see the |spacing - 10 us| these gaps give; that is the floor of any user-space
    sender on this machine, whatever its code.
    """
    mono = time.monotonic_ns
    gaps = []
    start = prev = mono()
    end = start + int(seconds * 1e9)
    while prev < end:
        now = mono()
        if now - prev > 1_000:
            gaps.append((prev, now))
        prev = now
    g = np.asarray(gaps, dtype=np.int64).reshape(-1, 2)
    due = np.arange(start, end, PACE_SPACING_NS, dtype=np.int64)
    sent = due.copy()
    i = np.searchsorted(g[:, 0], due, side="right") - 1
    stalled = (i >= 0) & (due < g[np.maximum(i, 0), 1])
    sent[stalled] = g[i[stalled], 1]
    return {"gaps": len(g), "gap_p50": float(np.median(g[:, 1] - g[:, 0])) if len(g) else 0.0,
            "err": _spacing_error(sent), "packets": len(sent), "span": seconds}


# --------------------------------------------------------------------------
# report


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="64,1400", help="RTT message sizes in bytes (default 64,1400)")
    ap.add_argument("--rtt-seconds", type=int, default=2,
                    help="sockperf run per point (s; its first 0.4 s are warm-up); nicrig runs as many round trips")
    ap.add_argument("--rounds", type=int, default=3,
                    help="RTT and peak-rate runs per tool and point, the order swapped each round, pooled (default 3)")
    ap.add_argument("--pace-count", type=int, default=100_000, help="packets of the 10 us stream (default 100000)")
    ap.add_argument("--peak-count", type=int, default=500_000, help="nicrig packets per peak-rate burst")
    ap.add_argument("--peak-seconds", type=int, default=2, help="iperf3 -t of the peak-rate run (default 2)")
    ap.add_argument("--cpus", default="0,1",
                    help="CLIENT,SERVER: CPUs of the senders/clients (this process too) and of the receivers/servers "
                         "(default 0,1; 'none' leaves placement to the scheduler)")
    ap.add_argument("--loss-count", type=int, default=300_000,
                    help="1472-byte datagrams per receiver-loss run and rate (default 300000)")
    ap.add_argument("--only", default="rtt,loss,pacing,peak", help="parts to run (default rtt,loss,pacing,peak)")
    args = ap.parse_args()
    parts = {p.strip() for p in args.only.split(",")}
    sizes = [int(s) for s in args.sizes.split(",")]
    if not all(16 <= s <= 65507 for s in sizes) or args.rtt_seconds < 1 or args.rounds < 1 or args.pace_count < 2 or args.peak_count < 2:
        ap.error("sizes are 16..65507 bytes, --rtt-seconds and --rounds >= 1, counts >= 2")
    need = {"rtt": ["sockperf"], "loss": ["iperf3"], "pacing": ["iperf3", "dumpcap", "tshark"], "peak": ["iperf3"]}
    missing = sorted({t for p in parts for t in need.get(p, []) if shutil.which(t) is None})
    observer = True
    if missing:
        if set(missing) - {"dumpcap", "tshark"}:
            sys.exit(f"bench: missing {', '.join(missing)} (apt-get install sockperf iperf3 tshark)")
        observer = False
        print(f"bench: no {', '.join(missing)}: pacing without the common observer", file=sys.stderr)

    cpus = None
    if args.cpus != "none":
        try:
            cpus = tuple(int(c) for c in args.cpus.split(","))
        except ValueError:
            ap.error("--cpus is CLIENT,SERVER (two CPU numbers) or none")
        if len(cpus) != 2 or not set(cpus) <= os.sched_getaffinity(0) or shutil.which("taskset") is None:
            ap.error(f"--cpus {args.cpus}: need two of the CPUs {sorted(os.sched_getaffinity(0))} and taskset")
    # SIGTERM ends the bench like Ctrl-C: through the finally blocks that end every subprocess.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-udpmon-") as tmp_name:
        procs = Procs(Path(tmp_name), cpus)
        if cpus is not None:
            os.sched_setaffinity(0, {cpus[0]})  # nicrig's client and sender run in this thread
        try:
            ctl = _start_nicrig(procs)
            with contextlib.closing(ctl):
                rtt = bench_rtt(procs, ctl, sizes, args.rtt_seconds, args.rounds) if "rtt" in parts else []
                loss = bench_loss(procs, ctl, args.loss_count, args.rounds) if "loss" in parts else []
                pace = bench_pacing(procs, ctl, args.pace_count, observer, args.rounds) if "pacing" in parts else []
                peak = bench_peak(procs, ctl, args.peak_count, args.peak_seconds, args.rounds) if "peak" in parts else []
        finally:
            procs.close()
    elapsed = time.monotonic() - t_start

    where = "scheduler's choice" if cpus is None else f"clients/senders on CPU {cpus[0]}, servers/receivers on CPU {cpus[1]}"
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    print(f"udpmon bench on 127.0.0.1, {os.cpu_count()} CPUs ({where}), {os.uname().release}, {elapsed:.0f} s; "
          f"load average {' '.join(load_before)} before, {' '.join(load_after)} after")
    goals = []
    if rtt:
        print("\nround trip time, us (request and response of SIZE bytes, back to back; timeouts/drops count as inf)")
        print(f"{'mode':10s} {'size':>5s} {'tool':24s} {'count':>7s} {'lost':>4s} {'min':>7s} {'median':>7s} "
              f"{'p99':>7s} {'p99.9':>8s}")
        for r in rtt:
            tool = f"{r['tool']} {r['flag']}".strip()
            print(f"{r['mode']:10s} {r['size']:5d} {tool:24s} {r['count']:7d} {r['lost']:4d} {r['min'] / 1e3:7.2f} "
                  f"{r['p50'] / 1e3:7.2f} {r['p99'] / 1e3:7.2f} {r['p999'] / 1e3:8.2f}")
            if r["refused"]:
                print(f"   (nicrig's responder refused {r['refused']} requests over its rate cap)")
        for a, b in zip(rtt[::2], rtt[1::2]):
            m, p = a["p50"] / b["p50"], a["p99"] / b["p99"]
            text = (f"RTT {a['mode']} {a['size']} B: median {m:.2f}x, p99 {p:.2f}x sockperf's "
                    f"(goal <= {RTT_MEDIAN_GOAL}x, <= {RTT_P99_GOAL}x; min {a['min'] / b['min']:.2f}x)")
            goals.append((text, m <= RTT_MEDIAN_GOAL and p <= RTT_P99_GOAL))
    if loss:
        print(f"\nreceiver loss: {LOSS_SIZE}-byte datagrams, {args.loss_count} per run, {args.rounds} run(s) per tool "
              f"and rate, pooled")
        print(f"{'spacing_us':>10s} {'Mbit/s':>7s} {'receiver':10s} {'sent':>9s} {'lost':>7s} {'lost %':>7s}  "
              f"dropped by the receive socket (SO_MEMINFO; SO_RXQ_OVFL at the last datagram)")
        for r in loss:
            drops = "" if r["socket_drops"] is None else f"{r['socket_drops']} ({r['rxq_ovfl']})"
            print(f"{r['spacing_us']:10.0f} {r['rate_mbps']:7.1f} {r['tool']:10s} {r['sent']:9d} {r['lost']:7d} "
                  f"{100 * r['lost'] / max(r['sent'], 1):7.3f}  {drops}")
        for a, b in zip(loss[::2], loss[1::2]):
            goals.append((f"receiver loss at {a['spacing_us']:.0f} us: nicrig {a['lost']} of {a['sent']}, iperf3 "
                          f"{b['lost']} of {b['sent']} (goal: nicrig <= iperf3)",
                          a["lost"] / max(a["sent"], 1) <= b["lost"] / max(b["sent"], 1)))
    if pace:
        print(f"\npacing: {PACE_SIZE} B every {PACE_SPACING_NS / 1e3:g} us, {args.pace_count} packets; "
              f"|spacing - {PACE_SPACING_NS / 1e3:g} us|, us")
        print(f"{'stream':30s} {'measured by':32s} {'packets':>8s} {'p50':>6s} {'p99':>7s} {'max':>8s} "
              f"{'span_s':>7s}  note")
        for r in pace:
            p50, p99, mx = r["err"]
            print(f"{r['tool']:30s} {r['observer']:32s} {r['packets']:8d} {p50 / 1e3:6.2f} {p99 / 1e3:7.2f} "
                  f"{mx / 1e3:8.1f} {r['span']:7.3f}  {r['note']}")
        own = pace[0]["err"][1]
        text = (f"pacing: nicrig p99 |spacing - 10 us| = {own / 1e3:.2f} us from its own send times "
                f"(goal <= {PACE_P99_GOAL_NS / 1e3:g} us)")
        goals.append((text, own <= PACE_P99_GOAL_NS))
        ref = {r["compare"]: r["err"] for r in pace if "compare" in r}
        if ref:
            me, c = ref["nicrig"], ref["c"]
            text = (f"pacing seen by dumpcap: nicrig p50 {me[0] / 1e3:.2f} us, p99 {me[1] / 1e3:.2f} us; C reference "
                    f"p50 {c[0] / 1e3:.2f} us, p99 {c[1] / 1e3:.2f} us: {me[1] / c[1]:.2f}x "
                    f"(goal <= {PACE_C_GOAL}x)")
            goals.append((text, me[1] <= PACE_C_GOAL * c[1]))
    if peak:
        print(f"\npeak send rate, {PACE_SIZE}-byte datagrams")
        print(f"{'sender (all rounds)':30s} {'sent':>9s} {'seconds':>8s} {'kpps':>8s} {'received':>9s}")
        for r in peak:
            print(f"{r['tool']:30s} {r['packets']:9d} {r['seconds']:8.3f} {r['pps'] / 1e3:8.1f} {r['received']:9d}")
        ratio = peak[0]["pps"] / peak[1]["pps"]
        goals.append((f"peak send rate: nicrig {ratio:.3f}x iperf3's (goal >= 1x)", ratio >= 1.0))
    print()
    for text, ok in goals:
        print(f"{text}: {_verdict(ok)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
