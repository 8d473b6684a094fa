"""The header nicrig puts at the start of every UDP payload it sends.

udpmon, the simulated rig and the ``ethernet`` sigrok decoder agree on it, so
a frame seen on the wire or on a bus is matched to the test packet it carries.
The rest of the payload is random bytes (seed 002 section 3.1: against
compression anywhere on the path).

Layout, network byte order, 16 bytes::

    0  u32 magic      0x4E524731 ("NRG1")
    4  u16 kind       1 stream data, 2 latency request, 3 latency response
    6  u16 flags      reserved, 0
    8  u32 seq        packet sequence number within the test
   12  u32 test_id    identifies the test run

A payload shorter than 16 bytes carries no header (seed 000 sends 18-byte
datagrams, which do carry it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

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


def make_payload(size_bytes: int, kind: Kind, seq: int, test_id: int, rng: np.random.Generator) -> bytes:
    """A UDP payload of ``size_bytes``: the header (when it fits), then random fill."""
    fill = rng.integers(0, 256, size=size_bytes, dtype=np.uint8).tobytes()
    if size_bytes < HEADER_BYTES:
        return fill
    return HEADER.pack(MAGIC, int(kind), 0, seq & 0xFFFFFFFF, test_id & 0xFFFFFFFF) + fill[HEADER_BYTES:]


def parse_header(payload: bytes) -> Header | None:
    """The header of a payload, or None when it is too short or lacks the magic."""
    if len(payload) < HEADER_BYTES:
        return None
    magic, kind, flags, seq, test_id = HEADER.unpack_from(payload)
    if magic != MAGIC:
        return None
    return Header(kind=kind, seq=seq, test_id=test_id, flags=flags)
