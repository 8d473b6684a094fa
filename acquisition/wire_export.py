"""``nicrig export SET.h5 --source S -o FILE.pcapng|FILE.pcap``: frames for Wireshark, tshark and tcpdump.

Two kinds of source have frames:

- a **wire source** (:mod:`nicrig.acquisition.wire`): its frames as captured, each interface
  described as the capture described it, each stamp as it was (its own resolution) unless
  ``--resolution`` asks for another;
- a logic source with a decoded **GMII stack** (``decoded/S/ethernet``): each frame's octets read
  back from the GMII rows (:mod:`nicrig.decoders.gmii_octets`), FCS included, both directions in
  time order on one interface (``epb_flags`` says inbound or outbound, the FCS length, CRC
  errors and error symbols; a frame with GMII error octets also has a comment counting them).
  A frame's time is the capture set's creation time (UTC, to the second; the epoch the ethernet
  decoder's own pcap output counts from) plus its ``t_ns``, so the time Wireshark shows, minus
  that origin, is ``nicrig events``'s ``t_ns``; nanosecond stamps unless ``--resolution us``.

pcapng files name the timeline's origin and the clock in each interface's comment, so ``nicrig import`` puts the frames back at the same ``t_ns``. A pcap file has one
link type and resolution, no direction and no comments.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from nicrig import __version__
from nicrig.acquisition import wire
from nicrig.acquisition.pcap import (FLAG_CRC_ERROR, FLAG_FCS_SHIFT, FLAG_INBOUND, FLAG_OUTBOUND,
                                     FLAG_SYMBOL_ERROR, LINKTYPE_ETHERNET, MAX_FRAME_BYTES, PcapngWriter, PcapWriter,
                                     ns_to_stamps, resolution_text)
from nicrig.acquisition.wire_import import CLOCK_COMMENT, ERROR_COMMENT, origin_comment
from nicrig.errors import UsageError

FORMATS = ("pcapng", "pcap")
RESOLUTIONS = {"ns": 9, "us": 6}


def _stamp(epoch_ns: int, tsresol: int) -> int:
    return int(ns_to_stamps(np.int64(epoch_ns), tsresol))


class _Out:
    """The file being written: pcapng (interfaces added as met) or pcap (one link type and resolution)."""

    def __init__(self, f: BinaryIO, fmt: str, comment: str):
        self.f, self.fmt = f, fmt
        self.ng = PcapngWriter(f, application=f"nicrig {__version__}", comment=comment,
                               os_name=f"{platform.system()} {platform.release()}") if fmt == "pcapng" else None
        self.pcap: PcapWriter | None = None
        self.pcap_key: tuple[int, int] | None = None
        self.frames = 0

    def interface(self, *, link_type: int, tsresol: int, fcs_bytes: int, **idb: Any) -> int:
        if self.ng is not None:
            return self.ng.add_interface(link_type=link_type, tsresol=tsresol, fcs_bytes=fcs_bytes, **idb)
        key = (link_type, tsresol)
        if self.pcap is None:
            if tsresol not in (6, 9):
                raise UsageError(f"pcap holds micro- or nanosecond stamps, this source's are "
                                 f"{resolution_text(tsresol)}: give --resolution ns or us, or write pcapng")
            self.pcap = PcapWriter(self.f, link_type=link_type, tsresol=tsresol, fcs_bytes=fcs_bytes)
            self.pcap_key = key
        elif key != self.pcap_key:
            raise UsageError("the source's interfaces differ in link type or time resolution, which one pcap file "
                             "cannot hold: write pcapng")
        return 0

    def write(self, interface: int, stamp: int, data: bytes, origlen: int, flags: int, comment: str) -> None:
        if self.ng is not None:
            self.ng.write(interface, stamp, data, origlen, flags, comment)
        else:
            assert self.pcap is not None
            self.pcap.write(stamp, data, origlen)
        self.frames += 1


def export(cs: Any, name: str, out_path: Path, fmt: str, resolution: str | None, progress: Any) -> dict[str, Any]:
    """Write source ``name`` of ``cs`` to ``out_path`` as ``fmt``; what was written."""
    from nicrig.atomic import replacing

    with replacing(out_path) as tmp, open(tmp, "wb") as f:
        if name in wire.names(cs):
            summary = _wire(cs, wire.WireSource(cs, name), f, fmt, resolution, progress)
        else:
            summary = _gmii(cs, cs.source(name), f, fmt, RESOLUTIONS[resolution or "ns"], progress)
    return {"path": str(out_path), "format": fmt, **summary}


def _wire(cs: Any, src: wire.WireSource, f: BinaryIO, fmt: str, resolution: str | None,
          progress: Any) -> dict[str, Any]:
    out = _Out(f, fmt, "")
    raw = fmt == "pcapng" and not resolution  # the stamps as captured, with their interface's offset
    numbers = []
    for r in src.interfaces:
        tsresol = RESOLUTIONS[resolution] if resolution else int(r["tsresol"])
        numbers.append(out.interface(
            link_type=int(r["link_type"]), tsresol=tsresol, fcs_bytes=int(r["fcs_bytes"]),
            snaplen=int(r["snaplen"]), name=r["name"].decode(), description=r["description"].decode(),
            offset_s=int(r["offset_s"]) if raw else 0, speed_bps=int(r["speed_bps"]),
            hardware=r["hardware"].decode(), os_name=r["os"].decode(),
            comment=f"{origin_comment(int(r['origin_ns']))}\n{CLOCK_COMMENT.format(clock=r['clock'].decode())}"))
    n = len(src)
    for first, rows, octets in src.blocks():
        base = int(rows["offset"][0]) if len(rows) else 0
        for i, r in enumerate(rows):
            k = int(r["interface"])
            tsresol = RESOLUTIONS[resolution] if resolution else int(src.interface(k)["tsresol"])
            stamp = int(r["stamp"]) if raw else _stamp(int(r["time_ns"]), tsresol)
            s = int(r["offset"]) - base
            out.write(numbers[k], stamp, octets[s:s + int(r["caplen"])].tobytes(), int(r["origlen"]),
                      int(r["flags"]), src.comments.get(first + i, ""))
        progress(first + len(rows), n)
    return {"source": src.name, "kind": "wire", "frames": out.frames,
            "origin_ns": int(src.origins[0]) if len(src.origins) else 0}


def _gmii(cs: Any, source: Any, f: BinaryIO, fmt: str, tsresol: int, progress: Any) -> dict[str, Any]:
    from nicrig.acquisition.exporting import sample0_epoch
    from nicrig.decoders import gmii_octets, spec

    table_name = f"decoded/{source.name}/ethernet"
    if table_name not in cs.table_names():
        raise UsageError(f"{cs.path}: source {source.name!r} has no decoded ethernet table to export frames from "
                         f"(run: nicrig decode {cs.path}); pcap and pcapng hold frames, not logic samples")
    table = cs.read_table(table_name)
    stacks = {st.calls[0].options.get("direction", "tx"): st for st in (
        spec.parse_stack(t, source) for t in json.loads(cs.table_attrs(table_name)["decoders"]))}
    epoch = sample0_epoch(str(cs.attrs.get("created_utc", "")), 0)
    if epoch is None:
        raise UsageError(f"{cs.path}: no creation time (created_utc) to count the frames' times from")
    origin_ns = int(epoch.replace(".", ""))
    link = float(source.bus.get("link_rate_bps") or 1e9)
    out = _Out(f, fmt, "")
    iface = out.interface(link_type=LINKTYPE_ETHERNET, tsresol=tsresol, fcs_bytes=4, snaplen=MAX_FRAME_BYTES,
                          name=source.name, description=f"GMII probe {source.bus.get('at', '')}".strip(),
                          speed_bps=int(link),
                          comment=f"{origin_comment(origin_ns)}\n{CLOCK_COMMENT.format(clock='instrument')}")
    order = np.argsort(table["t_ns"], kind="stable")
    octets: dict[int, bytes] = {}
    for direction, stack in stacks.items():
        mine = np.flatnonzero(table["direction"] == direction.encode())
        for i, frame in gmii_octets.frames(source, stack, table[mine]):
            octets[int(mine[i])] = frame
    for done, i in enumerate(order):
        r = table[i]
        flags = {b"tx": FLAG_OUTBOUND, b"rx": FLAG_INBOUND}.get(bytes(r["direction"]), 0) | (4 << FLAG_FCS_SHIFT)
        flags |= 0 if r["fcs_ok"] else FLAG_CRC_ERROR
        errors = int(r["error_octets"])
        flags |= FLAG_SYMBOL_ERROR if errors > 0 else 0
        frame = octets[int(i)]
        out.write(iface, _stamp(origin_ns + int(r["t_ns"]), tsresol), frame, len(frame), flags,
                  ERROR_COMMENT.format(n=errors) if errors > 0 else "")
        if done % 4096 == 0:
            progress(done, len(order))
    progress(len(order), len(order))
    return {"source": source.name, "kind": "gmii", "frames": out.frames, "origin_ns": origin_ns}


def text(summary: dict[str, Any]) -> list[str]:
    """What ``nicrig export`` prints about a pcap or pcapng it wrote."""
    s, ns = divmod(summary["origin_ns"], 10 ** 9)
    return [f"wrote {summary['path']}: {summary['frames']:,} frames of source {summary['source']!r} "
            f"({summary['format']}); a frame's time minus {s}.{ns:09d} s is its t_ns"]
