"""The ``load`` tables of udpmon results: Geist et al. n.d.'s CPU-model inputs per host, and its metrics per sweep step.

Every udpmon run (format version 2) keeps, per point and host, the kernel CPU
time (system + irq + softirq jiffies), the interface's megabytes and
kilo-packets and the kilo-interrupts: the inputs of Geist et al. n.d.'s model
``T = alpha N_MB + beta N_KP + gamma N_KI`` (:func:`nicrig.analysis.cpu.fit_cpu_model`).
Geist et al. n.d. judges interrupt-delay settings by interrupts per second, packets
per interrupt, throughput and system CPU: :func:`host_metrics` gives those
for the rows of one sweep step and host.

Version 1 stream files have no ``load`` table; :func:`receiver_load` builds
its rows for the receiving host from ``stream/points`` and the counters, so
both read alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from nicrig.udpmon.results import LOAD_DTYPE

from nicrig.analysis import cpu

#: The columns the CPU model needs.
MODEL_COLUMNS = ("kernel_jiffies", "megabytes", "kilo_packets", "kilo_interrupts")


def receiver_load(points: np.ndarray, remote_deltas: dict[int, dict[str, Any]]) -> np.ndarray:
    """``load`` rows (host ``remote``) of a version-1 stream file; megabytes are the payload received.

    Columns the old file cannot give (interval, jiffies by kind, throughput) are NaN.
    """
    runs = cpu.receiver_runs(points, remote_deltas)
    rows = np.zeros(len(points), dtype=LOAD_DTYPE)
    for name in LOAD_DTYPE.names:
        if LOAD_DTYPE[name].kind == "f":
            rows[name] = math.nan
    rows["point"], rows["host"], rows["clk_tck"] = runs.point, b"remote", -1
    rows["kernel_jiffies"], rows["megabytes"] = runs.kernel_jiffies, runs.n_mbytes
    rows["kilo_packets"], rows["kilo_interrupts"] = runs.n_kpackets, runs.n_kinterrupts
    rows["interrupt_source"] = np.where(np.isfinite(runs.n_kinterrupts), b"interface", b"none")
    rows["throughput_mbps"] = points["user_rate_mbps"]
    return rows


def as_load(table: np.ndarray) -> np.ndarray:
    """A ``load`` table with exactly this nicrig's columns (a newer file's extra ones dropped), so files pool.

    ValueError naming the columns a table lacks.
    """
    missing = [n for n in LOAD_DTYPE.names if n not in (table.dtype.names or ())]
    if missing:
        raise ValueError(f"load table lacks {', '.join(missing)}")
    out = np.zeros(len(table), dtype=LOAD_DTYPE)
    for name in LOAD_DTYPE.names:
        out[name] = table[name]
    return out


def by_host(load: np.ndarray) -> dict[str, np.ndarray]:
    """A ``load`` table's rows per host label, in the order the hosts first appear."""
    return {h.decode(): load[load["host"] == h] for h in dict.fromkeys(load["host"])}


def fit(rows: np.ndarray) -> cpu.CpuModelFit:
    """Geist et al. n.d.'s model over ``load`` rows (one host): UsageError when too few or too alike to fit."""
    return cpu.fit_cpu_model(*(rows[c] for c in MODEL_COLUMNS))


def interrupt_sources(rows: np.ndarray) -> set[str]:
    """Where the rows' interrupt counts came from: ``interface``, ``host`` (the whole host's) or ``none``."""
    return {s.decode() for s in rows["interrupt_source"]}


@dataclass(frozen=True)
class HostMetrics:
    """Geist et al. n.d.'s metrics of one host over some points (a sweep step's): sums over them, then ratios.

    ``kernel_cpu_pct`` is kernel time per elapsed time, in % of one CPU
    (jiffies count every CPU: 200 % is two CPUs busy in the kernel).
    """

    points: int
    interval_s: float
    throughput_mbps: float
    interrupts_per_s: float
    packets_per_interrupt: float
    kernel_cpu_pct: float
    kernel_jiffies_per_mbyte: float


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 and math.isfinite(a) and math.isfinite(b) else math.nan


def host_metrics(rows: np.ndarray) -> HostMetrics:
    """Interrupts per second, packets per interrupt, kernel CPU and mean throughput over ``load`` rows of one host."""
    interval = float(np.sum(rows["interval_s"]))
    kernel = float(np.sum(rows["kernel_jiffies"]))
    kilo_irq = float(np.sum(rows["kilo_interrupts"]))
    tck = rows["clk_tck"][rows["clk_tck"] > 0]
    thr = rows["throughput_mbps"][np.isfinite(rows["throughput_mbps"])]
    return HostMetrics(
        points=len(rows), interval_s=interval, throughput_mbps=float(np.mean(thr)) if thr.size else math.nan,
        interrupts_per_s=_ratio(1000 * kilo_irq, interval),
        packets_per_interrupt=_ratio(float(np.sum(rows["kilo_packets"])), kilo_irq),
        kernel_cpu_pct=_ratio(100 * kernel, float(tck[0]) * interval) if tck.size else math.nan,
        kernel_jiffies_per_mbyte=_ratio(kernel, float(np.sum(rows["megabytes"]))))
