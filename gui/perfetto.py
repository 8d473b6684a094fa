"""The aligned timeline as a Perfetto trace: host events, decoded bus transactions, frames and packets.

Beside the GUI, since it writes the GUI's own timeline (``nicrig trace export`` calls it). What the
GUI's timeline shows (its lanes, with the session's deskew and the
far hosts' clock offsets: :class:`nicrig.gui.document.Document`, which needs
no display) is written as a Perfetto protobuf trace (``TracePacket`` /
``TrackEvent``, the format the Perfetto UI at ui.perfetto.dev opens), built
with the message classes of the ``perfetto`` package:

* one process track per group (a capture set's source, a host, udpmon's
  packets), one child track per lane (``cpu0 softirq``, ``PCI transactions``);
* one slice per box, named by its short label with the full label as a
  debug annotation (udpmon's packets: instant events); boxes of a lane that
  overlap without nesting (calls of two threads) go to extra tracks
  ``<lane> (2)``..., so every slice is kept;
* timestamps in ns: the view's time plus ``zero_ns`` (the first host trace's
  CLOCK_MONOTONIC at the view's zero, so host events keep their own times;
  without host traces, what makes the earliest box 0), which the command prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from nicrig.gui.lanes import STYLE_NAMES

#: Perfetto's sequence id for our packets (any non-zero number, one writer).
SEQUENCE_ID = 1
#: Boxes of this style (udpmon's packets) are instants.
PACKET_STYLE = STYLE_NAMES.index("packet")


def sub_tracks(t0: np.ndarray, t1: np.ndarray) -> np.ndarray:
    """For boxes sorted by start, the sub-track each goes to so that boxes on one sub-track never overlap
    without nesting (greedy interval partitioning: the first sub-track free at its start)."""
    ends: list[float] = []
    out = np.zeros(len(t0), dtype=np.int32)
    for i, (a, b) in enumerate(zip(t0, t1)):
        for k, end in enumerate(ends):
            if end <= a:
                ends[k], out[i] = b, k
                break
        else:
            ends.append(b)
            out[i] = len(ends) - 1
    return out


def timeline_lanes(doc: Any) -> Iterator[tuple[str, str, np.ndarray, np.ndarray, Any]]:
    """(group, lane title, start ns, end ns, boxes) of every box lane of a document, deskew applied."""
    for lane in doc.lanes:
        if lane.kind == "decoded" and lane.boxes is not None and len(lane.boxes):
            shift = doc.session.offset(lane.source)
            yield lane.group, lane.title, lane.boxes.t_ns + shift, lane.boxes.t_end_ns + shift, lane.boxes


def write_trace(doc: Any, out: BinaryIO, progress: Callable[[int, int], None] = lambda done, total: None
                ) -> dict[str, int]:
    """Write a document's timeline as a Perfetto trace; returns counts (tracks, slices) and ``zero_ns``.

    ``progress(boxes written, boxes)`` after each lane."""
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
    from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder

    lanes = list(timeline_lanes(doc))
    earliest = min((float(t0.min()) for _, _, t0, _, _ in lanes), default=0.0)
    zero_ns = int(doc.base_ns) if doc.base_ns else int(-min(earliest, 0.0))
    builder = StreamingTraceProtoBuilder(out)
    counts = {"tracks": 0, "slices": 0, "instants": 0, "zero_ns": zero_ns}
    total, done = sum(len(t0) for _, _, t0, _, _ in lanes), 0

    def track(name: str, parent: int | None) -> int:
        uuid = counts["tracks"] + 1  # any number unique in the trace
        p = builder.create_packet()
        p.track_descriptor.uuid = uuid
        p.track_descriptor.name = name
        if parent is not None:
            p.track_descriptor.parent_uuid = parent
        builder.write_packet(p)
        counts["tracks"] += 1
        return uuid

    groups: dict[str, int] = {}
    for group, title, t0, t1, boxes in lanes:
        if group not in groups:
            groups[group] = track(group, None)
        order = np.argsort(t0, kind="stable")
        instant = boxes.style[order] == PACKET_STYLE  # a packet is a moment, not a span
        sub = np.where(instant, 0, sub_tracks(t0[order], np.where(instant, t0[order], t1[order])))
        tracks = [track(title if k == 0 else f"{title} ({k + 1})", groups[group]) for k in range(int(sub.max()) + 1)]
        for j, i in enumerate(order):
            labels = boxes.labels(int(i))
            steps = ((TrackEvent.TYPE_INSTANT, t0[i]),) if instant[j] else (
                (TrackEvent.TYPE_SLICE_BEGIN, t0[i]), (TrackEvent.TYPE_SLICE_END, max(t1[i], t0[i])))
            for kind, t in steps:
                p = builder.create_packet()
                p.timestamp = int(round(t)) + zero_ns
                p.trusted_packet_sequence_id = SEQUENCE_ID
                p.track_event.type = kind
                p.track_event.track_uuid = tracks[sub[j]]
                if kind != TrackEvent.TYPE_SLICE_END:
                    p.track_event.name = labels[1] if len(labels) > 1 else labels[0]
                    note = p.track_event.debug_annotations.add()
                    note.name = "event"
                    note.string_value = labels[0]
                builder.write_packet(p)
            counts["instants" if instant[j] else "slices"] += 1
        done += len(order)
        progress(done, total)
    return counts


def export(path: Path, out: Path, progress: Callable[[int, int], None] = lambda done, total: None
           ) -> dict[str, int]:
    """``nicrig trace export``: the timeline of a capture set or results file into ``out`` (:func:`write_trace`)."""
    from nicrig.gui.document import Document

    from nicrig.atomic import replacing

    doc = Document(path)
    try:
        doc.make_decoded_lanes()
        with replacing(out) as tmp, open(tmp, "wb") as f:
            return write_trace(doc, f, progress)
    finally:
        doc.close()
