"""GMII signals (IEEE 802.3 clause 35) of scheduled Ethernet frames, as a state-mode probe sees them.

The probe sits at host A's GMII: the TX lines carry frames A->B, the RX lines frames
B->A. One sample per 125 MHz GTX_CLK / RX_CLK cycle (8 ns); the two clocks are taken as
one time base, clock index 0 at the start of the capture. Each clock carries one octet,
TXD<0> / RXD<0> its least significant bit, which is the first bit on the wire (35.2.2.4,
35.2.2.7). TX_EN / RX_DV are high from the first preamble octet through the last FCS
octet (35.2.2.3, 35.2.2.6); between frames they are low and the data lines are 0x00,
"normal inter-frame" (Tables 35-1, 35-2). TX_ER / RX_ER are high only on the octets a
frame's ``error_at`` names: "transmit error propagation" / "data reception error"
(35.2.2.5, 35.2.2.8).

Samples are packed as :func:`nicrig.acquisition.capture.pack_bits` packs them (channel
``k`` is bit ``k % 8`` of byte ``k // 8``), 3 bytes per sample for :data:`CHANNELS`.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import chain, repeat

import numpy as np
from nicrig.acquisition.sim._gmii_pack import pack
from nicrig.acquisition.sim.ethernet import (
    ETHERTYPE_IPV4,
    ETHERTYPE_VLAN,
    IFG_BYTES,
    IPV4_HEADER_BYTES,
    MAC_HEADER_BYTES,
    PREAMBLE_SFD,
    VLAN_TAG_BYTES,
    Frame,
    fcs_ok,
)

#: GTX_CLK / RX_CLK period at 1000 Mb/s (125 MHz), one sample of :meth:`GmiiRenderer.render`.
CLOCK_PERIOD_PS = 8000
#: Clocks from the first preamble octet to the first destination-address octet.
PREAMBLE_CLOCKS = len(PREAMBLE_SFD)
#: The minimum inter-frame gap (802.3 clause 4.4.2) in GMII clocks, one octet each.
IFG_CLOCKS = IFG_BYTES

CHANNELS: tuple[str, ...] = (
    "TX_EN", "TX_ER", *(f"TXD[{i}]" for i in range(8)),
    "RX_DV", "RX_ER", *(f"RXD[{i}]" for i in range(8)),
)
ROLES = {"tx_en": "TX_EN", "tx_er": "TX_ER", "txd": "TXD", "rx_dv": "RX_DV", "rx_er": "RX_ER", "rxd": "RXD"}
UNITSIZE = 3

#: One row per frame of :meth:`GmiiRenderer.truth`. ``ss``/``es``: clock (8 ns) of the first
#: preamble octet / the clock after the last FCS octet. ``length``: bytes, destination .. FCS.
#: ``ethertype``: the outer Length/Type (0x8100 for a VLAN tag); ``vlan_id``: -1 if untagged;
#: ``inner_ethertype``: the Type after the tag, equal to ``ethertype`` if untagged.
#: ``seq``, ``pause_quanta``: as in :class:`Frame`, -1 if none. ``ip_fragment_offset``: the
#: IPv4 field, in units of 8 bytes as in Wireshark's ``ip.frag_offset``; -1 if not IPv4.
#: ``error_octets``: how many octets of the frame had TX_ER / RX_ER asserted.
FRAME_TRUTH_DTYPE = np.dtype([
    ("ss", np.int64), ("es", np.int64), ("direction", "S2"), ("length", np.int32),
    ("dst", "S17"), ("src", "S17"), ("ethertype", np.int32), ("vlan_id", np.int32),
    ("inner_ethertype", np.int32), ("kind", "S8"), ("seq", np.int64), ("pause_quanta", np.int32),
    ("fcs_ok", np.bool_), ("ip_fragment_offset", np.int32), ("error_octets", np.int32),
])


class _Lane:
    """One direction of the interface: its frames in start order, checked, indexed for rendering."""

    def __init__(self, direction: str, schedule: Sequence[tuple[int, Frame]]):
        self.direction = direction
        starts = np.fromiter((operator.index(s) for s, _ in schedule), dtype=np.int64, count=len(schedule))
        order = np.argsort(starts, kind="stable")
        self.frames = [schedule[i][1] for i in order]
        self.starts = starts[order]
        lengths = np.fromiter((len(f.data) for f in self.frames), dtype=np.int64, count=len(self.frames))
        self.ends = self.starts + PREAMBLE_CLOCKS + lengths
        self._check()
        with_errors = [(s, f.error_at) for s, f in zip(self.starts.tolist(), self.frames) if f.error_at]
        self.error_clocks = np.sort(np.fromiter(
            chain.from_iterable((s + PREAMBLE_CLOCKS + i for i in err) for s, err in with_errors),
            dtype=np.int64))

    def _check(self) -> None:
        if len(self.starts) and self.starts[0] < 0:
            raise ValueError(f"{self.direction}: frame starts at clock {self.starts[0]}, before clock 0")
        gaps = self.starts[1:] - self.ends[:-1]
        bad = np.flatnonzero(gaps < IFG_CLOCKS)
        if len(bad):
            i = int(bad[0])
            what = "overlaps" if gaps[i] < 0 else f"follows after only {gaps[i]} idle clocks (< {IFG_CLOCKS}) of"
            raise ValueError(f"{self.direction}: the frame at clock {self.starts[i + 1]} {what} "
                             f"the frame at clocks [{self.starts[i]}, {self.ends[i]})")

    def lines(self, c0: int, c1: int) -> tuple[np.ndarray, np.ndarray] | None:
        """Data octets and enable (0/1) for clocks [c0, c1), ``c1 - c0`` uint8 each (read-only); None if the lane
        is idle throughout. Errors are not drawn (:attr:`error_clocks`)."""
        lo = int(np.searchsorted(self.ends, c0, side="right"))
        hi = int(np.searchsorted(self.starts, c1, side="left"))
        if lo >= hi:
            return None
        starts, ends = self.starts[lo:hi].tolist(), self.ends[lo:hi].tolist()
        # From the first frame's start (or c0) on, idle gaps and frames (preamble + frame octets) in turn, joined
        # as bytes: copies of whole runs (filling the enabled clocks through a mask over every clock took ~4x as long).
        origin = min(starts[0], c0)
        gaps = list(map(slice, map(operator.sub, starts, [origin, *ends[:-1]])))
        pad = max(0, c1 - ends[-1])
        longest = max(e - s for s, e in zip(starts, ends))
        idle, enabled = memoryview(bytes(max(pad, *(g.stop for g in gaps)))), memoryview(b"\1" * longest)
        data = b"".join(chain(chain.from_iterable(zip(map(idle.__getitem__, gaps), repeat(PREAMBLE_SFD),
                                                      (f.data for f in self.frames[lo:hi]))), (idle[:pad],)))
        en = b"".join(chain(chain.from_iterable(zip(map(idle.__getitem__, gaps),
                                                    (enabled[:e - s] for s, e in zip(starts, ends)))), (idle[:pad],)))
        return tuple(np.frombuffer(b, dtype=np.uint8, count=c1 - c0, offset=c0 - origin) for b in (data, en))

    def truth(self) -> np.ndarray:
        """One :data:`FRAME_TRUTH_DTYPE` row per frame, in start order: what :class:`Frame`'s properties say,
        column by column (the header fields read from the first :data:`_HEAD_BYTES` of every frame at once)."""
        frames, n = self.frames, len(self.frames)
        data = list(map(operator.attrgetter("data"), frames))
        length = np.fromiter(map(len, data), np.int64, n)
        head = np.frombuffer(b"".join(d[:_HEAD_BYTES].ljust(_HEAD_BYTES, b"\0") for d in data),
                             np.uint8).reshape(n, _HEAD_BYTES).astype(np.int32)
        ethertype = _u16(head, MAC_HEADER_BYTES - 2)
        tagged = ethertype == ETHERTYPE_VLAN
        inner = np.where(tagged, _u16(head, MAC_HEADER_BYTES + 2), ethertype)
        ip = np.where(tagged, MAC_HEADER_BYTES + VLAN_TAG_BYTES, MAC_HEADER_BYTES)  # where the IPv4 header starts
        flags_fragment = _u16(head, ip + _FRAGMENT_FIELD)
        out = np.zeros(n, FRAME_TRUTH_DTYPE)
        out["ss"], out["es"], out["direction"], out["length"] = self.starts, self.ends, self.direction.encode(), length
        out["dst"], out["src"] = _macs(head[:, 0:6]), _macs(head[:, 6:12])
        out["ethertype"], out["inner_ethertype"] = ethertype, inner
        out["vlan_id"] = np.where(tagged, _u16(head, MAC_HEADER_BYTES) & 0x0FFF, -1)
        out["kind"] = [f.kind.encode() for f in frames]
        out["seq"] = np.fromiter(map(operator.attrgetter("seq"), frames), np.int64, n)
        out["pause_quanta"] = np.fromiter(map(operator.attrgetter("pause_quanta"), frames), np.int64, n)
        out["fcs_ok"] = np.fromiter(map(fcs_ok, data), np.bool_, n)
        ipv4 = (inner == ETHERTYPE_IPV4) & (length >= ip + IPV4_HEADER_BYTES)
        out["ip_fragment_offset"] = np.where(ipv4, flags_fragment & 0x1FFF, -1)
        out["error_octets"] = [len(set(f.error_at)) for f in frames]
        return out


#: Where the Flags/Fragment Offset field lies in an IPv4 header (RFC 791 section 3.1).
_FRAGMENT_FIELD = 6
#: Header bytes a frame's truth row reads: the addresses, the Type, an 802.1Q tag and the IPv4 header up to
#: its Flags/Fragment Offset field.
_HEAD_BYTES = MAC_HEADER_BYTES + VLAN_TAG_BYTES + _FRAGMENT_FIELD + 2


def _u16(head: np.ndarray, at: int | np.ndarray) -> np.ndarray:
    """The big-endian (network order) 16-bit field at byte ``at`` of each row (``at``: one per row, or for all)."""
    rows = np.arange(len(head))
    return head[rows, at] << 8 | head[rows, np.add(at, 1)]


#: Each byte value's two lowercase hexadecimal digits, as ASCII.
_HEX = np.frombuffer(b"".join(b"%02x" % i for i in range(256)), np.uint8).reshape(256, 2)


def _macs(octets: np.ndarray) -> np.ndarray:
    """``aa:bb:cc:dd:ee:ff`` (as ``bytes.hex(":")`` writes it) for each row of six address octets."""
    text = np.full((len(octets), 6, 3), ord(":"), np.uint8)
    text[:, :, :2] = _HEX[octets]
    return np.ascontiguousarray(text.reshape(len(octets), 18)[:, :17]).view("S17").ravel()


#: TX_ER in byte 0, RX_ER in byte 1.
_TX_ER_BIT, _RX_ER_BIT = 1 << 1, 1 << 3


class GmiiRenderer:
    """Draws the GMII lines of two frame schedules, a block of clocks at a time.

    ``tx`` / ``rx``: ``(clock of the first preamble octet, frame)`` pairs for A->B / B->A, in
    any order. Frames of one direction must not overlap and must leave at least
    :data:`IFG_CLOCKS` idle clocks between them (802.3 clause 4.4.2); ValueError otherwise.
    """

    def __init__(self, tx: Sequence[tuple[int, Frame]], rx: Sequence[tuple[int, Frame]]):
        self._tx = _Lane("tx", tx)
        self._rx = _Lane("rx", rx)

    @property
    def end_clock(self) -> int:
        """The clock after the last octet of the last frame in either direction (0 if none)."""
        ends = [int(lane.ends[-1]) for lane in (self._tx, self._rx) if len(lane.ends)]
        return max(ends, default=0)

    def render(self, c0: int, c1: int, tx_en_copy: int | None = None) -> np.ndarray:
        """Packed samples ``(c1 - c0, 3)`` uint8 of clocks [c0, c1); blocks concatenate to one call.

        ``tx_en_copy``: a channel after :data:`CHANNELS` (20 to 23, the third byte's free bits) that repeats
        TX_EN, as a probe's frame-presence wire does; None: those bits stay 0.
        """
        if not 0 <= c0 <= c1:
            raise ValueError(f"clock range [{c0}, {c1}): needs 0 <= c0 <= c1")
        # One pass in C (_gmii_pack.c: channel k is bit k % 8 of byte k // 8); an idle lane (None) draws 0. ER is
        # drawn last, on the few clocks it is high.
        tx, rx = self._tx.lines(c0, c1), self._rx.lines(c0, c1)
        out = pack(np.empty((c1 - c0, UNITSIZE), dtype=np.uint8), *(tx or (None, None)), *(rx or (None, None)),
                   -1 if tx_en_copy is None else tx_en_copy)
        for lane, byte, bit in ((self._tx, 0, _TX_ER_BIT), (self._rx, 1, _RX_ER_BIT)):
            e0, e1 = np.searchsorted(lane.error_clocks, [c0, c1])
            out[lane.error_clocks[e0:e1] - c0, byte] |= bit
        return out

    def truth(self) -> np.ndarray:
        """One :data:`FRAME_TRUTH_DTYPE` row per frame of both directions, by ``ss`` (tx first on a tie)."""
        rows = np.concatenate([self._tx.truth(), self._rx.truth()])
        return rows[np.argsort(rows["ss"], kind="stable")]
