"""``nicrig instrument sim | models | query | deskew``: the simulated SCPI instrument and instrument helpers.

``sim`` serves one source of the simulated rig over TCP in a vendor's SCPI
dialect, exactly as a LAN instrument's raw SCPI port would, with optional
fault injection; ``models`` lists drivers, simulated models and probe maps;
``query`` sends one SCPI command through PyVISA; ``deskew`` measures (and
applies) the offsets between the sources of a capture set from a common
reference edge. See ``docs/instruments.md``.
"""

from __future__ import annotations

import argparse
import json
import signal
from typing import Any


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nicrig.acquisition.instruments.sim.server import IDLE_TIMEOUT_S, MAX_CONNECTIONS

    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    sim = sub.add_parser("sim", help="a simulated SCPI instrument recording the simulated rig",
                         description="Serve one source of the simulated rig over TCP in a vendor's SCPI dialect.",
                         formatter_class=argparse.RawDescriptionHelpFormatter,
                         epilog=_fault_help())
    sim.add_argument("--model", default="keysight-msox4000",
                     help="dialect: keysight-msox4000, keysight-msox3000, rigol-mso5000, tektronix-mso4|5|6 "
                          "(default keysight-msox4000)")
    sim.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    sim.add_argument("--port", type=int, default=5025, help="TCP port (default 5025, the SCPI raw socket; 0 = any)")
    sim.add_argument("--source", default="send_pci", help="rig source its probes see: send_pci, recv_pci, probe")
    sim.add_argument("--probe-map", default=None, metavar="NAME|FILE",
                     help="how the probes are wired (default pci-control, gmii-probe for the probe)")
    sim.add_argument("--samples-per-clock", type=int, default=4, metavar="K",
                     help="its top sample rate: K samples per bus clock (default 4)")
    sim.add_argument("--trigger-delay-ns", type=float, default=0.0,
                     help="delay of its trigger input and of the TRIG wire (cable, trigger path; default 0)")
    sim.add_argument("--ref-delay-us", type=float, default=2.0,
                     help="the REF wire rises this long after the rig's trigger (default 2)")
    sim.add_argument("--trigger-after", type=float, default=0.2, metavar="S",
                     help="seconds from arming to the trigger (the rig's traffic; default 0.2)")
    sim.add_argument("--fault", action="append", default=[], metavar="FAULT", help="inject a fault (see below)")
    sim.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                     help=f"clients served at once; one more is closed at once (default {MAX_CONNECTIONS})")
    sim.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT_S, metavar="S",
                     help=f"disconnect a client silent this long (default {IDLE_TIMEOUT_S:g} s)")
    rig = sim.add_argument_group("the simulated rig (as nicrig simulate)")
    rig.add_argument("--scenario", choices=["stream", "latency"], default="stream")
    rig.add_argument("--count", type=int, default=50, help="packets or requests (default 50)")
    rig.add_argument("--size", type=int, default=1400, help="UDP payload bytes (default 1400)")
    rig.add_argument("--spacing-us", type=float, default=20.0, help="stream spacing (default 20)")
    rig.add_argument("--nic", default="intel-pro1000")
    rig.add_argument("--bus", default="pci64-66")
    rig.add_argument("--host-profile", default="supermicro-370dle")
    rig.add_argument("--seed", type=int, default=1)
    rig.add_argument("--lead-us", type=float, default=100.0,
                     help="idle bus before the first message, room for pre-trigger samples (default 100)")
    sub.add_parser("models", help="list the drivers, simulated models and probe maps")
    q = sub.add_parser("query", help="send one SCPI command (a query prints its answer)")
    q.add_argument("resource", metavar="RESOURCE", help="VISA resource string")
    q.add_argument("command", metavar="COMMAND", help="e.g. '*IDN?' or ':SYSTem:ERRor?'")
    q.add_argument("--timeout", type=float, default=5.0, help="seconds (default 5)")
    d = sub.add_parser("deskew", help="offsets between the sources of a capture set from a common reference edge")
    d.add_argument("capture", metavar="CAP.h5")
    d.add_argument("--signal", default="REF", help="the reference wire every instrument recorded (default REF)")
    d.add_argument("--reference", metavar="SOURCE", help="source that keeps its offset (default: the first by name)")
    d.add_argument("--save", metavar="CAL.toml", help="also write the offsets for a rig configuration's deskew_file")
    d.add_argument("--dry-run", action="store_true", help="measure only; leave the capture set as it is")
    d.add_argument("--json", action="store_true", help="print the measurement as JSON")


def _fault_help() -> str:
    from nicrig.acquisition.instruments.sim import server

    table = server.__doc__.split("Faults (``--fault``, repeatable), for testing what the acquiring side does:")[1]
    lines = [line for line in table.replace("``", "").splitlines() if line.strip(" =")]
    return "faults:\n" + "\n".join(lines)


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the server as Ctrl-C does


def _sim(args: argparse.Namespace) -> int:
    from nicrig.acquisition.instruments import probemap
    from nicrig.acquisition.instruments.sim import wires
    from nicrig.acquisition.instruments.sim.models import make_server
    from nicrig.acquisition.instruments.sim.server import parse_fault
    from nicrig.acquisition.sim.model import Scenario

    faults = [parse_fault(f) for f in args.fault]
    pm = probemap.load(args.probe_map or ("gmii-probe" if args.source == "probe" else "pci-control"))
    scenario = Scenario(kind=args.scenario, size_bytes=args.size, count=args.count, spacing_us=args.spacing_us,
                        seed=args.seed, start_us=args.lead_us)
    scenario.check()
    with_ad = any(s.startswith(("AD[", "C/BE#[", "PAR")) for s in pm.channels)
    rig = wires.render(args.source, scenario, bus=args.bus, nic=args.nic, host=args.host_profile,
                       samples_per_clock=args.samples_per_clock, with_ad=with_ad,
                       trigger_delay_ps=round(args.trigger_delay_ns * 1000),
                       ref_delay_ps=round(args.ref_delay_us * 1e6))
    server = make_server(args.model, rig, pm, host=args.host, port=args.port, faults=faults,
                         trigger_after_s=args.trigger_after, max_connections=args.max_connections,
                         idle_timeout_s=args.idle_timeout)
    signal.signal(signal.SIGTERM, _stop)
    print(f"nicrig instrument sim: {server.dialect.idn}", flush=True)
    print(f"  {rig.source} of the simulated rig ({args.scenario}, {args.count} messages) at up to "
          f"{rig.rate_hz / 1e6:g} MSa/s through probe map {pm.name}", flush=True)
    if faults:
        print(f"  faults: {', '.join(args.fault)}", flush=True)
    print(f"  listening on {server.resource}  (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _models() -> int:
    from nicrig.acquisition.instruments import probemap
    from nicrig.acquisition.instruments.registry import DRIVERS
    from nicrig.acquisition.instruments.sim.models import MODELS

    print("drivers (nicrig acquire --model):")
    for name, cls in DRIVERS.items():
        print(f"  {name:20s} *IDN? {cls.manufacturers.strip('^')} {cls.models.strip('^')}, {cls.pods} pods")
    print("  sigrok               any libsigrok driver through sigrok-cli (--sigrok-driver)")
    print("simulated instruments (nicrig instrument sim --model):")
    for name, cls in MODELS.items():
        print(f"  {name:20s} {cls.idn}")
    print("probe maps (--probe-map):")
    for name in probemap.available():
        pm = probemap.load(name)
        print(f"  {name:20s} {pm.description}")
    return 0


def _query(args: argparse.Namespace) -> int:
    from nicrig.acquisition.instruments.driver import ScpiConnection

    conn = ScpiConnection(args.resource, args.timeout)
    try:
        if args.command.rstrip().endswith("?"):
            print(conn.query(args.command))
        else:
            conn.write(args.command)
    finally:
        conn.close()
    return 0


def _deskew(args: argparse.Namespace) -> int:
    from nicrig.acquisition.capture import CaptureSet
    from nicrig.acquisition.instruments import deskew

    with (CaptureSet.open if args.dry_run else CaptureSet.amend)(args.capture) as cs:
        result: dict[str, Any] = (deskew.measure if args.dry_run else deskew.apply)(cs, args.signal, args.reference)
    if args.save:
        deskew.save(args.save, result)
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{args.capture}: rising edge of {args.signal}, reference {result['reference']}"
          + (" (dry run: not applied)" if args.dry_run else ""))
    for name, off in sorted(result["offsets_ps"].items()):
        print(f"  {name:12s} edge at {result['edges_ps'][name] / 1000:12.3f} ns  ->  offset_ps {off:+d}")
    for name, why in result["unaligned"].items():
        print(f"  {name:12s} not aligned: {why}")
    if args.save:
        print(f"saved {args.save}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "sim":
        return _sim(args)
    if args.action == "models":
        return _models()
    if args.action == "query":
        return _query(args)
    return _deskew(args)
