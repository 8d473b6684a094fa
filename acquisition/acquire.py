"""``nicrig acquire``: arm instruments, optionally run traffic, fetch everything into one capture set.

Three ways to name the instruments:

* ``nicrig acquire TCPIP0::192.0.2.10::5025::SOCKET --probe-map pci-control ...``: one
  SCPI instrument by its VISA resource string (PyVISA, pyvisa-py backend);
* ``nicrig acquire --sigrok-driver demo --samples 100000 --sample-rate 1MHz ...``: one
  sigrok device through sigrok-cli;
* ``nicrig acquire --config rig.toml``: several (``nicrig.acquisition.instruments.rigconfig``).

The capture set is written in HDF5 SWMR mode while data arrives; Ctrl-C, a
timeout or a dropped instrument leaves a valid file with what was fetched, and
the command says what is missing. Exit status: 0 all complete, 1 something
missing, 2 a usage or instrument setup error (nothing armed), 130 interrupted.
See ``docs/instruments.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import shlex
import sys
from pathlib import Path
from typing import Any

#: Single-instrument options and their defaults (refused with --config, which sets them per instrument).
_SINGLE = {"source": None, "model": None, "probe_map": None, "sample_rate": None, "record_length": None,
           "trigger": None, "trigger_position": 0.1, "threshold": 1.4, "io_timeout": 5.0, "batch_points": 250_000,
           "format": "BYTE", "offset_ps": 0, "sigrok_conn": None, "sigrok_config": None}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("resource", nargs="?", metavar="RESOURCE",
                   help="VISA resource string of one SCPI instrument, e.g. TCPIP0::127.0.0.1::5025::SOCKET")
    p.add_argument("-o", "--output", required=True, metavar="CAP.h5", help="capture set to write")
    p.add_argument("--config", metavar="RIG.toml", help="several instruments, as a rig configuration describes them")
    p.add_argument("--sigrok-driver", metavar="DRIVER",
                   help="one sigrok device instead: demo, fx2lafw, dreamsourcelab-dslogic, ...")
    g = p.add_argument_group("one instrument (RESOURCE or --sigrok-driver)")
    g.add_argument("--source", help="name of the source it records (default: logic)")
    g.add_argument("--model", help="driver (default: the one its *IDN? matches; nicrig instrument models lists them)")
    g.add_argument("--probe-map", metavar="NAME|FILE",
                   help="which pod bit is which signal: a name from data/probemaps or a .toml file "
                        "(needed for SCPI instruments; sigrok: default the device's channel names)")
    g.add_argument("--sample-rate", metavar="HZ", help="e.g. 266.67MHz, 1e6")
    g.add_argument("--record-length", "--samples", metavar="N", type=int, help="samples to record")
    g.add_argument("--trigger", metavar="SIGNAL[:SLOPE]",
                   help="trigger on an edge of a probe-map signal (slope falling, rising, either; default falling), "
                        "or 'external' (default; sigrok: no trigger, record at once)")
    g.add_argument("--trigger-position", type=float, help="fraction of the record before the trigger (default 0.1)")
    g.add_argument("--threshold", type=float, metavar="V", help="logic threshold (default 1.4 V)")
    g.add_argument("--io-timeout", type=float, metavar="S", help="time an instrument may take to answer (default 5 s)")
    g.add_argument("--batch-points", type=int, metavar="N",
                   help="points per transfer for instruments that read memory in batches (default 250000)")
    g.add_argument("--format", choices=["BYTE", "WORD"], help="waveform data format (Keysight; default BYTE)")
    g.add_argument("--offset-ps", type=int, help="known offset of this source on the common timeline (ps)")
    g.add_argument("--sigrok-conn", metavar="CONN", help="sigrok device connection (e.g. a USB bus.address)")
    g.add_argument("--sigrok-config", metavar="KEY=VALUE", action="append",
                   help="extra sigrok device option, e.g. voltage_threshold=1.5-1.5 (repeatable)")
    r = p.add_argument_group("the run")
    r.add_argument("--timeout", type=float, metavar="S", help="wait this long for the triggers (default: the "
                                                                  "configuration's timeout_s, else 30 s)")
    r.add_argument("--udpmon", metavar="'ARGS'",
                   help="udpmon test to run while armed, e.g. 'stream 198.18.0.2 --count 2000' "
                        "(its results go to CAP-udpmon.h5)")
    r.add_argument("--deskew-signal", metavar="SIGNAL",
                   help="after fetching, line the sources up on this signal's first rising edge")
    r.add_argument("--force", action="store_true", help="replace CAP.h5 if it exists")
    r.add_argument("--json", action="store_true", help="print the outcome as JSON")


class Traffic:
    """A udpmon test (``latency ...`` or ``stream ...``) run while the instruments are armed."""

    def __init__(self, argv: list[str], results: Path, force: bool = False):
        from nicrig.atomic import refuse_existing
        from nicrig.udpmon import command as udpmon

        from nicrig.errors import UsageError

        parser = argparse.ArgumentParser(prog="nicrig udpmon", add_help=False)
        udpmon.add_arguments(parser)
        if not argv or argv[0] not in ("latency", "stream"):
            raise UsageError(f"udpmon test {' '.join(argv)!r}: starts with latency or stream")
        if "-o" not in argv and "--output" not in argv:
            argv = [*argv, "-o", str(results)]
        if force and "--force" not in argv:  # acquire --force replaces the run's results too
            argv = [*argv, "--force"]
        try:
            with contextlib.redirect_stderr(io.StringIO()) as err:
                self.args = parser.parse_args([*argv, "--json"])
        except SystemExit:
            raise UsageError(f"udpmon test {' '.join(argv)!r}: {err.getvalue().strip().splitlines()[-1]}") from None
        if not self.args.force:  # refused now, before any instrument is armed
            refuse_existing(self.args.output)
        self.argv = argv
        # the command the results file records: this udpmon test, not the acquire command running it
        self.args._argv = ["udpmon", *argv, "--json"]

    def __call__(self) -> dict[str, Any]:
        from nicrig.udpmon import command as udpmon

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = udpmon.run(self.args)
        return {"argv": self.argv, "exit": code, "results": str(self.args.output),
                "summary": json.loads(out.getvalue() or "null")}


def _rig(args: argparse.Namespace) -> Any:
    from nicrig.acquisition.csv_logic import parse_rate
    from nicrig.acquisition.instruments import rigconfig

    from nicrig.errors import UsageError

    chosen = [x for x in (args.resource, args.config, args.sigrok_driver) if x]
    if len(chosen) != 1:
        raise UsageError("name the instruments one way: a VISA RESOURCE, --sigrok-driver DRIVER or --config RIG.toml")
    if args.config:
        given = [f"--{k.replace('_', '-')}" for k, default in _SINGLE.items() if getattr(args, k) not in (None, default)]
        if given:
            raise UsageError(f"{', '.join(given)}: set per instrument in {args.config}, not on the command line")
        return rigconfig.load(args.config)
    if args.sample_rate is None or args.record_length is None:
        raise UsageError("give --sample-rate and --record-length (or --samples)")
    position = args.trigger_position if args.trigger_position is not None else 0.1
    cfg = rigconfig.InstrumentConfig(
        source=args.source or "logic", resource=args.resource, model=args.model, sigrok_driver=args.sigrok_driver,
        sigrok_conn=args.sigrok_conn, sigrok_config=tuple(args.sigrok_config or ()), probe_map=args.probe_map,
        sample_rate_hz=parse_rate(args.sample_rate), record_length=args.record_length,
        threshold_v=args.threshold if args.threshold is not None else 1.4,
        trigger=rigconfig.parse_trigger(args.trigger, position) if args.trigger else
        rigconfig.Trigger(position=position),
        io_timeout_s=args.io_timeout or 5.0, offset_ps=args.offset_ps or 0, batch_points=args.batch_points or 250_000,
        data_format=args.format or "BYTE")
    cfg.check()
    return rigconfig.RigConfig(instruments=[cfg])


def _say(text: str) -> None:
    print(f"nicrig acquire: {text}", file=sys.stderr, flush=True)


def _progress_bar() -> Any:
    if not sys.stderr.isatty():
        return contextlib.nullcontext(None)
    from rich.console import Console
    from rich.progress import Progress

    return Progress(console=Console(stderr=True), transient=True)


def run(args: argparse.Namespace) -> int:
    from nicrig.acquisition.instruments import rigconfig, session
    from nicrig.atomic import refuse_existing

    from nicrig.errors import UsageError

    rig = _rig(args)
    out = Path(args.output)
    if not args.force:
        refuse_existing(out)
    if not out.parent.is_dir():
        raise UsageError(f"{out}: folder {out.parent} does not exist")
    udpmon_argv = shlex.split(args.udpmon) if args.udpmon else rig.udpmon
    traffic = Traffic(udpmon_argv, out.with_name(out.stem + "-udpmon.h5"), args.force) if udpmon_argv else None
    members: list[session.Member] = []
    try:
        for cfg in rig.instruments:
            inst, settings = rigconfig.open_instrument(cfg)
            members.append(session.Member(inst, settings, offset_ps=cfg.offset_ps, bus=cfg.bus))
    except BaseException:
        for m in members:
            m.instrument.close()
        raise
    session.prepare(members)
    deskew_signal = args.deskew_signal or rig.deskew_signal
    settings = {"argv": args._argv, "config": str(args.config) if args.config else None,
                "description": rig.description, "timeout_s": args.timeout or rig.timeout_s}
    with _progress_bar() as bar:
        tasks: dict[str, Any] = {}

        def progress(name: str, done: int, total: int) -> None:
            if bar is not None:
                if name not in tasks:
                    tasks[name] = bar.add_task(f"fetching {name}", total=total)
                bar.update(tasks[name], completed=done)

        try:
            outcome = session.run(members, out, timeout_s=args.timeout or rig.timeout_s, while_armed=traffic,
                                  deskew_signal=deskew_signal, notes=rig.description, settings=settings, say=_say,
                                  progress=progress, overwrite=args.force)
        except KeyboardInterrupt as exc:
            print(f"nicrig: {exc or 'interrupted'}", file=sys.stderr)
            for m in members:
                if (text := m.missing()) is not None:
                    print(f"nicrig:   missing {text}", file=sys.stderr)
            return 130
    _report(outcome, args.json)
    return 0 if outcome.complete else 1


def _report(outcome: Any, as_json: bool) -> None:
    rows = [{"source": m.name, "status": m.status, "model": m.instrument.model, "resource": m.instrument.resource,
             "samples": m.fetched, "expected": m.info.points if m.info else None,
             "samplerate_hz": m.info.sample_rate_hz if m.info else None,
             "trigger_sample": m.info.trigger_sample if m.info else None, "errors": m.errors}
            for m in outcome.members]
    if as_json:
        print(json.dumps({"output": str(outcome.path), "complete": outcome.complete, "instruments": rows,
                          "missing": outcome.missing(), "traffic": outcome.traffic, "deskew": outcome.deskew},
                         indent=2, default=str))
        return
    print(f"wrote {outcome.path}" + ("" if outcome.complete else " (INCOMPLETE)"))
    for r in rows:
        rate = f"{r['samplerate_hz'] / 1e6:g} MHz" if r["samplerate_hz"] else "-"
        print(f"  {r['source']:12s} {r['status']:11s} {r['samples']:>10,d}/{r['expected'] or 0:,d} samples at {rate}, "
              f"{r['model']} at {r['resource']}")
    if outcome.deskew:
        d = outcome.deskew
        if "error" in d:
            print(f"  deskew: {d['error']}")
        else:
            print(f"  deskew on {d['signal']} (reference {d['reference']}): "
                  + ", ".join(f"{n} {o:+d} ps" for n, o in sorted(d["offsets_ps"].items())))
    if outcome.traffic:
        t = outcome.traffic
        print(f"  traffic: udpmon {' '.join(t.get('argv', []))}: "
              + (t["error"] if "error" in t else f"exit {t['exit']}, results in {t['results']}"))
    for text in outcome.missing():
        print(f"  missing {text}")
