#!/usr/bin/env python3
"""Benchmark: the builtin decode engine beside the real libsigrokdecode (sigrok-cli), same decoders, same data.

Runs, in one go on this machine, on a simulated 1400-byte stream every 11 us
(Intel PRO/1000 on PCI 64/66, AD/C/BE# recorded; the GMII probe beside it),
sized so that the sending bus holds about ``--samples`` samples:

1. ``pci`` on the sending bus and ``gmii`` + ``ethernet`` on the probe (both
   directions), once with sigrok-cli 0.7.2 / libsigrokdecode 0.5.3 and once
   with the builtin engine, each on one core, in this process's order;
2. the builtin engine through ``nicrig decode`` with one and with two local
   worker processes (sources split at idle points);
3. the engines alone: ``bench/decoders/stepper``, a decoder that only wakes
   up (on every sample, or on every edge of a line toggling every 10 samples)
   over 4 M samples, so the time is the engine's own cost per wake-up.

It checks that both engines gave identical records, and prints decoded
samples (states) per second, transactions or frames per second, and the
ratios against the goals of issue 5 (builtin >= 3x sigrok-cli on one core;
two workers >= 1.8x one). Paste the table into docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_ENGINE = 3.0
GOAL_WORKERS = 1.8
SEND_BUS_HZ = 66.666667e6


def _simulate(tmp: Path, samples: float) -> Path:
    spacing_us = 11.0
    count = max(10, int(samples / SEND_BUS_HZ / (spacing_us * 1e-6)))
    out = tmp / "stream.h5"
    cmd = [sys.executable, "-m", "nicrig", "simulate", "--scenario", "stream", "--nic", "intel-pro1000",
           "--bus", "pci64-66", "--with-ad", "--size", "1400", "--spacing-us", str(spacing_us),
           "--count", str(count), "-o", str(out)]
    print(f"simulating {count} packets ...", file=sys.stderr)
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def _engines(path: Path) -> list[dict]:
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.decoders import builtin, sigrok_cli, spec

    rows = []
    with CaptureSet.open(path) as cs:
        for name, outputs in (("send_pci", ("pci",)), ("probe", ("ethernet",))):
            source = cs.source(name)
            stacks = [s for s in spec.auto_stacks(source) if s.output in outputs]
            timings = {}
            results = {}
            for engine in (sigrok_cli, builtin):
                label = "sigrok-cli" if engine is sigrok_cli else "builtin"
                print(f"{name}: {label} ...", file=sys.stderr)
                t = time.perf_counter()
                results[label] = [engine.run_stack(source, stack) for stack in stacks]
                timings[label] = time.perf_counter() - t
            if results["sigrok-cli"] != results["builtin"]:
                sys.exit(f"bench: the engines disagree on {name}")
            states = source.num_samples * len(stacks)
            items = sum(len(r) for r in results["builtin"])
            rows.append({"source": name, "stacks": [s.text()[:40] for s in stacks], "states": states,
                         "items": items, "seconds": timings})
    return rows


def _wakeups(tmp: Path, samples: int = 4_000_000) -> list[dict]:
    """Seconds per engine to wake a do-nothing decoder on every sample / every 10th sample."""
    import numpy as np
    from nicrig.decoders import runtime

    decoders = Path(__file__).resolve().parent / "decoders"
    data = ((np.arange(samples) // 10) & 1).astype(np.uint8).reshape(-1, 1)
    raw = tmp / "toggle.bin"
    raw.write_bytes(data.tobytes())
    rows = []
    for mode, wakes in (("skip", samples), ("edge", samples // 10)):
        t = time.perf_counter()
        subprocess.run(["sigrok-cli", "-I", "binary:numchannels=8:samplerate=1000000", "-i", str(raw),
                        "-P", f"stepper:c0=0:mode={mode}"], check=True, capture_output=True,
                       env={**os.environ, "SIGROKDECODE_DIR": str(decoders)})
        sigrok = time.perf_counter() - t
        session = runtime.Session([runtime.Call("stepper", {"c0": 0}, {"mode": mode})], samplerate=1_000_000,
                                  decoders_dir=decoders)
        t = time.perf_counter()
        session.run(iter([data[i:i + (1 << 20)] for i in range(0, samples, 1 << 20)]), 1)
        rows.append({"mode": mode, "wakes": wakes, "samples": samples,
                     "seconds": {"sigrok-cli": sigrok, "builtin": time.perf_counter() - t}})
    return rows


def _workers(path: Path, workers: int) -> float:
    cmd = [sys.executable, "-m", "nicrig", "decode", str(path), "--source", "send_pci", "--source", "probe",
           "--force", "--workers", str(workers)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=50e6,
                    help="samples on the sending bus (default 50e6; the probe holds ~1.9x as many)")
    ap.add_argument("--keep", type=Path, help="reuse (or write) the simulated capture here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="nicrig-bench-") as tmp:
        path = args.keep if args.keep and args.keep.exists() else _simulate(Path(tmp), args.samples)
        if args.keep and not args.keep.exists():
            args.keep.write_bytes(path.read_bytes())
        wakeups = _wakeups(Path(tmp))
        rows = _engines(path)
        one = _workers(path, 1)
        two = _workers(path, 2)

    print(f"machine: {os.cpu_count()} CPUs; capture: {rows[0]['states']:,} samples on the sending bus")
    print(f"{'source':9s} {'stack':10s} {'states':>12s} {'items':>8s} {'sigrok-cli s':>12s} {'builtin s':>10s} "
          f"{'sigrok states/s':>15s} {'builtin states/s':>16s} {'items/s (b)':>11s} {'ratio':>6s}")
    for r in rows:
        s, b = r["seconds"]["sigrok-cli"], r["seconds"]["builtin"]
        print(f"{r['source']:9s} {'pci' if r['source'] == 'send_pci' else 'gmii+eth':10s} {r['states']:12,d} "
              f"{r['items']:8,d} {s:12.1f} {b:10.1f} {r['states'] / s:15,.0f} {r['states'] / b:16,.0f} "
              f"{r['items'] / b:11,.0f} {s / b:6.2f}")
    total_s = sum(r["seconds"]["sigrok-cli"] for r in rows)
    total_b = sum(r["seconds"]["builtin"] for r in rows)
    print(f"builtin vs sigrok-cli, one core: {total_s / total_b:.2f}x (goal >= {GOAL_ENGINE}x)")
    print(f"nicrig decode, 1 worker {one:.1f} s, 2 workers {two:.1f} s: {one / two:.2f}x (goal >= {GOAL_WORKERS}x)")
    for w in wakeups:
        s, b = w["seconds"]["sigrok-cli"], w["seconds"]["builtin"]
        print(f"engine alone, wake on every {'sample' if w['mode'] == 'skip' else 'edge'}: {w['wakes']:,} wake-ups "
              f"over {w['samples']:,} samples: sigrok-cli {s:.2f} s ({s / w['wakes'] * 1e6:.2f} us each), "
              f"builtin {b:.2f} s ({b / w['wakes'] * 1e6:.2f} us each): {s / b:.1f}x")
    print(json.dumps({"rows": rows, "workers": {"1": one, "2": two}, "wakeups": wakeups}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
