"""The octets of the frames a ``gmii,ethernet`` stack decoded, read back from the source's rows.

The ``ethernet`` table says where each frame lies (``ss``: the clock its burst starts on, ``es``:
the first clock after it, with EN low); its octets are the data lines at the clocks in between
(every row in state mode, each rising edge of CLK in timing mode, as the gmii decoder clocks),
after the start frame delimiter (0xD5) that ends the preamble: destination address through FCS,
``length`` octets. ``nicrig export --format pcapng`` writes them (the ethernet decoder's own pcap
output, ``sigrok-cli -B ethernet=pcap``, gives the same octets without the FCS, at sigrok's
speed; ``tests/test_wire.py`` holds the two equal).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from nicrig.acquisition.capture import Source
from nicrig.decoders import spec
from nicrig.errors import FormatError

SFD = 0xD5
#: Most rows read at once.
BLOCK_ROWS = 1 << 22


def _bit(rows: np.ndarray, bit: int) -> np.ndarray:
    return (rows[:, bit >> 3] >> (bit & 7)) & 1


def frames(source: Source, stack: spec.Stack, table: np.ndarray) -> Iterator[tuple[int, bytes]]:
    """``(row of table, the frame's octets with FCS)`` for every row of ``table`` (the stack's ethernet table,
    rows of its direction in ``ss`` order)."""
    gmii = stack.calls[0]
    en = source.channel_index(gmii.channels["en"])
    data = [source.channel_index(gmii.channels[f"d{i}"]) for i in range(8)]
    clk = source.channel_index(gmii.channels["clk"]) if "clk" in gmii.channels and \
        gmii.options.get("clock", "auto") in ("auto", "clk") else None
    k = 0
    while k < len(table):
        first = max(int(table["ss"][k]) - 1, 0)
        stop = k + 1
        while stop < len(table) and int(table["es"][stop]) - first <= BLOCK_ROWS:
            stop += 1
        last = int(table["es"][stop - 1])
        rows = source.read_packed(first, last)
        clocked = np.ones(len(rows), bool) if clk is None else \
            np.concatenate([[False], (_bit(rows, clk)[1:] == 1) & (_bit(rows, clk)[:-1] == 0)])
        valid = clocked & (_bit(rows, en) == 1)
        octet = np.zeros(len(rows), np.uint8)
        for weight, b in enumerate(data):
            octet |= _bit(rows, b).astype(np.uint8) << weight
        count = np.concatenate([[0], np.cumsum(valid)])
        octets = octet[valid]
        for i in range(k, stop):
            ss, es = int(table["ss"][i]) - first, int(table["es"][i]) - first
            burst = octets[count[ss]:count[es]]
            sfd = np.flatnonzero(burst == SFD)
            frame = burst[sfd[0] + 1:] if len(sfd) else burst[:0]
            if len(frame) != int(table["length"][i]):
                raise FormatError(f"{source.path}: source {source.name!r}: the frame at sample {ss + first} has "
                                  f"{len(frame)} octets after its SFD, its decoded table says {int(table['length'][i])}"
                                  f": decode it again (nicrig decode --force)")
            yield i, frame.tobytes()
        k = stop
