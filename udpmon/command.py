"""``nicrig udpmon serve | latency | stream``: UDPmon-style measurements between two hosts.

``serve`` runs the daemon on the far host. ``latency`` measures request-response
round trips against it for a range of response sizes (seed 002 section 3.1);
``stream`` sends precisely spaced UDP streams to it for each size and spacing
and has it report what arrived (section 3.2). Both record host counters of
both ends, write a results file (``-o``), print a human summary or, with
``--json``, the summary as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import secrets
import socket
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

DEFAULT_PORT = 14401


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
            n = int(round((bits[1] - bits[0]) / bits[2]))
            out += [bits[0] + i * bits[2] for i in range(n + 1) if bits[0] + i * bits[2] <= bits[1] + 1e-9]
        else:
            raise UsageError(f"{what} {part!r}: use start:stop:step with step > 0 and stop >= start")
    return sorted(set(out))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", help="address of the host running 'nicrig udpmon serve'")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"its control port (default {DEFAULT_PORT})")
    p.add_argument("--secret-file", type=Path,
                   help="shared secret (the daemon's --secret-file); without it only a loopback daemon answers")
    p.add_argument("--interface", help="local interface whose counters to record (default: the route to HOST)")
    p.add_argument("--remote-interface", help="the far host's interface (default: the one its daemon reports)")
    p.add_argument("--mtu", type=int, default=1500, help="MTU for frame counts per message (default 1500)")
    p.add_argument("-o", "--output", type=Path, help="results file to write (.h5)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--seed", type=int, default=1, help="seed of the random payloads")
    p.add_argument("--udp-port", type=int, default=0,
                   help="UDP port the far host uses for the test (default: one its kernel picks; set it for firewalls)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    serve = sub.add_parser("serve", help="run the daemon that answers latency tests and receives streams")
    from nicrig.udpmon.daemon import add_serve_arguments

    add_serve_arguments(serve)
    lat = sub.add_parser("latency", help="request-response round trips vs response size")
    _common(lat)
    lat.add_argument("--sizes", default="64:1472:8", help="response sizes, start:stop:step or a list (bytes)")
    lat.add_argument("--count", type=int, default=1000, help="round trips per size (default 1000)")
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
    st.add_argument("--count", type=int, default=10000, help="packets per point (default 10000)")
    st.add_argument("--wire-overhead", type=int, default=66,
                    help="framing bytes per packet for the wire rate: 66 = preamble+SFD 8, gap 12, Ethernet 18, "
                         "IPv4+UDP 28 (seed 002 used 60)")
    st.add_argument("--idle-timeout-ms", type=float, default=500,
                    help="the receiver stops this long after the last packet (default 500)")
    st.add_argument("--hw-timestamps", action="store_true", help="ask for NIC hardware receive timestamps")
    st.add_argument("--bin-us", type=float, default=1.0, help="spacing histogram bin width (default 1 us)")


# -- shared run machinery ---------------------------------------------------------------------------

class Run:
    """One measurement run: the controller session, counters of both ends, and the results file."""

    def __init__(self, args: argparse.Namespace, kind: str):
        from nicrig.udpmon.client import Controller
        from nicrig.udpmon.counters import egress_interface
        from nicrig.udpmon.protocol import load_secret

        self.args, self.kind = args, kind
        self.stack = ExitStack()
        self.counter_rows: list[tuple[int, str, str, dict[str, Any]]] = []
        # stream: raw rows of every point, written as whole tables at the end
        self.pending: dict[str, list[Any]] = {"sent": [], "received": [], "lost_runs": [], "spacing": []}
        self.results = None
        try:
            if args.output:  # first: an unwritable output fails before any traffic
                from nicrig.udpmon.results import ResultsFile

                self.results = self.stack.enter_context(ResultsFile.create(args.output))
            secret = load_secret(args.secret_file) if args.secret_file else None
            self.ctl = self.stack.enter_context(Controller(args.host, args.port, secret))
            # the daemon's responder and receiver listen on the address this connection reached
            self.family, self.address = self.ctl.peer
            self.local_if = args.interface or egress_interface(self.address)
            self.remote_if = args.remote_interface or self._remote_interface()
            self.limits = self.ctl.limits()
        except BaseException:
            self.close(failed=True)
            raise

    def udp_socket(self) -> Any:
        """Our UDP socket for a test, bound first so the far end can accept this source port only."""
        from nicrig.udpmon import engine

        return engine.open_udp(bind=("::" if self.family == socket.AF_INET6 else "0.0.0.0", 0), family=self.family)

    def duration_s(self, wanted_s: float) -> float:
        """A test's duration: what it needs, within the daemon's cap."""
        return min(float(self.limits.get("max_duration_s", wanted_s)), max(10.0, wanted_s))

    def wait_finished(self, timeout_s: float) -> None:
        """Let the far receiver drain: it ends by itself when all packets came or after its idle timeout."""
        import time

        deadline = time.monotonic() + timeout_s
        while self.ctl.status().get("state") == "running" and time.monotonic() < deadline:
            time.sleep(0.02)

    def _remote_interface(self) -> str | None:
        """The far end's interface toward us, as its route back to our address says."""
        return self.ctl.status().get("interface")

    def snapshot(self) -> tuple[dict[str, Any], dict[str, Any]]:
        from nicrig.udpmon import counters

        remote = (self.ctl.counters(self.remote_if) if self.remote_if else
                  {"unavailable": "the far host named no interface toward us (no 'ip' command there?); "
                                  "give --remote-interface"})
        return counters.snapshot(self.local_if), remote

    def record_counters(self, point: int, before: tuple[dict, dict], after: tuple[dict, dict]) -> dict[str, Any]:
        """Keep raw before/after snapshots of both ends and return their deltas."""
        from nicrig.udpmon import counters

        out = {}
        for host, b, a in (("local", before[0], after[0]), ("remote", before[1], after[1])):
            d = counters.delta(b, a) if "unavailable" not in b and "unavailable" not in a else \
                {"unavailable": b.get("unavailable") or a.get("unavailable")}
            self.counter_rows += [(point, host, "before", b), (point, host, "after", a), (point, host, "delta", d)]
            out[host] = d
        return out

    def finish(self, settings: dict[str, Any]) -> None:
        if self.results is not None:
            self.results.set_run(self.kind, peer=f"{self.args.host}:{self.args.port}", argv=sys.argv,
                                 settings=settings, remote={"interface": self.remote_if, **self.ctl.limits()})
            self.results.write_counters(self.counter_rows)

    def close(self, failed: bool) -> None:
        if failed and self.results is not None:
            self.results.abandon()
        self.stack.close()


def _progress(total: int, label: str) -> Any:
    """A rich progress bar on a terminal, nothing otherwise; call with the number done."""
    if not sys.stderr.isatty():
        return lambda done: None
    from rich.progress import Progress

    bar = Progress(transient=True)
    bar.start()
    task = bar.add_task(label, total=total)

    def update(done: int) -> None:
        bar.update(task, completed=done)
        if done >= total:
            bar.stop()
    return update


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


# -- latency -------------------------------------------------------------------------------------

def _latency(args: argparse.Namespace) -> int:
    import numpy as np
    from nicrig.analysis.latency import fit_latency, frames_per_message, rtt_stats
    from nicrig.udpmon import engine
    from nicrig.udpmon.payload import REQUEST_MIN_BYTES
    from nicrig.udpmon.results import ENGINE_COUNTS_DTYPE, write_latency

    from nicrig.errors import UsageError

    sizes = [int(s) for s in parse_range(args.sizes, "--sizes", integer=True)]
    if not sizes or min(sizes) < 16 or max(sizes) > 65507:
        raise UsageError("--sizes: responses are 16 to 65507 bytes (the 16-byte header must fit)")
    if args.count < 1 or not REQUEST_MIN_BYTES <= args.request_size <= 65507:
        raise UsageError(f"--count must be positive and --request-size {REQUEST_MIN_BYTES} to 65507 bytes "
                         "(the header and the requested response size must fit)")
    run = Run(args, "latency")
    failed = True
    try:
        rtt: dict[int, Any] = {}
        stats: dict[int, Any] = {}
        engine_rows: list[tuple[int, ...]] = []
        before = run.snapshot()
        progress = _progress(len(sizes), "latency")
        rate_cap = int(run.limits.get("max_rate_pps", 200_000))
        for i, size in enumerate(sizes):
            test_id = secrets.randbits(32)
            with run.udp_socket() as sock:
                udp_port = run.ctl.start_responder(
                    test_id=test_id, max_response_bytes=size, max_rate_pps=rate_cap, udp_port=args.udp_port,
                    peer_udp_port=sock.getsockname()[1],
                    duration_s=run.duration_s(args.count * (args.timeout_ms + args.gap_us / 1000) / 1000))
                sock.connect((run.address, udp_port))
                lat = engine.request_response(sock, count=args.count, request_bytes=args.request_size,
                                              response_bytes=size, test_id=test_id,
                                              timeout_ns=int(args.timeout_ms * 1e6), busy_poll=args.busy_poll,
                                              gap_ns=int(args.gap_us * 1000), seed=args.seed + i)
            remote, _ = run.ctl.stop()
            far = remote.get("engine", {})
            engine_rows.append((size, lat.timeouts, lat.stale, lat.foreign, lat.errors, far.get("answered", -1),
                                far.get("refused_peer", -1), far.get("refused_invalid", -1),
                                far.get("refused_rate", -1)))
            rtt[size] = lat.rtt_ns
            stats[size] = rtt_stats(lat.rtt_ns, args.bin_us)
            progress(i + 1)
        deltas = run.record_counters(0, before, run.snapshot())
        sizes_arr = np.array(sizes)
        fits = (fit_latency(sizes_arr, np.array([stats[s].min_us for s in sizes]), args.mtu),
                fit_latency(sizes_arr, np.array([stats[s].mean_us for s in sizes]), args.mtu))
        settings = {k: v for k, v in vars(args).items() if k not in ("_module", "secret_file", "output")}
        settings["sizes"] = sizes
        if run.results is not None:
            write_latency(run.results, rtt, stats, fits, mtu=args.mtu, bin_us=args.bin_us)
            run.results.write_table("latency/engine", np.array(engine_rows, dtype=ENGINE_COUNTS_DTYPE),
                                    description="per size: what the near end skipped and the far end refused")
        run.finish(settings)
        failed = False
    finally:
        run.close(failed)
    summary = {
        "sizes": [{"size_bytes": s, "frames": frames_per_message(s, args.mtu), "count": stats[s].count,
                   "timeouts": stats[s].timeouts, "min_us": stats[s].min_us, "median_us": stats[s].median_us,
                   "mean_us": stats[s].mean_us, "max_us": stats[s].max_us, "p99_us": stats[s].percentiles_us[99],
                   "fwhm_us": stats[s].fwhm_us} for s in sizes],
        "fit_min": [vars(f) for f in fits[0]], "fit_mean": [vars(f) for f in fits[1]],
        "cpu_busy_percent": {"local": _busy(deltas["local"]), "remote": _busy(deltas["remote"])},
        "output": str(args.output) if args.output else None,
    }
    failed_sizes = any(stats[s].count == 0 for s in sizes)
    if args.json:
        print(json.dumps(_finite(summary), indent=2))
        return 1 if failed_sizes else 0
    print(f"{'size':>6} {'frames':>6} {'count':>6} {'lost':>5} {'min_us':>9} {'median':>9} {'mean':>9} {'p99':>9} "
          f"{'max':>9} {'fwhm':>6}")
    for r in summary["sizes"]:
        print(f"{r['size_bytes']:>6} {r['frames']:>6} {r['count']:>6} {r['timeouts']:>5} {r['min_us']:>9.2f} "
              f"{r['median_us']:>9.2f} {r['mean_us']:>9.2f} {r['p99_us']:>9.2f} {r['max_us']:>9.2f} "
              f"{r['fwhm_us']:>6.1f}")
    for name, fl in (("minimum", fits[0]), ("mean", fits[1])):
        for f in fl:
            print(f"fit on {name}, {f.frames} frame(s), {f.points} sizes: slope {f.slope_us_per_byte:.5f} "
                  f"± {f.slope_ci95:.5f} us/byte, intercept {f.intercept_us:.2f} ± {f.intercept_ci95:.2f} us")
    if args.output:
        print(f"wrote {args.output}")
    return 1 if failed_sizes else 0


# -- stream --------------------------------------------------------------------------------------

STREAM_TABLES = {
    "sent": ({"due_ns": "ns, CLOCK_MONOTONIC", "t_ns": "ns, CLOCK_MONOTONIC (-1: not sent)"},
             "every packet sent: when it was due (t0 + seq * spacing) and when it left"),
    "received": ({"kernel_ns": "ns, CLOCK_REALTIME (kernel RX timestamp, -1: none)",
                  "user_ns": "ns, CLOCK_MONOTONIC (when the receive call returned)",
                  "hw_ns": "ns, NIC clock (-1: none)", "size_bytes": "byte"},
                 "every datagram of the test the far host received, in arrival order"),
    "lost_runs": ({"run_length": "packets"}, "how many runs of consecutive lost packets had each length"),
    "spacing": ({"bin_us": "us (left edge)"}, "histograms of the inter-packet spacing, sent and received"),
}

POINT_DTYPE = [
    ("point", "<i4"), ("size_bytes", "<i4"), ("spacing_us", "<f8"), ("sent", "<i8"), ("received", "<i8"),
    ("lost", "<i8"), ("out_of_order", "<i8"), ("duplicates", "<i8"), ("foreign", "<i8"),
    ("kernel_drops", "<i8"), ("max_lost_run", "<i8"), ("send_time_us", "<f8"), ("recv_time_us", "<f8"),
    ("send_rate_mbps", "<f8"), ("user_rate_mbps", "<f8"), ("wire_rate_mbps", "<f8"),
    ("local_cpu_busy_pct", "<f8"), ("remote_cpu_busy_pct", "<f8"),
    ("local_interrupts", "<i8"), ("remote_interrupts", "<i8"),
]


def _stream_point(run: Run, point: int, size: int, spacing_us: float, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np
    from nicrig.udpmon import engine, sequence

    test_id = secrets.randbits(32)
    before = run.snapshot()
    spacing_ns = int(spacing_us * 1000)
    with run.udp_socket() as sock:
        udp_port = run.ctl.start_receiver(test_id=test_id, max_packets=args.count, udp_port=args.udp_port,
                                          idle_timeout_ms=int(args.idle_timeout_ms), hw_timestamps=args.hw_timestamps,
                                          peer_udp_port=sock.getsockname()[1],
                                          duration_s=run.duration_s(args.count * spacing_us / 1e6 * 2 + 5))
        sock.connect((run.address, udp_port))
        t0 = engine.monotonic_ns() + 2_000_000  # the schedule: packet i is due at t0 + i * spacing
        sent_ns = engine.send_paced(sock, count=args.count, size_bytes=size, spacing_ns=spacing_ns,
                                    test_id=test_id, seed=args.seed + point, start_ns=t0)
    run.wait_finished(args.idle_timeout_ms / 1000 + 5)
    remote, arrays = run.ctl.stop()
    engine_stats = remote.get("engine", {})
    deltas = run.record_counters(point, before, run.snapshot())
    seq = arrays.get("seq", np.zeros(0, np.uint32)).astype(np.int64)
    kernel_ns = arrays.get("kernel_ns", np.zeros(0, np.int64))
    s = sequence.sequence_stats(seq, args.count)
    ok_sent = sent_ns[sent_ns >= 0]
    send_ns = float(ok_sent[-1] - ok_sent[0]) if len(ok_sent) > 1 else float("nan")
    stamped = kernel_ns[kernel_ns > 0]
    recv_ns = float(stamped[-1] - stamped[0]) if len(stamped) > 1 else float("nan")
    row = {
        "point": point, "size_bytes": size, "spacing_us": spacing_us, "sent": int(len(ok_sent)),
        "received": s.received, "lost": s.lost, "out_of_order": s.out_of_order, "duplicates": s.duplicates,
        "foreign": int(engine_stats.get("foreign", 0)), "kernel_drops": int(engine_stats.get("kernel_drops", -1)),
        "max_lost_run": int(max(s.lost_runs, default=0)),
        "send_time_us": send_ns / 1000, "recv_time_us": recv_ns / 1000,
        "send_rate_mbps": sequence.rate_bps(size, len(ok_sent) - 1, send_ns) / 1e6 if len(ok_sent) > 1 else 0.0,
        "user_rate_mbps": sequence.rate_bps(size, s.received - 1, recv_ns) / 1e6 if s.received > 1 else 0.0,
        "wire_rate_mbps": sequence.wire_rate_bps(size, s.received - 1, recv_ns, overhead_bytes=args.wire_overhead)
        / 1e6 if s.received > 1 else 0.0,
        "local_cpu_busy_pct": _busy(deltas["local"]), "remote_cpu_busy_pct": _busy(deltas["remote"]),
        "local_interrupts": _interrupts(deltas["local"]), "remote_interrupts": _interrupts(deltas["remote"]),
    }
    if run.results is not None:
        due_ns = t0 + np.arange(len(sent_ns), dtype=np.int64) * spacing_ns
        _write_stream_point(run, point, sent_ns, due_ns, seq, arrays, s, args)
    return row


def _write_stream_point(run: Run, point: int, sent_ns: Any, due_ns: Any, seq: Any, arrays: dict[str, Any], s: Any,
                        args: argparse.Namespace) -> None:
    """Append this point's raw rows; tables are rewritten whole, so each stays one dataset."""
    import numpy as np
    from nicrig.udpmon import sequence

    sent = np.zeros(len(sent_ns), dtype=[("point", "<i4"), ("seq", "<i8"), ("due_ns", "<i8"), ("t_ns", "<i8")])
    sent["point"], sent["seq"], sent["due_ns"], sent["t_ns"] = point, np.arange(len(sent_ns)), due_ns, sent_ns
    recv = np.zeros(len(seq), dtype=[("point", "<i4"), ("seq", "<i8"), ("kernel_ns", "<i8"), ("user_ns", "<i8"),
                                     ("hw_ns", "<i8"), ("size_bytes", "<i4")])
    recv["point"], recv["seq"] = point, seq
    for col, key in (("kernel_ns", "kernel_ns"), ("user_ns", "user_ns"), ("hw_ns", "hw_ns"), ("size_bytes", "size")):
        if key in arrays:
            recv[col] = arrays[key]
    runs = [(point, k, c) for k, c in enumerate(s.lost_run_histogram) if k > 0 and c > 0]
    spacing = []
    for side, times in (("send", sent_ns[sent_ns >= 0]), ("recv", recv["kernel_ns"][recv["kernel_ns"] > 0])):
        if len(times) > 1:
            edges, counts = sequence.spacing_histogram(np.sort(times), int(args.bin_us * 1000))
            spacing += [(point, side.encode(), e / 1000, c) for e, c in zip(edges[:-1], counts) if c]
    run.pending["sent"].append(sent)
    run.pending["received"].append(recv)
    run.pending["lost_runs"].append(np.array(runs, dtype=[("point", "<i4"), ("run_length", "<i8"), ("count", "<i8")]))
    run.pending["spacing"].append(np.array(spacing, dtype=[("point", "<i4"), ("side", "S4"), ("bin_us", "<f8"),
                                                          ("count", "<i8")]))


def _stream(args: argparse.Namespace) -> int:
    import numpy as np

    from nicrig.errors import UsageError

    sizes = [int(s) for s in parse_range(args.sizes, "--sizes", integer=True)]
    spacings = parse_range(args.spacing_us, "--spacing-us", integer=False)
    if not sizes or min(sizes) < 16 or max(sizes) > 65507:
        raise UsageError("--sizes: 16 to 65507 bytes (the 16-byte header must fit)")
    if min(spacings) < 0 or args.count < 2:
        raise UsageError("--spacing-us must not be negative and --count at least 2")
    run = Run(args, "stream")
    failed = True
    rows: list[dict[str, Any]] = []
    try:
        points = [(size, sp) for size in sizes for sp in spacings]
        progress = _progress(len(points), "stream")
        for point, (size, spacing) in enumerate(points):
            rows.append(_stream_point(run, point, size, spacing, args))
            progress(point + 1)
        if run.results is not None:
            table = np.array([tuple(r[name] for name, _ in POINT_DTYPE) for r in rows], dtype=POINT_DTYPE)
            units = {n: u for n, u in (("spacing_us", "us"), ("send_time_us", "us"), ("recv_time_us", "us"),
                                       ("size_bytes", "byte"), ("send_rate_mbps", "Mbit/s"),
                                       ("user_rate_mbps", "Mbit/s"), ("wire_rate_mbps", "Mbit/s"))}
            run.results.write_table("stream/points", table, units=units,
                                    attrs={"wire_overhead_bytes": args.wire_overhead},
                                    description="one row per (size, spacing) point, from stream/sent and received")
            for name, parts in run.pending.items():
                units, about = STREAM_TABLES[name]
                run.results.write_table(f"stream/{name}", np.concatenate(parts), units=units, description=about,
                                        attrs={"bin_width_us": args.bin_us} if name == "spacing" else None)
        settings = {k: v for k, v in vars(args).items() if k not in ("_module", "secret_file", "output")}
        settings.update(sizes=sizes, spacings_us=spacings)
        run.finish(settings)
        failed = False
    finally:
        run.close(failed)
    nothing = any(r["received"] == 0 for r in rows)
    if args.json:
        print(json.dumps(_finite({"points": rows, "output": str(args.output) if args.output else None}), indent=2))
        return 1 if nothing else 0
    print(f"{'size':>6} {'space_us':>8} {'sent':>7} {'recv':>7} {'lost':>6} {'ooo':>4} {'dup':>4} {'user_Mb/s':>9} "
          f"{'wire_Mb/s':>9} {'cpu_l%':>6} {'cpu_r%':>6} {'irq_r':>6}")
    for r in rows:
        print(f"{r['size_bytes']:>6} {r['spacing_us']:>8.1f} {r['sent']:>7} {r['received']:>7} {r['lost']:>6} "
              f"{r['out_of_order']:>4} {r['duplicates']:>4} {r['user_rate_mbps']:>9.1f} {r['wire_rate_mbps']:>9.1f} "
              f"{r['local_cpu_busy_pct']:>6.1f} {r['remote_cpu_busy_pct']:>6.1f} {r['remote_interrupts']:>6}")
    if args.output:
        print(f"wrote {args.output}")
    return 1 if nothing else 0


def _finite(value: Any) -> Any:
    """JSON has no NaN: unknown figures (a CPU load that could not be read) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def run(args: argparse.Namespace) -> int:
    if args.action == "serve":
        from nicrig.udpmon.daemon import serve

        return serve(args)
    return _latency(args) if args.action == "latency" else _stream(args)
