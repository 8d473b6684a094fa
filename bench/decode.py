#!/usr/bin/env python3
"""Benchmark: ``nicrig decode`` against reading the capture (the storage floor) and against sigrok-cli.

One simulated capture of a 1400-byte UDP stream every 11 us (Intel PRO/1000 on PCI 64/66, AD, C/BE# and
PAR recorded, the GMII probe beside it; more than the link carries, so PAUSE frames), sized so that the
sending bus holds about ``--samples`` samples in state mode (the probe about 1.9x as many). For each
source kind, ``send_pci`` (``pci`` and ``irq``) and ``probe`` (``gmii,ethernet`` both ways and
``linkactivity``), back to back and ``--repeat`` times (medians):

- the storage floor: every dataset of the source (samples and timestamps) read with plain h5py, in
  1 M-row blocks, in this process;
- the whole command: ``nicrig decode FILE --source S --workers 1 --force`` in a child process, from its
  start to the companion renamed into place, its wall time less the start-up of ``nicrig info FILE``
  (timed beside it: the interpreter and imports, which a read in this process does not pay);
- sigrok-cli 0.7.2 / libsigrokdecode 0.5.3 on the same samples (the source's first
  ``--sigrok-samples``, default all), each of the source's stacks, records read back; its rows are
  checked equal to the table nicrig wrote before any time is printed.

Then ``nicrig decode FILE --force`` of the whole file (three sources) with one and with two workers,
back to back, ``--repeat`` times, and (unless ``--no-sigrok``) the runtime engine alone against
libsigrokdecode: ``bench/decoders/stepper``, a decoder that only wakes up, on every sample or every
10th, under both. Peak resident memory (the largest process, by GNU time) and CPU seconds (user +
system, the workers included) come from the child's resource usage. On a loaded machine the wall times
carry the waits for a core; the ratio of CPU seconds (the command's less its start-up's, over the floor's)
does not, and is printed beside. ``--memory-samples N`` also builds a
state-mode source of about N samples (the sending bus's stored chunks over and over, timestamps
continued) and decodes it once, for its peak resident memory.

Goals: each source's command within 2x its floor, one worker; two workers >= 1.8x one on the whole
file (beside it, each run's wall time over its CPU seconds spread over the machine's cores: a run at
1.0x keeps every core busy, and no number of workers makes it faster); the PCI source's command
>= 30x sigrok-cli in samples per second; a 1 G-sample source in under 2 GB resident. ``--keep DIR``
keeps the capture for the next run (``--prepare-only`` makes it and stops).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

GOAL_FLOOR = 2.0
GOAL_WORKERS = 1.8
GOAL_SIGROK = 30.0
GOAL_RSS_BYTES = 2 << 30
SEND_BUS_HZ = 66.666667e6
SPACING_US = 11.0
SOURCES = ("send_pci", "probe")
NICRIG = [sys.executable, "-m", "nicrig"]


def _simulate(out: Path, samples: float) -> Path:
    count = max(10, int(samples / SEND_BUS_HZ / (SPACING_US * 1e-6)))
    partial = out.with_name(f"{out.stem}.partial{out.suffix}")
    cmd = [*NICRIG, "simulate", "--scenario", "stream", "--nic", "intel-pro1000", "--bus", "pci64-66",
           "--with-ad", "--size", "1400", "--spacing-us", str(SPACING_US), "--count", str(count), "--rounds", "1",
           "--capture-count", "0", "-o", str(partial)]
    print(f"simulating {count} packets into {out.name} ...", file=sys.stderr)
    subprocess.run(cmd, check=True, capture_output=True)
    partial.replace(out)  # a run cut short leaves no capture a later --keep run would take as whole
    return out


def _child(cmd: list[str]) -> dict[str, float]:
    """Run ``cmd``; its wall seconds, CPU seconds (user + system, its children included) and peak RSS (bytes).

    The peak comes from GNU time, whose own small process starts ``cmd``: Linux carries the resident size a
    process had when it forked into the child's ``ru_maxrss``, so this process's (the floor's reads) would
    show in every child's figure."""
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as peak:
        t = time.perf_counter()
        proc = subprocess.Popen(["/usr/bin/time", "-f", "%M", "-o", peak.name, *cmd], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            sys.exit(f"bench: {' '.join(cmd)} failed ({proc.returncode}): {err[-500:]}")
        kib = int(peak.read().split()[-1])
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": kib * 1024}


def _floor(path: Path, source: str) -> dict[str, float]:
    """Seconds (wall, CPU) to read every dataset of ``source`` with plain h5py, 1 M rows at a time."""
    import h5py

    t, c = time.perf_counter(), time.process_time()
    with h5py.File(path, "r") as f:
        group = f["sources"][source]
        for name in group:
            ds = group[name]
            for first in range(0, ds.shape[0], 1 << 20):
                ds[first:first + (1 << 20)]
    return {"wall": time.perf_counter() - t, "cpu": time.process_time() - c}


def _median(runs: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _sources(path: Path, repeat: int) -> list[dict[str, Any]]:
    """Per source: the floor, the command and the start-up, back to back, ``repeat`` times."""
    from nicrig.acquisition.capture import CaptureSet

    rows = []
    for name in SOURCES:
        with CaptureSet.open(path) as cs:
            n = cs.source(name).num_samples
        _floor(path, name)  # the page cache warm for both
        runs: dict[str, list[dict[str, float]]] = {"floor": [], "command": [], "startup": []}
        for k in range(repeat):
            print(f"{name}: round {k + 1} of {repeat} ...", file=sys.stderr)
            runs["floor"].append(_floor(path, name))
            runs["command"].append(_child([*NICRIG, "decode", str(path), "--source", name, "--workers", "1",
                                           "--force"]))
            runs["startup"].append(_child([*NICRIG, "info", str(path)]))
        with CaptureSet.open(path) as cs:
            tables = {t.rsplit("/", 1)[1]: len(cs.read_table(t)) for t in cs.table_names()
                      if t.startswith(f"decoded/{name}/")}
        rows.append({"source": name, "samples": n, "rows": tables, "runs": runs,
                     "floor": _median(runs["floor"], "wall"), "floor_cpu": _median(runs["floor"], "cpu"),
                     "command": _median(runs["command"], "wall"), "command_cpu": _median(runs["command"], "cpu"),
                     "startup": _median(runs["startup"], "wall"), "startup_cpu": _median(runs["startup"], "cpu"),
                     "rss": max(r["rss"] for r in runs["command"])})
    return rows


def _sigrok(path: Path, name: str, part: int) -> dict[str, Any]:
    """sigrok-cli over the first ``part`` samples of source ``name``, stack by stack; its rows checked against
    the table nicrig wrote (rows ending well before ``part``, which sigrok-cli saw whole)."""
    import numpy as np
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.decoders import sigrok_cli, spec, tables

    seconds = 0.0
    with CaptureSet.open(path) as cs:
        source = cs.source(name)
        part = min(part, source.num_samples)
        for stack in spec.auto_stacks(source):
            print(f"{name}: sigrok-cli {stack.text()[:40]} over {part:,} samples ...", file=sys.stderr)
            t = time.perf_counter()
            records = sigrok_cli.run_stack(source, stack, stop=part)
            seconds += time.perf_counter() - t
            theirs = tables.records_to_table(stack.output, records, source)
            ours = cs.read_table(f"decoded/{name}/{stack.output}")
            if "direction" in stack.calls[0].options:
                ours = ours[ours["direction"] == stack.calls[0].options["direction"].encode()]
            edge = part - 100_000 if part < source.num_samples else part + 1
            ours, theirs = (t[t["es"] < edge] for t in (ours, theirs))
            if ours.tobytes() != theirs.tobytes() or not np.array_equal(ours["ss"], theirs["ss"]):
                sys.exit(f"bench: sigrok-cli and nicrig disagree on {name} {stack.text()[:60]}")
    return {"samples": part, "seconds": seconds}


def _whole(path: Path, repeat: int) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {"1": [], "2": []}
    for k in range(repeat):
        print(f"whole file: round {k + 1} of {repeat} ...", file=sys.stderr)
        for workers in runs:
            runs[workers].append(_child([*NICRIG, "decode", str(path), "--force", "--workers", workers]))
    return runs


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


def _giant(folder: Path, base: Path, samples: float) -> Path:
    """A capture whose ``send_pci`` source holds about ``samples`` samples: the base capture's sending bus over and
    over (its stored chunks copied, its timestamps continued), for the decode's peak memory."""
    import h5py
    import numpy as np
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.h5file import encode_chunk, storage_filters

    out = folder / f"giant-{samples:.0e}.h5"
    if out.exists():
        return out
    partial = out.with_name(f"{out.stem}.partial{out.suffix}")
    print(f"building {out.name} ...", file=sys.stderr)
    with CaptureSet.open(base) as cs:
        n = cs.source("send_pci").num_samples
    with h5py.File(base, "r") as src_file, h5py.File(partial, "w") as f:
        for k, v in src_file.attrs.items():
            f.attrs[k] = v
        src = src_file["sources/send_pci"]
        g = f.create_group("sources/send_pci")
        for k, v in src.attrs.items():
            g.attrs[k] = v
        samples_ds, times_ds = src["samples"], src["timestamps_ps"]
        rows = samples_ds.chunks[0]
        whole = n - n % rows  # whole chunks only: every copy starts on a chunk boundary
        copies = max(1, round(samples / whole))
        period = int(times_ds[whole]) - int(times_ds[0])
        storage = {"compression": "gzip", "compression_opts": 1, "shuffle": True, "fletcher32": True}
        s = g.create_dataset("samples", shape=(copies * whole, samples_ds.shape[1]), dtype=np.uint8,
                             chunks=samples_ds.chunks, **storage)
        t = g.create_dataset("timestamps_ps", shape=(copies * whole,), dtype=np.int64, chunks=times_ds.chunks,
                             **storage)
        filters = storage_filters(8)
        for first in range(0, whole, rows):
            _, stored = samples_ds.id.read_direct_chunk((first, 0))
            stamps = times_ds[first:first + rows]
            for k in range(copies):
                s.id.write_direct_chunk((k * whole + first, 0), stored)
                t.id.write_direct_chunk((k * whole + first,), encode_chunk(stamps + k * period, rows, filters))
    partial.replace(out)
    return out


def _gib(b: float) -> str:
    return f"{b / (1 << 30):.2f} GiB"


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "?"


def _cpu_ratio(row: dict[str, Any]) -> float:
    """The command's CPU seconds, its start-up's taken off, over the floor's: what a loaded machine leaves of the
    ratio, since CPU time does not count the waits for a core."""
    return (row["command_cpu"] - row["startup_cpu"]) / row["floor_cpu"]


def _print(rows: list[dict[str, Any]], whole: dict[str, list[dict[str, float]]], sigrok: dict[str, dict[str, Any]],
           giant: dict[str, Any] | None, wakeups: list[dict], load: str, repeat: int) -> None:
    print(f"machine: {os.cpu_count()} CPUs; load average before the run: {load}, after: {_load()}; "
          f"medians of {repeat} runs back to back")
    print("| source (stacks) | samples | rows | floor s | command s | x floor | CPU s floor / command | x floor, CPU "
          "| peak RSS | sigrok-cli samples/s | command samples/s | x sigrok-cli |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        net = r["command"] - r["startup"]
        rate = r["samples"] / net
        sg = sigrok.get(r["source"])
        sg_rate = sg["samples"] / sg["seconds"] if sg else float("nan")
        stacks = ", ".join(f"{k} {v:,}" for k, v in r["rows"].items())
        print(f"| {r['source']} | {r['samples']:,} | {stacks} | {r['floor']:.2f} | {net:.2f} "
              f"(+{r['startup']:.2f} start-up) | {net / r['floor']:.2f} | {r['floor_cpu']:.2f} / "
              f"{r['command_cpu']:.2f} (+{r['startup_cpu']:.2f}) | {_cpu_ratio(r):.2f} | {_gib(r['rss'])} "
              f"| {sg_rate:,.0f} | {rate:,.0f} | {rate / sg_rate:.1f} |")
    one, two = _median(whole["1"], "wall"), _median(whole["2"], "wall")
    cpu_one, cpu_two = _median(whole["1"], "cpu"), _median(whole["2"], "cpu")
    cores = os.cpu_count() or 1
    print(f"| whole file, 1 worker / 2 workers | | | | {one:.2f} / {two:.2f} | {one / two:.2f}x faster | "
          f"CPU {cpu_one:.2f} / {cpu_two:.2f}; cores busy {cpu_one / one:.2f} / {cpu_two / two:.2f} | | "
          f"{_gib(max(r['rss'] for r in whole['1']))} / {_gib(max(r['rss'] for r in whole['2']))} | | | |")
    if giant:
        print(f"| {giant['samples']:,}-sample send_pci, 1 worker | {giant['samples']:,} | pci {giant['rows']:,} | | "
              f"{giant['wall']:.1f} | | CPU {giant['cpu']:.1f} | | {_gib(giant['rss'])} | | | |")
    for w in wakeups:
        sg, b = w["seconds"]["sigrok-cli"], w["seconds"]["builtin"]
        print(f"runtime engine alone, wake on every {'sample' if w['mode'] == 'skip' else 'edge'}: "
              f"{w['wakes']:,} wake-ups over {w['samples']:,} samples: sigrok-cli {sg:.2f} s "
              f"({sg / w['wakes'] * 1e6:.2f} us each), builtin {b:.2f} s ({b / w['wakes'] * 1e6:.2f} us each): "
              f"{sg / b:.1f}x")
    worst = max((r["command"] - r["startup"]) / r["floor"] for r in rows)
    print(f"goals: command / floor, worst source {worst:.2f} (CPU seconds: "
          f"{max(_cpu_ratio(r) for r in rows):.2f}; goal <= {GOAL_FLOOR:.0f}); two workers "
          f"{one / two:.2f}x one (goal >= {GOAL_WORKERS}), their wall {two / (cpu_two / cores):.2f}x the machine's "
          f"floor (their CPU seconds over {cores} cores), one worker's {one / (cpu_one / cores):.2f}x; "
          + "; ".join(f"{s} {r['samples'] / (r['command'] - r['startup']) / (sigrok[s]['samples'] / sigrok[s]['seconds']):.1f}"
                      f"x sigrok-cli" for s, r in ((r["source"], r) for r in rows) if s in sigrok)
          + f" (goal for PCI >= {GOAL_SIGROK:.0f}x)"
          + (f"; peak RSS at {giant['samples']:,} samples {_gib(giant['rss'])} (goal < {_gib(GOAL_RSS_BYTES)})"
             if giant else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--samples", type=float, default=30e6,
                    help="samples on the sending bus (default 30e6; the probe gets about 1.9x as many)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each measurement, back to back (default 3)")
    ap.add_argument("--sigrok-samples", type=float, default=0, metavar="N",
                    help="samples of each source sigrok-cli decodes (its leading part; default 0: all of it)")
    ap.add_argument("--no-sigrok", action="store_true", help="leave sigrok-cli out")
    ap.add_argument("--memory-samples", type=float, default=0, metavar="N",
                    help="also decode a state-mode source of about N samples (e.g. 1e9) for its peak memory")
    ap.add_argument("--keep", type=Path, metavar="DIR", help="reuse (or write) the captures in DIR")
    ap.add_argument("--prepare-only", action="store_true", help="only make the captures in --keep DIR")
    args = ap.parse_args()
    if args.prepare_only and not args.keep:
        ap.error("--prepare-only needs --keep DIR")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    load = _load()
    with tempfile.TemporaryDirectory(prefix="nicrig-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"stream-{args.samples:.0e}.h5"
        if not path.exists():
            _simulate(path, args.samples)
        giant_path = _giant(folder, path, args.memory_samples) if args.memory_samples else None
        if args.prepare_only:
            print(f"captures ready in {folder}")
            return 0
        rows = _sources(path, args.repeat)
        whole = _whole(path, args.repeat)
        sigrok = {} if args.no_sigrok else {
            r["source"]: _sigrok(path, r["source"], int(args.sigrok_samples) or r["samples"]) for r in rows}
        wakeups = [] if args.no_sigrok else _wakeups(folder)
        giant = None
        if giant_path:
            print(f"decoding {giant_path.name} once ...", file=sys.stderr)
            run = _child([*NICRIG, "decode", str(giant_path), "--source", "send_pci", "--workers", "1", "--force"])
            from nicrig.acquisition.capture import CaptureSet

            with CaptureSet.open(giant_path) as cs:
                giant = {**run, "samples": cs.source("send_pci").num_samples,
                         "rows": len(cs.read_table("decoded/send_pci/pci"))}
    _print(rows, whole, sigrok, giant, wakeups, load, args.repeat)
    print(json.dumps({"sources": rows, "whole": whole, "sigrok": sigrok, "giant": giant, "wakeups": wakeups}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
