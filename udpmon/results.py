"""udpmon results files: every singleton measured, the statistics derived from them, and host counters.

The second nicrig file kind (``docs/formats.md``): an HDF5 file with
``format = "nicrig-results"``, the run's settings in root attributes, and
tables. Every number a summary shows is derived from raw rows kept in the
same file: round-trip singletons (``latency/rtt``), send times and received
datagrams of every stream point (``stream/sent``, ``stream/received``).

:func:`write_latency` and :func:`write_stream` are the one way to write a
run's tables, whatever measured it (``nicrig udpmon``, or the simulated rig
with ``simulation`` recorded by :meth:`ResultsFile.set_run`): they derive the
summaries from the raw rows with the estimators of :mod:`nicrig.analysis`, so
a file cannot hold summaries its own singletons contradict. Those estimators
(and SciPy behind them) are imported by the functions that call them: the
simulator and ``nicrig udpmon`` import this module to start, and importing
SciPy cost them about a second of CPU before any work.
"""

from __future__ import annotations

import json
import math
import os
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import h5py
import numpy as np

from nicrig.errors import FormatError
from nicrig.h5file import NicrigFile, attr_int, attr_json, attr_real, attr_text, open_any, to_json

if TYPE_CHECKING:
    from nicrig.analysis.latency import LatencyEstimate, LineFit

#: The group of a capture set written by ``nicrig simulate`` that holds the simulated run's results.
RESULTS_GROUP = "results"

#: ``latency/rtt``: one row per singleton.
RTT_DTYPE = np.dtype([("size_bytes", "<i4"), ("frames", "<i2"), ("round", "<i4"), ("position", "<i4"),
                      ("seq", "<i4"), ("t_ns", "<i8"), ("rtt_ns", "<i8")])
#: ``latency/visits``: one row per size and round, with what the near and far engines counted.
VISITS_DTYPE = np.dtype([
    ("round", "<i4"), ("position", "<i4"), ("size_bytes", "<i4"), ("start_ns", "<i8"), ("end_ns", "<i8"),
    ("requests", "<i4"), ("timeouts", "<i8"), ("stale", "<i8"), ("foreign", "<i8"), ("errors", "<i8"),
    ("far_answered", "<i8"), ("far_refused_peer", "<i8"), ("far_refused_invalid", "<i8"),
    ("far_refused_rate", "<i8"), ("local_port", "<i4"), ("remote_port", "<i4"),
])
#: The statistics of a visit, by their short name in column and table names.
STATISTIC_KEYS = {"minimum": "min", "mean": "mean", "main mode": "mode"}
LATENCY_SIZES_DTYPE = np.dtype([
    ("size_bytes", "<i4"), ("frames", "<i2"), ("count", "<i4"), ("timeouts", "<i4"),
    ("min_us", "<f8"), ("mean_us", "<f8"), ("median_us", "<f8"), ("max_us", "<f8"), ("std_us", "<f8"),
    ("p1_us", "<f8"), ("p5_us", "<f8"), ("p10_us", "<f8"), ("p25_us", "<f8"), ("p75_us", "<f8"),
    ("p90_us", "<f8"), ("p95_us", "<f8"), ("p99_us", "<f8"), ("fwhm_us", "<f8"), ("fwhm_ci95_us", "<f8"),
    *[(f"round_{k}{suffix}", dtype) for k in STATISTIC_KEYS.values()
      for suffix, dtype in (("_us", "<f8"), ("_ci95_us", "<f8"), ("_suspect", "<i1"))],
])
FIT_DTYPE = np.dtype([
    ("frames", "<i2"), ("points", "<i4"), ("rounds", "<i4"), ("slope_us_per_byte", "<f8"), ("slope_ci95", "<f8"),
    ("intercept_us", "<f8"), ("intercept_ci95", "<f8"), ("r", "<f8"), ("r_squared", "<f8"),
    ("lack_of_fit_p", "<f8"),
])
MODES_DTYPE = np.dtype([("location_us", "<f8"), ("offset_us", "<f8"), ("count", "<i8"), ("share", "<f8"),
                        ("main", "<i1")])
COUNTERS_DTYPE = np.dtype([("point", "<i4"), ("host", "S6"), ("when", "S6"), ("json", h5py.string_dtype())])
#: ``load``: Geist et al.'s (n.d.) CPU model inputs per point and host (:func:`nicrig.udpmon.counters.load_figures`).
LOAD_DTYPE = np.dtype([
    ("point", "<i4"), ("host", "S6"), ("interval_s", "<f8"), ("clk_tck", "<i4"),
    ("user_jiffies", "<f8"), ("nice_jiffies", "<f8"), ("system_jiffies", "<f8"), ("idle_jiffies", "<f8"),
    ("iowait_jiffies", "<f8"), ("irq_jiffies", "<f8"), ("softirq_jiffies", "<f8"), ("steal_jiffies", "<f8"),
    ("kernel_jiffies", "<f8"), ("busy_jiffies", "<f8"), ("megabytes", "<f8"), ("kilo_packets", "<f8"),
    ("kilo_interrupts", "<f8"), ("interrupt_source", "S9"), ("throughput_mbps", "<f8"),
])
HOSTS_DTYPE = np.dtype([("host", "S6"), ("address", "S46"), ("port", "<i4"), ("interface", "S16"),
                        ("given_as", "S64")])


#: Real-valued table attributes the analysis reads: (lowest, highest, NaN allowed for "unknown").
_TABLE_REALS = {"bin_width_us": (1e-6, 1e9, False), "link_mbps": (1e-6, 1e9, True)}
#: Whole-number table attributes the analysis reads: (lowest, highest).
_TABLE_INTS = {"mtu": (1, 1 << 20), "wire_overhead_bytes": (0, 1 << 16), "at_size_bytes": (-1, 1 << 31)}


class ResultsFile(NicrigFile):
    """An open udpmon results file (see :class:`nicrig.h5file.NicrigFile` for opening and tables)."""

    FORMAT_NAME = "nicrig-results"
    #: 2: kinds suite and aggregate, the sweep/ group, the load and hosts tables; 3: latency and stream measured in
    #: rounds (round, position, time of every singleton; latency/visits, latency/modes, latency/fit_mode; stream
    #: rates with uncertainties). Versions 1 and 2 read as before.
    FORMAT_VERSION = 3

    def _validate(self) -> None:
        """The run's attributes, checked once against their types (docs/formats.md, "udpmon results")."""
        owner, a = str(self.path), self.attrs
        attr_text(owner, a, "kind", "")
        attr_text(owner, a, "peer", "")
        attr_json(owner, a, "command", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "[]")
        for key in ("settings", "local_host", "remote"):
            attr_json(owner, a, key, lambda v: isinstance(v, dict))
        if "simulation" in a:
            attr_json(owner, a, "simulation", lambda v: isinstance(v, dict))
        for name in self.table_names():
            self.table_attrs(name)

    def table_attrs(self, path: str) -> dict[str, Any]:
        """A table's attributes, those the analysis reads checked against their types and ranges."""
        attrs = super().table_attrs(path)
        owner = f"{self.path}: table {path}"
        for key, (lo, hi, nan_ok) in _TABLE_REALS.items():
            if key in attrs and not (nan_ok and isinstance(attrs[key], (float, np.floating))
                                     and math.isnan(attrs[key])):
                attr_real(owner, attrs, key, lo, hi)
        for key, (lo, hi) in _TABLE_INTS.items():
            if key in attrs:
                attr_int(owner, attrs, key, lo, hi)
        return attrs

    def set_run(self, kind: str, *, peer: str, argv: Sequence[str], settings: dict[str, Any],
                remote: dict[str, Any], simulation: dict[str, Any] | None = None) -> None:
        """Record what was run, against whom, from where; ``simulation`` (what the simulated rig modelled)
        marks a run that no real hosts measured."""
        self.attrs["kind"] = kind
        self.attrs["peer"] = peer
        self.attrs["command"] = to_json(list(argv))
        self.attrs["settings"] = to_json(settings)
        self.attrs["local_host"] = to_json({"hostname": socket.gethostname(), "uname": " ".join(_uname())})
        self.attrs["remote"] = to_json(remote)
        if simulation is not None:
            self.attrs["simulation"] = to_json(simulation)

    @property
    def run_kind(self) -> str:
        """``latency``, ``stream``, ``suite`` or ``aggregate``."""
        return str(self.attrs.get("kind", ""))

    @property
    def simulation(self) -> dict[str, Any] | None:
        """What the simulated rig modelled, or None for a run between real hosts."""
        if "simulation" not in self.attrs:
            return None
        return attr_json(str(self.path), self.attrs, "simulation", lambda v: isinstance(v, dict))

    def write_counters(self, rows: list[tuple[int, str, str, dict[str, Any]]], prefix: str = "") -> None:
        """Host counters: (point, host label, "before"|"after"|"delta", counters), at ``prefix`` + ``counters``."""
        table = np.array([(p, h.encode(), w.encode(), json.dumps(c, sort_keys=True, default=str))
                          for p, h, w, c in rows], dtype=COUNTERS_DTYPE)
        self.write_table(f"{prefix}counters", table, description="host counters of every end (JSON), per test point")

    def counters(self, prefix: str = "") -> list[tuple[int, str, str, dict[str, Any]]]:
        return [(int(r["point"]), r["host"].decode(), r["when"].decode(),
                 json.loads(r["json"].decode() if isinstance(r["json"], bytes) else r["json"]))
                for r in self.read_table(f"{prefix}counters")]


@contextmanager
def open_results(path: str | os.PathLike[str]) -> Iterator[ResultsFile]:
    """The udpmon results at ``path``: a results file, or those a simulated capture set carries in its
    :data:`RESULTS_GROUP` group (read-only)."""
    with open_any(path) as f:
        if isinstance(f, ResultsFile):
            yield f
        elif f.has_nested(RESULTS_GROUP):
            yield f.nested(ResultsFile, RESULTS_GROUP)
        else:
            raise FormatError(f"{path}: {f.kind()} without udpmon results (only 'nicrig simulate' puts them in one)")


def _uname() -> tuple[str, ...]:
    return tuple(os.uname())


def load_table(rows: list[tuple[int, str, float, dict[str, Any]]]) -> np.ndarray:
    """``load`` rows from (point, host, throughput Mbit/s, :func:`~nicrig.udpmon.counters.load_figures` output)."""
    names = [n for n in LOAD_DTYPE.names if n not in ("point", "host", "interrupt_source", "throughput_mbps")]
    return np.array([(p, h.encode(), *(f[n] for n in names), f["interrupt_source"].encode(), t)
                     for p, h, t, f in rows], dtype=LOAD_DTYPE)


def hosts_table(local_interface: str | None, remotes: Sequence[Any]) -> np.ndarray:
    """``hosts``: this host (its address toward the first daemon) and every daemon, by label."""
    rows = [(b"local", remotes[0].local_ip.encode(), -1, (local_interface or "").encode(), b"")]
    rows += [(r.label.encode(), r.address.encode(), r.port, (r.interface or "").encode(), r.host.encode()[:64])
             for r in remotes]
    return np.array(rows, dtype=HOSTS_DTYPE)


# -- latency ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LatencyVisit:
    """One size measured in one round: its round trips, when, and what the engines counted.

    ``start_ns``/``end_ns``: CLOCK_MONOTONIC before the first request and
    after the last response (or timeout); ``rtt_ns``: each request's round trip,
    -1 without a response. The counts are the near engine's (skipped datagrams)
    and the far responder's (-1: not reported, as for a simulated run).
    """

    round: int
    position: int
    size_bytes: int
    start_ns: int
    end_ns: int
    rtt_ns: np.ndarray
    timeouts: int = 0
    stale: int = 0
    foreign: int = 0
    errors: int = 0
    far_answered: int = -1
    far_refused_peer: int = -1
    far_refused_invalid: int = -1
    far_refused_rate: int = -1
    local_port: int = -1  # the UDP ports of the test's datagrams, this end's and the far end's (-1: unknown)
    remote_port: int = -1
    sent_ns: np.ndarray | None = None  # each request's send time as the engine read it (None: interpolate)


def send_times_ns(visit: LatencyVisit, gap_ns: int = 0) -> np.ndarray:
    """When each request of a visit was sent, interpolated: exact at the visit's start and end, each request
    after the previous one's round trip and gap, and the engine's own time per request (and any time-out's wait)
    spread evenly over the requests."""
    rtt = np.asarray(visit.rtt_ns, dtype=np.int64)
    m = rtt.size
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    known = np.where(rtt >= 0, rtt, 0) + gap_ns
    rest = max(visit.end_ns - visit.start_ns - int(known.sum()), 0) / m
    before = np.concatenate(([0], np.cumsum(known)[:-1])) + rest * np.arange(m)
    return visit.start_ns + np.round(before).astype(np.int64)


def latency_tables(visits: Sequence[LatencyVisit], mtu: int, gap_ns: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``latency/rtt`` (every singleton, in the order measured) and ``latency/visits`` from the visits."""
    from nicrig.analysis.latency import frames_per_message

    order = sorted(visits, key=lambda v: (v.round, v.position))
    rtt = np.zeros(sum(len(v.rtt_ns) for v in order), dtype=RTT_DTYPE)
    at = 0
    for v in order:
        n = len(v.rtt_ns)
        part = rtt[at:at + n]
        part["size_bytes"], part["frames"] = v.size_bytes, frames_per_message(v.size_bytes, mtu)
        part["round"], part["position"], part["seq"] = v.round, v.position, np.arange(n)
        part["t_ns"] = v.sent_ns if v.sent_ns is not None else send_times_ns(v, gap_ns)
        part["rtt_ns"] = v.rtt_ns
        at += n
    table = np.array([(v.round, v.position, v.size_bytes, v.start_ns, v.end_ns, len(v.rtt_ns), v.timeouts, v.stale,
                       v.foreign, v.errors, v.far_answered, v.far_refused_peer, v.far_refused_invalid,
                       v.far_refused_rate, v.local_port, v.remote_port) for v in order], dtype=VISITS_DTYPE)
    return rtt, table


def sizes_table(est: LatencyEstimate) -> np.ndarray:
    """``latency/sizes``: every size's statistics and the per-round values the lines go through."""
    out = np.zeros(est.sizes.size, dtype=LATENCY_SIZES_DTYPE)
    for k, size in enumerate(est.sizes):
        s = est.stats[int(size)]
        p = s.percentiles_us
        row = {"size_bytes": size, "frames": est.frames[k], "count": s.count, "timeouts": s.timeouts,
               "min_us": s.min_us, "mean_us": s.mean_us, "median_us": s.median_us, "max_us": s.max_us,
               "std_us": s.std_us, "fwhm_us": s.fwhm_us, "fwhm_ci95_us": s.fwhm_ci95_us,
               **{f"p{q}_us": p[q] for q in (1, 5, 10, 25, 75, 90, 95, 99)}}
        for stat, key in STATISTIC_KEYS.items():
            known = stat in est.values
            row[f"round_{key}_us"] = est.values[stat][k] if known else math.nan
            row[f"round_{key}_ci95_us"] = est.values_ci95[stat][k] if known else math.nan
            row[f"round_{key}_suspect"] = int(est.suspect[stat][k]) if known else 0
        for name, value in row.items():
            out[k][name] = value
    return out


def fits_table(fits: list[LineFit]) -> np.ndarray:
    return np.array([(f.frames, f.points, f.rounds, f.slope_us_per_byte, f.slope_ci95, f.intercept_us,
                      f.intercept_ci95, f.r, f.r_squared, f.lack_of_fit_p) for f in fits], dtype=FIT_DTYPE)


def measured_latency(visits: Sequence[LatencyVisit], mtu: int, gap_ns: int = 0, step_ns: float = 1.0
                     ) -> tuple[np.ndarray, np.ndarray, LatencyEstimate]:
    """The singleton and visit tables of a run and the estimate made from the singletons, read to ``step_ns``."""
    from nicrig.analysis.latency import estimate

    rtt, table = latency_tables(visits, mtu, gap_ns)
    return rtt, table, estimate(rtt, mtu, step_ns=step_ns)


def write_latency(rf: ResultsFile, visits: Sequence[LatencyVisit], *, mtu: int, bin_us: float, gap_ns: int = 0,
                  prefix: str = "", wait: dict[str, dict[str, Any]] | None = None) -> LatencyEstimate:
    """Store every round trip and visit, and what :func:`nicrig.analysis.latency.estimate` derives from them:
    per-size statistics and histograms, the modes, and the lines on each statistic. Returns the estimate.

    ``wait`` says how each end ("local", "remote") waited for datagrams: ``busy_poll`` (spinning) and
    what the kernel granted of socket busy polling; it becomes the sizes table's ``wait_*`` attributes."""
    from nicrig.analysis import resolution
    from nicrig.analysis.latency import histogram

    rtt, table, est = measured_latency(visits, mtu, gap_ns, resolution.results(rf.simulation, "latency").step_ns)
    rf.write_table(f"{prefix}latency/rtt", rtt, units={"rtt_ns": "ns", "t_ns": "ns, CLOCK_MONOTONIC (interpolated)",
                                                       "size_bytes": "byte"},
                   description="every request-response singleton, in the order measured; rtt_ns -1: no response")
    rf.write_table(f"{prefix}latency/visits", table,
                   units={"start_ns": "ns, CLOCK_MONOTONIC", "end_ns": "ns, CLOCK_MONOTONIC", "size_bytes": "byte"},
                   description="one row per size and round: when it ran, what the near end skipped and the far "
                               "end refused")
    rf.write_table(f"{prefix}latency/sizes", sizes_table(est),
                   units={n: "us" for n in LATENCY_SIZES_DTYPE.names if n.endswith("_us")},
                   description="statistics per response size, and the per-round values the lines go through, "
                               "from latency/rtt",
                   attrs={"statistic": est.statistic, "reason": str(est.reason), "order": est.order,
                          "rounds": est.rounds, "interval": est.interval_method,
                          **{f"wait_{end}": "busy-poll" if w.get("busy_poll") else "blocking"
                             for end, w in (wait or {}).items()},
                          **{f"wait_{end}_detail": json.dumps(w, sort_keys=True) for end, w in (wait or {}).items()}})
    hist = []
    for size in est.sizes:
        ok = rtt["rtt_ns"][(rtt["size_bytes"] == size) & (rtt["rtt_ns"] >= 0)] / 1000.0
        edges, counts = histogram(ok, bin_us)
        hist += [(size, e, c) for e, c in zip(edges, counts)]
    rf.write_table(f"{prefix}latency/histogram", np.array(hist, dtype=[("size_bytes", "<i4"), ("bin_us", "<f8"),
                                                              ("count", "<i8")]),
                   units={"bin_us": "us (left edge)"}, attrs={"bin_width_us": bin_us},
                   description="RTT histogram per response size")
    rf.write_table(f"{prefix}latency/modes", np.array(
        [(m.location_us, m.offset_us, m.count, m.share, int(m.main)) for m in est.modes], dtype=MODES_DTYPE),
        units={"location_us": "us", "offset_us": "us"},
        attrs={"at_size_bytes": int(est.sizes[0]) if est.sizes.size else -1},
        description="modes of the round trips (host states): RTT at the smallest size, share of the round trips")
    for stat, key in STATISTIC_KEYS.items():
        if stat in est.fits:
            rf.write_table(f"{prefix}latency/fit_{key}", fits_table(est.fits[stat]),
                           attrs={"statistic": stat, "interval": est.interval_method},
                           description=f"RTT ({stat} of each visit) = intercept + slope x size, per frame count")
    return est


# -- stream ----------------------------------------------------------------------------------------

POINT_DTYPE = np.dtype([
    ("point", "<i4"), ("round", "<i4"), ("position", "<i4"), ("size_bytes", "<i4"), ("spacing_us", "<f8"),
    ("sent", "<i8"), ("received", "<i8"), ("lost", "<i8"), ("out_of_order", "<i8"), ("duplicates", "<i8"),
    ("foreign", "<i8"), ("kernel_drops", "<i8"), ("rxq_ovfl", "<i8"), ("max_lost_run", "<i8"), ("send_time_us", "<f8"),
    ("recv_time_us", "<f8"), ("send_rate_mbps", "<f8"), ("user_rate_mbps", "<f8"), ("user_rate_ci95_mbps", "<f8"),
    ("wire_rate_mbps", "<f8"), ("local_cpu_busy_pct", "<f8"), ("remote_cpu_busy_pct", "<f8"),
    ("local_interrupts", "<i8"), ("remote_interrupts", "<i8"), ("send_thread", "<i8"), ("recv_thread", "<i8"),
    ("local_port", "<i4"), ("remote_port", "<i4"),
])
SENT_DTYPE = np.dtype([("point", "<i4"), ("seq", "<i8"), ("due_ns", "<i8"), ("t_ns", "<i8")])
RECEIVED_DTYPE = np.dtype([("point", "<i4"), ("seq", "<i8"), ("kernel_ns", "<i8"), ("user_ns", "<i8"),
                           ("hw_ns", "<i8"), ("size_bytes", "<i4")])
LOST_RUNS_DTYPE = np.dtype([("point", "<i4"), ("run_length", "<i8"), ("count", "<i8")])
SPACING_DTYPE = np.dtype([("point", "<i4"), ("side", "S4"), ("bin_us", "<f8"), ("count", "<i8")])
RAW_DTYPES = {"sent": SENT_DTYPE, "received": RECEIVED_DTYPE, "lost_runs": LOST_RUNS_DTYPE, "spacing": SPACING_DTYPE}
STREAM_UNITS = {
    "points": {"spacing_us": "us", "send_time_us": "us", "recv_time_us": "us", "size_bytes": "byte",
               "send_rate_mbps": "Mbit/s", "user_rate_mbps": "Mbit/s", "user_rate_ci95_mbps": "Mbit/s",
               "wire_rate_mbps": "Mbit/s"},
    "sent": {"due_ns": "ns, CLOCK_MONOTONIC", "t_ns": "ns, CLOCK_MONOTONIC (-1: not sent)"},
    "received": {"kernel_ns": "ns, CLOCK_REALTIME (kernel RX timestamp, -1: none)",
                 "user_ns": "ns, CLOCK_MONOTONIC (when the receive call returned)",
                 "hw_ns": "ns, NIC clock (-1: none)", "size_bytes": "byte"},
    "lost_runs": {"run_length": "packets"},
    "spacing": {"bin_us": "us (left edge)"},
}
STREAM_ABOUT = {
    "points": "one row per point (a size and spacing in one round), from stream/sent and received",
    "sent": "every packet sent: when it was due (t0 + seq * spacing) and when it left",
    "received": "every datagram of the test the far host received, in arrival order",
    "lost_runs": "how many runs of consecutive lost packets had each length",
    "spacing": "histograms of the inter-packet spacing, sent and received",
}


@dataclass(frozen=True)
class StreamPoint:
    """One stream measured: a size and spacing in one round, its raw rows, and the hosts' figures around it.

    ``sent_ns``: each datagram's send time (-1: refused), due at ``t0_ns + seq
    x spacing``; ``seq``, ``kernel_ns`` (and optionally ``user_ns``, ``hw_ns``,
    ``size``): what the receiver recorded, in arrival order. CPU busy % NaN and
    interrupts -1 where unknown (a simulated run).
    """

    point: int
    round: int
    position: int
    size_bytes: int
    spacing_us: float
    count: int
    t0_ns: int
    sent_ns: np.ndarray
    seq: np.ndarray
    kernel_ns: np.ndarray
    user_ns: np.ndarray | None = None
    hw_ns: np.ndarray | None = None
    received_size: np.ndarray | None = None
    foreign: int = 0
    kernel_drops: int = -1
    rxq_ovfl: int = -1  # the receive socket's SO_RXQ_OVFL as its last datagram carried it; -1 unknown
    local_cpu_busy_pct: float = math.nan
    remote_cpu_busy_pct: float = math.nan
    local_interrupts: int = -1
    remote_interrupts: int = -1
    send_thread: int = -1  # thread ids of the engine loops that sent and received (a host trace's calls); -1 unknown
    recv_thread: int = -1
    local_port: int = -1  # the UDP ports of the stream's datagrams, the sender's and the receiver's (-1: unknown)
    remote_port: int = -1


def point_row(p: StreamPoint, *, link_rate_bps: float | None, mtu: int, wire_overhead: int) -> dict[str, Any]:
    """The ``stream/points`` row of a point, derived from its raw rows (sequence accounting: RFC 4737; the
    rates: :func:`nicrig.analysis.throughput.point_rates`)."""
    from nicrig.analysis.throughput import point_rates
    from nicrig.udpmon import sequence

    s = sequence.sequence_stats(p.seq, p.count)
    ok_sent = p.sent_ns[p.sent_ns >= 0]
    send_ns = float(ok_sent[-1] - ok_sent[0]) if len(ok_sent) > 1 else math.nan
    stamped = np.sort(p.kernel_ns[p.kernel_ns > 0])
    recv_ns = float(stamped[-1] - stamped[0]) if len(stamped) > 1 else math.nan
    rate, wire = point_rates(p.kernel_ns, p.seq, p.size_bytes, link_rate_bps=link_rate_bps, mtu=mtu,
                             wire_overhead_bytes=wire_overhead)
    return {
        "point": p.point, "round": p.round, "position": p.position, "size_bytes": p.size_bytes,
        "spacing_us": p.spacing_us, "sent": len(ok_sent), "received": s.received, "lost": s.lost,
        "out_of_order": s.out_of_order, "duplicates": s.duplicates, "foreign": p.foreign,
        "kernel_drops": p.kernel_drops, "rxq_ovfl": p.rxq_ovfl, "max_lost_run": int(max(s.lost_runs, default=0)),
        "send_time_us": send_ns / 1000, "recv_time_us": recv_ns / 1000,
        "send_rate_mbps": sequence.rate_bps(p.size_bytes, len(ok_sent) - 1, send_ns) / 1e6 if send_ns > 0
        else math.nan,
        "user_rate_mbps": rate.user_rate_mbps, "user_rate_ci95_mbps": rate.user_rate_ci95_mbps,
        "wire_rate_mbps": wire, "local_cpu_busy_pct": p.local_cpu_busy_pct,
        "remote_cpu_busy_pct": p.remote_cpu_busy_pct, "local_interrupts": p.local_interrupts,
        "remote_interrupts": p.remote_interrupts, "send_thread": p.send_thread, "recv_thread": p.recv_thread,
        "local_port": p.local_port, "remote_port": p.remote_port,
    }


def points_table(rows: Sequence[dict[str, Any]]) -> np.ndarray:
    return np.array([tuple(r[name] for name in POINT_DTYPE.names) for r in rows], dtype=POINT_DTYPE)


def _raw_rows(p: StreamPoint, bin_us: float) -> dict[str, np.ndarray]:
    """A point's ``sent``, ``received``, ``lost_runs`` and ``spacing`` rows."""
    from nicrig.udpmon import sequence

    sent = np.zeros(len(p.sent_ns), dtype=SENT_DTYPE)
    sent["point"], sent["seq"] = p.point, np.arange(len(p.sent_ns))
    sent["due_ns"] = p.t0_ns + np.arange(len(p.sent_ns), dtype=np.int64) * int(p.spacing_us * 1000)
    sent["t_ns"] = p.sent_ns
    recv = np.zeros(len(p.seq), dtype=RECEIVED_DTYPE)
    recv["point"], recv["seq"], recv["kernel_ns"] = p.point, p.seq, p.kernel_ns
    recv["user_ns"] = p.user_ns if p.user_ns is not None else -1
    recv["hw_ns"] = p.hw_ns if p.hw_ns is not None else -1
    recv["size_bytes"] = p.received_size if p.received_size is not None else p.size_bytes
    s = sequence.sequence_stats(p.seq, p.count)
    runs = np.array([(p.point, k, c) for k, c in enumerate(s.lost_run_histogram) if k > 0 and c > 0],
                    dtype=LOST_RUNS_DTYPE)
    spacing = []
    for side, times in (("send", p.sent_ns[p.sent_ns >= 0]), ("recv", p.kernel_ns[p.kernel_ns > 0])):
        if len(times) > 1:
            edges, counts = sequence.spacing_histogram(np.sort(times), int(bin_us * 1000))
            spacing += [(p.point, side.encode(), e / 1000, c) for e, c in zip(edges[:-1], counts) if c]
    return {"sent": sent, "received": recv, "lost_runs": runs, "spacing": np.array(spacing, dtype=SPACING_DTYPE)}


def write_stream(rf: ResultsFile, points: Sequence[StreamPoint], rows: Sequence[dict[str, Any]], *,
                 wire_overhead: int, bin_us: float, link_rate_bps: float | None, prefix: str = "") -> None:
    """Store a stream run: ``stream/points`` (``rows``, from :func:`point_row`) and every point's raw rows."""
    raw = [_raw_rows(p, bin_us) for p in points]
    rf.write_table(f"{prefix}stream/points", points_table(rows), units=STREAM_UNITS["points"],
                   description=STREAM_ABOUT["points"],
                   attrs={"wire_overhead_bytes": wire_overhead,
                          "link_mbps": link_rate_bps / 1e6 if link_rate_bps else math.nan})
    for name in RAW_DTYPES:
        parts = [r[name] for r in raw]
        rf.write_table(f"{prefix}stream/{name}", np.concatenate(parts) if parts else np.zeros(0, RAW_DTYPES[name]),
                       units=STREAM_UNITS[name], description=STREAM_ABOUT[name],
                       attrs={"bin_width_us": bin_us} if name == "spacing" else None)
