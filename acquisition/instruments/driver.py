"""The driver interface every instrument implements, and the SCPI-over-PyVISA part the SCPI drivers share.

An acquisition with any instrument goes::

    inst.identify()                 # *IDN?, checked against the driver
    inst.configure(settings)        # channels (probe map), thresholds, rate, record length, trigger
    inst.arm()                      # a single acquisition
    while not inst.done(): ...      # poll until triggered and complete (the caller owns the timeout)
    info = inst.record_info()       # rate, points, trigger sample, preambles verbatim
    inst.fetch(assembler)           # pod bytes, streamed into a capture-set source
    inst.check_errors("fetching")   # the instrument's error queue must be empty

Failures raise :class:`InstrumentError` subclasses whose message names the
instrument and what to do. See ``docs/instruments.md`` ("Adding a driver").
"""

from __future__ import annotations

import re
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from nicrig.acquisition.instruments.blocks import (
    BlockError,
    TransportError,
    TruncatedBlock,
    read_block,
)
from nicrig.acquisition.instruments.probemap import PodAssembler, ProbeMap

from nicrig.errors import NicrigError

Slope = Literal["rising", "falling", "either"]


class InstrumentError(NicrigError):
    """An instrument refused, misbehaved or went away; the message names it."""


class WrongInstrument(InstrumentError):
    """``*IDN?`` names another instrument than the driver (or the configuration) expects."""


class UnsupportedSetting(InstrumentError):
    """A setting the instrument cannot do (or did differently): nothing was armed."""


class InstrumentTimeout(InstrumentError):
    """No answer, or no trigger, within the time allowed."""


class ConnectionLost(InstrumentError):
    """The connection to the instrument closed."""


@dataclass(frozen=True)
class Identity:
    manufacturer: str
    model: str
    serial: str
    firmware: str

    @property
    def text(self) -> str:
        return f"{self.manufacturer},{self.model},{self.serial},{self.firmware}"


def parse_idn(text: str) -> Identity:
    """IEEE 488.2 ``*IDN?``: ``manufacturer,model,serial,firmware`` (Tektronix may prefix the header)."""
    body = re.sub(r"^:?\*IDN\s+", "", text.strip(), flags=re.IGNORECASE)
    parts = [p.strip() for p in body.split(",")]
    if len(parts) != 4 or not parts[0] or not parts[1]:
        raise WrongInstrument(f"*IDN? answered {text.strip()[:80]!r}, not 'manufacturer,model,serial,firmware'")
    return Identity(*parts)


@dataclass(frozen=True)
class Trigger:
    """Trigger on an edge of a probe-map signal, or on the external trigger input (``signal=None``).

    ``position`` is the fraction of the record before the trigger.
    """

    signal: str | None = None
    slope: Slope = "falling"
    position: float = 0.1


@dataclass(frozen=True)
class Settings:
    probe_map: ProbeMap
    sample_rate_hz: float
    record_length: int
    trigger: Trigger = field(default_factory=Trigger)
    threshold_v: float = 1.4
    #: Points per data transfer, for instruments that read their memory in batches.
    batch_points: int = 250_000


@dataclass(frozen=True)
class RecordInfo:
    """What the instrument says about the acquisition it holds, before its data is read."""

    sample_rate_hz: float
    points: int
    trigger_sample: int
    preambles: dict[str, str]


def trigger_sample(xorigin_s: float, xincrement_s: float, xreference: float = 0.0) -> int:
    """The sample at t = 0 (the trigger), with ``time(i) = (i - xreference) * xincrement + xorigin`` (s)."""
    return round(xreference - xorigin_s / xincrement_s)


Progress = Callable[[int], None]


class Instrument(ABC):
    """One instrument recording one capture-set source."""

    #: Key in the driver registry and the ``model`` of rig configurations.
    model: ClassVar[str]

    def __init__(self, name: str, resource: str):
        self.name = name
        self.resource = resource
        self.identity: Identity | None = None
        self.settings: Settings | None = None

    @property
    def label(self) -> str:
        """How messages name it: ``send_pci (KEYSIGHT MSO-X 4104A at TCPIP0::...)``."""
        who = f"{self.identity.manufacturer} {self.identity.model}" if self.identity else self.model
        return f"{self.name} ({who} at {self.resource})"

    @abstractmethod
    def identify(self) -> Identity: ...

    @abstractmethod
    def configure(self, settings: Settings) -> None: ...

    @abstractmethod
    def arm(self) -> None: ...

    @abstractmethod
    def done(self) -> bool:
        """True once the acquisition triggered and is complete."""

    @abstractmethod
    def record_info(self) -> RecordInfo: ...

    @abstractmethod
    def fetch(self, assembler: PodAssembler, progress: Progress | None = None) -> None:
        """Stream every pod's samples into ``assembler`` (pod by pod, or batch by batch)."""

    def check_errors(self, when: str) -> None:
        """Raise :class:`InstrumentError` when the instrument reported errors (``when``: what was being done)."""

    def describe(self) -> dict[str, Any]:
        """The source's ``instrument`` attribute (preambles are added by the caller)."""
        return {"model": self.model, "resource": self.resource,
                "idn": self.identity.text if self.identity else None}

    def close(self) -> None:
        """Release the instrument (idempotent)."""


# -- SCPI over PyVISA ------------------------------------------------------------------------------------
def resource_manager() -> Any:
    """PyVISA's resource manager with the pure-Python pyvisa-py backend."""
    import pyvisa

    return pyvisa.ResourceManager("@py")


class ScpiConnection:
    """A PyVISA message-based resource opened the way instruments need it.

    ``read_termination`` is set (pyvisa-py sockets otherwise wait for the
    timeout on every answer), and binary blocks are read as blocks, by count,
    with :func:`~nicrig.acquisition.instruments.blocks.read_block`.
    """

    def __init__(self, resource: str, timeout_s: float = 5.0):
        import pyvisa

        self.resource = resource
        self._visa_errors = (pyvisa.errors.VisaIOError, pyvisa.errors.InvalidSession)
        self._suppress_end = pyvisa.constants.ResourceAttribute.suppress_end_enabled
        # viRead's "more data may follow" statuses: expected while a block streams in
        self._partial_reads = (pyvisa.constants.StatusCode.success_max_count_read,
                               pyvisa.constants.StatusCode.success_termination_character_read)
        try:
            self._rm = resource_manager()
            self._res = self._rm.open_resource(resource, read_termination="\n", write_termination="\n",
                                               timeout=int(timeout_s * 1000))
        except pyvisa.errors.VisaIOError as exc:
            raise ConnectionLost(f"cannot open {resource}: {exc.description}") from None
        except ValueError as exc:  # a malformed resource string
            raise InstrumentError(f"{resource!r} is not a VISA resource string "
                                  f"(e.g. TCPIP0::192.0.2.5::5025::SOCKET): {exc}") from None
        except OSError as exc:
            raise ConnectionLost(f"cannot open {resource}: {exc.strerror or exc}") from None

    @property
    def timeout_s(self) -> float:
        return float(self._res.timeout) / 1000

    def _failure(self, exc: Exception, doing: str) -> InstrumentError:
        import pyvisa

        if isinstance(exc, pyvisa.errors.VisaIOError) and exc.error_code == pyvisa.constants.StatusCode.error_timeout:
            if self._peer_closed():
                return ConnectionLost(f"{self.resource} closed the connection while {doing}")
            return InstrumentTimeout(f"{self.resource} did not answer within {self.timeout_s:g} s while {doing}")
        if isinstance(exc, OSError):
            return ConnectionLost(f"connection to {self.resource} failed while {doing}: {exc.strerror or exc}")
        return ConnectionLost(f"{self.resource}: {getattr(exc, 'description', exc)} while {doing}")

    def _peer_closed(self) -> bool:
        """Whether the far end of a socket resource has closed (pyvisa-py reports that as a timeout)."""
        try:
            sock = self._rm.visalib.sessions[self._res.session].interface
            return isinstance(sock, socket.socket) and sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (AttributeError, KeyError, OSError, *self._visa_errors):
            return False

    def write(self, command: str) -> None:
        try:
            self._res.write(command)
        except (*self._visa_errors, OSError) as exc:
            raise self._failure(exc, f"sending {command!r}") from None

    def query(self, command: str) -> str:
        try:
            return str(self._res.query(command)).strip()
        except (*self._visa_errors, OSError) as exc:
            raise self._failure(exc, f"waiting for the answer to {command!r}") from None
        except UnicodeDecodeError:
            raise InstrumentError(f"{self.resource} answered {command!r} with bytes that are not text") from None

    def query_block(self, command: str, sink: Callable[[bytes], None], *, hex_count: bool = False) -> int:
        """Send ``command`` and stream the definite-length block it answers into ``sink``; its length."""
        self.write(command)

        def read(n: int) -> bytes:
            # viRead returns what has arrived (up to n, or to a newline inside the binary data):
            # read_bytes() would drop the part of a chunk that came before a timeout
            try:
                with self._res.ignore_warning(*self._partial_reads):
                    data, _ = self._res.visalib.read(self._res.session, n)
            except (*self._visa_errors, OSError) as exc:
                raise TransportError(str(self._failure(exc, f"reading the answer to {command!r}"))) from None
            if not data:
                raise TransportError(f"{self.resource} sent nothing while answering {command!r}")
            return bytes(data)

        # A socket has no END: pyvisa-py then waits for the timeout and drops the bytes it holds. With END
        # "suppressed" off, viRead hands over what has come whenever the stream pauses or closes, so a
        # block cut short keeps every byte that arrived. Text answers still end at the newline.
        suppress = self._res.get_visa_attribute(self._suppress_end)
        self._res.set_visa_attribute(self._suppress_end, False)
        try:
            return read_block(read, sink, hex_count=hex_count)
        except TruncatedBlock as exc:
            raise TruncatedBlock(f"{command}: {exc}", exc.received, exc.expected) from None
        except BlockError as exc:
            raise BlockError(f"{self.resource}, {command}: {exc}") from None
        finally:
            try:
                self._res.set_visa_attribute(self._suppress_end, suppress)
            except (*self._visa_errors, OSError):
                pass  # a lost connection: the next command says so

    def close(self) -> None:
        try:
            self._res.close()
        except (*self._visa_errors, OSError):
            pass


class ScpiInstrument(Instrument):
    """What the SCPI drivers share: the connection, identification, checked settings, the error queue."""

    #: ``*IDN?`` manufacturer and model the driver accepts (regular expressions, case-insensitive).
    manufacturers: ClassVar[str]
    models: ClassVar[str]
    #: Pods (groups of 8 digital channels) the instrument has.
    pods: ClassVar[int]
    #: Whether block headers give their digit count in hex (Tektronix).
    hex_count: ClassVar[bool] = False

    #: Waveform data formats the driver reads (``format`` of a rig configuration).
    data_formats: ClassVar[tuple[str, ...]] = ("BYTE",)

    def __init__(self, name: str, resource: str, *, timeout_s: float = 5.0, connection: ScpiConnection | None = None,
                 data_format: str = "BYTE"):
        if data_format not in self.data_formats:
            raise UnsupportedSetting(f"{name}: the {self.model} driver reads {' or '.join(self.data_formats)} data, "
                                     f"not {data_format}")
        super().__init__(name, resource)
        self.data_format = data_format
        self.conn = connection or ScpiConnection(resource, timeout_s)
        self.stale_errors: list[str] = []
        #: What record_info() read from the preambles of the last acquisition.
        self.info: RecordInfo | None = None

    # -- the vendor's part ----------------------------------------------------------------------
    @abstractmethod
    def read_errors(self) -> list[str]:
        """Drain the instrument's error queue: ``['-222,"Data out of range"', ...]`` (empty when clear)."""

    @abstractmethod
    def setup_commands(self, settings: Settings) -> list[str]:
        """The commands that configure channels, thresholds, rate, record length and trigger."""

    @abstractmethod
    def actual_rate(self) -> float:
        """The sample rate the instrument will use, read back after configuring (Hz)."""

    # -- shared ---------------------------------------------------------------------------------
    def identify(self) -> Identity:
        ident = parse_idn(self.conn.query("*IDN?"))
        if not (re.search(self.manufacturers, ident.manufacturer, re.IGNORECASE)
                and re.search(self.models, ident.model, re.IGNORECASE)):
            raise WrongInstrument(
                f"{self.name}: {self.resource} is a {ident.manufacturer} {ident.model} ('*IDN?' = {ident.text!r}), "
                f"not an instrument the {self.model} driver drives; check the resource string and the model")
        self.identity = ident
        return ident

    def check_errors(self, when: str) -> None:
        errors = self.read_errors()
        if errors:
            raise InstrumentError(f"{self.label} reported {'; '.join(errors)} {when}")

    def command(self, command: str) -> None:
        """Send a setting and make sure the instrument took it (its error queue stays empty)."""
        self.conn.write(command)
        errors = self.read_errors()
        if errors:
            raise UnsupportedSetting(f"{self.label} refused {command!r}: {'; '.join(errors)}")

    def configure(self, settings: Settings) -> None:
        for pod in settings.probe_map.pods:
            if pod > self.pods:
                raise UnsupportedSetting(f"{self.label}: probe map {settings.probe_map.name!r} uses pod {pod}; "
                                         f"a {self.model} has {self.pods}")
        self.stale_errors = self.read_errors()  # left by earlier sessions: kept in the notes, not ours
        for cmd in self.setup_commands(settings):
            self.command(cmd)
        rate = self.actual_rate()
        if abs(rate - settings.sample_rate_hz) > 0.01 * settings.sample_rate_hz:
            raise UnsupportedSetting(
                f"{self.label} samples at {rate / 1e6:g} MHz, not the {settings.sample_rate_hz / 1e6:g} MHz asked: "
                f"give a sample rate it has (e.g. {rate:g})")
        self.settings = settings

    def describe(self) -> dict[str, Any]:
        return super().describe() | ({"stale_errors": self.stale_errors} if self.stale_errors else {})

    def drain_error_queue(self, query: str) -> list[str]:
        """Ask ``query`` (``:SYSTem:ERRor?``) until it answers code 0; the errors it gave, oldest first."""
        errors = []
        for _ in range(64):  # queues hold a few dozen entries at most
            answer = self.conn.query(query)
            if error_code(answer) == 0:
                break
            errors.append(answer)
        return errors

    def fetch_in_batches(self, assembler: PodAssembler, progress: Progress | None, command: str,
                         select: Callable[[int, int, int], None]) -> None:
        """Read the record ``batch_points`` at a time, every pod per batch: ``select(pod, first, last)`` (1-based,
        inclusive) prepares the transfer that ``command`` then answers with a block."""
        info = self.record_info() if self.info is None else self.info
        for a, b in batches(info.points, self.settings.batch_points):  # type: ignore[union-attr]
            for pod in assembler.pm.pods:
                select(pod, a, b)
                self.read_pod(command, pod, b - a + 1, assembler, progress)

    def read_pod(self, command: str, pod: int, points: int, assembler: PodAssembler, progress: Progress | None,
                 convert: Callable[[bytes], bytes] = bytes, bytes_per_point: int = 1) -> None:
        """Stream the block ``command`` answers into ``assembler`` as ``pod``'s next ``points`` samples."""
        def sink(data: bytes) -> None:
            assembler.add(pod, convert(data))
            if progress:
                progress(len(data) // bytes_per_point)

        length = self.conn.query_block(command, sink, hex_count=self.hex_count)
        if length != points * bytes_per_point:
            raise InstrumentError(f"{self.label}: {command} sent {length} bytes for pod {pod}, "
                                  f"not the {points * bytes_per_point} its preamble announced")

    def close(self) -> None:
        self.conn.close()


# -- what the SCPI dialects share ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Preamble:
    """The 10-field waveform preamble of Keysight and Rigol: format, type, points, count, x/y scaling."""

    format: int
    type: int
    points: int
    count: int
    xincrement: float
    xorigin: float
    xreference: float
    yincrement: float
    yorigin: float
    yreference: float

    @property
    def trigger_sample(self) -> int:
        return trigger_sample(self.xorigin, self.xincrement, self.xreference)


def parse_preamble(text: str) -> Preamble:
    """``:WAVeform:PREamble?``'s ten comma-separated numbers, checked."""
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 10:
        raise InstrumentError(f"the preamble has {len(parts)} fields, not 10: {text[:120]!r}")
    try:
        ints = [int(float(parts[i])) for i in (0, 1, 2, 3)]
        floats = [float(p) for p in parts[4:]]
    except ValueError:
        raise InstrumentError(f"the preamble is not ten numbers: {text[:120]!r}") from None
    p = Preamble(*ints, *floats)  # type: ignore[arg-type]
    if p.points < 0 or not p.xincrement > 0:
        raise InstrumentError(f"the preamble has {p.points} points {p.xincrement} s apart: {text[:120]!r}")
    return p


def error_code(answer: str) -> int:
    """The code of an error-queue answer ``-113,"Undefined header"`` (0 = no error)."""
    m = re.match(r'^\s*(?::?\S+\s+)?([+-]?\d+)\s*,', answer)
    if not m:
        raise InstrumentError(f"the error queue answered {answer[:80]!r}, not CODE,\"MESSAGE\"")
    return int(m[1])


def batches(points: int, size: int) -> list[tuple[int, int]]:
    """1-based inclusive ``(start, stop)`` ranges of at most ``size`` points covering ``1..points``."""
    return [(a, min(points, a + size - 1)) for a in range(1, points + 1, max(1, size))]
