"""Decoded tables: the decoders' records as typed columns under ``decoded/<source>/<decoder>``.

Each decoder's ``records`` binary output (one JSON object per transaction,
frame, interrupt or activity) is the single source of truth; this module only
gives the keys fixed column types (``docs/decoders.md`` lists them) and adds
the times on the set's common timeline, ``t_ns`` (start) and ``t_end_ns``,
from the source's own time base, so tables of different sources line up.
Unknown values (a field a decoder cannot see) are -1, or empty strings; the
PCI ``address`` is unsigned 64-bit (a dual address cycle reaches 2^64 - 1,
PCI Local Bus Specification 3.0 §3.9), so its "unknown" (AD not probed) is
``has_address`` false, with ``address`` 0.
"""

from __future__ import annotations

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


def _column(records: Sequence[dict[str, Any]], column: str, default: Any) -> list[Any]:
    """Column ``column`` of ``records``, with ``default`` for a missing or null value.

    One list comprehension per column (no call per cell): this runs once per
    decoded record and column, for every job of a batch.
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


def records_to_table(decoder_id: str, records: Sequence[dict[str, Any]], source: Source) -> np.ndarray:
    """Typed table of ``records`` from ``decoder_id``, with common-timeline times from ``source``."""
    schema = SCHEMAS[decoder_id]
    dtype = np.dtype([(name, typ) for name, typ, _ in schema])
    table = np.zeros(len(records), dtype=dtype)
    for name, _, default in schema:
        if name in ("t_ns", "t_end_ns"):
            continue
        table[name] = _column(records, name, default)
    if len(table) and source.num_samples:
        # Starts and ends in one call: a state-mode source's timestamps are read (decompressed) once.
        ends = np.clip(np.concatenate([table["ss"], table["es"]]), 0, source.num_samples - 1)
        ns = np.rint(source.times_at(ends) / 1000).astype(np.int64)
        table["t_ns"], table["t_end_ns"] = ns[:len(table)], ns[len(table):]
    if "duration_ns" in table.dtype.names:
        # From the source's time base, exact in state mode too (the decoder knows only a nominal rate).
        table["duration_ns"] = table["t_end_ns"] - table["t_ns"]
    order = np.argsort(table["ss"], kind="stable")
    return table[order]


def table_attrs(stacks_text: list[str], engine: str, versions: dict[str, str]) -> dict[str, Any]:
    return {"decoders": json.dumps(stacks_text), "engine": engine, "decoder_versions": json.dumps(versions),
            "layout": LAYOUT}
