"""What the header of each logic-analyzer or FPGA listing says: recognising a listing by its content.

A listing is a text export with one row per sample (or per change), a time or
sample-number column, and one column per bus or signal. Each reader follows the
vendor's own description of its export (see docs/import-export.md, "Listings"):

* ``ila`` -- the CSV that Vivado's hardware manager writes (``write_hw_ila_data -csv_file``,
  Vivado Design Suite Tcl Command Reference UG835, and AMD's ChipScoPy ``ILAWaveform.export_waveform``,
  which writes the same layout): a header ``Sample in Buffer,Sample in Window,TRIGGER,[GAP,]<probes>``,
  a radix row ``Radix - UNSIGNED,UNSIGNED,UNSIGNED,HEX,...`` (absent with ``-legacy_csv_file``), then one
  row per sample of the ILA's clock; bus probes are named ``name[msb:lsb]`` and written in their radix.
* ``saleae`` -- Saleae Logic 2's digital CSV ("Binary and CSV Export Formats - Logic 2 - 2025 Update"):
  ``Time [s],<channel names>``, a row at the capture's start and at every change, values ``0``, ``1``
  or ``X`` (no data), times in seconds (or ISO 8601 with the export's ISO timestamps option).
* ``dsview`` -- DSView's CSV (its ``libsigrok4DSL/output/csv.c``): ``;`` comment lines (generator,
  ``; Channels (n/m)``, ``; Sample rate: 100 MHz``, ``; Sample count: ...``), a header
  ``Time(s), <names>``, then a row at every change (every sample when the original data is exported),
  the time printed as ``%.15g`` of sample index / sample rate.

:func:`recognise` reads only the first lines of a file and returns a :class:`Layout`,
or None for a file that is none of these (it is then read as sigrok-style CSV).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from itertools import islice
from pathlib import Path

from nicrig.acquisition import limits, textlines

from nicrig.errors import FormatError, UsageError

#: ``--format`` names of the listing readers, and what each is.
TITLES = {
    "ila": "Vivado ILA CSV export",
    "saleae": "Saleae Logic 2 digital CSV export",
    "dsview": "DSView CSV export",
}
#: Lines looked at to recognise a file.
HEAD_LINES = 64

_ILA_HEAD = ("sample in buffer", "sample in window", "trigger")
_ILA_RADIX = {"HEX": (16, False), "BINARY": (2, False), "OCTAL": (8, False), "UNSIGNED": (10, False),
              "SIGNED": (10, True)}
_RANGE = re.compile(r"^(?P<base>.*?)\s*\[(?P<left>\d+)(?::(?P<right>\d+))?\]$")
_DSVIEW_RATE = re.compile(r"^\s*(?P<num>\d+(?:\.\d+)?)\s*(?P<prefix>[kMG]?)Hz\s*$")
_SI = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9}


@dataclass
class Field:
    """One bus or signal column: its header text, channel stem, width and radix.

    Bit ``k`` of the column's value (LSB first) is channel ``bits[k]``: ``AD[31:0]``
    gives ``AD[0]``..``AD[31]``; a 1-bit column without a range is the stem itself.
    """

    header: str
    base: str
    bits: list[str]
    radix: int = 16
    signed: bool = False

    @property
    def width(self) -> int:
        return len(self.bits)


@dataclass
class Layout:
    """A recognised listing: where its rows start and what each column holds."""

    format: str
    data_line: int
    columns: int
    fields: list[Field]
    value_cols: list[int]
    mode: str  # 'state' (one row per clock) or 'timing' (rows at times, every change)
    time_col: int | None = None
    iso_time: bool = False
    sample_col: int | None = None
    window_col: int | None = None
    trigger_col: int | None = None
    gap_col: int | None = None
    rate_hz: Fraction | None = None  # the file's own sample rate (DSView)
    delimiter: str = ","
    notes: list[str] = field(default_factory=list)

    @property
    def title(self) -> str:
        return TITLES[self.format]

    @property
    def channels(self) -> list[str]:
        return [b for f in self.fields for b in f.bits]


def recognise(path: Path) -> Layout | None:
    """The listing layout of ``path`` from its first lines, or None when it is not a listing nicrig knows."""
    head = [(n, s) for n, s in islice(textlines.lines(path), HEAD_LINES)]
    body = [(n, s) for n, s in head if s.strip()]
    if not body:
        return None
    comments = [s for _, s in body if s.lstrip().startswith(";")]
    rows = [(n, s) for n, s in body if not s.lstrip().startswith(";")]
    if not rows:
        return None
    n, first = rows[0]
    cells = _split(first, ",")
    low = [c.lower() for c in cells]
    if tuple(low[:3]) == _ILA_HEAD:
        return _ila(path, n, cells, rows[1][1] if len(rows) > 1 else None)
    if low[0].replace(" ", "") == "time[s]" and not comments:
        return _saleae(path, n, cells, rows[1][1] if len(rows) > 1 else None)
    if low[0] == "time(s)" and (not comments or any("dsview" in c.lower() or "sample rate" in c.lower()
                                                    for c in comments)):
        return _dsview(path, n, cells, comments)
    return None


def choose(path: Path, fmt: str, *, explicit: bool) -> tuple[str, Layout | None]:
    """The format to read ``path`` as and its listing layout (None: sigrok-style CSV).

    ``fmt`` is ``csv`` (from the extension, or ``--format csv``) or a listing format
    asked for with ``--format``. From the extension the content decides; ``--format csv``
    reads sigrok-style CSV whatever the content; a listing format asked for must be
    what the content is, else a FormatError says what it is instead.
    """
    if fmt == "csv" and explicit:
        return "csv", None
    layout = recognise(path)
    if fmt == "csv":
        return (layout.format, layout) if layout is not None else ("csv", None)
    if layout is None or layout.format != fmt:
        raise FormatError(f"{path}: not a {TITLES[fmt]}: {describe(path)} (one starts {expected(fmt)})")
    return fmt, layout


def describe(path: Path) -> str:
    """What the start of ``path`` looks like, for an error that says why it is not the format asked for."""
    layout = recognise(path)
    if layout is not None:
        return f"its content is a {layout.title}"
    for n, s in islice(textlines.lines(path), HEAD_LINES):
        if s.strip() and not s.lstrip().startswith(";"):
            return f"line {n} is {s[:60]!r}"
    return "it has no header or data rows"


def expected(fmt: str) -> str:
    """How a file of listing format ``fmt`` starts (for errors)."""
    return {"ila": "'Sample in Buffer,Sample in Window,TRIGGER,<probes>'",
            "saleae": "'Time [s],<channel names>'",
            "dsview": "'; CSV, generated by DSView...' comments and 'Time(s), <names>'"}[fmt]


def _split(line: str, delim: str) -> list[str]:
    return [c.strip().strip('"').strip() for c in line.split(delim)]


def _unique_stems(stems: list[str]) -> tuple[list[str], list[str]]:
    """Hierarchical probe names (``top/mon/AD``) shortened to their last component where that is unique."""
    tails = [s.rsplit("/", 1)[-1] for s in stems]
    if tails == stems:
        return stems, []
    out = [t if tails.count(t) == 1 else s for s, t in zip(stems, tails)]
    return out, ["probe names shortened to their last path component where unique (top/mon/AD is AD)"]


def _stem(header: str) -> str:
    """A probe header without its bit range: ``AD[31:0]`` is ``AD``."""
    m = _RANGE.match(header)
    return m["base"] if m else header


def _ranged_field(path: Path, line: int, header: str, stem: str) -> Field:
    """A probe column ``name[msb:lsb]``, ``name[k]`` or ``name`` as channels named by its declared indices."""
    m = _RANGE.match(header)
    if not m:
        return Field(header, stem, [stem])
    left = int(m["left"])
    right = int(m["right"]) if m["right"] is not None else left
    width = abs(left - right) + 1
    if width > limits.MAX_CHANNELS:
        raise FormatError(f"{path}:{line}: probe {header!r} is {width:,} bits wide; "
                          f"a source holds at most {limits.MAX_CHANNELS:,} channels")
    step = 1 if left >= right else -1
    # the value's least significant bit is the rightmost declared index
    return Field(header, stem, [f"{stem}[{right + k * step}]" for k in range(width)])


def _ila(path: Path, line: int, cells: list[str], radix_line: str | None) -> Layout:
    gap = len(cells) > 3 and cells[3].upper() == "GAP"
    first_probe = 4 if gap else 3
    probes = cells[first_probe:]
    if not probes or not all(probes):
        raise FormatError(f"{path}:{line}: a Vivado ILA CSV header without probe names")
    limits.check_channels(path, len(probes), "probe columns")
    notes: list[str] = []
    radices: list[str]
    data_line = line + 1
    if radix_line is not None and radix_line.strip().upper().startswith("RADIX"):
        entries = _split(radix_line, ",")
        entries[0] = re.sub(r"(?i)^radix\s*-\s*", "", entries[0])
        if len(entries) < len(probes):
            raise FormatError(f"{path}:{line + 1}: the radix row names {len(entries)} radices for "
                              f"{len(probes)} probes")
        radices = [e.upper() for e in entries[len(entries) - len(probes):]]  # GAP has no radix entry
        data_line = line + 2
    else:
        radices = ["HEX"] * len(probes)
        notes.append("no radix row (a legacy CSV export): probe values read as hex")
    stems, short = _unique_stems([_stem(p) for p in probes])
    notes += short
    fields = []
    for p, stem, rdx in zip(probes, stems, radices):
        if rdx not in _ILA_RADIX:
            raise UsageError(f"{path}:{line + 1}: probe {p!r} is exported in radix {rdx}, which does not give "
                             "its bits back: export it as HEX, BINARY, OCTAL, UNSIGNED or SIGNED")
        f = _ranged_field(path, line, p, stem)
        f.radix, f.signed = _ILA_RADIX[rdx]
        fields.append(f)
    return Layout("ila", data_line, len(cells), fields, list(range(first_probe, len(cells))), "state",
                  sample_col=0, window_col=1, trigger_col=2, gap_col=3 if gap else None, notes=notes)


def _bit_fields(path: Path, line: int, names: list[str]) -> list[Field]:
    if not names or not all(names):
        raise FormatError(f"{path}:{line}: a header with an empty channel name")
    limits.check_channels(path, len(names), "channel columns")
    return [Field(n, n, [n], radix=2) for n in names]


def _saleae(path: Path, line: int, cells: list[str], first_row: str | None) -> Layout:
    names = cells[1:]
    iso = first_row is not None and bool(re.match(r"^\s*\d{4}-\d\d-\d\dT", first_row))
    notes = ["times in ISO 8601 (the export's ISO timestamps option)"] if iso else []
    return Layout("saleae", line + 1, len(cells), _bit_fields(path, line, names), list(range(1, len(cells))),
                  "timing", time_col=0, iso_time=iso, notes=notes)


def _dsview(path: Path, line: int, cells: list[str], comments: list[str]) -> Layout:
    rate: Fraction | None = None
    notes = []
    for c in comments:
        body = c.lstrip()[1:].strip()
        m = re.match(r"(?i)sample\s*rate\s*:\s*(.*)$", body)
        if m:
            rate = dsview_rate(path, m[1])
        elif body.lower().startswith("csv, generated by"):
            notes.append(body)
    return Layout("dsview", line + 1, len(cells), _bit_fields(path, line, cells[1:]), list(range(1, len(cells))),
                  "timing", time_col=0, rate_hz=rate, notes=notes)


def dsview_rate(path: Path, text: str) -> Fraction:
    """DSView's ``sr_samplerate_string`` text (``100 MHz``, ``12.5 MHz``, ``500 kHz``) as an exact rate in Hz."""
    m = _DSVIEW_RATE.match(text)
    if not m:
        raise FormatError(f"{path}: bad '; Sample rate:' comment {text.strip()[:40]!r}")
    try:
        hz = Fraction(Decimal(m["num"])) * _SI[m["prefix"]]
    except InvalidOperation:
        raise FormatError(f"{path}: bad '; Sample rate:' comment {text.strip()[:40]!r}") from None
    limits.check_rate(path, float(hz), "the '; Sample rate:' comment's rate")
    return hz
