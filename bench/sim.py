#!/usr/bin/env python3
"""Benchmark: simulated-rig samples per second, beside the bare cost of storing as many samples.

Runs, in one go on this machine:

1. ``nicrig simulate`` of a 1400-byte, 11 us stream (Intel PRO/1000, PCI 64/66),
   sized so that the three sources together hold about ``--samples`` samples;
2. the floor: the same sources (same sample counts and widths, state mode with
   timestamps) written through the capture-set writer from a ready bus pattern,
   i.e. storage alone, no model and no rendering.

and prints samples/s, the goal (>= 10 M samples/s) and the
ratio of the two (how much of the time the model and renderers take). There is
no peer that simulates a PCI bus and a link; sigrok's ``demo`` driver was
tried as one and writes ~0.1 M samples/s to a session file, so it says nothing.

``--baseline-python`` names the interpreter of another nicrig (an older
checkout's venv, or a tree put first on ``PYTHONPATH`` by a wrapper script):
the 11 us run and the storage floor of its sources are then made with both,
alternately, in this one invocation, and the ratios of their times are printed,
which a loaded machine distorts far less than either time alone. Paste the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_SAMPLES_PER_S = 10e6
# Samples per microsecond of simulated time: two 66.67 MHz buses + the 125 MHz probe.
SAMPLES_PER_US = 66.666667 * 2 + 125.0


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """Run ``cmd``; its wall-clock and CPU seconds (the CPU time a loaded machine distorts far less)."""
    cpu = _children_cpu_s()
    t = time.perf_counter()
    # From a folder of no checkout: ``python -m nicrig`` puts the working directory first on the path, which
    # in a checkout would run that checkout's nicrig whatever the interpreter.
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tempfile.gettempdir())
    elapsed = time.perf_counter() - t
    if r.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd[:3])} failed:\n{r.stderr}")
    return elapsed, _children_cpu_s() - cpu, r


def _store_only(like: Path, out: Path) -> float:
    """Write sources shaped like those of ``like`` from a repeating pattern; return the seconds taken."""
    import numpy as np
    from nicrig.acquisition.capture import CaptureSet, SourceSpec

    with CaptureSet.open(like) as src:
        shapes = {n: (s.num_samples, s.channels, s.samplerate_hz) for n, s in src.sources.items()}
        pattern = {n: src.source(n).read_packed(0, 1 << 20) for n in shapes}
    t = time.perf_counter()
    with CaptureSet.create(out) as cs:
        for name, (n, channels, rate) in shapes.items():
            w = cs.add_source(SourceSpec(name, channels, "state", samplerate_hz=rate))
            block = pattern[name]
            period = round(1e12 / rate)
            for c0 in range(0, n, len(block)):
                k = min(len(block), n - c0)
                w.append(block[:k], np.arange(c0, c0 + k, dtype=np.int64) * period)
    return time.perf_counter() - t


def _simulate(tmp: Path, spacing_us: float, total_samples: float, with_ad: bool,
              python: str = sys.executable) -> tuple[int, float, float, Path, dict]:
    """Simulate a stream of about ``total_samples`` samples; (samples, wall s, CPU s, capture set, summary)."""
    count = int(total_samples / SAMPLES_PER_US / spacing_us)
    out = tmp / f"bench-{spacing_us:g}.h5"
    # A repeat replaces the previous run's set: simulate refuses an existing name (and an older nicrig,
    # --baseline-python's, has no --force).
    out.unlink(missing_ok=True)
    cmd = [python, "-m", "nicrig", "simulate", "--scenario", "stream", "--nic", "intel-pro1000",
           "--bus", "pci64-66", "--size", "1400", "--spacing-us", str(spacing_us), "--count", str(count),
           "--rounds", "1", "--capture-count", "0", "-o", str(out), "--json", *(["--with-ad"] if with_ad else [])]
    seconds, cpu, r = _timed(cmd)
    summary = json.loads(r.stdout)
    return sum(s["samples"] for s in summary["sources"].values()), seconds, cpu, out, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=50e6, help="total samples per run (default 50e6)")
    ap.add_argument("--with-ad", action="store_true", help="record AD/C/BE#/PAR too (wider samples)")
    ap.add_argument("--baseline-python", metavar="PYTHON",
                    help="also run the 11 us case with this interpreter's nicrig, alternately, and print the ratio")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each simulate and of each side of the comparison; the fastest counts (as timeit's "
                         "minimum: this VM's speed moves by +-20%% within minutes, never the other way)")
    ap.add_argument("--store-only", nargs=2, metavar=("LIKE", "OUT"), type=Path,
                    help="only write the storage floor for the sources of capture set LIKE into OUT and print its "
                         "seconds (how --baseline-python times another nicrig's writer)")
    args = ap.parse_args()
    if args.store_only:
        print(json.dumps({"seconds": _store_only(*args.store_only)}))
        return 0

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        # 11 us: the link saturated, PAUSE cycles, the busiest bus Hughes-Jones et al. 2003 show;
        # 40 us: the slow end of their spacing sweeps.
        for spacing in (11.0, 40.0):
            runs = [_simulate(tmp, spacing, args.samples, args.with_ad) for _ in range(max(1, args.repeat))]
            n, seconds, _, out, summary = min(runs, key=lambda run: run[1])
            rows.append((f"nicrig simulate, {spacing:g} us spacing", n, seconds, out.stat().st_size, summary))
        floor_path = tmp / "floor.h5"
        t_floor = _store_only(Path(rows[0][4]["output"]), floor_path)
        rows.append(("storage only (11 us sources)", rows[0][1], t_floor, floor_path.stat().st_size, None))

    print(f"machine: {os.cpu_count()} CPUs; load average before the run: "
          f"{' '.join(f'{v:.2f}' for v in load_before)}, after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"{'run (best of ' + str(max(1, args.repeat)) + ')':36s} {'samples':>12s} {'seconds':>8s} {'Msamples/s':>11s} "
          f"{'MB':>7s}")
    for name, n, t, size, _ in rows:
        print(f"{name:36s} {n:12,d} {t:8.2f} {n / t / 1e6:11.2f} {size / 1e6:7.1f}")
    print()
    for name, n, t, _, summary in rows[:2]:
        rate = n / t
        print(f"{name}: {rate / 1e6:.1f} M samples/s = {rate / GOAL_SAMPLES_PER_S:.2f} x the 10 M samples/s goal "
              f"({summary['frames']} frames, {summary['pause_frames']} PAUSE, "
              f"{sum(summary['transactions'].values())} PCI transactions)")
    floor = rows[2][1] / rows[2][2]
    dense = rows[0][1] / rows[0][2]
    print(f"11 us simulate / storage only: {dense / floor:.2f} (time in the model and renderers: {1 - dense / floor:.0%})")
    print(f"goal (>= 10 M samples/s at 11 us spacing): "
          f"{'met' if dense >= GOAL_SAMPLES_PER_S else 'not met'} ({dense / 1e6:.1f} M samples/s)")
    if args.baseline_python:
        _compare(args.baseline_python, args.samples, args.with_ad, args.repeat)
    return 0


def _compare(baseline: str, total_samples: float, with_ad: bool, repeat: int) -> None:
    """Time the 11 us run with this nicrig and with ``baseline``'s, alternately; print both and the ratios."""
    best = {(run, side): {"wall": float("inf"), "cpu": float("inf")}
            for run in ("simulate", "storage") for side in ("baseline", "this")}
    counts = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        like = tmp / "like.h5"
        for _ in range(max(1, repeat)):
            for side, python in (("baseline", baseline), ("this", sys.executable)):
                n, seconds, cpu, out, _ = _simulate(tmp, 11.0, total_samples, with_ad, python)
                out.replace(like)
                _keep_best(best[("simulate", side)], seconds, cpu)
                counts[side] = n
                # the storage floor of the same sources, written by this side's capture-set writer
                _, cpu, r = _timed([python, __file__, "--store-only", str(like), str(tmp / "floor.h5")])
                _keep_best(best[("storage", side)], json.loads(r.stdout)["seconds"], cpu)
    if counts["this"] != counts["baseline"]:
        print(f"note: the two nicrigs wrote different sample counts ({counts['this']:,} and {counts['baseline']:,})")
    print(f"\nside by side, 11 us spacing, best of {max(1, repeat)} (load average before: "
          f"{' '.join(f'{v:.2f}' for v in load_before)}, after: {' '.join(f'{v:.2f}' for v in os.getloadavg())};"
          " storage: the writer alone, CPU includes starting Python):")
    for run in ("simulate", "storage"):
        for side in ("baseline", "this"):
            wall, cpu = best[(run, side)]["wall"], best[(run, side)]["cpu"]
            print(f"  {run:8s} {side:8s} {wall:8.2f} s wall {counts[side] / wall / 1e6:6.2f} M samples/s   "
                  f"{cpu:8.2f} s CPU {counts[side] / cpu / 1e6:6.2f} M samples per CPU second")
        print(f"  {run:8s} this / baseline speed: "
              f"{best[(run, 'baseline')]['wall'] / best[(run, 'this')]['wall']:.2f}x wall, "
              f"{best[(run, 'baseline')]['cpu'] / best[(run, 'this')]['cpu']:.2f}x CPU")


def _keep_best(best: dict[str, float], wall: float, cpu: float) -> None:
    best["wall"], best["cpu"] = min(best["wall"], wall), min(best["cpu"], cpu)


if __name__ == "__main__":
    raise SystemExit(main())
