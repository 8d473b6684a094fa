"""What the simulated hosts' applications measured, as udpmon results: the model's own send and receive events.

A real ``nicrig udpmon latency`` run notes when the engine sent each request
and when it got the response; ``udpmon stream`` when each datagram left and
when the far host received it. The model's applications do the same
(:class:`nicrig.acquisition.sim.model.RigRun` ``packets``: ``t_app_send_ps``,
``t_app_recv_ps`` per message), so a simulated run yields the very tables a
real one does, written by the same functions (:func:`nicrig.udpmon.results.write_latency`,
:func:`~nicrig.udpmon.results.write_stream`) and marked simulated. Nothing
here reads the capture set's ``truth/`` tables: these are the applications'
measurements, not the analysis of a capture.

Times are nanoseconds of the model's clock from the start of the run (the
common timeline of the capture set is the same clock less
``simulation.timeline.trigger_ns``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from nicrig.acquisition.sim.model import LATENCY_GAP_US, PACKET_DTYPE, RigRun, Scenario
from nicrig.udpmon.results import LatencyVisit, ResultsFile, StreamPoint, point_row, write_latency, write_stream

#: The model's link (``Rig``'s rate): the line stream rates are held to.
LINK_RATE_BPS = 1e9
#: Framing bytes per datagram for the wire rate: preamble+SFD 8, gap 12, Ethernet 18, IPv4+UDP 28 (as udpmon).
WIRE_OVERHEAD_BYTES = 66
#: RTT and spacing histogram bins (us), udpmon's default.
BIN_US = 1.0
PS_PER_NS = 1000


def _ns(ps: np.ndarray) -> np.ndarray:
    """Model times (ps) as whole ns, -1 (never) kept."""
    ps = np.asarray(ps, dtype=np.int64)
    return np.where(ps >= 0, np.rint(ps / PS_PER_NS).astype(np.int64), -1)


def _interrupts(run: RigRun, host: bytes, t0_ps: int, t1_ps: int) -> int:
    """Interrupts ``host`` (``b"send"``, ``b"recv"``) took in ``[t0_ps, t1_ps]``: what /proc/interrupts would
    count over the point."""
    return sum(1 for row in run.interrupts if row[0].encode() == host and t0_ps <= row[1] <= t1_ps)


def latency_visits(run: RigRun, scenario: Scenario) -> list[LatencyVisit]:
    """One :class:`LatencyVisit` per point: each request's round trip, from when the requester's application
    sent it to when it had the response (-1: none)."""
    packets = np.array(run.packets, dtype=PACKET_DTYPE)
    requests = np.sort(packets[packets["kind"] == b"request"], order="seq")
    responses = packets[packets["kind"] == b"response"]
    answered = dict(zip(responses["seq"].tolist(), responses["t_app_recv_ps"].tolist()))
    visits = []
    for k, point in enumerate(scenario.points()):
        mine = requests[requests["point"] == k]
        recv = np.array([answered.get(int(s), -1) for s in mine["seq"]], dtype=np.int64)
        rtt = np.where(recv >= 0, recv - mine["t_app_send_ps"], -1)
        sent = _ns(mine["t_app_send_ps"])
        got = _ns(recv)
        start = int(sent[0]) if sent.size else 0
        end = int(max(got.max(initial=-1), sent.max(initial=start)))
        visits.append(LatencyVisit(round=point.round, position=point.position, size_bytes=point.size_bytes,
                                   start_ns=start, end_ns=end, rtt_ns=_ns(rtt), timeouts=int((recv < 0).sum())))
    return visits


def cpu_busy_pct(run: RigRun, host: str, t0_ps: int, t1_ps: int) -> float:
    """How busy ``host``'s processors were in ``[t0_ps, t1_ps]`` (%): its CPU's busy time over the interval and
    the processors its kernel counts, as /proc/stat's jiffies give it (NaN: no interval, or no record)."""
    busy = run.cpu_busy.get(host)
    if busy is None or t1_ps <= t0_ps:
        return math.nan
    overlap = np.clip(np.minimum(busy[:, 1], t1_ps) - np.maximum(busy[:, 0], t0_ps), 0, None).sum()
    return 100.0 * float(overlap) / (t1_ps - t0_ps) / run.cpus.get(host, 1)


def stream_points(run: RigRun, scenario: Scenario) -> list[StreamPoint]:
    """One :class:`StreamPoint` per point: when host A's application sent each datagram, the datagrams host B's
    application received, in the order it got them, with the kernel's receive stamps (netif_rx's time, as
    SO_TIMESTAMP gives it) and the application's, those B's kernel dropped (its socket buffer full, its
    backlog throttled), and how busy each host's processors were."""
    packets = np.array(run.packets, dtype=PACKET_DTYPE)
    stream = np.sort(packets[packets["kind"] == b"stream"], order="seq")
    dropped = np.asarray(run.dropped.get("recv", []), dtype=np.int64)
    # The kernel's receive stamps (netif_rx's), where the run kept them; the application's reads otherwise.
    stamps = run.stamps.get("recv", {})
    out = []
    for k, point in enumerate(scenario.points()):
        mine = stream[stream["point"] == k]
        sent = mine["t_app_send_ps"]
        got = mine[mine["t_app_recv_ps"] >= 0]
        got = got[np.argsort(got["t_app_recv_ps"], kind="stable")]
        first = int(mine["seq"][0]) if mine.size else 0
        last_ps = int(max(got["t_app_recv_ps"].max(initial=-1), sent.max(initial=0)))
        first_ps = int(sent[0]) if sent.size else 0
        kernel = _ns(np.array([stamps.get(int(s), int(t)) for s, t in zip(got["seq"], got["t_app_recv_ps"])],
                              dtype=np.int64))
        out.append(StreamPoint(
            point=k, round=point.round, position=point.position, size_bytes=point.size_bytes,
            spacing_us=point.spacing_us, count=point.count, t0_ns=int(_ns(sent[:1])[0]) if sent.size else 0,
            sent_ns=_ns(sent), seq=(got["seq"] - first).astype(np.int64), kernel_ns=kernel,
            user_ns=_ns(got["t_app_recv_ps"]),
            received_size=np.full(len(got), point.size_bytes, dtype=np.int32),
            kernel_drops=int(np.isin(dropped, mine["seq"]).sum()) if run.dropped else -1,
            local_cpu_busy_pct=cpu_busy_pct(run, "send", first_ps, last_ps),
            remote_cpu_busy_pct=cpu_busy_pct(run, "recv", first_ps, last_ps),
            local_interrupts=_interrupts(run, b"send", first_ps, last_ps),
            remote_interrupts=_interrupts(run, b"recv", first_ps, last_ps)))
    return out


@dataclass(frozen=True)
class Measured:
    """What the applications measured in a run, ready to store: a latency run's visits, or a stream run's points
    with their ``stream/points`` rows (the rates, whose confidence intervals need SciPy)."""

    kind: str
    visits: list[LatencyVisit] = field(default_factory=list)
    points: list[StreamPoint] = field(default_factory=list)
    rows: list[dict[str, Any]] = field(default_factory=list)


def measure(run: RigRun, scenario: Scenario) -> Measured:
    """The applications' measurements of ``run``. Pure: ``nicrig simulate`` has a forked worker make them while
    it stores the sources."""
    if scenario.kind == "latency":
        return Measured("latency", visits=latency_visits(run, scenario))
    points = stream_points(run, scenario)
    return Measured("stream", points=points,
                    rows=[point_row(p, link_rate_bps=LINK_RATE_BPS, mtu=scenario.mtu,
                                    wire_overhead=WIRE_OVERHEAD_BYTES) for p in points])


def write_results(rf: ResultsFile, measured: Measured, scenario: Scenario, *, settings: Mapping[str, Any],
                  argv: Sequence[str], simulation: Mapping[str, Any]) -> None:
    """The run's application-level results (:func:`measure`) in the udpmon layout (``latency/`` or ``stream/``),
    marked simulated."""
    if measured.kind == "latency":
        write_latency(rf, measured.visits, mtu=scenario.mtu, bin_us=BIN_US, gap_ns=round(LATENCY_GAP_US * 1000))
    else:
        write_stream(rf, measured.points, measured.rows, wire_overhead=WIRE_OVERHEAD_BYTES, bin_us=BIN_US,
                     link_rate_bps=LINK_RATE_BPS)
    rf.set_run(scenario.kind, peer="simulated host B", argv=argv, settings=dict(settings), remote={"interface": None},
               simulation=dict(simulation))


def settings_of(scenario: Scenario, **given: Any) -> dict[str, Any]:
    """The run's settings as a results file records them (``docs/formats.md``): the schedule's sizes, spacings,
    rounds and counts, the MTU, and what the command line gave (``given``)."""
    points = scenario.points()
    out: dict[str, Any] = {"scenario": scenario.kind, "mtu": scenario.mtu, "seed": scenario.seed,
                           "sizes": sorted({p.size_bytes for p in points}), "rounds": max(p.round for p in points) + 1,
                           "bin_us": BIN_US}
    if scenario.kind == "latency":
        out.update(request_size=scenario.request_bytes, gap_us=LATENCY_GAP_US)
    else:
        out.update(spacings_us=sorted({p.spacing_us for p in points}), wire_overhead=WIRE_OVERHEAD_BYTES)
    return {**out, **given}
