"""``nicrig udpmon serve | latency | stream | suite | aggregate``: UDPmon-style measurements between hosts.

``serve`` runs the daemon on a far host. ``latency`` measures request-response
round trips against it for a range of response sizes (Hughes-Jones et al. 2003, §3.1);
``stream`` sends precisely spaced UDP streams to it for each size and spacing
and has it report what arrived (section 3.2); ``suite`` runs Pai, Rixner and Kim's (2004) ten
NIC microbenchmarks against one or two daemons; ``aggregate`` runs flows to or
from several daemons at once (Geist et al.'s (n.d.) N senders, Feng et al.'s (2003) aggregation).
Every command records host counters of every end, writes a results file
(``-o``), prints a human summary or, with ``--json``, the summary as JSON, and
with ``--sweep`` repeats itself for each value of interface settings
(:mod:`nicrig.udpmon.sweep`).
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import socket
import threading
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PORT = 14401
#: Rounds a run measures in by default (random order): latency, at most --count; stream.
LATENCY_ROUNDS, STREAM_ROUNDS = 10, 3


# -- argument helpers -----------------------------------------------------------------------------

def parse_range(text: str, what: str, *, integer: bool) -> list[float]:
    """``64:1472:8`` (start:stop:step, stop included), ``64,512,1000``, or a mix: ``0:10:1,20,40``."""
    from nicrig.errors import UsageError

    conv = int if integer else float
    out: list[float] = []
    for part in text.split(","):
        try:
            bits = [conv(b) for b in part.split(":")]
        except ValueError:
            raise UsageError(f"{what} {text!r}: {part!r} is not a number or start:stop:step") from None
        if len(bits) == 1:
            out.append(bits[0])
        elif len(bits) == 3 and bits[2] > 0 and bits[1] >= bits[0]:
            n = round((bits[1] - bits[0]) / bits[2])
            out += [bits[0] + i * bits[2] for i in range(n + 1) if bits[0] + i * bits[2] <= bits[1] + 1e-9]
        else:
            raise UsageError(f"{what} {part!r}: use start:stop:step with step > 0 and stop >= start")
    return sorted(set(out))


def parse_sizes(text: str) -> list[int]:
    """``--sizes``: UDP payload sizes (bytes), each 16 to 65507 so that the 16-byte header fits."""
    from nicrig.errors import UsageError

    sizes = [int(s) for s in parse_range(text, "--sizes", integer=True)]
    if not sizes or min(sizes) < 16 or max(sizes) > 65507:
        raise UsageError(f"--sizes {text!r}: UDP payloads are 16 to 65507 bytes (the 16-byte header must fit)")
    return sizes


def parse_spacings(text: str) -> list[float]:
    """``--spacing-us``: transmit spacings (us), none negative."""
    from nicrig.errors import UsageError

    spacings = parse_range(text, "--spacing-us", integer=False)
    if min(spacings) < 0 or not all(math.isfinite(v) for v in spacings):
        raise UsageError(f"--spacing-us {text!r}: spacings are zero or positive microseconds")
    return spacings


def parse_host(text: str, default_port: int) -> tuple[str, int]:
    """``HOST``, ``HOST:PORT``, ``[V6ADDR]:PORT`` or a bare IPv6 address -> (host, port)."""
    from nicrig.errors import UsageError

    host, port = text, default_port
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise UsageError(f"host {text!r}: use [IPv6]:PORT")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        port_text = ""
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise UsageError(f"host {text!r}: {port_text!r} is not a port (1..65535)")
        port = int(port_text)
    if not host:
        raise UsageError(f"host {text!r}: no host name or address")
    return host, port


def _connection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, default=DEFAULT_PORT,
                   help=f"the daemons' control port, where HOST gives none (default {DEFAULT_PORT})")
    p.add_argument("--secret-file", type=Path,
                   help="shared secret (the daemons' --secret-file); without it only a loopback daemon answers")
    p.add_argument("--interface", help="local interface whose counters to record and settings to sweep "
                                       "(default: the route to the (first) far host)")
    p.add_argument("-o", "--output", type=Path, help="results file to write (.h5)")
    p.add_argument("--force", action="store_true", help="replace the results file if it exists (it is not "
                                                        "replaced without)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--seed", type=int, default=1, help="seed of the random payloads")
    p.add_argument("--sweep", action="append", default=[], metavar="[HOSTS:]SETTING=V1,V2,...",
                   help="repeat the run for each value: mtu (ip link) or an ethtool -C parameter such as rx-usecs; "
                        "HOSTS is local, remote, all (default) or a host label; repeat for combinations")
    p.add_argument("--trace-host", nargs="?", const="all", choices=("all", "local"), metavar="WHERE",
                   help="record the hosts' kernel trace events during the run (interrupts, softirqs, NAPI polls, "
                        "device transmit/receive, drops, the engines' system calls) into host_trace/: on this host "
                        "and, with 'all' (the default), on every daemon started with --allow-trace; needs root "
                        "(docs/host-probe.md)")
    p.add_argument("--dry-run", action="store_true",
                   help="check the sweep's settings on every host, print the plan, change and send nothing")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", help="address of the host running 'nicrig udpmon serve' (HOST or HOST:PORT)")
    _connection(p)
    p.add_argument("--remote-interface", help="the far host's interface (default: the one its daemon reports)")
    p.add_argument("--mtu", type=int, default=1500, help="MTU for frame counts per message (default 1500; "
                                                         "in an mtu sweep, each step's)")
    p.add_argument("--udp-port", type=int, default=0,
                   help="UDP port the far host uses for the test (default: one its kernel picks; set it for firewalls)")
    p.add_argument("--capture", nargs="?", const="", metavar="IFACE",
                   help="record the frames on IFACE (default: the interface toward the far host) during the run into "
                        "the results file's wire source wire/IFACE: a packet socket with the kernel's time stamps, and "
                        "the NIC's where it stamps received frames; needs root and -o (docs/udpmon.md)")
    add_order_arguments(p)


def add_order_arguments(p: argparse.ArgumentParser) -> None:
    """``--order`` and ``--order-seed``: how rounds visit the sizes (and spacings); ``nicrig simulate`` has them
    too."""
    p.add_argument("--order", choices=("random", "ascending"), default="random",
                   help="random: every round visits the sizes (and spacings) in a fresh random order, so drift of "
                        "the hosts cannot pass for a dependence on size (default); ascending: UDPmon's sweep, "
                        "smallest first, one round unless --rounds says otherwise")
    p.add_argument("--order-seed", type=int, default=None,
                   help="seed of the random order (default: a fresh one; it is recorded in the results)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from nicrig.udpmon.suite import TEST_NAMES

    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="run the daemon the other actions measure against (on each far host)")
    from nicrig.udpmon.daemon import add_serve_arguments

    add_serve_arguments(serve)
    lat = sub.add_parser("latency", help="request-response round trips vs response size")
    _common(lat)
    lat.add_argument("--sizes", default="64:1472:8", help="response sizes, start:stop:step or a list (bytes)")
    lat.add_argument("--count", type=int, default=1000,
                     help="round trips per size, shared out over the rounds (default 1000)")
    lat.add_argument("--rounds", type=int, default=None,
                     help="rounds, each measuring every size once (default 10, at most --count; 1 with --order "
                          "ascending)")
    lat.add_argument("--request-size", type=int, default=64, help="request payload bytes (default 64)")
    lat.add_argument("--busy-poll", action="store_true", help="spin on a non-blocking receive instead of blocking")
    lat.add_argument("--timeout-ms", type=float, default=1000,
                     help="give up on a response after this long (default 1000)")
    lat.add_argument("--gap-us", type=float, default=0, help="pause between round trips (default 0)")
    lat.add_argument("--bin-us", type=float, default=1.0, help="histogram bin width (default 1 us)")
    st = sub.add_parser("stream", help="precisely spaced UDP streams: loss, order, spacing, rates, counters")
    _common(st)
    st.add_argument("--sizes", default="1472", help="payload sizes, list or start:stop:step (bytes)")
    st.add_argument("--spacing-us", default="20", help="transmit spacings, list or start:stop:step (us)")
    st.add_argument("--count", type=int, default=10000, help="packets per stream (default 10000)")
    st.add_argument("--rounds", type=int, default=None,
                    help="rounds, each sending one stream of every size and spacing (default 3; 1 with --order "
                         "ascending)")
    st.add_argument("--wire-overhead", type=int, default=66,
                    help="framing bytes per packet for the wire rate: 66 = preamble+SFD 8, gap 12, Ethernet 18, "
                         "IPv4+UDP 28 (Hughes-Jones et al. 2003 used 60)")
    st.add_argument("--idle-timeout-ms", type=float, default=500,
                    help="the receiver stops this long after the last packet (default 500)")
    st.add_argument("--hw-timestamps", action="store_true", help="ask for NIC hardware receive timestamps")
    st.add_argument("--bin-us", type=float, default=1.0, help="spacing histogram bin width (default 1 us)")
    su = sub.add_parser("suite", help="Pai, Rixner and Kim 2004's ten NIC microbenchmarks, each searched for its highest "
                                      "loss-free rate, against the theoretical maxima")
    su.add_argument("--peer", required=True, help="the daemon this host sends to, receives from and connects with "
                                                  "(HOST or HOST:PORT)")
    su.add_argument("--third", help="a second daemon: the 3-way tests receive from it while sending to --peer")
    _connection(su)
    su.add_argument("--tests", default=",".join(TEST_NAMES),
                    help=f"tests to run, comma separated (default all: {','.join(TEST_NAMES)})")
    su.add_argument("--link-mbps", type=float,
                    help="link rate for the theoretical maxima (default: the interface's speed, 1000 when it "
                         "states none)")
    su.add_argument("--mtu", type=int, default=1500, help="MTU the TCP maximum assumes (default 1500; in an mtu "
                                                          "sweep, each step's)")
    su.add_argument("--trial-s", type=float, default=1.0, help="seconds per trial (default 1)")
    su.add_argument("--max-trials", type=int, default=8, help="most trials per rate search (default 8)")
    su.add_argument("--tolerance", type=float, default=0.02,
                    help="a search ends when loss-free and lossy rates are this close, relative (default 0.02)")
    su.add_argument("--connections", default="1,2,4,8",
                    help="TCP connection counts the send and receive tests try (default 1,2,4,8)")
    su.add_argument("--connection-rate-start", type=float, default=2000,
                    help="connections/s the connection tests start their search at (default 2000)")
    ag = sub.add_parser("aggregate", help="flows between this host and several daemons at once: N-to-1 "
                                          "(--direction in) or 1-to-N (out), per-flow and aggregate results")
    ag.add_argument("hosts", nargs="+", help="the daemons (HOST or HOST:PORT), labelled r1, r2, ... in the results")
    _connection(ag)
    ag.add_argument("--direction", choices=("in", "out"), default="in",
                    help="in: every daemon sends to this host (default); out: this host sends to every daemon")
    ag.add_argument("--protocol", choices=("udp", "tcp"), default="udp", help="UDP streams or bulk TCP (default udp)")
    ag.add_argument("--size", type=int, default=1472, help="UDP payload bytes (default 1472)")
    ag.add_argument("--spacing-us", type=float, default=20, help="UDP transmit spacing per flow (default 20)")
    ag.add_argument("--count", type=int, default=10000, help="UDP datagrams per flow (default 10000)")
    ag.add_argument("--connections", type=int, default=1, help="TCP connections per daemon (default 1)")
    ag.add_argument("--duration-s", type=float, default=2.0, help="TCP transfer time (default 2)")


# -- shared run machinery ---------------------------------------------------------------------------

class Run:
    """One measurement run: a session with each daemon, counters of every end, and the results file.

    ``hosts`` are (label, host, port): ``remote`` for latency and stream,
    ``peer``/``third`` for the suite, ``r1``... for aggregates. The first is
    the one latency and stream talk to, and the one this host's interface is
    found toward.
    """

    def __init__(self, args: argparse.Namespace, kind: str, hosts: list[tuple[str, str, int]], *,
                 write: bool = True):
        import numpy as np
        from nicrig.udpmon.client import Controller
        from nicrig.udpmon.counters import egress_interface
        from nicrig.udpmon.flows import Remote
        from nicrig.udpmon.protocol import load_secret
        from nicrig.progress import Progress

        self.args, self.kind = args, kind
        self.stack = ExitStack()
        self.progress = self.stack.enter_context(Progress())
        self.prefix = ""  # where this step's tables go: "" or "sweep/step<k>/"
        self.counter_rows: list[tuple[int, str, str, dict[str, Any]]] = []
        self.load_rows: list[tuple[int, str, float, dict[str, Any]]] = []
        self.points = 0
        self.results = None
        self.remotes: list[Remote] = []
        seed = getattr(args, "order_seed", None)
        self.order_rng = np.random.default_rng(seed) if seed is not None else None
        try:
            if args.output and write:  # first: an unwritable output fails before any traffic
                from nicrig.udpmon.results import ResultsFile

                self.results = self.stack.enter_context(ResultsFile.create(args.output, overwrite=args.force))
            secret = load_secret(args.secret_file) if args.secret_file else None
            for label, host, port in hosts:
                ctl = self.stack.enter_context(Controller(host, port, secret))
                # the daemon's tests use the address this connection reached
                family, address = ctl.peer
                given = getattr(args, "remote_interface", None) if not self.remotes else None
                self.remotes.append(Remote(label=label, host=host, port=port, ctl=ctl, family=family,
                                           address=address, local_ip=ctl.local_address,
                                           interface=given or ctl.status().get("interface"), limits=ctl.limits()))
            self.local_if = args.interface or egress_interface(self.remotes[0].address)
        except BaseException:
            self.close(failed=True)
            raise
        self.local_trace: Any = None
        self.traced_remotes: list[Any] = []
        self.tap: Any = None

    def start_capture(self) -> None:
        """Start recording the wire (``--capture``) before any traffic; a packet socket refused (not root) ends the
        run here."""
        from nicrig.udpmon.wiretap import WireTap

        from nicrig.errors import UsageError

        interface = getattr(self.args, "capture", None)
        if interface is None:
            return
        if self.results is None:
            raise UsageError("--capture records into the results file: give -o FILE.h5")
        self.tap = self.stack.enter_context(WireTap(interface or self.local_if))

    def finish_capture(self) -> None:
        """Stop recording the wire and store the frames as the results file's wire source."""
        import sys

        if self.tap is None:
            return
        recorded = self.tap.stop()
        self.tap = None
        offset = self.remotes[0].ctl.clock_offset()
        recorded.far_clock = {"offset_ns": offset.offset_ns, "uncertainty_ns": offset.uncertainty_ns,
                              "host": self.remotes[0].label}
        if self.results is not None:
            from nicrig.acquisition.wire import WireSource
            from nicrig.decoders import wire_frames
            from nicrig.decoders.tables import units_of

            recorded.write(self.results, recorded.interface)
            # decoded now, as the host probe's events are: a results file is written once
            table, _ = wire_frames.ethernet_table(WireSource(self.results, recorded.interface))
            self.results.write_table(f"decoded/{recorded.interface}/ethernet", table, units=units_of(table.dtype.names),
                                     description=f"ethernet decoder records for wire source {recorded.interface}",
                                     attrs=wire_frames.table_attrs())
        print(f"nicrig: recorded {recorded.frames:,} frames on {recorded.interface} into wire/{recorded.interface}"
              + (f" ({recorded.drops:,} more dropped by the capture socket)" if recorded.drops else ""),
              file=sys.stderr)

    def start_traces(self) -> None:
        """Start recording kernel events on this host (the engine runs in this process's threads) and, when asked,
        on every daemon; a daemon that may not trace refuses with its reason, before any traffic."""
        from nicrig.acquisition.hostprobe import events as hp
        from nicrig.acquisition.hostprobe.recorder import RecordSpec, process_threads

        where = getattr(self.args, "trace_host", None)
        if where is None:
            return
        self.local_trace = self.stack.enter_context(hp.HostCapture("local", RecordSpec(pids=tuple(process_threads()))))
        if where == "all":
            for r in self.remotes:
                r.ctl.start_trace(duration_s=float(r.limits.get("max_duration_s", 600.0)))
                self.traced_remotes.append(r)

    def finish_traces(self) -> None:
        """Stop every recording, put each far host's clock on this one's, and store the traces."""
        from nicrig.acquisition.hostprobe import events as hp
        from nicrig.acquisition.hostprobe.recorder import RecordSummary
        from nicrig.udpmon.clocksync import estimate_offset

        if self.local_trace is None:
            return
        traces = [self.local_trace.finish()]
        for r in self.traced_remotes:
            reply, arrays = r.ctl.stop_trace()
            offset = estimate_offset(*r.ctl.clock_exchanges())
            raw = hp.RawTrace(summary=RecordSummary(**{**reply["summary"], "stats": {
                int(k): v for k, v in reply["summary"]["stats"].items()}}), header_page=reply["header_page"],
                formats=reply["formats"], raw=arrays["raw"], raw_cpu=arrays["raw_cpu"], pids=reply["pids"],
                hostname=reply["hostname"])
            trace = raw.decode(r.label)
            trace.clock_offset_ns, trace.clock_offset_uncertainty_ns = offset.offset_ns, offset.uncertainty_ns
            trace.clock_reference = "local"
            traces.append(trace)
        self.traced_remotes = []
        if self.results is not None:
            for trace in traces:
                hp.write(self.results, trace)

    # the first daemon: the one latency and stream measure against
    @property
    def ctl(self) -> Any:
        return self.remotes[0].ctl

    @property
    def family(self) -> int:
        return self.remotes[0].family

    @property
    def address(self) -> str:
        return self.remotes[0].address

    @property
    def limits(self) -> dict[str, Any]:
        return self.remotes[0].limits

    def remote(self, label: str) -> Any:
        return next((r for r in self.remotes if r.label == label), None)

    def udp_socket(self) -> Any:
        """Our UDP socket for a test, bound first so the far end can accept this source port only."""
        from nicrig.udpmon import engine

        return engine.open_udp(bind=("::" if self.family == socket.AF_INET6 else "0.0.0.0", 0), family=self.family)

    def next_point(self) -> int:
        self.points += 1
        return self.points - 1

    def snapshot(self, labels: list[str] | None = None) -> dict[str, dict[str, Any]]:
        """Counters of this host (``local``) and of the daemons named (default: all)."""
        from nicrig.udpmon import counters

        out = {"local": counters.snapshot(self.local_if)}
        for r in self.remotes:
            if labels is None or r.label in labels:
                out[r.label] = (r.ctl.counters(r.interface) if r.interface else
                                {"unavailable": "the far host named no interface toward us (no 'ip' command "
                                                "there?); give --remote-interface"})
        return out

    def record_counters(self, point: int, before: dict[str, dict], after: dict[str, dict],
                        throughput_mbps: float = math.nan) -> dict[str, Any]:
        """Keep raw before/after snapshots of every host and return their deltas (and their CPU-model inputs)."""
        from nicrig.udpmon import counters

        out = {}
        for host, b in before.items():
            a = after[host]
            d = counters.delta(b, a) if "unavailable" not in b and "unavailable" not in a else \
                {"unavailable": b.get("unavailable") or a.get("unavailable")}
            self.counter_rows += [(point, host, "before", b), (point, host, "after", a), (point, host, "delta", d)]
            self.load_rows.append((point, host, throughput_mbps, counters.load_figures(d)))
            out[host] = d
        return out

    def set_throughput(self, point: int, mbps: float) -> None:
        """The throughput of ``point``, kept beside its CPU-model inputs (known only after the counters)."""
        self.load_rows = [(p, h, mbps if p == point else t, f) for p, h, t, f in self.load_rows]

    def write_step(self) -> None:
        """This step's counters and CPU-model inputs, under :attr:`prefix`; the next step counts points from 0."""
        if self.results is not None:
            from nicrig.udpmon.results import load_table

            self.results.write_counters(self.counter_rows, prefix=self.prefix)
            self.results.write_table(f"{self.prefix}load", load_table(self.load_rows),
                                     description="per point and host: CPU time, interface megabytes, kilo-packets "
                                                 "and kilo-interrupts (the CPU model of Geist et al. n.d.), and the throughput")
        self.counter_rows, self.load_rows, self.points = [], [], 0

    def finish(self, settings: dict[str, Any]) -> None:
        self.finish_traces()
        self.finish_capture()
        if self.results is not None:
            from nicrig.udpmon.results import hosts_table

            first = self.remotes[0]
            self.results.set_run(self.kind, peer=f"{first.host}:{first.port}", argv=["nicrig", *self.args._argv],
                                 settings=settings, remote={"interface": first.interface, **first.limits})
            self.results.write_table("hosts", hosts_table(self.local_if, self.remotes),
                                     description="every host of the run: this one (local) and each daemon")

    def close(self, failed: bool) -> None:
        if failed and self.results is not None:
            self.results.abandon()
        self.stack.close()


def _busy(delta: dict[str, Any]) -> float:
    try:
        return float(delta["cpu"]["total"]["busy_percent"])
    except (KeyError, TypeError):
        return float("nan")


def _interrupts(delta: dict[str, Any]) -> int:
    """Interrupts of the interface's lines, or of all lines when the interface has none of its own."""
    try:
        itf = delta["interrupts"]["interface"]
        if "lines" in itf:
            return int(sum(line["total"] for line in itf["lines"].values()))
        return int(delta["interrupts"]["all"]["total"])
    except (KeyError, TypeError):
        return -1


def _settings(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """The run's options for the results file (never the secret file's path, the output nor whether it replaced
    one)."""
    out = {k: v for k, v in vars(args).items()
           if not k.startswith("_") and k not in ("secret_file", "output", "force")}
    out.update(extra)
    return out


# -- the sweep driver ------------------------------------------------------------------------------

@dataclass
class Kind:
    """What one command does inside :func:`_execute`.

    ``body(run, step)`` measures once (writing its tables under
    ``run.prefix``) and returns its result; ``table(result)`` is its summary
    table (stacked into ``sweep/<kind>`` across steps); ``show(result)`` its
    human lines; ``to_json(result)`` its JSON; ``failed(result)`` whether it
    got nothing at all (exit code 1); ``describe()`` what one run does, for
    ``--dry-run``.
    """

    name: str
    hosts: list[tuple[str, str, int]]
    body: Callable[[Run, dict[str, Any] | None], Any]
    table: Callable[[Any], Any]
    show: Callable[[Any], list[str]]
    to_json: Callable[[Any], Any]
    failed: Callable[[Any], bool]
    describe: Callable[[], list[str]]
    settings: Callable[[], dict[str, Any]]


def _execute(args: argparse.Namespace, kind: Kind) -> int:
    """Run ``kind`` once, or once per sweep step with the settings put back afterwards; print; exit code."""
    from nicrig.udpmon import sweep as W

    plan = W.Plan(tuple(W.parse_spec(t) for t in args.sweep)) if args.sweep else None
    run = Run(args, kind.name, kind.hosts, write=not args.dry_run)
    failed = True
    results: list[tuple[dict[str, Any] | None, Any]] = []
    try:
        sweeper = W.Sweeper(plan, run.local_if, run.remotes) if plan else None
        if args.dry_run:
            if sweeper is not None:
                current = sweeper.check()
                print("\n".join(sweeper.describe(current)))
            print("\n".join(f"{'each step' if plan else 'the run'}: {line}" for line in kind.describe()))
            failed = False
            return 0
        run.start_traces()
        run.start_capture()
        if sweeper is None:
            results.append((None, kind.body(run, None)))
            run.write_step()
        else:
            current = sweeper.check()
            for line in sweeper.restore_commands(current):
                W.note(f"if this run dies without restoring them, put this host's settings back with: {line}")
            _sweep(run, kind, plan, sweeper, results)
        run.finish(kind.settings())
        failed = False
    finally:
        run.close(failed)
    _print(args, kind, results)
    return 1 if any(kind.failed(r) for _, r in results) else 0


def _sweep(run: Run, kind: Kind, plan: Any, sweeper: Any, results: list[tuple[dict[str, Any] | None, Any]]) -> None:
    """Every step of ``plan``: apply, measure under ``sweep/step<k>/``, and put every setting back at the end."""
    import numpy as np
    from nicrig.interrupts import signals_interrupt
    from nicrig.udpmon import sweep as W

    progress = run.progress.task("udpmon sweep", len(plan.steps), "steps")
    with signals_interrupt():
        try:
            for i, step in enumerate(plan.steps):
                W.note(f"sweep step {i}: {W.step_label(step)}")
                sweeper.apply(i, step)
                run.prefix = f"sweep/step{i}/"
                results.append((step, kind.body(run, step)))
                run.write_step()
                progress(i + 1)
        except BaseException:
            _restore(sweeper, failing=True)
            raise
        _restore(sweeper, failing=False)
    run.prefix = ""
    if run.results is not None:
        run.results.write_table("sweep/steps", W.steps_table(plan),
                                description="one row per step: the value of each swept setting")
        run.results.write_table("sweep/applied", W.applied_table(sweeper.applied),
                                description="per step and host: each setting before the step and as read back after")
        parts = [W.with_step(i, kind.table(r)) for i, (_, r) in enumerate(results)]
        run.results.write_table(f"sweep/{kind.name}", np.concatenate(parts),
                                description=f"the {kind.name} summary of every step, with its step number")


def _restore(sweeper: Any, *, failing: bool) -> None:
    """Put every host back. When the run is failing anyway, a host that will not go back is reported, not raised."""
    from nicrig.udpmon import sweep as W
    from nicrig.udpmon.ifsettings import SettingRefused

    try:
        for line in sweeper.restore():
            W.note(f"restored {line}")
    except SettingRefused as exc:
        if not failing:
            raise
        W.note(f"error: {exc}")


def _print(args: argparse.Namespace, kind: Kind, results: list[tuple[dict[str, Any] | None, Any]]) -> None:
    from nicrig.udpmon import sweep as W

    out = str(args.output) if args.output else None
    if args.json:
        if len(results) == 1 and results[0][0] is None:
            doc = {**kind.to_json(results[0][1]), "output": out}
        else:
            doc = {"steps": [{"step": i, "settings": step, "result": kind.to_json(r)}
                             for i, (step, r) in enumerate(results)], "output": out}
        print(json.dumps(_finite(doc), indent=2))
        return
    for i, (step, r) in enumerate(results):
        if step is not None:
            print(f"== sweep step {i}: {W.step_label(step)}")
        print("\n".join(kind.show(r)))
    if out:
        print(f"wrote {out}")


# -- latency -------------------------------------------------------------------------------------

def settle_rounds(args: argparse.Namespace, default: int, most: int | None = None) -> None:
    """Settle ``--rounds`` (its default depends on ``--order``) and the order's seed, both then recorded."""
    from nicrig.udpmon import schedule

    from nicrig.errors import UsageError

    if args.rounds is None:
        args.rounds = 1 if args.order == "ascending" else min(default, most) if most is not None else default
    if args.rounds < 1 or (most is not None and args.rounds > most):
        limit = f" and at most --count ({most})" if most is not None else ""
        raise UsageError(f"--rounds must be at least 1{limit}, got {args.rounds}")
    if args.order_seed is None:
        args.order_seed = schedule.new_seed()


def _latency_kind(args: argparse.Namespace) -> Kind:
    from nicrig.udpmon.payload import REQUEST_MIN_BYTES

    from nicrig.errors import UsageError

    sizes = parse_sizes(args.sizes)
    if args.count < 1 or not REQUEST_MIN_BYTES <= args.request_size <= 65507:
        raise UsageError(f"--count must be positive and --request-size {REQUEST_MIN_BYTES} to 65507 bytes "
                         "(the header and the requested response size must fit)")
    settle_rounds(args, LATENCY_ROUNDS, most=args.count)
    return Kind(
        name="latency", hosts=[("remote", *parse_host(args.host, args.port))],
        body=lambda run, step: _latency_body(run, args, sizes, int((step or {}).get("mtu", args.mtu))),
        table=lambda r: r["table"], show=_latency_lines, to_json=lambda r: {k: v for k, v in r.items() if k != "table"},
        failed=lambda r: any(s["count"] == 0 for s in r["sizes"]),
        describe=lambda: [(f"latency: {len(sizes)} response size(s) from {sizes[0]} to {sizes[-1]} bytes, "
                          f"{args.count} round trips each over {args.rounds} round(s) in {args.order} order")],
        settings=lambda: _settings(args, sizes=sizes))


def _loopback(run: Run) -> bool:
    """Whether the far end is this host's loopback (no NIC, bus or wire on the path)."""
    import ipaddress

    return run.local_if == "lo" or ipaddress.ip_address(run.address.split("%")[0]).is_loopback


def _latency_body(run: Run, args: argparse.Namespace, sizes: list[int], mtu: int) -> dict[str, Any]:
    """Every size in every round against the first daemon; the tables under ``run.prefix``; the summary."""
    from nicrig.analysis import latency
    from nicrig.udpmon import engine, schedule
    from nicrig.udpmon.results import LatencyVisit, measured_latency, sizes_table, write_latency

    plan = schedule.plan(len(sizes), args.rounds, args.order, run.order_rng)
    counts = schedule.split(args.count, args.rounds)
    gap_ns = int(args.gap_us * 1000)
    visits: list[LatencyVisit] = []
    before = run.snapshot()
    progress = run.progress.task("udpmon latency", len(plan), "visits (a size in a round)")
    rate_cap = int(run.limits.get("max_rate_pps", 200_000))
    far_end = run.remotes[0]
    # how each end waits for datagrams (spin or sleep; socket busy polling granted): recorded with the results
    wait: dict[str, dict[str, Any]] = {"local": {"busy_poll": bool(args.busy_poll)}, "remote": {}}
    for i, v in enumerate(plan):
        size, count = sizes[v.item], counts[v.round]
        test_id = secrets.randbits(32)
        with run.udp_socket() as sock:
            if args.busy_poll:
                wait["local"]["socket"] = engine.socket_busy_poll(sock)
            udp_port = run.ctl.start_responder(
                test_id=test_id, max_response_bytes=size, max_rate_pps=rate_cap, udp_port=args.udp_port,
                peer_udp_port=sock.getsockname()[1], busy_poll=args.busy_poll,
                duration_s=far_end.duration_s(count * (args.timeout_ms + args.gap_us / 1000) / 1000))
            sock.connect((run.address, udp_port))
            local_port = sock.getsockname()[1]
            start = engine.monotonic_ns()
            lat = engine.request_response(sock, count=count, request_bytes=args.request_size,
                                          response_bytes=size, test_id=test_id,
                                          timeout_ns=int(args.timeout_ms * 1e6), busy_poll=args.busy_poll,
                                          gap_ns=gap_ns, seed=args.seed + i)
            end = engine.monotonic_ns()
        remote, _ = run.ctl.stop()
        far = remote.get("engine", {})
        wait["remote"] = remote.get("wait", {"busy_poll": False})
        visits.append(LatencyVisit(
            round=v.round, position=v.position, size_bytes=size, start_ns=start, end_ns=end, rtt_ns=lat.rtt_ns,
            timeouts=lat.timeouts, stale=lat.stale, foreign=lat.foreign, errors=lat.errors,
            far_answered=far.get("answered", -1), far_refused_peer=far.get("refused_peer", -1),
            far_refused_invalid=far.get("refused_invalid", -1), far_refused_rate=far.get("refused_rate", -1),
            local_port=local_port, remote_port=udp_port, sent_ns=lat.sent_ns))
        progress(i + 1)
    deltas = run.record_counters(run.next_point(), before, run.snapshot())
    if run.results is not None:
        est = write_latency(run.results, visits, mtu=mtu, bin_us=args.bin_us, gap_ns=gap_ns, prefix=run.prefix,
                            wait=wait)
    else:
        est = measured_latency(visits, mtu, gap_ns)[2]
    return {
        **latency_summary(est),
        "order": est.order, "order_seed": args.order_seed, "wait": wait,
        "readings": latency.readings(est, loopback=_loopback(run)),
        "cpu_busy_percent": {"local": _busy(deltas["local"]), "remote": _busy(deltas["remote"])},
        "table": sizes_table(est),
    }


def latency_summary(est: Any) -> dict[str, Any]:
    """The JSON summary of a latency estimate: per size, the lines per statistic, the modes, how and why."""
    from nicrig.udpmon.results import STATISTIC_KEYS

    sizes = []
    for k, size in enumerate(est.sizes):
        st = est.stats[int(size)]
        sizes.append({"size_bytes": int(size), "frames": int(est.frames[k]), "count": st.count,
                      "timeouts": st.timeouts, "min_us": st.min_us, "median_us": st.median_us,
                      "median_ci95_us": st.median_ci95_us, "mean_us": st.mean_us, "mean_ci95_us": st.mean_ci95_us,
                      "max_us": st.max_us, "p99_us": st.percentiles_us[99], "p99_ci95_us": st.p99_ci95_us,
                      "fwhm_us": st.fwhm_us, "fwhm_ci95_us": st.fwhm_ci95_us,
                      **{f"round_{key}_us": float(est.values[stat][k]) for stat, key in STATISTIC_KEYS.items()
                         if stat in est.values},
                      **{f"round_{key}_ci95_us": float(est.values_ci95[stat][k])
                         for stat, key in STATISTIC_KEYS.items() if stat in est.values},
                      "suspect": [stat for stat in est.suspect if est.suspect[stat][k]]})
    return {"sizes": sizes, "step_us": est.step_us, "rounds": est.rounds, "statistic": est.statistic,
            "reason": est.reason, "interval": est.interval_method,
            "modes": [vars(m) for m in est.modes],
            **{f"fit_{key}": [vars(f) for f in est.fits.get(stat, [])] for stat, key in STATISTIC_KEYS.items()}}


def _latency_lines(summary: dict[str, Any]) -> list[str]:
    """The latency table: each statistic with its 95% half-width, which includes the time stamps' resolution (the
    minimum and maximum, observed values, that alone), neither finer than that resolution."""
    from nicrig.analysis.quantity import K95, measured, number, rectangular, setting
    from nicrig.udpmon.results import STATISTIC_KEYS

    key = STATISTIC_KEYS[summary["statistic"]]
    step = summary["step_us"]
    read = K95 * rectangular(step)

    def cell(v: float, ci95: float) -> str:
        return measured(v, ci95, step=step)

    lines = [(f"{'size':>6} {'frames':>6} {'count':>6} {'lost':>5} {'min':>18} {'median':>18} {'mean':>18} "
              f"{'p99':>18} {'max':>18} {'fwhm':>15} {summary['statistic'] + ' per round':>22}")]
    unbounded = False
    for r in summary["sizes"]:
        flag = " suspect" if summary["statistic"] in r["suspect"] else ""
        unbounded |= r["count"] > 0 and not r["p99_ci95_us"] > 0
        lines.append(f"{r['size_bytes']:>6} {r['frames']:>6} {r['count']:>6} {r['timeouts']:>5} "
                     f"{cell(r['min_us'], read):>18} {cell(r['median_us'], r['median_ci95_us']):>18} "
                     f"{cell(r['mean_us'], r['mean_ci95_us']):>18} "
                     f"{cell(r['p99_us'], r['p99_ci95_us']) if r['p99_ci95_us'] > 0 else '–':>18} "
                     f"{cell(r['max_us'], read):>18} {cell(r['fwhm_us'], r['fwhm_ci95_us']):>15} "
                     f"{cell(r[f'round_{key}_us'], r[f'round_{key}_ci95_us']):>22}{flag}")
    lines.append(f"times in us ± 95%, each including the {setting(step * 1000)} ns resolution of the time stamps "
                 "(min and max, as observed: that alone)")
    if unbounded:
        lines.append("p99 –: too few round trips at that size to bound the 99th percentile from both sides "
                     "at 95%")
    for stat, k in STATISTIC_KEYS.items():
        for f in summary.get(f"fit_{k}", []):
            lines.append(f"fit on the {stat}, {f['frames']} frame(s), {f['points']} sizes, {f['rounds']} round(s): "
                         f"slope {measured(f['slope_us_per_byte'], f['slope_ci95'], 'us/byte')}, intercept "
                         f"{measured(f['intercept_us'], f['intercept_ci95'], 'us')}, "
                         f"R² {number(f['r_squared'], decimals=3)}")
    return lines + summary["readings"]


# -- stream --------------------------------------------------------------------------------------

def _stream_point(run: Run, point: int, visit: Any, size: int, spacing_us: float, args: argparse.Namespace) -> Any:
    """One stream against the first daemon, between counter snapshots: its raw rows and the hosts' figures."""
    import numpy as np
    from nicrig.udpmon import engine
    from nicrig.udpmon.results import StreamPoint

    test_id = secrets.randbits(32)
    before = run.snapshot()
    spacing_ns = int(spacing_us * 1000)
    with run.udp_socket() as sock:
        udp_port = run.ctl.start_receiver(test_id=test_id, max_packets=args.count, udp_port=args.udp_port,
                                          idle_timeout_ms=int(args.idle_timeout_ms), hw_timestamps=args.hw_timestamps,
                                          peer_udp_port=sock.getsockname()[1],
                                          duration_s=run.remotes[0].duration_s(args.count * spacing_us / 1e6 * 2 + 5))
        sock.connect((run.address, udp_port))
        local_port = sock.getsockname()[1]
        t0 = engine.monotonic_ns() + 2_000_000  # the schedule: packet i is due at t0 + i * spacing
        sent_ns = engine.send_paced(sock, count=args.count, size_bytes=size, spacing_ns=spacing_ns,
                                    test_id=test_id, seed=args.seed + point, start_ns=t0)
    run.remotes[0].wait_finished(args.idle_timeout_ms / 1000 + 5)
    remote, arrays = run.ctl.stop()
    engine_stats = remote.get("engine", {})
    deltas = run.record_counters(point, before, run.snapshot())
    seq = arrays.get("seq", np.zeros(0, np.uint32)).astype(np.int64)
    return StreamPoint(
        point=point, round=visit.round, position=visit.position, size_bytes=size, spacing_us=spacing_us,
        count=args.count, t0_ns=t0, sent_ns=sent_ns, seq=seq,
        kernel_ns=arrays.get("kernel_ns", np.full(seq.size, -1, np.int64)), user_ns=arrays.get("user_ns"),
        hw_ns=arrays.get("hw_ns"), received_size=arrays.get("size"),
        foreign=int(engine_stats.get("foreign", 0)), kernel_drops=int(engine_stats.get("kernel_drops", -1)),
        rxq_ovfl=int(engine_stats.get("rxq_ovfl", -1)),
        local_cpu_busy_pct=_busy(deltas["local"]), remote_cpu_busy_pct=_busy(deltas["remote"]),
        local_interrupts=_interrupts(deltas["local"]), remote_interrupts=_interrupts(deltas["remote"]),
        send_thread=threading.get_native_id(), recv_thread=int(engine_stats.get("thread_id", -1)),
        local_port=local_port, remote_port=udp_port)


def _stream_kind(args: argparse.Namespace) -> Kind:
    from nicrig.errors import UsageError

    sizes = parse_sizes(args.sizes)
    spacings = parse_spacings(args.spacing_us)
    if args.count < 2:
        raise UsageError("--count must be at least 2")
    settle_rounds(args, STREAM_ROUNDS)
    points = [(size, sp) for size in sizes for sp in spacings]
    return Kind(
        name="stream", hosts=[("remote", *parse_host(args.host, args.port))],
        body=lambda run, step: _stream_body(run, args, points, int((step or {}).get("mtu", args.mtu))),
        table=_points, show=_stream_lines, to_json=lambda rows: {"points": rows},
        failed=lambda rows: any(r["received"] == 0 for r in rows),
        describe=lambda: [(f"stream: {len(points)} point(s) ({len(sizes)} size(s) x {len(spacings)} spacing(s)) "
                          f"in each of {args.rounds} round(s), {args.order} order, {args.count} datagrams each")],
        settings=lambda: _settings(args, sizes=sizes, spacings_us=spacings))


def _points(rows: list[dict[str, Any]]) -> Any:
    from nicrig.udpmon.results import points_table

    return points_table(rows)


def _stream_link_bps(run: Run) -> float | None:
    """The local interface's link rate (bit/s) the receive rates are held to; None when it states none."""
    from nicrig.udpmon.counters import link_speed_mbps

    speed = link_speed_mbps(run.local_if) if run.local_if else None
    return speed * 1e6 if speed else None


def _stream_body(run: Run, args: argparse.Namespace, points: list[tuple[int, float]], mtu: int
                 ) -> list[dict[str, Any]]:
    """Every (size, spacing) point in every round against the first daemon; the tables under ``run.prefix``."""
    from nicrig.udpmon import schedule
    from nicrig.udpmon.results import point_row, write_stream

    plan = schedule.plan(len(points), args.rounds, args.order, run.order_rng)
    link = _stream_link_bps(run)
    measured, rows = [], []
    progress = run.progress.task("udpmon stream", len(plan), "streams")
    for k, v in enumerate(plan):
        size, spacing = points[v.item]
        p = _stream_point(run, k, v, size, spacing, args)
        rows.append(point_row(p, link_rate_bps=link, mtu=mtu, wire_overhead=args.wire_overhead))
        run.set_throughput(k, rows[-1]["user_rate_mbps"])
        measured.append(p)
        progress(k + 1)
    if run.results is not None:
        write_stream(run.results, measured, rows, wire_overhead=args.wire_overhead, bin_us=args.bin_us,
                     link_rate_bps=link, prefix=run.prefix)
    return rows


def _stream_lines(rows: list[dict[str, Any]]) -> list[str]:
    """One line per stream: the rates with their 95% half-widths (the wire rate counts the same datagrams over the
    same time, so it shares the user rate's relative uncertainty); CPU time is counted in jiffies (10 ms): whole
    percents, as the report prints it."""
    from nicrig.analysis.quantity import measured, number, setting

    lines = [(f"{'round':>5} {'size':>6} {'space_us':>8} {'sent':>7} {'recv':>7} {'lost':>6} {'ooo':>4} {'dup':>4} "
              f"{'user_Mb/s':>16} {'wire_Mb/s':>16} {'cpu_l%':>6} {'cpu_r%':>6} {'irq_r':>6}")]
    for r in rows:
        user, wire = r["user_rate_mbps"], r["wire_rate_mbps"]
        wire_ci95 = r["user_rate_ci95_mbps"] * wire / user if user > 0 else math.nan
        lines.append(f"{r['round']:>5} {r['size_bytes']:>6} {setting(r['spacing_us']):>8} {r['sent']:>7} "
                     f"{r['received']:>7} {r['lost']:>6} {r['out_of_order']:>4} {r['duplicates']:>4} "
                     f"{measured(user, r['user_rate_ci95_mbps']):>16} {measured(wire, wire_ci95):>16} "
                     f"{number(r['local_cpu_busy_pct'], decimals=0):>6} "
                     f"{number(r['remote_cpu_busy_pct'], decimals=0):>6} {r['remote_interrupts']:>6}")
    return lines


# -- suite ---------------------------------------------------------------------------------------

def _suite_kind(args: argparse.Namespace) -> Kind:
    from nicrig.udpmon import suite as S

    from nicrig.errors import UsageError

    names = [t.strip() for t in args.tests.split(",") if t.strip()]
    unknown = [n for n in names if n not in S.TEST_NAMES]
    if unknown or not names:
        raise UsageError(f"--tests: unknown test(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(S.TEST_NAMES)}")
    tests = [t for t in S.TESTS if t.name in names]
    connections = tuple(int(n) for n in parse_range(args.connections, "--connections", integer=True))
    if min(connections) < 1:
        raise UsageError("--connections: counts of TCP connections are at least 1")
    for name, value, lo, hi in (("--trial-s", args.trial_s, 0.01, 600), ("--max-trials", args.max_trials, 1, 100),
                                ("--tolerance", args.tolerance, 1e-4, 0.5), ("--mtu", args.mtu, 68, 65536),
                                ("--connection-rate-start", args.connection_rate_start, 1, 1e7),
                                ("--link-mbps", args.link_mbps if args.link_mbps is not None else 1.0, 1e-3, 1e7)):
        if not (math.isfinite(value) and lo <= value <= hi):
            raise UsageError(f"{name} {value:g} must be between {lo:g} and {hi:g}")
    opts = S.Options(trial_s=args.trial_s, max_trials=args.max_trials, tolerance=args.tolerance,
                     connections=connections, connection_rate_start=args.connection_rate_start, seed=args.seed)
    hosts = [("peer", *parse_host(args.peer, args.port))]
    if args.third:
        hosts.append(("third", *parse_host(args.third, args.port)))
    return Kind(
        name="suite", hosts=hosts,
        body=lambda run, step: _suite_body(run, args, tests, opts, int((step or {}).get("mtu", args.mtu))),
        table=lambda r: S.tables(r["outcomes"])["suite/tests"], show=_suite_lines,
        to_json=lambda r: {k: v for k, v in r.items() if k != "outcomes"} | {"tests": S.summary(r["outcomes"])},
        failed=lambda r: any(o.trials and not o.throughput > 0 for o in r["outcomes"]),
        describe=lambda: [(f"suite: {', '.join(t.name for t in tests)}; up to {opts.max_trials} trials of "
                          f"{opts.trial_s:g} s per rate search, TCP with {', '.join(map(str, connections))} "
                          f"connection(s)")],
        settings=lambda: _settings(args, tests=[t.name for t in tests], connections=list(connections)))


def _link_rate(run: Run, args: argparse.Namespace) -> tuple[float, str]:
    """(Mbit/s, where it came from) for the theoretical maxima."""
    from nicrig.udpmon.counters import link_speed_mbps

    if args.link_mbps is not None:
        return float(args.link_mbps), "--link-mbps"
    speed = link_speed_mbps(run.local_if) if run.local_if else None
    if speed is not None:
        return float(speed), f"{run.local_if} link speed"
    return 1000.0, f"assumed: {run.local_if or 'the interface'} states no link speed (as veth and loopback)"


def _measure(run: Run) -> Any:
    """The suite's ``measure``: run the work between counter snapshots of this host and the daemons it uses."""
    def measure(test: Any, remotes: list[Any], work: Callable[[], list[Any]]) -> tuple[int, list[Any]]:
        labels = [r.label for r in remotes]
        before = run.snapshot(labels)
        flows = work()
        after = run.snapshot(labels)
        point = run.next_point()
        run.record_counters(point, before, after)
        run.set_throughput(point, sum(f.rate_mbps for f in flows) if test.unit == "Mbit/s" else math.nan)
        return point, flows
    return measure


def _suite_body(run: Run, args: argparse.Namespace, tests: list[Any], opts: Any, mtu: int) -> dict[str, Any]:
    from nicrig.udpmon import suite as S

    link, source = _link_rate(run, args)
    progress = run.progress.task("udpmon suite", len(tests), "tests")
    outcomes = []
    for i, test in enumerate(tests):
        outcomes.append(S.run_test(test, run.remote("peer"), run.remote("third"), link_mbps=link, mtu=mtu,
                                   opts=opts, measure=_measure(run)))
        progress(i + 1)
    if run.results is not None:
        about = {"suite/tests": "one row per test: the best trial's throughput against the theoretical maximum",
                 "suite/trials": "every trial of every rate or connection search",
                 "suite/flows": "every flow of every trial, with the counts and times its rate comes from"}
        for name, table in S.tables(outcomes).items():
            run.results.write_table(f"{run.prefix}{name}", table, description=about[name],
                                    attrs={"link_mbps": link, "link_source": source, "mtu": mtu})
    peer, third = run.remote("peer"), run.remote("third")
    return {"outcomes": outcomes, "link_mbps": link, "link_source": source, "mtu": mtu,
            "local": {"address": peer.local_ip, "interface": run.local_if},
            "peer": {"address": peer.address, "interface": peer.interface},
            "third": {"address": third.address, "interface": third.interface} if third else None}


def _suite_lines(r: dict[str, Any]) -> list[str]:
    from nicrig.udpmon import suite as S

    third = f", third {r['third']['address']}" if r["third"] else ""
    line_rate = not r["link_source"].startswith("assumed")
    link = (f"link {r['link_mbps']:g} Mbit/s ({r['link_source']})" if line_rate else
            f"no line rate ({r['link_source'].removeprefix('assumed: ')}): loopback and veth have none to compare "
            "with, so no maximum or share of one is given")
    head = (f"Pai, Rixner and Kim 2004 microbenchmarks on {r['local']['address']} ({r['local']['interface']}): peer "
            f"{r['peer']['address']}{third}; {link}; MTU {r['mtu']}")
    return [head, *S.format_table(r["outcomes"], line_rate=line_rate)]


# -- aggregate -----------------------------------------------------------------------------------

AGGREGATE_DTYPE = [("flows", "<i4"), ("direction", "S3"), ("protocol", "S4"), ("sent", "<i8"), ("received", "<i8"),
                   ("lost", "<i8"), ("bytes", "<i8"), ("sum_rate_mbps", "<f8"), ("span_rate_mbps", "<f8")]


def _aggregate_kind(args: argparse.Namespace) -> Kind:
    from nicrig.errors import UsageError

    if args.protocol == "udp":
        if not 16 <= args.size <= 65507 or args.count < 2 or not args.spacing_us > 0:
            raise UsageError("--size must be 16 to 65507 bytes, --count at least 2 and --spacing-us above 0")
    elif args.connections < 1 or not 0 < args.duration_s <= 3600:
        raise UsageError("--connections must be at least 1 and --duration-s between 0 and 3600")
    hosts = [(f"r{i + 1}", *parse_host(h, args.port)) for i, h in enumerate(args.hosts)]
    what = (f"UDP, {args.count} datagrams of {args.size} bytes every {args.spacing_us:g} us per flow"
            if args.protocol == "udp" else f"TCP, {args.connections} connection(s) per daemon for {args.duration_s:g} s")
    return Kind(
        name="aggregate", hosts=hosts, body=lambda run, step: _aggregate_body(run, args),
        table=lambda r: r["table"], show=_aggregate_lines,
        to_json=lambda r: {"flows": r["flows"], "total": r["total"]},
        failed=lambda r: any(f["received"] == 0 for f in r["flows"]),
        describe=lambda: [(f"aggregate: {len(hosts)} flow(s) {'into' if args.direction == 'in' else 'out of'} "
                          f"this host, {what}")],
        settings=lambda: _settings(args))


def aggregate_total(flows: list[Any]) -> dict[str, Any]:
    """Sum of the flows' rates, and the rate over their common span when all flows share one receiver's clock."""
    clocks = {f.clock for f in flows}
    firsts = [f.first_ns for f in flows if f.first_ns >= 0]
    span_ns = max(f.last_ns for f in flows) - min(firsts) if firsts else 0
    total_bytes = sum(f.bytes for f in flows)
    return {"flows": len(flows), "direction": flows[0].direction, "protocol": flows[0].protocol,
            "sent": sum(f.sent for f in flows), "received": sum(f.received for f in flows),
            "lost": sum(f.lost for f in flows), "bytes": total_bytes,
            "sum_rate_mbps": sum(f.rate_mbps for f in flows),
            "span_rate_mbps": 8.0 * total_bytes / span_ns * 1e3 if len(clocks) == 1 and span_ns > 0 else math.nan}


def _aggregate_body(run: Run, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from nicrig.udpmon import flows as F
    from nicrig.udpmon import suite as S

    before = run.snapshot()
    if args.protocol == "udp":
        flows = F.udp_trial(run.remotes if args.direction == "out" else [],
                            run.remotes if args.direction == "in" else [], size_bytes=args.size,
                            spacing_ns=max(1, round(args.spacing_us * 1000)), count=args.count, seed=args.seed)
    else:
        flows = F.tcp_bulk_trial(run.remotes, args.direction, connections=args.connections,
                                 duration_ns=int(args.duration_s * 1e9), seed=args.seed)
    point = run.next_point()
    run.record_counters(point, before, run.snapshot())
    total = aggregate_total(flows)
    run.set_throughput(point, total["sum_rate_mbps"])
    table = np.array([(total["flows"], total["direction"].encode(), total["protocol"].encode(), total["sent"],
                       total["received"], total["lost"], total["bytes"], total["sum_rate_mbps"],
                       total["span_rate_mbps"])], dtype=AGGREGATE_DTYPE)
    if run.results is not None:
        run.results.write_table(f"{run.prefix}aggregate/flows", np.array(S.flow_rows("aggregate", point, flows),
                                                                          dtype=S.FLOWS_DTYPE),
                                description="every flow, with the counts and times its rate comes from")
        run.results.write_table(f"{run.prefix}aggregate/total", table,
                                description="all flows together: sums, and the rate over their common span")
    rows = [{"host": f.label, "address": run.remote(f.label).address, "direction": f.direction,
             "protocol": f.protocol, "sent": f.sent, "received": f.received, "lost": f.lost, "bytes": f.bytes,
             "rate_mbps": f.rate_mbps, "first_ns": f.first_ns, "last_ns": f.last_ns, "clock": f.clock} for f in flows]
    return {"flows": rows, "total": total, "table": table}


def _aggregate_lines(r: dict[str, Any]) -> list[str]:
    # one trial's rates have no spread to state: four significant digits, as the report prints them
    from nicrig.analysis.quantity import number

    lines = [(f"{'host':<5} {'address':<16} {'dir':<3} {'proto':<5} {'sent':>12} {'received':>12} {'lost':>8} "
             f"{'Mbit/s':>9}")]
    for f in r["flows"]:
        lines.append(f"{f['host']:<5} {f['address']:<16} {f['direction']:<3} {f['protocol']:<5} {f['sent']:>12} "
                     f"{f['received']:>12} {f['lost']:>8} {number(f['rate_mbps']):>9}")
    t = r["total"]
    span = (f", {number(t['span_rate_mbps'])} Mbit/s over their common span" if math.isfinite(t["span_rate_mbps"])
            else "")
    lines.append(f"total: {t['flows']} flows, {t['received']} received, {t['lost']} lost, "
                 f"{number(t['sum_rate_mbps'])} Mbit/s summed{span}")
    return lines


def _finite(value: Any) -> Any:
    """JSON has no NaN: unknown figures (a CPU load that could not be read) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


KINDS = {"latency": _latency_kind, "stream": _stream_kind, "suite": _suite_kind, "aggregate": _aggregate_kind}


def run(args: argparse.Namespace) -> int:
    if args.action == "serve":
        from nicrig.udpmon.daemon import serve

        return serve(args)
    return _execute(args, KINDS[args.action](args))
