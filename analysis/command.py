"""``nicrig report FILE... -o report.html``: analyse udpmon results and decoded capture sets into one report.

Each file is opened as whatever nicrig file it is: a udpmon latency or stream
results file, or a capture set (decoded first with ``nicrig decode``). The
report is HTML (one self-contained page), JSON or CSV, chosen by ``--format``
or by the output's suffix. A file that cannot be analysed is named in the
report and on stderr; the others are still reported (exit 1). Exit 2 when
nothing could be analysed or the options are wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

FORMATS = ("html", "json", "csv")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE", help="udpmon results files and capture sets (.h5)")
    p.add_argument("-o", "--output", default="-", metavar="OUT",
                   help="where to write the report (default: standard output)")
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="html, json or csv (default: from the output's suffix, else html)")
    p.add_argument("--title", default="nicrig report", help="the report's title")
    p.add_argument("--path", default=None, metavar="ELEMENTS",
                   help="the path a byte takes between the hosts, to compare latency slopes with, e.g. "
                        "memcpy:1000,pci64-66,gige,pci64-66,memcpy:1000 (elements: pci32-33, pci64-66, "
                        "pcix64-133, pcie3x8:mps=256, eth100m/eth1g (gige)/eth10g/eth25g/eth100g, memcpy:MB/s)")
    p.add_argument("--path-mode", choices=("store-and-forward", "cut-through"), default="store-and-forward",
                   help="how the path's elements combine: add up (default) or the slowest")
    p.add_argument("--rtt-intercept-us", type=float, default=None, metavar="US",
                   help="RTT intercept of the captured hosts, for seed 002's host software estimate")
    p.add_argument("--link-rate", default=None, metavar="RATE",
                   help="Ethernet rate of the measured link: 100m, 1g, 10g, 25g, 100g (default: 1g, none on "
                        "loopback)")
    p.add_argument("--correlation", default=None, metavar="CSV",
                   help="microbenchmark and application throughputs per NIC (columns 'app:NAME' are "
                        "applications): seed 000 Table 2")
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


def _capture(path: Path, cs: Any, options: Any) -> Any:
    from nicrig.analysis import report
    from nicrig.errors import UsageError

    names = cs.table_names()
    wanted = [f"{options.send_source}/pci", f"{options.send_source}/irq", f"{options.recv_source}/pci",
              f"{options.recv_source}/irq", f"{options.probe_source}/ethernet"]
    tables = {w: cs.read_table(f"decoded/{w}") if f"decoded/{w}" in names else None for w in wanted}
    if all(v is None for v in tables.values()):
        decoded = [n for n in names if n.startswith("decoded/")]
        hint = (f"it has {', '.join(decoded)}; name the sources with --send-source/--recv-source/--probe-source"
                if decoded else f"run 'nicrig decode {path}' first")
        raise UsageError(f"{path}: no decoded tables of {options.send_source}, {options.recv_source} or "
                         f"{options.probe_source}: {hint}")
    meta = {n: s.bus for n, s in cs.sources.items()}
    return report.capture_section(path.name, tables, meta, options)


def _results(path: Path, rf: Any, options: Any, cpu_runs: list) -> Any:
    from nicrig.analysis import cpu, report
    from nicrig.errors import UsageError

    settings = json.loads(rf.attrs.get("settings", "{}"))
    remote = json.loads(rf.attrs.get("remote", "{}"))
    loopback = remote.get("interface") == "lo" or settings.get("host") in ("127.0.0.1", "::1", "localhost")
    if rf.run_kind == "latency":
        return report.latency_section(path.name, rf.read_table("latency/rtt"), settings, options, loopback)
    if rf.run_kind == "stream":
        points = rf.read_table("stream/points")
        link = options.link_rate_bps if options.link_rate_bps else (None if loopback else 1e9)
        deltas = {p: c for p, h, w, c in rf.counters() if h == "remote" and w == "delta"}
        cpu_runs.append((path.name, cpu.receiver_runs(points, deltas)))
        return report.stream_section(path.name, points, settings, link)
    raise UsageError(f"{path}: a results file of unknown kind {rf.run_kind!r}")


def _progress(files: list[str]) -> Iterator[str]:
    """The files one by one, with a progress bar on a terminal (none when stderr is a pipe or file)."""
    if not sys.stderr.isatty():
        yield from files
        return
    from rich.progress import Progress

    with Progress(transient=True) as bar:
        task = bar.add_task("analysing", total=len(files))
        for name in files:
            bar.update(task, description=f"analysing {Path(name).name}")
            yield name
            bar.advance(task)


def build(args: argparse.Namespace) -> tuple[Any, int]:
    """The report for ``args.files``, and how many files could not be analysed."""
    from nicrig.analysis import report
    from nicrig.errors import NicrigError
    from nicrig.h5file import open_any

    options = _options(args)
    sections, problems, inputs, cpu_runs = [], [], [], []
    for name in _progress(args.files):
        path = Path(name)
        try:
            with open_any(path) as f:
                kind = f.FORMAT_NAME
                section = (_capture(path, f, options) if kind == "nicrig-capture-set"
                           else _results(path, f, options, cpu_runs))
        except NicrigError as exc:
            problems.append(str(exc))
            print(f"nicrig: error: {exc}", file=sys.stderr)
            continue
        except (KeyError, ValueError, OSError) as exc:
            problems.append(f"{path}: cannot be analysed: {exc}")
            print(f"nicrig: error: {path}: cannot be analysed: {exc}", file=sys.stderr)
            continue
        sections.append(section)
        inputs.append({"path": str(path), "kind": kind})
    if cpu_runs:
        sections.append(report.cpu_section(cpu_runs))
    if args.correlation:
        labels, columns = report.read_correlation_csv(args.correlation)
        sections.append(report.correlation_section(Path(args.correlation).name, labels, columns))
        inputs.append({"path": args.correlation, "kind": "correlation table"})
    sections.append(report.reference_section(options))
    return report.new_report(args.title, inputs, sections, problems), len(problems)


def _write(text: str, output: str) -> None:
    """Write ``text`` to ``output`` atomically (a temporary file renamed into place), or to stdout for '-'."""
    from nicrig.errors import UsageError

    if output == "-":
        sys.stdout.write(text)
        return
    out = Path(output)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{out}: folder {folder} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=folder)
    except OSError as exc:
        raise UsageError(f"{out}: cannot write in {folder}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def run(args: argparse.Namespace) -> int:
    from nicrig.analysis import report
    from nicrig.errors import UsageError

    fmt = args.format or {".json": "json", ".csv": "csv"}.get(Path(args.output).suffix.lower(), "html")
    rep, failed = build(args)
    if failed == len(args.files):
        raise UsageError("no file could be analysed")
    _write(report.RENDERERS[fmt](rep), args.output)
    if args.output != "-":
        print(f"wrote {args.output}: {len(rep.sections)} sections from {len(args.files) - failed} of "
              f"{len(args.files)} files", file=sys.stderr)
    return 1 if failed else 0
