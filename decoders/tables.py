"""Decoded tables: the decoders' records as typed columns under ``decoded/<source>/<decoder>``.

Each decoder's ``records`` binary output (one JSON object per transaction,
frame, interrupt or activity) is the single source of truth; this module
gives the keys fixed column types (``docs/decoders.md`` lists them):
:func:`records_to_columns` turns records into rows, and a native kernel writes
the very same rows itself (:func:`layout` tells a C kernel where each column
lies). Then :func:`add_times` adds the times on the set's common timeline,
``t_ns`` (start) and ``t_end_ns``, from the source's own time base, so tables
of different sources line up.
Unknown values (a field a decoder cannot see) are -1, or empty strings; the
PCI ``address`` is unsigned 64-bit (a dual address cycle reaches 2^64 - 1,
PCI Local Bus Specification 3.0 §3.9), so its "unknown" (AD not probed) is
``has_address`` false, with ``address`` 0.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from nicrig.acquisition.capture import Source

# column, NumPy type, value when the record has none (or null)
Schema = list[tuple[str, str, Any]]
_TIMES: Schema = [("ss", "<i8", -1), ("es", "<i8", -1), ("t_ns", "<i8", 0), ("t_end_ns", "<i8", 0)]

SCHEMAS: dict[str, Schema] = {
    "pci": _TIMES + [
        ("command", "S32", b""), ("command_code", "<i2", -1), ("address", "<u8", 0), ("has_address", "?", False),
        ("dac", "?", False),
        ("data_phases", "<i4", 0), ("bytes", "<i8", -1), ("termination", "S24", b""), ("kind", "S8", b""),
        ("master_wait_clocks", "<i4", 0), ("target_wait_clocks", "<i4", 0), ("devsel", "S12", b""),
        ("wide", "?", False), ("parity_error", "<i1", -1), ("stop", "?", False),
    ],
    "ethernet": _TIMES + [
        ("direction", "S2", b""), ("length", "<i4", -1), ("dst", "S17", b""), ("src", "S17", b""),
        ("vlan", "<i4", -1), ("ethertype", "<i4", -1), ("inner_ethertype", "<i4", -1), ("fcs_ok", "?", False),
        ("error_octets", "<i4", 0), ("pause_quanta", "<i4", -1), ("pause_ns", "<f8", -1.0),
        ("pfc_quanta", "S48", b""), ("ip_src", "S15", b""), ("ip_dst", "S15", b""), ("ip_proto", "<i2", -1),
        ("frag_offset", "<i4", -1), ("udp_sport", "<i4", -1), ("udp_dport", "<i4", -1),
        ("nicrig_kind", "<i2", -1), ("seq", "<i8", -1),
    ],
    "irq": _TIMES + [("duration_ns", "<i8", -1)],
    "linkactivity": _TIMES + [("duration_ns", "<i8", -1), ("est_bytes", "<i8", -1), ("gap_ns", "<i8", -1)],
}
UNITS = {"ss": "sample", "es": "sample", "t_ns": "ns", "t_end_ns": "ns", "bytes": "byte", "length": "byte",
         "duration_ns": "ns", "gap_ns": "ns", "pause_ns": "ns", "est_bytes": "byte",
         "master_wait_clocks": "clock", "target_wait_clocks": "clock", "pause_quanta": "512 bit times"}


def units_of(columns: Sequence[str]) -> dict[str, str]:
    """The ``units`` attribute of a decoded table with these columns: its own columns that have a unit."""
    return {c: UNITS[c] for c in columns if c in UNITS}


#: The tables' layout: raised when a column's type or meaning changes, so that ``nicrig decode`` remakes
#: tables of an older layout (2: ``address`` unsigned, with ``has_address``).
LAYOUT = 2


def address_known(table: np.ndarray) -> np.ndarray:
    """Per row of a PCI table, whether its address is known (tables of layout 1: ``address`` -1 when not)."""
    if "has_address" in (table.dtype.names or ()):
        return table["has_address"]
    return table["address"] >= 0


@functools.cache
def dtype_of(decoder_id: str) -> np.dtype:
    """The table dtype of decoder ``decoder_id``'s records (packed, little endian, as stored)."""
    return np.dtype([(name, typ) for name, typ, _ in SCHEMAS[decoder_id]])


def defaults(decoder_id: str, n: int = 1) -> np.ndarray:
    """``n`` rows of decoder ``decoder_id``'s table holding every column's default (a record without the key)."""
    table = np.zeros(n, dtype=dtype_of(decoder_id))
    for name, _, default in SCHEMAS[decoder_id]:
        if default:
            table[name] = default
    return table


def layout(decoder_id: str) -> tuple[list[tuple[str, int, str]], bytes]:
    """What a C kernel writes decoder ``decoder_id``'s table rows by (``decoders/_table_rows.h``): each column's
    name, byte offset in a row and NumPy type string, and one row of defaults."""
    dtype = dtype_of(decoder_id)
    fields = [(name, int(dtype.fields[name][1]), dtype.fields[name][0].str) for name in dtype.names]
    return fields, defaults(decoder_id).tobytes()


def _column(records: Sequence[dict[str, Any]], column: str, default: Any) -> list[Any]:
    """Column ``column`` of ``records``, with ``default`` for a missing or null value.

    One list comprehension per column (no call per cell).
    """
    if column == "has_address":
        return [r.get("address") is not None for r in records]
    if column == "pfc_quanta":
        return [",".join(str(int(v)) for v in q).encode() if q else b"" for q in (r.get("pfc") for r in records)]
    values = [r.get(column) for r in records]
    if column == "parity_error":
        return [-1 if v is None else int(bool(v)) for v in values]
    if isinstance(default, bytes):
        return [default if v is None else str(v).encode("utf-8", "replace") for v in values]
    if any(v is None for v in values):
        return [default if v is None else v for v in values]
    return values


def records_to_columns(decoder_id: str, records: Sequence[dict[str, Any]]) -> np.ndarray:
    """The table rows of ``records`` from decoder ``decoder_id`` (its ``records`` output), in their order.

    This is the reference a kernel's rows are held to, byte for byte: each
    column typed as :data:`SCHEMAS` says, a missing or null value its default;
    integers too wide for their column keep their low bits and text is cut to
    the column's size, as NumPy's unsafe cast (and a C kernel's store) does.
    The times (``t_ns``, ``t_end_ns``, ``duration_ns``) come from the source
    afterwards (:func:`add_times`); records from a decoder carry none.
    """
    schema = SCHEMAS[decoder_id]
    table = np.zeros(len(records), dtype=dtype_of(decoder_id))
    if not len(records):
        return table
    for name, typ, default in schema:
        if name in ("t_ns", "t_end_ns"):
            continue
        values = _column(records, name, default)
        try:
            table[name] = values
        except OverflowError:  # an integer too wide for its column: its low bits, as a C store keeps them
            size = np.dtype(typ).itemsize
            low = [int(v) % (1 << (8 * size)) for v in values]
            table[name] = np.array(low, dtype=f"<u{size}").view(typ)
    return table


def _ordered(ss: np.ndarray, es: np.ndarray) -> bool:
    step = np.diff(ss)
    return not (step < 0).any() and not ((step == 0) & (np.diff(es) < 0)).any()


def in_order(table: np.ndarray) -> np.ndarray:
    """``table``'s rows by start, then end (rows equal in both keep their order): the order tables are stored in.

    Decoders mostly put their records in that order already: then ``table`` itself, unsorted and uncopied.
    """
    return table if _ordered(table["ss"], table["es"]) else table[np.lexsort((table["es"], table["ss"]))]


def pieces_in_order(pieces: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The rows of consecutive ``pieces`` of a table in stored order (:func:`in_order`), in pieces: those given
    (the empty ones left out) when they are in that order already, joined and sorted otherwise."""
    pieces = [p for p in pieces if len(p)]
    ends = np.array([(p["ss"][k], p["es"][k]) for p in pieces for k in (0, -1)]).reshape(-1, 2)
    if all(_ordered(p["ss"], p["es"]) for p in pieces) and _ordered(ends[:, 0], ends[:, 1]):
        return pieces
    return [in_order(np.concatenate(pieces))]


def times_of(table: np.ndarray, source: Source) -> np.ndarray:
    """The source's common-timeline times (ps) of ``table``'s starts then ends (``ss`` of every row, then ``es``),
    sample numbers clipped to the source."""
    ends = np.clip(np.concatenate([table["ss"], table["es"]]), 0, max(source.num_samples - 1, 0))
    return source.times_at(ends)


def add_times(table: np.ndarray, times_ps: np.ndarray | None) -> np.ndarray:
    """``table`` (in place) with ``t_ns`` and ``t_end_ns`` from ``times_ps`` (:func:`times_of`; None: the source has
    no samples), and ``duration_ns`` from them where the table has one."""
    if len(table) and times_ps is not None:
        ns = np.rint(times_ps / 1000).astype(np.int64)
        table["t_ns"], table["t_end_ns"] = ns[:len(table)], ns[len(table):]
    if "duration_ns" in table.dtype.names:
        # From the source's time base, exact in state mode too (the decoder knows only a nominal rate).
        table["duration_ns"] = table["t_end_ns"] - table["t_ns"]
    return table


def records_to_table(decoder_id: str, records: Sequence[dict[str, Any]], source: Source) -> np.ndarray:
    """Typed table of ``records`` from ``decoder_id``, with common-timeline times from ``source``, in stored order."""
    table = in_order(records_to_columns(decoder_id, records))
    return add_times(table, times_of(table, source) if len(table) and source.num_samples else None)


def table_attrs(stacks_text: list[str], engine: str, versions: dict[str, str]) -> dict[str, Any]:
    return {"decoders": json.dumps(stacks_text), "engine": engine, "decoder_versions": json.dumps(versions),
            "layout": LAYOUT}
