#!/usr/bin/env python3
"""Benchmark: simulated-rig samples per second, beside sigrok-cli's ``demo`` driver writing as many samples.

Runs, in one go on this machine:

1. ``nicrig simulate`` of a 1400-byte, 11 us stream (Intel PRO/1000, PCI 64/66),
   sized so that the three sources together hold about ``--samples`` samples;
2. ``sigrok-cli --driver demo`` writing the same number of 16-channel samples to a
   session file (the peer: a generator that models nothing, only writes).

and prints a table with samples/s, the goal (>= 10 M samples/s, issue 2) and
the ratio to the peer. Paste the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SAMPLES_PER_S = 10e6
# Samples per microsecond of simulated time: two 66.67 MHz buses + the 125 MHz probe.
SAMPLES_PER_US = 66.666667 * 2 + 125.0


def _timed(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd[:3])} failed:\n{r.stderr}")
    return elapsed, r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=50e6, help="total samples to simulate (default 50e6)")
    ap.add_argument("--with-ad", action="store_true", help="record AD/C/BE#/PAR too (wider samples)")
    args = ap.parse_args()

    spacing_us = 11.0
    count = int(args.samples / SAMPLES_PER_US / spacing_us)
    nicrig = [sys.executable, "-m", "nicrig"]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.h5"
        cmd = nicrig + ["simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66",
                        "--size", "1400", "--spacing-us", str(spacing_us), "--count", str(count),
                        "-o", str(out), "--json"] + (["--with-ad"] if args.with_ad else [])
        t_sim, r = _timed(cmd)
        summary = json.loads(r.stdout)
        samples = sum(s["samples"] for s in summary["sources"].values())
        rows = [("nicrig simulate", samples, t_sim, out.stat().st_size)]
        if shutil.which("sigrok-cli"):
            sr = Path(tmp) / "demo.sr"
            t_demo, _ = _timed(["sigrok-cli", "--driver", "demo:logic_channels=16:analog_channels=0",
                                "--config", "samplerate=100m", "--samples", str(samples), "-o", str(sr)])
            rows.append(("sigrok-cli demo driver -> .sr", samples, t_demo, sr.stat().st_size))

    print(f"{'run':32s} {'samples':>12s} {'seconds':>8s} {'Msamples/s':>11s} {'MB':>7s}")
    for name, n, t, size in rows:
        print(f"{name:32s} {n:12,d} {t:8.2f} {n / t / 1e6:11.2f} {size / 1e6:7.1f}")
    rate = rows[0][1] / rows[0][2]
    print(f"\nnicrig: {rate / 1e6:.1f} M samples/s = {rate / GOAL_SAMPLES_PER_S:.2f} x the 10 M samples/s goal")
    if len(rows) > 1:
        peer = rows[1][1] / rows[1][2]
        print(f"nicrig / sigrok demo driver: {rate / peer:.2f}")
    print(f"({summary['frames']} frames, {summary['pause_frames']} PAUSE, "
          f"{sum(summary['transactions'].values())} PCI transactions modelled)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
