"""An open capture set as the GUI sees it: sources with their readers and pyramids, lanes, session.

A file with host traces (a capture set from ``nicrig trace record``, or a
udpmon results file recorded with ``--trace-host``) adds the host probe's
lanes per host and CPU, and a results file its packets: all on one timeline
whose zero is the first host trace's start (its CLOCK_MONOTONIC; the far
hosts' events moved by their estimated clock offsets), each host and the
packets a deskew group of their own (``host:<name>``, ``udpmon:<file>``).

The file stays open read-only while the window shows it; writers (decoding,
saving the session) run inside :meth:`Document.suspended`, which closes it and
opens it again afterwards, since HDF5 lets one process hold a file in one mode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from nicrig.acquisition.hostprobe import events as hp
from nicrig.gui import overview, session
from nicrig.gui.lanes import Lane, SourceData, decoded_lanes, host_lanes, packet_lanes, udpmon_series
from nicrig.h5file import open_any

#: Roles whose channels are shown at first (the rest can be shown from the lanes panel).
SHOWN_ROLES = {"frame", "irdy", "trdy", "devsel", "stop", "inta", "tx_en", "rx_dv", "act"}
_SIDE_ORDER = (("send", 0), ("probe", 1), ("gmii", 1), ("wire", 1), ("recv", 2))


def source_rank(name: str, bus_kind: str) -> tuple[int, str]:
    """Sending bus, then the wire, then the receiving bus (seed 002 figure 4.3's order), then the rest."""
    low = name.lower()
    for word, rank in _SIDE_ORDER:
        if word in low or (word == "gmii" and bus_kind == "gmii"):
            return rank, low
    return 3, low


class Document:
    """A capture set opened for viewing."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.cs = open_any(self.path)
        self.session, self.session_note = session.load(self.path)
        self.data: dict[str, SourceData] = {}
        self.tables: dict[str, np.ndarray] = {}
        self._attach(pyramids={})
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
        self.tables = {t: self.cs.read_table(t) for t in names if t.startswith("decoded/")}
        self.traces = [hp.read(self.cs, h) for h in hp.hosts(self.cs)]
        local = [t for t in self.traces if not t.clock_reference] or self.traces
        #: CLOCK_MONOTONIC ns at the view's zero: the first host trace's start
        self.base_ns = min((t.start_ns for t in local), default=0)
        self.packets: dict[str, np.ndarray] = {
            t: self.cs.read_table(t) for t in ("stream/sent", "stream/received", "latency/rtt")
            if t in names and self.traces}

    def detach(self) -> None:
        """Close the file so that a writer may open it; the readers stay as they were until :meth:`reattach`."""
        self._kept = {n: d.pyramid for n, d in self.data.items()}
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

    def close(self) -> None:
        self.cs.close()

    def save_session(self) -> Path:
        with self.suspended() as path:
            return session.save(path, self.session)

    # -- lanes -------------------------------------------------------------------------------
    def source_order(self) -> list[str]:
        return sorted(self.data, key=lambda n: source_rank(n, str(self.data[n].source.bus.get("kind", ""))))

    def build_lanes(self) -> None:
        """Every lane: per source a header, its decoded lanes, its vectors and single channels."""
        lanes: list[Lane] = []
        for name in self.source_order():
            src = self.data[name].source
            lanes.append(Lane(f"{name}/", name, name, "header", height=0.9, group=name))
            if name in self.phase_lanes:
                lanes.append(self.phase_lanes[name])
            for table in sorted(t for t in self.tables if t.startswith(f"decoded/{name}/")):
                lanes += decoded_lanes(name, table.rsplit("/", 1)[1], self.tables[table])
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
            if lane.boxes is not None and len(lane.boxes) and lane.source.startswith(("host:", "udpmon:")):
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

    def table_shifted(self, name: str) -> np.ndarray:
        """A decoded table with its times moved by its source's deskew (for analysis of the aligned view)."""
        table = self.tables[name].copy()
        shift = round(self.session.offset(name.split("/")[1]))
        for col in ("t_ns", "t_end_ns"):
            table[col] += shift
        return table
