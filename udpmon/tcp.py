"""TCP traffic for the NIC microbenchmarks: bulk streams over N connections and connection rates.

Pai, Rixner and Kim 2004, §3.3, tests 7-10: TCP send and receive of
maximum-sized segments "over several TCP connections" managed by one process,
and TCP connection acceptance and initiation, throttled by a rate. Everything
here runs in one thread on non-blocking sockets with epoll
(:class:`selectors.DefaultSelector`), as a network server would, and returns
NumPy arrays of CLOCK_MONOTONIC nanoseconds.

Why Python and not the C engine: the kernel's work per byte and per connection
dwarfs this loop's. ``bench/udpmon_tcp.py`` on the project's 2-CPU machine over
127.0.0.1: 20 000 connections opened and closed, this initiator reached 9 800
connections/s where the same loop in C reached 11 600 (0.84), spending 0.21 s
of user time against 0.72 s in the kernel; bulk transfers write 256 KiB per
``send()`` and matched ``iperf3 -P 4`` (1.03). Through a NIC the kernel's and
the NIC's share only grows (``docs/udpmon.md``, "The TCP tests").

Connection tests open *and close* each connection (Pai, Rixner and Kim 2004, test 9: "requests
to open and close TCP connections"): the acceptor closes first, the initiator
closes when it sees the acceptor's FIN. The TIME_WAIT state thus stays on the
acceptor, whose listening port it does not block, and the initiator's
ephemeral ports are free again at once.

Every loop is bounded by a deadline and stops early when ``stop_fd`` (a pipe's
read end, as for :mod:`nicrig.udpmon.engine`) becomes readable.
"""

from __future__ import annotations

import errno as _errno
import selectors
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Bytes handed to one ``send()``: large, so the interpreter's share per byte is negligible.
CHUNK_BYTES = 256 * 1024
#: An attempt that took this long to establish lost its SYN or SYN-ACK: Linux's initial RTO is 1 s. Only where
#: the kernel does not count retransmissions itself (TCP_INFO): a process stalled that long (a loaded host)
#: looks the same from user space.
SYN_RETRANSMIT_NS = 1_000_000_000
#: ``struct tcp_info`` (linux/tcp.h): eight one-byte fields, then 32-bit counters; ``tcpi_total_retrans``,
#: every segment the connection retransmitted (a SYN included), is the 24th of them.
_TCPI_TOTAL_RETRANS = slice(8 + 23 * 4, 8 + 24 * 4)
_STOP = object()


def _now() -> int:
    return time.monotonic_ns()


def _selector(stop_fd: int | None) -> selectors.BaseSelector:
    sel = selectors.DefaultSelector()
    if stop_fd is not None:
        sel.register(stop_fd, selectors.EVENT_READ, _STOP)
    return sel


def _wait_s(until_ns: int, now_ns: int) -> float:
    return max(0.0, (until_ns - now_ns) / 1e9)


# --------------------------------------------------------------------------- bulk transfers


@dataclass(frozen=True)
class Bulk:
    """Bytes moved per connection and when: ``first_ns``/``last_ns`` of each (-1: none moved).

    ``stopped_by``: ``"done"`` (every connection reached end of stream:
    receiving), ``"duration"``, ``"idle"``, ``"stop"`` or ``"failed"`` (every
    connection failed: sending). ``errors`` counts connections that failed
    (reset, ...), ``last_error`` names the last failure ("" if none).
    """

    bytes: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    stopped_by: str
    errors: int
    last_error: str

    @property
    def total_bytes(self) -> int:
        return int(self.bytes.sum())

    @property
    def rate_bps(self) -> float:
        """Payload bits per second over all connections, first byte to last byte (0 if undefined)."""
        return bulk_rate_bps(self.bytes, self.first_ns, self.last_ns)


def bulk_rate_bps(nbytes: np.ndarray, first_ns: np.ndarray, last_ns: np.ndarray) -> float:
    """``8 * sum(bytes) / (max(last_ns) - min(first_ns))`` in bit/s over the connections that moved data."""
    moved = first_ns >= 0
    if not moved.any():
        return 0.0
    span = int(last_ns[moved].max() - first_ns[moved].min())
    return 8.0 * float(nbytes.sum()) / (span / 1e9) if span > 0 else 0.0


def _transfer(socks: list[socket.socket], move: Callable[[socket.socket], int], *, writing: bool,
              max_duration_ns: int, idle_timeout_ns: int | None, stop_fd: int | None) -> Bulk:
    """Move bytes on every socket whenever it is ready, until each ends (``move`` returned 0 or failed)."""
    n = len(socks)
    nbytes, first, last = [0] * n, [-1] * n, [-1] * n
    errors, last_error = 0, ""
    sel = _selector(stop_fd)
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_WRITE if writing else selectors.EVENT_READ, i)
    start = _now()
    deadline = start + max_duration_ns
    idle_until = start + idle_timeout_ns if idle_timeout_ns is not None else deadline
    open_ = n
    stopped_by = "failed" if writing else "done"  # what it means when every connection has ended
    try:
        while open_ and stopped_by in ("failed", "done"):
            now = _now()
            if now >= deadline or now >= idle_until:
                stopped_by = "duration" if now >= deadline else "idle"
                break
            for key, _ in sel.select(_wait_s(min(deadline, idle_until), now)):
                if key.data is _STOP:
                    stopped_by = "stop"
                    break
                i = key.data
                try:
                    k = move(socks[i])
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    errors += 1
                    last_error = _errno.errorcode.get(exc.errno or 0, str(exc))
                    k = 0
                if k == 0:
                    sel.unregister(socks[i])
                    open_ -= 1
                    continue
                t = _now()
                nbytes[i] += k
                if first[i] < 0:
                    first[i] = t
                last[i] = t
                if idle_timeout_ns is not None:
                    idle_until = t + idle_timeout_ns
    finally:
        sel.close()
    return Bulk(bytes=np.array(nbytes, dtype=np.int64), first_ns=np.array(first, dtype=np.int64),
                last_ns=np.array(last, dtype=np.int64), stopped_by=stopped_by, errors=errors, last_error=last_error)


def bulk_send(socks: list[socket.socket], *, duration_ns: int, stop_fd: int | None = None,
              chunk_bytes: int = CHUNK_BYTES, seed: int = 1) -> Bulk:
    """Write to every connected socket as fast as each accepts, for ``duration_ns``; then shut down writing.

    The data is one buffer of random bytes (against compression anywhere on
    the path), written over and over. ``first_ns``/``last_ns`` are the clock
    after the first and the last ``send()`` that took bytes: what left this
    process, not what arrived (the receiver's figures say that).
    """
    if not socks:
        raise ValueError("bulk_send: no connections")
    buf = memoryview(np.random.default_rng(seed).bytes(chunk_bytes))
    try:
        return _transfer(socks, lambda s: s.send(buf), writing=True, max_duration_ns=duration_ns,
                         idle_timeout_ns=None, stop_fd=stop_fd)
    finally:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_WR)
            except OSError:
                pass


def bulk_receive(socks: list[socket.socket], *, max_duration_ns: int, idle_timeout_ns: int,
                 stop_fd: int | None = None) -> Bulk:
    """Read and discard from every socket until each reaches end of stream.

    Stops early after ``idle_timeout_ns`` without a byte on any connection,
    after ``max_duration_ns``, or when ``stop_fd`` is readable.
    ``first_ns``/``last_ns``: the clock after the first and the last
    ``recv()`` that returned bytes on that connection.
    """
    if not socks:
        raise ValueError("bulk_receive: no connections")
    buf = bytearray(CHUNK_BYTES)
    return _transfer(socks, lambda s: s.recv_into(buf), writing=False, max_duration_ns=max_duration_ns,
                     idle_timeout_ns=idle_timeout_ns, stop_fd=stop_fd)


# --------------------------------------------------------------------------- accepting


def listen_tcp(bind: tuple[str, int], family: int = socket.AF_INET, backlog: int = 4096) -> socket.socket:
    """A non-blocking listening TCP socket on ``bind`` (port 0: the kernel picks)."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(bind)
        sock.listen(backlog)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _same_ip(address: str, peer_ip: str) -> bool:
    """``address`` (possibly IPv4-mapped IPv6) is ``peer_ip``."""
    return address == peer_ip or address.removeprefix("::ffff:") == peer_ip


def _accept(listener: socket.socket, *, peer_ip: str, count: int, first_timeout_ns: int, idle_timeout_ns: int,
            max_duration_ns: int, stop_fd: int | None,
            keep: bool) -> tuple[list[socket.socket], list[int], int, int, str]:
    """Accept up to ``count`` connections from ``peer_ip``, keeping them open or closing each at once.

    (kept sockets, accept times, refused, errors, stopped_by). Connections
    from any other address are closed at once and counted as refused.
    """
    kept: list[socket.socket] = []
    accepted: list[int] = []
    refused = errors = 0
    sel = _selector(stop_fd)
    sel.register(listener, selectors.EVENT_READ, None)
    start = _now()
    deadline = start + max_duration_ns
    idle_until = start + first_timeout_ns
    stopped_by = "count"
    try:
        while len(accepted) < count and stopped_by == "count":
            now = _now()
            if now >= deadline or now >= idle_until:
                stopped_by = "duration" if now >= deadline else "idle"
                break
            if any(key.data is _STOP for key, _ in sel.select(_wait_s(min(deadline, idle_until), now))):
                stopped_by = "stop"
            while len(accepted) < count and stopped_by == "count":
                try:
                    conn, addr = listener.accept()
                except (BlockingIOError, InterruptedError):
                    break
                except OSError as exc:
                    if exc.errno in (_errno.EMFILE, _errno.ENFILE, _errno.ENOBUFS, _errno.ENOMEM):
                        errors += 1
                    break
                t = _now()
                if not _same_ip(str(addr[0]), peer_ip):
                    refused += 1
                    conn.close()
                    continue
                accepted.append(t)
                idle_until = t + idle_timeout_ns
                if keep:
                    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    kept.append(conn)
                else:
                    conn.close()
    except BaseException:
        close_all(kept)
        raise
    finally:
        sel.close()
    return kept, accepted, refused, errors, stopped_by


def accept_from(listener: socket.socket, *, peer_ip: str, count: int, timeout_ns: int,
                stop_fd: int | None = None) -> tuple[list[socket.socket], int]:
    """Up to ``count`` connections from ``peer_ip`` within ``timeout_ns``, kept open; (sockets, refused)."""
    kept, _, refused, _, _ = _accept(listener, peer_ip=peer_ip, count=count, first_timeout_ns=timeout_ns,
                                     idle_timeout_ns=timeout_ns, max_duration_ns=timeout_ns, stop_fd=stop_fd,
                                     keep=True)
    return kept, refused


@dataclass(frozen=True)
class Accepts:
    """What :func:`accept_and_close` did: ``accepted_ns`` per connection (CLOCK_MONOTONIC)."""

    accepted_ns: np.ndarray
    refused_peer: int
    errors: int
    stopped_by: str


def accept_and_close(listener: socket.socket, *, peer_ip: str, max_connections: int, first_timeout_ns: int,
                     idle_timeout_ns: int, max_duration_ns: int, stop_fd: int | None = None) -> Accepts:
    """Accept connections from ``peer_ip`` and close each at once (Pai, Rixner and Kim 2004, test 9, the acceptor's
    side).

    Stops after ``max_connections``, after ``first_timeout_ns`` before the
    first connection or ``idle_timeout_ns`` after one without another, after
    ``max_duration_ns``, or when ``stop_fd`` is readable.
    """
    _, accepted, refused, errors, stopped_by = _accept(
        listener, peer_ip=peer_ip, count=max_connections, first_timeout_ns=first_timeout_ns,
        idle_timeout_ns=idle_timeout_ns, max_duration_ns=max_duration_ns, stop_fd=stop_fd, keep=False)
    return Accepts(accepted_ns=np.array(accepted, dtype=np.int64), refused_peer=refused, errors=errors,
                   stopped_by=stopped_by)


# --------------------------------------------------------------------------- initiating


@dataclass(frozen=True)
class Initiated:
    """Every connection attempt of :func:`initiate`, one element each, in the order they were due.

    ``due_ns`` (the schedule: ``t0 + i / rate``), ``start_ns`` (``connect()``
    called), ``established_ns`` (the handshake completed), ``closed_ns`` (the
    acceptor's FIN seen and the socket closed): CLOCK_MONOTONIC, -1 when not
    reached. ``error`` is the errno that ended a failed attempt (ETIMEDOUT
    when it outlived the attempt timeout), 0 otherwise.
    """

    due_ns: np.ndarray
    start_ns: np.ndarray
    established_ns: np.ndarray
    closed_ns: np.ndarray
    error: np.ndarray
    stopped_by: str
    #: SYNs retransmitted before the handshake completed, the kernel's count (TCP_INFO); -1 where not
    #: established or the kernel does not say.
    syn_retransmits: np.ndarray

    @property
    def retransmitted(self) -> int:
        """Attempts whose handshake took a SYN retransmission: a SYN or SYN-ACK was lost."""
        return handshakes_retransmitted(self.start_ns, self.established_ns, self.syn_retransmits)

    @property
    def completed(self) -> int:
        """Attempts opened and closed without error."""
        return int(np.count_nonzero((self.closed_ns >= 0) & (self.error == 0)))

    @property
    def failed(self) -> int:
        return int(np.count_nonzero(self.error != 0))


def handshakes_retransmitted(start_ns: np.ndarray, established_ns: np.ndarray,
                             syn_retransmits: np.ndarray | None) -> int:
    """Established attempts that retransmitted their SYN: by the kernel's count where there is one
    (``syn_retransmits`` >= 0), else by taking :data:`SYN_RETRANSMIT_NS` or more to establish."""
    ok = established_ns >= 0
    slow = established_ns - start_ns >= SYN_RETRANSMIT_NS
    if syn_retransmits is None:
        return int(np.count_nonzero(ok & slow))
    counted = syn_retransmits >= 0
    return int(np.count_nonzero(ok & np.where(counted, syn_retransmits > 0, slow)))


def retransmitted_segments(sock: socket.socket) -> int:
    """Segments ``sock`` retransmitted so far, the kernel's ``tcpi_total_retrans``: read as the handshake
    completes, the SYNs it resent. -1 where the platform has no TCP_INFO."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCPI_TOTAL_RETRANS.stop)
    except (AttributeError, OSError):
        return -1
    if len(info) < _TCPI_TOTAL_RETRANS.stop:
        return -1
    return int.from_bytes(info[_TCPI_TOTAL_RETRANS], sys.byteorder)


def schedule_ns(t0_ns: int, count: int, rate_per_s: float) -> np.ndarray:
    """Due times of ``count`` events at ``rate_per_s`` from ``t0_ns``: ``t0 + round(i * 1e9 / rate)``."""
    if not rate_per_s > 0:
        raise ValueError(f"rate must be positive, got {rate_per_s!r}")
    return t0_ns + np.round(np.arange(count, dtype=np.float64) * (1e9 / rate_per_s)).astype(np.int64)


def initiate(address: tuple[str, int], *, count: int, rate_per_s: float, family: int = socket.AF_INET,
             bind_ip: str | None = None, max_inflight: int = 512, attempt_timeout_ns: int = 3_000_000_000,
             max_duration_ns: int, start_ns: int | None = None, stop_fd: int | None = None) -> Initiated:
    """Open and close ``count`` TCP connections to ``address`` at ``rate_per_s`` (Pai, Rixner and Kim 2004, test 10).

    Attempt ``i`` is due at ``t0 + i / rate`` (``t0 = start_ns``, default
    now); one already due starts at once, as long as fewer than
    ``max_inflight`` attempts are open (a later start shows as
    ``start_ns > due_ns``). Each attempt connects, waits for the acceptor to
    close, and closes. An attempt open longer than ``attempt_timeout_ns``
    fails with ETIMEDOUT. Stops after ``max_duration_ns`` (open attempts
    fail with ETIMEDOUT) or when ``stop_fd`` is readable.
    """
    t0 = _now() if start_ns is None else start_ns
    due = schedule_ns(t0, count, rate_per_s)
    start = np.full(count, -1, dtype=np.int64)
    est = np.full(count, -1, dtype=np.int64)
    closed = np.full(count, -1, dtype=np.int64)
    error = np.zeros(count, dtype=np.int32)
    resent = np.full(count, -1, dtype=np.int32)
    socks: dict[int, socket.socket] = {}
    sel = _selector(stop_fd)
    deadline = _now() + max_duration_ns
    nxt = 0
    stopped_by = "count"

    def finish(i: int, err: int) -> None:
        s = socks.pop(i)
        sel.unregister(s)
        s.close()
        if err:
            error[i] = err
        else:
            closed[i] = _now()

    try:
        while nxt < count or socks:
            now = _now()
            if now >= deadline:
                stopped_by = "duration"
                break
            while nxt < count and due[nxt] <= now and len(socks) < max_inflight:
                s = socket.socket(family, socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    if bind_ip is not None:
                        s.bind((bind_ip, 0))
                    start[nxt] = _now()
                    rc = s.connect_ex(address)
                except OSError as exc:
                    rc = exc.errno or _errno.EIO
                if rc not in (0, _errno.EINPROGRESS):
                    s.close()
                    error[nxt] = rc
                else:
                    socks[nxt] = s
                    sel.register(s, selectors.EVENT_WRITE, nxt)
                nxt += 1
                now = _now()
            for i, s in list(socks.items()):
                if now - start[i] > attempt_timeout_ns:
                    finish(i, _errno.ETIMEDOUT)
            wake = deadline
            if nxt < count and len(socks) < max_inflight:
                wake = min(wake, int(due[nxt]))
            if socks:
                wake = min(wake, int(min(start[i] for i in socks)) + attempt_timeout_ns + 1)
            for key, ev in sel.select(_wait_s(wake, _now())):
                if key.data is _STOP:
                    stopped_by = "stop"
                    return _initiated(due, start, est, closed, error, resent, socks, sel, stopped_by)
                i = key.data
                s = socks[i]
                if est[i] < 0:
                    err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if err:
                        finish(i, err)
                        continue
                    est[i] = _now()
                    resent[i] = retransmitted_segments(s)
                    sel.modify(s, selectors.EVENT_READ, i)
                    continue
                try:
                    data = s.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    # a reset after the acceptor's close still closed the connection
                    data = b"" if exc.errno == _errno.ECONNRESET else None
                    if data is None:
                        finish(i, exc.errno or _errno.EIO)
                        continue
                if not data:
                    finish(i, 0)
    finally:
        sel.close()
    return _initiated(due, start, est, closed, error, resent, socks, None, stopped_by)


def _initiated(due: np.ndarray, start: np.ndarray, est: np.ndarray, closed: np.ndarray, error: np.ndarray,
               resent: np.ndarray, socks: dict[int, socket.socket], sel: selectors.BaseSelector | None,
               stopped_by: str) -> Initiated:
    """The result, with attempts still open failed as ETIMEDOUT and never-started ones left at -1."""
    for i, s in socks.items():
        s.close()
        error[i] = _errno.ETIMEDOUT
    if sel is not None:
        sel.close()
    return Initiated(due_ns=due, start_ns=start, established_ns=est, closed_ns=closed, error=error,
                     stopped_by=stopped_by, syn_retransmits=resent)


def connect_all(address: tuple[str, int], count: int, *, family: int = socket.AF_INET,
                bind_ip: str | None = None, timeout_s: float = 5.0) -> list[socket.socket]:
    """``count`` blocking connects to ``address`` (the bulk tests' connections); all or OSError."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            s = socket.socket(family, socket.SOCK_STREAM)
            socks.append(s)
            s.settimeout(timeout_s)
            if bind_ip is not None:
                s.bind((bind_ip, 0))
            s.connect(address)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        for s in socks:
            s.close()
        raise
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for s in socks:
        try:
            s.close()
        except OSError:
            pass

