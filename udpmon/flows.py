"""Flows between this host and one or more udpmon daemons, run at the same time: the suite's and the many-host tests' trials.

A *trial* is one measurement at one offered load. Each of its *flows* joins
this host (the host under test, whose NIC the Pai, Rixner and Kim 2004 microbenchmarks
isolate) and one daemon: ``out`` flows go from here to the daemon, ``in``
flows from the daemon to here. A UDP trial may mix both (Pai, Rixner and Kim's (2004) 3-way
test: send to one host while receiving from another; Geist et al.'s (n.d.) and Feng et
al.'s (2003) N senders into one host); each daemon plays one part per trial.

Every :class:`Flow` keeps the raw figures its rate comes from (counts, bytes,
first and last time on the receiver's clock), so a results file can show how
each throughput was computed.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from nicrig.udpmon import engine, sequence, tcp
from nicrig.udpmon.client import Controller

#: How long a receiver waits for a stream's first packet, and after its last one.
FIRST_PACKET_MS = 3000
IDLE_MS = 300
#: Head start of every stream over the requests that set it up.
LEAD_NS = 20_000_000


@dataclass
class Remote:
    """One daemon in a run: its connection, addresses and what it reported."""

    label: str                  # "remote", "peer", "third", "r1", ...: the counters' host column
    host: str                   # as given on the command line
    port: int
    ctl: Controller
    family: int
    address: str                # the daemon's numeric address: UDP and TCP tests go there
    local_ip: str               # ours, as the daemon sees it: its senders and connectors aim there
    interface: str | None       # the daemon's interface toward us
    limits: dict[str, Any] = field(default_factory=dict)

    def duration_s(self, wanted_s: float) -> float:
        """A test's duration: what it needs (at least 10 s), within the daemon's cap."""
        return min(float(self.limits.get("max_duration_s", wanted_s)), max(10.0, wanted_s))

    def wait_finished(self, timeout_s: float) -> None:
        """Until the daemon's test ends by itself (count reached, idle) or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.ctl.status().get("state") == "running" and time.monotonic() < deadline:
            time.sleep(0.02)


@dataclass(frozen=True)
class Flow:
    """One flow of a trial, as its receiver saw it.

    ``protocol``: ``udp`` (datagrams of ``size_bytes``), ``tcp`` (a bulk
    transfer over ``connections``) or ``conn`` (connections opened and
    closed). ``sent``/``received``: datagrams, bytes or connections;
    ``lost``: datagrams lost, or connection attempts that failed or needed a
    SYN retransmission (TCP data is never lost). ``first_ns``/``last_ns``:
    the first and last arrival (datagram kernel timestamp, byte, accepted or
    established connection) on the receiver's clock, named by ``clock``.
    """

    label: str
    direction: str
    protocol: str
    size_bytes: int
    connections: int
    sent: int
    received: int
    lost: int
    bytes: int
    first_ns: int
    last_ns: int
    clock: str
    kernel_drops: int = -1

    @property
    def lossless(self) -> bool:
        return self.lost == 0 and self.received > 0

    @property
    def rate_per_s(self) -> float:
        """Arrivals per second (datagrams or connections; NaN for a bulk transfer)."""
        return flow_rates(self.protocol, self.size_bytes, self.received, self.bytes, self.first_ns, self.last_ns)[0]

    @property
    def rate_mbps(self) -> float:
        """Payload Mbit/s at the receiver (NaN for connections)."""
        return flow_rates(self.protocol, self.size_bytes, self.received, self.bytes, self.first_ns, self.last_ns)[1]


def flow_rates(protocol: str, size_bytes: int, received: int, nbytes: int, first_ns: int,
               last_ns: int) -> tuple[float, float]:
    """(arrivals per second, payload Mbit/s) of a flow; 0 when fewer than two arrivals span no time.

    UDP (Hughes-Jones et al. 2003, §3.2, as ``stream``): ``(received - 1) / span`` and
    8 x size x that. TCP: 8 x bytes / span (Mbit/s only). Connections:
    ``(received - 1) / span`` (per second only). ``span = last_ns - first_ns``.
    """
    span_s = (last_ns - first_ns) / 1e9
    if protocol == "tcp":
        return math.nan, (8.0 * nbytes / span_s / 1e6 if span_s > 0 else 0.0)
    per_s = (received - 1) / span_s if span_s > 0 and received > 1 else 0.0
    return per_s, (8.0 * size_bytes * per_s / 1e6 if protocol == "udp" else math.nan)


def _join(threads: list[threading.Thread]) -> None:
    """Wait for worker threads in short steps, so Ctrl-C reaches the main thread."""
    for t in threads:
        while t.is_alive():
            t.join(0.1)


def _worker(target: Callable[[], Any], out: dict[str, Any], key: str) -> threading.Thread:
    def run() -> None:
        try:
            out[key] = target()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the main thread
            out[key] = exc
    t = threading.Thread(target=run, name=f"udpmon-{key}", daemon=True)
    t.start()
    return t


def _result(out: dict[str, Any], key: str) -> Any:
    value = out[key]
    if isinstance(value, BaseException):
        raise value
    return value


def _udp_from_arrays(label: str, direction: str, size: int, sent: int, seq: np.ndarray, kernel_ns: np.ndarray,
                     kernel_drops: int, clock: str) -> Flow:
    s = sequence.sequence_stats(seq.astype(np.int64), sent) if sent else None
    stamped = kernel_ns[kernel_ns > 0]
    received = s.received if s else 0
    return Flow(label=label, direction=direction, protocol="udp", size_bytes=size, connections=0, sent=sent,
                received=received, lost=s.lost if s else 0, bytes=received * size,
                first_ns=int(stamped[0]) if len(stamped) else -1, last_ns=int(stamped[-1]) if len(stamped) else -1,
                clock=clock, kernel_drops=kernel_drops)


def udp_trial(outs: list[Remote], ins: list[Remote], *, size_bytes: int, spacing_ns: int, count: int,
              seed: int = 1) -> list[Flow]:
    """Streams of ``count`` datagrams, one every ``spacing_ns``, to every ``outs`` daemon and from every ``ins`` one.

    All streams run at once. Outgoing streams are paced here by the C engine
    (one thread each); incoming ones by the daemons (``start_sender``) and
    received here (one thread each). Packet ``seq`` numbers and kernel
    receive timestamps give each flow's counts and times.
    """
    if {r.label for r in outs} & {r.label for r in ins}:
        raise ValueError("a daemon plays one part per trial: it cannot both send and receive")
    expect_s = count * spacing_ns / 1e9
    stop_r, stop_w = os.pipe()
    socks: list[socket.socket] = []
    results: dict[str, Any] = {}
    threads: list[threading.Thread] = []
    test_ids = {r.label: secrets.randbits(32) for r in [*outs, *ins]}
    try:
        in_socks = {}
        for r in ins:
            sock = engine.open_udp(bind=(r.local_ip, 0), family=r.family, rcvbuf=engine.RECEIVE_BUFFER_BYTES)
            socks.append(sock)
            engine.enable_timestamps(sock)
            in_socks[r.label] = sock
            threads.append(_worker(lambda sock=sock, r=r: engine.receive(
                sock, max_packets=count, test_id=test_ids[r.label], idle_timeout_ns=IDLE_MS * 1_000_000,
                first_timeout_ns=FIRST_PACKET_MS * 1_000_000 + int(expect_s * 1e9), stop_fd=stop_r),
                results, f"in-{r.label}"))
        out_socks = {}
        for r in outs:
            sock = engine.open_udp(bind=(r.local_ip, 0), family=r.family)
            socks.append(sock)
            port = r.ctl.start_receiver(test_id=test_ids[r.label], max_packets=count, idle_timeout_ms=IDLE_MS,
                                        peer_udp_port=sock.getsockname()[1],
                                        duration_s=r.duration_s(2 * expect_s + FIRST_PACKET_MS / 1000 + 5))
            sock.connect((r.address, port))
            out_socks[r.label] = sock
        t_start = engine.monotonic_ns()
        for r in ins:
            r.ctl.start_sender(test_id=test_ids[r.label], count=count, size_bytes=size_bytes, spacing_ns=spacing_ns,
                               peer_udp_port=in_socks[r.label].getsockname()[1], seed=seed,
                               start_delay_ms=LEAD_NS // 1_000_000, duration_s=r.duration_s(2 * expect_s + 5))
        t0 = t_start + LEAD_NS  # close to when the daemons' streams start: the flows overlap
        senders = [_worker(lambda sock=out_socks[r.label], r=r: engine.send_paced(
            sock, count=count, size_bytes=size_bytes, spacing_ns=spacing_ns, test_id=test_ids[r.label],
            start_ns=max(t0, engine.monotonic_ns() + 1_000_000), seed=seed), results, f"out-{r.label}")
            for r in outs]
        _join(senders)
        flows = []
        for r in outs:
            sent_ns = _result(results, f"out-{r.label}")
            r.wait_finished(IDLE_MS / 1000 + 5)
            stats, arrays = r.ctl.stop()
            flows.append(_udp_from_arrays(r.label, "out", size_bytes, int(np.count_nonzero(sent_ns >= 0)),
                                          arrays.get("seq", np.zeros(0, np.uint32)),
                                          arrays.get("kernel_ns", np.zeros(0, np.int64)),
                                          int(stats.get("engine", {}).get("kernel_drops", -1)),
                                          f"{r.label}:CLOCK_REALTIME"))
        _join(threads)
        for r in ins:
            got = _result(results, f"in-{r.label}")
            r.wait_finished(expect_s + 5)
            stats, arrays = r.ctl.stop()
            sent = int(np.count_nonzero(arrays.get("t_ns", np.zeros(0, np.int64)) >= 0))
            flows.append(_udp_from_arrays(r.label, "in", size_bytes, sent, got.seq, got.kernel_ns, got.kernel_drops,
                                          "local:CLOCK_REALTIME"))
        return flows
    finally:
        os.write(stop_w, b"s")  # receivers still waiting (after an error) end now
        for t in threads:
            t.join(5)
        for s in socks:
            s.close()
        os.close(stop_r)
        os.close(stop_w)


def _bulk_flow(r: Remote, direction: str, connections: int, sent: int, nbytes: np.ndarray, first: np.ndarray,
               last: np.ndarray, clock: str) -> Flow:
    moved = first >= 0
    return Flow(label=r.label, direction=direction, protocol="tcp", size_bytes=0, connections=connections,
                sent=sent, received=int(nbytes.sum()), lost=0, bytes=int(nbytes.sum()),
                first_ns=int(first[moved].min()) if moved.any() else -1,
                last_ns=int(last[moved].max()) if moved.any() else -1, clock=clock)


def tcp_bulk_trial(remotes: list[Remote], direction: str, *, connections: int, duration_ns: int,
                   seed: int = 1) -> list[Flow]:
    """Bulk TCP over ``connections`` per daemon, all driven by one epoll loop here (Pai, Rixner and Kim 2004, tests 7
    and 8).

    ``direction="out"``: this host writes for ``duration_ns`` to every
    daemon's sink; ``"in"``: every daemon writes to us for ``duration_ns``.
    """
    groups: list[tuple[Remote, list[socket.socket]]] = []
    seconds = duration_ns / 1e9
    try:
        for r in remotes:
            if direction == "out":
                port = r.ctl.start_tcp_sink(connections=connections, duration_s=r.duration_s(seconds + 10),
                                            idle_timeout_ms=FIRST_PACKET_MS)
            else:
                port = r.ctl.start_tcp_source(connections=connections, duration_s=r.duration_s(seconds + 10),
                                              send_ms=max(1, duration_ns // 1_000_000), seed=seed)
            groups.append((r, tcp.connect_all((r.address, port), connections, family=r.family, bind_ip=r.local_ip)))
        socks = [s for _, g in groups for s in g]
        if direction == "out":
            bulk = tcp.bulk_send(socks, duration_ns=duration_ns, seed=seed)
        else:
            bulk = tcp.bulk_receive(socks, max_duration_ns=duration_ns + 10_000_000_000,
                                    idle_timeout_ns=FIRST_PACKET_MS * 1_000_000)
        flows = []
        at = 0
        for r, g in groups:
            mine = slice(at, at + len(g))
            at += len(g)
            tcp.close_all(g)
            r.wait_finished(FIRST_PACKET_MS / 1000 + 5)
            _, arrays = r.ctl.stop()
            far = (arrays.get("bytes", np.zeros(0, np.int64)), arrays.get("first_ns", np.zeros(0, np.int64)),
                   arrays.get("last_ns", np.zeros(0, np.int64)))
            if direction == "out":
                flows.append(_bulk_flow(r, "out", len(g), int(bulk.bytes[mine].sum()), *far,
                                        f"{r.label}:CLOCK_MONOTONIC"))
            else:
                flows.append(_bulk_flow(r, "in", len(g), int(far[0].sum()), bulk.bytes[mine], bulk.first_ns[mine],
                                        bulk.last_ns[mine], "local:CLOCK_MONOTONIC"))
        return flows
    finally:
        for _, g in groups:
            tcp.close_all(g)


def accept_trial(r: Remote, *, count: int, rate_per_s: int) -> Flow:
    """The daemon opens and closes ``count`` connections to us at ``rate_per_s``; we accept (Pai, Rixner and Kim
    2004, test 9)."""
    expect_s = count / rate_per_s
    with tcp.listen_tcp((r.local_ip, 0), r.family) as listener:
        r.ctl.start_connector(tcp_port=listener.getsockname()[1], count=count, rate_per_s=rate_per_s,
                              duration_s=r.duration_s(expect_s + 10), start_delay_ms=LEAD_NS // 1_000_000)
        acc = tcp.accept_and_close(listener, peer_ip=r.address, max_connections=count,
                                   first_timeout_ns=FIRST_PACKET_MS * 1_000_000,
                                   idle_timeout_ns=tcp.SYN_RETRANSMIT_NS + 500_000_000,
                                   max_duration_ns=int((expect_s + 10) * 1e9))
    r.wait_finished(expect_s + 10)
    _, arrays = r.ctl.stop()
    error = arrays.get("error", np.zeros(0, np.int32))
    start = arrays.get("start_ns", np.zeros(0, np.int64))
    est = arrays.get("established_ns", np.zeros(0, np.int64))
    # A daemon of before 2026-11-27 sends no kernel count: the handshake's time stands in for it.
    slow = tcp.handshakes_retransmitted(start, est, arrays.get("syn_retransmits"))
    attempted = int(np.count_nonzero(start >= 0))
    times = acc.accepted_ns
    return Flow(label=r.label, direction="in", protocol="conn", size_bytes=0, connections=count, sent=attempted,
                received=len(times), lost=(count - attempted) + int(np.count_nonzero(error)) + slow,
                bytes=0, first_ns=int(times[0]) if len(times) else -1, last_ns=int(times[-1]) if len(times) else -1,
                clock="local:CLOCK_MONOTONIC")


def initiate_trial(r: Remote, *, count: int, rate_per_s: int) -> Flow:
    """We open and close ``count`` connections to the daemon at ``rate_per_s`` (Pai, Rixner and Kim 2004, test 10)."""
    expect_s = count / rate_per_s
    port = r.ctl.start_acceptor(max_connections=count, duration_s=r.duration_s(expect_s + 10),
                                idle_timeout_ms=FIRST_PACKET_MS)
    res = tcp.initiate((r.address, port), count=count, rate_per_s=rate_per_s, family=r.family, bind_ip=r.local_ip,
                       max_duration_ns=int((expect_s + 10) * 1e9))
    r.wait_finished(FIRST_PACKET_MS / 1000 + 5)
    r.ctl.stop()
    est = np.sort(res.established_ns[res.established_ns >= 0])
    return Flow(label=r.label, direction="out", protocol="conn", size_bytes=0, connections=count,
                sent=int(np.count_nonzero(res.start_ns >= 0)), received=res.completed,
                lost=(count - res.completed) + res.retransmitted, bytes=0,
                first_ns=int(est[0]) if len(est) else -1, last_ns=int(est[-1]) if len(est) else -1,
                clock="local:CLOCK_MONOTONIC")
