"""Decoded tables in their users' notation, for ``nicrig events``.

Addresses, C/BE# command codes and ethertypes are hex, as sigrok's PCI and
Ethernet decoders, PulseView and Wireshark show them (``0xfd000004``, ``0x6``,
``0x8808``); MAC addresses are already ``aa:bb:cc:dd:ee:ff`` as Wireshark
writes them; booleans are ``true``/``false``. Filters take values in that
notation or in decimal, and names whatever their case.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from typing import Any, TextIO

import numpy as np
from nicrig.decoders.tables import address_known
from nicrig.errors import UsageError

# Columns shown in hex, with their fewest digits: the PCI decoder writes 32-bit addresses with 8 digits
# (16 after a dual address cycle), C/BE# is one nibble, an ethertype two octets (IEEE 802.3 clause 3.2.6).
HEX_DIGITS = {"address": 8, "command_code": 1, "ethertype": 4, "inner_ethertype": 4}
DAC_ADDRESS_DIGITS = 16


def hex_text(value: int, digits: int) -> str | None:
    """``value`` as ``0x`` and at least ``digits`` lower-case hex digits; None when unknown (negative)."""
    return None if value < 0 else f"0x{value:0{digits}x}"


def column_values(table: np.ndarray, column: str) -> list[Any]:
    """The column's values as Python objects in its users' notation (hex text or None, bool, int, float, str)."""
    col = table[column]
    if column in HEX_DIGITS:
        digits = np.full(len(table), HEX_DIGITS[column])
        if column == "address" and "dac" in (table.dtype.names or ()):
            digits[table["dac"]] = DAC_ADDRESS_DIGITS
        values = [hex_text(int(v), int(d)) for v, d in zip(col, digits)]
        if column == "address":  # unsigned: unknown is has_address false, not a negative value
            values = [v if k else None for v, k in zip(values, address_known(table))]
        return values
    if col.dtype.kind == "S":
        return [v.decode("utf-8", "replace") for v in col]
    return col.tolist()


def parse_int(column: str, text: str) -> int:
    """``text`` as a number of ``column``: ``0x``-prefixed hex or decimal; empty is unknown (-1)."""
    if not text:
        return -1
    try:
        return int(text, 16) if text.lower().lstrip("-").startswith("0x") else int(text, 10)
    except ValueError:
        raise UsageError(f"--where {column}={text}: {column} holds numbers (hex as 0x..., or decimal)") from None


def matches(table: np.ndarray, column: str, text: str) -> np.ndarray:
    """Rows whose ``column`` equals ``text``: numbers by value, names and booleans whatever their case."""
    col = table[column]
    if col.dtype.kind == "S":
        return np.char.lower(col) == text.lower().encode()
    if col.dtype.kind == "b":
        word = text.lower()
        if word not in ("true", "false", "1", "0"):
            raise UsageError(f"--where {column}={text}: {column} is true or false")
        return col == (word in ("true", "1"))
    if col.dtype.kind == "f":
        try:
            return col == float(text)
        except ValueError:
            raise UsageError(f"--where {column}={text}: {column} holds numbers") from None
    if column == "address" and not text:
        return ~address_known(table)
    return col == parse_int(column, text)


def select(table: np.ndarray, conditions: list[str]) -> np.ndarray:
    """Rows matching every ``COLUMN=VALUE`` of ``conditions``."""
    keep = np.ones(len(table), dtype=bool)
    for cond in conditions:
        column, sep, value = cond.partition("=")
        if not sep or column not in table.dtype.names:
            raise UsageError(f"--where {cond!r}: use COLUMN=VALUE with a column of {', '.join(table.dtype.names)}")
        keep &= matches(table, column, value)
    return table[keep]


def rows_as_dicts(table: np.ndarray) -> Iterator[dict[str, Any]]:
    """Each row as ``{column: value}`` in its users' notation."""
    names = list(table.dtype.names)
    for values in zip(*(column_values(table, n) for n in names)):
        yield dict(zip(names, values))


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def write_rows(table: np.ndarray, as_json: bool, out: TextIO) -> None:
    """``table`` to ``out`` as JSON lines, or CSV with a header row (empty cells where JSON has null)."""
    if as_json:
        for row in rows_as_dicts(table):
            out.write(json.dumps(row) + "\n")
        return
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.dtype.names)
    for row in rows_as_dicts(table):
        writer.writerow([_csv_cell(v) for v in row.values()])
