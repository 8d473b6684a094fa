"""The udpmon control plane: protocol, daemon and controller over real TCP on 127.0.0.1.

The daemon runs in a background thread. Tests that need a running test use a
fake engine (it waits on the stop pipe, sends no UDP); one end-to-end test
drives the real C engine and is skipped only when it is not built.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import selectors
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nicrig.errors import NicrigError
from nicrig.readiness import readable
from nicrig.udpmon import daemon as D
from nicrig.udpmon import protocol as P
from nicrig.udpmon.client import Controller
from nicrig.udpmon.engine import RECEIVE_BUFFER_BYTES

SECRET = b"correct horse battery staple 0123456789"


# ----------------------------------------------------------------------------- helpers


class FakeEngine:
    """Blocks like the engine until its stop pipe is readable; records its calls; sends nothing."""

    def __init__(self, result: Any = None, *, ignore_stop: threading.Event | None = None,
                 error: Exception | None = None):
        self.result = result
        self.error = error
        self.ignore_stop = ignore_stop
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.started = threading.Event()
        self.stopped = threading.Event()

    def _run(self, name: str, sock: socket.socket, kwargs: dict[str, Any]) -> Any:
        self.calls.append((name, kwargs))
        self.started.set()
        if self.ignore_stop is not None:
            self.ignore_stop.wait(30)
        else:
            readable(kwargs["stop_fd"], 30)
        self.stopped.set()
        if self.error is not None:
            raise self.error
        return self.result if self.result is not None else {"seq": np.arange(3, dtype=np.uint32), "n": 3}

    def respond(self, sock: socket.socket, **kwargs: Any) -> Any:
        return self._run("respond", sock, kwargs)

    def receive(self, sock: socket.socket, **kwargs: Any) -> Any:
        return self._run("receive", sock, kwargs)


@contextmanager
def running(secret: bytes | None = None, engine: Any = None, counters: Callable[[str], Any] | None = None,
            **config: Any) -> Iterator[tuple[D.Daemon, list[str]]]:
    """A daemon on 127.0.0.1:<free port> in a background thread, and its log lines."""
    logs: list[str] = []
    cfg = D.Config(port=0, secret=secret, **{"handshake_timeout_s": 10.0, **config})  # a loaded machine
    d = D.Daemon(cfg, log=logs.append,
                 engine_loader=(lambda: engine) if engine is not None else None,
                 counters_loader=(lambda: counters) if counters is not None else None)
    d.listen()
    thread = threading.Thread(target=d.serve_forever, daemon=True)
    thread.start()
    try:
        yield d, logs
    finally:
        d.shutdown()
        thread.join(15)
        assert not thread.is_alive()


def connect(d: D.Daemon, secret: bytes | None = None, wait_s: float = 5.0, **kw: Any) -> Controller:
    """A connected Controller, retrying while the daemon is still freeing itself from a previous one."""
    host, port = d.address
    end = time.monotonic() + wait_s
    while True:
        c = Controller(host, port, secret=secret, timeout_s=5.0, **kw)
        try:
            c.connect()
            return c
        except P.BusyError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def raw_session(d: D.Daemon, secret: bytes = b"") -> tuple[socket.socket, P.Channel, bytes, bytes]:
    """A hand-made handshake: (socket, channel, client->daemon key, daemon->client key)."""
    end = time.monotonic() + 5
    while True:
        sock = socket.create_connection(d.address, timeout=5)
        first = P.recv_plain(sock, timeout=5)
        if first["type"] == "hello":
            ns, nc = bytes.fromhex(first["nonce"]), P.new_nonce()
            P.send_plain(sock, {"type": "auth", "version": P.VERSION, "client_nonce": nc.hex(),
                                "mac": P.client_proof(secret, ns, nc).hex()})
            first = P.recv_plain(sock, timeout=5)
            if first["type"] == "welcome":
                c2d, d2c = P.session_keys(secret, ns, nc)
                return sock, P.Channel(sock, send_key=c2d, recv_key=d2c), c2d, d2c
        sock.close()
        assert first.get("code") == "busy" and time.monotonic() < end, first
        time.sleep(0.02)


class _Capture:
    """A stand-in socket that keeps what a Channel sends, to replay or tamper with it."""

    def __init__(self) -> None:
        self.data = b""

    def settimeout(self, _t: object) -> None:
        pass

    def sendall(self, b: bytes | memoryview) -> None:
        self.data += bytes(b)


def framed(key: bytes, seq: int, msg: dict[str, Any]) -> bytes:
    ch = P.Channel(_Capture(), send_key=key, recv_key=b"")  # type: ignore[arg-type]
    ch.send_seq = seq
    ch.send(msg)
    return ch.sock.data  # type: ignore[attr-defined]


def read_until_closed(sock: socket.socket, timeout: float = 5.0) -> bytes:
    """Everything the peer sends until it closes; fails if it does not close in time."""
    sock.settimeout(timeout)
    out = b""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return out
        if not chunk:
            return out
        out += chunk
    raise AssertionError("the daemon did not close the connection")


def plain_frames(data: bytes) -> list[dict[str, Any]]:
    out = []
    while len(data) >= 4:
        n = int.from_bytes(data[:4], "big")
        out.append(P.decode_json(data[4 : 4 + n]))
        data = data[4 + n :]
    return out


@contextmanager
def fake_server(script: Callable[[socket.socket], None]) -> Iterator[tuple[str, int]]:
    """A one-connection TCP server on 127.0.0.1 that runs ``script`` on its connection."""
    lsock = socket.create_server(("127.0.0.1", 0))
    errors: list[BaseException] = []

    def serve() -> None:
        conn, _ = lsock.accept()
        with conn:
            conn.settimeout(5)
            try:
                script(conn)
            except BaseException as exc:  # noqa: BLE001 - reported by the test below
                errors.append(exc)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield lsock.getsockname()[:2]
    finally:
        t.join(10)
        lsock.close()
    assert not errors, errors


def _hello(version: int = P.VERSION, auth: str = "hmac-sha256") -> dict[str, Any]:
    return {"type": "hello", "protocol": "nicrig-udpmon", "version": version, "nonce": os.urandom(32).hex(),
            "auth": auth}


# ----------------------------------------------------------------------------- protocol pieces


def test_hkdf_matches_rfc5869_case_1() -> None:
    okm = P.hkdf_sha256(b"\x0b" * 22, bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == ("3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf"
                         "34007208d5b887185865")


@pytest.mark.parametrize(("address", "expected"), [
    ("127.0.0.1", True), ("127.9.8.7", True), ("::1", True), ("::ffff:127.0.0.1", True),
    ("198.18.0.1", False), ("0.0.0.0", False), ("::", False), ("::ffff:10.0.0.1", False),
    ("fe80::1%lo", False), ("localhost", False), ("", False),
])
def test_loopback_check(address: str, expected: bool) -> None:
    assert D.is_loopback(address) is expected


def test_array_descriptors_are_validated() -> None:
    good = {"name": "a", "dtype": "<i8", "shape": [3], "nbytes": 24}
    assert P.parse_array_descriptor(good)[2:] == ((3,), 24)
    for bad in ({**good, "dtype": "|O"}, {**good, "dtype": "<i8,<i8"}, {**good, "nbytes": 25},
                {**good, "shape": [-1]}, {**good, "shape": [True]}, {**good, "name": ""},
                {**good, "dtype": [["x", "|O"]]}, {**good, "dtype": [["x", "<i8"], ["x", "<i8"]]}, "a"):
        with pytest.raises(P.ProtocolError):
            P.parse_array_descriptor(bad)
    with pytest.raises(P.LimitError):
        P.parse_array_descriptor({"name": "a", "dtype": "<i8", "shape": [2**40], "nbytes": 2**43})


# ----------------------------------------------------------------------------- handshake


def test_loopback_daemon_without_secret() -> None:
    with running() as (d, logs), connect(d) as c:
        assert c.auth == "loopback"
        c.ping()
        assert c.limits()["max_response_bytes"] == 9000
        # the daemon names the interface it reaches this controller by (loopback here)
        assert c.status() == {"state": "idle", "interface": "lo"}
    assert len(logs) == 1 and "auth=loopback authenticated" in logs[0] and "end: bye" in logs[0]


def test_loopback_daemon_refuses_other_peers() -> None:
    with running() as (d, logs):
        ours, theirs = socket.socketpair()
        with ours:
            # what accept() gives for a remote controller (refused before it reaches the event loop's table)
            d._admit(selectors.DefaultSelector(), theirs, ("198.18.0.5", 40000))
            (err,) = plain_frames(read_until_closed(ours))
        assert err["code"] == "auth" and "loopback" in err["message"] and "--secret-file" in err["message"]
        assert "198.18.0.5:40000 refused" in logs[-1]
        with connect(d) as c:  # and still serves loopback controllers
            c.ping()


def test_secret_handshake_and_refusals() -> None:
    with running(secret=SECRET) as (d, logs):
        with connect(d, SECRET) as c:
            assert c.auth == "hmac-sha256"
            c.ping()
        with pytest.raises(P.AuthError, match="does not match"):
            connect(d, b"wrong secret")
        with pytest.raises(P.AuthError, match="requires the shared secret"):
            connect(d)
        # The daemon's thread logs the refusal after sending it: give it a moment.
        end = time.monotonic() + 5
        while not any("refused: auth" in line for line in logs) and time.monotonic() < end:
            time.sleep(0.01)
        assert any("refused: auth" in line for line in logs)
        with connect(d, SECRET.decode() + "\n") as c:  # str secrets, surrounding whitespace ignored
            c.ping()


def test_client_with_secret_refuses_loopback_daemon() -> None:
    with running() as (d, _), pytest.raises(P.AuthError, match="runs without a secret"):
        connect(d, SECRET)


def test_client_authenticates_the_daemon() -> None:
    def impostor(conn: socket.socket) -> None:  # accepts any secret, cannot prove it knows ours
        P.send_plain(conn, _hello())
        P.recv_plain(conn, timeout=5)
        P.send_plain(conn, {"type": "welcome", "version": P.VERSION, "mac": os.urandom(32).hex()})
        conn.recv(1)

    with fake_server(impostor) as (host, port), pytest.raises(P.AuthError, match="could not prove"):
        Controller(host, port, secret=SECRET, timeout_s=5).connect()


def test_version_mismatch_is_explained_at_both_ends() -> None:
    told: list[dict[str, Any]] = []

    def future_daemon(conn: socket.socket) -> None:
        P.send_plain(conn, _hello(version=P.VERSION + 1))
        told.append(P.recv_plain(conn, timeout=5))

    with fake_server(future_daemon) as (host, port), pytest.raises(P.VersionError, match=f"version {P.VERSION + 1}.*version {P.VERSION}"):
        Controller(host, port, secret=SECRET, timeout_s=5).connect()
    assert told[0]["code"] == "version" and "same nicrig version" in told[0]["message"]

    with running() as (d, _):
        sock = socket.create_connection(d.address, timeout=5)
        with sock:
            hello = P.recv_plain(sock, timeout=5)
            nc = P.new_nonce()
            P.send_plain(sock, {"type": "auth", "version": P.VERSION + 1, "client_nonce": nc.hex(),
                                "mac": P.client_proof(b"", bytes.fromhex(hello["nonce"]), nc).hex()})
            (err,) = plain_frames(read_until_closed(sock))
        assert (err["code"] == "version" and f"version {P.VERSION + 1}" in err["message"]
                and f"version {P.VERSION}" in err["message"])


def test_connection_refused_and_foreign_servers() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    with pytest.raises(P.Unreachable, match=rf"no udpmon daemon at 127\.0\.0\.1:{port} \(start one with "
                                            r"nicrig udpmon serve\)"):
        Controller("127.0.0.1", port, timeout_s=2).connect()

    def http(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    with fake_server(http) as (host, p), pytest.raises(P.ProtocolError, match="does not speak"):
        Controller(host, p, timeout_s=5).connect()


# ----------------------------------------------------------------------------- authenticated session


def test_tampered_replayed_and_reflected_messages_are_refused() -> None:
    with running(secret=SECRET) as (d, logs):
        # A flipped byte anywhere in the frame (MAC or body).
        for where in (4, 40, -2):
            sock, ch, c2d, _ = raw_session(d, SECRET)
            with sock:
                frame = bytearray(framed(c2d, 0, {"type": "ping"}))
                frame[where] ^= 0x01
                sock.sendall(frame)
                err = ch.recv(timeout=5)
                assert (err["type"], err["code"]) == ("error", "auth")
                read_until_closed(sock)
        # A replayed message: accepted once, refused the second time.
        sock, ch, c2d, _ = raw_session(d, SECRET)
        with sock:
            ping = framed(c2d, 0, {"type": "ping"})
            sock.sendall(ping)
            assert ch.recv(timeout=5)["type"] == "pong"
            sock.sendall(ping)
            assert ch.recv(timeout=5)["code"] == "auth"
            read_until_closed(sock)
        # The daemon's own message sent back to it (other direction's key).
        sock, ch, _, d2c = raw_session(d, SECRET)
        with sock:
            sock.sendall(framed(d2c, 0, {"type": "ping"}))
            assert ch.recv(timeout=5)["code"] == "auth"
            read_until_closed(sock)
        # A message keyed from another session.
        old, _, old_key, _ = raw_session(d, SECRET)
        old.close()
        sock, ch, _, _ = raw_session(d, SECRET)
        with sock:
            sock.sendall(framed(old_key, 0, {"type": "ping"}))
            assert ch.recv(timeout=5)["code"] == "auth"
        assert sum("failed authentication" in line for line in logs) >= 5
        with connect(d, SECRET) as c:
            c.ping()


def test_unauthenticated_commands_and_oversized_frames_are_refused() -> None:
    with running(secret=SECRET, engine=FakeEngine()) as (d, _):
        sock = socket.create_connection(d.address, timeout=5)
        with sock:
            P.recv_plain(sock, timeout=5)
            P.send_plain(sock, {"type": "start_responder", "test_id": 1, "max_response_bytes": 100,
                                "max_rate_pps": 10, "duration_s": 1})
            (err,) = plain_frames(read_until_closed(sock))
        assert err["code"] == "auth" and "not authenticated" in err["message"]

        sock = socket.create_connection(d.address, timeout=5)
        with sock:
            P.recv_plain(sock, timeout=5)
            sock.sendall(struct.pack(">I", 0xFFFFFFF0) + b"x" * 1000)
            (err,) = plain_frames(read_until_closed(sock))
        assert err["code"] == "limit" and "exceeds" in err["message"]

        sock, ch, _, _ = raw_session(d, SECRET)
        with sock:
            sock.sendall(struct.pack(">I", P.MAX_FRAME_BYTES + 1))
            err = ch.recv(timeout=5)
            assert err["code"] == "limit" and str(P.MAX_FRAME_BYTES) in err["message"]
            read_until_closed(sock)
        with connect(d, SECRET) as c:
            c.ping()


def test_a_request_ended_by_a_signal_leaves_the_channel_in_step() -> None:
    """A signal between a request and its reply (a sweep interrupted in ``counters``) must not shift replies."""
    def interrupt(*_: Any, **__: Any) -> Any:
        raise KeyboardInterrupt

    with running(engine=FakeEngine(), counters=lambda iface: {"iface": iface}) as (d, _), connect(d) as c:
        channel = c._channel
        assert channel is not None
        channel.recv = interrupt  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            c.counters("lo")
        del channel.recv
        assert "max_rate_pps" in c.limits()  # not the counters reply
        c.start_receiver(test_id=1, max_packets=10, idle_timeout_ms=1000, duration_s=5)
        channel.recv_binary = interrupt  # type: ignore[method-assign]
        with pytest.raises(KeyboardInterrupt):
            c.stop()  # the results came, their arrays did not
        del channel.recv_binary
        assert c.status()["state"] == "idle"
        assert c.counters("lo") == {"iface": "lo"}


def test_busy_poll_is_asked_of_the_far_end_within_its_caps() -> None:
    engine = FakeEngine()
    with running(engine=engine) as (d, _), connect(d) as c:
        c.start_responder(test_id=1, max_response_bytes=64, max_rate_pps=1000, duration_s=5, busy_poll=True)
        stats, _ = c.stop()
        c.start_receiver(test_id=2, max_packets=10, idle_timeout_ms=1000, duration_s=5)
        plain, _ = c.stop()
    assert [kw["busy_poll"] for _, kw in engine.calls] == [True, False]
    assert stats["wait"]["busy_poll"] is True and "so_busy_poll_us" in stats["wait"]["socket"]
    assert plain["wait"]["busy_poll"] is False and "socket" not in plain["wait"]
    # a receiver's buffer is sized for a descheduled reader (16 MiB asked; the kernel doubles what it grants)
    assert plain["wait"]["rcvbuf_bytes"] >= (2 * RECEIVE_BUFFER_BYTES if os.geteuid() == 0 else 1)
    with running(engine=FakeEngine(), allow_busy_poll=False) as (d, _), connect(d) as c:
        with pytest.raises(P.LimitError, match="--no-busy-poll"):
            c.start_responder(test_id=1, max_response_bytes=64, max_rate_pps=1000, duration_s=5, busy_poll=True)
        c.start_responder(test_id=1, max_response_bytes=64, max_rate_pps=1000, duration_s=5)  # blocking is fine
        c.stop()


def test_busy_second_controller() -> None:
    with running(secret=SECRET) as (d, logs):
        first = connect(d, SECRET)
        with pytest.raises(P.BusyError, match="busy"):
            Controller(*d.address, secret=SECRET, timeout_s=5).connect()
        first.ping()  # the first session is unharmed
        first.close()
        with connect(d, SECRET) as c:
            c.ping()
        assert any("refused: busy" in line for line in logs)


def test_caps_are_enforced_and_reported() -> None:
    with running(engine=FakeEngine(), limits=D.Limits(max_response_bytes=1500, max_rate_pps=1000,
                                                      max_duration_s=5, max_packets=100)) as (d, _), connect(d) as c:
        responder = {"test_id": 1, "max_response_bytes": 1500, "max_rate_pps": 1000, "duration_s": 5}
        for field, value, option in (("max_response_bytes", 1501, "--max-response-bytes"),
                                     ("max_rate_pps", 1001, "--max-rate-pps"),
                                     ("duration_s", 5.5, "--max-duration-s")):
            with pytest.raises(P.LimitError, match=f"{field}.*limit.*{option}"):
                c.start_responder(**{**responder, field: value})
        with pytest.raises(P.LimitError, match="max_packets 101 exceeds.*--max-packets"):
            c.start_receiver(test_id=1, max_packets=101, idle_timeout_ms=100, duration_s=1)
        for bad in ({"max_response_bytes": 8}, {"test_id": -1}, {"test_id": 2**32}, {"duration_s": 0},
                    {"udp_port": 80}, {"max_rate_pps": True}, {"duration_s": "1"}):
            with pytest.raises(P.RequestError):
                c.start_responder(**{**responder, **bad})
        c.ping()  # refusals keep an authenticated session
        port = c.start_responder(**responder)
        assert 1024 <= port < 65536
        with pytest.raises(P.BusyError, match="send stop first"):
            c.start_receiver(test_id=2, max_packets=10, idle_timeout_ms=100, duration_s=1)
        stats, _ = c.stop()
        assert stats["stop_reason"] == "stop" and stats["limits"]["max_packets"] == 100
        with pytest.raises(P.RequestError, match="no test to stop"):
            c.stop()


def test_responder_is_told_to_answer_only_the_controller() -> None:
    engine = FakeEngine()
    with running(engine=engine) as (d, _), connect(d) as c:
        c.start_responder(test_id=5, max_response_bytes=1000, max_rate_pps=100, duration_s=2, peer_udp_port=40001)
        c.stop()
        c.start_receiver(test_id=6, max_packets=10, idle_timeout_ms=500, duration_s=2)
        c.stop()
    (_, respond), (_, receive) = engine.calls
    assert respond["peer"] == ("127.0.0.1", 40001)
    assert respond["max_response_bytes"] == 1000 and respond["max_rate_pps"] == 100
    assert respond["max_duration_ns"] == 2_000_000_000 and respond["test_id"] == 5
    assert receive["max_packets"] == 10 and receive["idle_timeout_ns"] == 500_000_000
    assert isinstance(respond["stop_fd"], int)


def test_results_arrays_round_trip() -> None:
    structured = np.array([(1, 2.5), (3, -1.0)], dtype=[("a", ">u4"), ("b", "<f8")])
    result = {"seq": np.arange(1000, dtype=np.uint32), "rtt_ns": np.arange(5, dtype=">i8") * 7,
              "ok": np.array([True, False]), "grid": np.ones((3, 4), np.float32),
              "empty": np.zeros(0, np.int64), "rec": structured, "count": np.int64(5), "ratio": float("nan")}
    with running(engine=FakeEngine(result)) as (d, _), connect(d) as c:
        c.start_receiver(test_id=3, max_packets=1000, idle_timeout_ms=100, duration_s=1)
        stats, arrays = c.stop()
    assert stats["engine"] == {"count": 5, "ratio": None}
    assert set(arrays) == {"seq", "rtt_ns", "ok", "grid", "empty", "rec"}
    for name in arrays:
        np.testing.assert_array_equal(arrays[name], result[name])
    assert arrays["rtt_ns"].dtype == np.dtype("<i8") and arrays["grid"].shape == (3, 4)
    assert arrays["rec"]["b"][0] == 2.5


def test_engine_failures_are_reported() -> None:
    with running(engine=FakeEngine(error=ValueError("socket on fire"))) as (d, _), connect(d) as c:
        c.start_receiver(test_id=3, max_packets=10, idle_timeout_ms=100, duration_s=1)
        with pytest.raises(P.DaemonError, match="engine failed: ValueError: socket on fire"):
            c.stop()
        c.ping()

    def missing() -> Any:
        raise ModuleNotFoundError("No module named 'nicrig.udpmon.engine'")

    with running() as (d, _):
        d._engine_loader = missing
        with connect(d) as c, pytest.raises(P.DaemonError, match="engine is not available"):
            c.start_responder(test_id=1, max_response_bytes=100, max_rate_pps=10, duration_s=1)


def test_stuck_engine_keeps_the_daemon_busy_until_it_returns() -> None:
    release = threading.Event()
    engine = FakeEngine(ignore_stop=release)
    with running(engine=engine, stop_timeout_s=0.3) as (d, _):
        c = connect(d)
        c.start_receiver(test_id=3, max_packets=10, idle_timeout_ms=100, duration_s=5)
        with pytest.raises(P.DaemonError, match="did not stop"):
            c.stop()
        c.close()
        with pytest.raises(P.BusyError, match="still stopping"):
            connect(d, wait_s=0.5)
        release.set()
        with connect(d) as c2:
            c2.ping()


def test_counters() -> None:
    seen: list[str] = []

    def snapshot(interface: str) -> dict[str, Any]:
        seen.append(interface)
        if interface == "nope0":
            raise OSError("no such interface")
        return {"rx_packets": np.int64(12), "pause": {"rx": 1}}

    with running(counters=snapshot) as (d, _), connect(d) as c:
        assert c.counters("eth0") == {"rx_packets": 12, "pause": {"rx": 1}}
        assert "no such interface" in c.counters("nope0")["unavailable"]
        for bad in ("", "../../etc", "a" * 16, "eth0 ", 5):
            with pytest.raises(P.RequestError, match="interface"):
                c.counters(bad)  # type: ignore[arg-type]
    assert seen == ["eth0", "nope0"]

    def no_module() -> Any:
        raise ModuleNotFoundError("No module named 'nicrig.udpmon.counters'")

    with running() as (d, _):
        d._counters_loader = no_module
        with connect(d) as c:
            assert "not available" in c.counters("lo")["unavailable"]


# ----------------------------------------------------------------------------- vanishing controllers


def test_controller_killed_mid_test_frees_the_daemon() -> None:
    engine = FakeEngine()
    with running(engine=engine) as (d, logs):
        c = connect(d)
        port = c.start_receiver(test_id=9, max_packets=1000, idle_timeout_ms=60_000, duration_s=60)
        assert engine.started.wait(60)
        assert c._sock is not None
        c._sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # RST, like a kill
        c._drop()
        assert engine.stopped.wait(60), "the engine was not stopped"
        with connect(d) as c2:
            c2.ping()
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # the UDP socket is closed again
        probe.bind(("127.0.0.1", port))
        probe.close()
    assert any("controller gone" in line and "tests=1" in line for line in logs)


def test_silent_controller_is_dropped() -> None:
    """A controller silent while its test runs is dropped once the test's time and the grace are over,
    never sooner; its test is stopped and the daemon serves the next controller."""
    engine = FakeEngine()
    duration_s, grace_s = 0.5, 1.5
    with running(engine=engine, idle_timeout_s=1.5, test_grace_s=grace_s) as (d, logs):
        c = connect(d)
        asked = time.monotonic()  # the daemon starts the test later: its deadline is no earlier
        c.start_receiver(test_id=9, max_packets=1000, idle_timeout_ms=200, duration_s=duration_s)
        with connect(d, wait_s=120) as c2:  # busy until the silent one is dropped
            served = time.monotonic()
            c2.ping()
        assert served - asked >= duration_s + grace_s
        assert engine.stopped.is_set()
        c._drop()
    assert any("timed out" in line for line in logs)


# ----------------------------------------------------------------------------- garbage


_FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def test_garbage_before_authentication_never_hurts_the_daemon() -> None:
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
        | st.text(max_size=10),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=8)
    def frame(obj: Any) -> bytes:
        body = P.encode_json(obj) if isinstance(obj, dict) else repr(obj).encode()
        return len(body).to_bytes(4, "big") + body

    json_frames = st.builds(
        frame,
        st.dictionaries(st.sampled_from(["type", "version", "client_nonce", "mac"]) | st.text(max_size=6),
                        json_values | st.sampled_from(["auth", "hello", "error", os.urandom(32).hex()]),
                        max_size=5) | json_values)
    garbage = st.binary(max_size=200) | json_frames | st.builds(
        lambda n, body: n.to_bytes(4, "big") + body, st.integers(0, 2**32 - 1), st.binary(max_size=64))

    with running(secret=SECRET) as (d, _):
        @_FUZZ
        @given(data=garbage)
        def hit(data: bytes) -> None:
            sock = socket.create_connection(d.address, timeout=5)
            with sock:
                first = P.recv_plain(sock, timeout=5)
                assert first["type"] == "hello", first
                try:
                    sock.sendall(data)
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                for frame in plain_frames(read_until_closed(sock)):
                    assert frame["type"] == "error" and frame["code"] in P.ERROR_CODES

        hit()
        with connect(d, SECRET) as c:
            c.ping()


def test_random_authenticated_requests_never_hurt_the_daemon() -> None:
    fields = ["udp_port", "test_id", "max_response_bytes", "max_rate_pps", "duration_s", "max_packets",
              "idle_timeout_ms", "interface", "hw_timestamps", "seed", "peer_udp_port"]
    values = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.integers(0, 70_000)
              | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20)
              | st.lists(st.integers(), max_size=3) | st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
    messages = st.builds(
        lambda kind, rest: {**rest, "type": kind},
        st.sampled_from(["start_responder", "start_receiver", "stop", "status", "counters", "limits", "ping",
                         "hello", "auth", "welcome", "error", "results", ""]) | st.text(max_size=12),
        st.dictionaries(st.sampled_from(fields) | st.text(max_size=8), values, max_size=6))
    replies = {"error", "ready", "status", "results", "counters", "limits", "pong", "bye"}

    with running(engine=FakeEngine(), counters=lambda iface: {"iface": iface}) as (d, _):
        @_FUZZ
        @given(msg=messages)
        def hit(msg: dict[str, Any]) -> None:
            sock, ch, _, _ = raw_session(d)
            with sock:
                ch.send(msg)
                reply = ch.recv(timeout=5)
                assert reply["type"] in replies, reply
                if reply["type"] == "error":
                    assert reply["code"] in ("bad_request", "limit", "busy", "internal"), reply
                if reply["type"] == "results":
                    for desc in reply["arrays"]:
                        ch.recv_binary(desc["nbytes"], timeout=5)
                ch.send({"type": "bye"})
                assert ch.recv(timeout=5)["type"] == "bye"

        hit()
        with connect(d) as c:
            c.ping()


# ----------------------------------------------------------------------------- secret file and command line


def test_secret_file_checks(tmp_path: Path) -> None:
    f = tmp_path / "secret"
    with pytest.raises(NicrigError, match="does not exist.*chmod 600"):
        P.load_secret(f)
    f.write_bytes(b"  s3cret-value\n")
    for mode in (0o644, 0o640, 0o604, 0o660):
        f.chmod(mode)
        with pytest.raises(NicrigError, match=f"permissions {mode:04o}.*chmod 600"):
            P.load_secret(f)
    f.chmod(0o600)
    assert P.load_secret(f) == b"s3cret-value"
    f.write_bytes(b"\n \n")
    with pytest.raises(NicrigError, match="is empty"):
        P.load_secret(f)
    with pytest.raises(NicrigError, match="not a regular file"):
        P.load_secret(tmp_path)
    parser = argparse.ArgumentParser()
    D.add_serve_arguments(parser)
    f.write_bytes(b"x" * 40)
    f.chmod(0o644)
    with pytest.raises(NicrigError, match="chmod 600"):
        D.config_from_args(parser.parse_args(["--secret-file", str(f)]))
    with pytest.raises(NicrigError, match="max-response-bytes"):
        D.config_from_args(parser.parse_args(["--max-response-bytes", "70000"]))
    cfg = D.config_from_args(parser.parse_args([]))
    assert (cfg.bind, cfg.port, cfg.secret) == ("127.0.0.1", 14401, None)


def test_serve_runs_until_sigterm(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    code = ("import argparse, sys; from nicrig.udpmon import daemon; p = argparse.ArgumentParser(); "
            "daemon.add_serve_arguments(p); sys.exit(daemon.serve(p.parse_args(sys.argv[1:])))")
    proc = subprocess.Popen([sys.executable, "-c", code, "--bind", "127.0.0.1", "--port", "0",
                             "--secret-file", str(secret)], stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        m = re.search(r"listening on 127\.0\.0\.1:(\d+) .*auth hmac-sha256", line)
        assert m, line
        with Controller("127.0.0.1", int(m.group(1)), secret_file=secret, timeout_s=5) as c:
            c.ping()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        rest = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rest.count("auth=hmac-sha256 authenticated") == 1 and "stopped" in rest


# ----------------------------------------------------------------------------- with the real engine


@pytest.mark.skipif(importlib.util.find_spec("nicrig.udpmon.engine") is None, reason="engine not built")
def test_end_to_end_responder_with_the_real_engine() -> None:
    from nicrig.udpmon.payload import HEADER_BYTES, RESPONSE_BYTES, Kind, make_payload, parse_header

    rng = np.random.default_rng(7)

    def request(seq: int, response_bytes: int) -> bytes:
        p = bytearray(make_payload(64, Kind.REQUEST, seq, 77, rng))
        RESPONSE_BYTES.pack_into(p, HEADER_BYTES, response_bytes)
        return bytes(p)

    with running() as (d, _), connect(d) as c:
        port = c.start_responder(test_id=77, max_response_bytes=1000, max_rate_pps=1000, duration_s=10)
        stranger = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        me = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with stranger, me:
            stranger.bind(("127.0.0.2", 0))  # another host as far as the responder knows
            stranger.settimeout(0.3)
            stranger.sendto(request(0, 500), ("127.0.0.1", port))
            with pytest.raises(TimeoutError):
                stranger.recv(65536)
            me.settimeout(2)
            for seq, asked in enumerate((200, 5000)):
                me.sendto(request(seq, asked), ("127.0.0.1", port))
                reply = me.recv(65536)
                header = parse_header(reply)
                assert header is not None and (header.kind, header.seq, header.test_id) == (Kind.RESPONSE, seq, 77)
                assert len(reply) == min(asked, 1000)  # capped by the controller's request
        stats, _ = c.stop()
    assert stats["engine"]["answered"] == 2 and stats["engine"]["refused_peer"] >= 1
    assert stats["role"] == "responder" and stats["stop_reason"] == "stop"
