"""The control protocol between ``nicrig udpmon serve`` and its controller, version 2.

Version 2 added the sender, TCP and interface-setting requests (see
:mod:`nicrig.udpmon.daemon`) and the ``refused`` error code; the framing,
handshake and keys are version 1's.

One TCP connection per controller; the daemon speaks first.

Framing
    Every frame is a u32 big-endian length and that many bytes. A JSON frame
    holds one UTF-8 JSON object of at most :data:`MAX_FRAME_BYTES`; a longer
    length prefix is an error and the connection is closed without reading the
    body. Result arrays travel as binary frames after the JSON message that
    describes them (name, dtype, shape, nbytes), little-endian, C order.

Handshake (plain JSON frames)
    daemon  -> ``{"type":"hello","protocol":"nicrig-udpmon","version":2,"nonce":Ns,"auth":A}``
    client  -> ``{"type":"auth","version":2,"client_nonce":Nc,"mac":HMAC(K,"client"|Ns|Nc)}``
    daemon  -> ``{"type":"welcome","version":2,"mac":HMAC(K,"server"|Nc|Ns)}``
    Nonces are 32 random bytes (hex on the wire, raw bytes inside the MACs), K
    is the shared secret; ``A`` is ``"hmac-sha256"`` with a secret file and
    ``"loopback"`` without one (then K is empty and only loopback peers are
    accepted). The welcome proves to the client that the daemon knows K too.
    Instead of ``welcome`` (or ``hello``) the daemon may send an ``error``.

Session (every later frame, both directions)
    ``MAC(32 bytes) | body``, MAC = HMAC-SHA256(key of that direction, seq as u64 BE | body),
    body a JSON object carrying the same ``"seq"`` (or, for binary frames, the
    raw array bytes). Each direction counts its frames from 0. The two keys are
    HKDF-SHA256(K, salt=Ns|Nc, info="nicrig-udpmon/1 client->daemon" or
    "... daemon->client"), so a man in the middle can neither inject, alter,
    replay, reorder nor reflect a message.

Requests and replies are listed in :mod:`nicrig.udpmon.daemon`; errors are
``{"type":"error","code":C,"message":M}`` with C one of :data:`ERROR_CODES`; a ``busy``
error before authentication may carry ``"retry_ms"``: the daemon shed the
connection at random under load (admission, :mod:`nicrig.udpmon.admission`)
and a new attempt after about that long will likely get in.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import re
import secrets
import socket
import stat
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from nicrig.errors import NicrigError

PROTOCOL = "nicrig-udpmon"
VERSION = 2
DEFAULT_PORT = 14401
MAX_FRAME_BYTES = 1 << 20  # one JSON message
MAX_ARRAY_BYTES = 1 << 30  # one result array (the daemon's packet cap keeps them far smaller)
MAX_ARRAYS = 64
NONCE_BYTES = 32
MAC_BYTES = 32
MAX_SECRET_FILE_BYTES = 4096
AUTH_HMAC = "hmac-sha256"
AUTH_LOOPBACK = "loopback"

_LEN = 4
_NONCE_RE = re.compile(r"^[0-9a-f]{64}$")
_SEND_CHUNK = 1 << 20

# Dtypes a result array may have (little-endian or byte-sized; never objects).
ARRAY_DTYPES = frozenset(
    {"|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8"}
)


# ----------------------------------------------------------------------------- errors


class ControlError(NicrigError):
    """A problem on the control connection; ``code`` is its wire error code."""

    code = "internal"


class AuthError(ControlError):
    code = "auth"


class BusyError(ControlError):
    """The daemon is busy; ``retry_after_s`` is set when it said to try again shortly (admission's random drop)."""

    code = "busy"
    retry_after_s: float | None = None


class VersionError(ControlError):
    code = "version"


class RequestError(ControlError):
    """The daemon refused a request as malformed (bad_request)."""

    code = "bad_request"


class LimitError(ControlError):
    """A request or frame beyond a cap of the daemon or of the protocol."""

    code = "limit"


class DaemonError(ControlError):
    """The daemon failed internally (engine error, engine missing, ...)."""

    code = "internal"


class RefusedError(ControlError):
    """The daemon's host cannot do what was asked (an interface setting its driver lacks, ...)."""

    code = "refused"


class ProtocolError(ControlError):
    """The peer sent bytes that are not this protocol."""

    code = "bad_request"


class ConnectionClosed(ControlError):
    """The peer closed the connection (or it broke)."""

    code = "internal"


class Unreachable(ControlError):
    """No daemon answered at the given address."""

    code = "internal"


ERROR_CODES = ("busy", "auth", "version", "bad_request", "limit", "refused", "internal")
ERROR_CLASSES: dict[str, type[ControlError]] = {
    "busy": BusyError,
    "auth": AuthError,
    "version": VersionError,
    "bad_request": RequestError,
    "limit": LimitError,
    "refused": RefusedError,
    "internal": DaemonError,
}


def error_message(code: str, message: str) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message}


def show(value: Any, limit: int = 60) -> str:
    """A short, ASCII-only rendering of a peer-supplied value for messages and logs."""
    text = ascii(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def peer_text(value: Any, limit: int = 500) -> str:
    """A peer-supplied message made printable ASCII and bounded, for our own messages."""
    text = value if isinstance(value, str) else "(no message)"
    text = "".join(c if c.isascii() and c.isprintable() else "?" for c in text[: limit + 1])
    return text if len(text) <= limit else text[: limit - 3] + "..."


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ----------------------------------------------------------------------------- crypto


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def parse_nonce(value: Any, what: str) -> bytes:
    if not isinstance(value, str) or not _NONCE_RE.match(value):
        raise ProtocolError(f"{what} must be {NONCE_BYTES * 2} lowercase hex digits")
    return bytes.fromhex(value)


def _hmac(key: bytes, *parts: bytes) -> bytes:
    h = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    return h.digest()


def client_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return _hmac(secret, b"client", server_nonce, client_nonce)


def server_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> bytes:
    return _hmac(secret, b"server", client_nonce, server_nonce)


def hkdf_sha256(ikm: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """RFC 5869 HKDF with SHA-256."""
    prk = _hmac(salt, ikm)
    out, block, counter = b"", b"", 1
    while len(out) < length:
        block = _hmac(prk, block, info, bytes([counter]))
        out += block
        counter += 1
    return out[:length]


def session_keys(secret: bytes, server_nonce: bytes, client_nonce: bytes) -> tuple[bytes, bytes]:
    """(client->daemon key, daemon->client key)."""
    salt = server_nonce + client_nonce
    return (
        hkdf_sha256(secret, salt, b"nicrig-udpmon/1 client->daemon"),
        hkdf_sha256(secret, salt, b"nicrig-udpmon/1 daemon->client"),
    )


def load_secret(path: str | os.PathLike[str]) -> bytes:
    """The shared secret in ``path``: a regular file, not empty, no access for group or others.

    Like ssh with a private key, a file others can read (or write) is refused
    rather than warned about: the secret is all that stands between the
    network and a traffic generator. Surrounding whitespace is not part of it.
    """
    name = os.fspath(path)
    hint = f"create one with: head -c 32 /dev/urandom | base64 > {name}; chmod 600 {name}"
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise NicrigError(f"secret file {name} does not exist ({hint})") from None
    except OSError as exc:
        raise NicrigError(f"cannot open secret file {name}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NicrigError(f"secret file {name} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise NicrigError(
                f"secret file {name} has permissions {mode:04o}: it must not be accessible by group "
                f"or others (run: chmod 600 {name})"
            )
        if st.st_size > MAX_SECRET_FILE_BYTES:
            raise NicrigError(f"secret file {name} is {st.st_size} bytes: a secret is at most {MAX_SECRET_FILE_BYTES}")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    secret = data.strip()
    if not secret:
        raise NicrigError(f"secret file {name} is empty ({hint})")
    return secret


def as_secret(secret: bytes | str | None) -> bytes | None:
    if secret is None:
        return None
    value = secret.encode() if isinstance(secret, str) else bytes(secret)
    value = value.strip()
    if not value:
        raise NicrigError("the udpmon secret is empty")
    return value


# ----------------------------------------------------------------------------- JSON


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def encode_json(msg: Mapping[str, Any]) -> bytes:
    return json.dumps(msg, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def decode_json(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """One JSON object, or ProtocolError."""
    try:
        obj = json.loads(bytes(payload).decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"frame is not a UTF-8 JSON object ({type(exc).__name__})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"frame holds a JSON {type(obj).__name__}, not an object")
    return obj


def jsonable(value: Any, depth: int = 0) -> Any:
    """``value`` with numpy scalars, tuples, non-finite floats ... made JSON-safe."""
    if depth > 16:
        return show(value)
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist(), depth + 1) if value.size <= 256 else f"<array {value.shape} {value.dtype}>"
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v, depth + 1) for v in value]
    if hasattr(value, "_asdict"):
        return jsonable(value._asdict(), depth + 1)
    if hasattr(value, "__dataclass_fields__"):
        return {k: jsonable(getattr(value, k), depth + 1) for k in value.__dataclass_fields__}
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


# ----------------------------------------------------------------------------- frames


def _recv_exact(
    sock: socket.socket, n: int, *, timeout: float | None, deadline: float | None, started: bool
) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        wait = timeout
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("timed out")
            wait = left if wait is None else min(wait, left)
        sock.settimeout(wait)
        try:
            k = sock.recv_into(view[got:], min(n - got, _SEND_CHUNK))
        except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
            raise ConnectionClosed(f"connection broken ({exc.strerror or exc})") from None
        if k == 0:
            if got == 0 and not started:
                raise ConnectionClosed("connection closed")
            raise ConnectionClosed("connection closed in the middle of a frame")
        got += k
    return buf


def recv_frame(
    sock: socket.socket, max_bytes: int = MAX_FRAME_BYTES, *, timeout: float | None = None,
    deadline: float | None = None, exact: int | None = None,
) -> bytearray:
    """The body of the next frame; LimitError (body not read) if it is longer than ``max_bytes``.

    ``timeout`` bounds each wait for bytes, ``deadline`` (time.monotonic) the whole frame.
    With ``exact`` the frame must be exactly that long.
    """
    head = _recv_exact(sock, _LEN, timeout=timeout, deadline=deadline, started=False)
    n = int.from_bytes(head, "big")
    if exact is not None and n != exact:
        raise ProtocolError(f"frame of {n} bytes where {exact} were announced")
    if n > max_bytes:
        raise LimitError(f"frame of {n} bytes exceeds the limit of {max_bytes}")
    if n == 0:
        raise ProtocolError("empty frame")
    return _recv_exact(sock, n, timeout=timeout, deadline=deadline, started=True)


def _send_all(sock: socket.socket, parts: list[bytes | memoryview], timeout: float | None) -> None:
    """Send ``parts``; ``timeout`` bounds each 1 MiB chunk (progress), not the whole transfer."""
    sock.settimeout(timeout)
    try:
        for part in parts:
            view = memoryview(part).cast("B")
            for i in range(0, len(view), _SEND_CHUNK):
                sock.sendall(view[i : i + _SEND_CHUNK])
    except (ConnectionResetError, ConnectionAbortedError, BrokenPipeError) as exc:
        raise ConnectionClosed(f"connection broken ({exc.strerror or exc})") from None


def send_frame(sock: socket.socket, body: bytes, *, timeout: float | None = None) -> None:
    if len(body) > MAX_FRAME_BYTES:
        raise LimitError(f"message of {len(body)} bytes exceeds the frame limit of {MAX_FRAME_BYTES}")
    _send_all(sock, [len(body).to_bytes(_LEN, "big") + body], timeout)


def plain_frame(msg: Mapping[str, Any]) -> bytes:
    """A handshake-phase (unauthenticated) JSON frame as it goes on the wire: length prefix and body."""
    body = encode_json(msg)
    if len(body) > MAX_FRAME_BYTES:
        raise LimitError(f"message of {len(body)} bytes exceeds the frame limit of {MAX_FRAME_BYTES}")
    return len(body).to_bytes(_LEN, "big") + body


def send_plain(sock: socket.socket, msg: Mapping[str, Any], *, timeout: float | None = None) -> None:
    """A handshake-phase (unauthenticated) JSON frame."""
    _send_all(sock, [plain_frame(msg)], timeout)


def recv_plain(sock: socket.socket, *, timeout: float | None = None, deadline: float | None = None) -> dict[str, Any]:
    return decode_json(recv_frame(sock, MAX_FRAME_BYTES, timeout=timeout, deadline=deadline))


# ----------------------------------------------------------------------------- session channel


class Channel:
    """The authenticated session on a connected socket: sequence numbers and per-direction MACs."""

    def __init__(self, sock: socket.socket, send_key: bytes, recv_key: bytes):
        self.sock = sock
        self._send_key = send_key
        self._recv_key = recv_key
        self.send_seq = 0
        self.recv_seq = 0

    def _mac(self, key: bytes, seq: int, *parts: bytes | memoryview) -> bytes:
        h = hmac.new(key, seq.to_bytes(8, "big"), hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.digest()

    def send(self, msg: Mapping[str, Any], *, timeout: float | None = None) -> None:
        body = encode_json({**msg, "seq": self.send_seq})
        if len(body) + MAC_BYTES > MAX_FRAME_BYTES:
            raise LimitError(f"message of {len(body)} bytes exceeds the frame limit of {MAX_FRAME_BYTES}")
        mac = self._mac(self._send_key, self.send_seq, body)
        self.send_seq += 1
        _send_all(self.sock, [(len(body) + MAC_BYTES).to_bytes(_LEN, "big") + mac + body], timeout)

    def send_binary(self, data: memoryview, *, timeout: float | None = None) -> None:
        """One binary frame (raw bytes after the MAC), e.g. a result array."""
        data = memoryview(data).cast("B")
        mac = self._mac(self._send_key, self.send_seq, data)
        self.send_seq += 1
        _send_all(self.sock, [(len(data) + MAC_BYTES).to_bytes(_LEN, "big") + mac, data], timeout)

    def _check(self, frame: bytearray, *, empty_ok: bool = False) -> memoryview:
        if len(frame) < MAC_BYTES or (len(frame) == MAC_BYTES and not empty_ok):
            raise AuthError("message without a MAC on an authenticated session")
        view = memoryview(frame)
        body = view[MAC_BYTES:]
        if not hmac.compare_digest(bytes(view[:MAC_BYTES]), self._mac(self._recv_key, self.recv_seq, body)):
            raise AuthError("message failed authentication (tampered, replayed, reordered or wrong key)")
        self.recv_seq += 1
        return body

    def recv(self, *, timeout: float | None = None, deadline: float | None = None) -> dict[str, Any]:
        frame = recv_frame(self.sock, MAX_FRAME_BYTES, timeout=timeout, deadline=deadline)
        seq = self.recv_seq
        msg = decode_json(self._check(frame))
        if msg.get("seq") != seq or isinstance(msg.get("seq"), bool):
            raise AuthError(f"message carries sequence number {show(msg.get('seq'))}, expected {seq}")
        if not isinstance(msg.get("type"), str):
            raise ProtocolError("message without a string 'type'")
        return msg

    def recv_binary(self, nbytes: int, *, timeout: float | None = None) -> memoryview:
        if nbytes > MAX_ARRAY_BYTES:
            raise LimitError(f"array of {nbytes} bytes exceeds the limit of {MAX_ARRAY_BYTES}")
        frame = recv_frame(self.sock, MAX_ARRAY_BYTES + MAC_BYTES, timeout=timeout, exact=nbytes + MAC_BYTES)
        return self._check(frame, empty_ok=True)


# ----------------------------------------------------------------------------- arrays


def wire_array(name: str, array: Any) -> tuple[dict[str, Any], np.ndarray]:
    """(descriptor, little-endian C-contiguous copy-if-needed) of a result array."""
    arr = np.asarray(array)
    dt = arr.dtype
    if dt.names:
        fields = []
        for fname in dt.names:
            fdt = dt.fields[fname][0]
            fstr = fdt.newbyteorder("<").str
            if fstr not in ARRAY_DTYPES:
                raise DaemonError(f"result array {name!r} field {fname!r} has unsupported dtype {fdt}")
            fields.append((fname, fstr))
        wire_dt = np.dtype(fields)
        descr: Any = [list(f) for f in fields]
    else:
        wire_dt = dt.newbyteorder("<")
        descr = wire_dt.str
        if descr not in ARRAY_DTYPES:
            raise DaemonError(f"result array {name!r} has unsupported dtype {dt}")
    out = np.ascontiguousarray(arr.astype(wire_dt, copy=False))
    if out.nbytes > MAX_ARRAY_BYTES:
        raise DaemonError(f"result array {name!r} of {out.nbytes} bytes exceeds {MAX_ARRAY_BYTES}")
    return {"name": name, "dtype": descr, "shape": list(out.shape), "nbytes": int(out.nbytes)}, out


def parse_array_descriptor(desc: Any) -> tuple[str, np.dtype, tuple[int, ...], int]:
    """Validate one descriptor of a ``results`` message: (name, dtype, shape, nbytes)."""
    if not isinstance(desc, dict):
        raise ProtocolError("array descriptor is not an object")
    name, dtype, shape, nbytes = desc.get("name"), desc.get("dtype"), desc.get("shape"), desc.get("nbytes")
    if not isinstance(name, str) or not (0 < len(name) <= 64):
        raise ProtocolError(f"bad array name {show(name)}")
    if isinstance(dtype, str):
        if dtype not in ARRAY_DTYPES:
            raise ProtocolError(f"array {show(name)}: dtype {show(dtype)} not allowed")
        dt = np.dtype(dtype)
    elif isinstance(dtype, list) and 0 < len(dtype) <= 32:
        fields = []
        for f in dtype:
            if (not isinstance(f, list) or len(f) != 2 or not isinstance(f[0], str) or not f[0]
                    or len(f[0]) > 64 or f[1] not in ARRAY_DTYPES):
                raise ProtocolError(f"array {show(name)}: bad field {show(f)}")
            fields.append((f[0], f[1]))
        try:
            dt = np.dtype(fields)
        except (TypeError, ValueError):
            raise ProtocolError(f"array {show(name)}: bad fields {show(dtype)}") from None
    else:
        raise ProtocolError(f"array {show(name)}: bad dtype {show(dtype)}")
    if (not isinstance(shape, list) or len(shape) > 8
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)):
        raise ProtocolError(f"array {show(name)}: bad shape {show(shape)}")
    count = math.prod(shape)
    if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes != count * dt.itemsize:
        raise ProtocolError(f"array {show(name)}: nbytes {show(nbytes)} does not match shape and dtype")
    if nbytes > MAX_ARRAY_BYTES:
        raise LimitError(f"array {show(name)} of {nbytes} bytes exceeds the limit of {MAX_ARRAY_BYTES}")
    return name, dt, tuple(shape), nbytes
