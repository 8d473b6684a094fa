"""The ``ethernet`` table of a wire source: its frames through the ``gmii,ethernet`` decoders.

A frame captured off the wire (:mod:`nicrig.acquisition.wire`) holds the octets GMII carries
after the start frame delimiter, and a pcap frame usually lacks the FCS. So that a frame seen
on GMII and the same frame seen in a capture give the same table, each frame is handed to the
same decoders as GMII would hand it: state-mode rows of EN, ER and the data octet, an idle
row, seven preamble octets, the SFD, the frame, its FCS, and the next idle row. The
``gmii,ethernet`` stack's kernel decodes those rows (:mod:`nicrig.decoders.gmii_kernel`; its
conformance to the PDs holds here too, ``tests/test_wire.py`` checks it on these rows), and
the columns are then given the capture's terms:

- ``ss``, ``es``: the frame's number in the source (``frames`` row) and that plus one;
- ``t_ns``: its time stamp on the file's timeline (``time_ns`` less its interface's
  ``origin_ns``), the instant
  the capturing device stamped it (nicrig's own exports: the first preamble octet, as the
  GMII table's ``t_ns``); ``t_end_ns``: ``t_ns`` plus preamble, SFD and frame on the wire,
  ``(length + 8) x 8`` bit times at the interface's speed (1 Gbit/s when the capture does
  not state one, the ethernet decoder's own default);
- ``length``: octets from the destination address through the FCS on the wire: the original
  length, plus 4 when the capture holds no FCS;
- ``fcs_ok``: the FCS check when the capture holds the FCS (``if_fcslen``, the pcap header's
  FCS length, or ``epb_flags``); else true unless ``epb_flags`` marks a CRC error (the
  capturing NIC checked it and passed the frame; frames it dropped are not in the file);
- ``error_octets``: from the frame's comment when nicrig's export wrote one (octets received
  with the GMII error line high), else 0;
- ``direction``: ``tx`` for outbound, ``rx`` for inbound frames (``epb_flags``, a live
  capture's packet type), empty when the capture does not say.

Frames of one interface and direction form one stream (the ethernet decoder's table of
fragmented datagrams follows each), as each direction of a GMII probe does. Frames whose
link type is not Ethernet, and frames without a captured octet, get no row.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.acquisition.pcap import (FLAG_CRC_ERROR, FLAG_FCS_SHIFT, FLAG_INBOUND, FLAG_OUTBOUND,
                                     LINKTYPE_ETHERNET)
from nicrig.acquisition.wire import WireSource
from nicrig.decoders import catalog, kernels, runtime, tables

PREAMBLE = bytes([0x55] * 7 + [0xD5])
#: Row bits: the data octet in byte 0, EN and ER in byte 1.
UNITSIZE = 2
EN, ER = 1, 2
#: Frames read per block, and most captured octets a block's rows are made from (rows take twice that).
BLOCK_FRAMES = 1 << 16
BLOCK_OCTETS = 8 << 20
Progress = Callable[[int, int], None]


def calls(direction: str, link_rate_bps: float) -> list[runtime.Call]:
    """The ``gmii,ethernet`` stack over :func:`gmii_rows`' rows."""
    bits = {"en": 8, "er": 9, **{f"d{i}": i for i in range(8)}}
    return [runtime.Call("gmii", bits, {"clock": "state", "direction": direction}),
            runtime.Call("ethernet", {}, {"link_rate": link_rate_bps})]


def gmii_rows(frames: list[bytes], errors: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """GMII state-mode rows carrying ``frames`` (each with its FCS): per frame an idle row, preamble and SFD, its
    octets, the first ``errors[i]`` of them with ER high; then one idle row. Returns ``(rows (n, 2) uint8, row of
    each frame's first preamble octet)``."""
    lengths = np.array([len(f) for f in frames], np.int64)
    first = np.zeros(len(frames), np.int64)
    np.cumsum(lengths[:-1] + 1 + len(PREAMBLE), out=first[1:])
    first += 1
    octets = b"".join([b"\0" + PREAMBLE + f for f in frames]) + b"\0"
    on = bytes([EN])
    lines = b"".join([b"\0" + on * len(PREAMBLE) + bytes([EN | ER]) * e + on * (len(f) - e)
                      for f, e in zip(frames, errors)]) + b"\0"
    rows = np.empty((len(octets), UNITSIZE), np.uint8)
    rows[:, 0] = np.frombuffer(octets, np.uint8)
    rows[:, 1] = np.frombuffer(lines, np.uint8)
    return rows, first


def with_fcs(octets: np.ndarray, starts: np.ndarray, caplen: np.ndarray, has_fcs: np.ndarray) -> list[bytes]:
    """Each frame's octets ending in an FCS: as captured where ``has_fcs``, else with the FCS computed (802.3
    §3.2.9: CRC-32, least significant octet first) appended."""
    raw = octets.tobytes()
    out = []
    for s, n, keep in zip(starts.tolist(), caplen.tolist(), has_fcs.tolist()):
        frame = raw[s:s + n]
        out.append(frame if keep else frame + (zlib.crc32(frame) & 0xFFFFFFFF).to_bytes(4, "little"))
    return out


def direction_of(flags: np.ndarray) -> np.ndarray:
    """``b"tx"``, ``b"rx"`` or ``b""`` per frame from its ``epb_flags``."""
    d = flags & 3
    return np.where(d == FLAG_OUTBOUND, b"tx", np.where(d == FLAG_INBOUND, b"rx", b"")).astype("S2")


def fcs_stated(src: WireSource, rows: np.ndarray) -> np.ndarray:
    """Per frame: the capture says its frames end in a 4-octet FCS (the interface's ``if_fcslen`` or pcap header,
    or the frame's ``epb_flags``), so its original length counts the FCS."""
    iface_fcs = src.interfaces["fcs_bytes"][rows["interface"]] if len(src.interfaces) else np.full(len(rows), -1)
    flag_fcs = (rows["flags"] >> FLAG_FCS_SHIFT) & 0xF
    return np.where(flag_fcs > 0, flag_fcs, iface_fcs) == 4


def _blocks(src: WireSource, progress: Progress | None) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(frame numbers, rows, octets) of the source's frames, at most :data:`BLOCK_OCTETS` of octets a block."""
    n = len(src)
    for first in range(0, n, BLOCK_FRAMES):
        rows = src.frames(first, first + BLOCK_FRAMES)
        ends = np.cumsum(rows["caplen"].astype(np.int64))
        cut = 0
        while cut < len(rows):
            stop = max(cut + 1, int(np.searchsorted(ends, (ends[cut - 1] if cut else 0) + BLOCK_OCTETS, "right")))
            part = rows[cut:stop]
            yield np.arange(first + cut, first + stop), part, src.octets(part)
            cut = stop
        if progress:
            progress(min(n, first + BLOCK_FRAMES), n)


def ethernet_blocks(src: WireSource, left_out: dict[str, int] | None = None,
                    progress: Progress | None = None) -> Iterator[np.ndarray]:
    """The ``ethernet`` table of a wire source, block by block in frame order (memory holds a block's rows, not
    the table's); the frames left out are counted by reason into ``left_out`` (``{"link type 113": 12}``)."""
    left_out = {} if left_out is None else left_out
    states: dict[tuple[int, bytes], Any] = {}
    for numbers, rows, octets in _blocks(src, progress):
        parts = []
        link = src.interfaces["link_type"][rows["interface"]] if len(src.interfaces) else np.full(len(rows), -1)
        for lt in np.unique(link[link != LINKTYPE_ETHERNET]):
            left_out[f"link type {int(lt)}"] = left_out.get(f"link type {int(lt)}", 0) + int((link == lt).sum())
        empty = (link == LINKTYPE_ETHERNET) & (rows["caplen"] == 0)
        if empty.any():
            left_out["no octet captured"] = left_out.get("no octet captured", 0) + int(empty.sum())
        keep = (link == LINKTYPE_ETHERNET) & (rows["caplen"] > 0)
        direction = direction_of(rows["flags"])
        base = int(rows["offset"][0])
        for k in np.unique(rows["interface"][keep]):
            for d in (b"tx", b"rx", b""):
                mine = np.flatnonzero(keep & (rows["interface"] == k) & (direction == d))
                if len(mine):
                    part, states[(int(k), d)] = _decode(src, int(k), d, numbers[mine], rows[mine], octets, base,
                                                         states.get((int(k), d)))
                    parts.append(part)
        if parts:  # a block's streams (interface, direction) interleave: in frame order again
            block = np.concatenate(parts)
            yield block[np.argsort(block["ss"], kind="stable")]


def ethernet_table(src: WireSource, progress: Progress | None = None) -> tuple[np.ndarray, dict[str, int]]:
    """The ``ethernet`` table of a wire source whole, and the frames left out by reason."""
    left_out: dict[str, int] = {}
    blocks = list(ethernet_blocks(src, left_out, progress))
    table = np.concatenate(blocks) if blocks else np.zeros(0, tables.dtype_of("ethernet"))
    return table, left_out


def _decode(src: WireSource, interface: int, direction: bytes, numbers: np.ndarray, rows: np.ndarray,
            octets: np.ndarray, base: int, carry: Any) -> tuple[np.ndarray, Any]:
    """One interface's frames of one direction: their table rows, and the kernel's state after them."""
    stated = fcs_stated(src, rows)
    held = stated & (rows["caplen"] == rows["origlen"]) & (rows["caplen"] >= 4)  # the FCS itself was captured
    frames = with_fcs(octets, rows["offset"] - base, rows["caplen"], held)
    errors = [min(_error_octets(src.comments.get(int(f), "")), len(d)) for f, d in zip(numbers.tolist(), frames)] \
        if src.comments else [0] * len(frames)
    gmii, first = gmii_rows(frames, errors)
    rate = src.link_rate_bps(interface)
    table, (state,) = kernels.run_marked(calls(direction.decode() or "tx", rate), [gmii],
                                         samplerate=125_000_000, unitsize=UNITSIZE, marks=[len(gmii)], carry=carry)
    k = np.searchsorted(first, table["ss"])
    table["ss"], table["es"] = numbers[k], numbers[k] + 1
    wire_length = np.where(stated, rows["origlen"], rows["origlen"] + 4)[k]
    table["length"] = wire_length
    table["fcs_ok"] = np.where(held[k], table["fcs_ok"], (rows["flags"][k] & FLAG_CRC_ERROR) == 0)
    table["direction"] = direction
    table["t_ns"] = src.t_ns(rows)[k]
    table["t_end_ns"] = table["t_ns"] + np.rint((wire_length + len(PREAMBLE)) * 8e9 / rate).astype(np.int64)
    return table, state


def _error_octets(comment: str) -> int:
    from nicrig.acquisition.wire_import import error_octets

    return error_octets(comment)


def version() -> str:
    """What makes a wire source's table: this module and the stack's decoders and kernel, by digest."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    key = ("gmii", "ethernet")
    return f"wire frames {h.hexdigest()[:16]}; {','.join(key)}: {kernels.describe(key)}"


def table_attrs() -> dict[str, Any]:
    """The attributes of a wire source's decoded table (docs/formats.md, "Tables"): as a GMII source's, the
    stack named ``wire,ethernet``."""
    versions = {c: catalog.get(c).version for c in ("gmii", "ethernet")}
    versions["wire"] = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    return tables.table_attrs(["wire,ethernet"], version(), versions)


def table_of(f: Any, src: WireSource) -> np.ndarray:
    """The source's ethernet table: as decoded into the file (or its companion) when it is up to date, else made
    now (a results file recorded with ``--capture`` holds it; a capture set after ``nicrig decode``)."""
    name = f"decoded/{src.name}/ethernet"
    if name in f.table_names():
        have, want = f.table_attrs(name), table_attrs()
        if all(have.get(k) == want[k] for k in ("decoders", "decoder_versions", "layout")):
            return f.read_table(name)
    return ethernet_table(src)[0]
