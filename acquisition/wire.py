"""The wire source kind: Ethernet frames with their time stamps, in a capture set or a udpmon results file.

A wire source holds what a tap, a mirror port or a time-stamping NIC saw, from a pcap or
pcapng file (``nicrig import``) or recorded by nicrig itself during a udpmon run
(``--capture``), under ``wire/<name>`` (docs/formats.md, "Wire sources"):

- ``frames``: one row per frame in capture order: its time stamp as the file gave it
  (``stamp``, an integer count of its interface's units, and ``time_ns``, the same in
  nanoseconds, exact unless the units are finer), captured and original lengths, interface,
  ``epb_flags``, the clock that stamped it, and where its octets start in ``data``;
- ``data``: every frame's captured octets, concatenated;
- ``interfaces``: the capture's interfaces (link type, snapshot length, time resolution
  and offset, FCS length, speed, drops, the clock that stamps their frames, names), each with
  ``origin_ns``, the time (``time_ns``) of its clock that lies at 0 on the file's timeline (a
  capture set's common timeline, a results file's CLOCK_MONOTONIC);
- attributes: how the origins were chosen; where the frames came from; the damage that ended
  an import.

Frames are raw data: written once, when imported or recorded, in chunks as they arrive
(a multi-gigabyte capture never sits in memory), and only read afterwards. Their
``ethernet`` table is derived (:mod:`nicrig.decoders.wire_frames`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from nicrig.acquisition.pcap import Batch, Interface, resolution_text
from nicrig.errors import FormatError, UsageError
from nicrig.h5file import (STORAGE, NicrigFile, dataset_filters, encode_chunk, encoder_pool, reading,
                           takes_encoded_chunks, to_json)

GROUP = "wire"
#: Who stamped a frame (the ``clock`` column indexes this list): unknown (the file does not say); the capturing
#: host's kernel (software, CLOCK_REALTIME: tcpdump's "host"); the NIC, in the host's time ("adapter"); the
#: NIC's own clock, not synchronised to the host's ("adapter_unsynced"); an instrument's time base (a logic
#: analyzer's GMII probe, the simulated rig's).
CLOCKS = ("unknown", "kernel", "hardware", "adapter-unsynced", "instrument")

FRAME_DTYPE = np.dtype([
    ("time_ns", "<i8"), ("stamp", "<i8"), ("stamped", "?"), ("interface", "<i2"), ("clock", "i1"),
    ("caplen", "<i4"), ("origlen", "<i8"), ("flags", "<u4"), ("offset", "<i8"), ("file_offset", "<i8"),
])
FRAME_UNITS = {"time_ns": "ns", "caplen": "byte", "origlen": "byte", "offset": "byte", "file_offset": "byte",
               "stamp": "the interface's time unit (interfaces.tsresol)"}
INTERFACE_DTYPE = np.dtype([
    ("interface", "<i2"), ("section", "<i2"), ("origin_ns", "<i8"), ("link_type", "<i4"), ("snaplen", "<i8"),
    ("tsresol", "u1"),
    ("offset_s", "<i8"), ("fcs_bytes", "i1"), ("speed_bps", "<i8"), ("if_drops", "<i8"), ("os_drops", "<i8"),
    ("clock", "S20"), ("name", "S64"), ("description", "S128"), ("hardware", "S128"), ("os", "S128"),
    ("comment", "S256"),
])
COMMENT_DTYPE = np.dtype([("frame", "<i8"), ("comment", h5py.string_dtype())])
#: Rows per chunk of ``frames`` and bytes per chunk of ``data``.
FRAME_CHUNK = 1 << 14
DATA_CHUNK = 1 << 20


def clock_code(name: str) -> int:
    """The ``clock`` column's value for a clock name of :data:`CLOCKS`."""
    try:
        return CLOCKS.index(name)
    except ValueError:
        raise UsageError(f"clock {name!r}: one of {', '.join(CLOCKS)}") from None


class _Appender:
    """A growable 1-D dataset filled in whole chunks, each encoded on the chunk encoders and stored as it is
    (the last, partial one at :meth:`close`), so appending costs no HDF5 filter work in this thread."""

    def __init__(self, grp: h5py.Group, name: str, dtype: np.dtype, chunk: int):
        self.ds = grp.create_dataset(name, shape=(0,), maxshape=(None,), dtype=dtype, chunks=(chunk,), **STORAGE)
        self.direct = takes_encoded_chunks(self.ds)
        self.filters = dataset_filters(self.ds)
        self.chunk = chunk
        self.pending: list[np.ndarray] = []
        self.held = 0
        self.size = 0  # elements appended

    def append(self, rows: np.ndarray) -> None:
        self.pending.append(rows)
        self.held += len(rows)
        self.size += len(rows)
        if self.held >= self.chunk:
            self._store(final=False)

    def _store(self, final: bool) -> None:
        rows = np.concatenate(self.pending) if len(self.pending) != 1 else self.pending[0]
        whole = len(rows) if final else len(rows) - len(rows) % self.chunk
        if whole:
            n0 = self.ds.shape[0]
            self.ds.resize((n0 + whole,))
            if self.direct:
                starts = range(0, whole, self.chunk)
                done = encoder_pool().map(lambda c: encode_chunk(rows[c:min(c + self.chunk, whole)], self.chunk,
                                                                 self.filters), starts)
                for c, chunk in zip(starts, done):
                    self.ds.id.write_direct_chunk((n0 + c,), chunk)
            else:
                self.ds[n0:] = rows[:whole]
        self.pending = [rows[whole:]] if whole < len(rows) else []
        self.held = len(rows) - whole

    def close(self) -> None:
        if self.held:
            self._store(final=True)


@dataclass
class WireInfo:
    """A wire source's attributes (docs/formats.md, "Wire sources")."""

    name: str
    origin: str = ""
    format: str = ""
    file: str = ""
    frames: int = 0
    damage: str = ""
    sections: list[dict[str, Any]] | None = None
    capture: dict[str, Any] | None = None
    notes: str = ""


class WireWriter:
    """A new wire source of an open file (being created or amended): :meth:`append` batches, then :meth:`finish`."""

    def __init__(self, f: NicrigFile, name: str):
        import re

        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]*", name):
            raise UsageError(f"wire source name {name!r}: use letters, digits, '_', '.', '-'")
        if f.group(f"{GROUP}/{name}") is not None:
            raise UsageError(f"{f.path}: already has a wire source {name!r}")
        sources = getattr(f, "source_names", [])
        if name in sources:
            raise UsageError(f"{f.path}: already has a source {name!r}: give the wire source another name")
        self.f, self.name = f, name
        grp = f.group(f"{GROUP}/{name}", create=True)
        assert grp is not None
        self.grp = grp
        self._frames = _Appender(grp, "frames", FRAME_DTYPE, FRAME_CHUNK)
        self._data = _Appender(grp, "data", np.dtype(np.uint8), DATA_CHUNK)
        self._comments: list[tuple[int, str]] = []

    @property
    def frames(self) -> int:
        return self._frames.size

    def append(self, batch: Batch, time_ns: np.ndarray, clock: np.ndarray | int) -> None:
        """A batch of frames (:class:`nicrig.acquisition.pcap.Batch`), their times in ns and who stamped them."""
        n = len(batch)
        rows = np.zeros(n, FRAME_DTYPE)
        rows["time_ns"], rows["stamp"], rows["stamped"] = time_ns, batch.stamp, batch.stamped
        rows["interface"], rows["clock"], rows["caplen"] = batch.interface, clock, batch.caplen
        rows["origlen"], rows["flags"] = batch.origlen, batch.flags
        rows["offset"] = batch.starts + self._data.size
        rows["file_offset"] = batch.offset
        self._comments += [(self._frames.size + i, c) for i, c in sorted(batch.comments.items())]
        self._frames.append(rows)
        self._data.append(batch.data)

    def finish(self, interfaces: list[Interface], clocks: list[str], origins: list[int], info: WireInfo) -> None:
        """Store the last chunks, the interfaces (``clocks``: each one's clock name, ``origins`` each one's time at
        the timeline's 0) and the attributes."""
        self._frames.close()
        self._data.close()
        table = np.zeros(len(interfaces), INTERFACE_DTYPE)
        for i, (iface, clock, origin) in enumerate(zip(interfaces, clocks, origins)):
            table[i] = (i, iface.section, origin, iface.link_type, iface.snaplen, iface.tsresol, iface.offset_s,
                        iface.fcs_bytes, iface.speed_bps, iface.if_drops, iface.os_drops, clock.encode(),
                        *(v.encode("utf-8", "replace")[:size] for v, size in (
                            (iface.name, 64), (iface.description, 128), (iface.hardware, 128), (iface.os, 128),
                            (iface.comment, 256))))
        prefix = f"{GROUP}/{self.name}"
        self.f.write_table(f"{prefix}/interfaces", table,
                           units={"snaplen": "byte", "offset_s": "s", "fcs_bytes": "byte", "speed_bps": "bit/s",
                                  "origin_ns": "ns"},
                           description="the capture's interfaces: link type, snapshot length, time stamps' "
                                       "resolution (if_tsresol) and offset, FCS octets per frame (-1 unknown), "
                                       "speed (-1 unknown), drops (-1 unknown), the clock stamping them")
        comments = np.array(self._comments, dtype=COMMENT_DTYPE)
        self.f.write_table(f"{prefix}/comments", comments, description="frames' comments (opt_comment)")
        self._frames.ds.attrs["description"] = "one row per frame, in capture order"
        self._frames.ds.attrs["units"] = to_json(FRAME_UNITS)
        attrs = {"origin": info.origin, "format": info.format,
                 "file": info.file, "damage": info.damage, "sections": to_json(info.sections or []),
                 "capture": to_json(info.capture or {}), "notes": info.notes}
        for k, v in attrs.items():
            self.grp.attrs[k] = v


def fill_unstamped(times: np.ndarray, stamped: np.ndarray, last: int) -> np.ndarray:
    """Frames' times with each unstamped frame (a Simple Packet Block's) given the time of the stamped frame
    before it (``last`` for those before the batch's first stamped frame)."""
    if stamped.all():
        return times
    before = np.maximum.accumulate(np.where(stamped, np.arange(len(times)), -1))
    return np.where(before >= 0, times[np.maximum(before, 0)], last)


def names(f: NicrigFile) -> list[str]:
    """The wire sources a file holds."""
    grp = f.group(GROUP)
    return sorted(grp) if grp is not None else []


class WireSource:
    """A stored wire source, read lazily (frames and octets by range)."""

    def __init__(self, f: NicrigFile, name: str):
        grp = f.group(f"{GROUP}/{name}")
        if grp is None:
            raise UsageError(f"{f.path}: no wire source {name!r} (wire sources: {', '.join(names(f)) or 'none'})")
        self.path, self.name = f.path, name
        owner = f"{f.path}: wire source {name!r}"
        with reading(f.path, f"wire source {name!r}"):
            frames, data = grp.get("frames"), grp.get("data")
            if not isinstance(frames, h5py.Dataset) or not isinstance(data, h5py.Dataset):
                raise FormatError(f"{owner} is malformed: it needs the datasets 'frames' and 'data'")
            if frames.dtype.names is None or not set(FRAME_DTYPE.names or ()) <= set(frames.dtype.names):
                raise FormatError(f"{owner}: 'frames' lacks columns of {', '.join(FRAME_DTYPE.names or ())}")
            if data.dtype != np.uint8 or data.ndim != 1:
                raise FormatError(f"{owner}: 'data' is not a 1-D uint8 dataset")
            a = grp.attrs
            try:
                self.info = WireInfo(name=name, origin=str(a.get("origin", "")),
                                     format=str(a.get("format", "")), file=str(a.get("file", "")),
                                     frames=int(frames.shape[0]), damage=str(a.get("damage", "")),
                                     sections=json.loads(a.get("sections", "[]")),
                                     capture=json.loads(a.get("capture", "{}")), notes=str(a.get("notes", "")))
            except (KeyError, ValueError, TypeError) as exc:
                raise FormatError(f"{owner}: malformed attributes ({exc})") from None
            self.interfaces = f.read_table(f"{GROUP}/{name}/interfaces") if "interfaces" in grp \
                else np.zeros(0, INTERFACE_DTYPE)
            comments = grp.get("comments")
            self.comments = {int(r["frame"]): (r["comment"].decode() if isinstance(r["comment"], bytes)
                                               else str(r["comment"])) for r in comments[()]} \
                if isinstance(comments, h5py.Dataset) else {}
        self._frames, self._data = frames, data
        #: each interface's time at the timeline's 0 (ns of its clock)
        self.origins = self.interfaces["origin_ns"].astype(np.int64)

    def t_ns(self, rows: np.ndarray) -> np.ndarray:
        """Frames' times on the file's timeline: their ``time_ns`` less their interface's origin."""
        if len(rows) and int(rows["interface"].max()) >= len(self.origins):
            self.interface(int(rows["interface"].max()))
        return rows["time_ns"] - self.origins[rows["interface"]]

    def __len__(self) -> int:
        return int(self._frames.shape[0])

    def frames(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """Rows ``[start, stop)`` of ``frames``."""
        stop = len(self) if stop is None else min(stop, len(self))
        with reading(self.path, f"wire source {self.name!r} frames {start}..{stop}"):
            return self._frames[start:stop]

    def octets(self, rows: np.ndarray) -> np.ndarray:
        """The captured octets of consecutive frames ``rows`` (from :meth:`frames`), concatenated."""
        if not len(rows):
            return np.zeros(0, np.uint8)
        first = int(rows["offset"][0])
        last = int(rows["offset"][-1] + rows["caplen"][-1])
        with reading(self.path, f"wire source {self.name!r} data {first}..{last}"):
            return self._data[first:last]

    def blocks(self, frames_per_block: int = 1 << 16) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
        """``(first frame, rows, their octets)`` a block of frames at a time; ``rows["offset"]`` index the octets
        after subtracting the block's first offset."""
        for first in range(0, len(self), frames_per_block):
            rows = self.frames(first, first + frames_per_block)
            yield first, rows, self.octets(rows)

    def interface(self, k: int) -> np.void:
        if not 0 <= k < len(self.interfaces):
            raise FormatError(f"{self.path}: wire source {self.name!r}: a frame of interface {k}, which it does "
                              "not describe")
        return self.interfaces[k]

    def link_rate_bps(self, k: int) -> float:
        """The link rate of interface ``k`` (its ``if_speed``), 1 Gbit/s when the capture does not say: the ethernet
        decoder's default for PAUSE times and a frame's time on the wire."""
        speed = int(self.interface(k)["speed_bps"])
        return float(speed) if speed > 0 else 1e9

    def stamp_step_ns(self) -> float:
        """The coarsest interface's time stamp unit (ns; ``if_tsresol``), at least the 1 ns ``t_ns`` is kept in."""
        units = [2.0 ** -(r & 0x7F) if r & 0x80 else 10.0 ** -r for r in self.interfaces["tsresol"].tolist()]
        return max([1.0, *(u * 1e9 for u in units)])

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (``nicrig info``, ``nicrig import --json``)."""
        n = len(self)
        first = self.frames(0, 1) if n else None
        last = self.frames(n - 1, n) if n else None
        ifaces = [{"interface": int(r["interface"]), "name": r["name"].decode(), "origin_ns": int(r["origin_ns"]),
                   "link_type": int(r["link_type"]),
                   "snaplen": int(r["snaplen"]), "resolution": resolution_text(int(r["tsresol"])),
                   "clock": r["clock"].decode(), "fcs_bytes": int(r["fcs_bytes"]), "speed_bps": int(r["speed_bps"]),
                   "if_drops": int(r["if_drops"]), "os_drops": int(r["os_drops"])} for r in self.interfaces]
        return {"name": self.name, "kind": "wire", "frames": n, "format": self.info.format, "file": self.info.file,
                "origin": self.info.origin,
                "first_ns": int(self.t_ns(first)[0]) if n else None,
                "last_ns": int(self.t_ns(last)[0]) if n else None,
                "octets": int(self._data.shape[0]), "interfaces": ifaces, "damage": self.info.damage,
                "capture": self.info.capture, "notes": self.info.notes}
