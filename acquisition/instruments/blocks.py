"""IEEE 488.2 definite-length arbitrary blocks, the way instruments send waveform data.

A block is ``#`` then one character *n* saying how many digits the length has,
the length in bytes as *n* decimal digits, the data, and (over a socket) the
response terminator ``\\n``: ``#3500<500 bytes>\\n``, ``#9000001000<1000 bytes>\\n``.
IEEE 488.2 (section 8.7.9) allows *n* = 1..9. Tektronix MSO 4/5/6 series
write *n* as a hexadecimal digit, so lengths of 10 to 15 digits fit
(``A``..``F``); ``hex_count=True`` reads those. ``#0`` starts an
indefinite-length block (data up to a final newline with END), which a byte
stream cannot delimit when the data may hold newlines: it is refused.

Blocks are read as blocks, never as lines: the header says how many bytes
follow, and that many are read, a chunk at a time, whatever they contain.
"""

from __future__ import annotations

from collections.abc import Callable

from nicrig.errors import NicrigError

#: Bytes handed on at a time while a block streams in.
CHUNK_BYTES = 1 << 16


class BlockError(NicrigError):
    """A response that is not the definite-length block it should be (garbage, ``#0``, bad digits)."""


class TruncatedBlock(NicrigError):
    """The block stopped arriving before its announced length (connection dropped, timeout)."""

    def __init__(self, message: str, received: int, expected: int):
        super().__init__(message)
        self.received = received
        self.expected = expected


class TransportError(NicrigError):
    """Raised by a block's ``read`` function when bytes stop coming (timeout, connection closed)."""


def digit_count(char: int, hex_count: bool = False) -> int:
    """The header's length-digit count from its second byte (``ord('9')`` -> 9; ``ord('A')`` -> 10 with hex_count)."""
    c = chr(char)
    if "1" <= c <= "9":
        return int(c)
    if hex_count and c in "ABCDEFabcdef":
        return int(c, 16)
    if c == "0":
        raise BlockError("indefinite-length block (#0): its end cannot be found in a byte stream; "
                         "ask the instrument for a definite-length block")
    raise BlockError(f"bad block header: digit count {c!r} is not 1-9" + (" or A-F" if hex_count else ""))


def parse_header(head: bytes, hex_count: bool = False) -> tuple[int, int]:
    """``(header_bytes, data_bytes)`` of the block whose header starts ``head``.

    ``head`` must hold at least the whole header (``#``, the count, the digits);
    the data may follow. Raises :class:`BlockError` for anything else.
    """
    if len(head) < 2 or head[:1] != b"#":
        raise BlockError(f"not a definite-length block: the answer starts {_preview(head)}")
    n = digit_count(head[1], hex_count)
    digits = head[2:2 + n]
    if len(digits) < n:
        raise BlockError(f"block header {_preview(head)} is cut short: {n} length digits announced")
    if not digits.isdigit():
        raise BlockError(f"bad block header {_preview(head[:2 + n])}: the length is not decimal digits")
    return 2 + n, int(digits)


def encode_block(data: bytes, hex_count: bool = False, digits: int | None = None) -> bytes:
    """``#<n><length><data>`` for ``data`` (what an instrument sends, without the terminator).

    ``digits`` pads the length to that many digits (Rigol always writes ``#9``).
    """
    length = str(len(data)).encode()
    if digits is not None:
        length = length.rjust(digits, b"0")
    n = len(length)
    if n > (15 if hex_count else 9):
        raise ValueError(f"{len(data)} bytes do not fit a definite-length block header")
    return b"#" + format(n, "X").encode() + length + data


def _preview(raw: bytes) -> str:
    return repr(raw[:24]) + ("..." if len(raw) > 24 else "")


def _exactly(read: Callable[[int], bytes], n: int) -> bytes:
    out = b""
    while len(out) < n:
        out += read(n - len(out))
    return out


def read_block(read: Callable[[int], bytes], sink: Callable[[bytes], None], *, hex_count: bool = False,
               terminator: bytes = b"\n", chunk_bytes: int = CHUNK_BYTES) -> int:
    """Read one block through ``read(n)``; return its length.

    ``read(n)`` returns 1 to ``n`` bytes as they come (like ``socket.recv``) or
    raises :class:`TransportError` when none come in time. The data goes to
    ``sink`` as it arrives, so a caller can store it while the rest is still on
    the wire. When the bytes stop coming mid-block, everything received has
    been handed to ``sink`` and :class:`TruncatedBlock` says how much arrived of
    how much. One byte is held back until the next arrives: when a block is
    cut short, its last received byte is often the terminator of a shorter
    block the instrument really sent, and it is dropped rather than stored as
    a sample.
    """
    try:
        head = _exactly(read, 2)
        if head[:1] != b"#":
            raise BlockError(f"not a definite-length block: the answer starts {_preview(head)}")
        head += _exactly(read, digit_count(head[1], hex_count))
    except TransportError as exc:
        raise TruncatedBlock(f"no block header arrived: {exc}", 0, -1) from None
    _, length = parse_header(head, hex_count)
    received = 0
    held = b""
    try:
        while received < length:
            part = read(min(chunk_bytes, length - received))
            received += len(part)
            out, held = held + part[:-1], part[-1:]
            if out:
                sink(out)
    except TransportError as exc:
        if held and held != terminator:
            sink(held)
        kept = received - (1 if held == terminator else 0)
        raise TruncatedBlock(f"block cut short: {kept:,} of {length:,} bytes arrived ({exc})", kept, length) from None
    if held:
        sink(held)
    if terminator:
        try:
            end = _exactly(read, len(terminator))
        except TransportError:
            return length  # every data byte arrived; a connection lost now fails the next command, clearly
        if end != terminator:
            raise BlockError(f"the {length}-byte block is followed by {_preview(end)}, not the terminator: "
                             "the instrument sent more data than its header announced")
    return length
