"""udpmon results files: every singleton measured, the statistics derived from them, and host counters.

The second nicrig file kind (``docs/formats.md``): an HDF5 file with
``format = "nicrig-results"``, the run's settings in root attributes, and
tables. Every number a summary shows is derived from raw rows kept in the
same file: round-trip singletons (``latency/rtt``), send times and received
datagrams of every stream point (``stream/sent``, ``stream/received``).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from typing import Any

import h5py
import numpy as np
from nicrig.analysis.latency import (
    LineFit,
    RttStats,
    frames_per_message,
    histogram,
)

from nicrig.h5file import NicrigFile, to_json

LATENCY_SIZES_DTYPE = np.dtype([
    ("size_bytes", "<i4"), ("frames", "<i2"), ("count", "<i4"), ("timeouts", "<i4"),
    ("min_us", "<f8"), ("mean_us", "<f8"), ("median_us", "<f8"), ("max_us", "<f8"), ("std_us", "<f8"),
    ("p1_us", "<f8"), ("p5_us", "<f8"), ("p10_us", "<f8"), ("p25_us", "<f8"), ("p75_us", "<f8"),
    ("p90_us", "<f8"), ("p95_us", "<f8"), ("p99_us", "<f8"), ("fwhm_us", "<f8"),
])
FIT_DTYPE = np.dtype([
    ("frames", "<i2"), ("points", "<i4"), ("slope_us_per_byte", "<f8"), ("slope_ci95", "<f8"),
    ("intercept_us", "<f8"), ("intercept_ci95", "<f8"), ("r", "<f8"),
])
ENGINE_COUNTS_DTYPE = np.dtype([
    ("size_bytes", "<i4"), ("timeouts", "<i8"), ("stale", "<i8"), ("foreign", "<i8"), ("errors", "<i8"),
    ("far_answered", "<i8"), ("far_refused_peer", "<i8"), ("far_refused_invalid", "<i8"),
    ("far_refused_rate", "<i8"),
])
COUNTERS_DTYPE = np.dtype([("point", "<i4"), ("host", "S6"), ("when", "S6"), ("json", h5py.string_dtype())])
#: ``load``: seed 004's CPU model inputs per point and host (:func:`nicrig.udpmon.counters.load_figures`).
LOAD_DTYPE = np.dtype([
    ("point", "<i4"), ("host", "S6"), ("interval_s", "<f8"), ("clk_tck", "<i4"),
    ("user_jiffies", "<f8"), ("nice_jiffies", "<f8"), ("system_jiffies", "<f8"), ("idle_jiffies", "<f8"),
    ("iowait_jiffies", "<f8"), ("irq_jiffies", "<f8"), ("softirq_jiffies", "<f8"), ("steal_jiffies", "<f8"),
    ("kernel_jiffies", "<f8"), ("busy_jiffies", "<f8"), ("megabytes", "<f8"), ("kilo_packets", "<f8"),
    ("kilo_interrupts", "<f8"), ("interrupt_source", "S9"), ("throughput_mbps", "<f8"),
])
HOSTS_DTYPE = np.dtype([("host", "S6"), ("address", "S46"), ("port", "<i4"), ("interface", "S16"),
                        ("given_as", "S64")])


class ResultsFile(NicrigFile):
    """An open udpmon results file (see :class:`nicrig.h5file.NicrigFile` for opening and tables)."""

    FORMAT_NAME = "nicrig-results"
    #: 2: kinds suite and aggregate, the sweep/ group, the load and hosts tables (version 1 files read as before).
    FORMAT_VERSION = 2

    def set_run(self, kind: str, *, peer: str, argv: Sequence[str], settings: dict[str, Any],
                remote: dict[str, Any]) -> None:
        """Record what was run, against whom, from where."""
        self.attrs["kind"] = kind
        self.attrs["peer"] = peer
        self.attrs["command"] = to_json(list(argv))
        self.attrs["settings"] = to_json(settings)
        self.attrs["local_host"] = to_json({"hostname": socket.gethostname(), "uname": " ".join(_uname())})
        self.attrs["remote"] = to_json(remote)

    @property
    def run_kind(self) -> str:
        """``latency``, ``stream``, ``suite`` or ``aggregate``."""
        return str(self.attrs.get("kind", ""))

    def write_counters(self, rows: list[tuple[int, str, str, dict[str, Any]]], prefix: str = "") -> None:
        """Host counters: (point, host label, "before"|"after"|"delta", counters), at ``prefix`` + ``counters``."""
        table = np.array([(p, h.encode(), w.encode(), json.dumps(c, sort_keys=True, default=str))
                          for p, h, w, c in rows], dtype=COUNTERS_DTYPE)
        self.write_table(f"{prefix}counters", table, description="host counters of every end (JSON), per test point")

    def counters(self, prefix: str = "") -> list[tuple[int, str, str, dict[str, Any]]]:
        return [(int(r["point"]), r["host"].decode(), r["when"].decode(),
                 json.loads(r["json"].decode() if isinstance(r["json"], bytes) else r["json"]))
                for r in self.read_table(f"{prefix}counters")]


def _uname() -> tuple[str, ...]:
    import os

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


def stats_row(size: int, mtu: int, s: RttStats) -> tuple:
    p = s.percentiles_us
    return (size, frames_per_message(size, mtu), s.count, s.timeouts, s.min_us, s.mean_us, s.median_us, s.max_us,
            s.std_us, p[1], p[5], p[10], p[25], p[75], p[90], p[95], p[99], s.fwhm_us)


def fits_table(fits: list[LineFit]) -> np.ndarray:
    return np.array([(f.frames, f.points, f.slope_us_per_byte, f.slope_ci95, f.intercept_us, f.intercept_ci95, f.r)
                     for f in fits], dtype=FIT_DTYPE)


def write_latency(rf: ResultsFile, rtt_ns: dict[int, np.ndarray], stats: dict[int, RttStats],
                  fits: tuple[list[LineFit], list[LineFit]], *, mtu: int, bin_us: float, prefix: str = "") -> None:
    """Store every round trip, the per-size statistics and histograms, and the fits on minimum and mean."""
    sizes = sorted(rtt_ns)
    rows = np.zeros(sum(len(rtt_ns[s]) for s in sizes),
                    dtype=[("size_bytes", "<i4"), ("frames", "<i2"), ("seq", "<i4"), ("rtt_ns", "<i8")])
    at = 0
    for s in sizes:
        n = len(rtt_ns[s])
        rows[at:at + n] = [(s, frames_per_message(s, mtu), i, v) for i, v in enumerate(rtt_ns[s])]
        at += n
    rf.write_table(f"{prefix}latency/rtt", rows, units={"rtt_ns": "ns", "size_bytes": "byte"},
                   description="every request-response singleton; rtt_ns -1: no response in time")
    table = np.array([stats_row(s, mtu, stats[s]) for s in sizes], dtype=LATENCY_SIZES_DTYPE)
    rf.write_table(f"{prefix}latency/sizes", table, units={n: "us" for n in table.dtype.names if n.endswith("_us")},
                   description="statistics per response size, from latency/rtt")
    hist = []
    for s in sizes:
        ok = rtt_ns[s][rtt_ns[s] >= 0] / 1000.0
        edges, counts = histogram(ok, bin_us)
        hist += [(s, e, c) for e, c in zip(edges, counts)]
    rf.write_table(f"{prefix}latency/histogram", np.array(hist, dtype=[("size_bytes", "<i4"), ("bin_us", "<f8"),
                                                              ("count", "<i8")]),
                   units={"bin_us": "us (left edge)"}, attrs={"bin_width_us": bin_us},
                   description="RTT histogram per response size")
    rf.write_table(f"{prefix}latency/fit_min", fits_table(fits[0]), description="RTT minimum vs size, per frame count")
    rf.write_table(f"{prefix}latency/fit_mean", fits_table(fits[1]), description="RTT mean vs size, per frame count")
