"""``nicrig simulate``: run the simulated rig (two hosts, NICs, PCI buses, gigabit link) into a capture set.

The schedule options (``--sizes``, ``--spacing-us``, ``--count``, ``--rounds``,
``--order``, ``--order-seed``) mean what they mean to ``nicrig udpmon latency``
and ``stream`` and are parsed by the same functions; the capture set carries
the applications' measurements as udpmon results (``results/``), so ``nicrig
report`` and ``nicrig gui`` read a simulated run as they read a real one.
"""

from __future__ import annotations

import argparse
import json
from typing import Any


DEFAULT_CAPTURE_COUNT = 2000
#: Where a simulated host loses messages, and the counter the model keeps for each (as the kernel and the NIC
#: count them).
LOSS_COUNTERS = {"at its full socket buffer (UDP RcvbufErrors)": "udp_rcvbuf_errors",
                 "in its throttled backlog (softnet dropped)": "softnet_dropped",
                 "as datagrams never reassembled": "reasm_fails",
                 "at its NIC's full receive FIFO": "rx_fifo_overflow"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nicrig.udpmon.command import LATENCY_ROUNDS, STREAM_ROUNDS, add_order_arguments

    p.add_argument("--scenario", choices=["stream", "latency"], default="stream",
                   help="stream: spaced UDP streams A->B; latency: request-response (default: stream)")
    p.add_argument("--nic", default="intel-pro1000", help="NIC profile name or .toml file (default: intel-pro1000)")
    p.add_argument("--bus", default="pci64-66", help="bus profile name or .toml file (default: pci64-66)")
    p.add_argument("--recv-bus", metavar="BUS",
                   help="host B's bus (the stream's receiver, the latency run's responder) when it differs from "
                        "host A's (default: --bus)")
    p.add_argument("--host", default="supermicro-370dle",
                   help="host profile name or .toml file (default: supermicro-370dle)")
    p.add_argument("--recv-host", metavar="HOST",
                   help="host B's profile (the stream's receiver, the latency run's responder) when it differs from "
                        "host A's (default: --host)")
    p.add_argument("--sizes", "--size", dest="sizes", default="1400", metavar="BYTES",
                   help="UDP payloads: stream packet sizes, or latency response sizes; start:stop:step or a list, "
                        "as for 'nicrig udpmon' (default: 1400)")
    p.add_argument("--request-size", type=int, default=64, metavar="BYTES",
                   help="latency request payload (default: 64)")
    p.add_argument("--spacing-us", default="20", metavar="US",
                   help="stream: transmit spacings between packets, start:stop:step or a list (default: 20)")
    p.add_argument("--count", type=int, default=100,
                   help="stream: packets per stream; latency: requests per size, shared out over the rounds "
                        "(default: 100)")
    p.add_argument("--rounds", type=int, default=None,
                   help=f"rounds, each visiting every size (and spacing) once (default as 'nicrig udpmon': latency "
                        f"{LATENCY_ROUNDS}, at most --count; stream {STREAM_ROUNDS}; 1 with --order ascending)")
    add_order_arguments(p)
    p.add_argument("--capture-count", type=int, default=DEFAULT_CAPTURE_COUNT, metavar="N",
                   help="the logic analyzers and the probe record the exchanges of the first N messages (requests "
                        "or stream packets) and stop, as an analyzer's memory fills; the results hold every "
                        f"message; 0: record the whole run (default: {DEFAULT_CAPTURE_COUNT})")
    p.add_argument("--mtu", type=int, default=1500, help="link MTU; larger messages are IP-fragmented (default 1500)")
    p.add_argument("--seed", type=int, default=1,
                   help="random seed, a non-negative integer: payloads, clock phases, the hosts' noise (default: 1)")
    p.add_argument("--with-ad", action="store_true", help="also record AD, C/BE# and PAR (default: control lines)")
    p.add_argument("--samples-per-clock", type=int, default=None, metavar="K",
                   help="record the PCI buses in timing mode with a CLK channel, K samples per clock "
                        "(default: state mode, one sample per clock)")
    p.add_argument("--workers", type=int, default=0, metavar="N",
                   help="render the sources in N processes, the first blocks while the model still runs when "
                        "the recording holds the whole run (--capture-count 0, or at least the run's messages) "
                        "(default 0: one per CPU; 1: in this process, after the model); the file is the same")
    p.add_argument("--list-profiles", action="store_true", help="list the built-in profiles and exit")
    p.add_argument("--json", action="store_true", help="print the run summary as JSON")
    p.add_argument("-o", "--output", metavar="FILE.h5", help="capture set to write")
    p.add_argument("--force", action="store_true", help="replace FILE.h5 if it exists (it is not replaced without)")


def _summary(run: Any, stored: Any, path: str) -> dict[str, Any]:
    """What the file holds: the recorded sources and their truth, and the results of the whole run; from what
    :func:`simulate` noted as it stored them (``stored``), the file not read back."""
    from nicrig.udpmon.results import RESULTS_GROUP

    frames, packets = stored.tables["truth/probe/frames"], stored.tables["truth/packets"]
    pauses = frames[frames["kind"] == b"pause"]
    return {
        "output": path,
        # in the file's order of sources (HDF5's, by name)
        "sources": {n: stored.sources[n] for n in sorted(stored.sources)},
        "transactions": {n: stored.rows[f"truth/{n}/transactions"] for n in run.buses},
        "frames": int(len(frames)),
        "pause_frames": int(len(pauses)),
        "packets_sent": int(len(packets)),
        "packets_lost": int((packets["t_app_recv_ps"] < 0).sum()),
        "interrupts": stored.rows["truth/interrupts"],
        "counters": run.counters,
        "results": {"group": RESULTS_GROUP, "tables": dict(stored.results)},
    }


def scenario_of(args: argparse.Namespace) -> Any:
    """The :class:`Scenario` the options ask for: every size (and spacing) in every round, in the order
    ``nicrig udpmon`` would measure them (:func:`nicrig.udpmon.schedule.plan`)."""
    import numpy as np
    from nicrig.acquisition.sim.model import Point, Scenario
    from nicrig.udpmon import schedule
    from nicrig.udpmon.command import LATENCY_ROUNDS, STREAM_ROUNDS, parse_sizes, parse_spacings, settle_rounds

    from nicrig.errors import UsageError

    sizes = parse_sizes(args.sizes)
    if args.count < 1:
        raise UsageError(f"--count {args.count}: at least one packet")
    # NumPy's generators take non-negative seeds only.
    for option, seed in (("--seed", args.seed), ("--order-seed", args.order_seed)):
        if seed is not None and seed < 0:
            raise UsageError(f"{option} {seed}: a seed is a non-negative integer")
    latency = args.scenario == "latency"
    spacings = [0.0] if latency else parse_spacings(args.spacing_us)
    if latency:
        settle_rounds(args, LATENCY_ROUNDS, most=args.count)
    else:
        settle_rounds(args, STREAM_ROUNDS)
    items = [(size, spacing) for size in sizes for spacing in spacings]
    counts = schedule.split(args.count, args.rounds) if latency else [args.count] * args.rounds
    plan = schedule.plan(len(items), args.rounds, args.order, np.random.default_rng(args.order_seed))
    points = tuple(Point(items[v.item][0], counts[v.round], items[v.item][1], v.round, v.position) for v in plan)
    return Scenario(kind=args.scenario, size_bytes=sizes[0], count=args.count, spacing_us=spacings[0],
                    request_bytes=args.request_size, mtu=args.mtu, seed=args.seed, schedule=points)


def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition.sim import profiles
    from nicrig.acquisition.sim.rig import Recording, simulate
    from nicrig.interrupts import signals_interrupt
    from nicrig.progress import Progress

    from nicrig.errors import UsageError

    if args.list_profiles:
        for kind in ("bus", "nic", "host"):
            print(f"{kind}: {', '.join(profiles.available(kind))}")
        return 0
    if not args.output:
        raise UsageError("simulate needs -o FILE.h5")
    if args.samples_per_clock is not None and not 2 <= args.samples_per_clock <= 64:
        raise UsageError("--samples-per-clock must be 2 to 64")
    if args.workers < 0:
        raise UsageError(f"--workers {args.workers}: a number of processes, or 0 for one per CPU")
    if args.capture_count < 0:
        raise UsageError(f"--capture-count {args.capture_count}: a number of messages, or 0 for the whole run")
    scenario = scenario_of(args)
    scenario.check()
    bus = profiles.load("bus", args.bus)
    nic = profiles.load("nic", args.nic)
    host = profiles.load("host", args.host)
    recv_host = profiles.load("host", args.recv_host) if args.recv_host else None
    recv_bus = profiles.load("bus", args.recv_bus) if args.recv_bus else None
    recording = Recording(with_ad=args.with_ad, samples_per_clock=args.samples_per_clock,
                          messages=args.capture_count)
    settings = {"count": args.count, "order": args.order, "order_seed": args.order_seed, "nic": nic.name,
                "bus": bus.name, "host_profile": host.name, "capture_count": args.capture_count,
                **({"recv_host_profile": recv_host.name} if recv_host else {}),
                **({"recv_bus": recv_bus.name} if recv_bus else {})}

    with signals_interrupt(), Progress() as bar:
        tasks: dict[str, Any] = {}

        def progress(name: str, done: int, total: int) -> None:
            if name not in tasks:
                tasks[name] = (bar.task("simulate: running the model", total, "messages") if name == "model"
                               else bar.task(f"simulate: writing {name}", total, "clocks"))
            tasks[name](done)

        result, stored = simulate(scenario, bus, nic, host, args.output, recording, progress, settings=settings,
                                  argv=["nicrig", *args._argv], workers=args.workers or None, overwrite=args.force,
                                  recv_host=recv_host, recv_bus=recv_bus)

    summary = _summary(result, stored, args.output)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    hosts = f"hosts {host.name} and {recv_host.name}" if recv_host else f"host {host.name}"
    buses = f"{bus.name} and {recv_bus.name}" if recv_bus else bus.name
    print(f"wrote {args.output}: {args.scenario} scenario, {nic.name} on {buses}, {hosts}")
    for name, s in summary["sources"].items():
        print(f"  {name:9s} {s['samples']:>11,d} samples ({s['mode']}), {s['duration_us']:.1f} us")
    print(f"  {summary['frames']} frames on the link ({summary['pause_frames']} PAUSE), "
          f"{summary['interrupts']} interrupts recorded; {summary['packets_sent']} messages sent in the run, "
          f"{summary['packets_lost']} lost")
    counters = result.counters
    for side, name in (("recv", "host B"), ("send", "host A")):
        drops = {what: counters.get(f"{side}_{key}", 0) for what, key in LOSS_COUNTERS.items()}
        if any(drops.values()):
            print(f"  {name} lost " + ", ".join(f"{n} {what}" for what, n in drops.items() if n))
    print(f"  results of every message in {args.output}:/results ({scenario.kind}, {len(scenario.points())} "
          f"visits): nicrig report {args.output}")
    return 0
