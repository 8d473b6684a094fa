"""``nicrig report FILE... -o report.html``: analyse udpmon results and decoded capture sets into one report.

Each file is opened as whatever nicrig file it is: a udpmon results file
(latency, stream, suite or aggregate; swept with ``--sweep`` or not), or a
capture set (decoded first with ``nicrig decode``); a simulated capture set
also gives the section of the udpmon results it carries (``results/``). The
report is HTML (one self-contained page), JSON or CSV, chosen by ``--format``
or by the output's suffix. A file that cannot be analysed is named in the
report and on stderr; the others are still reported (exit 1). Exit 2 when
nothing could be analysed or the options are wrong.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nicrig.analysis.citations import HUGHES_JONES, PAI

FORMATS = ("html", "json", "csv")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="udpmon results files and capture sets (.h5)")
    p.add_argument("-o", "--output", default="-", metavar="OUT",
                   help="where to write the report (default: standard output)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="html, json or csv (default: from the output's suffix, else html)")
    p.add_argument("--json", action="store_const", dest="format", const="json", help="the same as --format json")
    p.add_argument("--title", default="nicrig report", help="the report's title")
    p.add_argument("--path", default=None, metavar="ELEMENTS",
                   help="the path a byte takes between the hosts, to compare latency slopes with, e.g. "
                        "memcpy:1000,pci64-66,gige,pci64-66,memcpy:1000 (elements: pci32-33, pci64-66, "
                        "pcix64-133, pcie3x8:mps=256, eth100m/eth1g (gige)/eth10g/eth25g/eth100g, memcpy:MB/s)")
    p.add_argument("--path-mode", choices=("store-and-forward", "cut-through"), default="store-and-forward",
                   help="how the path's elements combine: add up (default) or the slowest")
    p.add_argument("--rtt-intercept-us", type=float, default=None, metavar="US",
                   help=f"RTT intercept of the captured hosts, for the host software estimate of {HUGHES_JONES}, "
                        "§4.1.3")
    p.add_argument("--link-rate", default=None, metavar="RATE",
                   help="Ethernet rate of the measured link: 100m, 1g, 10g, 25g, 100g (default: 1g, none on "
                        "loopback)")
    p.add_argument("--correlation", default=None, metavar="CSV",
                   help="microbenchmark and application throughputs per NIC (columns 'app:NAME' are "
                        f"applications): {PAI}, Table 2")
    p.add_argument("--send-source", default="send_pci", help="the sending host's bus in capture sets")
    p.add_argument("--recv-source", default="recv_pci", help="the receiving host's bus in capture sets")
    p.add_argument("--probe-source", default="probe", help="the link probe (at the sending host)")


def _options(args: argparse.Namespace) -> Any:
    from nicrig.analysis import expected, report
    from nicrig.errors import UsageError

    link = None
    if args.link_rate is not None:
        if args.link_rate.lower() not in expected.ETHERNET_RATES_BPS:
            raise UsageError(f"--link-rate {args.link_rate!r}: choose {', '.join(expected.ETHERNET_RATES_BPS)}")
        link = expected.ETHERNET_RATES_BPS[args.link_rate.lower()]
    if args.rtt_intercept_us is not None and not 0 < args.rtt_intercept_us < 1e7:
        raise UsageError("--rtt-intercept-us must be a positive number of microseconds")
    return report.Options(path=tuple(expected.parse_path(args.path)) if args.path else (),
                          path_mode=args.path_mode, rtt_intercept_us=args.rtt_intercept_us, link_rate_bps=link,
                          send_source=args.send_source, recv_source=args.recv_source,
                          probe_source=args.probe_source)


def _capture(path: Path, cs: Any, options: Any, pooled: Pooled, *, traced: bool) -> list[Any]:
    """A capture set's sections: the udpmon results a simulated one carries, and its decoded buses and link.

    Without decoded tables a set is an error unless it has results or host traces (``traced``) to report.
    """
    from nicrig.analysis import report
    from nicrig.errors import UsageError
    from nicrig.udpmon.results import RESULTS_GROUP, ResultsFile

    sections = []
    if cs.has_nested(RESULTS_GROUP):
        sections.append(_results(path, cs.nested(ResultsFile, RESULTS_GROUP), options, pooled))
    names = cs.table_names()
    wanted = [f"{options.send_source}/pci", f"{options.send_source}/irq", f"{options.recv_source}/pci",
              f"{options.recv_source}/irq", f"{options.probe_source}/ethernet"]
    tables = {w: cs.read_table(f"decoded/{w}") if f"decoded/{w}" in names else None for w in wanted}
    if all(v is None for v in tables.values()):
        decoded = [n for n in names if n.startswith("decoded/")]
        hint = (f"it has {', '.join(decoded)}; name the sources with --send-source/--recv-source/--probe-source"
                if decoded else f"run 'nicrig decode {path}' first")
        message = (f"{path}: no decoded tables of {options.send_source}, {options.recv_source} or "
                   f"{options.probe_source}: {hint}")
        if not sections and not traced:
            raise UsageError(message)
        if sections:
            print(f"nicrig: note: {message}; reporting its results only", file=sys.stderr)
        return sections
    meta = {n: {**s.bus, **({"sample_period_ns": 1e9 / s.samplerate_hz} if s.samplerate_hz else {})}
            for n, s in cs.sources.items()}
    section = report.capture_section(path.name, tables, meta, options)
    short = [s.short_text() for s in cs.sources.values() if s.short]
    for text in short:
        print(f"nicrig: note: {path}: {text}", file=sys.stderr)
    section.text[:0] = [f"SHORT RECORDING: {text}." for text in short]
    return [*sections, section]


def _host_probe(path: Path, f: Any) -> Any:
    """The host probe's section of a file holding host traces (None without): per host, and for a stream run
    per point, on the devices the run used (``hosts``)."""
    from nicrig.acquisition.hostprobe import events as hp
    from nicrig.analysis import packetpath, report

    hosts = hp.hosts(f)
    if not hosts:
        return None
    traces = [hp.read(f, h) for h in hosts]
    names = set(f.table_names())
    devices = ({r["host"].decode(): r["interface"].decode() or None for r in f.read_table("hosts")}
               if "hosts" in names else {})
    stream = paths = None
    if {"stream/points", "stream/sent", "stream/received"} <= names:
        points, sent, received = f.read_table("stream/points"), f.read_table("stream/sent"), f.read_table(
            "stream/received")
        far = next((t for t in traces if t.host != "local"), None)
        stream = report.stream_windows(points, sent, received, far.clock_offset_ns if far else 0.0)
        paths = packetpath.stream_paths(traces, points, sent, received)
    return report.host_probe_section(path.name, traces, devices, stream, paths)


def _wire(path: Path, f: Any, options: Any) -> list[Any]:
    """A section per wire source of the file; a results file's run against its wire (``--capture``)."""
    from nicrig.acquisition import wire as stored
    from nicrig.analysis import report, wire
    from nicrig.decoders import wire_frames

    sections = []
    names = set(f.table_names())
    for name in stored.names(f):
        src = stored.WireSource(f, name)
        eth = wire_frames.table_of(f, src)
        pairing, spacing = None, None
        if f.FORMAT_NAME == "nicrig-results":
            far = src.info.capture.get("far_clock", {}) if src.info.capture else {}
            if {"stream/points", "stream/sent", "stream/received"} <= names:
                points = f.read_table("stream/points")
                spacing = {int(r["point"]): float(r["spacing_us"]) for r in points}
                pairing = wire.pair_stream(points, f.read_table("stream/sent"),
                                           f.read_table("stream/received"), eth, float(far.get("offset_ns", 0.0)),
                                           float(far.get("uncertainty_ns", 0.0)))
            elif {"latency/visits", "latency/rtt"} <= names and "local_port" in f.table_info("latency/visits")["columns"]:
                pairing = wire.pair_latency(f.read_table("latency/visits"), f.read_table("latency/rtt"), eth)
        link = options.link_rate_bps or (src.link_rate_bps(0) if len(src.interfaces) else 1e9)
        sections.append(report.wire_section(path.name, name, eth, src.describe(), pairing, link, spacing,
                                            src.stamp_step_ns()))
    return sections


@dataclass
class Pooled:
    """What the report gathers across files: every host's ``load`` rows, every suite run (Table 2's items)."""

    loads: dict[str, tuple[list[tuple[str, str]], list[Any]]] = field(default_factory=dict)
    suites: list[tuple[str, str, Any]] = field(default_factory=list)

    def add_load(self, host: str, file: str, table: str, rows: Any) -> None:
        sources, parts = self.loads.setdefault(host, ([], []))
        sources.append((file, table))
        parts.append(rows)

    def host_loads(self) -> list[Any]:
        import numpy as np
        from nicrig.analysis import report

        return [report.HostLoad(host, tuple(sources), np.concatenate(parts))
                for host, (sources, parts) in self.loads.items()]


KINDS = ("latency", "stream", "suite", "aggregate")


def _run_data(rf: Any, kind: str, prefix: str) -> Any:
    """The tables of one run (or sweep step, at ``prefix``) the report analyses, read and rebuilt."""
    from nicrig.analysis import suite

    if kind == "latency":
        return rf.read_table(f"{prefix}latency/rtt")
    if kind == "stream":
        received = f"{prefix}stream/received"
        return (rf.read_table(f"{prefix}stream/points"),
                rf.read_table(received) if received in rf.table_names() else None,
                rf.table_attrs(f"{prefix}stream/points"))
    if kind == "suite":
        return suite.suite_run(*(rf.read_table(f"{prefix}suite/{t}") for t in ("tests", "trials", "flows")),
                               rf.table_attrs(f"{prefix}suite/tests"))
    return suite.aggregate(rf.read_table(f"{prefix}aggregate/flows"))


def _addresses(rf: Any, names: set[str]) -> dict[str, str]:
    """Host label -> numeric address, from ``hosts`` (version 1 files: the peer as given)."""
    if "hosts" in names:
        return {r["host"].decode(): r["address"].decode() for r in rf.read_table("hosts")}
    return {"remote": str(rf.attrs.get("peer", "")).rpartition(":")[0]}


def _results(path: Path, rf: Any, options: Any, pooled: Pooled) -> Any:
    """A results file's section; its ``load`` rows and suite runs join the pool once the section stands."""
    from nicrig.analysis import load, sweeps
    from nicrig.errors import UsageError

    kind = rf.run_kind
    if kind not in KINDS:
        raise UsageError(f"{path}: a results file of unknown kind {kind!r} (this nicrig reads {', '.join(KINDS)})")
    names = set(rf.table_names())
    steps = sweeps.steps_of(rf.read_table("sweep/steps")) if "sweep/steps" in names else None
    runs = [(s, _run_data(rf, kind, s.prefix if s else "")) for s in (steps or [None])]
    loads = [(s, t, load.as_load(rf.read_table(t)))
             for s, t in ((s, f"{s.prefix if s else ''}load") for s in (steps or [None])) if t in names]
    if not loads and kind == "stream" and steps is None and "counters" in names:  # version 1: no load table
        deltas = {p: c for p, h, w, c in rf.counters() if h == "remote" and w == "delta"}
        loads = [(None, "stream/points + counters (receiver)", load.receiver_load(runs[0][1][0], deltas))]
    addresses = _addresses(rf, names)
    settings = json.loads(rf.attrs.get("settings", "{}"))
    section = _results_section(path.name, rf, kind, names, settings, steps, runs, loads, addresses, options)
    for _, table, rows in loads:
        for host, mine in load.by_host(rows).items():
            where = addresses.get(host, "")
            pooled.add_load(f"{host} ({where})" if where else host, path.name, table, mine)
    if kind == "suite":
        pooled.suites += [(path.name, f"{path.name} {s.label}" if s else path.name, r) for s, r in runs]
    return section


def _results_section(name: str, rf: Any, kind: str, names: set[str], settings: dict[str, Any], steps: Any,
                     runs: list[tuple[Any, Any]], loads: list[tuple[Any, str, Any]], addresses: dict[str, str],
                     options: Any) -> Any:
    from nicrig.analysis import report, resolution, sweeps

    remote = json.loads(rf.attrs.get("remote", "{}"))
    loopback = remote.get("interface") == "lo" or settings.get("host") in ("127.0.0.1", "::1", "localhost")
    mtu = int(settings.get("mtu", 1500))
    link = _link(options, runs, kind, loopback)
    if kind == "stream":
        step = resolution.results(rf.simulation, "stream").step_ns
        runs = [(s, report.stream_curves(points, received, {**settings, "mtu": sweeps.mtu_of(s, mtu) if s else mtu},
                                         link, int(attrs.get("wire_overhead_bytes", 66)), step))
                for s, (points, received, attrs) in runs]
    if steps is None:
        data = runs[0][1]
        if kind == "latency":
            return report.latency_section(name, data, settings, options, loopback, rf.simulation)
        if kind == "stream":
            return report.stream_section(name, data, link, rf.simulation)
        if kind == "suite":
            return report.suite_section(name, data)
        return report.aggregate_section(name, data, addresses)
    common = {"applied": rf.read_table("sweep/applied") if "sweep/applied" in names else None,
              "swept": [str(t) for t in settings.get("sweep", [])], "loads": [(s, rows) for s, _, rows in loads]}
    if kind == "latency":
        return report.sweep_latency_section(name, [(s, d, sweeps.mtu_of(s, mtu)) for s, d in runs],
                                            loopback=loopback, **common)
    if kind == "stream":
        return report.sweep_stream_section(name, runs, link_rate_bps=link, **common)
    if kind == "suite":
        return report.sweep_suite_section(name, runs, **common)
    return report.sweep_aggregate_section(name, runs, addresses, **common)


def _link(options: Any, runs: list[tuple[Any, Any]], kind: str, loopback: bool) -> float | None:
    """The link rate (bit/s) stream rates are held to: --link-rate, else the one udpmon recorded with the run
    (``stream/points`` attribute ``link_mbps``; NaN: the interface stated none), else 1 Gbit/s unless over
    loopback."""
    import math

    if options.link_rate_bps:
        return options.link_rate_bps
    if kind == "stream" and "link_mbps" in runs[0][1][2]:
        recorded = float(runs[0][1][2]["link_mbps"])
        return recorded * 1e6 if math.isfinite(recorded) else None
    return None if loopback else 1e9


def build(args: argparse.Namespace, progress: Callable[[int], None] = lambda done: None) -> tuple[Any, int]:
    """The report for ``args.files``, and how many files could not be analysed; ``progress(files_done)``."""
    from nicrig.analysis import report
    from nicrig.errors import NicrigError
    from nicrig.h5file import open_any

    options = _options(args)
    sections, problems, inputs, pooled = [], [], [], Pooled()
    for done, name in enumerate(args.files):
        progress(done)
        path = Path(name)
        try:
            with open_any(path) as f:
                kind = f.FORMAT_NAME
                traced = _host_probe(path, f)
                wired = _wire(path, f, options)
                found = (_capture(path, f, options, pooled, traced=traced is not None)
                         if kind == "nicrig-capture-set" else [_results(path, f, options, pooled)])
        except NicrigError as exc:
            problems.append(str(exc))
            print(f"nicrig: error: {exc}", file=sys.stderr)
            continue
        except (KeyError, ValueError, OSError) as exc:
            problems.append(f"{path}: cannot be analysed: {exc}")
            print(f"nicrig: error: {path}: cannot be analysed: {exc}", file=sys.stderr)
            continue
        sections += [*found, *([traced] if traced is not None else []), *wired]
        inputs.append({"path": str(path), "kind": kind})
    progress(len(args.files))
    if pooled.loads:
        sections.append(report.cpu_section(pooled.host_loads()))
    if pooled.suites:
        sections.append(report.suite_correlation_section(pooled.suites))
    if args.correlation:
        labels, columns = report.read_correlation_csv(args.correlation)
        sections.append(report.correlation_section(Path(args.correlation).name, labels, columns))
        inputs.append({"path": args.correlation, "kind": "correlation table"})
    sections.append(report.reference_section(options, sections))
    return report.new_report(args.title, inputs, sections, problems), len(problems)


def _write(text: str, output: str) -> None:
    """Write ``text`` to ``output`` atomically (a temporary file renamed into place), or to stdout for '-'."""
    from nicrig.atomic import replacing

    if output == "-":
        sys.stdout.write(text)
        return
    with replacing(output) as tmp:
        tmp.write_text(text, encoding="utf-8")


def run(args: argparse.Namespace) -> int:
    from nicrig.analysis import render
    from nicrig.errors import UsageError
    from nicrig.progress import Progress

    fmt = args.format or {".json": "json", ".csv": "csv"}.get(Path(args.output).suffix.lower(), "html")
    with Progress() as bar:
        rep, failed = build(args, bar.task("report: analysing", len(args.files), "files"))
        if failed == len(args.files):
            raise UsageError("no file could be analysed")
        bar.task(f"report: rendering {fmt.upper()}")(0)
        text = render.RENDERERS[fmt](rep)
    _write(text, args.output)
    if args.output != "-":
        print(f"wrote {args.output}: {len(rep.sections)} sections from {len(args.files) - failed} of "
              f"{len(args.files)} files", file=sys.stderr)
    return 1 if failed else 0
