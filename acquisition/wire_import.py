"""``nicrig import CAPTURE.pcap[ng] -o SET.h5``: a packet capture as a wire source (:mod:`nicrig.acquisition.wire`).

The file is read front to back in batches (:class:`nicrig.acquisition.pcap.CaptureReader`) and its frames
appended to the new source chunk by chunk, so memory stays bounded whatever its size. A damaged file
keeps every frame before the damage: the source is written with them, the damage (byte offset and
reason) recorded in it and printed, and the command exits 1.

Where the frames lie on the set's timeline (each interface's ``origin_ns``, the stamp at its 0):
``--time-origin`` when given; else the origin a pcapng nicrig exported names (each interface's
comment), so a source exported and imported back keeps its times; else, appended to a capture set,
the origin of a wire source it has, the set's trigger as the host saw it (``nicrig acquire``) or its
creation time (the second nicrig's exports count from); else the first frame.
Who stamped the frames is not in pcap or pcapng files: ``--stamp-clock`` says it; a pcapng nicrig wrote
names it in each interface's comment; otherwise it is ``unknown``.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.acquisition import wire
from nicrig.acquisition.pcap import CaptureReader, DamagedCapture, resolution_text, stamps_to_ns

#: The comments nicrig writes into the pcapng files it exports, and reads back.
ORIGIN_COMMENT = "nicrig: time 0 of the timeline is {s}.{ns:09d} s"
CLOCK_COMMENT = "nicrig: stamped by {clock}"
ERROR_COMMENT = "nicrig: {n} octets with the GMII error line high"
_ORIGIN = re.compile(r"nicrig: time 0 of the timeline is (-?\d+)\.(\d{9}) s")
_CLOCK = re.compile(r"nicrig: stamped by ([a-z-]+)")
_ERRORS = re.compile(r"nicrig: (\d+) octets with the GMII error line high")
LINK_TYPES = {0: "BSD loopback", 1: "Ethernet", 101: "raw IP", 113: "Linux cooked (SLL)", 276: "Linux cooked v2",
              127: "802.11 radiotap", 228: "IPv4"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``nicrig import`` that apply to packet captures."""
    g = p.add_argument_group("pcap and pcapng input")
    g.add_argument("--stamp-clock", choices=[c for c in wire.CLOCKS if c != "unknown"],
                   help="who stamped the frames, which pcap and pcapng do not record: kernel (tcpdump's default, "
                        "'host'), hardware (tcpdump -j adapter), adapter-unsynced (-j adapter_unsynced) or "
                        "instrument (a logic analyzer's time base)")
    g.add_argument("--time-origin", metavar="SECONDS",
                   help="the capture time that is 0 on the set's timeline, decimal seconds since 1970 to the ns "
                        "(default: the origin a nicrig export names, else the set's trigger or creation time when "
                        "appending, else the first frame)")


def parse_epoch_ns(text: str) -> int:
    """``1764158400.000123456`` (decimal seconds since 1970, at most 9 decimals) as integer ns."""
    from nicrig.errors import UsageError

    m = re.fullmatch(r"\s*(-?)(\d+)(?:\.(\d{1,9}))?\s*", text)
    if not m:
        raise UsageError(f"--time-origin {text!r}: give decimal seconds since 1970-01-01 UTC, e.g. 1764158400.5")
    ns = int(m[2]) * 10 ** 9 + int((m[3] or "").ljust(9, "0"))
    return -ns if m[1] else ns


def origin_comment(epoch_ns: int) -> str:
    """The section comment that names the timeline's origin in a pcapng nicrig writes."""
    s, ns = divmod(epoch_ns, 10 ** 9)
    return ORIGIN_COMMENT.format(s=s, ns=ns)


def error_octets(comment: str) -> int:
    """The error octet count a frame's comment (written by nicrig's export) states; 0 when none."""
    m = _ERRORS.search(comment)
    return int(m[1]) if m else 0


def _set_origin(cs: Any) -> tuple[int, str] | None:
    """The origin an existing capture set gives: its trigger as the host saw it, else its creation second."""
    from datetime import datetime

    if "acquisition/instruments" in cs.table_names():
        rows = cs.read_table("acquisition/instruments")
        seen = rows["trigger_host_ns"][rows["trigger_host_ns"] >= 0]
        if len(seen):
            return int(seen.min()), "the set's trigger as the host saw it (acquisition/instruments)"
    try:
        created = datetime.fromisoformat(str(cs.attrs.get("created_utc", "")))
    except ValueError:
        return None
    if created.tzinfo is None:
        return None
    return int(created.timestamp()) * 10 ** 9, f"the set's creation time {created.isoformat()}"


class _Times:
    """Frames' times in ns, per interface, with a Simple Packet Block's frame (no stamp) given the last stamp."""

    def __init__(self) -> None:
        self.last = 0

    def of(self, reader: CaptureReader, batch: Any) -> np.ndarray:
        out = np.zeros(len(batch), np.int64)
        for k in np.unique(batch.interface):
            iface = reader.interfaces[int(k)]
            mine = batch.interface == k
            out[mine] = stamps_to_ns(batch.stamp[mine], iface.tsresol, iface.offset_s)
        out = wire.fill_unstamped(out, batch.stamped, self.last)
        if len(batch):
            self.last = int(out[-1])
        return out


def _clock_of(iface: Any, given: str | None) -> str:
    if given:
        return given
    m = _CLOCK.search(iface.comment)
    return m[1] if m and m[1] in wire.CLOCKS else "unknown"


def run(args: argparse.Namespace, path: Path, fmt: str) -> int:
    """Import ``path`` (pcap or pcapng) as a wire source; exit status 0, or 1 when it was damaged."""
    import sys

    from nicrig.acquisition.capture import CaptureSet
    from nicrig.acquisition.importing import source_name_from
    from nicrig.errors import FormatError, UsageError
    from nicrig.progress import Progress

    origin_given = parse_epoch_ns(args.time_origin) if args.time_origin is not None else None
    out = Path(args.output)
    name = args.source or source_name_from(path)
    damage = ""
    with Progress() as bar:
        progress = bar.task(f"import: reading {path.name}", unit="bytes")
        with CaptureReader(path, progress) as reader:
            if reader.format != fmt:
                raise UsageError(f"{path}: a {reader.format} file, not {fmt} (its extension or --format says {fmt})")
            cs = CaptureSet.amend(out) if args.append else CaptureSet.create(out, notes=f"imported from {path.name}",
                                                                               overwrite=args.force)
            with cs:  # an error abandons the new file or the copy: an existing set stays as it was
                w = wire.WireWriter(cs, name)
                times, clocks = _Times(), np.zeros(0, np.int8)
                first_ns: int | None = None
                try:
                    for batch in reader.batches():
                        if len(clocks) < len(reader.interfaces):
                            clocks = np.array([wire.clock_code(_clock_of(i, args.stamp_clock))
                                               for i in reader.interfaces], np.int8)
                        t = times.of(reader, batch)
                        if first_ns is None and batch.stamped.any():
                            first_ns = int(t[np.argmax(batch.stamped)])
                        w.append(batch, t, clocks[batch.interface])
                except DamagedCapture as exc:
                    damage = str(exc)
                if not w.frames:
                    raise FormatError(damage or f"{path}: no frames")
                origins, how = _origins(origin_given, reader, cs if args.append else None, name, first_ns)
                names = [_clock_of(i, args.stamp_clock) for i in reader.interfaces]
                w.finish(reader.interfaces, names, origins, wire.WireInfo(
                    name=name, origin=how, format=reader.format, file=path.name, frames=w.frames,
                    damage=damage, sections=reader.sections, notes=f"imported from {path.name} ({reader.format})"))
                summary = wire.WireSource(cs, name).describe()
    if args.json:
        print(json.dumps({"file": str(path), "format": fmt, "output": str(out), "appended": bool(args.append),
                          "source": summary}, indent=2))
    else:
        print("\n".join(report_lines(path, out, summary)))
    if damage:
        print(f"nicrig: error: {damage}; the frames before it are imported", file=sys.stderr)
        return 1
    return 0


def _origins(given: int | None, reader: CaptureReader, appended_to: Any, name: str,
             first_ns: int | None) -> tuple[list[int], str]:
    """Each interface's origin (ns of its clock at the timeline's 0), and how they were chosen."""
    named = [_ORIGIN.search(i.comment) for i in reader.interfaces]
    if given is None and named and all(named):
        return [int(m[1]) * 10 ** 9 + int(m[2]) for m in named if m], "named by the nicrig export it came from"
    origin, how = _origin(given, appended_to, name, first_ns)
    return [origin] * len(reader.interfaces), how


def _origin(given: int | None, appended_to: Any, name: str, first_ns: int | None) -> tuple[int, str]:
    if given is not None:
        return given, "--time-origin"
    if appended_to is not None:
        shared = [wire.WireSource(appended_to, n) for n in wire.names(appended_to) if n != name]
        if shared and len(shared[0].origins):
            return int(shared[0].origins[0]), f"the origin of wire source {shared[0].name!r} in the same set"
        found = _set_origin(appended_to)
        if found is not None:
            return found
    return (first_ns or 0), "the first frame"


def report_lines(path: Path, out: Path, d: dict[str, Any]) -> list[str]:
    """What ``nicrig import`` prints about a new wire source ``d`` (:meth:`WireSource.describe`)."""
    return [f"imported {path} -> {out}: wire source {d['name']!r}", *(f"  {line}" for line in wire_lines(d)[1:])]


def wire_lines(d: dict[str, Any]) -> list[str]:
    """A wire source ``d`` (:meth:`WireSource.describe`) in words: its name, then its frames, interfaces, span."""
    lines = [d["name"], f"{d['frames']:,} frames, {d['octets']:,} octets captured ({d['format']}"
                        + (f" {d['file']}" if d["file"] else "") + ")"]
    for i in d["interfaces"]:
        what = LINK_TYPES.get(i["link_type"], f"link type {i['link_type']}")
        fcs = {-1: "FCS not stated", 0: "no FCS"}.get(i["fcs_bytes"], f"{i['fcs_bytes']}-octet FCS")
        drops = f", {i['if_drops']:,} dropped by the interface" if i["if_drops"] > 0 else ""
        drops += f", {i['os_drops']:,} dropped by the system" if i["os_drops"] > 0 else ""
        lines.append(f"interface {i['interface']} {i['name'] or '(unnamed)'}: {what}, time stamps {i['resolution']}"
                     f" by {i['clock']} clock, {fcs}{drops}")
    if d["first_ns"] is not None:
        lines.append(f"frames from {d['first_ns'] / 1e9:.9f} s to {d['last_ns'] / 1e9:.9f} s on the timeline "
                     f"(0 = {d['origin']})")
    if d["damage"]:
        lines.append(f"DAMAGED: {d['damage']}")
    return lines
