#!/usr/bin/env python3
"""Benchmark: what recording kernel trace events costs a udpmon run (the host probe's overhead), on loopback.

Runs, in one go on this machine, as root, against one ``nicrig udpmon serve
--allow-trace`` on 127.0.0.1, the same two measurements without and with
``--trace-host`` (this host and the daemon both recording, which on one
machine means every event is recorded twice, by two instances):

1. **Round trips**: ``nicrig udpmon latency --sizes 64,1400`` (blocking
   receive), median and p99 RTT per size from the command's own summary.
2. **Peak 64-byte send rate**: ``nicrig udpmon stream --sizes 64
   --spacing-us 0``: the engine's send rate (packets/s from its send times)
   and the rate the far engine received.

Plain and traced runs alternate for ``--rounds`` rounds, the order swapped
each round, so the machine's drift does not all fall on one side; the table
gives each side's median over the rounds, the ratio traced / plain, the
events recorded per traced run and how many the kernel lost. The load
average is printed with the table: on a busy machine the ratios are noisy.
Paste the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

NICRIG = [sys.executable, "-m", "nicrig"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(port: int) -> subprocess.Popen:
    daemon = subprocess.Popen([*NICRIG, "udpmon", "serve", "--port", str(port), "--allow-trace"],
                              stderr=subprocess.DEVNULL)
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), 1).close()
            return daemon
        except OSError:
            time.sleep(0.1)
    daemon.kill()
    raise SystemExit("the daemon did not start")


def _run(argv: list[str], traced: bool, out: Path) -> dict:
    r = subprocess.run([*NICRIG, *argv, "--json", "-o", str(out), *(["--trace-host"] if traced else [])],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {r.stderr.strip()}")
    return json.loads(r.stdout)


def _trace_counts(path: Path) -> tuple[int, int]:
    from nicrig.acquisition.hostprobe import events as hp
    from nicrig.h5file import open_any

    with open_any(path) as f:
        traces = [hp.read(f, h) for h in hp.hosts(f)]
    return sum(len(t.events) for t in traces), sum(t.lost for t in traces)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--count", type=int, default=2000, help="round trips per size per run")
    ap.add_argument("--packets", type=int, default=50000, help="datagrams per peak-rate run")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/hostprobe.py: skipped: kernel tracing needs root")
        return 0
    port = _free_port()
    daemon = _serve(port)
    rows: dict[tuple[str, bool], list[float]] = {}
    events: dict[str, list[tuple[int, int]]] = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rnd in range(args.rounds):
                for traced in ((False, True) if rnd % 2 == 0 else (True, False)):
                    out = Path(tmp) / f"lat-{rnd}-{traced}.h5"
                    lat = _run(["udpmon", "latency", "127.0.0.1", "--port", str(port), "--sizes", "64,1400",
                                "--count", str(args.count), "--rounds", "1"], traced, out)
                    for s in lat["sizes"]:
                        rows.setdefault((f"RTT {s['size_bytes']} B median (us)", traced), []).append(s["median_us"])
                        rows.setdefault((f"RTT {s['size_bytes']} B p99 (us)", traced), []).append(s["p99_us"])
                    if traced:
                        events.setdefault("latency", []).append(_trace_counts(out))
                    out = Path(tmp) / f"peak-{rnd}-{traced}.h5"
                    peak = _run(["udpmon", "stream", "127.0.0.1", "--port", str(port), "--sizes", "64",
                                 "--spacing-us", "0", "--count", str(args.packets), "--rounds", "1"], traced, out)
                    p = peak["points"][0]
                    rows.setdefault(("peak send rate, 64 B (kpackets/s)", traced), []).append(
                        p["send_rate_mbps"] * 1e6 / (64 * 8) / 1000)
                    rows.setdefault(("received by the far engine (kpackets/s)", traced), []).append(
                        p["user_rate_mbps"] * 1e6 / (64 * 8) / 1000)
                    if traced:
                        events.setdefault("peak", []).append(_trace_counts(out))
    finally:
        daemon.terminate()
        daemon.wait(10)
    print(f"load average (1, 5, 15 min) at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{os.cpu_count()} CPUs; {args.rounds} rounds")
    print("| quantity | plain | traced | traced / plain |")
    print("|---|---|---|---|")
    for name in dict.fromkeys(k for k, _ in rows):
        plain, traced = float(np.median(rows[(name, False)])), float(np.median(rows[(name, True)]))
        print(f"| {name} | {plain:.2f} | {traced:.2f} | {traced / plain:.2f} |")
    for kind, counts in events.items():
        recorded = [c for c, _ in counts]
        lost = [lo for _, lo in counts]
        print(f"| events recorded per traced {kind} run (both hosts) | | {int(np.median(recorded))} | |")
        print(f"| events lost per traced {kind} run | | {int(np.median(lost))} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
