"""What a udpmon daemon can be asked to do in a test: one function per role.

Each takes the test's socket first (or None) and keyword arguments, among them
``stop_fd`` (a pipe the daemon writes to when the test must end), and returns
what :func:`nicrig.udpmon.daemon.split_engine_result` turns into scalars and
arrays for the controller. The daemon imports this module when a test starts
(:func:`nicrig.udpmon.daemon.load_engine`), so the C engine is needed only
then.

UDP roles are the C engine's loops (:mod:`nicrig.udpmon.engine`); TCP roles
are :mod:`nicrig.udpmon.tcp`'s. Every role sends only to its controller: the
daemon connects the socket (UDP sender), accepts only the controller's
address (TCP listeners) or connects only to it (connector).
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

import numpy as np
from nicrig.readiness import readable
from nicrig.udpmon import tcp
from nicrig.udpmon.engine import monotonic_ns, receive, respond, send_paced

__all__ = ["acceptor", "connector", "receive", "respond", "send", "tcp_sink", "tcp_source"]

#: A paced send runs in slices this long, checking the stop pipe between them.
SLICE_NS = 20_000_000
MAX_SLICE_PACKETS = 65536


def slices(count: int, spacing_ns: int) -> list[tuple[int, int]]:
    """(first packet, packets) of each slice of a ``count``-packet stream: about 20 ms of schedule each."""
    per = MAX_SLICE_PACKETS if spacing_ns == 0 else max(1, min(MAX_SLICE_PACKETS, SLICE_NS // spacing_ns))
    return [(first, min(per, count - first)) for first in range(0, count, per)]


def send(sock: socket.socket, *, stop_fd: int, count: int, size_bytes: int, spacing_ns: int, test_id: int,
         start_delay_ns: int, seed: int) -> dict[str, Any]:
    """A paced stream to the controller on a connected socket (the far end of a "receive" test).

    Packet ``i`` is due at ``t0 + i * spacing_ns`` with ``t0`` ``start_delay_ns``
    from now, exactly as :func:`~nicrig.udpmon.engine.send_paced` schedules
    it; the stream is sent in slices of about 20 ms so that a stop request
    ends it within one slice. ``t_ns[i]`` is -1 for a packet not sent
    (refused by the kernel, or after a stop).
    """
    t0 = monotonic_ns() + start_delay_ns
    times = np.full(count, -1, dtype=np.int64)
    stopped = False
    for first, n in slices(count, spacing_ns):
        if readable(stop_fd):
            stopped = True
            break
        times[first:first + n] = send_paced(sock, count=n, size_bytes=size_bytes, spacing_ns=spacing_ns,
                                            test_id=test_id, first_seq=first, start_ns=t0 + first * spacing_ns,
                                            seed=seed)
    return {"t_ns": times, "t0_ns": t0, "spacing_ns": spacing_ns, "send_errors": int(np.count_nonzero(times < 0)),
            "stopped_by": "stop" if stopped else "count"}


def _bulk_role(listener: socket.socket, stop_fd: int, peer_ip: str, connections: int, accept_timeout_ns: int,
               transfer: Callable[[list[socket.socket]], tcp.Bulk]) -> dict[str, Any]:
    """Accept ``connections`` from the controller, run ``transfer`` on them, close them: the result."""
    socks, refused = tcp.accept_from(listener, peer_ip=peer_ip, count=connections, timeout_ns=accept_timeout_ns,
                                     stop_fd=stop_fd)
    try:
        if not socks:
            return {"accepted": 0, "refused_peer": refused, "stopped_by": "idle"}
        bulk = transfer(socks)
    finally:
        tcp.close_all(socks)
    return {"bytes": bulk.bytes, "first_ns": bulk.first_ns, "last_ns": bulk.last_ns, "accepted": len(socks),
            "refused_peer": refused, "stopped_by": bulk.stopped_by, "errors": bulk.errors,
            "last_error": bulk.last_error}


def tcp_sink(listener: socket.socket, *, stop_fd: int, peer_ip: str, connections: int, accept_timeout_ns: int,
             idle_timeout_ns: int, max_duration_ns: int) -> dict[str, Any]:
    """Accept ``connections`` from the controller and read them to their end (the far end of "TCP send")."""
    return _bulk_role(listener, stop_fd, peer_ip, connections, accept_timeout_ns,
                      lambda socks: tcp.bulk_receive(socks, max_duration_ns=max_duration_ns,
                                                     idle_timeout_ns=idle_timeout_ns, stop_fd=stop_fd))


def tcp_source(listener: socket.socket, *, stop_fd: int, peer_ip: str, connections: int, accept_timeout_ns: int,
               send_ns: int, seed: int) -> dict[str, Any]:
    """Accept ``connections`` from the controller and write to them for ``send_ns`` (the far end of "TCP receive")."""
    return _bulk_role(listener, stop_fd, peer_ip, connections, accept_timeout_ns,
                      lambda socks: tcp.bulk_send(socks, duration_ns=send_ns, stop_fd=stop_fd, seed=seed))


def acceptor(listener: socket.socket, *, stop_fd: int, peer_ip: str, max_connections: int, first_timeout_ns: int,
             idle_timeout_ns: int, max_duration_ns: int) -> dict[str, Any]:
    """Accept the controller's connections and close each at once (the far end of "TCP initiate")."""
    acc = tcp.accept_and_close(listener, peer_ip=peer_ip, max_connections=max_connections,
                               first_timeout_ns=first_timeout_ns, idle_timeout_ns=idle_timeout_ns,
                               max_duration_ns=max_duration_ns, stop_fd=stop_fd)
    return {"accepted_ns": acc.accepted_ns, "refused_peer": acc.refused_peer, "errors": acc.errors,
            "stopped_by": acc.stopped_by}


def connector(_sock: None, *, stop_fd: int, address: tuple[str, int], family: int, bind_ip: str, count: int,
              rate_per_s: float, start_delay_ns: int, max_duration_ns: int) -> dict[str, Any]:
    """Open and close ``count`` connections to the controller at a rate (the far end of "TCP accept")."""
    res = tcp.initiate(address, count=count, rate_per_s=rate_per_s, family=family, bind_ip=bind_ip,
                       max_duration_ns=max_duration_ns, start_ns=monotonic_ns() + start_delay_ns, stop_fd=stop_fd)
    return {"due_ns": res.due_ns, "start_ns": res.start_ns, "established_ns": res.established_ns,
            "closed_ns": res.closed_ns, "error": res.error, "syn_retransmits": res.syn_retransmits,
            "stopped_by": res.stopped_by}
