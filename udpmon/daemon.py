"""``nicrig udpmon serve``: the daemon on the far host that answers and receives udpmon tests.

A controller (:class:`nicrig.udpmon.client.Controller`) connects over TCP and,
after the handshake of :mod:`nicrig.udpmon.protocol`, sends requests; each
gets one reply (or ``{"type":"error","code":..,"message":..}``):

====================  =====================================================  =========================
request               fields                                                 reply
====================  =====================================================  =========================
``start_responder``   test_id, max_response_bytes, max_rate_pps, duration_s,  ``ready`` {udp_port, limits,
                      udp_port=0, idle_timeout_ms?, seed?, peer_udp_port?,    wait}
                      busy_poll=false
``start_receiver``    test_id, max_packets, idle_timeout_ms, duration_s,      ``ready`` {udp_port, limits,
                      udp_port=0, hw_timestamps=false, peer_udp_port?,        wait}
                      busy_poll=false
``start_sender``      test_id, count, size_bytes, spacing_ns, peer_udp_port,   ``ready`` {udp_port, limits}
                      duration_s, start_delay_ms=2, seed?, udp_port=0
``start_tcp_sink``    connections, duration_s, idle_timeout_ms                 ``ready`` {tcp_port, limits}
``start_tcp_source``  connections, duration_s, send_ms, seed?                  ``ready`` {tcp_port, limits}
``start_acceptor``    max_connections, duration_s, idle_timeout_ms             ``ready`` {tcp_port, limits}
``start_connector``   tcp_port, count, rate_per_s, duration_s,                 ``ready`` {limits}
                      start_delay_ms=2
``check_interface``   settings                                                ``interface`` {interface,
                                                                              settings, allow_tuning}
``set_interface``     settings (``--allow-tuning`` only)                      ``interface`` {interface,
                                                                              previous, settings}
``restore_interface`` -                                                       ``interface`` {interface,
                                                                              restored}
``status``            -                                                       ``status`` {state, role, elapsed_s}
``stop``              -                                                       ``results`` {stats, arrays} and
                                                                              one binary frame per array
``counters``          interface                                              ``counters`` {interface,
                                                                              counters | unavailable}
``limits``            -                                                       ``limits`` {...}
``ping``              -                                                       ``pong``
``clock``             -                                                       ``clock`` {mono_ns}
``start_trace``       events?, duration_s (``--allow-trace`` only)            ``tracing`` {instance, start_ns}
``stop_trace``        -                                                       ``trace`` {summary, header_page,
                                                                              formats, arrays} and one binary
                                                                              frame per array
``bye``               -                                                       ``bye``, then the daemon closes
====================  =====================================================  =========================

Security: without ``--secret-file`` only loopback controllers are accepted.
Every role sends to the controller only: the UDP sender's socket is connected
to the controller's address, TCP listeners close connections from anyone
else, the connector connects to the controller's address; rates, counts and
connections are capped by the daemon's limits. The kernel is traced only
with ``--allow-trace``, in a tracefs instance of the daemon's own, bounded in
size (``--max-trace-mb``) and time (``--max-duration-s``), recording the
daemon's own system calls and the host's interrupt and network events, and
stopped when the session ends, however it ends. Interface settings change
only with ``--allow-tuning``, only on the interface toward the controller,
and are put back when the session ends, however it ends.
The UDP socket of a test is bound to the address the controller reached, the
responder answers only the controller's IP (the engine's ``peer``: one
source port, learned from the first request or named by ``peer_udp_port``;
a receiver with ``peer_udp_port`` is connected so the kernel drops
everything else), response size, rate, duration and packet counts are
capped by the daemon's limits, every frame is bounded. One controller at a time; a
controller that disconnects or goes silent has its test stopped and its UDP
socket closed. A test runs in a worker thread (the engine's loops are
blocking C calls that release the GIL) and is stopped through a pipe.

Admission: connections that have not authenticated live in the main thread's
event loop (no thread each), under OpenSSH-style limits
(:mod:`nicrig.udpmon.admission`): a short handshake deadline, random early
drop past a number of waiting connections, a per-source cap that evicts a
source's oldest, penalties for sources that fail, a table no larger than the
descriptor limit allows, and refusals closed at once. SIGTERM wakes the loop
through a pipe; the daemon ends its session and exits within about 2 s.
"""

from __future__ import annotations

import argparse
import array
import dataclasses
import errno
import hmac
import importlib
import math
import os
import random
import re
import resource
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from nicrig.udpmon import admission, ifsettings, tcp
from nicrig.udpmon import protocol as P
from nicrig.udpmon.payload import HEADER_BYTES

from nicrig.errors import NicrigError, UsageError

MAX_UDP_PAYLOAD = 65507
ENGINE_MODULE = "nicrig.udpmon.roles"
COUNTERS_MODULE = "nicrig.udpmon.counters"


# ----------------------------------------------------------------------------- the engine seam


def load_engine() -> Any:
    """The test roles (:mod:`nicrig.udpmon.roles`: the C engine's loops and the TCP ones), imported when a test starts."""
    return importlib.import_module(ENGINE_MODULE)


def load_counters() -> Callable[[str], Any]:
    """``snapshot(interface)`` of the host-counters module, imported on first use."""
    return importlib.import_module(COUNTERS_MODULE).snapshot


def split_engine_result(result: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(scalars, arrays) of whatever the engine returned: a mapping, a (named) tuple or one array."""
    scalars: dict[str, Any] = {}
    arrays: dict[str, np.ndarray] = {}

    def is_array(v: Any) -> bool:
        return not isinstance(v, np.generic) and (
            isinstance(v, (np.ndarray, memoryview, array.array)) or hasattr(v, "__array_interface__"))

    def put(name: str, v: Any) -> None:
        name = str(name)[:64] or "array"
        if is_array(v):
            arrays[name] = np.asarray(v)
        else:
            scalars[name] = P.jsonable(v)

    if result is None:
        pass
    elif is_array(result):
        arrays["data"] = np.asarray(result)
    elif hasattr(result, "_asdict"):
        for k, v in result._asdict().items():
            put(k, v)
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        for f in dataclasses.fields(result):
            put(f.name, getattr(result, f.name))
    elif isinstance(result, Mapping):
        for k, v in result.items():
            put(k, v)
    elif isinstance(result, (tuple, list)):
        for i, v in enumerate(result):
            if isinstance(v, Mapping):
                for k, w in v.items():
                    put(k, w)
            else:
                put(f"array{i}" if is_array(v) else f"value{i}", v)
    else:
        scalars["value"] = P.jsonable(result)
    if len(arrays) > P.MAX_ARRAYS:
        raise P.DaemonError(f"the engine returned {len(arrays)} arrays, more than {P.MAX_ARRAYS}")
    return scalars, arrays


# ----------------------------------------------------------------------------- configuration


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (::ffff:127.x.y.z)."""
    ip = admission.parse_ip(address)
    return ip is not None and ip.is_loopback


def _unmap(address: str) -> str:
    """``address`` with an IPv4-mapped IPv6 address turned back into IPv4."""
    ip = admission.parse_ip(address)
    return address if ip is None or ip.version == 6 else str(ip)


@dataclass(frozen=True)
class Limits:
    max_response_bytes: int = 9000
    max_rate_pps: int = 200_000
    max_duration_s: float = 600.0
    max_packets: int = 2_000_000
    max_connections: int = 256          # simultaneous TCP connections of a bulk test
    max_connection_rate: int = 100_000  # connections/s the connector may open
    max_trace_bytes: int = 256 << 20    # raw kernel trace one session may record


@dataclass
class Config:
    bind: str = "127.0.0.1"
    port: int = P.DEFAULT_PORT
    secret: bytes | None = None
    limits: Limits = field(default_factory=Limits)
    handshake_timeout_s: float = 3.0   # the whole handshake, from accept (LoginGraceTime)
    idle_timeout_s: float = 120.0      # silence allowed from an idle controller
    test_grace_s: float = 30.0         # silence allowed past the end of a running test
    stop_timeout_s: float = 10.0       # time the engine gets to return after a stop
    startups: admission.Startups = field(default_factory=admission.Startups)
    allow_tuning: bool = False         # controllers may change the MTU and coalescing toward them
    allow_busy_poll: bool = True       # controllers may have the responder and receiver spin (one core)
    allow_trace: bool = False          # controllers may record this host's kernel trace events


def _log_stderr(line: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    print(f"nicrig udpmon {stamp} {line}", file=sys.stderr, flush=True)


def _keepalive(sock: socket.socket) -> None:
    """Notice a vanished controller host within about 25 s, even when nobody sends."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 10), ("TCP_KEEPINTVL", 5), ("TCP_KEEPCNT", 3),
                        ("TCP_USER_TIMEOUT", 30_000)):
        if hasattr(socket, name):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
            except OSError:
                pass
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _close_session(sock: socket.socket, budget_s: float = 1.0) -> None:
    """Close an authenticated connection so that a last error still reaches the peer.

    Unread input at close() makes the kernel send RST, which can destroy the
    reply in flight; so the peer's last bytes are read first, for at most
    ``budget_s`` and 256 KiB in all.
    """
    try:
        sock.shutdown(socket.SHUT_WR)
        end = time.monotonic() + budget_s
        budget = 1 << 18
        while budget > 0 and (left := end - time.monotonic()) > 0:
            sock.settimeout(left)
            chunk = sock.recv(65536)
            if not chunk:
                break
            budget -= len(chunk)
    except OSError:
        pass
    finally:
        sock.close()


def _close_now(sock: socket.socket, last: bytes = b"") -> None:
    """Send ``last`` if the socket buffer takes it at once, then close without waiting for anything.

    For connections that have not authenticated: never read, never wait. A
    legitimate client has nothing unsent at this point and gets ``last`` and
    a FIN; a peer that sent more than it should gets a reset.
    """
    try:
        if last:
            sock.send(last, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL)
    except OSError:
        pass
    finally:
        sock.close()


# ----------------------------------------------------------------------------- request validation

_MISSING = object()
_IFNAME = re.compile(r"^[A-Za-z0-9_.:@+-]{1,15}$")


def _check_fields(msg: dict[str, Any], allowed: set[str]) -> None:
    extra = sorted(set(msg) - allowed - {"type", "seq"})
    if extra:
        raise P.RequestError(f"{msg['type']}: unknown field(s) {', '.join(P.show(x, 30) for x in extra)}")


def _value(msg: dict[str, Any], name: str, default: Any) -> Any:
    if name in msg:
        return msg[name]
    if default is _MISSING:
        raise P.RequestError(f"{msg['type']}: missing field {name!r}")
    return default


def _integer(msg: dict[str, Any], name: str, *, lo: int, hi: int, default: Any = _MISSING,
             cap: int | None = None, option: str = "") -> Any:
    v = _value(msg, name, default)
    if v is None and default is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise P.RequestError(f"{msg['type']}: {name} must be an integer, not {P.show(v)}")
    if v < lo:
        raise P.RequestError(f"{msg['type']}: {name} {v} is below the minimum {lo}")
    if cap is not None and v > cap:
        raise P.LimitError(f"{name} {v} exceeds this daemon's limit of {cap} (nicrig udpmon serve {option})")
    if v > hi:
        raise P.RequestError(f"{msg['type']}: {name} {v} is above the maximum {hi}")
    return v


def _seconds(msg: dict[str, Any], name: str, *, cap: float, option: str) -> float:
    v = _value(msg, name, _MISSING)
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
        raise P.RequestError(f"{msg['type']}: {name} must be a positive number of seconds, not {P.show(v)}")
    if v > cap:
        raise P.LimitError(f"{name} {v} exceeds this daemon's limit of {cap:g} s (nicrig udpmon serve {option})")
    return float(v)


def _udp_port(msg: dict[str, Any], name: str, default: Any) -> Any:
    v = _integer(msg, name, lo=0, hi=65535, default=default)
    if v is not None and 0 < v < 1024:
        raise P.RequestError(f"{msg['type']}: {name} {v} is a privileged port; use 0 or 1024..65535")
    return v


# ----------------------------------------------------------------------------- one test


class _Test:
    """One engine call in a worker thread; owns its UDP socket and stop pipe and closes them."""

    def __init__(self, role: str, fn: Callable[..., Any], sock: socket.socket | None, kwargs: dict[str, Any],
                 params: dict[str, Any], duration_s: float):
        self.role = role
        self.params = params
        self.sock = sock
        # what the controller is told: the UDP or TCP port the test listens on (the connector has none)
        self.wait: dict[str, Any] = {}
        self.ports: dict[str, int] = {} if sock is None else {
            "tcp_port" if sock.type == socket.SOCK_STREAM else "udp_port": sock.getsockname()[1]}
        self.result: Any = None
        self.error: BaseException | None = None
        self.stop_reason: str | None = None
        self.done = threading.Event()
        self.started = time.monotonic()
        self.started_unix_ns = time.time_ns()
        self.deadline = self.started + duration_s
        self.ended: float | None = None
        self._lock = threading.Lock()
        self._stop_r, self._stop_w = os.pipe()
        os.set_blocking(self._stop_w, False)
        self._open = True
        self._thread = threading.Thread(target=self._run, args=(fn, {**kwargs, "stop_fd": self._stop_r}),
                                        name=f"udpmon-{role}", daemon=True)
        self._timer = threading.Timer(duration_s, self.signal_stop, args=("duration",))
        self._timer.daemon = True

    def start(self) -> None:
        self._thread.start()
        self._timer.start()

    def _run(self, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
        try:
            self.result = fn(self.sock, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - reported to the controller at stop
            self.error = exc
        finally:
            self._timer.cancel()
            with self._lock:
                self.ended = time.monotonic()
                if self.stop_reason is None:
                    self.stop_reason = "engine"
                self._open = False
                if self.sock is not None:
                    self.sock.close()
                os.close(self._stop_r)
                os.close(self._stop_w)
            self.done.set()

    def signal_stop(self, reason: str) -> None:
        with self._lock:
            if self.stop_reason is None:
                self.stop_reason = reason
            if self._open:
                try:
                    os.write(self._stop_w, b"s")
                except BlockingIOError:
                    pass

    def elapsed_s(self) -> float:
        return (self.ended if self.ended is not None else time.monotonic()) - self.started


# ----------------------------------------------------------------------------- one connection


class _Session:
    """One authenticated controller, served in its own thread until it leaves, goes silent or the daemon stops."""

    def __init__(self, daemon: Daemon, conn: socket.socket, peer: tuple[Any, ...], channel: P.Channel,
                 opened: float):
        self.daemon = daemon
        self.cfg = daemon.config
        self.conn = conn
        self.peer_addr = peer
        self.peer_ip = _unmap(str(peer[0]))
        self.channel = channel
        self.test: _Test | None = None
        self.tuner: ifsettings.Tuner | None = None
        self.trace: Any = None  # a HostCapture while the controller traces this host
        self._wait: dict[str, Any] = {}  # how the next test waits for datagrams: spin, socket busy poll, buffer
        self.tests_run = 0
        self.opened = opened

    # -- lifecycle

    def run(self) -> None:
        outcome = "?"
        try:
            outcome = self._serve()
        except P.ConnectionClosed as exc:
            outcome = f"controller gone ({exc})"
        except TimeoutError:
            outcome = "timed out"
            self._send_error("bad_request", "controller silent for too long")
        except P.ControlError as exc:
            outcome = f"refused: {exc.code}: {exc}"
            self._send_error(exc.code, str(exc))
        except OSError as exc:
            outcome = f"connection error: {exc.strerror or exc}"
        except Exception as exc:  # noqa: BLE001 - a bug must cost one session, never the daemon
            outcome = f"internal error: {type(exc).__name__}: {P.peer_text(str(exc), 200)}"
            self._send_error("internal", f"internal error: {type(exc).__name__}")
        finally:
            try:
                self._stop_test("disconnect")
            except P.DaemonError as exc:
                outcome += f"; {exc}"
            try:
                self._restore_settings()
            except ifsettings.SettingRefused as exc:
                outcome += f"; {exc}"
            self._end_trace()
            # logged before the daemon is free: the next controller's session never comes before this one's end
            auth = P.AUTH_HMAC if self.cfg.secret else P.AUTH_LOOPBACK
            self.daemon.log(f"{P.hostport(self.peer_ip, self.peer_addr[1])} auth={auth} authenticated "
                            f"{time.monotonic() - self.opened:.1f}s tests={self.tests_run} end: {outcome}")
            self.daemon._release(self)
            _close_session(self.conn)

    def _send_error(self, code: str, message: str) -> None:
        try:
            self.channel.send(P.error_message(code, message), timeout=1.0)
        except (OSError, P.ControlError):
            pass

    def _read_timeout(self) -> float:
        t = self.cfg.idle_timeout_s
        if self.test is not None and not self.test.done.is_set():
            t = max(t, self.test.deadline - time.monotonic() + self.cfg.test_grace_s)
        return t

    def _serve(self) -> str:
        handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
            "start_responder": self._start_responder, "start_receiver": self._start_receiver,
            "start_sender": self._start_sender, "start_tcp_sink": self._start_tcp_sink,
            "start_tcp_source": self._start_tcp_source, "start_acceptor": self._start_acceptor,
            "start_connector": self._start_connector, "check_interface": self._check_interface,
            "set_interface": self._set_interface, "restore_interface": self._restore_interface,
            "status": self._status, "stop": self._stop, "counters": self._counters,
            "limits": self._limits, "ping": self._ping, "bye": self._bye, "clock": self._clock,
            "start_trace": self._start_trace, "stop_trace": self._stop_trace,
        }
        while True:
            try:
                msg = self.channel.recv(timeout=self._read_timeout())
            except P.ConnectionClosed as exc:
                return f"controller gone ({exc})"
            handler = handlers.get(msg["type"])
            try:
                if handler is None:
                    raise P.RequestError(f"unknown message type {P.show(msg['type'])} "
                                         f"(known: {', '.join(handlers)})")
                reply = handler(msg)
            except (P.RequestError, P.LimitError, P.BusyError, P.DaemonError, P.RefusedError) as exc:
                # An authenticated controller's mistake: say so and keep the session.
                self.channel.send(P.error_message(exc.code, str(exc)), timeout=5.0)
                continue
            if reply is not None:
                self.channel.send(reply, timeout=30.0)
            if msg["type"] == "bye":
                return "bye"

    # -- requests

    def _limits(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, set())
        return {"type": "limits", **self._limits_dict()}

    def _limits_dict(self) -> dict[str, Any]:
        return {**asdict(self.cfg.limits), "max_frame_bytes": P.MAX_FRAME_BYTES}

    def _ping(self, msg: dict[str, Any]) -> dict[str, Any]:
        return {"type": "pong"}

    def _clock(self, msg: dict[str, Any]) -> dict[str, Any]:
        """This host's CLOCK_MONOTONIC, for the controller's offset estimate (:mod:`nicrig.udpmon.clocksync`), and
        its kernel's boot id: a controller on the same kernel (loopback, a network namespace) shares the clock."""
        from nicrig.udpmon.clocksync import boot_id

        _check_fields(msg, set())
        return {"type": "clock", "mono_ns": time.clock_gettime_ns(time.CLOCK_MONOTONIC), "boot_id": boot_id()}

    def _start_trace(self, msg: dict[str, Any]) -> dict[str, Any]:
        from nicrig.acquisition.hostprobe import events as hp
        from nicrig.acquisition.hostprobe.recorder import DEFAULT_EVENTS, OPTIONAL, RecordSpec, process_threads
        from nicrig.acquisition.hostprobe.tracefs import TracingNotPermitted

        _check_fields(msg, {"events", "duration_s"})
        if not self.cfg.allow_trace:
            raise P.RefusedError("kernel tracing is not permitted on this daemon (start it with "
                                 "'nicrig udpmon serve --allow-trace', as root)")
        if self.trace is not None:
            raise P.BusyError("this controller is already tracing; send stop_trace first")
        names = _value(msg, "events", list(DEFAULT_EVENTS))
        if (not isinstance(names, list) or not names or len(names) > 64
                or not all(isinstance(e, str) and e in DEFAULT_EVENTS + OPTIONAL for e in names)):
            raise P.RequestError("start_trace: events must be a list drawn from "
                                 f"{', '.join(DEFAULT_EVENTS + OPTIONAL)}")
        spec = RecordSpec(events=tuple(dict.fromkeys(names)), pids=tuple(process_threads()),
                          max_bytes=self.cfg.limits.max_trace_bytes,
                          max_seconds=self._duration(msg))
        capture = hp.HostCapture("remote", spec)
        try:
            capture.__enter__()
        except TracingNotPermitted as exc:
            raise P.RefusedError(f"kernel tracing is not possible on this daemon's host: {exc}") from None
        except NicrigError as exc:
            raise P.DaemonError(f"kernel tracing could not start: {exc}") from None
        self.trace = capture
        return {"type": "tracing", "instance": capture.instance, "events": list(spec.events)}

    def _stop_trace(self, msg: dict[str, Any]) -> None:
        _check_fields(msg, set())
        if self.trace is None:
            raise P.RequestError("stop_trace: no trace running (start_trace first)")
        capture, self.trace = self.trace, None
        try:
            raw = capture.stop_raw()
        except NicrigError as exc:
            raise P.DaemonError(f"kernel tracing failed: {exc}") from None
        finally:
            capture.__exit__(None, None, None)
        wire = [P.wire_array("raw", raw.raw), P.wire_array("raw_cpu", raw.raw_cpu)]
        assert self.channel is not None
        self.channel.send({"type": "trace", "summary": P.jsonable(dataclasses.asdict(raw.summary)),
                           "header_page": raw.header_page, "formats": raw.formats, "pids": raw.pids,
                           "hostname": raw.hostname, "arrays": [d for d, _ in wire]}, timeout=30.0)
        for _, a in wire:
            self.channel.send_binary(memoryview(a.reshape(-1).view(np.uint8)), timeout=30.0)

    def _end_trace(self) -> None:
        if self.trace is not None:
            capture, self.trace = self.trace, None
            capture.__exit__(None, None, None)

    def _bye(self, msg: dict[str, Any]) -> dict[str, Any]:
        self._stop_test("bye")
        self._end_trace()
        try:
            self._restore_settings()
        except ifsettings.SettingRefused as exc:
            self.daemon.log(f"{P.hostport(self.peer_ip, self.peer_addr[1])} {exc}")
        self.daemon._release(self)  # free before the reply: the controller may reconnect at once
        return {"type": "bye"}

    def _status(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, set())
        from nicrig.udpmon.counters import egress_interface

        t = self.test
        # the interface this host reaches the controller by: whose counters a test wants
        here = {"type": "status", "interface": egress_interface(self.peer_ip)}
        if t is None:
            return {**here, "state": "idle"}
        return {**here, "state": "finished" if t.done.is_set() else "running", "role": t.role, **t.ports,
                "elapsed_s": round(t.elapsed_s(), 6)}

    def _start_responder(self, msg: dict[str, Any]) -> dict[str, Any]:
        lim = self.cfg.limits
        _check_fields(msg, {"udp_port", "test_id", "max_response_bytes", "max_rate_pps", "duration_s",
                            "idle_timeout_ms", "seed", "peer_udp_port", "busy_poll"})
        p = {
            "udp_port": _udp_port(msg, "udp_port", 0),
            "test_id": _integer(msg, "test_id", lo=0, hi=0xFFFFFFFF),
            "max_response_bytes": _integer(msg, "max_response_bytes", lo=HEADER_BYTES, hi=MAX_UDP_PAYLOAD,
                                           cap=lim.max_response_bytes, option="--max-response-bytes"),
            "max_rate_pps": _integer(msg, "max_rate_pps", lo=1, hi=100_000_000, cap=lim.max_rate_pps,
                                     option="--max-rate-pps"),
            "duration_s": _seconds(msg, "duration_s", cap=lim.max_duration_s, option="--max-duration-s"),
            "seed": _integer(msg, "seed", lo=0, hi=0xFFFFFFFF, default=1),
            "peer_udp_port": _udp_port(msg, "peer_udp_port", None),
            "busy_poll": self._busy_poll(msg),
        }
        idle_ms = _integer(msg, "idle_timeout_ms", lo=1, hi=2**40, default=None,
                           cap=int(lim.max_duration_s * 1000), option="--max-duration-s")
        p["idle_timeout_ms"] = idle_ms
        idle_ns = idle_ms * 1_000_000 if idle_ms is not None else int(p["duration_s"] * 1e9)
        # The engine answers only peer = (controller ip, port), learning the port from the first
        # valid request of that ip unless the controller named it.
        kwargs = {"test_id": p["test_id"], "max_response_bytes": p["max_response_bytes"],
                  "peer": (self.peer_ip, p["peer_udp_port"]), "max_rate_pps": p["max_rate_pps"],
                  "idle_timeout_ns": idle_ns, "max_duration_ns": int(p["duration_s"] * 1e9), "seed": p["seed"],
                  "busy_poll": p["busy_poll"]}
        return self._start("responder", "respond", p, kwargs,
                           lambda: self._udp_socket(p["udp_port"], None, busy_poll=p["busy_poll"]))

    def _start_receiver(self, msg: dict[str, Any]) -> dict[str, Any]:
        lim = self.cfg.limits
        _check_fields(msg, {"udp_port", "test_id", "max_packets", "idle_timeout_ms", "duration_s",
                            "hw_timestamps", "peer_udp_port", "busy_poll"})
        hw = _value(msg, "hw_timestamps", False)
        if not isinstance(hw, bool):
            raise P.RequestError(f"start_receiver: hw_timestamps must be true or false, not {P.show(hw)}")
        p = {
            "udp_port": _udp_port(msg, "udp_port", 0),
            "test_id": _integer(msg, "test_id", lo=0, hi=0xFFFFFFFF),
            "max_packets": _integer(msg, "max_packets", lo=1, hi=2**40, cap=lim.max_packets,
                                    option="--max-packets"),
            "idle_timeout_ms": _integer(msg, "idle_timeout_ms", lo=1, hi=2**40,
                                        cap=int(lim.max_duration_s * 1000), option="--max-duration-s"),
            "duration_s": _seconds(msg, "duration_s", cap=lim.max_duration_s, option="--max-duration-s"),
            "hw_timestamps": hw,
            "peer_udp_port": _udp_port(msg, "peer_udp_port", None),
            "busy_poll": self._busy_poll(msg),
        }
        kwargs = {"max_packets": p["max_packets"], "test_id": p["test_id"],
                  "idle_timeout_ns": p["idle_timeout_ms"] * 1_000_000, "hw_timestamps": hw,
                  "busy_poll": p["busy_poll"]}
        return self._start("receiver", "receive", p, kwargs,
                           lambda: self._udp_socket(p["udp_port"], p["peer_udp_port"], busy_poll=p["busy_poll"],
                                                    receiver=True))

    def _start_sender(self, msg: dict[str, Any]) -> dict[str, Any]:
        lim = self.cfg.limits
        _check_fields(msg, {"udp_port", "test_id", "count", "size_bytes", "spacing_ns", "peer_udp_port",
                            "duration_s", "start_delay_ms", "seed"})
        p = {
            "udp_port": _udp_port(msg, "udp_port", 0),
            "test_id": _integer(msg, "test_id", lo=0, hi=0xFFFFFFFF),
            "count": _integer(msg, "count", lo=1, hi=2**40, cap=lim.max_packets, option="--max-packets"),
            "size_bytes": _integer(msg, "size_bytes", lo=HEADER_BYTES, hi=MAX_UDP_PAYLOAD,
                                   cap=lim.max_response_bytes, option="--max-response-bytes"),
            "spacing_ns": _integer(msg, "spacing_ns", lo=1, hi=86_400 * 10**9),
            "peer_udp_port": _udp_port(msg, "peer_udp_port", _MISSING),
            "duration_s": _seconds(msg, "duration_s", cap=lim.max_duration_s, option="--max-duration-s"),
            "start_delay_ms": _integer(msg, "start_delay_ms", lo=0, hi=10_000, default=2),
            "seed": _integer(msg, "seed", lo=0, hi=0xFFFFFFFF, default=1),
        }
        if p["peer_udp_port"] == 0:
            raise P.RequestError("start_sender: peer_udp_port must name the controller's receiving port")
        if p["spacing_ns"] * lim.max_rate_pps < 1_000_000_000:
            raise P.LimitError(f"spacing_ns {p['spacing_ns']} is {1e9 / p['spacing_ns']:.0f} packets/s, over this "
                               f"daemon's limit of {lim.max_rate_pps} (nicrig udpmon serve --max-rate-pps)")
        kwargs = {"count": p["count"], "size_bytes": p["size_bytes"], "spacing_ns": p["spacing_ns"],
                  "test_id": p["test_id"], "start_delay_ns": p["start_delay_ms"] * 1_000_000, "seed": p["seed"]}
        # connected: the stream can go nowhere but the controller's (ip, peer_udp_port)
        return self._start("sender", "send", p, kwargs, lambda: self._udp_socket(p["udp_port"], p["peer_udp_port"]))

    def _busy_poll(self, msg: dict[str, Any]) -> bool:
        """The test's ``busy_poll`` flag; LimitError where this daemon does not spin."""
        spin = _value(msg, "busy_poll", False)
        if not isinstance(spin, bool):
            raise P.RequestError(f"{msg['type']}: busy_poll must be true or false, not {P.show(spin)}")
        if spin and not self.cfg.allow_busy_poll:
            raise P.LimitError("this daemon does not spin (it was started with nicrig udpmon serve --no-busy-poll): "
                               "run without --busy-poll, or restart the daemon without --no-busy-poll")
        return spin

    def _connections(self, msg: dict[str, Any]) -> int:
        return _integer(msg, "connections", lo=1, hi=2**20, cap=self.cfg.limits.max_connections,
                        option="--max-connections")

    def _milliseconds(self, msg: dict[str, Any], name: str, default: Any = _MISSING) -> int:
        return _integer(msg, name, lo=1, hi=2**40, default=default, cap=int(self.cfg.limits.max_duration_s * 1000),
                        option="--max-duration-s")

    def _start_tcp_sink(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, {"connections", "duration_s", "idle_timeout_ms"})
        p = {"connections": self._connections(msg), "idle_timeout_ms": self._milliseconds(msg, "idle_timeout_ms"),
             "duration_s": self._duration(msg)}
        idle_ns = p["idle_timeout_ms"] * 1_000_000
        kwargs = {"peer_ip": self.peer_ip, "connections": p["connections"], "accept_timeout_ns": idle_ns,
                  "idle_timeout_ns": idle_ns, "max_duration_ns": int(p["duration_s"] * 1e9)}
        return self._start("tcp_sink", "tcp_sink", p, kwargs, self._tcp_listener)

    def _start_tcp_source(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, {"connections", "duration_s", "send_ms", "seed"})
        p = {"connections": self._connections(msg), "send_ms": self._milliseconds(msg, "send_ms"),
             "duration_s": self._duration(msg), "seed": _integer(msg, "seed", lo=0, hi=0xFFFFFFFF, default=1)}
        if p["send_ms"] > p["duration_s"] * 1000:
            raise P.RequestError(f"start_tcp_source: send_ms {p['send_ms']} is longer than duration_s "
                                 f"{p['duration_s']:g}")
        kwargs = {"peer_ip": self.peer_ip, "connections": p["connections"],
                  "accept_timeout_ns": int(p["duration_s"] * 1e9) - p["send_ms"] * 1_000_000,
                  "send_ns": p["send_ms"] * 1_000_000, "seed": p["seed"]}
        return self._start("tcp_source", "tcp_source", p, kwargs, self._tcp_listener)

    def _start_acceptor(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, {"max_connections", "duration_s", "idle_timeout_ms"})
        p = {"max_connections": _integer(msg, "max_connections", lo=1, hi=2**40, cap=self.cfg.limits.max_packets,
                                         option="--max-packets"),
             "idle_timeout_ms": self._milliseconds(msg, "idle_timeout_ms"), "duration_s": self._duration(msg)}
        idle_ns = p["idle_timeout_ms"] * 1_000_000
        kwargs = {"peer_ip": self.peer_ip, "max_connections": p["max_connections"], "first_timeout_ns": idle_ns,
                  "idle_timeout_ns": idle_ns, "max_duration_ns": int(p["duration_s"] * 1e9)}
        return self._start("acceptor", "acceptor", p, kwargs, self._tcp_listener)

    def _start_connector(self, msg: dict[str, Any]) -> dict[str, Any]:
        lim = self.cfg.limits
        _check_fields(msg, {"tcp_port", "count", "rate_per_s", "duration_s", "start_delay_ms"})
        p = {"tcp_port": _integer(msg, "tcp_port", lo=1, hi=65535),
             "count": _integer(msg, "count", lo=1, hi=2**40, cap=lim.max_packets, option="--max-packets"),
             "rate_per_s": _integer(msg, "rate_per_s", lo=1, hi=10**9, cap=lim.max_connection_rate,
                                    option="--max-connection-rate"),
             "duration_s": self._duration(msg),
             "start_delay_ms": _integer(msg, "start_delay_ms", lo=0, hi=10_000, default=2)}
        local = _unmap(str(self.conn.getsockname()[0]))
        kwargs = {"address": (self.peer_ip, p["tcp_port"]),
                  "family": socket.AF_INET6 if ":" in local else socket.AF_INET, "bind_ip": local,
                  "count": p["count"], "rate_per_s": p["rate_per_s"], "start_delay_ns": p["start_delay_ms"] * 1_000_000,
                  "max_duration_ns": int(p["duration_s"] * 1e9)}
        return self._start("connector", "connector", p, kwargs, lambda: None)

    def _duration(self, msg: dict[str, Any]) -> float:
        return _seconds(msg, "duration_s", cap=self.cfg.limits.max_duration_s, option="--max-duration-s")

    def _tcp_listener(self) -> socket.socket:
        """A listening TCP socket on the address the controller reached (port from the kernel)."""
        local = self.conn.getsockname()
        host = _unmap(str(local[0]))
        v6 = ":" in host
        try:
            return tcp.listen_tcp((host, 0, 0, local[3]) if v6 and len(local) > 3 else (host, 0),
                                  socket.AF_INET6 if v6 else socket.AF_INET)
        except OSError as exc:
            raise P.RequestError(f"cannot open a TCP port on {host}: {exc.strerror or exc}") from None

    # -- interface settings

    def _where(self) -> str:
        return f"host {_unmap(str(self.conn.getsockname()[0]))}"

    def _interface(self) -> str:
        from nicrig.udpmon.counters import egress_interface

        iface = egress_interface(self.peer_ip)
        if iface is None:
            raise P.RefusedError(f"{self._where()} cannot tell its interface toward {self.peer_ip} "
                                 f"(no 'ip' command?)")
        return iface

    def _settings(self, msg: dict[str, Any]) -> dict[str, ifsettings.Value]:
        raw = _value(msg, "settings", _MISSING)
        if not isinstance(raw, dict) or not 0 < len(raw) <= len(ifsettings.SETTINGS):
            raise P.RequestError(f"{msg['type']}: settings must be an object of 1 to {len(ifsettings.SETTINGS)} "
                                 f"settings, not {P.show(raw)}")
        try:
            return {k: ifsettings.check_value(k, v) for k, v in raw.items()}
        except UsageError as exc:
            raise P.RequestError(f"{msg['type']}: {exc}") from None

    def _check_interface(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, {"settings"})
        settings = self._settings(msg)
        iface = self._interface()
        try:
            current = ifsettings.check(iface, settings, self._where())
        except ifsettings.SettingRefused as exc:
            raise P.RefusedError(str(exc)) from None
        return {"type": "interface", "interface": iface, "settings": current,
                "allow_tuning": self.cfg.allow_tuning}

    def _set_interface(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, {"settings"})
        settings = self._settings(msg)
        if not self.cfg.allow_tuning:
            raise P.LimitError("this daemon does not change interface settings: start it with "
                               "nicrig udpmon serve --allow-tuning")
        if self.test is not None and not self.test.done.is_set():
            raise P.BusyError("set_interface: a test is running; stop it first")
        iface = self._interface()
        if self.tuner is None or self.tuner.interface != iface:
            self._restore_settings()
            self.tuner = ifsettings.Tuner(iface, self._where())
        try:
            previous = self.tuner.set(settings)
            now = ifsettings.read(iface, list(settings), self._where())
        except ifsettings.SettingRefused as exc:
            raise P.RefusedError(str(exc)) from None
        self.daemon.log(f"{P.hostport(self.peer_ip, self.peer_addr[1])} set {iface}: "
                        f"{', '.join(f'{k}={ifsettings.show(v)}' for k, v in now.items())}")
        return {"type": "interface", "interface": iface, "previous": previous, "settings": now}

    def _restore_interface(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, set())
        iface = self.tuner.interface if self.tuner is not None else None
        try:
            restored = self._restore_settings()
        except ifsettings.SettingRefused as exc:
            raise P.RefusedError(str(exc)) from None
        return {"type": "interface", "interface": iface, "restored": restored}

    def _restore_settings(self) -> dict[str, ifsettings.Value]:
        """Put back what this controller changed (SettingRefused if the host refuses)."""
        if self.tuner is None or not self.tuner.original:
            return {}
        restored = self.tuner.restore()
        self.daemon.log(f"{P.hostport(self.peer_ip, self.peer_addr[1])} restored {self.tuner.interface}: "
                        f"{', '.join(f'{k}={ifsettings.show(v)}' for k, v in restored.items())}")
        return restored

    def _start(self, role: str, function: str, params: dict[str, Any], kwargs: dict[str, Any],
               open_socket: Callable[[], socket.socket | None]) -> dict[str, Any]:
        if self.test is not None:
            raise P.BusyError(f"a {self.test.role} test is still held for this controller "
                              f"({'finished' if self.test.done.is_set() else 'running'}); send stop first")
        try:
            fn = getattr(self.daemon._engine(), function)
        except (ImportError, AttributeError) as exc:
            raise P.DaemonError(f"the traffic engine is not available on the daemon host "
                                f"({type(exc).__name__}: {exc}); build it with pip install -e .") from None
        self._wait = {"busy_poll": bool(params.get("busy_poll", False))}
        sock = open_socket()
        test = _Test(role, fn, sock, kwargs, params, params["duration_s"])
        test.wait = self._wait
        self.daemon._track(test)
        self.test = test
        self.tests_run += 1
        try:
            test.start()
            if self.trace is not None:  # the test's worker thread is new: record its system calls too
                from nicrig.acquisition.hostprobe.recorder import process_threads

                self.trace.follow(process_threads())
        except BaseException:
            test.signal_stop("failed to start")
            test._run(lambda *_, **__: None, {})  # releases the socket and pipe, marks it done
            self.test = None
            raise
        return {"type": "ready", "role": role, **test.ports, "limits": self._limits_dict(), "wait": test.wait}

    def _udp_socket(self, port: int, peer_port: int | None, *, busy_poll: bool = False,
                    receiver: bool = False) -> socket.socket:
        """A UDP socket on the address the controller reached (never a wildcard).

        With ``peer_port`` it is connected to the controller's (ip, peer_port): the kernel drops the rest.
        ``busy_poll`` asks for socket busy polling as well (what was granted goes into the test's ``wait``);
        A ``receiver``'s buffer is :data:`nicrig.udpmon.engine.RECEIVE_BUFFER_BYTES`.
        """
        local = self.conn.getsockname()
        host = _unmap(str(local[0]))
        v6 = ":" in host
        from nicrig.udpmon import engine

        try:
            sock = engine.open_udp(family=socket.AF_INET6 if v6 else socket.AF_INET,
                                   rcvbuf=engine.RECEIVE_BUFFER_BYTES if receiver else None)
        except OSError as exc:
            raise P.RequestError(f"cannot open a UDP socket on {host}: {exc.strerror or exc}") from None
        self._wait["rcvbuf_bytes"] = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
        if busy_poll:
            self._wait["socket"] = engine.socket_busy_poll(sock)
        try:
            sock.bind((host, port, 0, local[3]) if v6 and len(local) > 3 else (host, port))
            if peer_port is not None:
                peer = self.peer_addr
                sock.connect((self.peer_ip, peer_port, 0, peer[3]) if v6 and len(peer) > 3
                             else (self.peer_ip, peer_port))
        except OSError as exc:
            sock.close()
            raise P.RequestError(f"cannot open UDP port {port} on {host}: {exc.strerror or exc}") from None
        return sock

    def _stop_test(self, reason: str) -> _Test | None:
        """Stop the held test (if any) and wait for the engine; the held test is released."""
        test, self.test = self.test, None
        if test is None:
            return None
        test.signal_stop(reason)
        if not test.done.wait(self.cfg.stop_timeout_s):
            # The worker owns the socket and pipe and closes them when the engine returns at last;
            # until then the daemon reports itself busy.
            raise P.DaemonError(f"the {test.role} engine did not stop within {self.cfg.stop_timeout_s:g} s")
        return test

    def _stop(self, msg: dict[str, Any]) -> None:
        _check_fields(msg, set())
        if self.test is None:
            raise P.RequestError("stop: no test to stop (start_responder or start_receiver first)")
        test = self._stop_test("stop")
        assert test is not None
        if test.error is not None:
            raise P.DaemonError(f"the {test.role} engine failed: {type(test.error).__name__}: "
                                f"{P.peer_text(str(test.error), 300)}")
        scalars, arrays = split_engine_result(test.result)
        wire = [P.wire_array(name, a) for name, a in arrays.items()]
        stats = {
            "role": test.role, "test_id": test.params.get("test_id"), **test.ports,
            "controller": self.peer_ip, "params": test.params, "limits": self._limits_dict(),
            "started_unix_ns": test.started_unix_ns, "elapsed_s": round(test.elapsed_s(), 9),
            "stop_reason": test.stop_reason, "engine": scalars, "wait": test.wait,
        }
        self.channel.send({"type": "results", "stats": P.jsonable(stats), "arrays": [d for d, _ in wire]},
                          timeout=30.0)
        for _, a in wire:
            self.channel.send_binary(memoryview(a.reshape(-1).view(np.uint8)), timeout=30.0)

    def _counters(self, msg: dict[str, Any]) -> dict[str, Any]:
        _check_fields(msg, {"interface"})
        iface = _value(msg, "interface", _MISSING)
        if not isinstance(iface, str) or not _IFNAME.match(iface) or iface in (".", ".."):
            raise P.RequestError(f"counters: bad interface name {P.show(iface)}")
        try:
            snapshot = self.daemon._counters()
        except (ImportError, AttributeError) as exc:
            return {"type": "counters", "interface": iface,
                    "unavailable": f"host counters are not available on the daemon host ({exc})"}
        try:
            data = snapshot(iface)
        except Exception as exc:  # noqa: BLE001 - whatever it is, the counters are unavailable
            return {"type": "counters", "interface": iface, "unavailable": f"{type(exc).__name__}: {exc}"}
        return {"type": "counters", "interface": iface, "counters": P.jsonable(data)}


# ----------------------------------------------------------------------------- the daemon


class _Waiting:
    """A connection between accept and authentication, driven by the daemon's event loop (no thread)."""

    __slots__ = ("sock", "addr", "peer", "block", "deadline", "opened", "nonce", "buf", "need", "head")

    def __init__(self, sock: socket.socket, addr: tuple[Any, ...], block: str, opened: float, deadline: float):
        self.sock = sock
        self.addr = addr
        self.peer = P.hostport(_unmap(str(addr[0])), addr[1])
        self.block = block
        self.opened = opened
        self.deadline = deadline
        self.nonce = P.new_nonce()
        self.buf = bytearray()
        self.need = 4          # bytes still wanted: first the length prefix, then the auth frame
        self.head = True


# The auth message is about 230 bytes; anything longer before authentication is not a controller.
MAX_HANDSHAKE_FRAME = 1024
# Log lines about strangers: the first of each kind at once, then one summary per this many seconds.
LOG_SUMMARY_S = 10.0
# Accepting resumes after a descriptor shortage with this back-off, doubling up to the second value.
ACCEPT_BACKOFF_S = (0.05, 1.0)
RETRY_MS = 100  # told to clients refused by random early drop: try again after about this long


class _LogThrottle:
    """One line per kind of event at once, the rest counted and summed up every :data:`LOG_SUMMARY_S`."""

    def __init__(self, log: Callable[[str], None], clock: Callable[[], float] = time.monotonic):
        self.log = log
        self.clock = clock
        self._quiet_until: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def __call__(self, kind: str, line: str) -> None:
        now = self.clock()
        if now >= self._quiet_until.get(kind, 0.0):
            self.flush(kind)
            self.log(line)
            self._quiet_until[kind] = now + LOG_SUMMARY_S
        else:
            self._held[kind] = self._held.get(kind, 0) + 1

    def flush(self, only: str | None = None) -> None:
        """Log the counts held back: of ``only``, or of every kind whose quiet time is over."""
        now = self.clock()
        for kind in list(self._held):
            if kind == only or (only is None and now >= self._quiet_until[kind]):
                self.log(f"{self._held.pop(kind)} more like '{kind}' in the last {LOG_SUMMARY_S:g} s")

    def next_due(self) -> float | None:
        due = [self._quiet_until[k] for k in self._held]
        return min(due) if due else None


class Daemon:
    """The server: one listening socket, one event loop for unauthenticated connections, one controller at a time.

    ``engine_loader`` and ``counters_loader`` default to :func:`load_engine`
    and :func:`load_counters` (looked up at call time, so tests may replace
    them); ``log`` receives one line per session and rate-limited lines about
    refused connections.
    """

    def __init__(self, config: Config, *, engine_loader: Callable[[], Any] | None = None,
                 counters_loader: Callable[[], Callable[[str], Any]] | None = None,
                 log: Callable[[str], None] = _log_stderr):
        self.config = config
        self.log = log
        self._engine_loader = engine_loader
        self._counters_loader = counters_loader
        self._lock = threading.Lock()
        self._session: _Session | None = None
        self._session_thread: threading.Thread | None = None
        self._tests: list[_Test] = []
        self._stop = threading.Event()
        self._stopped = threading.Event()
        self._serving = False
        self._listener: socket.socket | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._waiting: dict[int, _Waiting] = {}   # by file descriptor, oldest first
        self.penalties = admission.Penalties()
        self._note = _LogThrottle(log)
        self._random = random.SystemRandom()
        self._fds_at_start = 0

    def _engine(self) -> Any:
        return (self._engine_loader or load_engine)()

    def _counters(self) -> Callable[[str], Any]:
        return (self._counters_loader or load_counters)()

    # -- listening

    def listen(self) -> tuple[str, int]:
        """Bind and listen; returns the (address, port) actually bound."""
        cfg = self.config
        where = P.hostport(cfg.bind, cfg.port)
        try:
            infos = socket.getaddrinfo(cfg.bind, cfg.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            family, _, _, _, addr = infos[0]
            backlog = max(16, cfg.startups.full)
            if family == socket.AF_INET6 and addr[0] == "::" and socket.has_dualstack_ipv6():
                sock = socket.create_server(addr, family=family, backlog=backlog, dualstack_ipv6=True)
            else:
                sock = socket.create_server(addr, family=family, backlog=backlog)
        except socket.gaierror as exc:
            raise UsageError(f"cannot listen on {where}: {exc.strerror}") from None
        except OSError as exc:
            hint = " (is another udpmon daemon running?)" if exc.errno == errno.EADDRINUSE else ""
            raise NicrigError(f"cannot listen on {where}: {exc.strerror or exc}{hint}") from None
        sock.setblocking(False)
        self._listener = sock
        host, port = sock.getsockname()[:2]
        return host, port

    @property
    def address(self) -> tuple[str, int]:
        assert self._listener is not None
        return self._listener.getsockname()[:2]

    def serve_forever(self) -> None:
        """Accept and authenticate in this thread's event loop; each authenticated controller gets a thread."""
        if self._listener is None:
            self.listen()
        assert self._listener is not None
        self._serving = True
        listener = self._listener
        sel = selectors.DefaultSelector()
        sel.register(self._wake_r, selectors.EVENT_READ)
        sel.register(listener, selectors.EVENT_READ)
        listening = True
        resume_at = 0.0
        backoff = ACCEPT_BACKOFF_S[0]
        # one descriptor kept free: on EMFILE it is given up to accept and close the waiting connection
        reserve: int | None = os.open(os.devnull, os.O_RDONLY)
        self._fds_at_start = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 16
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                due = [w.deadline for w in self._waiting.values()]
                if not listening:
                    due.append(resume_at)
                if (log_due := self._note.next_due()) is not None:
                    due.append(log_due)
                timeout = max(0.0, min(due) - now) if due else None
                # waiting connections first: a controller's auth must not wait behind a burst of accepts
                for key, _ in sorted(sel.select(timeout), key=lambda ev: ev[0].fileobj is listener):
                    if key.fileobj is listener:
                        shortage = self._accept_some(sel)
                        if shortage is not None:
                            reserve = self._shed_one(reserve, shortage)
                            sel.unregister(listener)
                            listening, resume_at = False, time.monotonic() + backoff
                            backoff = min(2 * backoff, ACCEPT_BACKOFF_S[1])
                        else:
                            backoff = ACCEPT_BACKOFF_S[0]
                    elif key.fileobj == self._wake_r:
                        try:
                            os.read(self._wake_r, 512)
                        except BlockingIOError:
                            pass
                    else:
                        self._advance(sel, key.data)
                now = time.monotonic()
                for w in [w for w in self._waiting.values() if w.deadline <= now]:
                    self.penalties.add(w.block, "grace")
                    self._drop(sel, w, "timeout", P.error_message("bad_request", "handshake not completed in time"))
                if not listening and now >= resume_at:
                    if reserve is None:
                        try:
                            reserve = os.open(os.devnull, os.O_RDONLY)
                        except OSError:
                            pass
                    sel.register(listener, selectors.EVENT_READ)
                    listening = True
                self._note.flush()
        finally:
            for w in list(self._waiting.values()):
                self._drop(sel, w, None, P.error_message("busy", "the daemon is shutting down"))
            sel.close()
            listener.close()
            if reserve is not None:
                os.close(reserve)
            self._wind_down()
            self._note.flush()
            self._stopped.set()

    def stop(self) -> None:
        """Ask :meth:`serve_forever` to return (safe from a signal handler or another thread)."""
        self._stop.set()
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass

    def shutdown(self, timeout: float = 15.0) -> None:
        """Stop, end the connected session, and wait for :meth:`serve_forever` to return."""
        self.stop()
        if self._serving:
            self._stopped.wait(timeout)
        elif self._listener is not None:
            self._listener.close()

    def _wind_down(self, budget_s: float = 1.5) -> None:
        """End the session (its test stopped, settings put back) within ``budget_s``; the rest is daemonic."""
        with self._lock:
            session, thread = self._session, self._session_thread
        if session is not None:
            if session.test is not None:
                session.test.signal_stop("shutdown")
            try:
                session.conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if thread is not None:
            thread.join(budget_s)
            if thread.is_alive():
                self.log("the session did not end in time; leaving it to the exit")

    # -- admission (sshd_config(5) MaxStartups, PerSourceMaxStartups, PerSourcePenalties, LoginGraceTime)

    def _accept_some(self, sel: selectors.BaseSelector) -> str | None:
        """Accept what the backlog holds (at most 64); the error text on a descriptor or memory shortage."""
        assert self._listener is not None
        for _ in range(64):
            try:
                conn, addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return None
            except ConnectionAbortedError:
                continue
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    return exc.strerror or str(exc)
                self._note("accept failed", f"accept failed: {exc.strerror or exc}")
                return None
            try:
                self._admit(sel, conn, addr)
            except Exception as exc:  # noqa: BLE001 - one connection, never the daemon
                self._note("dropped", f"{P.show(addr)} dropped: {type(exc).__name__}: {exc}")
                conn.close()
        return None

    def _shed_one(self, reserve: int | None, why: str) -> int | None:
        """Out of descriptors: free the reserve to accept and reset one waiting connection; log it throttled."""
        self._note("accept failed", f"accept failed: {why}; pausing accept, closing connections at once "
                                    f"({len(self._waiting)} waiting to authenticate)")
        if reserve is None:
            return None
        os.close(reserve)
        assert self._listener is not None
        try:
            conn, _ = self._listener.accept()
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()
        except OSError:
            pass
        try:
            return os.open(os.devnull, os.O_RDONLY)
        except OSError:
            return None

    def _capacity(self) -> int:
        """MaxStartups' full, or fewer when the descriptor limit leaves no room for that many."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.config.startups.full
        return min(self.config.startups.full, admission.fd_budget(soft, self._fds_at_start))

    def _admit(self, sel: selectors.BaseSelector, conn: socket.socket, addr: tuple[Any, ...]) -> None:
        cfg = self.config
        ip = _unmap(str(addr[0]))
        block = admission.source_block(ip)
        conn.setblocking(False)
        if cfg.secret is None and not is_loopback(str(addr[0])):
            self.penalties.add(block, "authfail")
            self._note("refused: not loopback", f"{P.hostport(ip, addr[1])} refused: not loopback and no "
                                                f"--secret-file")
            _close_now(conn, P.plain_frame(P.error_message(
                "auth", f"this daemon has no --secret-file and accepts loopback controllers only; restart it "
                        f"with --secret-file to allow {ip}")))
            return
        if (left := self.penalties.remaining_s(block)) > 0:
            self._note("refused: penalized", f"{P.hostport(ip, addr[1])} refused: {block} penalized for failed "
                                             f"handshakes, {left:.0f} s left")
            _close_now(conn, P.plain_frame(P.error_message(
                "busy", f"refused: too many failed or unfinished handshakes from {ip}; try again in {left:.0f} s")))
            return
        now = time.monotonic()
        capacity = self._capacity()
        per_source = min(cfg.startups.per_source, max(1, capacity // 2))  # one source: half the table at most
        ours = [w for w in self._waiting.values() if w.block == block]
        if len(ours) >= per_source:
            # Its oldest goes, if it had time to finish a handshake: a controller that shares the
            # address gets in between strangers; else the newcomer goes (this bounds the churn).
            self.penalties.add(block, "noauth")
            why = "too many connections from this address are waiting to authenticate"
            if now - ours[0].opened < cfg.startups.evict_after_s:
                self._note("refused: per source", f"{P.hostport(ip, addr[1])} refused: {len(ours)} connections "
                                                  f"from {block} are waiting to authenticate")
                _close_now(conn, P.plain_frame(self._shed_message(why)))
                return
            self._drop(sel, ours[0], "evicted", self._shed_message(why))
        else:
            waiting = len(self._waiting)
            scaled = admission.Startups(start=min(cfg.startups.start, capacity),
                                        rate_percent=cfg.startups.rate_percent, full=capacity,
                                        per_source=per_source)
            if self._random.random() < admission.drop_probability(waiting, scaled):
                self._note("refused: startups", f"{P.hostport(ip, addr[1])} refused: {waiting} connections "
                                                f"waiting to authenticate (max startups {scaled.start}:"
                                                f"{scaled.rate_percent}:{scaled.full})")
                _close_now(conn, P.plain_frame(self._shed_message("too many connections are waiting to "
                                                                  "authenticate")))
                return
        w = _Waiting(conn, addr, block, now, now + cfg.handshake_timeout_s)
        hello = P.plain_frame({"type": "hello", "protocol": P.PROTOCOL, "version": P.VERSION,
                               "nonce": w.nonce.hex(), "auth": P.AUTH_HMAC if cfg.secret else P.AUTH_LOOPBACK})
        try:
            sent = conn.send(hello, socket.MSG_NOSIGNAL)
        except OSError:
            sent = -1
        if sent != len(hello):  # an empty send buffer takes 200 bytes; anything else is a broken peer
            conn.close()
            return
        self._waiting[conn.fileno()] = w
        sel.register(conn, selectors.EVENT_READ, w)

    @staticmethod
    def _shed_message(why: str) -> dict[str, Any]:
        """The busy error of a connection shed under load: the client retries after about RETRY_MS."""
        return {**P.error_message("busy", f"the daemon is busy: {why}; try again"), "retry_ms": RETRY_MS}

    def _drop(self, sel: selectors.BaseSelector, w: _Waiting, why: str | None, last: dict[str, Any]) -> None:
        """Forget a waiting connection and close it at once, with ``last`` as its last message."""
        self._waiting.pop(w.sock.fileno(), None)
        try:
            sel.unregister(w.sock)
        except (KeyError, ValueError):
            pass
        if why is not None:
            self._note(f"unauthenticated: {why}", f"{w.peer} unauthenticated {time.monotonic() - w.opened:.1f}s "
                                                  f"end: {why}")
        _close_now(w.sock, P.plain_frame(last))

    def _advance(self, sel: selectors.BaseSelector, w: _Waiting) -> None:
        """Read what a waiting connection sent; authenticate it once its auth frame is complete."""
        try:
            chunk = w.sock.recv(w.need)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.penalties.add(w.block, "noauth")
            self._drop(sel, w, "closed by the peer", P.error_message("bad_request", "closed"))
            return
        w.buf += chunk
        w.need -= len(chunk)
        if w.need:
            return
        if w.head:
            n = int.from_bytes(w.buf, "big")
            if not 0 < n <= MAX_HANDSHAKE_FRAME:
                self.penalties.add(w.block, "noauth")
                self._drop(sel, w, "bad frame", P.error_message("bad_request", "not authenticated: empty frame")
                           if n == 0 else P.error_message("limit", f"not authenticated: a frame of {n} bytes exceeds "
                                                                   f"the handshake limit of {MAX_HANDSHAKE_FRAME}"))
                return
            w.head, w.need, w.buf = False, n, bytearray()
            return
        self._waiting.pop(w.sock.fileno(), None)
        sel.unregister(w.sock)
        try:
            keys = self._authenticate(w)
            self._claim(w, keys)
        except P.ControlError as exc:
            kind = "authfail" if isinstance(exc, P.AuthError) else "noauth"
            if not isinstance(exc, (P.BusyError, P.VersionError, P.ConnectionClosed)):
                self.penalties.add(w.block, kind)
            self._note(f"refused: {exc.code}", f"{w.peer} refused: {exc.code}: {exc}")
            _close_now(w.sock, b"" if isinstance(exc, P.ConnectionClosed)
                       else P.plain_frame(P.error_message(exc.code, str(exc))))

    def _authenticate(self, w: _Waiting) -> tuple[bytes, bytes, bytes]:
        """(welcome frame, client->daemon key, daemon->client key) for a complete auth frame; ControlError."""
        secret = self.config.secret or b""
        msg = P.decode_json(w.buf)
        kind = msg.get("type")
        if kind == "error":
            raise P.ConnectionClosed(f"controller gave up: {P.peer_text(msg.get('message'), 200)}")
        if kind != "auth":
            raise P.AuthError(f"not authenticated: expected an auth message, got type {P.show(kind)}")
        version = msg.get("version", P.VERSION)
        if version != P.VERSION or isinstance(version, bool):
            raise P.VersionError(f"the controller speaks {P.PROTOCOL} version {P.show(version)}, this daemon "
                                 f"speaks version {P.VERSION}: run the same nicrig version on both hosts")
        _check_fields(msg, {"version", "client_nonce", "mac"})
        client_nonce = P.parse_nonce(msg.get("client_nonce"), "client_nonce")
        mac = P.parse_nonce(msg.get("mac"), "mac")
        if client_nonce == w.nonce:
            raise P.AuthError("authentication failed")
        if not hmac.compare_digest(P.client_proof(secret, w.nonce, client_nonce), mac):
            raise P.AuthError("authentication failed: the controller's secret does not match this daemon's "
                              "--secret-file")
        welcome = P.plain_frame({"type": "welcome", "version": P.VERSION,
                                 "mac": P.server_proof(secret, w.nonce, client_nonce).hex()})
        c2d, d2c = P.session_keys(secret, w.nonce, client_nonce)
        return welcome, c2d, d2c

    def _busy_reason(self) -> str | None:
        self._tests = [t for t in self._tests if not t.done.is_set()]
        if self._session is not None:
            return "the daemon is busy with another controller; try again when its test is done"
        if self._tests:
            return "the daemon is busy: a previous test is still stopping"
        return None

    def _claim(self, w: _Waiting, keys: tuple[bytes, bytes, bytes]) -> None:
        """Make ``w`` the controller and start its session thread; BusyError if there is one already."""
        welcome, c2d, d2c = keys
        with self._lock:
            reason = self._busy_reason()
            if reason is not None:
                raise P.BusyError(reason)
            try:
                sent = w.sock.send(welcome, socket.MSG_NOSIGNAL)
            except OSError:
                sent = -1
            if sent != len(welcome):
                raise P.ConnectionClosed("the welcome did not fit the socket buffer")
            w.sock.setblocking(True)
            _keepalive(w.sock)
            session = _Session(self, w.sock, w.addr, P.Channel(w.sock, send_key=d2c, recv_key=c2d), w.opened)
            thread = threading.Thread(target=session.run, name="udpmon-session", daemon=True)
            self._session, self._session_thread = session, thread
        thread.start()

    def _release(self, session: _Session) -> None:
        with self._lock:
            if self._session is session:
                self._session = None

    def _track(self, test: _Test) -> None:
        with self._lock:
            self._tests.append(test)


# ----------------------------------------------------------------------------- command line


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    lim = Limits()
    parser.add_argument("--bind", metavar="ADDR", default=None,
                        help="address to listen on (default 0.0.0.0 with --secret-file, else 127.0.0.1; "
                             ":: for IPv6 and IPv4)")
    parser.add_argument("--port", type=int, default=P.DEFAULT_PORT, metavar="P",
                        help=f"TCP control port (default {P.DEFAULT_PORT}; 0 picks a free one)")
    parser.add_argument("--secret-file", metavar="F", default=None,
                        help="shared secret (chmod 600); without it only loopback controllers are accepted")
    parser.add_argument("--max-response-bytes", type=int, default=lim.max_response_bytes, metavar="N",
                        help=f"largest UDP response a controller may ask for (default {lim.max_response_bytes})")
    parser.add_argument("--max-rate-pps", type=int, default=lim.max_rate_pps, metavar="N",
                        help=f"highest response rate in packets/s (default {lim.max_rate_pps})")
    parser.add_argument("--max-duration-s", type=float, default=lim.max_duration_s, metavar="S",
                        help=f"longest test in seconds (default {lim.max_duration_s:g})")
    parser.add_argument("--max-packets", type=int, default=lim.max_packets, metavar="N",
                        help=f"most packets a receiver test records (default {lim.max_packets})")
    parser.add_argument("--max-connections", type=int, default=lim.max_connections, metavar="N",
                        help=f"most TCP connections of one bulk test (default {lim.max_connections})")
    parser.add_argument("--max-connection-rate", type=int, default=lim.max_connection_rate, metavar="N",
                        help=f"most TCP connections per second the daemon opens to its controller "
                             f"(default {lim.max_connection_rate})")
    parser.add_argument("--allow-tuning", action="store_true",
                        help="let controllers change the MTU and interrupt coalescing of the interface toward "
                             "them (for sweeps; put back when they disconnect); needs root")
    parser.add_argument("--allow-trace", action="store_true",
                        help="let controllers record this host's kernel trace events during their tests "
                             "(interrupts, NAPI polls, the daemon's system calls; docs/host-probe.md); needs root")
    parser.add_argument("--max-trace-mb", type=float, default=lim.max_trace_bytes / (1 << 20), metavar="MB",
                        help=f"most raw kernel trace one session may record (default {lim.max_trace_bytes >> 20})")
    parser.add_argument("--idle-timeout-s", type=float, default=Config.idle_timeout_s, metavar="S",
                        help="drop a controller silent this long outside a test "
                             f"(default {Config.idle_timeout_s:g})")
    parser.add_argument("--no-busy-poll", action="store_true",
                        help="refuse tests that ask the responder or receiver to spin (latency --busy-poll); "
                             "otherwise such a test takes one CPU of this host for its length")
    startups = admission.Startups()
    parser.add_argument("--max-startups", metavar="START:RATE:FULL",
                        default=f"{startups.start}:{startups.rate_percent}:{startups.full}",
                        help="connections waiting to authenticate, as OpenSSH's MaxStartups: from START on, "
                             "refuse new ones with RATE %% chance rising to 100 %% at FULL (default "
                             f"{startups.start}:{startups.rate_percent}:{startups.full}; fewer when the "
                             "descriptor limit is low)")
    parser.add_argument("--per-source-startups", type=int, default=startups.per_source, metavar="N",
                        help="connections one address (an IPv6 /64; all of loopback) may have waiting to "
                             f"authenticate (default {startups.per_source})")
    parser.add_argument("--handshake-timeout-s", type=float, default=Config.handshake_timeout_s, metavar="S",
                        help="time a connection has to authenticate, from accept "
                             f"(default {Config.handshake_timeout_s:g})")


def config_from_args(args: argparse.Namespace) -> Config:
    """The daemon configuration of ``args``; UsageError / NicrigError on impossible values."""
    def check(name: str, value: float, lo: float, hi: float) -> None:
        if not (math.isfinite(value) and lo <= value <= hi):
            raise UsageError(f"--{name.replace('_', '-')} {value:g} must be between {lo:g} and {hi:g}")

    check("port", args.port, 0, 65535)
    check("max_response_bytes", args.max_response_bytes, 1, MAX_UDP_PAYLOAD)
    check("max_rate_pps", args.max_rate_pps, 1, 100_000_000)
    check("max_duration_s", args.max_duration_s, 0.001, 86_400)
    check("max_packets", args.max_packets, 1, P.MAX_ARRAY_BYTES // 8)
    check("idle_timeout_s", args.idle_timeout_s, 1, 86_400)
    check("max_connections", args.max_connections, 1, 65_536)
    check("max_connection_rate", args.max_connection_rate, 1, 10_000_000)
    check("max_trace_mb", args.max_trace_mb, 1, 16384)
    check("handshake_timeout_s", args.handshake_timeout_s, 0.1, 60)
    check("per_source_startups", args.per_source_startups, 1, 65_536)
    startups = admission.parse_startups(args.max_startups, args.per_source_startups)
    secret = P.load_secret(args.secret_file) if args.secret_file else None
    bind = args.bind or ("0.0.0.0" if secret else "127.0.0.1")
    limits = Limits(max_response_bytes=args.max_response_bytes, max_rate_pps=args.max_rate_pps,
                    max_duration_s=float(args.max_duration_s), max_packets=args.max_packets,
                    max_connections=args.max_connections, max_connection_rate=args.max_connection_rate,
                    max_trace_bytes=int(args.max_trace_mb * (1 << 20)))
    return Config(bind=bind, port=args.port, secret=secret, limits=limits, idle_timeout_s=args.idle_timeout_s,
                  allow_tuning=args.allow_tuning, allow_trace=args.allow_trace, startups=startups,
                  allow_busy_poll=not args.no_busy_poll,
                  handshake_timeout_s=args.handshake_timeout_s)


def serve(args: argparse.Namespace) -> int:
    """Run the daemon until SIGINT or SIGTERM."""
    config = config_from_args(args)
    daemon = Daemon(config)
    host, port = daemon.listen()
    lim, st = config.limits, config.startups
    daemon.log(f"listening on {P.hostport(host, port)} (protocol {P.PROTOCOL} v{P.VERSION}, auth "
               f"{P.AUTH_HMAC if config.secret else P.AUTH_LOOPBACK}; limits: {lim.max_response_bytes} B responses, "
               f"{lim.max_rate_pps} pps, {lim.max_duration_s:g} s, {lim.max_packets} packets, "
               f"{lim.max_connections} connections, {lim.max_connection_rate} connections/s"
               f"{'; interface tuning allowed' if config.allow_tuning else ''}"
               f"{'; kernel tracing allowed' if config.allow_trace else ''}"
               f"{'; no busy polling' if not config.allow_busy_poll else ''}; admission: max startups "
               f"{st.start}:{st.rate_percent}:{st.full}, {st.per_source} per source, handshake "
               f"{config.handshake_timeout_s:g} s)")
    if config.secret is None and not is_loopback(host):
        daemon.log("no --secret-file: only loopback controllers will be accepted")
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    try:
        daemon.serve_forever()
    except KeyboardInterrupt:
        daemon.stop()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    daemon.log("stopped")
    return 0
