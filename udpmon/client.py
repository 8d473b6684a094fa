"""The controller's side of the udpmon control protocol.

::

    with Controller("198.18.0.2", secret=secret) as far:
        port = far.start_responder(test_id=7, max_response_bytes=1472, max_rate_pps=10_000, duration_s=5)
        ...  # send requests to port, read responses
        stats, arrays = far.stop()

Every failure raises a :class:`~nicrig.udpmon.protocol.ControlError` (a
``NicrigError``) that says what happened and, where it can, what to do. A
Controller is not thread-safe: one thread drives it.
"""

from __future__ import annotations

import hmac
import os
import random
import socket
import time
from typing import Any, Self

import numpy as np
from nicrig.udpmon import protocol as P

# Time the daemon may take to stop an engine (it allows 10 s) on top of the request timeout.
_STOP_EXTRA_S = 15.0


class Controller:
    """A connection to ``nicrig udpmon serve`` at ``host:port``, authenticated both ways.

    ``secret`` (bytes or str) or ``secret_file`` is the daemon's shared secret;
    without either, only a daemon that runs without one (loopback only) is
    accepted, and with one, only a daemon that proves it knows the secret.
    ``timeout_s`` bounds connecting and each reply.
    """

    def __init__(self, host: str, port: int = P.DEFAULT_PORT, secret: bytes | str | None = None,
                 timeout_s: float = 10.0, *, secret_file: str | os.PathLike[str] | None = None):
        if secret is not None and secret_file is not None:
            raise P.ControlError("give the udpmon secret or a secret file, not both")
        self.host = host
        self.port = int(port)
        self.timeout_s = float(timeout_s)
        self._secret = P.load_secret(secret_file) if secret_file is not None else P.as_secret(secret)
        self._sock: socket.socket | None = None
        self._channel: P.Channel | None = None
        self._owed = 0                      # replies not read yet (a request ended by a signal)
        self._owed_arrays: list[int] = []   # sizes of result arrays not read yet
        self.auth: str | None = None

    @property
    def where(self) -> str:
        return P.hostport(self.host, self.port)

    # -- connection

    @property
    def peer(self) -> tuple[int, str]:
        """(address family, numeric address) the control connection reached: where UDP tests go too."""
        if self._sock is None:
            raise P.ProtocolError(f"not connected to the udpmon daemon at {self.where}")
        return self._sock.family, str(self._sock.getpeername()[0])

    @property
    def local_address(self) -> str:
        """Our numeric address on the control connection: where the daemon's senders and connectors aim."""
        if self._sock is None:
            raise P.ProtocolError(f"not connected to the udpmon daemon at {self.where}")
        return str(self._sock.getsockname()[0])

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        """Connect and authenticate; a daemon that sheds the attempt under load (``retry_ms``) is retried
        with jitter until ``timeout_s`` has passed."""
        if self._channel is not None:
            return
        end = time.monotonic() + self.timeout_s
        while True:
            try:
                self._connect_once()
                return
            except P.BusyError as exc:
                pause = exc.retry_after_s
                if pause is None or time.monotonic() + pause > end:
                    raise
                time.sleep(pause * random.uniform(0.5, 1.5))

    def _connect_once(self) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.timeout_s)
        except ConnectionRefusedError:
            raise P.Unreachable(f"no udpmon daemon at {self.where} (start one with nicrig udpmon serve)") from None
        except socket.gaierror as exc:
            raise P.Unreachable(f"cannot resolve udpmon host {self.host!r}: {exc.strerror}") from None
        except TimeoutError:
            raise P.Unreachable(f"no answer from {self.where} within {self.timeout_s:g} s "
                                f"(host down, or a firewall drops the udpmon port?)") from None
        except OSError as exc:
            raise P.Unreachable(f"cannot reach udpmon daemon at {self.where}: {exc.strerror or exc}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self._sock = sock
        try:
            self._channel = self._handshake(sock)
        except BaseException:
            self._drop()
            raise

    def _handshake(self, sock: socket.socket) -> P.Channel:
        where = self.where
        try:
            hello = P.recv_plain(sock, timeout=self.timeout_s)
        except P.ConnectionClosed:
            raise P.ConnectionClosed(f"{where} closed the connection before greeting "
                                     f"(is it a nicrig udpmon daemon?)") from None
        except (P.ProtocolError, P.LimitError):
            raise P.ProtocolError(f"{where} does not speak the {P.PROTOCOL} protocol "
                                  f"(is it a nicrig udpmon daemon?)") from None
        except TimeoutError:
            raise P.DaemonError(f"{where} sent no greeting within {self.timeout_s:g} s "
                                f"(is it a nicrig udpmon daemon?)") from None
        self._raise_if_error(hello)
        if hello.get("type") != "hello" or hello.get("protocol") != P.PROTOCOL:
            raise P.ProtocolError(f"{where} does not speak the {P.PROTOCOL} protocol")
        version = hello.get("version")
        if version != P.VERSION or isinstance(version, bool):
            message = (f"the udpmon daemon at {where} speaks {P.PROTOCOL} version {P.show(version)}, this "
                       f"nicrig speaks version {P.VERSION}: run the same nicrig version on both hosts")
            try:
                P.send_plain(sock, P.error_message("version", message), timeout=1.0)
            except (OSError, P.ControlError):
                pass
            raise P.VersionError(message)
        server_nonce = P.parse_nonce(hello.get("nonce"), "daemon nonce")
        mode = hello.get("auth")
        if mode == P.AUTH_HMAC and self._secret is None:
            raise P.AuthError(f"the udpmon daemon at {where} requires the shared secret "
                              f"(pass the file given to its --secret-file)")
        if mode == P.AUTH_LOOPBACK and self._secret is not None:
            raise P.AuthError(f"the udpmon daemon at {where} runs without a secret but one was given: refusing "
                              f"a daemon that cannot prove it knows it (start it with --secret-file)")
        if mode not in (P.AUTH_HMAC, P.AUTH_LOOPBACK):
            raise P.ProtocolError(f"the udpmon daemon at {where} offers unknown authentication {P.show(mode)}")
        secret = self._secret or b""
        client_nonce = P.new_nonce()
        P.send_plain(sock, {"type": "auth", "version": P.VERSION, "client_nonce": client_nonce.hex(),
                            "mac": P.client_proof(secret, server_nonce, client_nonce).hex()},
                     timeout=self.timeout_s)
        try:
            welcome = P.recv_plain(sock, timeout=self.timeout_s)
        except P.ConnectionClosed:
            raise P.ConnectionClosed(f"the udpmon daemon at {where} closed the connection during the "
                                     f"handshake") from None
        except TimeoutError:
            raise P.DaemonError(f"the udpmon daemon at {where} did not answer the handshake within "
                                f"{self.timeout_s:g} s") from None
        self._raise_if_error(welcome)
        if welcome.get("type") != "welcome":
            raise P.ProtocolError(f"the udpmon daemon at {where} answered the handshake with "
                                  f"{P.show(welcome.get('type'))}")
        mac = P.parse_nonce(welcome.get("mac"), "daemon proof")
        if not hmac.compare_digest(P.server_proof(secret, server_nonce, client_nonce), mac):
            raise P.AuthError(f"the udpmon daemon at {where} could not prove it knows the secret "
                              f"(a different secret there, or someone in the middle)")
        self.auth = mode
        c2d, d2c = P.session_keys(secret, server_nonce, client_nonce)
        return P.Channel(sock, send_key=c2d, recv_key=d2c)

    def _raise_if_error(self, msg: dict[str, Any]) -> None:
        if msg.get("type") != "error":
            return
        code = msg.get("code")
        cls = P.ERROR_CLASSES.get(code, P.DaemonError) if isinstance(code, str) else P.DaemonError
        exc = cls(f"udpmon daemon at {self.where}: {P.peer_text(msg.get('message'))}")
        retry_ms = msg.get("retry_ms")
        if isinstance(exc, P.BusyError) and isinstance(retry_ms, int) and 0 < retry_ms <= 10_000:
            exc.retry_after_s = retry_ms / 1000
        raise exc

    def _drop(self) -> None:
        self._channel = None
        self._owed, self._owed_arrays = 0, []
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def close(self) -> None:
        """Say bye (stopping any test still held) and close; safe to call twice."""
        if self._channel is not None:
            try:
                self._channel.send({"type": "bye"}, timeout=2.0)
                self._channel.recv(timeout=2.0 + _STOP_EXTRA_S)
            except (OSError, P.ControlError):
                pass
        self._drop()

    # -- requests

    def _request(self, msg: dict[str, Any], expect: str, timeout_s: float | None = None) -> dict[str, Any]:
        if self._channel is None:
            raise P.ConnectionClosed(f"not connected to the udpmon daemon at {self.where}")
        timeout = self.timeout_s if timeout_s is None else timeout_s
        try:
            self._settle(timeout)
            self._channel.send(msg, timeout=timeout)
            self._owed += 1
            reply = self._channel.recv(timeout=timeout)
            self._owed -= 1
        except TimeoutError:
            self._drop()
            raise P.DaemonError(f"the udpmon daemon at {self.where} did not answer {msg['type']} within "
                                f"{timeout:g} s") from None
        except P.ConnectionClosed as exc:
            self._drop()
            raise P.ConnectionClosed(f"the udpmon daemon at {self.where} closed the connection ({exc})") from None
        except (P.AuthError, P.ProtocolError, P.LimitError) as exc:
            self._drop()
            raise type(exc)(f"reply from the udpmon daemon at {self.where}: {exc}") from None
        except OSError as exc:
            self._drop()
            raise P.ConnectionClosed(f"connection to the udpmon daemon at {self.where} failed: "
                                     f"{exc.strerror or exc}") from None
        if reply["type"] == "error":
            if reply.get("code") in ("auth", "version"):
                self._drop()
            self._raise_if_error(reply)
        if reply["type"] != expect:
            self._drop()
            raise P.ProtocolError(f"the udpmon daemon at {self.where} answered {msg['type']} with "
                                  f"{P.show(reply['type'])}")
        return reply

    def _settle(self, timeout: float) -> None:
        """Read and drop what an interrupted request left owed (its reply, a result's arrays).

        A signal can end a request between its send and its reply (a sweep
        interrupted during ``counters``); without this the next request would
        take that reply for its own and the channel would stay out of step.
        """
        assert self._channel is not None
        while self._owed_arrays:
            self._channel.recv_binary(self._owed_arrays[0], timeout=timeout)
            self._owed_arrays.pop(0)
        while self._owed:
            reply = self._channel.recv(timeout=timeout)
            self._owed -= 1
            descs = reply.get("arrays") if reply.get("type") == "results" else None
            for desc in descs if isinstance(descs, list) else []:
                self._owed_arrays.append(P.parse_array_descriptor(desc)[3])
            while self._owed_arrays:
                self._channel.recv_binary(self._owed_arrays[0], timeout=timeout)
                self._owed_arrays.pop(0)

    def _port(self, reply: dict[str, Any], name: str = "udp_port") -> int:
        port = reply.get(name)
        if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
            raise P.ProtocolError(f"the udpmon daemon at {self.where} sent a bad {name} {P.show(port)}")
        return port

    def _start(self, msg: dict[str, Any], port: str | None) -> int | None:
        """Send a start request without its None-valued fields; the port the reply names, if asked."""
        reply = self._request({k: v for k, v in msg.items() if v is not None}, "ready")
        return self._port(reply, port) if port else None

    def start_responder(self, *, test_id: int, max_response_bytes: int, max_rate_pps: int, duration_s: float,
                        udp_port: int = 0, idle_timeout_ms: int | None = None, seed: int | None = None,
                        peer_udp_port: int | None = None, busy_poll: bool = False) -> int:
        """Start a responder on the far host; returns the UDP port to send requests to.

        It answers only this controller's IP (and with ``peer_udp_port`` only that source port);
        with ``busy_poll`` it spins instead of sleeping in the kernel (LimitError where the daemon
        does not spin).
        """
        return self._start({"type": "start_responder", "udp_port": udp_port, "test_id": test_id,
                            "max_response_bytes": max_response_bytes, "max_rate_pps": max_rate_pps,
                            "duration_s": duration_s, "idle_timeout_ms": idle_timeout_ms, "seed": seed,
                            "peer_udp_port": peer_udp_port, "busy_poll": busy_poll or None}, "udp_port")

    def start_receiver(self, *, test_id: int, max_packets: int, idle_timeout_ms: int, duration_s: float,
                       udp_port: int = 0, hw_timestamps: bool = False, peer_udp_port: int | None = None,
                       busy_poll: bool = False) -> int:
        """Start a receiver on the far host; returns the UDP port to send the stream to (``busy_poll``: it spins)."""
        return self._start({"type": "start_receiver", "udp_port": udp_port, "test_id": test_id,
                            "max_packets": max_packets, "idle_timeout_ms": idle_timeout_ms, "duration_s": duration_s,
                            "hw_timestamps": hw_timestamps, "peer_udp_port": peer_udp_port,
                            "busy_poll": busy_poll or None}, "udp_port")

    def start_sender(self, *, test_id: int, count: int, size_bytes: int, spacing_ns: int, peer_udp_port: int,
                     duration_s: float, start_delay_ms: int | None = None, seed: int | None = None,
                     udp_port: int = 0) -> int:
        """Have the far host send a paced stream to this controller's ``peer_udp_port``; returns its UDP port."""
        return self._start({"type": "start_sender", "udp_port": udp_port, "test_id": test_id, "count": count,
                            "size_bytes": size_bytes, "spacing_ns": spacing_ns, "peer_udp_port": peer_udp_port,
                            "duration_s": duration_s, "start_delay_ms": start_delay_ms, "seed": seed}, "udp_port")

    def start_tcp_sink(self, *, connections: int, duration_s: float, idle_timeout_ms: int) -> int:
        """A far TCP port that accepts ``connections`` from us and reads them to their end; returns the port."""
        return self._start({"type": "start_tcp_sink", "connections": connections, "duration_s": duration_s,
                            "idle_timeout_ms": idle_timeout_ms}, "tcp_port")

    def start_tcp_source(self, *, connections: int, duration_s: float, send_ms: int, seed: int | None = None) -> int:
        """A far TCP port that accepts ``connections`` from us and writes to them for ``send_ms``."""
        return self._start({"type": "start_tcp_source", "connections": connections, "duration_s": duration_s,
                            "send_ms": send_ms, "seed": seed}, "tcp_port")

    def start_acceptor(self, *, max_connections: int, duration_s: float, idle_timeout_ms: int) -> int:
        """A far TCP port that accepts our connections and closes each at once; returns the port."""
        return self._start({"type": "start_acceptor", "max_connections": max_connections, "duration_s": duration_s,
                            "idle_timeout_ms": idle_timeout_ms}, "tcp_port")

    def start_connector(self, *, tcp_port: int, count: int, rate_per_s: int, duration_s: float,
                        start_delay_ms: int | None = None) -> None:
        """Have the far host open and close ``count`` connections to our ``tcp_port`` at ``rate_per_s``."""
        self._start({"type": "start_connector", "tcp_port": tcp_port, "count": count, "rate_per_s": rate_per_s,
                     "duration_s": duration_s, "start_delay_ms": start_delay_ms}, None)

    def check_interface(self, settings: dict[str, Any]) -> dict[str, Any]:
        """What the far host has in force for ``settings`` on its interface toward us (changes nothing).

        ``{"interface", "settings", "allow_tuning"}``; RefusedError when it cannot read or would refuse them.
        """
        reply = self._request({"type": "check_interface", "settings": settings}, "interface")
        return {k: v for k, v in reply.items() if k not in ("type", "seq")}

    def set_interface(self, settings: dict[str, Any]) -> dict[str, Any]:
        """Change settings of the far host's interface toward us; ``{"interface", "previous", "settings"}``."""
        reply = self._request({"type": "set_interface", "settings": settings}, "interface")
        return {k: v for k, v in reply.items() if k not in ("type", "seq")}

    def restore_interface(self) -> dict[str, Any]:
        """Put back every setting this control session changed; ``{"interface", "restored"}``."""
        reply = self._request({"type": "restore_interface"}, "interface")
        return {k: v for k, v in reply.items() if k not in ("type", "seq")}

    def stop(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Stop the running test; (stats, arrays) of the far end."""
        timeout = self.timeout_s + _STOP_EXTRA_S
        reply = self._request({"type": "stop"}, "results", timeout)
        stats = reply.get("stats")
        if not isinstance(stats, dict):
            self._drop()
            raise P.ProtocolError(f"the udpmon daemon at {self.where} sent malformed results")
        return stats, self._arrays(reply)

    def _arrays(self, reply: dict[str, Any]) -> dict[str, np.ndarray]:
        """The binary frames a reply announces in its ``arrays`` descriptors."""
        timeout = self.timeout_s + _STOP_EXTRA_S
        descs = reply.get("arrays")
        if not isinstance(descs, list) or len(descs) > P.MAX_ARRAYS:
            self._drop()
            raise P.ProtocolError(f"the udpmon daemon at {self.where} sent malformed results")
        arrays: dict[str, np.ndarray] = {}
        try:
            parsed = [P.parse_array_descriptor(d) for d in descs]
            if len({name for name, *_ in parsed}) != len(parsed):
                raise P.ProtocolError("duplicate array names")
            self._owed_arrays = [nbytes for *_, nbytes in parsed]
            for name, dtype, shape, nbytes in parsed:
                assert self._channel is not None
                data = self._channel.recv_binary(nbytes, timeout=timeout)
                self._owed_arrays.pop(0)
                arrays[name] = np.frombuffer(data, dtype=dtype).reshape(shape)
        except TimeoutError:
            self._drop()
            raise P.DaemonError(f"the udpmon daemon at {self.where} stalled while sending results") from None
        except (P.ControlError, OSError) as exc:
            self._drop()
            raise P.ProtocolError(f"results from the udpmon daemon at {self.where}: {exc}") from None
        return arrays

    def status(self) -> dict[str, Any]:
        reply = self._request({"type": "status"}, "status")
        return {k: v for k, v in reply.items() if k not in ("type", "seq")}

    def counters(self, interface: str) -> dict[str, Any]:
        """Host counters of ``interface`` on the far host, or ``{"unavailable": reason}``."""
        reply = self._request({"type": "counters", "interface": interface}, "counters")
        if "unavailable" in reply:
            return {"unavailable": reply["unavailable"]}
        counters = reply.get("counters")
        return counters if isinstance(counters, dict) else {"counters": counters}

    def limits(self) -> dict[str, Any]:
        reply = self._request({"type": "limits"}, "limits")
        return {k: v for k, v in reply.items() if k not in ("type", "seq")}

    def clock_exchanges(self, count: int = 32) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``count`` clock requests: this host's CLOCK_MONOTONIC before each and after its reply, and the far
        host's reading in between (for :func:`nicrig.udpmon.clocksync.estimate_offset`)."""
        t1, tf, t4 = (np.zeros(count, dtype=np.int64) for _ in range(3))
        for k in range(count):
            t1[k] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            reply = self._request({"type": "clock"}, "clock")
            t4[k] = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            value = reply.get("mono_ns")
            if not isinstance(value, int) or isinstance(value, bool):
                raise P.ProtocolError(f"the udpmon daemon at {self.where} sent a bad clock {P.show(value)}")
            tf[k] = value
        return t1, tf, t4

    def clock_offset(self) -> Any:
        """The offset to add to the far host's CLOCK_MONOTONIC readings to put them on this host's
        (:class:`nicrig.udpmon.clocksync.ClockOffset`): exactly 0 when the daemon runs on this kernel."""
        from nicrig.udpmon.clocksync import estimate_offset, same_clock_offset

        estimate = estimate_offset(*self.clock_exchanges())
        far_boot = self._request({"type": "clock"}, "clock").get("boot_id")
        return same_clock_offset(estimate, far_boot if isinstance(far_boot, str) else None)

    def start_trace(self, *, duration_s: float, events: list[str] | None = None) -> dict[str, Any]:
        """Start recording the far host's kernel trace events (the daemon needs ``--allow-trace``)."""
        msg: dict[str, Any] = {"type": "start_trace", "duration_s": duration_s}
        if events is not None:
            msg["events"] = events
        reply = self._request(msg, "tracing")
        return {k: v for k, v in reply.items() if k not in ("type", "seq")}

    def stop_trace(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Stop the far host's recording: (the trace's description, its raw sub-buffer arrays)."""
        reply = self._request({"type": "stop_trace"}, "trace", self.timeout_s + _STOP_EXTRA_S)
        return reply, self._arrays(reply)

    def ping(self) -> None:
        """Keep the session alive (the daemon drops controllers silent for its idle timeout)."""
        self._request({"type": "ping"}, "pong")
