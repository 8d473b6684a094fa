#!/usr/bin/env python3
"""Benchmark and oracle for speed work on the rig model: runs ``Rig.run`` alone for named cases, prints the
CPU seconds and a fingerprint of everything the model produced.

The fingerprint is a SHA-256 of every bus transaction (every field and array), every purpose and interrupt,
every frame at the probe, every packet and interrupt row, the counters and the run's times: a change meant
only to make the model faster leaves every case's fingerprint as it was. ``--save FILE`` keeps them,
``--expect FILE`` compares (exit 1 on any difference; bench/fingerprints.py). The cases go beyond tests/test_sim_stable.py's in
length (hundreds to thousands of frames, PAUSE cycles, CSR retries, delayed reads, schedules).

CPU seconds on this VM scatter by +-30% between identical runs; instruction counts do not. For those, run
one case under Valgrind, ``valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null
python bench/model.py s2400 --no-hash``, before and after a change; the difference of two lengths
(s2400 minus s600) is the cost of 1,800 frames without the imports. ``--checkpoints`` runs the model as
``nicrig simulate`` does (a checkpoint every ``rig.CHECKPOINT_PS`` of simulated time, nothing done at it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import replace

import fingerprints
import numpy as np
from nicrig.acquisition.sim import profiles
from nicrig.acquisition.sim.model import Point, Rig, RigRun, Scenario
from nicrig.acquisition.sim.rig import CHECKPOINT_PS

INTEL = ("intel-pro1000", "pci64-66", "supermicro-370dle")
#: name -> ((nic, bus, host), scenario keywords)
CASES: dict[str, tuple[tuple[str, str, str], dict]] = {
    "s600": (INTEL, dict(kind="stream", size_bytes=1400, spacing_us=11, count=600)),
    "s2400": (INTEL, dict(kind="stream", size_bytes=1400, spacing_us=11, count=2400)),
    "s18000": (INTEL, dict(kind="stream", size_bytes=1400, spacing_us=11, count=18000)),
    "sk-lat": (("sk9843", "pci32-33", "supermicro-370dle"), dict(kind="latency", size_bytes=3000, count=200, seed=3)),
    "alteon": (("alteon-acenic", "pci64-33", "ibm-das"),
               dict(kind="stream", size_bytes=900, spacing_us=0, count=2000, seed=5)),
    "p4dp6-lat": (("intel-pro1000", "pci64-66", "supermicro-p4dp6"),
                  dict(kind="latency", size_bytes=64, count=300, seed=11)),
    "sk-retry": (("sk9843", "pci64-66", "supermicro-370dle"),
                 dict(kind="stream", size_bytes=1472, spacing_us=0, count=2000, seed=17)),
    "p4dp6-s": (("intel-pro1000", "pci64-66", "supermicro-p4dp6"),
                dict(kind="stream", size_bytes=1400, spacing_us=11, count=2000, seed=19)),
    "pcix-sched": (("generic", "pcix64-133", "supermicro-p4dp8-g2"),
                   dict(kind="stream", size_bytes=1000, count=1, seed=23,
                        schedule=(Point(200, 50, 5.0), Point(3000, 40, 20.0, position=1),
                                  Point(9000, 20, 0.0, position=2)))),
    # A receiver with a small FIFO and ring: PAUSE/XON cycles within a short run.
    "intel-pause": (INTEL, dict(kind="stream", size_bytes=1400, spacing_us=11, count=3000, seed=13)),
    "intel-0us": (("intel-pro1000", "pci32-33", "supermicro-370dle"),
                  dict(kind="stream", size_bytes=8000, spacing_us=0, count=500, seed=2, mtu=1500)),
}
#: What ``all`` runs: every case but the long one.
DEFAULT = [name for name in CASES if name != "s18000"]


def rig_of(case: str) -> Rig:
    (nic_name, bus_name, host_name), scenario = CASES[case]
    nic = profiles.load("nic", nic_name)
    if case == "intel-pause":
        nic = replace(nic, rx_ring=8, rx_fifo_bytes=16384, fc_high_water_bytes=8192, fc_low_water_bytes=4096)
    return Rig(Scenario(**scenario), profiles.load("bus", bus_name), nic, profiles.load("host", host_name))


def fingerprint(run: RigRun) -> str:
    """SHA-256 (hex) of everything ``run`` holds."""
    h = hashlib.sha256()
    for name, bus in sorted(run.buses.items()):
        h.update(name.encode())
        h.update(repr((bus.phase_ps, bus.free_clk, bus.interrupts, bus.purposes)).encode())
        for t in bus.transactions:
            h.update(repr((t.start_clk, t.command, t.address, t.devsel, t.termination, t.wide, t.master,
                           t.parity_error_phases, t.kind)).encode())
            for a in (t.data, t.byte_enables, t.target_waits, t.master_waits):
                h.update(b"N" if a is None else str(a.dtype).encode() + np.ascontiguousarray(a).tobytes())
    for probe in (run.probe_tx, run.probe_rx):
        for clk, frame in probe:
            h.update(repr((clk, frame.kind, frame.seq, frame.pause_quanta, frame.error_at)).encode())
            h.update(frame.data)
    h.update(repr((run.probe_phase_ps, run.packets, run.interrupts, sorted(run.counters.items()), run.trigger_ps,
                   run.end_ps)).encode())
    return h.hexdigest()


def measure(case: str, *, hashed: bool, checkpoints: bool) -> dict:
    rig = rig_of(case)
    cpu = time.process_time()
    run = rig.run(checkpoint=(lambda t_ps: None) if checkpoints else None, every_ps=CHECKPOINT_PS)
    cpu = time.process_time() - cpu
    frames = len(run.probe_tx) + len(run.probe_rx)
    return {"case": case, "frames": frames, "cpu_s": round(cpu, 3),
            "fingerprint": fingerprint(run) if hashed else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("cases", nargs="*", metavar="CASE", help=f"cases to run (default: {', '.join(DEFAULT)})")
    ap.add_argument("--list", action="store_true", help="list the cases and stop")
    ap.add_argument("--checkpoints", action="store_true", help="run with simulate's checkpoints")
    fingerprints.add_arguments(ap)
    ap.add_argument("--json", action="store_true", help="one JSON object per case")
    args = ap.parse_args()
    if args.list:
        for name, ((nic, bus, host), scenario) in CASES.items():
            print(f"{name:12s} {nic} on {bus}, host {host}: {scenario['kind']}, {scenario['count']} messages")
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {', '.join(unknown)} (--list shows them)")
    oracle = fingerprints.Oracle(ap, args)
    for case in args.cases or DEFAULT:
        r = measure(case, hashed=not args.no_hash, checkpoints=args.checkpoints)
        verdict = oracle.verdict(case, r["fingerprint"])
        if args.json:
            print(json.dumps({**r, **({"expected": verdict} if verdict else {})}))
        else:
            print(f"{case:12s} {r['frames']:7d} frames {r['cpu_s']:8.3f} s CPU  "
                  f"{(r['fingerprint'] or '-')[:16]} {verdict}")
    return oracle.close()


if __name__ == "__main__":
    raise SystemExit(main())
