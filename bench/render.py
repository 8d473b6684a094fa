#!/usr/bin/env python3
"""Benchmark and oracle for speed work on the simulated instruments: runs the model once per case, then renders
and encodes every block of every source serially (as ``nicrig simulate``'s workers do, one process), prints the
CPU seconds of rendering and of encoding per source and a fingerprint of everything rendered.

The fingerprint is a SHA-256 of every block's samples and timestamps, every bus block's ground-truth rows and
purposes, and every source's truth tables: a change meant only to make rendering faster leaves every case's
fingerprint as it was. ``--save FILE`` keeps them, ``--expect FILE`` compares (exit 1 on any difference).
The cases are ``bench/model.py``'s, recorded in state mode with control lines only (as ``bench/sim.py``), with
AD/C/BE#/PAR (``--with-ad``) or in timing mode (``--samples-per-clock K``).

CPU seconds on this VM scatter by +-30% between identical runs; instruction counts do not. ``--passes N``
renders everything N times, so that under ``valgrind --tool=cachegrind --cache-sim=no`` the difference of
``--passes 2`` and ``--passes 1`` (with ``--no-hash``) is one pass of rendering and encoding without the model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from collections import defaultdict

import fingerprints
from model import CASES, rig_of
from nicrig.acquisition.capture import encode_block
from nicrig.acquisition.sim import rig as rig_module

DEFAULT = ["s2400", "sk-retry", "alteon", "intel-pause"]


def measure(case: str, recording: rig_module.Recording, *, hashed: bool, passes: int) -> dict:
    rig = rig_of(case)
    run = rig.run()
    sources = rig_module._Sources(run, rig.nics[0], rig.hosts, recording)
    render_s: dict[str, float] = defaultdict(float)
    encode_s: dict[str, float] = defaultdict(float)
    h = hashlib.sha256()
    for _ in range(passes):
        for name in sources.names:
            n_clocks = sources.clocks(name)
            truth = []
            for c0, c1 in sources.blocks(name):
                t = time.process_time()
                block = sources.render(name, c0, c1, n_clocks)
                t2 = time.process_time()
                encode_block(block.samples, block.timestamps, sources.chunk_samples)
                encode_s[name] += time.process_time() - t2
                render_s[name] += t2 - t
                if block.truth is not None:
                    truth.append(block.truth)
                if hashed:
                    h.update(block.samples.tobytes())
                    h.update(b"-" if block.timestamps is None else block.timestamps.tobytes())
            t = time.process_time()
            tables = sources.tables(name, rig_module._rows_concatenated(truth) if name != "probe" else None)
            render_s[name] += time.process_time() - t
            if hashed:
                for table in tables:
                    h.update(table.path.encode() + str(table.rows.dtype).encode() + table.rows.tobytes())
    return {"case": case, "samples": sum(sources.clocks(n) for n in sources.names),
            "render_cpu_s": {n: round(s, 3) for n, s in render_s.items()},
            "encode_cpu_s": {n: round(s, 3) for n, s in encode_s.items()},
            "fingerprint": h.hexdigest() if hashed else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"bench/model.py cases (default: {', '.join(DEFAULT)})")
    ap.add_argument("--with-ad", action="store_true", help="record AD/C/BE#/PAR too")
    ap.add_argument("--samples-per-clock", type=int, metavar="K", help="timing mode, K samples per bus clock")
    ap.add_argument("--passes", type=int, default=1, help="render everything this many times (default 1)")
    fingerprints.add_arguments(ap)
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    args = ap.parse_args()
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)} (bench/model.py --list shows them)")
    if args.passes < 1:
        ap.error("--passes: at least 1")
    recording = rig_module.Recording(with_ad=args.with_ad, samples_per_clock=args.samples_per_clock)
    variant = f"{'+ad' if args.with_ad else ''}{f'+x{args.samples_per_clock}' if args.samples_per_clock else ''}"
    oracle = fingerprints.Oracle(ap, args)
    for case in args.cases or DEFAULT:
        r = measure(case, recording, hashed=not args.no_hash, passes=args.passes)
        key = case + variant
        verdict = oracle.verdict(key, r["fingerprint"])
        if args.json:
            print(json.dumps({**r, **({"expected": verdict} if verdict else {})}))
        else:
            per = "  ".join(f"{n} {r['render_cpu_s'][n]:.2f}+{r['encode_cpu_s'][n]:.2f}" for n in r["render_cpu_s"])
            print(f"{key:16s} {r['samples']:11,d} samples  render+encode s CPU: {per}  "
                  f"{(r['fingerprint'] or '-')[:16]} {verdict}")
    return oracle.close()


if __name__ == "__main__":
    raise SystemExit(main())
