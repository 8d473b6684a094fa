"""``nicrig simulate``: run the simulated rig (two hosts, NICs, PCI buses, gigabit link) into a capture set."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", choices=["stream", "latency"], default="stream",
                   help="stream: spaced UDP stream A->B; latency: request-response (default: stream)")
    p.add_argument("--nic", default="intel-pro1000", help="NIC profile name or .toml file (default: intel-pro1000)")
    p.add_argument("--bus", default="pci64-66", help="bus profile name or .toml file (default: pci64-66)")
    p.add_argument("--host", default="supermicro-370dle",
                   help="host profile name or .toml file (default: supermicro-370dle)")
    p.add_argument("--size", type=int, default=1400, metavar="BYTES",
                   help="UDP payload: stream packet size, or latency response size (default: 1400)")
    p.add_argument("--request-size", type=int, default=64, metavar="BYTES",
                   help="latency request payload (default: 64)")
    p.add_argument("--spacing-us", type=float, default=20.0, metavar="US",
                   help="stream: transmit spacing between packets (default: 20)")
    p.add_argument("--count", type=int, default=100, help="packets (stream) or requests (latency) (default: 100)")
    p.add_argument("--mtu", type=int, default=1500, help="link MTU; larger messages are IP-fragmented (default 1500)")
    p.add_argument("--seed", type=int, default=1, help="random seed: payloads and clock phases (default: 1)")
    p.add_argument("--with-ad", action="store_true", help="also record AD, C/BE# and PAR (default: control lines)")
    p.add_argument("--samples-per-clock", type=int, default=None, metavar="K",
                   help="record the PCI buses in timing mode with a CLK channel, K samples per clock "
                        "(default: state mode, one sample per clock)")
    p.add_argument("--list-profiles", action="store_true", help="list the built-in profiles and exit")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    p.add_argument("-o", "--output", metavar="FILE.h5", help="capture set to write")


def _summary(run: Any, path: str) -> dict[str, Any]:
    from nicrig.acquisition.capture import CaptureSet

    with CaptureSet.open(path) as cs:
        sources = {n: {"samples": s.num_samples, "mode": s.mode, "duration_us": s.duration_ps / 1e6}
                   for n, s in cs.sources.items()}
        frames = cs.read_table("truth/probe/frames")
        packets = cs.read_table("truth/packets")
    pauses = frames[frames["kind"] == b"pause"]
    return {
        "output": path,
        "sources": sources,
        "transactions": {n: len(b.transactions) for n, b in run.buses.items()},
        "frames": int(len(frames)),
        "pause_frames": int(len(pauses)),
        "packets_sent": int(len(packets)),
        "packets_lost": int((packets["t_app_recv_ps"] < 0).sum()),
        "interrupts": len(run.interrupts),
        "counters": run.counters,
    }


def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition.sim import profiles
    from nicrig.acquisition.sim.model import Scenario
    from nicrig.acquisition.sim.rig import Recording, simulate

    from nicrig.errors import UsageError

    if args.list_profiles:
        for kind in ("bus", "nic", "host"):
            print(f"{kind}: {', '.join(profiles.available(kind))}")
        return 0
    if not args.output:
        raise UsageError("simulate needs -o FILE.h5")
    if args.samples_per_clock is not None and not 2 <= args.samples_per_clock <= 64:
        raise UsageError("--samples-per-clock must be 2 to 64")
    scenario = Scenario(kind=args.scenario, size_bytes=args.size, count=args.count, spacing_us=args.spacing_us,
                        request_bytes=args.request_size, mtu=args.mtu, seed=args.seed)
    scenario.check()
    bus = profiles.load("bus", args.bus)
    nic = profiles.load("nic", args.nic)
    host = profiles.load("host", args.host)
    recording = Recording(with_ad=args.with_ad, samples_per_clock=args.samples_per_clock)

    if sys.stderr.isatty():
        from rich.progress import Progress

        with Progress(transient=True) as bar:
            tasks: dict[str, Any] = {}

            def progress(name: str, done: int, total: int) -> None:
                if name not in tasks:
                    tasks[name] = bar.add_task(f"writing {name}", total=total)
                bar.update(tasks[name], completed=done)

            result = simulate(scenario, bus, nic, host, args.output, recording, progress)
    else:
        result = simulate(scenario, bus, nic, host, args.output, recording)

    summary = _summary(result, args.output)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"wrote {args.output}: {args.scenario} scenario, {nic.name} on {bus.name}, host {host.name}")
    for name, s in summary["sources"].items():
        print(f"  {name:9s} {s['samples']:>11,d} samples ({s['mode']}), {s['duration_us']:.1f} us")
    print(f"  {summary['frames']} frames on the link ({summary['pause_frames']} PAUSE), "
          f"{summary['interrupts']} interrupts, {summary['packets_sent']} messages sent, "
          f"{summary['packets_lost']} lost")
    return 0
