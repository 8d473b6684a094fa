"""An open capture set as the GUI sees it: sources with their readers and pyramids, lanes, session.

A file with host traces (a capture set from ``nicrig trace record``, or a
udpmon results file recorded with ``--trace-host``) adds the host probe's
lanes per host and CPU, a wire source (``nicrig import`` of a pcap, or
``--capture``) its frames per direction, and a results file its packets: all on one timeline
whose zero is the first host trace's start (its CLOCK_MONOTONIC; the far
hosts' events moved by their estimated clock offsets), each host and the
packets a deskew group of their own (``host:<name>``, ``udpmon:<file>``).

Decoded tables are never read whole: their lanes draw from arrays the
preparer (:mod:`nicrig.gui.prepare`) keeps in the cache, mapped here once
made (lanes still loading are drawn as such), and labels read the rows they
name a stored chunk at a time.

The file stays open read-only while the window shows it; writers (decoding,
saving the session) run inside :meth:`Document.suspended`, which closes it and
opens it again afterwards, since HDF5 lets one process hold a file in one mode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from nicrig.acquisition import wire
from nicrig.acquisition.hostprobe import events as hp
from nicrig.gui import overview, prepare, session
from nicrig.gui.chunks import StoredChunks
from nicrig.gui.lanes import (
    DECODED_LANES,
    Lane,
    WIRE_TITLES,
    LaneArrays,
    SourceData,
    decoded_lane,
    host_lanes,
    packet_lanes,
    udpmon_series,
)
from nicrig.h5file import open_any, reading

#: Roles whose channels are shown at first (the rest can be shown from the lanes panel).
SHOWN_ROLES = {"frame", "irdy", "trdy", "devsel", "stop", "inta", "tx_en", "rx_dv", "act"}
_SIDE_ORDER = (("send", 0), ("probe", 1), ("gmii", 1), ("wire", 1), ("recv", 2))
#: Stored chunks of a decoded table kept for labels (a few hundred rows each).
KEPT_TABLE_CHUNKS = 256
#: A view's rows are read ahead when they lie in at most this many stored chunks (a few hundred rows each).
READ_AHEAD_TABLE_CHUNKS = 32


def source_rank(name: str, bus_kind: str) -> tuple[int, str]:
    """Sending bus, then the wire, then the receiving bus (the order of Hughes-Jones et al. 2003, figure 4.3), then
    the rest."""
    low = name.lower()
    for word, rank in _SIDE_ORDER:
        if word in low or (word == "gmii" and bus_kind == "gmii"):
            return rank, low
    return 3, low


class DecodedTable:
    """A decoded table as the view reads it: its lanes' arrays (mapped from the cache once prepared), its rows a
    stored chunk at a time (for labels and readouts), and its descriptions for the event search."""

    def __init__(self, name: str, source: str, decoder: str, ds: h5py.Dataset, path: Path):
        self.name, self.source, self.decoder, self.ds = name, source, decoder, ds
        self.arrays: list[LaneArrays] | None = None
        #: view time minus file time (ns): a results file's wire frames are on CLOCK_MONOTONIC, as its host traces
        self.shift_ns = 0
        self.text: np.ndarray | None = None
        self._chunks = StoredChunks(ds, str(path), f"table {name}")
        self.ahead = overview.ReadAhead()
        self._kept = overview.Kept(KEPT_TABLE_CHUNKS)
        self._ahead_chunks = range(0)  # the chunks the piece read ahead last was asked for

    def __len__(self) -> int:
        return self._chunks.n

    def load(self, folder: Path) -> bool:
        """Map the lanes (and, when made, the descriptions) prepared in ``folder``; False when unusable."""
        arrays = prepare.load_lanes(folder)
        if arrays is None:
            return False
        self.arrays = arrays if not self.shift_ns else [
            LaneArrays(a.t_ns + self.shift_ns, a.t_end_ns + self.shift_ns, a.style, a.category, a.rows,
                       a.reach + self.shift_ns, a.widest, a.starts) for a in arrays]
        self.text = prepare.load_text(folder)
        return True

    def row(self, i: int) -> np.void:
        """Row ``i`` (its stored chunk is read once and kept while recently used)."""
        k = i // self._chunks.chunk_rows
        return self._kept.get(k, lambda: self._chunks.rows(k))[i - k * self._chunks.chunk_rows]

    def read_ahead(self, t0_ns: float, t1_ns: float, then: tuple[float, float] | None = None) -> None:
        """Read on the read-ahead thread the stored chunks of the rows overlapping the view expected next, ``then``
        (a wheel turn in: the next turn alike names them), else those of the view ``[t0_ns, t1_ns]`` (view time,
        before deskew), when they are at most ``READ_AHEAD_TABLE_CHUNKS`` and some are not kept: zoomed in from
        here, the boxes given room for their words take their rows from memory instead of inflating chunks within
        the frame. After a wheel turn the rest of the view's rows are not read: the next turn names few of them, and
        every reader's sample blocks queued after them on the one read-ahead thread would come later. For the same
        reason the chunks still being read ahead for another view are left at the next chunk (a wheel spun on has
        passed that view) and these read instead."""
        if self.arrays is None:
            return
        span = self._rows_in(*(then or (t0_ns, t1_ns)), READ_AHEAD_TABLE_CHUNKS * self._chunks.chunk_rows)
        if span is None:
            return
        chunks = range(span[0] // self._chunks.chunk_rows, span[1] // self._chunks.chunk_rows + 1)
        if self.ahead.busy() and chunks == self._ahead_chunks:
            return
        missing = [k for k in chunks if k not in self._kept] if len(chunks) <= READ_AHEAD_TABLE_CHUNKS else []
        if missing:
            # the chunks of a view read ahead before and not coming any more are left: the pieces queued behind
            # them (another table's, a source's sample blocks) would wait for them
            self._ahead_chunks = chunks
            self.ahead.replace(self._fill, missing)

    def _fill(self, chunks: list[int]) -> None:
        for k in chunks:
            if self.ahead.dropped():
                return
            self._kept.fill(k, lambda k=k: self._chunks.rows(k))

    def _rows_in(self, t0_ns: float, t1_ns: float, most: int | None = None) -> tuple[int, int] | None:
        """The first and last row of the table whose boxes overlap ``[t0_ns, t1_ns]`` (view time, before deskew)
        in any of its lanes, or None (none, the lanes not prepared, or more than ``most`` boxes in a lane: their
        rows are not looked through)."""
        if self.arrays is None:
            return None
        spans = []
        for lane in self.arrays:
            i0 = int(np.searchsorted(lane.reach, t0_ns, side="left"))
            i1 = int(np.searchsorted(lane.t_ns, t1_ns, side="right"))
            if most is not None and i1 - i0 > most:
                return None
            if i1 > i0:
                spans += [i0, i1 - 1] if lane.rows is None else [int(lane.rows[i0:i1].min()),
                                                                   int(lane.rows[i0:i1].max())]
        return (min(spans), max(spans)) if spans else None

    def lane_text(self, k: int) -> np.ndarray | None:
        """Descriptions of lane ``k``'s boxes, or None until made."""
        if self.text is None or self.arrays is None:
            return None
        rows = self.arrays[k].rows
        return self.text if rows is None else self.text[rows]

    def overlapping(self, t0_ns: float, t1_ns: float) -> np.ndarray:
        """Rows whose span overlaps ``[t0_ns, t1_ns]`` (view time, before deskew), read from the few chunks that
        hold them; their times in view time."""
        rows = self._overlapping(t0_ns, t1_ns)
        if self.shift_ns:
            for col in ("t_ns", "t_end_ns"):
                rows[col] += self.shift_ns
        return rows

    def _overlapping(self, t0_ns: float, t1_ns: float) -> np.ndarray:
        if self.arrays is None:
            with reading(self._chunks.path, f"table {self.name}"):
                rows = self.ds[()]
        else:
            span = self._rows_in(t0_ns, t1_ns)
            if span is None:
                return np.zeros(0, self.ds.dtype)
            with reading(self._chunks.path, f"table {self.name}"):
                rows = self.ds[span[0]:span[1] + 1]
        t0_ns, t1_ns = t0_ns - self.shift_ns, t1_ns - self.shift_ns
        return rows[(rows["t_end_ns"] >= t0_ns) & (rows["t_ns"] <= t1_ns)]


class Document:
    """A capture set opened for viewing."""

    def __init__(self, path: str | Path, opened: Any = None):
        """The capture set at ``path``; ``opened``, when given, is it open already (the document closes it)."""
        self.path = Path(path)
        self.cs = opened if opened is not None else open_any(self.path)
        self.closed = False
        self.data: dict[str, SourceData] = {}
        self.decoded: dict[str, DecodedTable] = {}
        try:
            self.session, self.session_note = session.load(self.path, self.cs)
            self._attach(pyramids={})
        except BaseException:
            self.close()
            raise
        self.lanes: list[Lane] = []
        #: lanes of measured phases per source (from the measurements panel), kept across rebuilds
        self.phase_lanes: dict[str, Lane] = {}
        self.build_lanes()

    # -- opening and reopening -------------------------------------------------------------
    def _attach(self, pyramids: dict[str, overview.Pyramid]) -> None:
        self.data = {}
        for name in getattr(self.cs, "source_names", []):
            src = self.cs.source(name)
            pyr = pyramids.get(name)
            if pyr is not None and pyr.total == src.num_samples:
                pyr.source = src
            else:
                pyr = overview.load_cached(self.path, src) or overview.Pyramid(src)
            self.data[name] = SourceData(src, pyr)
        names = self.cs.table_names()
        #: wire sources (frames from a pcap, or a udpmon run's --capture): lanes from their decoded ethernet tables
        self.wire = wire.names(self.cs)
        results = self.cs.FORMAT_NAME == "nicrig-results"
        self.traces = [hp.read(self.cs, h) for h in hp.hosts(self.cs)]
        local = [t for t in self.traces if not t.clock_reference] or self.traces
        #: CLOCK_MONOTONIC ns at the view's zero in a results file: the first host trace's start, else the first
        #: frame its wire capture saw (a capture set's timeline has its own zero)
        self.base_ns = min((t.start_ns for t in local), default=0)
        if results and not local and self.wire:
            firsts = [int(ds["t_ns"].min()) for n in self.wire if f"decoded/{n}/ethernet" in names
                      and len(ds := self.cs.table_dataset(f"decoded/{n}/ethernet"))]
            self.base_ns = min(firsts, default=0)
        self.decoded = {}
        for table, source, decoder in prepare.decoded_tables(names):
            ds = self.cs.table_dataset(table)
            dt = DecodedTable(table, source, decoder, ds, self.path)
            if results and source in self.wire:
                dt.shift_ns = -self.base_ns
            folder = prepare.table_folder(self.path, ds)
            if folder is not None:
                dt.load(folder)
            self.decoded[table] = dt
        self.packets: dict[str, np.ndarray] = {
            t: self.cs.read_table(t) for t in ("stream/sent", "stream/received", "latency/rtt")
            if t in names and (self.traces or self.wire)}

    @property
    def prepared(self) -> bool:
        """Whether everything the view draws and searches is ready (pyramids, decoded lanes, search index)."""
        return all(d.pyramid.complete for d in self.data.values()) and \
            all(t.arrays is not None and t.text is not None for t in self.decoded.values())

    def take(self, message: dict[str, Any]) -> str | None:
        """Apply a message of the preparer (:mod:`nicrig.gui.prepare`): what it changed (``"lanes"``,
        ``"pyramid"``, ``"text"``), or None."""
        if "pyramid" in message and message["pyramid"] in self.data:
            p = self.data[message["pyramid"]].pyramid
            folder = Path(message["folder"])
            if "end_ps" in message:
                p.finish(folder, int(message["end_ps"]))
            elif not p.complete:
                if p.folder is None:
                    try:
                        p.attach(folder)
                    except OSError:  # finished and moved meanwhile: its last message names where
                        return None
                p.advance(int(message["bins"]), int(message["covered_ps"]))
            return "pyramid"
        table = self.decoded.get(message.get("lanes") or message.get("text") or "")
        if table is None:
            return None
        if "lanes" in message:
            if table.load(Path(message["folder"])):
                self.build_lanes()
            return "lanes"
        table.text = prepare.load_text(Path(message["folder"]))
        ids = {f"{table.source}/decoded/{suffix}": k for k, (suffix, _, _) in enumerate(DECODED_LANES[table.decoder])}
        for lane in self.lanes:
            if lane.boxes is not None and lane.id in ids:
                lane.boxes.text = table.lane_text(ids[lane.id])
        return "text"

    def _stop_reading_ahead(self) -> None:
        """Stop every reader's reading ahead (before the file is closed): the running piece finishes, no more start."""
        for reader in [d.cache for d in self.data.values()] + list(self.decoded.values()):
            reader.ahead.stop()

    def detach(self) -> None:
        """Close the file so that a writer may open it; the readers stay as they were until :meth:`reattach`."""
        self._kept = {n: d.pyramid for n, d in self.data.items()}
        self._stop_reading_ahead()
        self.cs.close()

    def reattach(self) -> None:
        """Open the file again after a writer, with its new tables; finished pyramids are kept."""
        self.cs = type(self.cs).open(self.path)
        self._attach(getattr(self, "_kept", {}))
        self.build_lanes()

    @contextmanager
    def suspended(self) -> Iterator[Path]:
        """Close the file for a writer (``with doc.suspended() as path: ...``), then open it again."""
        self.detach()
        try:
            yield self.path
        finally:
            self.reattach()

    def make_decoded_lanes(self) -> None:
        """Make, in this process, the decoded lanes no preparer has made yet (a command without a view: an
        export), then build the lanes."""
        with ThreadPoolExecutor(overview.BUILD_THREADS, thread_name_prefix="nicrig-lanes") as pool:
            for t in self.decoded.values():
                if t.arrays is None:
                    t.arrays = prepare.table_lanes(self.cs, t.name, t.decoder, pool)
        self.build_lanes()

    def close(self) -> None:
        """Close the file and let go of the decoded lanes mapped from the cache (every mapping holds a
        descriptor of its file open until it is dropped); the pyramids stay, another document may share them."""
        self._stop_reading_ahead()
        self.cs.close()
        self.closed = True
        for table in self.decoded.values():
            table.arrays = table.text = None
        self.lanes = []

    def save_session(self) -> Path:
        with self.suspended() as path:
            return session.save(path, self.session)

    # -- lanes -------------------------------------------------------------------------------
    def source_order(self) -> list[str]:
        """Logic and wire sources in the timeline's order (:func:`source_rank`)."""
        kinds = {**{n: str(d.source.bus.get("kind", "")) for n, d in self.data.items()}, **{n: "wire" for n in self.wire}}
        return sorted(kinds, key=lambda n: source_rank(n, kinds[n]))

    def build_lanes(self) -> None:
        """Every lane: per source a header, its decoded lanes, its vectors and single channels."""
        lanes: list[Lane] = []
        for name in self.source_order():
            src = self.data[name].source if name in self.data else None
            title = name if src is not None else f"{name} (wire)"
            lanes.append(Lane(f"{name}/", name, title, "header", height=0.9, group=name))
            if name in self.phase_lanes:
                lanes.append(self.phase_lanes[name])
            for table in (t for t in self.decoded.values() if t.source == name):
                for k, (suffix, _, _) in enumerate(DECODED_LANES[table.decoder]):
                    if src is not None and suffix == "ethernet/any":
                        continue  # a GMII probe's frames always have a direction
                    arrays = table.arrays[k] if table.arrays is not None else None
                    if arrays is not None and not len(arrays.t_ns) and len(DECODED_LANES[table.decoder]) > 1:
                        continue  # a direction without frames
                    lane = decoded_lane(name, table.decoder, k, arrays, table.row)
                    if src is None:
                        lane.title = WIRE_TITLES[k]
                    if lane.boxes is not None:
                        lane.boxes.text = table.lane_text(k)
                    lanes.append(lane)
            if src is None:
                continue
            in_vectors = {c for bits in src.vectors.values() for c in bits}
            for vec in src.vectors:
                lanes.append(Lane(f"{name}/{vec}", name, f"{vec}[{len(src.vectors[vec]) - 1}:0]", "vector",
                                  bits=src.vector_bits(vec), group=name))
            for ch in src.channels:
                if ch not in in_vectors:
                    lanes.append(Lane(f"{name}/{ch}", name, ch, "logic", bit=src.channel_index(ch), group=name))
        for trace in self.traces:
            lanes += host_lanes(trace, self.base_ns)
        if self.packets:
            far = next((t.clock_offset_ns for t in self.traces if t.clock_reference), 0.0)
            lanes += packet_lanes(self.path.name, udpmon_series(self.packets, far, self.base_ns))
        self.lanes = lanes

    def default_hidden(self) -> list[str]:
        """Vectors and channels without a shown role start hidden (a 64-bit bus has 90 channels)."""
        hidden = []
        for lane in self.lanes:
            if lane.kind in ("logic", "vector"):
                roles = {r for r, target in self.data[lane.source].source.roles.items()
                         if target == lane.title or re.sub(r"\[.*", "", lane.title) == target}
                if not roles & SHOWN_ROLES:
                    hidden.append(lane.id)
        return hidden

    def visible_lanes(self) -> list[Lane]:
        """Shown lanes in the session's order (lanes it does not know keep their place after the known)."""
        by_id = {lane.id: lane for lane in self.lanes}
        order = [i for i in self.session.order if i in by_id]
        order += [lane.id for lane in self.lanes if lane.id not in set(order)]
        hidden = set(self.session.hidden)
        # a source's lanes stay under its header: group first, then the order within the group
        groups = [n for n in dict.fromkeys(by_id[i].group for i in order)]
        out = []
        for g in groups:
            out += [by_id[i] for i in order if by_id[i].group == g and i not in hidden]
        return out

    # -- time --------------------------------------------------------------------------------
    def extent_ns(self) -> tuple[float, float]:
        """First and last sample time over all sources, deskew included (ns)."""
        lo, hi = [], []
        for name, d in self.data.items():
            if d.source.num_samples:
                lo.append(d.first_ps / 1000 + self.session.offset(name))
                hi.append(d.end_ps / 1000 + self.session.offset(name))
        for lane in self.lanes:
            if lane.boxes is not None and len(lane.boxes) and (lane.source.startswith(("host:", "udpmon:"))
                                                               or lane.source in self.wire):
                lo.append(float(lane.boxes.t_ns[0]) + self.session.offset(lane.source))
                hi.append(float(lane.boxes.reach()[-1]) + self.session.offset(lane.source))
        return (min(lo), max(hi)) if lo else (0.0, 1.0)

    def host_shift_ns(self, trace: hp.HostTrace) -> float:
        """View time minus a host's CLOCK_MONOTONIC: its clock offset, the view's base and its deskew."""
        return trace.clock_offset_ns - self.base_ns + self.session.offset(f"host:{trace.host}")

    def packets_view_ns(self, span_ns: float = 400_000.0) -> tuple[float, float] | None:
        """Where a traced run's packets start (the first packet sent, 50 us before to ``span_ns`` after), on
        the view's time: the first view of a file with no bus sources."""
        sent = self.packets.get("stream/sent")
        if sent is not None and (sent["t_ns"] >= 0).any():
            t = float(sent["t_ns"][sent["t_ns"] >= 0].min() - self.base_ns)
        elif "latency/rtt" in self.packets and len(self.packets["latency/rtt"]):
            t = float(self.packets["latency/rtt"]["t_ns"].min() - self.base_ns)
        else:
            return None
        return t - 50_000.0, t + span_ns

    def read_ahead(self, t0_ns: float, t1_ns: float, then: tuple[float, float] | None = None) -> None:
        """Read ahead the decoded tables' rows under the view ``[t0_ns, t1_ns]``, or the view ``then`` expected next
        (see :meth:`DecodedTable.read_ahead`), each at its source's deskew."""
        for table in self.decoded.values():
            shift = self.session.offset(table.source)
            table.read_ahead(t0_ns - shift, t1_ns - shift, None if then is None else (then[0] - shift, then[1] - shift))

    def tables_in_range(self, t0_ns: float, t1_ns: float) -> dict[str, np.ndarray]:
        """Rows of each decoded table (keyed ``source/decoder``) that overlap ``[t0_ns, t1_ns]`` of the view, their
        times moved by their source's deskew (for analysis of the aligned view)."""
        out = {}
        for name, table in self.decoded.items():
            shift = round(self.session.offset(table.source))
            rows = table.overlapping(t0_ns - shift, t1_ns - shift)
            for col in ("t_ns", "t_end_ns"):
                rows[col] += shift
            out[name.split("/", 1)[1]] = rows
        return out
