"""udpmon's traffic engine: paced UDP streams, their reception, request-response latency.

A UDPmon-style generator (Hughes-Jones et al.) whose hot loops run in C
(:mod:`nicrig.udpmon._engine`) with the GIL released. The rest of nicrig imports
only this module: it checks the arguments (``ValueError`` with a clear message),
sets socket options and returns NumPy arrays.

What it does better than the original UDPmon

* **Absolute pacing.** Packet *i* of a stream is due at ``t0 + i*spacing_ns`` on
  CLOCK_MONOTONIC. A late packet is sent at once and does not move the ones
  after it, so lateness never accumulates (UDPmon waits a relative gap after
  each send, so every delay shifts the rest of the stream). Waits shorter than
  50 us are a spin on ``clock_gettime``; longer ones ``clock_nanosleep``
  (with the thread's timer slack at 1 ns for the loop) until a margin before
  the due time, then spin. The margin starts at 100 us and follows the
  measured wake-up latency (20 us .. 1 ms).
* **Kernel timestamps.** :func:`receive` enables ``SO_TIMESTAMPING`` and reports
  the kernel's software RX timestamp of every datagram (and the NIC's raw
  hardware one when asked and available) next to the user-space clock.

Clocks (all times are int64 nanoseconds)

* send times, ``user_ns``, RTTs: CLOCK_MONOTONIC (:func:`time.monotonic_ns`).
* ``kernel_ns``: CLOCK_REALTIME (the kernel's choice for SO_TIMESTAMPING);
  :func:`clock_offset_ns` converts (``kernel_ns - offset`` is monotonic time).
* ``hw_ns``: the NIC's clock (PHC), only comparable with itself.

Every loop is bounded (a count and/or timeouts) and interruptible. In the main
thread the C code takes the GIL back about every 100 ms (when the loop has
slack, and at once when a signal interrupts a blocking call) to run pending
signal handlers, so Ctrl-C raises ``KeyboardInterrupt`` (the results of that
call are lost). Taking the GIL back can wait up to ``sys.getswitchinterval()``
(5 ms) while another Python thread is busy, delaying a packet (the schedule
then catches up). Other threads never run signal handlers, so there the GIL
stays released for the whole loop: run a loop in a worker thread for the
steadiest timing and stop it through ``stop_fd`` or its count and timeouts.
Each socket should be used by one loop at a time.
"""

from __future__ import annotations

import errno as _errno
import logging
import os
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from nicrig.udpmon import _engine
from nicrig.udpmon.payload import HEADER_BYTES, REQUEST_MIN_BYTES, Kind

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "Latency",
    "Received",
    "RespondStats",
    "clock_offset_ns",
    "enable_timestamps",
    "monotonic_ns",
    "open_udp",
    "receive",
    "request_response",
    "respond",
    "send_paced",
]

log = logging.getLogger(__name__)

#: Largest UDP payload over IPv4 (65535 - 20 IP - 8 UDP).
MAX_PAYLOAD_BYTES = 65507
#: Largest datagram :func:`receive` can read whole (IPv6 allows 65527).
MAX_READ_BYTES = 65535
#: Upper limit of every timeout and spacing: one day.
MAX_NS = 86_400 * 1_000_000_000
_STOP_REASONS = {0: "count", 1: "idle", 2: "stop", 3: "duration"}


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


# --------------------------------------------------------------------------
# results


@dataclass(frozen=True)
class Received:
    """What :func:`receive` accepted: one array element per datagram, arrival order.

    ``seq`` (uint32) and ``size`` (int32, the datagram's true length) come from
    the datagram; ``kernel_ns`` is the kernel's software RX timestamp
    (CLOCK_REALTIME, -1 when the kernel gave none), ``hw_ns`` the NIC's raw
    hardware timestamp (-1 unless ``hw_timestamps`` was asked and the NIC
    stamps), ``user_ns`` CLOCK_MONOTONIC when the ``recvmmsg`` call that
    delivered the datagram returned (shared by a batch). ``payload`` holds the
    first ``keep_bytes`` of each datagram (zero padded) when asked, else None.

    ``foreign`` counts datagrams read and rejected (too short for the header,
    wrong magic or test_id); ``truncated`` accepted ones longer than
    ``max_bytes`` (only their head was read); ``kernel_drops`` the datagrams
    the kernel dropped at this socket since it was created (receive buffer
    full; SO_MEMINFO, read at the end; -1 when unknown). ``stopped_by`` is
    ``"count"`` (max_packets reached), ``"idle"`` (a timeout) or ``"stop"``.
    ``rxq_ovfl`` is the same drop counter as the kernel stamped it on the last
    datagram read (SO_RXQ_OVFL, socket(7)): drops before that datagram, so
    ``kernel_drops - rxq_ovfl`` were dropped after it; 0 when none had been
    dropped (the kernel stamps it once nonzero), -1 when it does not offer it.
    ``thread_id`` is the kernel's id of the thread whose ``recvmmsg`` calls
    read them (the calls a host trace records, -1 unknown).
    """

    seq: np.ndarray
    kernel_ns: np.ndarray
    hw_ns: np.ndarray
    user_ns: np.ndarray
    size: np.ndarray
    payload: np.ndarray | None
    foreign: int
    truncated: int
    kernel_drops: int
    stopped_by: str
    rxq_ovfl: int = 0
    thread_id: int = -1

    def __len__(self) -> int:
        return len(self.seq)


@dataclass(frozen=True)
class Latency:
    """What :func:`request_response` measured.

    ``rtt_ns[i]`` (int64) is the round trip of request ``seq=i``: from the clock
    read right before ``send()`` to the one right after the ``recv()`` that
    returned its response; -1 when it timed out or failed. ``size[i]`` (int32)
    is the response's length, -1 without one. ``timeouts`` counts requests
    without a response in time, ``errors`` requests whose send or wait failed
    (ENOBUFS, ECONNREFUSED: nobody listens, ...; ``last_errno`` is the last
    such errno, 0 if none), ``stale`` responses of this test to another
    request (late ones), ``foreign`` other datagrams; all skipped.
    ``sent_ns[i]``: CLOCK_MONOTONIC right before request ``i``'s ``send()``
    (the start of its round trip).
    """

    rtt_ns: np.ndarray
    size: np.ndarray
    timeouts: int
    stale: int
    foreign: int
    errors: int
    last_errno: int
    sent_ns: np.ndarray

    def __len__(self) -> int:
        return len(self.rtt_ns)


@dataclass(frozen=True)
class RespondStats:
    """What :func:`respond` did.

    ``answered`` requests; ``refused_peer`` datagrams from an address other
    than the allowed peer (never answered: the responder is no amplifier),
    ``refused_invalid`` ones from the peer that are no valid REQUEST of this
    test (short, magic, test_id, kind), ``refused_rate`` valid requests over
    the rate cap; ``send_errors`` responses that ``sendto`` failed to send.
    ``peer`` is the (ip, port) answered, port None when no request came to
    learn it. ``stopped_by``: ``"stop"``, ``"idle"`` or ``"duration"``.
    """

    answered: int
    refused_peer: int
    refused_invalid: int
    refused_rate: int
    send_errors: int
    peer: tuple[str, int | None]
    stopped_by: str

    @property
    def refused(self) -> int:
        """Every datagram not answered on purpose."""
        return self.refused_peer + self.refused_invalid + self.refused_rate


# --------------------------------------------------------------------------
# argument checks


def _int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r}")  # noqa: TRY004 - the API raises ValueError
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(f"{name} must be in {lo}..{hi}, got {v}")
    return v


def _udp_fd(sock: socket.socket, what: str, *, need: str) -> int:
    """The fd of an open UDP socket that is ``need``: "connected", "bound" or "unconnected" (and bound)."""
    if not isinstance(sock, socket.socket):
        raise ValueError(f"{what}: sock must be a socket.socket, got {type(sock).__name__}")  # noqa: TRY004 - the API raises ValueError
    if sock.fileno() < 0:
        raise ValueError(f"{what}: the socket is closed")
    if sock.type != socket.SOCK_DGRAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
        raise ValueError(f"{what}: need a UDP (AF_INET/AF_INET6, SOCK_DGRAM) socket")
    try:
        sock.getpeername()
        connected = True
    except OSError:
        connected = False
    if need == "connected":
        if not connected:
            raise ValueError(f"{what}: the socket must be connected (sock.connect((host, port)))")
        return sock.fileno()
    if need == "unconnected" and connected:
        raise ValueError(f"{what}: the socket must not be connected (it answers by address)")
    if sock.getsockname()[1] == 0:
        raise ValueError(f"{what}: the socket must be bound (sock.bind((ip, port)))")
    return sock.fileno()


def _stop_fd(stop_fd: int | _HasFileno | None) -> int:
    if stop_fd is None:
        return -1
    fd = stop_fd if isinstance(stop_fd, int) and not isinstance(stop_fd, bool) else None
    if fd is None:
        if not hasattr(stop_fd, "fileno"):
            raise ValueError(f"stop_fd must be a file descriptor, an object with fileno() or None, got {stop_fd!r}")
        fd = stop_fd.fileno()
    if fd < 0:
        raise ValueError(f"stop_fd must be a valid file descriptor, got {fd}")
    try:
        os.fstat(fd)
    except OSError as e:
        raise ValueError(f"stop_fd {fd} is not an open file descriptor") from e
    return fd


def _main() -> bool:
    """True in the main thread: the only one where the C loops check for signals."""
    return threading.current_thread() is threading.main_thread()


def _seed(seed: object) -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got {seed!r}")  # noqa: TRY004 - the API raises ValueError
    return int(seed) & 0xFFFF_FFFF_FFFF_FFFF


# --------------------------------------------------------------------------
# helpers


def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in ns: the clock of send times, ``user_ns`` and ``start_ns``."""
    return time.monotonic_ns()


def clock_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now (ns): ``kernel_ns - offset`` is monotonic time.

    Read from the tightest of 16 bracketed clock pairs (well under a microsecond).
    The offset moves when NTP steps or slews the real-time clock: take it
    close to the measurement.
    """
    offset, _uncertainty = _engine.clock_offset()
    return int(offset)


def enable_timestamps(sock: socket.socket, *, hw: bool = False) -> None:
    """Ask the kernel for RX timestamps on ``sock`` (SO_TIMESTAMPING).

    Software RX timestamps (SOF_TIMESTAMPING_RX_SOFTWARE|SOFTWARE), plus the
    NIC's (RX_HARDWARE|RAW_HARDWARE) when ``hw``; hardware stamping must also be
    switched on for the interface (SIOCSHWTSTAMP, e.g. ``hwstamp_ctl``) or the
    hardware stamps stay absent (-1). :func:`receive` does this itself; call it
    early (before the traffic starts) when the first datagrams must carry
    timestamps too: the kernel enables timestamping a moment after the first
    socket asks and datagrams queued before that have none.
    """
    if not isinstance(sock, socket.socket) or sock.fileno() < 0:
        raise ValueError("enable_timestamps: sock must be an open socket.socket")
    _engine.set_timestamping(sock.fileno(), bool(hw))


def _set_buffer(sock: socket.socket, opt: int, force_opt: int, size: int) -> None:
    """Set SO_RCVBUF/SO_SNDBUF, beyond the sysctl cap with the *FORCE variant when permitted."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, force_opt, size)
    except OSError:
        sock.setsockopt(socket.SOL_SOCKET, opt, size)


# socket(7) option numbers (asm-generic/socket.h), for Pythons whose socket module lacks them
SO_BUSY_POLL = getattr(socket, "SO_BUSY_POLL", 46)
SO_PREFER_BUSY_POLL = 69
SO_BUSY_POLL_BUDGET = 70
BUSY_POLL_US = 50      # how long one receive may busy-poll the device queue (the kernel's busy_read default)
BUSY_POLL_BUDGET = 64  # packets per busy poll (the kernel's default NAPI budget)
# A stream receiver's socket buffer: 16 MiB holds ~60 ms of 1472-byte datagrams at 10 Gbit/s, so a
# receiver the scheduler keeps off its CPU for a few ms loses nothing (SO_RCVBUFFORCE as root;
# otherwise the kernel caps it at net.core.rmem_max).
RECEIVE_BUFFER_BYTES = 16 << 20


def socket_busy_poll(sock: socket.socket, usecs: int = BUSY_POLL_US) -> dict[str, Any]:
    """Ask the kernel to busy-poll the NIC's queue when this socket's receive finds nothing; what it granted.

    SO_BUSY_POLL (``usecs`` per receive), SO_PREFER_BUSY_POLL and
    SO_BUSY_POLL_BUDGET (socket(7)): raising the first above
    ``net.core.busy_read`` and setting the others need CAP_NET_ADMIN. Each
    option is read back; a refused one is named with the kernel's reason.
    It acts only where the receive path has a NAPI context to poll (a NIC
    driver; not loopback). Returns ``{"so_busy_poll_us": int | None,
    "so_prefer_busy_poll": int | None, "so_busy_poll_budget": int | None,
    "refused": {option: reason}}``.
    """
    out: dict[str, Any] = {"refused": {}}
    for name, opt, value in (("so_busy_poll_us", SO_BUSY_POLL, usecs), ("so_prefer_busy_poll", SO_PREFER_BUSY_POLL, 1),
                             ("so_busy_poll_budget", SO_BUSY_POLL_BUDGET, BUSY_POLL_BUDGET)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, opt, value)
        except OSError as exc:
            out["refused"][name] = exc.strerror or str(exc)
        try:
            out[name] = sock.getsockopt(socket.SOL_SOCKET, opt)
        except OSError:
            out[name] = None
    return out


def open_udp(
    *,
    bind: tuple[str, int] | None = None,
    connect: tuple[str, int] | None = None,
    family: int = socket.AF_INET,
    rcvbuf: int | None = None,
    sndbuf: int | None = None,
) -> socket.socket:
    """A blocking UDP socket, bound and/or connected, with the buffer sizes asked for.

    ``rcvbuf``/``sndbuf`` are bytes as for SO_RCVBUF/SO_SNDBUF (the kernel
    doubles them for its bookkeeping); above net.core.rmem_max/wmem_max they
    need CAP_NET_ADMIN (SO_RCVBUFFORCE), else the kernel caps them silently.
    """
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if rcvbuf is not None:
            _set_buffer(sock, socket.SO_RCVBUF, getattr(socket, "SO_RCVBUFFORCE", 33),
                        _int("rcvbuf", rcvbuf, 1, 2**31 - 1))
        if sndbuf is not None:
            _set_buffer(sock, socket.SO_SNDBUF, getattr(socket, "SO_SNDBUFFORCE", 32),
                        _int("sndbuf", sndbuf, 1, 2**31 - 1))
        if bind is not None:
            sock.bind(bind)
        if connect is not None:
            sock.connect(connect)
    except BaseException:
        sock.close()
        raise
    return sock


# --------------------------------------------------------------------------
# the four loops


def send_paced(
    sock: socket.socket,
    *,
    count: int,
    size_bytes: int,
    spacing_ns: int,
    test_id: int,
    first_seq: int = 0,
    start_ns: int | None = None,
    seed: int = 1,
    kind: Kind = Kind.STREAM,
) -> np.ndarray:
    """Send ``count`` UDP payloads of ``size_bytes`` on a connected socket on an absolute schedule.

    Packet ``i`` is due at ``t0 + i*spacing_ns`` (CLOCK_MONOTONIC), ``t0 =
    start_ns`` or, when None, 1 ms after the call starts (pass ``start_ns =
    monotonic_ns() + lead`` to know the schedule). It is sent as soon as it is
    due; a late one is sent at once (catch-up) and the schedule never shifts.
    ``spacing_ns = 0`` is a back-to-back burst. Each payload is the header
    (``kind``, ``seq = (first_seq + i) mod 2**32``, ``test_id``) and random
    bytes regenerated per packet from (seed, test_id, seq); the next packet is
    built before the wait so it costs no lateness. Packets that are already
    due when the sender looks (a burst, or catching up) leave together in one
    ``sendmmsg()`` of up to 32.

    Returns int64 send times: the clock read right before the ``sendmmsg()``
    that sent the packet (after the wait; so ``times[i] - (t0 + i*spacing_ns)``
    is the packet's lateness; the packets of one batch share that time).
    A datagram that was refused with a transient error (ENOBUFS, EAGAIN
    on a socket with a timeout, ECONNREFUSED from an earlier ICMP port
    unreachable, unreachable network, EPERM from a firewall) is not retried,
    so the schedule holds: its time is -1 (the number of send errors is
    ``np.count_nonzero(times < 0)``; they are also logged). Any other error
    (EBADF, EMSGSIZE, ...) raises OSError.

    A blocking socket may block in ``send()`` when its send buffer is full;
    the packets after it then catch up.
    """
    fd = _udp_fd(sock, "send_paced", need="connected")
    count = _int("count", count, 0, 2**32)
    size_bytes = _int("size_bytes", size_bytes, HEADER_BYTES, MAX_PAYLOAD_BYTES)
    spacing_ns = _int("spacing_ns", spacing_ns, 0, MAX_NS)
    test_id = _int("test_id", test_id, 0, 2**32 - 1)
    first_seq = _int("first_seq", first_seq, 0, 2**32 - 1)
    if start_ns is None:
        start = -1
    else:
        start = _int("start_ns", start_ns, 0, 2**63 - 1)
        if start > time.monotonic_ns() + MAX_NS:
            raise ValueError(f"start_ns is more than a day ahead of CLOCK_MONOTONIC: {start}")
    try:
        kind = Kind(kind)
    except ValueError:
        raise ValueError(f"kind must be one of {[k.value for k in Kind]}, got {kind!r}") from None
    times, errors, last_errno, _t0 = _engine.send_paced(
        fd, count, size_bytes, spacing_ns, start, _seed(seed), int(kind), test_id, first_seq, _main()
    )
    if errors:
        log.warning("send_paced: %d of %d datagrams not sent (last error: %s)",
                    errors, count, _errno.errorcode.get(last_errno, last_errno))
    return np.frombuffer(times, dtype=np.int64)


def receive(
    sock: socket.socket,
    *,
    max_packets: int,
    test_id: int,
    idle_timeout_ns: int,
    first_timeout_ns: int | None = None,
    stop_fd: int | _HasFileno | None = None,
    hw_timestamps: bool = False,
    keep_bytes: int = 0,
    max_bytes: int = MAX_READ_BYTES,
    busy_poll: bool = False,
) -> Received:
    """Receive the datagrams of test ``test_id`` on a bound UDP socket.

    Reads with ``recvmmsg`` in batches of 64 until ``max_packets`` datagrams
    are accepted (``stopped_by="count"``), ``stop_fd`` becomes readable (a
    pipe's read end the caller writes to, or closes the write end of, to stop
    the loop; it is not read, so it stays readable: ``"stop"``), or no
    accepted datagram arrives for ``first_timeout_ns`` (before the first;
    default ``idle_timeout_ns``) or ``idle_timeout_ns`` (after one): ``"idle"``.
    Datagrams of other tests do not extend the timeouts.

    Accepted: at least 16 bytes, nicrig magic, ``test_id`` (any kind). Up to
    ``max_bytes`` of each datagram are read (the recorded size is the true
    one either way); ``keep_bytes`` (<= max_bytes) of each are kept in
    ``Received.payload``. Enables SO_TIMESTAMPING on the socket (see
    :func:`enable_timestamps`). All result arrays are preallocated for
    ``max_packets``: about 32 + keep_bytes bytes each. With ``busy_poll``
    the loop spins on ``recvmmsg(MSG_DONTWAIT)`` (one CPU at 100 %) instead
    of sleeping in ``ppoll()``.
    """
    fd = _udp_fd(sock, "receive", need="bound")
    max_packets = _int("max_packets", max_packets, 0, 2**32)
    test_id = _int("test_id", test_id, 0, 2**32 - 1)
    idle_timeout_ns = _int("idle_timeout_ns", idle_timeout_ns, 0, MAX_NS)
    first = idle_timeout_ns if first_timeout_ns is None else \
        _int("first_timeout_ns", first_timeout_ns, 0, MAX_NS)
    max_bytes = _int("max_bytes", max_bytes, HEADER_BYTES, MAX_READ_BYTES)
    keep_bytes = _int("keep_bytes", keep_bytes, 0, max_bytes)
    if max_packets * (32 + keep_bytes) > 2**34:
        raise ValueError(f"receive: max_packets * (32 + keep_bytes) is over 16 GiB "
                         f"({max_packets} x {32 + keep_bytes})")
    sfd = _stop_fd(stop_fd)
    (seq, kern, hw, user, size, payload, n, foreign, truncated, drops, reason, ovfl) = _engine.receive(
        fd, max_packets, test_id, first, idle_timeout_ns, sfd, bool(hw_timestamps), max_bytes, keep_bytes,
        _main(), bool(busy_poll),
    )
    return Received(
        seq=np.frombuffer(seq, dtype=np.uint32),
        kernel_ns=np.frombuffer(kern, dtype=np.int64),
        hw_ns=np.frombuffer(hw, dtype=np.int64),
        user_ns=np.frombuffer(user, dtype=np.int64),
        size=np.frombuffer(size, dtype=np.int32),
        payload=None if payload is None else np.frombuffer(payload, dtype=np.uint8).reshape(n, keep_bytes),
        foreign=foreign,
        truncated=truncated,
        kernel_drops=drops,
        stopped_by=_STOP_REASONS[reason],
        rxq_ovfl=ovfl,
        thread_id=threading.get_native_id(),  # the C loop ran on this thread
    )


def request_response(
    sock: socket.socket,
    *,
    count: int,
    request_bytes: int,
    response_bytes: int,
    test_id: int,
    timeout_ns: int,
    busy_poll: bool = False,
    gap_ns: int = 0,
    seed: int = 1,
) -> Latency:
    """Measure ``count`` request-response round trips on a connected socket (the client).

    Request ``i`` is a REQUEST payload of ``request_bytes`` (header with
    ``seq = i``, u32 ``response_bytes`` after it, random fill; built before the
    clock starts). ``t1`` is read right before ``send()``, ``t2`` right after
    the ``recv()`` that returns the RESPONSE with ``seq = i`` and ``test_id``;
    responses to earlier requests (late) are counted stale and skipped, other
    datagrams foreign. A response larger than the MTU arrives in IP fragments
    that the kernel reassembles; up to 65535 bytes are read.

    Waiting: ``ppoll()`` (the thread sleeps; wake-up latency is in the RTT) or,
    with ``busy_poll``, ``recv(MSG_DONTWAIT)`` in a spin (one CPU at 100 %,
    lower and steadier RTTs). After ``timeout_ns`` without its response a
    request counts as a timeout (rtt -1); an ICMP port unreachable
    (ECONNREFUSED) ends it at once as an error. Request ``i+1`` is sent
    ``gap_ns`` after request ``i`` ended.
    """
    fd = _udp_fd(sock, "request_response", need="connected")
    count = _int("count", count, 0, 2**32)
    request_bytes = _int("request_bytes", request_bytes, REQUEST_MIN_BYTES, MAX_PAYLOAD_BYTES)
    response_bytes = _int("response_bytes", response_bytes, HEADER_BYTES, MAX_PAYLOAD_BYTES)
    test_id = _int("test_id", test_id, 0, 2**32 - 1)
    timeout_ns = _int("timeout_ns", timeout_ns, 1, MAX_NS)
    gap_ns = _int("gap_ns", gap_ns, 0, MAX_NS)
    rtt, size, timeouts, stale, foreign, errors, last_errno, sent = _engine.request_response(
        fd, count, request_bytes, response_bytes, test_id, bool(busy_poll), timeout_ns, gap_ns, _seed(seed),
        _main(),
    )
    return Latency(
        rtt_ns=np.frombuffer(rtt, dtype=np.int64),
        size=np.frombuffer(size, dtype=np.int32),
        timeouts=timeouts,
        stale=stale,
        foreign=foreign,
        errors=errors,
        last_errno=last_errno,
        sent_ns=np.frombuffer(sent, dtype=np.int64),
    )


def _peer_address(sock: socket.socket, peer: tuple[str, int | None]) -> tuple[bytes, int, str]:
    """(packed address in the socket's family, port or 0, ip as given) of the allowed peer."""
    if not isinstance(peer, tuple) or len(peer) != 2 or not isinstance(peer[0], str):
        raise ValueError(f"peer must be (ip, port) or (ip, None), got {peer!r}")
    ip, port = peer
    port = 0 if port is None else _int("peer port", port, 1, 65535)
    try:
        if sock.family == socket.AF_INET:
            return socket.inet_pton(socket.AF_INET, ip), port, ip
        try:
            return socket.inet_pton(socket.AF_INET6, ip), port, ip
        except OSError:  # an IPv4 peer of a dual-stack socket arrives IPv4-mapped
            return b"\0" * 10 + b"\xff\xff" + socket.inet_pton(socket.AF_INET, ip), port, ip
    except OSError:
        fam = "IPv4" if sock.family == socket.AF_INET else "IPv6 or IPv4"
        raise ValueError(f"peer ip must be a numeric {fam} address, got {ip!r}") from None


def respond(
    sock: socket.socket,
    *,
    test_id: int,
    stop_fd: int | _HasFileno | None,
    max_response_bytes: int,
    peer: tuple[str, int | None],
    max_rate_pps: float,
    idle_timeout_ns: int,
    first_timeout_ns: int | None = None,
    burst: int | None = None,
    max_duration_ns: int | None = None,
    seed: int = 1,
    busy_poll: bool = False,
) -> RespondStats:
    """Answer the latency requests of one peer on a bound, unconnected socket (the server).

    Only ``peer`` is answered: ``(ip, port)`` exactly, or ``(ip, None)`` to
    learn the port from the first valid request from that ip (then only that
    port). Datagrams from anyone else are dropped and counted, never answered,
    so the responder cannot be used as an amplifier. Each valid REQUEST of
    ``test_id`` gets a RESPONSE of ``min(requested, max_response_bytes)``
    bytes (at least the 16-byte header) with the same seq, sent to the
    request's source address; its fill is random (made once; 8 bytes after
    the header differ per seq).

    Rate cap: a token bucket of ``max_rate_pps`` tokens per second holding at
    most ``burst`` (default ``max(1, max_rate_pps // 100)``: 10 ms' worth);
    requests finding it empty are refused, so over any interval T at most
    ``max_rate_pps * T + burst`` are answered.

    Stops when ``stop_fd`` is readable (``"stop"``), when no valid request of
    the peer came for ``first_timeout_ns`` (before the first; default
    ``idle_timeout_ns``) or ``idle_timeout_ns`` (``"idle"``), or after
    ``max_duration_ns`` (``"duration"``) when given.

    Waiting: a blocking ``recvmmsg`` (the thread sleeps; its wake-up is in
    the round trip) or, with ``busy_poll``, ``recvmmsg(MSG_DONTWAIT)`` in a
    spin (one CPU at 100 %).
    """
    fd = _udp_fd(sock, "respond", need="unconnected")
    test_id = _int("test_id", test_id, 0, 2**32 - 1)
    max_response_bytes = _int("max_response_bytes", max_response_bytes, HEADER_BYTES, MAX_PAYLOAD_BYTES)
    addr, port, ip = _peer_address(sock, peer)
    if isinstance(max_rate_pps, bool) or not isinstance(max_rate_pps, (int, float, np.integer, np.floating)):
        raise ValueError(f"max_rate_pps must be a number, got {max_rate_pps!r}")  # noqa: TRY004 - the API raises ValueError
    rate = float(max_rate_pps)
    if not 0 < rate <= 1e9:
        raise ValueError(f"max_rate_pps must be in (0, 1e9], got {max_rate_pps!r}")
    burst_n = max(1, int(rate // 100)) if burst is None else _int("burst", burst, 1, 2**31 - 1)
    idle_timeout_ns = _int("idle_timeout_ns", idle_timeout_ns, 0, MAX_NS)
    first = idle_timeout_ns if first_timeout_ns is None else \
        _int("first_timeout_ns", first_timeout_ns, 0, MAX_NS)
    duration = -1 if max_duration_ns is None else _int("max_duration_ns", max_duration_ns, 0, MAX_NS)
    sfd = _stop_fd(stop_fd)
    answered, r_peer, r_invalid, r_rate, send_errors, learned, reason = _engine.respond(
        fd, test_id, sfd, max_response_bytes, int(sock.family), addr, port, rate, float(burst_n),
        first, idle_timeout_ns, duration, _seed(seed), _main(), bool(busy_poll),
    )
    return RespondStats(
        answered=answered,
        refused_peer=r_peer,
        refused_invalid=r_invalid,
        refused_rate=r_rate,
        send_errors=send_errors,
        peer=(ip, learned or None),
        stopped_by=_STOP_REASONS[reason],
    )
