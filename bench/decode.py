#!/usr/bin/env python3
"""Benchmark: decoding at the speed of reading the capture (native kernels beside the PDs and sigrok-cli).

Runs, in one go on this machine, on two simulated captures of a 1400-byte UDP stream every 11 us
(Intel PRO/1000 on PCI 64/66, AD/C/BE# and PAR recorded, the GMII probe beside it):

- the state-mode capture (one sample per bus clock), sized so that the sending bus holds about
  ``--samples`` samples (the probe about 1.9x as many);
- a timing-mode capture of the same traffic (4 samples a clock, CLK recorded), sized to about
  ``--timing-samples`` samples on the sending bus.

For every stack ``nicrig decode`` picks on the sending bus and the probe (``pci``, ``irq``,
``gmii,ethernet`` per direction, ``linkactivity`` where recorded), each on one core, in this order:

1. the storage floor: reading every sample of the source from the file, block by block as the
   engines read them, and nothing else (the faster of two reads, so that neither the floor nor the
   kernel after it pays for a cold page cache);
2. the builtin engine with the stack's kernel (where ``decoders/kernels.py`` lists one) over every
   sample, reading included;
3. the builtin engine running the stack's PDs (``--engine reference``) and
4. sigrok-cli 0.7.2 / libsigrokdecode 0.5.3 on the same decoder files, both over the source's first
   ``--reference-samples`` samples (default 5 M): at 5-10 us a clock they would take most of an hour
   over the whole captures, and the goals compare rates (states per second), which a leading part
   of the same traffic measures as well.

The records of the kernel, the PDs and sigrok-cli over that leading part are checked equal before
any time is printed. Then ``nicrig decode --force`` of the state capture's two sources (every
sample) with one and with two local workers (kernels; sources split at idle points), and the runtime
engine alone against libsigrokdecode (a decoder that only wakes up). It prints decoded samples
(states) per second and the ratios against the goals: kernels on one core >= 30x
sigrok-cli on every stack and within 3x of the storage floor; two workers >= 1.8x one. Paste the
output into docs/benchmarks.md.

``--keep DIR --prepare-only`` only simulates the captures into DIR (a later run with the same
``--keep DIR`` and sizes reuses them).
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
from typing import Any

GOAL_SIGROK = 30.0
GOAL_FLOOR = 3.0
GOAL_WORKERS = 1.8
SEND_BUS_HZ = 66.666667e6
SPACING_US = 11.0
TIMING_SAMPLES_PER_CLOCK = 4


def _simulate(out: Path, samples: float, samples_per_clock: int | None) -> Path:
    clocks = samples / (samples_per_clock or 1)
    count = max(10, int(clocks / SEND_BUS_HZ / (SPACING_US * 1e-6)))
    partial = out.with_name(f"{out.stem}.partial{out.suffix}")
    cmd = [sys.executable, "-m", "nicrig", "simulate", "--scenario", "stream", "--nic", "intel-pro1000",
           "--bus", "pci64-66", "--with-ad", "--size", "1400", "--spacing-us", str(SPACING_US),
           "--count", str(count), "--rounds", "1", "--capture-count", "0", "-o", str(partial)]
    if samples_per_clock:
        cmd += ["--samples-per-clock", str(samples_per_clock)]
    print(f"simulating {count} packets into {out.name} ...", file=sys.stderr)
    subprocess.run(cmd, check=True, capture_output=True)
    partial.replace(out)  # a run cut short leaves no capture a later --keep run would take as whole
    return out


def _floor(source: Any) -> float:
    """Seconds to read every sample of ``source`` as the builtin engine reads it (blocks, contiguous)."""
    import numpy as np
    from nicrig.decoders import builtin

    t = time.perf_counter()
    for _, block in source.iter_packed(block=builtin.BLOCK_SAMPLES):
        np.ascontiguousarray(block)
    return time.perf_counter() - t


def _stacks(path: Path, capture: str, sources: tuple[str, ...], reference_samples: int) -> list[dict]:
    """Per stack: seconds of the floor and the kernel over the whole source, of the PDs and sigrok-cli over
    its first ``reference_samples`` samples (after checking all of them agree there)."""
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.decoders import builtin, kernels, sigrok_cli, spec

    rows = []
    with CaptureSet.open(path) as cs:
        for name in sources:
            source = cs.source(name)
            part = min(source.num_samples, reference_samples)
            for stack in spec.auto_stacks(source):
                key = kernels.stack_key(stack.calls)
                what = f"{capture} {name} {','.join(key)}"
                has_kernel = kernels.kernel_for(key) is not None
                seconds: dict[str, float] = {}
                print(f"{what}: floor ...", file=sys.stderr)
                # The faster of two reads: the first may come from the disk, the kernel's after it not.
                seconds["floor"] = min(_floor(source), _floor(source))
                items = None
                if has_kernel:
                    print(f"{what}: kernel ...", file=sys.stderr)
                    t = time.perf_counter()
                    items = len(builtin.run_stack(source, stack))
                    seconds["kernel"] = time.perf_counter() - t
                part_runs = {"pd": lambda: builtin.run_stack(source, stack, stop=part, kernel=False),
                             "sigrok-cli": lambda: sigrok_cli.run_stack(source, stack, stop=part)}
                results = {"kernel": builtin.run_stack(source, stack, stop=part)} if has_kernel else {}
                for label, run in part_runs.items():
                    print(f"{what}: {label} over the first {part:,} samples ...", file=sys.stderr)
                    t = time.perf_counter()
                    results[label] = run()
                    seconds[label] = time.perf_counter() - t
                first, *others = results.values()
                if any(r != first for r in others):
                    sys.exit(f"bench: the engines disagree on {what} {stack.text()[:60]} "
                             f"(first {part:,} samples)")
                rows.append({"capture": capture, "source": name, "stack": ",".join(key),
                             "direction": stack.calls[0].options.get("direction", ""),
                             "states": source.num_samples, "reference_states": part,
                             "items": items if items is not None else len(first), "seconds": seconds})
    return rows


def _workers(path: Path, workers: int) -> float:
    cmd = [sys.executable, "-m", "nicrig", "decode", str(path), "--source", "send_pci", "--source", "probe",
           "--force", "--workers", str(workers)]
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


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


def _rates(r: dict) -> dict[str, float]:
    """States per second of each measurement of row ``r`` (floor and kernel: whole source; PD, sigrok-cli: part)."""
    s = r["seconds"]
    whole = {k: r["states"] / s[k] for k in ("floor", "kernel") if s.get(k)}
    part = {k: r["reference_states"] / s[k] for k in ("pd", "sigrok-cli") if s.get(k)}
    return {**whole, **part}


def _print(rows: list[dict], one: float, two: float, wakeups: list[dict], load: str) -> None:
    nan = float("nan")
    print(f"machine: {os.cpu_count()} CPUs; load average before the run: {load}, after: {_load()}")
    parts = sorted({r["reference_states"] for r in rows if r["reference_states"] < r["states"]})
    if parts:
        print(f"floor and kernel over every sample; PDs (builtin engine) and sigrok-cli over the first "
              f"{', '.join(f'{p:,}' for p in parts)} samples of a source (the 'ref states' column); "
              f"ratios are of states/s")
    print(f"{'capture':7s} {'source':9s} {'stack':16s} {'states':>12s} {'items':>8s} {'ref states':>11s} "
          f"{'floor s':>8s} {'kernel s':>8s} {'pd s':>7s} {'sigrok s':>8s} {'kernel st/s':>12s} {'floor st/s':>12s} "
          f"{'pd st/s':>10s} {'sigrok st/s':>11s} {'x sigrok':>8s} {'x floor':>7s}")
    for r in rows:
        s, v = r["seconds"], _rates(r)
        k = v.get("kernel", nan)
        stack = r["stack"] + (f" {r['direction']}" if r["direction"] else "")
        print(f"{r['capture']:7s} {r['source']:9s} {stack:16s} {r['states']:12,d} {r['items']:8,d} "
              f"{r['reference_states']:11,d} {s['floor']:8.2f} {s.get('kernel', nan):8.2f} {s['pd']:7.1f} "
              f"{s['sigrok-cli']:8.1f} {k:12,.0f} {v['floor']:12,.0f} {v['pd']:10,.0f} {v['sigrok-cli']:11,.0f} "
              f"{k / v['sigrok-cli']:8.1f} {v['floor'] / k:7.2f}")
    with_kernel = [r for r in rows if "kernel" in r["seconds"]]
    missing = sorted({r["stack"] for r in rows} - {r["stack"] for r in with_kernel})
    if with_kernel:
        worst_sigrok = min(_rates(r)["kernel"] / _rates(r)["sigrok-cli"] for r in with_kernel)
        worst_floor = max(_rates(r)["floor"] / _rates(r)["kernel"] for r in with_kernel)
        print(f"kernel states/s over sigrok-cli's, one core, worst stack: {worst_sigrok:.1f}x "
              f"(goal >= {GOAL_SIGROK:.0f}x); storage floor states/s over the kernel's, worst stack: "
              f"{worst_floor:.2f} (goal <= {GOAL_FLOOR:.0f})")
    if missing:
        print(f"stacks without a kernel (decoded by their PDs): {', '.join(missing)}")
    print(f"nicrig decode, 1 worker {one:.1f} s, 2 workers {two:.1f} s: {one / two:.2f}x (goal >= {GOAL_WORKERS}x)")
    for w in wakeups:
        s, b = w["seconds"]["sigrok-cli"], w["seconds"]["builtin"]
        print(f"runtime engine alone, wake on every {'sample' if w['mode'] == 'skip' else 'edge'}: "
              f"{w['wakes']:,} wake-ups over {w['samples']:,} samples: sigrok-cli {s:.2f} s "
              f"({s / w['wakes'] * 1e6:.2f} us each), builtin {b:.2f} s ({b / w['wakes'] * 1e6:.2f} us each): "
              f"{s / b:.1f}x")


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=50e6,
                    help="samples on the sending bus of the state-mode capture (default 50e6)")
    ap.add_argument("--timing-samples", type=float, default=20e6,
                    help="samples on the sending bus of the timing-mode capture (default 20e6)")
    ap.add_argument("--reference-samples", type=float, default=5e6, metavar="N",
                    help="samples of each source (its leading part) the PDs and sigrok-cli decode; the floor "
                         "and the kernels always read every sample (default 5e6)")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="reuse (or write) the simulated captures in DIR")
    ap.add_argument("--prepare-only", action="store_true",
                    help="only simulate the captures into --keep DIR (for a later run that reuses them)")
    args = ap.parse_args()
    if args.prepare_only and not args.keep:
        ap.error("--prepare-only needs --keep DIR")
    if args.reference_samples < 1:
        ap.error("--reference-samples must be at least 1")
    load = _load()

    with tempfile.TemporaryDirectory(prefix="nicrig-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        state = folder / f"stream-{args.samples:.0e}.h5"
        timing = folder / f"stream-timing-{args.timing_samples:.0e}.h5"
        if not state.exists():
            _simulate(state, args.samples, None)
        if not timing.exists():
            _simulate(timing, args.timing_samples, TIMING_SAMPLES_PER_CLOCK)
        if args.prepare_only:
            print(f"captures ready: {state}, {timing}")
            return 0
        part = int(args.reference_samples)
        rows = (_stacks(state, "state", ("send_pci", "probe"), part)
                + _stacks(timing, "timing", ("send_pci",), part))
        one = _workers(state, 1)
        two = _workers(state, 2)
        wakeups = _wakeups(Path(tmp))
    _print(rows, one, two, wakeups, load)
    print(json.dumps({"rows": rows, "workers": {"1": one, "2": two}, "wakeups": wakeups}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
