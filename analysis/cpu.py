"""Where the CPU time goes (Geist et al. n.d.) and which microbenchmarks predict applications (Pai, Rixner and
Kim 2004, Table 2).

Geist et al. n.d.'s model of a receiving host's kernel CPU time over a transfer:

    T = alpha * N_MB + beta * N_KP + gamma * N_KI

with N_MB megabytes moved, N_KP thousands of packets and N_KI thousands of
interrupts; alpha is the per-megabyte cost (copies, checksums), beta the
per-packet protocol cost, gamma the per-interrupt cost (context switches).
For TCP the seed found alpha ~0.1, beta ~0.4, gamma ~1.4 jiffies. Fitted here
by least squares without intercept over a set of runs, with standard errors
and 95% intervals from the residual variance.

Pai, Rixner and Kim 2004, §4 relates microbenchmark throughputs to application
throughputs across NICs with Pearson correlation coefficients (MATLAB's
``corrcoef``, Table 2): :func:`correlation` computes that matrix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from nicrig.errors import UsageError

#: Jiffies of kernel work in /proc/stat: time in system mode and in interrupt handlers.
KERNEL_JIFFIES = ("system", "irq", "softirq")


@dataclass(frozen=True)
class CpuModelFit:
    """alpha (per MB), beta (per 1000 packets), gamma (per 1000 interrupts), in ``unit`` (e.g. jiffies)."""

    unit: str
    runs: int
    alpha_per_mbyte: float
    beta_per_kpacket: float
    gamma_per_kinterrupt: float
    alpha_stderr: float
    beta_stderr: float
    gamma_stderr: float
    alpha_ci95: float
    beta_ci95: float
    gamma_ci95: float
    r_squared: float
    predicted: np.ndarray
    observed: np.ndarray


def fit_cpu_model(cpu_time: np.ndarray, n_mbytes: np.ndarray, n_kpackets: np.ndarray,
                  n_kinterrupts: np.ndarray, unit: str = "jiffies") -> CpuModelFit:
    """Fit Geist et al. n.d.'s T = alpha N_MB + beta N_KP + gamma N_KI over runs (one element of each array per run).

    Needs more runs than parameters (4+) and runs that vary independently
    (different sizes and interrupt rates); otherwise a clear error.
    """
    y = np.asarray(cpu_time, dtype=np.float64)
    x = np.column_stack([np.asarray(a, dtype=np.float64) for a in (n_mbytes, n_kpackets, n_kinterrupts)])
    if x.shape[0] != y.size:
        raise UsageError("CPU model: one CPU time per run, and as many runs for every count")
    keep = np.isfinite(y) & np.isfinite(x).all(axis=1)
    y, x = y[keep], x[keep]
    if y.size < 4:
        raise UsageError(f"CPU model: {y.size} usable run{'' if y.size == 1 else 's'}; need at least 4 for three "
                         "parameters and their errors")
    if np.linalg.matrix_rank(x) < 3:
        raise UsageError("CPU model: megabytes, packets and interrupts do not vary independently over these runs "
                         "(vary the packet size and the interrupt coalescence)")
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    predicted = x @ coef
    dof = y.size - 3
    resid = y - predicted
    sigma2 = float(resid @ resid) / dof
    se = np.sqrt(np.diag(sigma2 * np.linalg.inv(x.T @ x)))
    t = stats.t.ppf(0.975, dof)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - float(resid @ resid) / total if total > 0 else math.nan
    return CpuModelFit(unit, int(y.size), *map(float, coef), *map(float, se), *map(float, t * se), r2, predicted, y)


def cpu_per_mbyte(alpha: float, beta: float, gamma: float, mtu_bytes: float, packets_per_interrupt: float) -> float:
    """Geist et al. n.d.: T per MB = alpha + 1000/MTU beta + 1000/(MTU PPI) gamma (the payload per packet being the
    MTU)."""
    return alpha + 1000 / mtu_bytes * beta + 1000 / (mtu_bytes * packets_per_interrupt) * gamma


def kernel_jiffies(delta: dict[str, Any]) -> float:
    """Kernel CPU time (jiffies, all CPUs) in a udpmon counters delta; NaN when the host could not give it."""
    try:
        jiffies = delta["cpu"]["total"]["jiffies"]
        return float(sum(jiffies[k] for k in KERNEL_JIFFIES))
    except (KeyError, TypeError):
        return math.nan


@dataclass(frozen=True)
class CpuRuns:
    """Per run (stream point): the receiver's kernel CPU time and what it moved."""

    point: np.ndarray
    size_bytes: np.ndarray
    kernel_jiffies: np.ndarray
    n_mbytes: np.ndarray
    n_kpackets: np.ndarray
    n_kinterrupts: np.ndarray


def receiver_runs(points: np.ndarray, remote_deltas: dict[int, dict[str, Any]]) -> CpuRuns:
    """The receiving host's runs from a ``stream/points`` table and its counter deltas (point -> delta).

    Megabytes and packets are those received; interrupts those the results
    file counted for the receiver (``remote_interrupts``; NaN when unknown).
    """
    jiffies = np.array([kernel_jiffies(remote_deltas.get(int(p), {})) for p in points["point"]])
    received = points["received"].astype(np.float64)
    irq = np.where(points["remote_interrupts"] >= 0, points["remote_interrupts"], np.nan).astype(np.float64)
    return CpuRuns(points["point"].astype(np.int64), points["size_bytes"].astype(np.int64), jiffies,
                   received * points["size_bytes"] / 1e6, received / 1000, irq / 1000)


@dataclass(frozen=True)
class Correlation:
    """Pearson coefficients: rows are microbenchmarks, columns applications (Pai, Rixner and Kim 2004 Table 2)."""

    benchmarks: tuple[str, ...]
    applications: tuple[str, ...]
    coefficients: np.ndarray
    items: int


def correlation(columns: dict[str, np.ndarray], benchmarks: list[str], applications: list[str]) -> Correlation:
    """Correlation of each benchmark column with each application column over the items (NICs) measured.

    A column that does not vary has no correlation (NaN), as ``corrcoef`` gives.
    """
    missing = [n for n in benchmarks + applications if n not in columns]
    if missing:
        raise UsageError(f"correlation: no column(s) {missing} (columns: {sorted(columns)})")
    if not benchmarks or not applications:
        raise UsageError("correlation: needs at least one benchmark and one application column")
    n = len(next(iter(columns.values())))
    if n < 3:
        raise UsageError(f"correlation: {n} items; need at least 3 to correlate")
    data = np.vstack([np.asarray(columns[c], dtype=np.float64) for c in benchmarks + applications])
    if not np.isfinite(data).all():
        raise UsageError("correlation: every cell must be a number")
    with np.errstate(invalid="ignore", divide="ignore"):
        full = np.corrcoef(data)
    return Correlation(tuple(benchmarks), tuple(applications), full[:len(benchmarks), len(benchmarks):], n)
