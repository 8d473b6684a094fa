"""The header nicrig puts at the start of every UDP payload it sends.

udpmon, the simulated rig and the ``ethernet`` sigrok decoder agree on it, so
a frame seen on the wire or on a bus is matched to the test packet it carries.
The rest of the payload is random bytes (Hughes-Jones et al. 2003, §3.1: against
compression anywhere on the path).

Layout, network byte order, 16 bytes::

    0  u32 magic      0x4E524731 ("NRG1")
    4  u16 kind       1 stream data, 2 latency request, 3 latency response
    6  u16 flags      reserved, 0
    8  u32 seq        packet sequence number within the test
   12  u32 test_id    identifies the test run

A payload shorter than 16 bytes carries no header (Pai, Rixner and Kim 2004 send 18-byte
datagrams, which do carry it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from nicrig.udpmon._uniform import uniform_bytes

MAGIC = 0x4E524731
HEADER = struct.Struct("!IHHII")
HEADER_BYTES = HEADER.size


#: A REQUEST payload carries, right after the header, u32 response_bytes
#: (network order): the size of the RESPONSE payload the client asks for. The
#: responder answers with min(response_bytes, its cap) bytes (at least the
#: header), so a request is at least :data:`REQUEST_MIN_BYTES` long; the rest
#: of it is random fill.
RESPONSE_BYTES = struct.Struct("!I")
REQUEST_MIN_BYTES = HEADER_BYTES + RESPONSE_BYTES.size


class Kind(IntEnum):
    STREAM = 1
    REQUEST = 2
    RESPONSE = 3


@dataclass(frozen=True)
class Header:
    kind: int
    seq: int
    test_id: int
    flags: int = 0


class UniformBytes:
    """Uniform random bytes from ``rng``, byte for byte what ``rng.integers(0, 256, size=n, dtype=np.uint8)``
    draws, and the generator left where that leaves it; at a fraction of its cost, for the simulated rig,
    which draws a payload per message.

    NumPy draws those bytes four at a time from the generator's 32-bit outputs (least significant byte
    first), ``ceil(n / 4)`` of them. ``_uniform.c`` takes the same outputs from the same function of the
    generator (its C interface, the ``capsule`` every NumPy bit generator has), under the generator's lock
    as ``integers`` takes them: other draws from ``rng`` may come in between.
    """

    def __init__(self, rng: np.random.Generator):
        self._rng = rng
        bits = rng.bit_generator
        self._capsule, self._lock = bits.capsule, bits.lock

    def __call__(self, n: int) -> bytes:
        """``n`` random bytes."""
        if n <= 0:
            return self._rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
        with self._lock:
            return uniform_bytes(self._capsule, n)


def make_payload(size_bytes: int, kind: Kind, seq: int, test_id: int,
                 rng: np.random.Generator | UniformBytes) -> bytes:
    """A UDP payload of ``size_bytes``: the header (when it fits), then random fill."""
    fill = rng(size_bytes) if isinstance(rng, UniformBytes) else \
        rng.integers(0, 256, size=size_bytes, dtype=np.uint8).tobytes()
    if size_bytes < HEADER_BYTES:
        return fill
    return HEADER.pack(MAGIC, int(kind), 0, seq & 0xFFFFFFFF, test_id & 0xFFFFFFFF) + fill[HEADER_BYTES:]


def _header_fields(payload: bytes) -> tuple[int, int, int, int, int] | None:
    """The header's fields in their order (magic, kind, flags, seq, test_id), or None when the payload is too
    short or lacks the magic."""
    if len(payload) < HEADER_BYTES:
        return None
    fields = HEADER.unpack_from(payload)
    return fields if fields[0] == MAGIC else None


def parse_header(payload: bytes) -> Header | None:
    """The header of a payload, or None when it is too short or lacks the magic."""
    fields = _header_fields(payload)
    if fields is None:
        return None
    _, kind, flags, seq, test_id = fields
    return Header(kind=kind, seq=seq, test_id=test_id, flags=flags)


def header_seq(payload: bytes) -> int:
    """The header's sequence number, or -1 when the payload carries no header: :func:`parse_header`'s ``seq``
    without making the :class:`Header` (a frozen dataclass, ~8,000 instructions; the simulated rig asks once
    per message)."""
    fields = _header_fields(payload)
    return -1 if fields is None else fields[3]
