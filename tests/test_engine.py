"""nicrig.udpmon.engine (the C traffic engine) on real UDP sockets over 127.0.0.1.

Timing assertions are deliberately generous (shared, loaded CI machines): they
check the *shape* of the behaviour (absolute schedule, no accumulated
lateness, prompt stops), not microseconds.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from nicrig.udpmon import engine as E
from nicrig.udpmon.payload import (
    HEADER,
    HEADER_BYTES,
    MAGIC,
    RESPONSE_BYTES,
    Kind,
    make_payload,
    parse_header,
)

MS = 1_000_000
S = 1_000_000_000


# --------------------------------------------------------------------------
# helpers


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    yield r, w
    os.close(r)
    os.close(w)


@contextlib.contextmanager
def closing_all(*socks: socket.socket) -> Iterator[None]:
    try:
        yield
    finally:
        for s in socks:
            s.close()


class Background:
    """Run ``fn`` in a thread; ``result()`` joins and returns (or re-raises)."""

    def __init__(self, fn, *args, **kwargs):
        self._out: dict[str, object] = {}

        def run():
            try:
                self._out["value"] = fn(*args, **kwargs)
            except BaseException as e:  # noqa: BLE001 - handed to the test thread
                self._out["error"] = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.started = time.monotonic()
        self.thread.start()

    def result(self, timeout: float = 10.0):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "engine loop did not stop"
        if "error" in self._out:
            raise self._out["error"]  # type: ignore[misc]
        return self._out["value"]


def until_rx_stamped(rx: socket.socket, tx: socket.socket) -> None:
    """Probe ``rx`` from ``tx`` until a datagram arrives with a kernel RX timestamp (after
    :func:`E.enable_timestamps`): Linux turns receive timestamping on from a work queue a moment
    after the first socket asks, and datagrams queued before then have none; on a loaded machine
    that moment can be late. The probes are read here, so the test's receiver never sees them."""
    probe_id = 0x5EED
    deadline = time.monotonic() + 60
    while True:
        E.send_paced(tx, count=1, size_bytes=64, spacing_ns=0, test_id=probe_id)
        got = E.receive(rx, max_packets=1, test_id=probe_id, idle_timeout_ns=10 * S)
        if len(got) == 1 and got.kernel_ns[0] > 0:
            return
        assert time.monotonic() < deadline, "the kernel did not start stamping received datagrams within 60 s"
        time.sleep(0.01)


@contextlib.contextmanager
def responder(peer=("127.0.0.1", None), **kwargs) -> Iterator[tuple[socket.socket, Background]]:
    """A respond() loop in a thread on a fresh socket; stopped through its pipe at exit."""
    srv = E.open_udp(bind=("127.0.0.1", 0))
    r, w = os.pipe()
    args = {"test_id": 42, "max_response_bytes": 65507, "max_rate_pps": 1e6, "idle_timeout_ns": 20 * S}
    args.update(kwargs)
    bg = Background(E.respond, srv, stop_fd=r, peer=peer, **args)
    try:
        yield srv, bg
    finally:
        os.write(w, b"x")
        bg.thread.join(10)
        os.close(r)
        os.close(w)
        srv.close()


# --------------------------------------------------------------------------
# paced streams


def schedule_problems(times: np.ndarray, t0: int, spacing: int) -> list[str]:
    """Broken invariants of send ``times`` against the schedule t0 + i*spacing.

    They hold however loaded the machine is: no packet leaves early, and
    while the sender is behind, some packets leave sooner than ``spacing``
    after their predecessor (catch-up). Relative pacing (UDPmon's) keeps at
    least the spacing after every packet, so every stall would push all
    later packets back for good. How many catch up is load, not pacing: a
    machine whose every send costs more than the spacing catches up on few
    (CI saw a median gap of 235 us while behind). How close to the schedule
    packets leave is a speed figure: bench/ measures it.
    """
    late = times - (t0 + np.arange(len(times), dtype=np.int64) * spacing)
    broken = []
    if (late < 0).any():
        broken.append(f"{(late < 0).sum()} packets sent early")
    behind = np.flatnonzero(late[1:] > 200_000) + 1
    if len(behind) >= 10:
        gaps = np.diff(times)[behind - 1]
        if not (gaps < spacing).any():
            broken.append(f"no late packet left sooner than the spacing after its predecessor "
                          f"(shortest gap {gaps.min()} ns): the schedule moved")
    return broken


def test_paced_stream_is_absolute_and_received_whole():
    n, spacing, size, test_id = 2000, 20_000, 200, 0xC0FFEE
    rx = E.open_udp(bind=("127.0.0.1", 0), rcvbuf=4 << 20)
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        E.enable_timestamps(rx)
        until_rx_stamped(rx, tx)
        bg = Background(E.receive, rx, max_packets=n, test_id=test_id, idle_timeout_ns=60 * S, keep_bytes=size)
        t0 = E.monotonic_ns() + 2 * MS
        times = E.send_paced(tx, count=n, size_bytes=size, spacing_ns=spacing, test_id=test_id,
                             start_ns=t0, first_seq=1000)
        got: E.Received = bg.result(timeout=120)
    assert times.dtype == np.int64 and times.shape == (n,)
    assert (times > 0).all(), "no send errors on loopback"
    broken = schedule_problems(times, t0, spacing)
    assert not broken, broken

    assert len(got) == n and got.stopped_by == "count"
    assert got.foreign == 0 and got.truncated == 0
    assert (got.seq == 1000 + np.arange(n)).all()
    assert (got.size == size).all()
    assert (got.kernel_ns > 0).all() and (np.diff(got.kernel_ns) >= 0).all()
    assert (got.hw_ns == -1).all()
    assert (np.diff(got.user_ns) >= 0).all() and (got.user_ns >= times[0]).all()
    # kernel RX stamps (REALTIME) fall between the send and the user-space read
    kern_mono = got.kernel_ns - E.clock_offset_ns()
    assert np.median(kern_mono - times) > 0
    assert np.median(got.user_ns - kern_mono) > 0
    # payloads: the header of payload.py, then fill that differs per packet
    assert got.payload is not None and got.payload.shape == (n, size)
    assert len({row.tobytes() for row in got.payload}) == n
    assert len({row[HEADER_BYTES:].tobytes() for row in got.payload}) == n
    for i in (0, 1, n - 1):
        h = parse_header(got.payload[i].tobytes())
        assert h is not None and (h.kind, h.seq, h.test_id, h.flags) == (Kind.STREAM, 1000 + i, test_id, 0)


def test_late_start_catches_up_without_shifting_the_schedule():
    spacing = 100_000
    rx = E.open_udp(bind=("127.0.0.1", 0), rcvbuf=1 << 20)
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        t0 = E.monotonic_ns() - 5 * MS  # packets 0..49 are already late
        times = E.send_paced(tx, count=300, size_bytes=64, spacing_ns=spacing, test_id=1, start_ns=t0)
    late = times - (t0 + np.arange(300) * spacing)
    assert (late >= 0).all() and late[0] >= 5 * MS
    # the overdue packets go out back to back instead of a spacing apart (relative
    # pacing would keep every packet >= 5 ms late for good)
    assert np.median(np.diff(times[:40])) < spacing
    broken = schedule_problems(times, t0, spacing)
    assert not broken, broken


def test_same_seed_same_payloads_other_seed_other_payloads():
    def stream(seed: int) -> list[bytes]:
        rx = E.open_udp(bind=("127.0.0.1", 0))
        tx = E.open_udp(connect=rx.getsockname())
        with closing_all(rx, tx):
            E.send_paced(tx, count=5, size_bytes=100, spacing_ns=0, test_id=3, seed=seed)
            return [rx.recv(200) for _ in range(5)]

    a, b, c = stream(1), stream(1), stream(2)
    assert a == b and a != c
    assert all(parse_header(p).seq == i for i, p in enumerate(a))


def test_send_errors_are_marked_not_raised():
    # a connected socket to a closed port: ICMP port unreachable makes a later
    # send() fail with ECONNREFUSED; the stream goes on, the packet is -1
    # The port stays bound (no other test can take it) by a socket connected to
    # someone else: it accepts nothing from tx, so tx's datagrams find no listener.
    dead = E.open_udp(bind=("127.0.0.1", 0))
    dead.connect(("127.0.0.1", 9))
    tx = E.open_udp(connect=dead.getsockname())
    with closing_all(dead, tx):
        # 40 ms of stream: the ICMP error comes back in time even on a loaded host
        times = E.send_paced(tx, count=200, size_bytes=64, spacing_ns=200_000, test_id=1)
    assert times.shape == (200,)
    assert (times == -1).sum() > 0
    assert (times[times != -1] > 0).all()


# --------------------------------------------------------------------------
# reception: loss, foreign traffic, stops


def test_forced_loss_is_counted_and_seqs_are_a_subset():
    n = 2000
    rx = E.open_udp(bind=("127.0.0.1", 0), rcvbuf=1024)  # the kernel's minimum
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        sent = E.send_paced(tx, count=n, size_bytes=1000, spacing_ns=0, test_id=5)
        got = E.receive(rx, max_packets=n, test_id=5, idle_timeout_ns=200 * MS)
    assert (sent > 0).all()
    assert 0 < len(got) < n and got.stopped_by == "idle"
    assert np.isin(got.seq, np.arange(n)).all()
    assert (np.diff(got.seq.astype(np.int64)) > 0).all()
    assert got.foreign == 0
    assert got.kernel_drops > 0
    assert 0 <= got.rxq_ovfl <= got.kernel_drops
    # every datagram is either read or counted as dropped by the socket
    # (exact on loopback unless the backlog queue overflowed, not counted there)
    assert n // 2 < len(got) + got.kernel_drops <= n


def test_each_datagram_carries_the_drops_before_it():
    rx = E.open_udp(bind=("127.0.0.1", 0), rcvbuf=1024)
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        E.send_paced(tx, count=500, size_bytes=1000, spacing_ns=0, test_id=6)
        first = E.receive(rx, max_packets=500, test_id=6, idle_timeout_ns=200 * MS)
        E.send_paced(tx, count=1, size_bytes=1000, spacing_ns=0, test_id=6)
        later = E.receive(rx, max_packets=1, test_id=6, idle_timeout_ns=2 * S)
    assert first.kernel_drops > 0 and len(later) == 1
    # SO_RXQ_OVFL on the later datagram: every drop of the burst came before it
    assert later.rxq_ovfl == later.kernel_drops == first.kernel_drops


def test_foreign_datagrams_are_counted_not_received():
    rx = E.open_udp(bind=("127.0.0.1", 0))
    tx = E.open_udp(connect=rx.getsockname())
    rng = np.random.default_rng(0)
    with closing_all(rx, tx):
        for _ in range(5):  # random bytes
            tx.send(rng.integers(0, 256, 100, dtype=np.uint8).tobytes())
        for i in range(4):  # another test
            tx.send(make_payload(100, Kind.STREAM, i, 6, rng))
        for _ in range(3):  # too short for a header
            tx.send(b"\x4e\x52\x47\x31" + b"\0" * 8)
        tx.send(HEADER.pack(MAGIC ^ 1, 1, 0, 0, 5) + bytes(20))  # wrong magic
        E.send_paced(tx, count=10, size_bytes=64, spacing_ns=0, test_id=5)
        tx.send(b"")  # empty datagram
        got = E.receive(rx, max_packets=100, test_id=5, idle_timeout_ns=200 * MS)
    assert len(got) == 10 and (got.seq == np.arange(10)).all()
    assert got.foreign == 5 + 4 + 3 + 1 + 1
    assert got.stopped_by == "idle"


def test_receive_truncation_and_max_packets():
    rx = E.open_udp(bind=("127.0.0.1", 0))
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        E.send_paced(tx, count=8, size_bytes=3000, spacing_ns=0, test_id=9)
        got = E.receive(rx, max_packets=5, test_id=9, idle_timeout_ns=S, max_bytes=100, keep_bytes=20)
        rest = E.receive(rx, max_packets=5, test_id=9, idle_timeout_ns=100 * MS)
    assert got.stopped_by == "count" and len(got) == 5
    assert got.truncated == 5 and (got.size == 3000).all()
    assert got.payload.shape == (5, 20)
    assert [parse_header(r.tobytes()).seq for r in got.payload] == [0, 1, 2, 3, 4]
    assert (rest.seq == [5, 6, 7]).all() and rest.truncated == 0


def test_hw_timestamps_requested_but_absent_on_loopback():
    rx = E.open_udp(bind=("127.0.0.1", 0))
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        E.enable_timestamps(rx, hw=True)
        until_rx_stamped(rx, tx)
        E.send_paced(tx, count=10, size_bytes=64, spacing_ns=0, test_id=2)
        got = E.receive(rx, max_packets=10, test_id=2, idle_timeout_ns=30 * S, hw_timestamps=True)
    assert len(got) == 10 and (got.hw_ns == -1).all() and (got.kernel_ns > 0).all()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback")
def test_ipv6_and_dual_stack_responder():
    srv = E.open_udp(bind=("::1", 0), family=socket.AF_INET6)
    cli = E.open_udp(bind=("::1", 0), connect=srv.getsockname()[:2], family=socket.AF_INET6)
    with closing_all(srv, cli):
        bg = Background(E.respond, srv, test_id=4, stop_fd=None, max_response_bytes=2000,
                        peer=("::1", None), max_rate_pps=1e5, idle_timeout_ns=300 * MS)
        lat = E.request_response(cli, count=20, request_bytes=64, response_bytes=1500, test_id=4,
                                 timeout_ns=2 * S)
        st = bg.result()
        assert (lat.rtt_ns > 0).all() and st.answered == 20 and st.peer == ("::1", cli.getsockname()[1])
    # an IPv4 peer of a dual-stack socket arrives as ::ffff:127.0.0.1
    srv = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    srv.bind(("::", 0))
    cli = E.open_udp(connect=("127.0.0.1", srv.getsockname()[1]))
    with closing_all(srv, cli):
        bg = Background(E.respond, srv, test_id=4, stop_fd=None, max_response_bytes=2000,
                        peer=("127.0.0.1", None), max_rate_pps=1e5, idle_timeout_ns=300 * MS)
        lat = E.request_response(cli, count=5, request_bytes=64, response_bytes=100, test_id=4,
                                 timeout_ns=2 * S)
        st = bg.result()
        assert (lat.rtt_ns > 0).all() and st.answered == 5 and st.peer == ("127.0.0.1", cli.getsockname()[1])


def test_receive_stops_on_stop_fd(pipe):
    r, w = pipe
    rx = E.open_udp(bind=("127.0.0.1", 0))
    with closing_all(rx):
        bg = Background(E.receive, rx, max_packets=10, test_id=1, idle_timeout_ns=20 * S, stop_fd=r)
        time.sleep(0.1)
        t = time.monotonic()
        os.write(w, b"x")
        got = bg.result(timeout=30)
        assert time.monotonic() - t < 10  # at once: not after the 20 s idle timeout (generous: a loaded machine)
    assert got.stopped_by == "stop" and len(got) == 0
    assert got.seq.dtype == np.uint32 and got.kernel_ns.dtype == np.int64 and got.size.dtype == np.int32


def test_busy_polling_receive_gets_every_datagram_and_still_stops(pipe):
    r, w = pipe
    rx = E.open_udp(bind=("127.0.0.1", 0), rcvbuf=8 << 20)  # room for all: a loaded host may deschedule it
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        bg = Background(E.receive, rx, max_packets=500, test_id=3, idle_timeout_ns=20 * S, busy_poll=True)
        E.send_paced(tx, count=500, size_bytes=200, spacing_ns=20_000, test_id=3)
        got = bg.result(timeout=20)
        assert got.stopped_by == "count" and len(got) == 500 and got.rxq_ovfl == 0
        bg = Background(E.receive, rx, max_packets=10, test_id=3, idle_timeout_ns=20 * S, stop_fd=r, busy_poll=True)
        time.sleep(0.1)
        os.write(w, b"x")
        assert bg.result(timeout=10).stopped_by == "stop"
        got = E.receive(rx, max_packets=10, test_id=3, idle_timeout_ns=100 * MS, busy_poll=True)
        assert got.stopped_by == "idle" and len(got) == 0


def test_socket_busy_polling_is_asked_for_and_reported():
    with closing_all(sock := E.open_udp(bind=("127.0.0.1", 0))):
        granted = E.socket_busy_poll(sock, usecs=30)
    # as root every option is granted; otherwise the kernel's refusal is named, never raised
    for name in ("so_busy_poll_us", "so_prefer_busy_poll", "so_busy_poll_budget"):
        assert name in granted["refused"] or name in granted
    if os.geteuid() == 0:
        assert granted["refused"] == {} and granted["so_busy_poll_us"] == 30 and granted["so_prefer_busy_poll"] == 1


def test_receive_idle_timeouts():
    rx = E.open_udp(bind=("127.0.0.1", 0))
    tx = E.open_udp(connect=rx.getsockname())
    with closing_all(rx, tx):
        t = time.monotonic()
        got = E.receive(rx, max_packets=10, test_id=1, idle_timeout_ns=20 * S, first_timeout_ns=100 * MS)
        assert got.stopped_by == "idle" and len(got) == 0
        assert 0.09 < time.monotonic() - t < 10  # the first timeout, not the 20 s idle one
        # idle after the first packets; foreign traffic does not keep it alive
        E.send_paced(tx, count=3, size_bytes=64, spacing_ns=0, test_id=1)
        t = time.monotonic()
        got = E.receive(rx, max_packets=10, test_id=1, idle_timeout_ns=150 * MS, first_timeout_ns=20 * S)
        assert got.stopped_by == "idle" and len(got) == 3
        assert time.monotonic() - t < 10  # the idle timeout, not the 20 s first one


def test_signal_interrupts_send_paced_and_receive():
    if threading.current_thread() is not threading.main_thread():
        pytest.skip(reason="signals are handled in the main thread")

    class Alarm(Exception):
        pass

    def handler(signum, frame):
        raise Alarm

    old = signal.signal(signal.SIGALRM, handler)
    rx = E.open_udp(bind=("127.0.0.1", 0))
    tx = E.open_udp(connect=rx.getsockname())
    try:
        with closing_all(rx, tx):
            for call in (
                lambda: E.send_paced(tx, count=5, size_bytes=64, spacing_ns=10 * S, test_id=1),
                lambda: E.receive(rx, max_packets=5, test_id=1, idle_timeout_ns=30 * S),
            ):
                t = time.monotonic()
                signal.setitimer(signal.ITIMER_REAL, 0.1)
                with pytest.raises(Alarm):
                    call()
                assert time.monotonic() - t < 5  # at the signal, not after the 10 s spacing or 30 s timeout
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------
# request-response and the responder


@pytest.mark.parametrize("busy_poll", [False, True], ids=["blocking", "busy-poll"])
@pytest.mark.parametrize("response_bytes", [64, 3000, 60000])
def test_request_response_round_trips(busy_poll, response_bytes):
    # 3000 and 60000 bytes are IP fragments on a 1500-byte MTU link; the
    # loopback's MTU is 64 KiB, so here the kernel sends them whole. Busy
    # polling spins on both ends, as `latency --busy-poll` has it.
    with responder(busy_poll=busy_poll) as (srv, bg):
        cli = E.open_udp(bind=("127.0.0.1", 0), connect=srv.getsockname())
        port = cli.getsockname()[1]
        with closing_all(cli):
            lat = E.request_response(cli, count=200, request_bytes=64, response_bytes=response_bytes,
                                     test_id=42, timeout_ns=2 * S, busy_poll=busy_poll)
    stats = bg.result()
    assert len(lat) == 200 and lat.rtt_ns.dtype == np.int64
    assert (lat.rtt_ns > 0).all() and (lat.rtt_ns < 2 * S).all()
    assert (lat.size == response_bytes).all()
    assert (lat.timeouts, lat.stale, lat.foreign, lat.errors) == (0, 0, 0, 0)
    assert stats.answered == 200 and stats.refused == 0 and stats.stopped_by == "stop"
    assert stats.peer == ("127.0.0.1", port)


def test_requests_carry_the_response_size_and_payload_header():
    srv = E.open_udp(bind=("127.0.0.1", 0))
    cli = E.open_udp(connect=srv.getsockname())
    with closing_all(srv, cli):
        lat = E.request_response(cli, count=2, request_bytes=100, response_bytes=1234, test_id=8,
                                 timeout_ns=20 * MS)
        reqs = [srv.recv(2000) for _ in range(2)]
    assert lat.timeouts == 2 and (lat.rtt_ns == -1).all() and (lat.size == -1).all()
    for i, req in enumerate(reqs):
        assert len(req) == 100
        h = parse_header(req)
        assert (h.kind, h.seq, h.test_id) == (Kind.REQUEST, i, 8)
        assert RESPONSE_BYTES.unpack_from(req, HEADER_BYTES)[0] == 1234
    assert reqs[0][20:] != reqs[1][20:]


def test_stale_and_foreign_responses_are_skipped():
    srv = E.open_udp(bind=("127.0.0.1", 0))
    cli = E.open_udp(connect=srv.getsockname())
    count = 20

    def fake_server():
        rng = np.random.default_rng(1)
        for _ in range(count):
            req, addr = srv.recvfrom(2000)
            seq = parse_header(req).seq
            srv.sendto(make_payload(64, Kind.RESPONSE, seq + 1000, 77, rng), addr)  # stale
            srv.sendto(make_payload(64, Kind.RESPONSE, seq, 78, rng), addr)  # another test
            srv.sendto(make_payload(64, Kind.REQUEST, seq, 77, rng), addr)  # wrong kind
            srv.sendto(make_payload(80, Kind.RESPONSE, seq, 77, rng), addr)  # the one

    with closing_all(srv, cli):
        bg = Background(fake_server)
        lat = E.request_response(cli, count=count, request_bytes=64, response_bytes=64, test_id=77,
                                 timeout_ns=2 * S, gap_ns=100_000)
        bg.result()
    assert (lat.rtt_ns > 0).all() and (lat.size == 80).all()
    assert lat.stale == count and lat.foreign == 2 * count and lat.timeouts == 0


def test_timeouts_and_refused_connection():
    silent = E.open_udp(bind=("127.0.0.1", 0))  # bound, never answers
    cli = E.open_udp(connect=silent.getsockname())
    with closing_all(silent, cli):
        for busy in (False, True):
            t = time.monotonic()
            lat = E.request_response(cli, count=3, request_bytes=64, response_bytes=64, test_id=1,
                                     timeout_ns=30 * MS, busy_poll=busy)
            assert lat.timeouts == 3 and (lat.rtt_ns == -1).all() and lat.errors == 0
            assert 0.08 < time.monotonic() - t < 10  # three 30 ms timeouts (generous: a loaded machine)
    dead = E.open_udp(bind=("127.0.0.1", 0))
    addr = dead.getsockname()
    dead.close()
    cli = E.open_udp(connect=addr)
    with closing_all(cli):
        lat = E.request_response(cli, count=3, request_bytes=64, response_bytes=64, test_id=1,
                                 timeout_ns=5 * S)
    assert (lat.rtt_ns == -1).all() and lat.errors == 3 and lat.timeouts == 0
    assert lat.last_errno == 111  # ECONNREFUSED: ends each request at once, no 5 s timeout


def test_a_flood_does_not_outlast_the_timeout():
    peer = E.open_udp(bind=("127.0.0.1", 0))
    cli = E.open_udp(bind=("127.0.0.1", 0), connect=peer.getsockname())
    peer.connect(cli.getsockname())
    with closing_all(peer, cli):
        # stream datagrams of this test (kind STREAM: foreign to the client) at full speed, for seconds
        flood = Background(E.send_paced, peer, count=1_000_000, size_bytes=64, spacing_ns=0, test_id=1)
        time.sleep(0.01)
        lat = E.request_response(cli, count=3, request_bytes=64, response_bytes=64, test_id=1,
                                 timeout_ns=50 * MS, busy_poll=True)
        # each request's timeout counts from its sending, not from the last foreign datagram: the client
        # gives up while the flood still runs, however slowly a loaded machine runs either
        flooding = flood.thread.is_alive()
        flood.result(timeout=300)
    assert lat.timeouts == 3 and lat.foreign > 0 and lat.stale == 0
    assert flooding


def test_responder_only_answers_its_peer():
    cli = E.open_udp(bind=("127.0.0.1", 0))
    other_port = E.open_udp(bind=("127.0.0.1", 0))
    with closing_all(cli, other_port), responder(peer=("127.0.0.1", cli.getsockname()[1])) as (srv, bg):
        cli.connect(srv.getsockname())
        other_port.connect(srv.getsockname())
        lat = E.request_response(other_port, count=5, request_bytes=64, response_bytes=64, test_id=42,
                                 timeout_ns=30 * MS)
        assert lat.timeouts == 5
        lat = E.request_response(cli, count=10, request_bytes=64, response_bytes=64, test_id=42,
                                 timeout_ns=2 * S)
        assert (lat.rtt_ns > 0).all()
    stats = bg.result()
    assert stats.answered == 10 and stats.refused_peer == 5 and stats.refused == 5


def test_responder_learns_the_port_then_refuses_other_ports_and_addresses():
    first = E.open_udp(bind=("127.0.0.1", 0))
    first_port = first.getsockname()[1]
    second = E.open_udp(bind=("127.0.0.1", 0))
    try:
        other_ip = E.open_udp(bind=("127.0.0.2", 0))
    except OSError:
        other_ip = None
    socks = [s for s in (first, second, other_ip) if s is not None]
    with closing_all(*socks), responder(peer=("127.0.0.1", None)) as (srv, bg):
        for s in socks:
            s.connect(srv.getsockname())
        if other_ip is not None:  # before the port is learned: refused by address
            lat = E.request_response(other_ip, count=3, request_bytes=64, response_bytes=64,
                                     test_id=42, timeout_ns=30 * MS)
            assert lat.timeouts == 3
        lat = E.request_response(first, count=4, request_bytes=64, response_bytes=64, test_id=42,
                                 timeout_ns=2 * S)
        assert (lat.rtt_ns > 0).all()
        lat = E.request_response(second, count=2, request_bytes=64, response_bytes=64, test_id=42,
                                 timeout_ns=30 * MS)
        assert lat.timeouts == 2
        # invalid requests from the peer: refused, not answered
        first.send(make_payload(64, Kind.STREAM, 0, 42, np.random.default_rng(0)))
        first.send(b"x" * 19)
        time.sleep(0.05)
    stats = bg.result()
    assert stats.peer == ("127.0.0.1", first_port)
    assert stats.answered == 4
    assert stats.refused_peer == 2 + (3 if other_ip is not None else 0)
    assert stats.refused_invalid == 2


def test_response_size_is_capped():
    with responder(max_response_bytes=1000) as (srv, bg):
        cli = E.open_udp(connect=srv.getsockname())
        with closing_all(cli):
            lat = E.request_response(cli, count=20, request_bytes=64, response_bytes=3000, test_id=42,
                                     timeout_ns=2 * S)
            small = E.request_response(cli, count=5, request_bytes=64, response_bytes=16, test_id=42,
                                       timeout_ns=2 * S)
    assert (lat.size == 1000).all() and (small.size == 16).all()
    assert bg.result().answered == 25


def test_rate_cap_holds_under_a_flood():
    rate, burst = 1000.0, 10
    cli = E.open_udp(bind=("127.0.0.1", 0))
    with closing_all(cli), responder(peer=("127.0.0.1", cli.getsockname()[1]), max_rate_pps=rate,
                                     burst=burst, max_response_bytes=64) as (srv, bg):
        cli.connect(srv.getsockname())
        flood = E.send_paced(cli, count=3000, size_bytes=64, spacing_ns=10_000, test_id=42,
                             kind=Kind.REQUEST)
        time.sleep(0.05)
    stats = bg.result()
    duration = time.monotonic() - bg.started
    assert (flood > 0).all()
    assert stats.refused_rate > 0
    assert burst <= stats.answered <= rate * duration + burst
    assert stats.answered + stats.refused_rate <= 3000


def test_respond_stop_fd_idle_and_duration():
    srv = E.open_udp(bind=("127.0.0.1", 0))
    r, w = os.pipe()
    try:
        with closing_all(srv):
            bg = Background(E.respond, srv, test_id=1, stop_fd=r, max_response_bytes=100,
                            peer=("127.0.0.1", None), max_rate_pps=100, idle_timeout_ns=20 * S)
            time.sleep(0.1)
            t = time.monotonic()
            os.write(w, b"x")
            assert bg.result(timeout=30).stopped_by == "stop"
            assert time.monotonic() - t < 10  # at once: not after the 20 s idle timeout
            t = time.monotonic()
            st = E.respond(srv, test_id=1, stop_fd=None, max_response_bytes=100, peer=("127.0.0.1", None),
                           max_rate_pps=100, idle_timeout_ns=100 * MS)
            assert st.stopped_by == "idle" and st.peer == ("127.0.0.1", None)
            assert 0.09 < time.monotonic() - t < 10  # the 100 ms idle timeout (generous: a loaded machine)
            st = E.respond(srv, test_id=1, stop_fd=None, max_response_bytes=100, peer=("127.0.0.1", None),
                           max_rate_pps=100, idle_timeout_ns=20 * S, max_duration_ns=100 * MS)
            assert st.stopped_by == "duration"
    finally:
        os.close(r)
        os.close(w)


# --------------------------------------------------------------------------
# argument checks


def test_argument_errors(pipe):
    r, _w = pipe
    bound = E.open_udp(bind=("127.0.0.1", 0))
    conn = E.open_udp(connect=bound.getsockname())
    fresh = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    with closing_all(bound, conn, fresh, tcp):
        def send(**kw):
            args = {"count": 1, "size_bytes": 64, "spacing_ns": 0, "test_id": 1}
            args.update(kw)
            return E.send_paced(args.pop("sock", conn), **args)

        for kw, msg in [
            ({"size_bytes": 15}, "size_bytes"),
            ({"size_bytes": 65508}, "size_bytes"),
            ({"count": -1}, "count"),
            ({"count": 1.5}, "count"),
            ({"spacing_ns": -1}, "spacing_ns"),
            ({"test_id": 2**32}, "test_id"),
            ({"first_seq": -1}, "first_seq"),
            ({"kind": 7}, "kind"),
            ({"seed": "x"}, "seed"),
            ({"start_ns": E.monotonic_ns() + 2 * E.MAX_NS}, "start_ns"),
            ({"sock": bound}, "connected"),
            ({"sock": tcp}, "UDP"),
            ({"sock": "nope"}, "socket.socket"),
        ]:
            with pytest.raises(ValueError, match=msg):
                send(**kw)
        assert len(send(count=0)) == 0

        with pytest.raises(ValueError, match="bound"):
            E.receive(fresh, max_packets=1, test_id=1, idle_timeout_ns=MS)
        with pytest.raises(ValueError, match="keep_bytes"):
            E.receive(bound, max_packets=1, test_id=1, idle_timeout_ns=MS, max_bytes=100, keep_bytes=101)
        with pytest.raises(ValueError, match="max_bytes"):
            E.receive(bound, max_packets=1, test_id=1, idle_timeout_ns=MS, max_bytes=8)
        with pytest.raises(ValueError, match="idle_timeout_ns"):
            E.receive(bound, max_packets=1, test_id=1, idle_timeout_ns=-1)
        with pytest.raises(ValueError, match="stop_fd"):
            E.receive(bound, max_packets=1, test_id=1, idle_timeout_ns=MS, stop_fd=999_999)
        with pytest.raises(ValueError, match="16 GiB"):
            E.receive(bound, max_packets=2**32, test_id=1, idle_timeout_ns=MS, keep_bytes=1000)

        rr = {"count": 1, "request_bytes": 64, "response_bytes": 64, "test_id": 1, "timeout_ns": MS}
        for kw, msg in [
            ({"request_bytes": 19}, "request_bytes"),
            ({"response_bytes": 15}, "response_bytes"),
            ({"response_bytes": 70000}, "response_bytes"),
            ({"timeout_ns": 0}, "timeout_ns"),
            ({"gap_ns": -5}, "gap_ns"),
        ]:
            with pytest.raises(ValueError, match=msg):
                E.request_response(conn, **{**rr, **kw})
        with pytest.raises(ValueError, match="connected"):
            E.request_response(bound, **rr)

        rs = {"test_id": 1, "stop_fd": r, "max_response_bytes": 100, "peer": ("127.0.0.1", None),
                  "max_rate_pps": 10, "idle_timeout_ns": MS}
        for kw, msg in [
            ({"max_rate_pps": 0}, "max_rate_pps"),
            ({"max_rate_pps": float("nan")}, "max_rate_pps"),
            ({"max_response_bytes": 10}, "max_response_bytes"),
            ({"peer": ("localhost", 1)}, "numeric"),
            ({"peer": ("127.0.0.1", 70000)}, "port"),
            ({"peer": "127.0.0.1"}, "peer"),
            ({"burst": 0}, "burst"),
        ]:
            with pytest.raises(ValueError, match=msg):
                E.respond(bound, **{**rs, **kw})
        with pytest.raises(ValueError, match="must not be connected"):
            E.respond(conn, **rs)
        with pytest.raises(ValueError, match="bound"):
            E.respond(fresh, **rs)
