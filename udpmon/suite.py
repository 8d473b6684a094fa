"""``nicrig udpmon suite``: the ten NIC microbenchmarks of Pai, Rixner and Kim 2004, each searched for its highest
loss-free rate.

Pai, Rixner and Kim (2004, §3.3) isolate a NIC's behaviour with ten
tests: UDP send, receive and 3-way (send to one host while receiving from
another) with 1472- and 18-byte datagrams (maximum- and minimum-sized
Ethernet frames), TCP send and receive of maximum-sized segments over several
connections handled by one process, and TCP connection acceptance and
initiation. "All of the UDP and connection microbenchmarks can be throttled
using a rate parameter ... The throttling and connection parameters for the
maximum achievable throughput are selected through iterative search." Each
result is shown against the theoretical maximum at the link rate (957, 1914,
214, 428 and 949 Mbit/s at 1 Gbit/s), as in the paper's figures 5 to 11.

The host running the suite is the host under test; ``--peer`` runs a daemon
that sends to it, receives from it and accepts or opens connections;
``--third`` is the second partner the 3-way tests need.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from nicrig.analysis.quantity import number
from nicrig.udpmon import flows as F
from nicrig.udpmon.sequence import MIN_WIRE_BYTES, WIRE_OVERHEAD_BYTES

MBPS = "Mbit/s"
CONN_PER_MS = "conn/ms"
#: IPv4 (20) + TCP (20) headers: MSS = MTU - 40 (Pai, Rixner and Kim 2004: 1460-byte segments at MTU 1500).
TCP_IP_HEADER_BYTES = 40
#: A 1460-byte segment occupies 1538 bytes of the wire (Pai, Rixner and Kim 2004, test 7): 78 beyond the segment.
TCP_WIRE_OVERHEAD_BYTES = 78
#: Wire bytes one connection opened and closed costs in its busier direction (initiator to acceptor):
#: SYN with options (78-byte frame, 98 on the wire), ACK, ACK of the acceptor's FIN, FIN (84 each).
CONNECTION_WIRE_BYTES = 98 + 3 * 84


@dataclass(frozen=True)
class Test:
    """One of Pai, Rixner and Kim's (2004) ten microbenchmarks (section 3.3), with the figures that show it."""

    name: str
    title: str
    paper_test: int
    figures: str
    kind: str          # udp-send, udp-recv, udp-3way, tcp-send, tcp-recv, tcp-accept, tcp-initiate
    size_bytes: int    # UDP payload (TCP: the segment at MTU 1500; 0 for connections)

    @property
    def unit(self) -> str:
        return CONN_PER_MS if self.kind in ("tcp-accept", "tcp-initiate") else MBPS


TESTS = (
    Test("udp-send-1472", "UDP send, 1472-byte datagrams", 1, "5, 6", "udp-send", 1472),
    Test("udp-recv-1472", "UDP receive, 1472-byte datagrams", 2, "5, 6", "udp-recv", 1472),
    Test("udp-3way-1472", "UDP 3-way, 1472-byte datagrams", 3, "9", "udp-3way", 1472),
    Test("udp-send-18", "UDP send, 18-byte datagrams", 4, "7, 8", "udp-send", 18),
    Test("udp-recv-18", "UDP receive, 18-byte datagrams", 5, "7, 8", "udp-recv", 18),
    Test("udp-3way-18", "UDP 3-way, 18-byte datagrams", 6, "10", "udp-3way", 18),
    Test("tcp-send", "TCP send, 1460-byte segments", 7, "5, 6", "tcp-send", 1460),
    Test("tcp-recv", "TCP receive, 1460-byte segments", 8, "5, 6", "tcp-recv", 1460),
    Test("tcp-accept", "TCP connection accept", 9, "11", "tcp-accept", 0),
    Test("tcp-initiate", "TCP connection initiate", 10, "11", "tcp-initiate", 0),
)
TEST_NAMES = tuple(t.name for t in TESTS)


# ----------------------------------------------------------------------------- arithmetic


def udp_wire_bytes(payload_bytes: int) -> int:
    """Byte times one UDP datagram occupies on Ethernet: payload + 66, at least 84 (Pai, Rixner and Kim 2004, §3.3)."""
    return max(payload_bytes + WIRE_OVERHEAD_BYTES, MIN_WIRE_BYTES)


def tcp_segment_bytes(mtu: int) -> int:
    """The TCP payload of a maximum-sized segment at ``mtu`` (no TCP options, as Pai, Rixner and Kim 2004
    count them)."""
    return mtu - TCP_IP_HEADER_BYTES


def theoretical(test: Test, link_mbps: float, mtu: int = 1500) -> float:
    """The most a perfect NIC could achieve at ``link_mbps``: Mbit/s of payload, or connections per ms.

    UDP: ``link * payload / wire bytes`` (1472: 957, 18: 214 at 1000), twice
    that for 3-way (full duplex: 1914, 428); TCP: ``link * segment / (segment
    + 78)`` with ``segment = mtu - 40`` (949 at MTU 1500); connections:
    ``link / (8 * 350 bytes)``, the frames one connection needs in its busier
    direction (nicrig's bound; Pai, Rixner and Kim 2004 state none).
    """
    if test.kind.startswith("udp"):
        one = link_mbps * test.size_bytes / udp_wire_bytes(test.size_bytes)
        return 2 * one if test.kind == "udp-3way" else one
    if test.kind in ("tcp-send", "tcp-recv"):
        seg = tcp_segment_bytes(mtu)
        return link_mbps * seg / (seg + TCP_WIRE_OVERHEAD_BYTES)
    return link_mbps * 1e6 / (8 * CONNECTION_WIRE_BYTES) / 1000


def max_rate_per_s(test: Test, link_mbps: float) -> float:
    """Packets (UDP, per flow) or connections per second at the theoretical maximum."""
    if test.kind.startswith("udp"):
        return link_mbps * 1e6 / (8 * udp_wire_bytes(test.size_bytes))
    return link_mbps * 1e6 / (8 * CONNECTION_WIRE_BYTES)


# ----------------------------------------------------------------------------- search


@dataclass(frozen=True)
class Trial:
    """One measurement of a test at one offered load.

    ``offered``: datagrams per second per flow (UDP), connections per second
    (connection tests) or connections (TCP bulk tests). ``point`` numbers it
    in the results file (the ``counters`` and ``load`` tables).
    """

    test: str
    index: int
    point: int
    offered: float
    flows: tuple[F.Flow, ...]
    unit: str

    @property
    def lossless(self) -> bool:
        return all(f.lossless for f in self.flows)

    @property
    def lost(self) -> int:
        return sum(f.lost for f in self.flows)

    @property
    def throughput(self) -> float:
        """Mbit/s of payload summed over the flows, or connections per millisecond."""
        if self.unit == CONN_PER_MS:
            return sum(f.rate_per_s for f in self.flows) / 1000
        return sum(f.rate_mbps for f in self.flows)

    @property
    def delivered_per_s(self) -> float:
        """The slowest flow's arrivals per second: what the offered rate could have been without loss."""
        return min(f.rate_per_s for f in self.flows)


def search_rate(trial: Callable[[float], Trial], *, start: float, hi: float, tolerance: float,
                max_trials: int) -> list[Trial]:
    """Trials for the highest loss-free rate in (0, ``hi``], as Pai, Rixner and Kim 2004 selected their throttling
    rates.

    The first trial runs at ``start``. While trials are loss-free and no
    loss has been seen, the rate doubles (up to ``hi``, where the search
    ends if that too is loss-free). After a lossy trial the rate goes just
    under (by ``tolerance``) what that trial delivered, an estimate of what
    the host sustains, when that lies between the best loss-free rate ``lo``
    and the lossy one, else to their midpoint. After a loss-free trial below a lossy one, the rate steps
    up from ``lo`` by ``2 * tolerance``, doubling the step while trials stay
    loss-free, never past the midpoint. The search ends when the lowest lossy
    and the highest loss-free rates are within ``tolerance`` (relative) of
    each other, or after ``max_trials``.
    """
    trials: list[Trial] = []
    lo, bad = 0.0, math.inf
    rate = min(start, hi)
    step = 2 * tolerance
    while len(trials) < max_trials:
        t = trial(rate)
        trials.append(t)
        if t.lossless:
            lo = max(lo, rate)
            if bad == math.inf:
                if rate >= hi:
                    break
                rate = min(hi, 2 * rate)
                continue
        else:
            bad = min(bad, rate)
        if bad - lo <= tolerance * bad:
            break
        if t.lossless:
            rate = min((lo + bad) / 2, lo * (1 + step))
            step *= 2
        else:
            step = 2 * tolerance
            guess = t.delivered_per_s * (1 - tolerance)  # just under what the lossy trial got through
            rate = guess if lo < guess < bad * (1 - tolerance) else (lo + bad) / 2
    return trials


def best(trials: list[Trial]) -> Trial | None:
    """The loss-free trial with the highest throughput, or (none loss-free) the one that lost least."""
    if not trials:
        return None
    clean = [t for t in trials if t.lossless]
    if clean:
        return max(clean, key=lambda t: t.throughput)
    return min(trials, key=lambda t: (t.lost, -t.throughput))


# ----------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Options:
    """How hard the suite searches (see ``nicrig udpmon suite --help``)."""

    trial_s: float = 1.0
    max_trials: int = 8
    tolerance: float = 0.02
    connections: tuple[int, ...] = (1, 2, 4, 8)
    connection_rate_start: float = 2000.0
    min_count: int = 100
    seed: int = 1


@dataclass(frozen=True)
class Outcome:
    """What the suite found for one test."""

    test: Test
    theoretical: float
    trials: tuple[Trial, ...]
    best: Trial | None
    limited_by: str
    status: str

    @property
    def throughput(self) -> float:
        return self.best.throughput if self.best is not None else math.nan

    @property
    def percent(self) -> float:
        return 100.0 * self.throughput / self.theoretical if self.theoretical > 0 else math.nan


Measure = Callable[[Test, list[F.Remote], Callable[[], list[F.Flow]]], tuple[int, list[F.Flow]]]


def run_test(test: Test, peer: F.Remote, third: F.Remote | None, *, link_mbps: float, mtu: int, opts: Options,
             measure: Measure) -> Outcome:
    """Search one test. ``measure(test, remotes, work)`` runs ``work`` between counter snapshots of
    this host and ``remotes`` and returns (point, flows)."""
    top = theoretical(test, link_mbps, mtu)
    if test.kind == "udp-3way" and third is None:
        return Outcome(test, top, (), None, "", "not run: the 3-way test needs --third HOST (Pai, Rixner and Kim 2004 send to "
                                                "one host while receiving from another)")
    trials: list[Trial] = []
    unit = test.unit

    def make(offered: float, remotes: list[F.Remote], work: Callable[[], list[F.Flow]]) -> Trial:
        point, flows = measure(test, remotes, work)
        t = Trial(test.name, len(trials), point, offered, tuple(flows), unit)
        trials.append(t)
        return t

    limited_by = "link rate"
    if test.kind in ("tcp-send", "tcp-recv"):
        direction = "out" if test.kind == "tcp-send" else "in"
        cap = int(peer.limits.get("max_connections", max(opts.connections)))
        counts = [n for n in opts.connections if n <= cap] or [cap]
        limited_by = "connections tried" if len(counts) == len(opts.connections) else "daemon --max-connections"
        for n in counts:
            make(n, [peer], lambda n=n: F.tcp_bulk_trial([peer], direction, connections=n,
                                                          duration_ns=int(opts.trial_s * 1e9), seed=opts.seed))
    else:
        hi = max_rate_per_s(test, link_mbps)
        key = "max_connection_rate" if test.kind == "tcp-accept" else "max_rate_pps"
        far = third if test.kind == "udp-3way" else peer
        if test.kind in ("udp-recv", "udp-3way", "tcp-accept") and far is not None and key in far.limits \
                and float(far.limits[key]) < hi:
            hi = float(far.limits[key])
            limited_by = "daemon " + ("--max-connection-rate" if key == "max_connection_rate" else "--max-rate-pps")
        start = hi if test.kind.startswith("udp") else min(hi, opts.connection_rate_start)
        count_cap = int(min(r.limits.get("max_packets", 2**31) for r in (peer, third) if r is not None))
        search_rate(lambda rate: make(rate, *_work(test, peer, third, rate, opts, count_cap)), start=start, hi=hi,
                    tolerance=opts.tolerance, max_trials=opts.max_trials)
        if not converged(trials, hi, opts.tolerance):
            limited_by = f"{limited_by}; search stopped after {opts.max_trials} trials"
    chosen = best(trials)
    if chosen is None:
        status = "no trial ran"
    elif chosen.lossless:
        status = "ok"
    else:
        status = f"no loss-free trial: the best lost {chosen.lost} of {sum(f.sent for f in chosen.flows)}"
    return Outcome(test, top, tuple(trials), chosen, limited_by, status)


def converged(trials: list[Trial], hi: float, tolerance: float) -> bool:
    """Whether a rate search ended by its own rule: loss-free at ``hi``, or loss-free and lossy rates within tolerance."""
    good = [t.offered for t in trials if t.lossless]
    bad = [t.offered for t in trials if not t.lossless]
    if not bad:
        return bool(good) and max(good) >= hi * (1 - 1e-9)
    lo = max(good, default=0.0)
    return min(bad) - lo <= tolerance * min(bad)


def _work(test: Test, peer: F.Remote, third: F.Remote | None, rate: float, opts: Options,
          count_cap: int) -> tuple[list[F.Remote], Callable[[], list[F.Flow]]]:
    """The remotes a trial of ``test`` at ``rate`` involves, and the work that runs it."""
    count = int(min(count_cap, max(opts.min_count, round(rate * opts.trial_s))))
    if test.kind in ("tcp-accept", "tcp-initiate"):
        conn_rate = max(1, round(rate))
        fn = F.accept_trial if test.kind == "tcp-accept" else F.initiate_trial
        return [peer], lambda: [fn(peer, count=count, rate_per_s=conn_rate)]
    spacing_ns = max(1, math.ceil(1e9 / rate))  # never above the rate a daemon's cap was checked against
    outs = [peer] if test.kind in ("udp-send", "udp-3way") else []
    ins = [third] if test.kind == "udp-3way" and third is not None else ([peer] if test.kind == "udp-recv" else [])
    return [*outs, *ins], lambda: F.udp_trial(outs, ins, size_bytes=test.size_bytes, spacing_ns=spacing_ns,
                                              count=count, seed=opts.seed)


# ----------------------------------------------------------------------------- tables


TESTS_DTYPE = np.dtype([
    ("test", "S16"), ("title", "S40"), ("paper_test", "<i2"), ("figures", "S8"), ("unit", "S8"),
    ("size_bytes", "<i4"), ("theoretical", "<f8"), ("throughput", "<f8"), ("percent_of_theoretical", "<f8"),
    ("lossless", "?"), ("best_point", "<i4"), ("best_offered", "<f8"), ("trials", "<i4"), ("limited_by", "S64"),
    ("status", "S120"),
])
TRIALS_DTYPE = np.dtype([
    ("point", "<i4"), ("test", "S16"), ("trial", "<i4"), ("offered", "<f8"), ("offered_unit", "S16"),
    ("throughput", "<f8"), ("unit", "S8"), ("lost", "<i8"), ("lossless", "?"),
])
FLOWS_DTYPE = np.dtype([
    ("point", "<i4"), ("test", "S16"), ("host", "S6"), ("direction", "S3"), ("protocol", "S4"),
    ("size_bytes", "<i4"), ("connections", "<i4"), ("sent", "<i8"), ("received", "<i8"), ("lost", "<i8"),
    ("bytes", "<i8"), ("first_ns", "<i8"), ("last_ns", "<i8"), ("clock", "S24"), ("kernel_drops", "<i8"),
    ("rate_per_s", "<f8"), ("rate_mbps", "<f8"),
])
OFFERED_UNITS = {"udp": "datagrams/s", "tcp-bulk": "connections", "tcp-conn": "connections/s"}


def offered_unit(test: Test) -> str:
    if test.kind.startswith("udp"):
        return OFFERED_UNITS["udp"]
    return OFFERED_UNITS["tcp-bulk" if test.kind in ("tcp-send", "tcp-recv") else "tcp-conn"]


def flow_rows(test: str, point: int, flows: tuple[F.Flow, ...] | list[F.Flow]) -> list[tuple]:
    return [(point, test.encode(), f.label.encode(), f.direction.encode(), f.protocol.encode(), f.size_bytes,
             f.connections, f.sent, f.received, f.lost, f.bytes, f.first_ns, f.last_ns, f.clock.encode(),
             f.kernel_drops, f.rate_per_s, f.rate_mbps) for f in flows]


def tables(outcomes: list[Outcome]) -> dict[str, np.ndarray]:
    """``suite/tests``, ``suite/trials`` and ``suite/flows`` of a suite run."""
    tests, trials, flows = [], [], []
    for o in outcomes:
        b = o.best
        tests.append((o.test.name.encode(), o.test.title.encode(), o.test.paper_test, o.test.figures.encode(),
                      o.test.unit.encode(), o.test.size_bytes, o.theoretical, o.throughput, o.percent,
                      bool(b is not None and b.lossless), b.point if b else -1, b.offered if b else math.nan,
                      len(o.trials), o.limited_by.encode()[:64], o.status.encode()[:120]))
        for t in o.trials:
            trials.append((t.point, t.test.encode(), t.index, t.offered, offered_unit(o.test).encode(), t.throughput,
                           t.unit.encode(), t.lost, t.lossless))
            flows += flow_rows(t.test, t.point, t.flows)
    return {"suite/tests": np.array(tests, dtype=TESTS_DTYPE), "suite/trials": np.array(trials, dtype=TRIALS_DTYPE),
            "suite/flows": np.array(flows, dtype=FLOWS_DTYPE)}


def throughput_columns(table: np.ndarray) -> dict[str, np.ndarray]:
    """``{test: throughput of each step}`` from ``sweep/suite`` (``suite/tests`` rows with a ``step`` column).

    One column per test and one item per step (per NIC, MTU or coalescing
    setting): what Pai, Rixner and Kim's (2004) Table 2 correlates
    (:func:`nicrig.analysis.cpu.correlation`).
    """
    steps = np.unique(table["step"])
    out = {}
    for name in dict.fromkeys(table["test"]):
        mine = table[table["test"] == name]
        out[name.decode() if isinstance(name, bytes) else str(name)] = np.array(
            [mine["throughput"][mine["step"] == k][0] if (mine["step"] == k).any() else math.nan for k in steps])
    return out


def summary(outcomes: list[Outcome]) -> list[dict[str, object]]:
    """One JSON-ready row per test."""
    return [{"test": o.test.name, "title": o.test.title, "paper_test": o.test.paper_test, "figures": o.test.figures,
             "unit": o.test.unit, "theoretical": o.theoretical, "throughput": o.throughput,
             "percent_of_theoretical": o.percent, "lossless": bool(o.best is not None and o.best.lossless),
             "best_offered": o.best.offered if o.best else None, "trials": len(o.trials),
             "limited_by": o.limited_by, "status": o.status} for o in outcomes]


def format_table(outcomes: list[Outcome], *, line_rate: bool = True) -> list[str]:
    """The table of Pai, Rixner and Kim's figures 5-11: throughput per test and its share of the theoretical
    maximum; without a ``line_rate`` (loopback, veth: the maxima assumed one) no maximum and no share."""
    lines = [(f"{'#':>2}  {'test':<33} {'fig':<5} {'theoretical':>15} {'achieved':>15} {'% of max':>8} "
             f"{'trials':>6}  loss-free")]
    for o in outcomes:
        u = o.test.unit
        # as the report's table prints them: one trial's rate has no spread to state, so four significant digits
        achieved = f"{number(o.throughput):>9} {u:<7}" if not math.isnan(o.throughput) else f"{'—':>9} {u:<7}"
        pct = f"{number(o.percent):>7}%" if line_rate and not math.isnan(o.percent) else f"{'—':>8}"
        theoretical = f"{number(o.theoretical):>9}" if line_rate else f"{'—':>9}"
        free = ("yes" if o.best.lossless else "no") if o.best is not None else "—"
        lines.append(f"{o.test.paper_test:>2}  {o.test.title:<33} {o.test.figures:<5} {theoretical} {u:<7}"
                     f"{achieved} {pct} {len(o.trials):>6}  {free}")
        if o.status != "ok":
            lines.append(f"    {o.status}")
    return lines
