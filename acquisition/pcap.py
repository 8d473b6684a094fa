"""pcap and pcapng files: a streaming reader that keeps time stamps exact, and writers.

Formats: pcap as draft-ietf-opsawg-pcap-02 (2023) describes it (magic ``0xA1B2C3D4`` for
microsecond, ``0xA1B23C4D`` for nanosecond stamps, either byte order; the FCS length in the
upper bits of the link type field, libpcap's ``LT_FCS_LENGTH``), pcapng as
draft-ietf-opsawg-pcapng-02 (2024) does: sections (each with its byte order), Interface
Description Blocks with ``if_tsresol`` (10^-n or 2^-n seconds), ``if_tsoffset``,
``if_fcslen``, ``if_speed``; Enhanced, Simple and (obsolete) Packet Blocks with
``epb_flags``; Interface Statistics Blocks (``isb_ifdrop``, ``isb_osdrop``); other blocks
are skipped by their length.

Why a reader of its own rather than Scapy's (which the tests use to build and cross-check
frames): Scapy turns every time stamp into a float or a decimal of seconds and every frame
into a Python object, and stops at a damaged block without saying where. This one keeps each
stamp as the integer count of the interface's units the file holds (nanoseconds, or finer),
reads a file of any size in blocks of bounded memory, hands frames over in column batches
(NumPy arrays, one copy of the bytes), and on damage yields every frame before it and then
raises :class:`DamagedCapture` with the byte offset.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable

import numpy as np

from nicrig.errors import FormatError, UsageError

PCAP_MAGIC_US = 0xA1B2C3D4
PCAP_MAGIC_NS = 0xA1B23C4D
PCAPNG_SHB = 0x0A0D0D0A
PCAPNG_BYTE_ORDER = 0x1A2B3C4D
#: pcapng block types (draft-ietf-opsawg-pcapng §11.1) this reader interprets.
BLOCK_IDB, BLOCK_PB, BLOCK_SPB, BLOCK_ISB, BLOCK_EPB = 1, 2, 3, 5, 6
#: Option codes: opt_endofopt, opt_comment; IDB and ISB ones; epb_flags (pack_flags in a Packet Block).
OPT_END, OPT_COMMENT = 0, 1
IF_NAME, IF_DESCRIPTION, IF_SPEED, IF_TSRESOL, IF_OS, IF_FCSLEN, IF_TSOFFSET, IF_HARDWARE = 2, 3, 8, 9, 12, 13, 14, 15
SHB_HARDWARE, SHB_OS, SHB_USERAPPL = 2, 3, 4
ISB_IFDROP, ISB_OSDROP = 5, 7
EPB_FLAGS = 2
#: epb_flags fields (pcapng §4.3.1): direction (bits 0-1), FCS length in octets (bits 5-8), CRC error (bit 24)
#: and the other link-layer errors (bits 24-31: CRC, too long, too short, wrong IFG, unaligned, SFD,
#: preamble, symbol).
FLAG_INBOUND, FLAG_OUTBOUND = 1, 2
FLAG_FCS_SHIFT = 5
FLAG_CRC_ERROR = 1 << 24
FLAG_SYMBOL_ERROR = 1 << 31
LINKTYPE_ETHERNET = 1
#: libpcap's LT_FCS_LENGTH_PRESENT / LT_FCS_LENGTH: the pcap header's link type field says the FCS length,
#: in 16-bit words, in its top four bits when bit 26 is set.
_PCAP_FCS_PRESENT = 0x04000000
#: Largest frame this reader accepts (libpcap's MAXIMUM_SNAPLEN) and largest pcapng block (libpcap's
#: limit on block sizes): larger values are damage, not frames.
MAX_FRAME_BYTES = 262144
MAX_BLOCK_BYTES = 16 << 20
#: How many frames (or how many captured bytes) a batch holds at most.
BATCH_FRAMES = 1 << 16
BATCH_BYTES = 16 << 20
#: Packet blocks (or records) parsed together at most, and their bytes: what the read buffer keeps.
RUN_FRAMES = 1 << 14
RUN_BYTES = 4 << 20
_READ_BYTES = 8 << 20

#: What a file's time stamps count (if_tsresol): the interface's units per second.
Progress = Callable[[int, int], None]


class DamagedCapture(FormatError):
    """A pcap or pcapng file that cannot be read past ``offset`` (bytes from its start); every frame before was
    given."""

    def __init__(self, path: Path | str, offset: int, reason: str, frames: int):
        self.offset, self.reason, self.frames = offset, reason, frames
        super().__init__(f"{path}: damaged at byte {offset:,}: {reason} ({frames:,} frames before it)")


@dataclass
class Interface:
    """One capture interface: a pcapng Interface Description Block, or a pcap file's header.

    ``tsresol`` is the if_tsresol byte as the file gives it (a pcap file's: 6 or 9):
    ``units_per_s`` follows from it. ``fcs_bytes``: how many FCS octets end each frame
    (-1: the file does not say). ``speed_bps``: -1 unknown. ``drops``: frames the interface
    (``if_drops``) and the operating system (``os_drops``) dropped, from the last Interface
    Statistics Block (-1: not stated).
    """

    link_type: int = LINKTYPE_ETHERNET
    snaplen: int = 0
    name: str = ""
    description: str = ""
    tsresol: int = 6
    offset_s: int = 0
    fcs_bytes: int = -1
    speed_bps: int = -1
    hardware: str = ""
    os: str = ""
    comment: str = ""
    section: int = 0
    if_drops: int = -1
    os_drops: int = -1

    @property
    def units_per_s(self) -> int:
        return units_per_s(self.tsresol)


def units_per_s(tsresol: int) -> int:
    """Time-stamp units per second for an ``if_tsresol`` byte (pcapng §4.2: MSB 0: 10^-n s, MSB 1: 2^-n s)."""
    return 1 << (tsresol & 0x7F) if tsresol & 0x80 else 10 ** tsresol


def resolution_text(tsresol: int) -> str:
    """``10^-9 s``, ``2^-32 s``: an ``if_tsresol`` in words."""
    return f"2^-{tsresol & 0x7F} s" if tsresol & 0x80 else f"10^-{tsresol} s"


def stamps_to_ns(stamps: np.ndarray, tsresol: int, offset_s: int = 0) -> np.ndarray:
    """Integer time stamps in units of ``tsresol`` (plus ``offset_s`` whole seconds) as int64 nanoseconds:
    exact when a unit is a whole number of nanoseconds, rounded down (floor) for finer units.

    Integer arithmetic throughout (no float seconds): whole seconds and the remainder apart, so no product
    overflows int64 for stamps of any date to 2262.
    """
    stamps = np.asarray(stamps, dtype=np.int64)
    units = units_per_s(tsresol)
    secs, rest = np.divmod(stamps, units)
    secs = secs + offset_s
    if units <= 10 ** 9 and 10 ** 9 % units == 0:
        return secs * 10 ** 9 + rest * (10 ** 9 // units)
    if units % 10 ** 9 == 0:
        return secs * 10 ** 9 + rest // (units // 10 ** 9)
    if units < 1 << 33:  # rest * 10**9 < 2**63
        return secs * 10 ** 9 + rest * 10 ** 9 // units
    return secs * 10 ** 9 + np.array([int(r) * 10 ** 9 // units for r in rest.tolist()], dtype=np.int64)


def ns_to_stamps(ns: np.ndarray | int, tsresol: int) -> np.ndarray:
    """The inverse for writing: nanoseconds as stamps of ``tsresol`` (a coarser unit rounds down)."""
    ns = np.asarray(ns, dtype=np.int64)
    units = units_per_s(tsresol)
    secs, rest = np.divmod(ns, 10 ** 9)
    if units <= 10 ** 9 and 10 ** 9 % units == 0:
        return secs * units + rest // (10 ** 9 // units)
    if units % 10 ** 9 == 0:
        return secs * units + rest * (units // 10 ** 9)
    return secs * units + rest * units // 10 ** 9


@dataclass
class Batch:
    """Frames in file order, as columns: their block's byte offset, interface (numbered across the file's
    sections), raw time stamp (in the interface's units; ``stamped`` false for a Simple Packet Block, which has
    none), captured and original lengths, flags (``epb_flags``, 0 when absent), and the captured octets of all
    of them concatenated (frame ``i`` is ``data[starts[i]:starts[i] + caplen[i]]``). ``comments``: frame index
    within the batch -> its ``opt_comment`` (few frames have one)."""

    offset: np.ndarray
    interface: np.ndarray
    stamp: np.ndarray
    stamped: np.ndarray
    caplen: np.ndarray
    origlen: np.ndarray
    flags: np.ndarray
    starts: np.ndarray
    data: np.ndarray
    comments: dict[int, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.offset)

    def frame(self, i: int) -> bytes:
        return self.data[self.starts[i]:self.starts[i] + self.caplen[i]].tobytes()


class _Collector:
    """Frames gathered for the next batch: runs of frames as columns, in file order."""

    COLUMNS = ("offset", "interface", "stamp", "stamped", "caplen", "origlen", "flags")

    def __init__(self) -> None:
        self.parts: list[tuple[np.ndarray, ...]] = []
        self.data: list[bytes] = []
        self.count = 0
        self.size = 0
        self.comments: dict[int, str] = {}

    def add_run(self, columns: tuple[np.ndarray, ...], data: bytes, comments: dict[int, str]) -> None:
        """Frames as the columns of :attr:`COLUMNS` (equal lengths), their octets concatenated, and their comments
        (index in the run -> text)."""
        self.comments.update({self.count + k: v for k, v in comments.items()})
        self.parts.append(columns)
        self.data.append(data)
        self.count += len(columns[0])
        self.size += len(data)

    def add(self, offset: int, interface: int, stamp: int, stamped: bool, data: bytes | memoryview, origlen: int,
            flags: int, comment: str | None) -> None:
        """One frame."""
        cols = tuple(np.array([v]) for v in (offset, interface, stamp, stamped, len(data), origlen, flags))
        self.add_run(cols, bytes(data), {0: comment} if comment else {})

    def full(self) -> bool:
        return self.count >= BATCH_FRAMES or self.size >= BATCH_BYTES

    def take(self) -> Batch:
        cols = [np.concatenate([p[k] for p in self.parts]) for k in range(len(self.COLUMNS))]
        offset, interface, stamp, stamped, caplen, origlen, flags = cols
        caplen = caplen.astype(np.int32)
        starts = np.zeros(len(caplen), np.int64)
        np.cumsum(caplen[:-1], out=starts[1:])
        batch = Batch(offset.astype(np.int64), interface.astype(np.int32), stamp.astype(np.int64),
                      stamped.astype(bool), caplen, origlen.astype(np.int64), flags.astype(np.uint32), starts,
                      np.frombuffer(b"".join(self.data), np.uint8), self.comments)
        self.parts, self.data, self.count, self.size, self.comments = [], [], 0, 0, {}
        return batch


class _Buffer:
    """A file read in large pieces, addressed by absolute byte offset; what was consumed is dropped."""

    def __init__(self, f: BinaryIO, size: int) -> None:
        self.f, self.size = f, size
        self.base = 0          # file offset of buf[0]
        self.buf = b""
        self.end = 0           # file offset one past the last byte held

    def have(self, offset: int, n: int, keep: int | None = None) -> bool:
        """Make bytes ``[offset, offset + n)`` available, keeping those from ``keep`` (default ``offset``) on;
        False when the file ends first."""
        end = offset + n
        if end <= self.end:
            return True
        keep = offset if keep is None else min(keep, offset)
        if keep > self.base:
            self.buf = self.buf[keep - self.base:]
            self.base = keep
        more = self.f.read(max(end - self.end, _READ_BYTES))
        if more:
            self.buf += more
            self.end = self.base + len(self.buf)
        return end <= self.end

    def view(self, offset: int, n: int) -> memoryview:
        return memoryview(self.buf)[offset - self.base:offset - self.base + n]

    def gather(self, offsets: np.ndarray, width: int) -> np.ndarray:
        """``width`` bytes from each absolute offset, as an ``(n, width)`` uint8 array."""
        arr = np.frombuffer(self.buf, np.uint8)
        return arr[(offsets - self.base)[:, None] + np.arange(width)]

    def join(self, starts: np.ndarray, lengths: np.ndarray) -> bytes:
        """The bytes ``[start, start + length)`` of every pair, concatenated."""
        mv = memoryview(self.buf)
        base = self.base
        return b"".join([mv[s - base:s - base + n] for s, n in zip(starts.tolist(), lengths.tolist())])


class CaptureReader:
    """A pcap or pcapng file, read front to back: ``for batch in reader.batches(): ...``.

    ``format`` (``pcap`` or ``pcapng``), the ``interfaces`` seen so far (complete once the batches are
    exhausted) and the sections' ``hardware``, ``os`` and ``application`` texts and comments are attributes.
    A file that is neither, or whose first header is broken, is a :class:`FormatError` at construction.
    """

    def __init__(self, path: str | os.PathLike[str], progress: Progress | None = None):
        self.path = Path(path)
        self.progress = progress
        try:
            self._f: BinaryIO = open(self.path, "rb")  # noqa: SIM115 - closed by batches() or close()
        except OSError as exc:
            raise UsageError(f"{self.path}: cannot read: {exc.strerror}") from None
        self.size = os.fstat(self._f.fileno()).st_size
        self.interfaces: list[Interface] = []
        self.sections: list[dict[str, Any]] = []
        self.frames = 0
        self._out = _Collector()
        head = self._f.read(4)
        self._f.seek(0)
        if len(head) < 4:
            self._f.close()
            raise FormatError(f"{self.path}: {len(head)} bytes: too short for a pcap or pcapng file")
        magic_le, magic_be = struct.unpack("<I", head)[0], struct.unpack(">I", head)[0]
        if magic_le == PCAPNG_SHB:
            self.format = "pcapng"
        elif magic_le in (PCAP_MAGIC_US, PCAP_MAGIC_NS) or magic_be in (PCAP_MAGIC_US, PCAP_MAGIC_NS):
            self.format = "pcap"
        else:
            self._f.close()
            raise FormatError(f"{self.path}: not a pcap or pcapng file (starts with {head.hex()}; pcap starts "
                              "a1b2c3d4 or a1b23c4d in either byte order, pcapng 0a0d0d0a)")

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _damaged(self, offset: int, reason: str) -> DamagedCapture:
        return DamagedCapture(self.path, offset, reason, self.frames + self._out.count)

    def batches(self) -> Iterator[Batch]:
        """The frames in file order, a batch at a time; raises :class:`DamagedCapture` after the frames before
        the damage."""
        buf = _Buffer(self._f, self.size)
        out = self._out
        parse = self._pcap if self.format == "pcap" else self._pcapng
        try:
            try:
                for done in parse(buf, out):
                    if out.full():
                        self.frames += out.count
                        yield out.take()
                        if self.progress:
                            self.progress(done, self.size)
            except DamagedCapture:
                if out.count:
                    self.frames += out.count
                    yield out.take()
                raise
            if out.count:
                self.frames += out.count
                yield out.take()
            if self.progress:
                self.progress(self.size, self.size)
        finally:
            self._f.close()

    # -- pcap ----------------------------------------------------------------------------------
    def _pcap(self, buf: _Buffer, out: _Collector) -> Iterator[int]:
        if not buf.have(0, 24):
            raise self._damaged(0, "the file ends inside its 24-byte header")
        head = bytes(buf.view(0, 24))
        order = "<" if struct.unpack("<I", head[:4])[0] in (PCAP_MAGIC_US, PCAP_MAGIC_NS) else ">"
        magic, major, minor, _zone, _sigfigs, snaplen, linktype = struct.unpack(order + "IHHiIII", head)
        if major != 2:
            raise FormatError(f"{self.path}: pcap version {major}.{minor}; this reader reads version 2.x")
        fcs = 2 * (linktype >> 28) if linktype & _PCAP_FCS_PRESENT else -1
        iface = Interface(link_type=linktype & 0xFFFF, snaplen=snaplen, tsresol=9 if magic == PCAP_MAGIC_NS else 6,
                          fcs_bytes=fcs)
        self.interfaces.append(iface)
        self.sections.append({"byte_order": "little" if order == "<" else "big", "hardware": "", "os": "",
                              "application": "", "comment": ""})
        units = iface.units_per_s
        rec = struct.Struct(order + "IIII")
        limit = MAX_FRAME_BYTES if snaplen <= MAX_FRAME_BYTES else min(snaplen, MAX_BLOCK_BYTES)
        pos = 24
        run: list[int] = []
        while True:
            keep = run[0] if run else pos
            if pos + 16 > buf.end and not buf.have(pos, 16, keep):
                self._pcap_run(buf, run, order, units, out)
                if buf.end > pos:
                    raise self._damaged(pos, f"the file ends inside a record header ({buf.end - pos} of 16 bytes)")
                return
            _secs, frac, caplen, _origlen = rec.unpack_from(buf.buf, pos - buf.base)
            damage = None
            if frac >= units:
                damage = (f"record time stamp fraction {frac} is not below {units} "
                          f"({'nano' if units == 10 ** 9 else 'micro'}seconds)")
            elif caplen > limit:
                damage = (f"record of {caplen:,} captured bytes; the file's snapshot length is {snaplen:,} "
                          f"(at most {limit:,} are readable)")
            elif pos + 16 + caplen > buf.end and not buf.have(pos, 16 + caplen, keep):
                damage = f"the file ends inside a {caplen:,}-byte frame"
            if damage is not None:
                self._pcap_run(buf, run, order, units, out)
                raise self._damaged(pos, damage)
            run.append(pos)
            pos += 16 + caplen
            if len(run) >= RUN_FRAMES or pos - run[0] >= RUN_BYTES:
                self._pcap_run(buf, run, order, units, out)
                run = []
                yield pos

    def _pcap_run(self, buf: _Buffer, run: list[int], order: str, units: int, out: _Collector) -> None:
        """Records at the offsets ``run`` (checked, held in ``buf``) into ``out``."""
        if not run:
            return
        offs = np.array(run, np.int64)
        head = np.ascontiguousarray(buf.gather(offs, 16)).view(np.dtype(order + "u4")).astype(np.int64)
        secs, frac, caplen, origlen = head.T
        n = len(offs)
        out.add_run((offs, np.zeros(n, np.int32), secs * units + frac, np.ones(n, bool), caplen, origlen,
                     np.zeros(n, np.uint32)), buf.join(offs + 16, caplen), {})

    # -- pcapng --------------------------------------------------------------------------------
    def _pcapng(self, buf: _Buffer, out: _Collector) -> Iterator[int]:
        pos, order = 0, "<"
        head = struct.Struct("<II")
        first = 0  # global number of the current section's interface 0
        run: list[int] = []  # Enhanced Packet Blocks in a row, parsed together
        while True:
            keep = run[0] if run else pos
            if pos + 12 > buf.end and not buf.have(pos, 12, keep):
                self._epb_run(buf, run, order, first, out)
                if buf.end > pos:
                    raise self._damaged(pos, f"the file ends inside a block header ({buf.end - pos} bytes)")
                return
            btype, length = head.unpack_from(buf.buf, pos - buf.base)
            if btype == PCAPNG_SHB:
                self._epb_run(buf, run, order, first, out)
                run = []
                bom = bytes(buf.view(pos + 8, 4))
                if bom == struct.pack("<I", PCAPNG_BYTE_ORDER):
                    order = "<"
                elif bom == struct.pack(">I", PCAPNG_BYTE_ORDER):
                    order = ">"
                else:
                    raise self._damaged(pos, f"Section Header Block with byte-order magic {bom.hex()}")
                head = struct.Struct(order + "II")
                length = head.unpack_from(buf.buf, pos - buf.base)[1]
                first = len(self.interfaces)
            damage = None
            if length < 12 or length % 4:
                damage = f"block length {length} (a block is a multiple of 4 bytes, at least 12)"
            elif length > MAX_BLOCK_BYTES:
                damage = f"block length {length:,} exceeds {MAX_BLOCK_BYTES:,} bytes"
            elif pos + length > buf.end and not buf.have(pos, length, keep):
                damage = (f"the file ends inside a {length:,}-byte block (type 0x{btype:08x}; "
                          f"{buf.end - pos:,} bytes left)")
            if damage is not None:
                self._epb_run(buf, run, order, first, out)
                raise self._damaged(pos, damage)
            if btype == BLOCK_EPB:
                run.append(pos)
                pos += length
                if len(run) >= RUN_FRAMES or pos - run[0] >= RUN_BYTES:
                    self._epb_run(buf, run, order, first, out)
                    run = []
                    yield pos
                continue
            self._epb_run(buf, run, order, first, out)
            run = []
            self._block(buf, pos, btype, length, order, first, out)
            pos += length
            yield pos

    def _block(self, buf: _Buffer, pos: int, btype: int, length: int, order: str, first: int,
               out: _Collector) -> None:
        """One block other than a run of Enhanced Packet Blocks, read on its own."""
        block = buf.view(pos, length)
        if struct.unpack_from(order + "I", block, length - 4)[0] != length:
            raise self._damaged(pos, f"block lengths differ: {length} at its start, "
                                     f"{struct.unpack_from(order + 'I', block, length - 4)[0]} at its end")
        body = block[8:length - 4]
        if btype == PCAPNG_SHB:
            self._section(pos, body, order)
        elif btype == BLOCK_IDB:
            self._interface(pos, body, order)
        elif btype in (BLOCK_EPB, BLOCK_PB):
            self._packet(pos, btype, body, order, first, out)
        elif btype == BLOCK_SPB:
            self._simple(pos, body, order, first, out)
        elif btype == BLOCK_ISB:
            self._statistics(pos, body, order, first)

    def _epb_run(self, buf: _Buffer, run: list[int], order: str, first: int, out: _Collector) -> None:
        """Enhanced Packet Blocks at the offsets ``run`` (held in ``buf``) into ``out``: their fixed fields and
        flags gathered with NumPy; a block with other options, or one that is damaged, read on its own (which
        raises with the reason, after the blocks before it)."""
        if not run:
            return
        offs = np.array(run, np.int64)
        u4 = np.dtype(order + "u4")
        head = np.ascontiguousarray(buf.gather(offs, 28)[:, 4:]).view(u4).astype(np.int64)
        length, number, hi, lo, caplen, origlen = head.T
        tail = np.ascontiguousarray(buf.gather(offs + length - 4, 4)).view(u4).astype(np.int64)[:, 0]
        pad = caplen + (-caplen % 4)
        room = length - 32 - pad
        ifaces = len(self.interfaces) - first
        bad = (tail != length) | (caplen > MAX_FRAME_BYTES) | (caplen > length - 32) | (number >= ifaces) | (hi >= 1 << 31)
        if bad.any():
            k = int(np.argmax(bad))
            self._epb_run(buf, run[:k], order, first, out)
            self._block(buf, run[k], BLOCK_EPB, int(length[k]), order, first, out)  # raises: the reason
            raise self._damaged(run[k], "malformed Enhanced Packet Block")
        flags = np.zeros(len(offs), np.int64)
        with_flags = room == 12
        if with_flags.any():  # the one option nicrig and most writers add: epb_flags, then opt_endofopt
            opts = np.ascontiguousarray(buf.gather(offs[with_flags] + 28 + pad[with_flags], 12)).view(u4)
            codes = opts[:, 0].astype(np.int64)
            codes = (codes & 0xFFFF, codes >> 16) if order == "<" else (codes >> 16, codes & 0xFFFF)
            plain = (codes[0] == EPB_FLAGS) & (codes[1] == 4) & (opts[:, 2] == 0)
            flags[np.flatnonzero(with_flags)[plain]] = opts[plain, 1]
            with_flags[np.flatnonzero(with_flags)[~plain]] = False
        comments: dict[int, str] = {}
        for k in np.flatnonzero((room > 0) & ~with_flags).tolist():  # other options: read them one by one
            body = buf.view(run[k] + 8, int(length[k]) - 12)
            for code, v in self._options(run[k], body, 20 + int(pad[k]), order):
                if code == EPB_FLAGS and len(v) >= 4:
                    flags[k] = struct.unpack(order + "I", v[:4])[0]
                elif code == OPT_COMMENT:
                    comments[k] = v.decode("utf-8", "replace")
        out.add_run((offs, first + number, (hi << 32) | lo, np.ones(len(offs), bool), caplen, origlen, flags),
                    buf.join(offs + 28, caplen), comments)

    def _options(self, pos: int, body: memoryview, start: int, order: str) -> list[tuple[int, bytes]]:
        opts = []
        i = start
        while i + 4 <= len(body):
            code, n = struct.unpack_from(order + "HH", body, i)
            if code == OPT_END:
                break
            if i + 4 + n > len(body):
                raise self._damaged(pos, f"option {code} of {n} bytes runs past its block's end")
            opts.append((code, bytes(body[i + 4:i + 4 + n])))
            i += 4 + n + (-n % 4)
        return opts

    def _section(self, pos: int, body: memoryview, order: str) -> None:
        if len(body) < 16:
            raise self._damaged(pos, "Section Header Block shorter than its fixed fields")
        major, minor = struct.unpack_from(order + "HH", body, 4)
        if major != 1:
            raise self._damaged(pos, f"pcapng section version {major}.{minor}; this reader reads version 1.x")
        text = {SHB_HARDWARE: "hardware", SHB_OS: "os", SHB_USERAPPL: "application", OPT_COMMENT: "comment"}
        info = {"byte_order": "little" if order == "<" else "big", "hardware": "", "os": "", "application": "",
                "comment": ""}
        for code, value in self._options(pos, body, 16, order):
            if code in text:
                key = text[code]
                info[key] = "\n".join(filter(None, (info[key], value.decode("utf-8", "replace"))))
        self.sections.append(info)

    def _interface(self, pos: int, body: memoryview, order: str) -> None:
        if not self.sections:
            raise self._damaged(pos, "Interface Description Block before any Section Header Block")
        if len(body) < 8:
            raise self._damaged(pos, "Interface Description Block shorter than its fixed fields")
        link, _, snaplen = struct.unpack_from(order + "HHI", body, 0)
        iface = Interface(link_type=link, snaplen=snaplen, section=len(self.sections) - 1)
        for code, v in self._options(pos, body, 8, order):
            if code == IF_NAME:
                iface.name = v.decode("utf-8", "replace")
            elif code == IF_DESCRIPTION:
                iface.description = v.decode("utf-8", "replace")
            elif code == IF_TSRESOL and len(v) >= 1:
                iface.tsresol = v[0]
                if (v[0] & 0x7F) > (63 if v[0] & 0x80 else 18):
                    raise self._damaged(pos, f"if_tsresol 0x{v[0]:02x}: finer than int64 stamps can hold")
            elif code == IF_TSOFFSET and len(v) >= 8:
                iface.offset_s = struct.unpack(order + "q", v[:8])[0]
            elif code == IF_FCSLEN and len(v) >= 1:
                # pcapng says bits; writers that wrote octets (4) exist: a value below 8 counts octets
                iface.fcs_bytes = v[0] // 8 if v[0] >= 8 else v[0]
            elif code == IF_SPEED and len(v) >= 8:
                iface.speed_bps = struct.unpack(order + "Q", v[:8])[0]
            elif code == IF_HARDWARE:
                iface.hardware = v.decode("utf-8", "replace")
            elif code == IF_OS:
                iface.os = v.decode("utf-8", "replace")
            elif code == OPT_COMMENT:
                iface.comment = "\n".join(filter(None, (iface.comment, v.decode("utf-8", "replace"))))
        self.interfaces.append(iface)

    def _local_interface(self, pos: int, number: int, first: int) -> int:
        k = first + number
        if not self.sections or k >= len(self.interfaces) or self.interfaces[k].section != len(self.sections) - 1:
            defined = len(self.interfaces) - first
            raise self._damaged(pos, f"a packet of interface {number}; its section describes {defined} "
                                     f"interface{'s' if defined != 1 else ''}")
        return k

    def _packet(self, pos: int, btype: int, body: memoryview, order: str, first: int, out: _Collector) -> None:
        if len(body) < 20:
            raise self._damaged(pos, "packet block shorter than its fixed fields")
        if btype == BLOCK_EPB:
            number, hi, lo, caplen, origlen = struct.unpack_from(order + "IIIII", body, 0)
        else:
            number, _drops, hi, lo, caplen, origlen = struct.unpack_from(order + "HHIIII", body, 0)
        k = self._local_interface(pos, number, first)
        if caplen > MAX_FRAME_BYTES or 20 + caplen > len(body):
            raise self._damaged(pos, f"packet of {caplen:,} captured bytes in a block with room for "
                                     f"{max(len(body) - 20, 0):,}")
        stamp = (hi << 32) | lo
        if stamp >= 1 << 63:
            raise self._damaged(pos, f"time stamp {stamp} beyond what int64 holds")
        flags, comment = 0, None
        for code, v in self._options(pos, body, 20 + caplen + (-caplen % 4), order):
            if code == EPB_FLAGS and len(v) >= 4:
                flags = struct.unpack(order + "I", v[:4])[0]
            elif code == OPT_COMMENT:
                comment = v.decode("utf-8", "replace")
        out.add(pos, k, stamp, True, bytes(body[20:20 + caplen]), origlen, flags, comment)

    def _simple(self, pos: int, body: memoryview, order: str, first: int, out: _Collector) -> None:
        if len(body) < 4:
            raise self._damaged(pos, "Simple Packet Block shorter than its fixed field")
        k = self._local_interface(pos, 0, first)
        origlen = struct.unpack_from(order + "I", body, 0)[0]
        snap = self.interfaces[k].snaplen
        caplen = min(origlen, snap) if snap else origlen
        if caplen > MAX_FRAME_BYTES or 4 + caplen > len(body):
            raise self._damaged(pos, f"Simple Packet Block of {caplen:,} bytes in a block with room for "
                                     f"{len(body) - 4:,}")
        out.add(pos, k, 0, False, bytes(body[4:4 + caplen]), origlen, 0, None)

    def _statistics(self, pos: int, body: memoryview, order: str, first: int) -> None:
        if len(body) < 12:
            raise self._damaged(pos, "Interface Statistics Block shorter than its fixed fields")
        k = self._local_interface(pos, struct.unpack_from(order + "I", body, 0)[0], first)
        for code, v in self._options(pos, body, 12, order):
            if code == ISB_IFDROP and len(v) >= 8:
                self.interfaces[k].if_drops = struct.unpack(order + "Q", v[:8])[0]
            elif code == ISB_OSDROP and len(v) >= 8:
                self.interfaces[k].os_drops = struct.unpack(order + "Q", v[:8])[0]


# -- writing ------------------------------------------------------------------------------------

def _option(code: int, value: bytes) -> bytes:
    return struct.pack("<HH", code, len(value)) + value + b"\0" * (-len(value) % 4)


def _options_bytes(options: list[tuple[int, bytes]]) -> bytes:
    if not options:
        return b""
    return b"".join(_option(c, v) for c, v in options) + struct.pack("<HH", OPT_END, 0)


def _block(btype: int, body: bytes) -> bytes:
    length = 12 + len(body)
    return struct.pack("<II", btype, length) + body + struct.pack("<I", length)


def _text(value: str) -> bytes:
    return value.encode("utf-8")


class PcapngWriter:
    """Writes a pcapng file (little-endian, one section) to an open binary file.

    ``add_interface`` describes an interface (an IDB) and returns its number; ``write`` adds one frame as an
    Enhanced Packet Block, its stamp in that interface's units (:func:`ns_to_stamps`).
    """

    def __init__(self, f: BinaryIO, *, application: str, comment: str = "", hardware: str = "", os_name: str = ""):
        self.f = f
        self.interfaces: list[int] = []  # tsresol of each
        opts = [(SHB_USERAPPL, _text(application))]
        opts += [(c, _text(v)) for c, v in ((SHB_HARDWARE, hardware), (SHB_OS, os_name), (OPT_COMMENT, comment)) if v]
        body = struct.pack("<IHHq", PCAPNG_BYTE_ORDER, 1, 0, -1) + _options_bytes(opts)
        f.write(_block(PCAPNG_SHB, body))

    def add_interface(self, *, link_type: int = LINKTYPE_ETHERNET, snaplen: int = 0, name: str = "",
                      description: str = "", tsresol: int = 9, offset_s: int = 0, fcs_bytes: int = -1,
                      speed_bps: int = -1, hardware: str = "", os_name: str = "", comment: str = "") -> int:
        opts: list[tuple[int, bytes]] = []
        opts += [(c, _text(v)) for c, v in ((IF_NAME, name), (IF_DESCRIPTION, description), (IF_HARDWARE, hardware),
                                            (IF_OS, os_name), (OPT_COMMENT, comment)) if v]
        if tsresol != 6:
            opts.append((IF_TSRESOL, bytes([tsresol])))
        if offset_s:
            opts.append((IF_TSOFFSET, struct.pack("<q", offset_s)))
        if fcs_bytes >= 0:
            opts.append((IF_FCSLEN, bytes([8 * fcs_bytes])))  # bits, as pcapng defines it
        if speed_bps >= 0:
            opts.append((IF_SPEED, struct.pack("<Q", speed_bps)))
        self.f.write(_block(BLOCK_IDB, struct.pack("<HHI", link_type, 0, snaplen) + _options_bytes(opts)))
        self.interfaces.append(tsresol)
        return len(self.interfaces) - 1

    def write(self, interface: int, stamp: int, data: bytes, origlen: int | None = None, flags: int = 0,
              comment: str = "") -> None:
        if not 0 <= interface < len(self.interfaces):
            raise UsageError(f"pcapng: no interface {interface}")
        if not 0 <= stamp < 1 << 64:
            raise UsageError(f"pcapng: time stamp {stamp} outside 0..2^64-1 (a time before 1970?)")
        opts = []
        if flags:
            opts.append((EPB_FLAGS, struct.pack("<I", flags)))
        if comment:
            opts.append((OPT_COMMENT, _text(comment)))
        n = len(data)
        body = (struct.pack("<IIIII", interface, stamp >> 32, stamp & 0xFFFFFFFF, n, n if origlen is None else origlen)
                + data + b"\0" * (-n % 4) + _options_bytes(opts))
        self.f.write(_block(BLOCK_EPB, body))

    def statistics(self, interface: int, stamp: int, *, if_drops: int = -1, os_drops: int = -1) -> None:
        """An Interface Statistics Block: drops the interface and the operating system counted (-1: not known)."""
        opts = [(c, struct.pack("<Q", v)) for c, v in ((ISB_IFDROP, if_drops), (ISB_OSDROP, os_drops)) if v >= 0]
        self.f.write(_block(BLOCK_ISB, struct.pack("<III", interface, stamp >> 32, stamp & 0xFFFFFFFF)
                            + _options_bytes(opts)))


class PcapWriter:
    """Writes a pcap file (little-endian) of one link type, with nanosecond (``tsresol`` 9) or microsecond (6)
    stamps; ``fcs_bytes`` >= 0 records in the header that every frame ends in that many FCS octets."""

    def __init__(self, f: BinaryIO, *, link_type: int = LINKTYPE_ETHERNET, snaplen: int = MAX_FRAME_BYTES,
                 tsresol: int = 9, fcs_bytes: int = -1):
        if tsresol not in (6, 9):
            raise UsageError(f"pcap holds micro- or nanosecond stamps, not {resolution_text(tsresol)}")
        self.f, self.tsresol = f, tsresol
        field = link_type
        if fcs_bytes >= 0:
            field |= _PCAP_FCS_PRESENT | ((fcs_bytes // 2) << 28)
        magic = PCAP_MAGIC_NS if tsresol == 9 else PCAP_MAGIC_US
        f.write(struct.pack("<IHHiIII", magic, 2, 4, 0, 0, snaplen, field))

    def write(self, stamp: int, data: bytes, origlen: int | None = None) -> None:
        units = units_per_s(self.tsresol)
        secs, frac = divmod(stamp, units)
        if not 0 <= secs < 1 << 32:
            raise UsageError(f"pcap: time {secs} s outside what its 32-bit seconds hold (1970-2106)")
        n = len(data)
        self.f.write(struct.pack("<IIII", secs, frac, n, n if origlen is None else origlen) + data)
