"""Pai, Rixner and Kim's (2004) microbenchmarks and many-host aggregates, rebuilt from the flows a udpmon results
file keeps.

``nicrig udpmon suite`` searches each of Pai, Rixner and Kim 2004's ten tests (section 3.3)
for its highest loss-free rate and keeps every trial (``suite/trials``) and
every flow with its raw counts and first and last arrival times
(``suite/flows``). Here each trial is rebuilt from its flows, the best trial
is chosen by the suite's own rule (:func:`nicrig.udpmon.suite.best`) and its
throughput set against the theoretical maximum at the link rate and MTU the
table records — the numbers of Pai, Rixner and Kim 2004's figures 5 to 11. Across several
runs (NICs, files, sweep steps) the tests' throughputs are what Pai, Rixner and Kim 2004's
Table 2 correlates (:func:`throughput_columns`).

``nicrig udpmon aggregate`` runs one flow per daemon at once; its flows are
rebuilt the same way and totalled as udpmon totals them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nicrig.udpmon import flows as F
from nicrig.udpmon import suite as S


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def flows_from_table(rows: np.ndarray) -> list[F.Flow]:
    """``suite/flows`` or ``aggregate/flows`` rows as flows (their rates follow from the raw columns)."""
    return [F.Flow(label=_text(r["host"]), direction=_text(r["direction"]), protocol=_text(r["protocol"]),
                   size_bytes=int(r["size_bytes"]), connections=int(r["connections"]), sent=int(r["sent"]),
                   received=int(r["received"]), lost=int(r["lost"]), bytes=int(r["bytes"]),
                   first_ns=int(r["first_ns"]), last_ns=int(r["last_ns"]), clock=_text(r["clock"]),
                   kernel_drops=int(r["kernel_drops"])) for r in rows]


@dataclass(frozen=True)
class Benchmark:
    """One test of a suite run: its best trial (Pai, Rixner and Kim 2004 figures 5-11) against the theoretical maximum.

    ``throughput`` is Mbit/s of payload or connections per millisecond
    (``unit``), summed over the best trial's flows; ``offered`` is that
    trial's offered load in ``offered_unit`` (datagrams/s or connections/s
    per flow, or the number of TCP connections). ``stored_throughput`` is what
    udpmon wrote in ``suite/tests``, which ``throughput`` reproduces.
    """

    name: str
    title: str
    paper_test: int
    figures: str
    unit: str
    size_bytes: int
    theoretical: float
    trials: int
    best_point: int
    offered: float
    offered_unit: str
    throughput: float
    lossless: bool
    sent: int
    lost: int
    limited_by: str
    status: str
    stored_throughput: float

    @property
    def percent_of_theoretical(self) -> float:
        return 100.0 * self.throughput / self.theoretical if self.theoretical > 0 else math.nan

    @property
    def loss_pct(self) -> float:
        """Share of the best trial's datagrams (or connection attempts) lost, %; NaN when it sent none."""
        return 100.0 * self.lost / self.sent if self.sent > 0 else math.nan

    @property
    def best_loss_free_offered(self) -> float:
        """The highest offered load that lost nothing (NaN when no trial was loss-free)."""
        return self.offered if self.lossless else math.nan


TESTS_BY_NAME = {t.name: t for t in S.TESTS}


def benchmarks(tests: np.ndarray, trials: np.ndarray, flows: np.ndarray, *, link_mbps: float,
                 mtu: int) -> list[Benchmark]:
    """Every test of ``suite/tests`` rebuilt from ``suite/trials`` and ``suite/flows``.

    ``link_mbps`` and ``mtu`` are the tables' attributes: the theoretical
    maximum is recomputed from them (:func:`nicrig.udpmon.suite.theoretical`).
    A test name this nicrig does not know is refused (ValueError).
    """
    out = []
    for row in tests:
        name = _text(row["test"])
        test = TESTS_BY_NAME.get(name)
        if test is None:
            raise ValueError(f"suite/tests: unknown test {name!r} (known: {', '.join(TESTS_BY_NAME)})")
        built = []
        for t in trials[trials["test"] == row["test"]]:
            mine = flows_from_table(flows[flows["point"] == t["point"]])
            built.append(S.Trial(name, int(t["trial"]), int(t["point"]), float(t["offered"]), tuple(mine), test.unit))
        best = S.best(built)
        out.append(Benchmark(
            name=name, title=test.title, paper_test=test.paper_test, figures=test.figures, unit=test.unit,
            size_bytes=test.size_bytes, theoretical=S.theoretical(test, link_mbps, mtu), trials=len(built),
            best_point=best.point if best else -1, offered=best.offered if best else math.nan,
            offered_unit=S.offered_unit(test), throughput=best.throughput if best else math.nan,
            lossless=bool(best is not None and best.lossless), sent=sum(f.sent for f in best.flows) if best else 0,
            lost=best.lost if best else 0, limited_by=_text(row["limited_by"]), status=_text(row["status"]),
            stored_throughput=float(row["throughput"])))
    return out


def disagreements(results: Sequence[Benchmark], rel: float = 1e-9) -> list[str]:
    """Tests whose rebuilt throughput differs from the one udpmon stored (none in a sound file)."""
    return [r.name for r in results
            if not (math.isnan(r.throughput) and math.isnan(r.stored_throughput))
            and not math.isclose(r.throughput, r.stored_throughput, rel_tol=rel)]


def throughput_columns(runs: Sequence[tuple[str, Sequence[Benchmark]]]
                       ) -> tuple[dict[str, np.ndarray], list[str]]:
    """Pai, Rixner and Kim 2004 Table 2's input: one throughput column per test, one item per run (file or sweep step).

    Only tests measured in every run go in (a column with a gap has no
    correlation); the second value names the tests left out.
    """
    names = list(dict.fromkeys(r.name for _, results in runs for r in results))
    table = {n: np.array([next((r.throughput for r in results if r.name == n), math.nan) for _, results in runs])
             for n in names}
    kept = {n: v for n, v in table.items() if np.isfinite(v).all()}
    return kept, [n for n in names if n not in kept]


@dataclass(frozen=True)
class Aggregate:
    """An aggregate run: its flows (one per daemon) and their total, as ``nicrig udpmon aggregate`` totals them."""

    flows: tuple[F.Flow, ...]
    sum_rate_mbps: float
    span_rate_mbps: float
    sent: int
    received: int
    lost: int


def aggregate(flows: np.ndarray) -> Aggregate:
    """The ``aggregate/flows`` rows rebuilt, with the sum of their rates and the rate over their common span."""
    from nicrig.udpmon.command import aggregate_total

    built = flows_from_table(flows)
    if not built:
        raise ValueError("aggregate/flows: no flow")
    total = aggregate_total(built)
    return Aggregate(tuple(built), float(total["sum_rate_mbps"]), float(total["span_rate_mbps"]),
                     int(total["sent"]), int(total["received"]), int(total["lost"]))


@dataclass(frozen=True)
class SuiteRun:
    """One suite run (or sweep step): its tests rebuilt, and the link and MTU their maxima assume."""

    benchmarks: tuple[Benchmark, ...]
    link_mbps: float
    link_source: str
    mtu: int

    @property
    def line_rate_known(self) -> bool:
        """Whether the interface stated a line rate; udpmon assumes one for its rate search where it states none
        (loopback, veth), and no throughput is compared with such an assumption."""
        return not self.link_source.startswith("assumed")


def suite_run(tests: np.ndarray, trials: np.ndarray, flows: np.ndarray, attrs: dict[str, Any]) -> SuiteRun:
    """A suite run from its three tables and the ``link_mbps``, ``link_source`` and ``mtu`` of ``suite/tests``."""
    try:
        link, mtu = float(attrs["link_mbps"]), int(attrs["mtu"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("suite/tests lacks its link_mbps and mtu attributes") from None
    if not link > 0 or mtu < 68:
        raise ValueError(f"suite/tests: link_mbps {link} and mtu {mtu} cannot be a link's")
    return SuiteRun(tuple(benchmarks(tests, trials, flows, link_mbps=link, mtu=mtu)), link,
                    _text(attrs.get("link_source", "")), mtu)
