"""The simulated instrument's SCPI server: real TCP, one vendor dialect, fault injection.

Like a LAN instrument's raw SCPI socket (port 5025), it reads program
messages terminated by ``\\n``, parses each whole, then executes its
``;``-separated commands against the
:class:`~nicrig.acquisition.instruments.sim.scope.SimScope` and answers each
query; several answers to one message are joined by ``;``. Binary answers are
definite-length blocks followed by ``\\n``.

Errors are queued, as IEEE 488.2 (section 6.1.6) and SCPI (volume 2, chapter
21) say. A message is parsed whole before any of it runs: an unknown header
(-113), program data that is no IEEE 488.2 data element (-102), a non-finite
number (``1e999``, ``NAN``, ``INFinity``: -222) or a message longer than
:data:`MAX_MESSAGE` (-223, the rest of the line up to its newline discarded)
queues the error and nothing of that message executes. A bad parameter found
while executing queues its error and the message's other commands still run.
Queries for waveform data that the instrument does not hold answer promptly
(an empty block) besides queueing the error, so a client never waits for its
timeout. A sequential command (Keysight ``:DIGitize``) holds the connection's
later commands until the acquisition is over, as the vendors' guides say.
Several clients may connect; commands run one at a time. The server is bounded as
the udpmon daemon is: at most :data:`MAX_CONNECTIONS` clients (a thread each; one more
is closed at once), each disconnected after :data:`IDLE_TIMEOUT_S` of silence, a listen
backlog of :data:`LISTEN_BACKLOG`, and an error queue of fixed length that keeps the
oldest errors (:meth:`SimScope.push_error`).

Faults (``--fault``, repeatable), for testing what the acquiring side does:

==========================  ===================================================================
``slow=S``                  every answer is ``S`` seconds late
``slow=S@N``                only the N-th data block is ``S`` seconds late
``drop-mid-block@N``        the N-th data block stops half-way and the connection is closed
``truncated-block@N``       the N-th data block holds half the bytes its header announces
``garbage@N``               the N-th data block is replaced by bytes that are no block
``error=CODE,"MESSAGE"``    the instrument queues this error when it is armed
==========================  ===================================================================

``@N`` counts data blocks (waveform data answers) from 1 over the server's life.
"""

from __future__ import annotations

import math
import re
import socket
import socketserver
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

from nicrig.acquisition.instruments.blocks import encode_block
from nicrig.acquisition.instruments.sim.scope import ESR_OPC, ScpiError, SimScope

from nicrig.errors import UsageError

#: Longest program message accepted (bytes); longer ones queue -223 and nothing of them runs.
MAX_MESSAGE = 64 * 1024
#: Clients served at once (a thread each); one more is closed as soon as it is accepted.
MAX_CONNECTIONS = 16
#: A client silent this long (no program message) is disconnected, its thread ended.
IDLE_TIMEOUT_S = 120.0
#: Connections the kernel holds for the server to accept (listen(2)'s backlog): a burst of clients connects
#: at once instead of waiting for the SYN to be sent again (~1 s).
LISTEN_BACKLOG = 128
GARBAGE = b"\x15\xfe NOT A BLOCK: @!\x00\x07garbage\xff"


class Block(bytes):
    """Waveform data to be sent as a definite-length block (a data-block answer, counted for faults)."""


@dataclass(frozen=True)
class AfterAcquisition:
    """An answer due only when the running acquisition is over (a sequential command, an OPC wait).

    The server waits for it without holding the instrument, so other clients
    are served meanwhile; the connection's own later commands wait.
    """

    answer: str | bytes | None = None


Answer = str | bytes | AfterAcquisition | None
Handler = Callable[[bool, str, tuple[int, ...]], Answer]


@dataclass(frozen=True)
class Unit:
    """One parsed program message unit: its handler, whether it is a query, its data and header suffixes."""

    header: str
    handler: Handler
    query: bool
    arg: str
    nums: tuple[int, ...]


# -- commands -----------------------------------------------------------------------------------------
def mnemonic_regex(pattern: str) -> re.Pattern[str]:
    """A header regex from SCPI notation: ``:WAVeform:SOURce``, ``:POD#:THReshold``, ``:SYSTem:ERRor[:NEXT]``.

    Upper-case letters are the short form, the whole word the long form; either
    matches, in any case. ``#`` is a numeric suffix (captured; may be omitted,
    meaning 1); ``[...]`` is an optional node. The leading ``:`` is optional.
    """
    out = []
    for optional, node in re.findall(r"(\[?):?([^:\[\]]+)\]?", pattern):
        if node.startswith("*"):
            out.append(re.escape(node.upper()))
            continue
        suffix = node.endswith("#")
        word = node.rstrip("#")
        short = "".join(ch for ch in word if not ch.islower())
        alt = f"(?:{re.escape(word.upper())}|{re.escape(short.upper())})" if short != word else re.escape(word.upper())
        piece = ":" + alt + (r"(\d*)" if suffix else "")
        out.append(f"(?:{piece})?" if optional else piece)
    regex = "".join(out)
    if regex.startswith(":"):
        regex = ":?" + regex[1:]
    return re.compile(f"^{regex}$")


def split_outside_quotes(text: str, separator: str) -> list[str]:
    """``text`` split at ``separator`` where it is not inside a quoted string; the parts stripped."""
    parts, cur, quote = [], [], ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch == separator:
            parts.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur).strip())
    return parts


def split_units(message: str) -> list[str]:
    """The ``;``-separated commands of a program message (strings in quotes kept whole)."""
    return [u for u in split_outside_quotes(message, ";") if u]


_NUMBER = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)\s*([A-Za-z]*)\s*$")
_SUFFIX = {"": 1.0, "V": 1.0, "MV": 1e-3, "S": 1.0, "MS": 1e-3, "US": 1e-6, "NS": 1e-9, "PS": 1e-12,
           "HZ": 1.0, "KHZ": 1e3, "MHZ": 1e6, "GHZ": 1e9, "PCT": 1.0}


_NON_FINITE = re.compile(r"^[+-]?(?:INF|INFINITY|NINF|NINFINITY|NAN)$", re.IGNORECASE)
_CHARACTER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_STRING = re.compile(r"""^(?:"(?:[^"]|"")*"|'(?:[^']|'')*')$""")
_NON_DECIMAL = re.compile(r"^#(?:[Hh][0-9A-Fa-f]+|[Qq][0-7]+|[Bb][01]+)$")


def parse_number(arg: str) -> float:
    """A SCPI decimal numeric parameter with an optional unit suffix (``1.5V``, ``100E-6``, ``250MHZ``).

    Non-finite values (``1e999``, SCPI's ``INFinity``/``NAN``) are out of every
    range: -222.
    """
    if _NON_FINITE.match(arg.strip()):
        raise ScpiError(-222, "Data out of range")
    m = _NUMBER.match(arg)
    if not m:
        raise ScpiError(-104, "Data type error")
    scale = _SUFFIX.get(m[2].upper())
    if scale is None:
        raise ScpiError(-131, "Invalid suffix")
    value = float(m[1]) * scale
    if not math.isfinite(value):
        raise ScpiError(-222, "Data out of range")
    return value


def check_data(arg: str) -> None:
    """Parse-time check of a unit's program data (IEEE 488.2 section 7.7), before anything of the message runs.

    Each element must be decimal numeric data (with an optional suffix),
    character data, a string or non-decimal numeric data; a number that is
    not finite is out of range (-222), anything else a syntax error (-102).
    """
    if not arg.strip():
        return
    for element in split_outside_quotes(arg, ","):
        if _NON_FINITE.match(element):
            raise ScpiError(-222, "Data out of range")
        number = _NUMBER.match(element)
        if number:
            if not math.isfinite(float(number[1])):
                raise ScpiError(-222, "Data out of range")
            continue
        if not (_CHARACTER.match(element) or _STRING.match(element) or _NON_DECIMAL.match(element)):
            raise ScpiError(-102, "Syntax error")


def parse_choice(arg: str, choices: Sequence[str]) -> str:
    """A SCPI character parameter in short or long form, returned as the choice's long form."""
    a = arg.strip().upper()
    for c in choices:
        short = "".join(ch for ch in c if not ch.islower()).upper()
        if a in (c.upper(), short):
            return c
    raise ScpiError(-224, "Illegal parameter value")


def choice(*choices: str) -> Callable[[str], str]:
    """A parser of one of ``choices`` (SCPI character data, short or long form)."""
    return lambda arg: parse_choice(arg, choices)


def short_form(value: object) -> str:
    """How instruments answer character data: the short form, upper case (``MSBFirst`` -> ``MSBF``)."""
    return "".join(ch for ch in str(value) if not ch.islower()).upper()


def whole(arg: str) -> int:
    return int(parse_number(arg))


def on_off(value: object) -> str:
    return "1" if value else "0"


def parse_bool(arg: str) -> bool:
    a = arg.strip().upper()
    if a in ("ON", "1"):
        return True
    if a in ("OFF", "0"):
        return False
    raise ScpiError(-224, "Illegal parameter value")


class Dialect:
    """A vendor's SCPI command set over one :class:`SimScope`; subclasses list their commands."""

    model: ClassVar[str]
    idn: ClassVar[str]
    hex_count: ClassVar[bool] = False
    block_digits: ClassVar[int | None] = None
    pods: ClassVar[int]

    def __init__(self, scope: SimScope):
        self.scope = scope
        for pod in scope.pm.pods:
            if pod > self.pods:
                raise UsageError(f"probe map {scope.pm.name!r} uses pod {pod}; {self.model} has {self.pods}")
        self._table = [(mnemonic_regex(p), h) for p, h in self.commands()]

    def commands(self) -> list[tuple[str, Handler]]:
        """The vendor's commands; :meth:`common` holds the IEEE 488.2 ones every instrument has."""
        raise NotImplementedError

    def common(self) -> list[tuple[str, Handler]]:
        return [("*IDN", self._idn), ("*RST", self._rst), ("*CLS", self._cls), ("*OPC", self._opc),
                ("*ESR", self._esr)]

    def _idn(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        query_only(query)
        return self.idn

    def _rst(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        self.reset()
        return None

    def reset(self) -> None:
        """``*RST``: the instrument's default settings."""
        s = self.scope
        s.stop()
        s.decimation, s.points, s.pre_fraction = 1, 1000, 0.1
        s.thresholds.clear()

    def _cls(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        """``*CLS``: the error queue and the Standard Event Status Register cleared (IEEE 488.2 section 10.3)."""
        self.scope.errors.clear()
        self.scope.esr = 0
        self.scope.triggered_flag = False
        return None

    #: Whether an acquisition counts as a pending operation for ``*OPC``/``*OPC?`` (Tektronix: ``ACQuire:STATE
    #: ON`` with ``STOPAfter SEQuence`` is an OPC-generating command; InfiniiVision's ``:SINGle`` is not).
    opc_waits_for_acquisition: ClassVar[bool] = False

    def _opc(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        """``*OPC?`` answers 1 when pending operations are done; ``*OPC`` then sets the ESR's OPC bit
        (IEEE 488.2 §10.18)."""
        pending = self.opc_waits_for_acquisition and self.scope.update() == "armed"
        if query:
            return AfterAcquisition("1") if pending else "1"
        if pending:
            self.scope.opc_requested = True
        else:
            self.scope.esr |= ESR_OPC
        return None

    def _esr(self, query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
        """``*ESR?``: the Standard Event Status Register, cleared by reading (IEEE 488.2 section 11.5.1)."""
        query_only(query)
        self.scope.update()
        value, self.scope.esr = self.scope.esr, 0
        return self.format_esr(value)

    def format_esr(self, value: int) -> str:
        return str(value)

    def setting(self, attr: str, parse: Callable[[str], object], show: Callable[[object], str] = str) -> Handler:
        """A handler that sets ``self.<attr>`` from its argument and answers the query with it."""
        def handle(query: bool, arg: str, nums: tuple[int, ...]) -> Answer:
            if query:
                return show(getattr(self, attr))
            setattr(self, attr, parse(arg))
            return None
        return handle

    def system_error(self, zero: str) -> Answer:
        """``:SYSTem:ERRor?``: the oldest queued error as ``CODE,"MESSAGE"``, or ``<zero>,"No error"``."""
        if self.scope.errors:
            code, message = self.scope.errors.popleft()
            return f'{code:+d},"{message}"' if zero.startswith("+") else f'{code},"{message}"'
        return f'{zero},"No error"'

    def parse(self, text: str) -> Unit:
        """One program message unit, parsed: its handler and data checked (IEEE 488.2 section 7), nothing run."""
        header, _, arg = text.partition(" ")
        query = header.endswith("?")
        key = header.rstrip("?").upper()
        for regex, handler in self._table:
            m = regex.match(key)
            if m:
                check_data(arg)
                return Unit(key, handler, query, arg.strip(), tuple(int(g) if g else 1 for g in m.groups()))
        raise ScpiError(-113, "Undefined header")

    def run(self, unit: Unit) -> Answer:
        """Run one parsed command; a query's answer, or None. Errors are queued, never answered."""
        try:
            return unit.handler(unit.query, unit.arg, unit.nums)
        except ScpiError as exc:
            self.scope.push_error(exc.code, exc.message)
            return None

    def record_geometry(self) -> tuple[int, float, float]:
        """The last record's ``(points, xincrement_s, xorigin_s)`` for a preamble; zeros, the error queued, without one.

        Zero points and a zero x increment are how InfiniiVision says "no data
        has been acquired"; the answer comes at once, so no client waits.
        """
        try:
            rec = self.scope.require_record()
        except ScpiError as exc:
            self.scope.push_error(exc.code, exc.message)
            return 0, 0.0, 0.0
        return rec.points, rec.xincrement_s, rec.xorigin_s

    def no_data(self, exc: ScpiError) -> Block:
        """What a waveform-data query answers when there is no data to send: the error queued, an empty block.

        An empty answer instead of none keeps a client that asked from waiting
        for its timeout (InfiniiVision: "if the value is zero then no data has
        been acquired").
        """
        self.scope.push_error(exc.code, exc.message)
        return Block(b"")


def query_only(query: bool) -> None:
    """Refuse the command form of a query-only header."""
    if not query:
        raise ScpiError(-113, "Undefined header")


# -- faults ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Fault:
    kind: str  # slow, drop-mid-block, truncated-block, garbage, error
    at_block: int | None = None
    seconds: float = 0.0
    code: int = 0
    message: str = ""


FAULT_KINDS = ("slow", "drop-mid-block", "truncated-block", "garbage", "error")


def parse_fault(text: str) -> Fault:
    """``slow=0.5``, ``slow=3@2``, ``drop-mid-block@2``, ``truncated-block``, ``garbage@1``, ``error=-350,"Queue overflow"``."""
    m = re.fullmatch(r"([a-z-]+)(?:=(.*?))?(?:@(\d+))?", text.strip())
    if not m or m[1] not in FAULT_KINDS:
        raise UsageError(f"fault {text!r}: use one of {', '.join(FAULT_KINDS)} (see nicrig instrument sim --help)")
    kind, value, at = m[1], m[2], int(m[3]) if m[3] else None
    if at is not None and at < 1:
        raise UsageError(f"fault {text!r}: @N counts data blocks from 1")
    if kind == "slow":
        try:
            seconds = float(value or "")
        except ValueError:
            raise UsageError(f"fault {text!r}: slow=SECONDS") from None
        if not 0 <= seconds <= 3600:
            raise UsageError(f"fault {text!r}: 0 to 3600 seconds")
        return Fault(kind, at, seconds=seconds)
    if kind == "error":
        em = re.fullmatch(r'\s*([+-]?\d+)\s*,\s*"([^"]*)"\s*', value or "")
        if not em or at is not None:
            raise UsageError(f'fault {text!r}: error=CODE,"MESSAGE" (queued when the instrument is armed)')
        return Fault(kind, code=int(em[1]), message=em[2])
    if value:
        raise UsageError(f"fault {text!r}: {kind} takes no value")
    return Fault(kind, at if at is not None else 1)


# -- the server ------------------------------------------------------------------------------------------
class _Connection(socketserver.StreamRequestHandler):
    server: SimServer

    def setup(self) -> None:
        self.timeout = self.server.idle_timeout_s  # reads and writes of a silent client give up: its thread ends
        super().setup()

    def handle(self) -> None:
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while not self.server.closing:
            try:
                line = self.rfile.readline(MAX_MESSAGE + 1)
            except OSError:
                return
            if not line:
                return
            if not line.endswith(b"\n"):
                if not self._discard_rest_of_line():
                    return
                self.server.dialect.scope.push_error(-223, "Too much data")
                continue
            answers = self.server.run_message(line.decode("latin-1").strip())
            if answers and not self._send(answers):
                return

    def _discard_rest_of_line(self) -> bool:
        """Drop an overlong message up to its newline; False when the connection ended first."""
        while True:
            try:
                chunk = self.rfile.readline(MAX_MESSAGE)
            except OSError:
                return False
            if not chunk:
                return False
            if chunk.endswith(b"\n"):
                return True

    def _send(self, answers: list[str | bytes]) -> bool:
        """Send the answers of one message; False when a fault closed the connection."""
        srv = self.server
        parts: list[bytes] = []
        for a in answers:
            if isinstance(a, Block):
                fault = srv.block_fault()
                if fault is not None and fault.kind == "slow":
                    time.sleep(fault.seconds)
                elif fault is not None and fault.kind != "slow":
                    return self._send_faulty(parts, bytes(a), fault)
                parts.append(encode_block(bytes(a), srv.dialect.hex_count, srv.dialect.block_digits))
            else:
                parts.append(str(a).encode("latin-1"))
        if srv.every_answer_delay:
            time.sleep(srv.every_answer_delay)
        try:
            self.wfile.write(b";".join(parts) + b"\n")
            self.wfile.flush()
        except OSError:
            return False
        return True

    def _send_faulty(self, before: list[bytes], data: bytes, fault: Fault) -> bool:
        d = self.server.dialect
        block = encode_block(data, d.hex_count, d.block_digits)
        head = len(block) - len(data)
        prefix = b";".join(before) + (b";" if before else b"")
        try:
            if fault.kind == "garbage":
                self.wfile.write(prefix + GARBAGE + b"\n")
            elif fault.kind == "truncated-block":
                self.wfile.write(prefix + block[:head + len(data) // 2] + b"\n")
            else:  # drop-mid-block
                self.wfile.write(prefix + block[:head + len(data) // 2])
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                return False
            self.wfile.flush()
        except OSError:
            return False
        return True


class SimServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    """A simulated instrument listening on ``host:port`` (0 = a free port); see the module docstring."""

    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = LISTEN_BACKLOG

    def __init__(self, dialect: Dialect, host: str = "127.0.0.1", port: int = 0, faults: Sequence[Fault] = (), *,
                 max_connections: int = MAX_CONNECTIONS, idle_timeout_s: float = IDLE_TIMEOUT_S):
        if max_connections < 1 or not idle_timeout_s > 0:
            raise UsageError("the simulated instrument needs room for a client and a positive idle timeout")
        self.max_connections = max_connections
        self.idle_timeout_s = idle_timeout_s
        self.dialect = dialect
        self.faults = list(faults)
        self.closing = False
        self.blocks_sent = 0
        self.every_answer_delay = sum(f.seconds for f in faults if f.kind == "slow" and f.at_block is None)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._open: set[socket.socket] = set()
        dialect.scope.arm_errors = [(f.code, f.message) for f in faults if f.kind == "error"]
        try:
            super().__init__((host, port), _Connection)
        except OSError as exc:
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)

    @property
    def resource(self) -> str:
        """The VISA resource string that reaches this instrument."""
        host, port = self.address
        return f"TCPIP0::{host}::{port}::SOCKET"

    @property
    def clients(self) -> int:
        """Connections being served now; one that ended counts until its thread has let it go."""
        with self._lock:
            return len(self._open)

    def run_message(self, message: str) -> list[str | bytes]:
        """Parse ``message`` whole, then run it; its answers. A parse error queues and runs nothing."""
        d = self.dialect
        with d.scope.lock:
            try:
                units = [d.parse(u) for u in split_units(message)]
            except ScpiError as exc:
                d.scope.push_error(exc.code, exc.message)
                return []
        answers: list[str | bytes] = []
        for unit in units:
            with d.scope.lock:
                answer = d.run(unit)
            if isinstance(answer, AfterAcquisition):
                self.wait_for_acquisition()
                answer = answer.answer
            if answer is not None:
                answers.append(answer)
        return answers

    def wait_for_acquisition(self) -> None:
        """Until the armed acquisition is over (or the server closes): a sequential command's wait."""
        while not self.closing and self.dialect.scope.update() == "armed":
            time.sleep(0.005)

    def block_fault(self) -> Fault | None:
        """Count a data block; the fault, if any, that applies to it."""
        with self._lock:
            self.blocks_sent += 1
            n = self.blocks_sent
        return next((f for f in self.faults if f.at_block == n and f.kind != "error"), None)

    def start(self) -> SimServer:
        """Serve in a background thread (tests, ``nicrig acquire`` demos); :meth:`close` stops it."""
        self._thread = threading.Thread(target=self.serve_forever, name="nicrig-siminstr", daemon=True)
        self._thread.start()
        return self

    def process_request(self, request, client_address):  # type: ignore[no-untyped-def]
        with self._lock:
            full = len(self._open) >= self.max_connections
            if not full:
                self._open.add(request)
        if full:  # no thread for it: closed at once, the clients being served go on
            super().shutdown_request(request)
            return
        super().process_request(request, client_address)

    def shutdown_request(self, request):  # type: ignore[no-untyped-def]
        with self._lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close(self) -> None:
        """Stop listening and end every connection."""
        self.closing = True
        if self._thread is not None:
            self.shutdown()
            self._thread.join(5)
        self.server_close()
        with self._lock:
            for sock in list(self._open):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def __enter__(self) -> SimServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
