"""Logic-analyzer and FPGA listings (Vivado ILA, Saleae Logic 2, DSView CSV) streamed into packed samples.

A listing gives one row per sample of a state analyzer's clock (an ILA: state
mode, one sample per row, timestamps from the clock's rate) or one row per change
of a timing analyzer (Saleae, DSView: timing mode, each row placed on the sample
grid by its time, the gaps holding the previous row). Bus columns are split into
one channel per bit named ``BUS[k]``, so ``AD[31:0]`` becomes ``AD[0]``..``AD[31]``
and the import's role guessing finds ``AD``, ``C/BE#``, ``FRAME#`` as for a VCD.

Times are exact: seconds are read as decimals into integer picoseconds, sample
indices come from integer (or rational) arithmetic, never from a float that is
added up. Rows are read a line at a time (each line bounded, see
:mod:`~nicrig.acquisition.textlines`) and written a block at a time, so memory
stays bounded whatever the listing's size. A damaged row is a FormatError naming
the file and the line. See docs/import-export.md, "Listings".
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from decimal import Decimal, InvalidOperation
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.acquisition import limits, textlines
from nicrig.acquisition.listing_formats import Field, Layout

from nicrig.errors import FormatError, UsageError

BLOCK_SAMPLES = 1 << 20
Progress = Callable[[int, int], None]

_DIGITS = {16: re.compile(r"[0-9A-Fa-f]+"), 8: re.compile(r"[0-7]+"), 2: re.compile(r"[01]+"),
           10: re.compile(r"-?[0-9]+")}
_UNKNOWN = re.compile(r"[xX]+")
_PLAIN = re.compile(r"^(?P<sign>-?)(?P<whole>\d+)\.(?P<frac>\d{1,12})$")
_ISO = re.compile(r"^(?P<date>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,12}))?(?P<tz>Z|[+-]\d\d:?\d\d)?$")


def period_ps(rate_hz: Fraction) -> Fraction:
    """The sample period in picoseconds of ``rate_hz`` (Hz), exactly."""
    return Fraction(10**12) / rate_hz


def seconds_ps(text: str) -> int | None:
    """A time in seconds (``0.000016460``, ``1e-08``, ``-3.5E-9``) as integer picoseconds, rounded half to even.

    None when ``text`` is not a finite decimal number or lies beyond :data:`limits.MAX_TIME_PS`.
    """
    m = _PLAIN.match(text)
    if m and len(m["whole"]) <= 7:  # the common '0.000016460': no Decimal needed
        ps = int(m["whole"]) * 10**12 + int(m["frac"].ljust(12, "0"))
        return -ps if m["sign"] else ps
    try:
        v = Decimal(text)
    except (InvalidOperation, ValueError):
        return None
    if not v.is_finite() or v.adjusted() > 7:  # the exponent first: '1e999999' never becomes a number
        return None
    ps = int((v * 10**12).to_integral_value())
    return ps if abs(ps) <= limits.MAX_TIME_PS else None


def iso_ps(text: str) -> int | None:
    """An ISO 8601 time with up to 12 fraction digits (``2022-06-24T18:51:08.852112100+00:00``) as ps since 1970."""
    m = _ISO.match(text.strip())
    if not m:
        return None
    tz = m["tz"] or "+00:00"
    try:
        whole = datetime.fromisoformat(m["date"] + ("+00:00" if tz == "Z" else tz))
    except ValueError:
        return None
    frac = (m["frac"] or "").ljust(12, "0")
    return int(whole.timestamp()) * 10**12 + int(frac)


def cell_value(text: str, f: Field) -> tuple[int, int] | None:
    """``(value, unknown-bit mask)`` of one cell of bus or signal ``f`` in its radix; None when it is not one.

    Unknown digits (``X``) give 0 in the value and their bits in the mask: a hex ``X``
    is 4 unknown bits, a binary one 1, and an ``X`` in a decimal column makes the
    whole value unknown. A value wider than the field is None.
    """
    t = text.strip().strip('"')
    full = (1 << f.width) - 1
    if _DIGITS[f.radix].fullmatch(t):
        v = int(t, f.radix)
        if f.signed:
            half = 1 << (f.width - 1)
            return (v & full, 0) if -half <= v < half else None
        return (v, 0) if v <= full else None
    if not t or not all(c in "xX" or _DIGITS[f.radix].fullmatch(c) for c in t) or (
            t[0] == "0" and t[1:2] in "xX" and t[2:].strip("xX")):  # '0x12' is a C prefix, not an unknown digit
        return None
    if f.radix == 10:
        return (0, full) if _UNKNOWN.fullmatch(t) else None
    bits_per_digit = {16: 4, 8: 3, 2: 1}[f.radix]
    digit_mask = (1 << bits_per_digit) - 1
    v = x = 0
    for c in t:
        v <<= bits_per_digit
        x <<= bits_per_digit
        if c in "xX":
            x |= digit_mask
        else:
            v |= int(c, f.radix)
    return (v, x & full) if v <= full else None


class ListingReader:
    """Stream a recognised listing into packed samples: construct, read the attributes, iterate :meth:`blocks`.

    ``blocks()`` yields ``(packed, timestamps_ps or None)`` like the VCD reader. State
    listings (an ILA) need ``sample_rate_hz``, the clock the ILA samples on, for their
    timestamps; timing listings take the rate from ``sample_rate_hz``, else the file
    (DSView's ``; Sample rate:``), else the time column (the GCD of its steps).
    """

    restored = False

    def __init__(self, path: str | Path, layout: Layout, *, sample_rate_hz: float | None = None,
                 x_as: str = "0", window: int | None = None, block_samples: int | None = None,
                 max_samples: int | None = None, progress: Progress | None = None):
        if x_as not in ("0", "1", "hold"):
            raise UsageError(f"--x-as must be 0, 1 or hold, not {x_as!r}")
        self.path = Path(path)
        self.layout = layout
        self.meta: dict[str, Any] = {}
        self.channels = layout.channels
        limits.check_channels(self.path, len(self.channels), "channels (bus bits and signals)")
        self.mode = layout.mode
        self.x_as = x_as
        self.window = window
        self.block_samples = int(block_samples or BLOCK_SAMPLES)
        self.max_samples = int(max_samples or limits.MAX_SAMPLES)
        self.progress = progress
        self.notes: list[str] = list(layout.notes)
        self.stats: dict[str, Any] = {}
        self.trigger_sample = 0
        self.offset_ps = 0
        self._unit = max(1, (len(self.channels) + 7) // 8)
        # the rate as the decimal it was written as (66.67e6 is 6667000000/100, not the nearest binary fraction)
        self._given = Fraction(repr(float(sample_rate_hz))) if sample_rate_hz is not None else None
        if window is not None and layout.window_col is None:
            raise UsageError(f"--window applies to ILA listings (capture windows), not to a {layout.title}")
        if layout.mode == "state" and self._given is None:
            raise UsageError(f"{self.path}: a {layout.title} has no times, one row per clock of the ILA: "
                             "give --sample-rate HZ, the ILA's clock (e.g. 33.333MHz)")
        rate = self._given or layout.rate_hz
        self.samplerate_hz: float | None = float(rate) if rate is not None else None
        self._xcount: Counter[int] = Counter()

    # -- rows -------------------------------------------------------------------------------
    def _cells(self) -> Iterator[tuple[int, list[str]]]:
        """``(line, cells)`` per data row, with the number of cells checked."""
        lay = self.layout
        want, delim, first = lay.columns, lay.delimiter, lay.data_line
        for lineno, text in textlines.lines(self.path, progress=self.progress):
            if lineno < first:
                continue
            s = text.strip()
            if not s or s[0] == ";":
                continue
            cells = s.split(delim)
            if len(cells) != want:
                raise FormatError(f"{self.path}:{lineno}: {len(cells)} fields, expected {want}"
                                  + (" (truncated line?)" if len(cells) < want else ""))
            yield lineno, cells

    def _rows(self) -> Iterator[tuple[int, list[str], int, int]]:
        """``(line, cells, value, unknown mask)`` per data row, validated; channel k is bit k of both ints.

        The value has the unknown bits already replaced as ``--x-as`` says; the caller counts the masks
        of the rows it stores.
        """
        lay = self.layout
        fields = lay.fields
        bitwise = all(f.width == 1 and f.radix == 2 for f in fields) and lay.value_cols == list(
            range(lay.value_cols[0], lay.value_cols[0] + len(fields)))
        lo = lay.value_cols[0]
        nch = len(self.channels)
        policy = self.x_as
        prev = 0
        for lineno, cells in self._cells():
            x = 0
            if bitwise:
                bits = "".join(cells[lo:])
                if len(bits) == nch and not bits.strip("01"):
                    value = int(bits[::-1], 2)
                else:
                    value, x = self._slow(lineno, cells)
            else:
                value, x = self._slow(lineno, cells)
            if x:
                value &= ~x
                if policy == "1":
                    value |= x
                elif policy == "hold":
                    value |= prev & x
            prev = value
            yield lineno, cells, value, x

    def _slow(self, lineno: int, cells: list[str]) -> tuple[int, int]:
        value = x = shift = 0
        for f, col in zip(self.layout.fields, self.layout.value_cols):
            got = cell_value(cells[col], f)
            if got is None:
                what = {16: "a hex value", 8: "an octal value", 2: "0, 1 or X", 10: "a decimal value"}[f.radix]
                raise FormatError(f"{self.path}:{lineno}: column {f.header!r}: {cells[col].strip()[:40]!r} is not "
                                  f"{what} of {f.width} bit(s)")
            value |= got[0] << shift
            x |= got[1] << shift
            shift += f.width
        return value, x

    def _time(self, lineno: int, cells: list[str]) -> int:
        text = cells[self.layout.time_col].strip().strip('"')  # type: ignore[index]
        ps = iso_ps(text) if self.layout.iso_time else seconds_ps(text)
        if ps is not None:
            return ps
        try:
            finite = Decimal(text).is_finite()
        except (InvalidOperation, ValueError):
            finite = False
        if finite:
            raise FormatError(f"{self.path}:{lineno}: time {text[:40]} is beyond the {limits.MAX_TIME_PS:.3g} ps "
                              "(about 106 days) a timestamp can hold")
        raise FormatError(f"{self.path}:{lineno}: bad time {text[:40]!r}")

    def _pack(self, values: list[int]) -> np.ndarray:
        unit = self._unit
        buf = b"".join(v.to_bytes(unit, "little") for v in values)
        return np.frombuffer(buf, dtype=np.uint8).reshape(-1, unit)

    # -- blocks -----------------------------------------------------------------------------
    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        if self.mode == "state":
            yield from self._state_blocks()
        else:
            yield from self._timing_blocks()
        self._finish_counts()

    def _state_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """An ILA listing: one sample per row of the chosen capture window, at multiples of the clock period."""
        lay = self.layout
        period = period_ps(self._given)  # type: ignore[arg-type]
        block = self.block_samples
        values: list[int] = []
        n = 0
        window = 0
        prev_in_window = prev_sample = None
        trigger: int | None = None
        wanted = self.window if self.window is not None else 0
        windows_seen = 1
        for lineno, cells, value, x in self._rows():
            in_window = _count(self.path, lineno, cells[lay.window_col], "Sample in Window")  # type: ignore[index]
            sample = _count(self.path, lineno, cells[lay.sample_col], "Sample in Buffer")  # type: ignore[index]
            if prev_in_window is not None and in_window <= prev_in_window:
                window += 1
                windows_seen += 1
                if self.window is None:
                    raise UsageError(f"{self.path}:{lineno}: a second capture window starts here (sample in window "
                                     f"{in_window} after {prev_in_window}); the ILA's windows are separate triggers, "
                                     "not contiguous in time: import one with --window 0, 1, ...")
            elif prev_sample is not None and sample != prev_sample + 1:
                raise FormatError(f"{self.path}:{lineno}: sample {sample} follows sample {prev_sample}: "
                                  "rows missing or out of order")
            prev_in_window, prev_sample = in_window, sample
            if window != wanted:
                continue
            if trigger is None and cells[lay.trigger_col].strip() == "1":  # type: ignore[index]
                trigger = n
            if x:
                self._xcount[x] += 1
            values.append(value)
            n += 1
            if n > self.max_samples:
                raise UsageError(f"{self.path}:{lineno}: more than {self.max_samples:,} samples")
            if len(values) >= block:
                yield self._pack(values), _stamps(n - len(values), len(values), period)
                values = []
        if self.window is not None and self.window >= windows_seen:
            raise UsageError(f"{self.path}: --window {self.window}, but the listing holds {windows_seen} capture "
                             f"window(s) (0..{windows_seen - 1})")
        if values:
            yield self._pack(values), _stamps(n - len(values), len(values), period)
        if n == 0:
            raise FormatError(f"{self.path}: a header but no data rows")
        self.trigger_sample = trigger if trigger is not None else 0
        if trigger is None:
            self.notes.append("no row has TRIGGER 1: the trigger is put at the first sample")
        if windows_seen > 1:
            self.notes.append(f"capture window {wanted} of {windows_seen}")
        self.stats["samples"] = n

    def _derived_rate(self) -> tuple[Fraction, int]:
        """The rate from the time column: 1 / the GCD of the times' distances from the first row (a first pass)."""
        g = 0
        t0: int | None = None
        for lineno, cells in self._cells():
            t = self._time(lineno, cells)
            if t0 is None:
                t0 = t
            g = math.gcd(g, t - t0)
        if not g:
            raise UsageError(f"{self.path}: cannot derive a sample rate from a single time; give --sample-rate HZ")
        rate = Fraction(10**12, g)
        limits.check_rate(self.path, float(rate), "the time column's step gives a sample rate of")
        self.notes.append(f"sample rate {float(rate):g} Hz from the time column's steps (rows are changes: "
                          "a lower bound of the analyzer's rate; give --sample-rate for its own)")
        return rate, g

    def _timing_blocks(self) -> Iterator[tuple[np.ndarray, None]]:
        """Rows at change times placed on the sample grid; each row's values hold until the next row's sample."""
        strict = self._given is None  # the file's own rate, or the derived one: every row is on a sample
        if self._given is not None:
            rate = self._given
        elif self.layout.rate_hz is not None:
            rate = self.layout.rate_hz
            self.notes.append(f"sample rate {float(rate):g} Hz from the file's '; Sample rate:' comment")
        else:
            rate, _ = self._derived_rate()
        self.samplerate_hz = float(rate)
        period = period_ps(rate)
        runs = _Runs(self, self.block_samples)
        t0: int | None = None
        prev_idx = -1
        prev_value = last_x = 0
        everything = (1 << len(self.channels)) - 1
        between = 0
        rows = 0
        for lineno, cells, value, x in self._rows():
            t = self._time(lineno, cells)
            if t0 is None:
                t0 = t
            idx, exact = _sample_index(t - t0, period)
            if not exact:
                if strict:
                    raise FormatError(f"{self.path}:{lineno}: time {cells[self.layout.time_col].strip()} is not on "
                                      f"the {float(rate):g} Hz sample grid of the first row")
                between += 1
            # two rows in one sample period (a given rate): the later one is what the sample holds
            if idx < prev_idx or (idx == prev_idx and exact):
                raise FormatError(f"{self.path}:{lineno}: time {cells[self.layout.time_col].strip()} is not "
                                  "after the previous row's")
            if idx >= self.max_samples:
                raise UsageError(f"{self.path}:{lineno}: more than {self.max_samples:,} samples; "
                                 "give a lower --sample-rate HZ")
            if rows:
                yield from runs.put(prev_value, idx - prev_idx)
            if x:
                self._xcount[x] += 1
            prev_idx, prev_value, last_x = idx, value, x
            rows += 1
        if not rows:
            raise FormatError(f"{self.path}: a header but no data rows")
        if last_x == everything and rows > 1:
            self.notes.append("the last row (every channel X) marks the end of the capture")
            self._xcount[last_x] -= 1
        else:
            yield from runs.put(prev_value, 1)
        yield from runs.flush()
        self.offset_ps = t0 or 0
        if self.layout.iso_time:
            start = datetime.fromtimestamp((t0 or 0) // 10**12, tz=timezone.utc).isoformat()
            self.notes.append(f"times are relative to the first row, at {start} (+{(t0 or 0) % 10**12} ps)")
            self.offset_ps = 0
        if between:
            self.notes.append(f"{between:,} row time(s) fell between two samples at {float(rate):g} Hz "
                              "(pulses shorter than the sample period may be lost)")
        self.stats["samples"] = runs.total
        self.stats["rows"] = rows

    def _finish_counts(self) -> None:
        out = [0] * len(self.channels)
        for mask, n in self._xcount.items():
            k = 0
            while mask and n > 0:
                if mask & 1:
                    out[k] += n
                mask >>= 1
                k += 1
        self.stats["x_samples"] = {self.channels[k]: n for k, n in enumerate(out) if n}

    # -- description ------------------------------------------------------------------------
    def summary_notes(self) -> list[str]:
        out = [f"imported from {self.path.name} ({self.layout.title})"]
        if self.mode == "state":
            out.append(f"one sample per row (a clock of the ILA), timestamps at {self.samplerate_hz:g} Hz")
        counts = self.stats.get("x_samples", {})
        if counts:
            how = "as the previous value" if self.x_as == "hold" else f"as {self.x_as}"
            top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
            out.append(f"X (no data) read {how}: rows with X on {len(counts)} channel(s) ("
                       + ", ".join(f"{k} {n:,}" for k, n in top) + (", ..." if len(counts) > 6 else "") + ")")
        return out + self.notes


def _count(path: Path, lineno: int, text: str, what: str) -> int:
    t = text.strip().strip('"')
    if not t.isdigit() or len(t) > 18:
        raise FormatError(f"{path}:{lineno}: {what} {t[:40]!r} is not a sample number")
    return int(t)


def _stamps(first: int, count: int, period: Fraction) -> np.ndarray:
    """Timestamps (ps) of samples ``first .. first+count-1`` at ``period`` ps, each rounded from its exact time."""
    if period.denominator == 1:
        return np.arange(first, first + count, dtype=np.int64) * int(period)
    num, den = period.numerator, period.denominator
    return np.array([(2 * i * num + den) // (2 * den) for i in range(first, first + count)], dtype=np.int64)


def _sample_index(dt_ps: int, period: Fraction) -> tuple[int, bool]:
    """The first sample at or after ``dt_ps`` on a grid of ``period`` ps, and whether the time is on the grid."""
    q, r = divmod(Fraction(dt_ps) / period, 1) if period.denominator != 1 else divmod(dt_ps, int(period))
    return (int(q), True) if r == 0 else (int(q) + 1, False)


class _Runs:
    """Rows with their run lengths, expanded into blocks of ``block`` packed samples."""

    def __init__(self, reader: ListingReader, block: int):
        self.reader = reader
        self.block = block
        self.values: list[int] = []
        self.lengths: list[int] = []
        self.pending = 0
        self.total = 0

    def put(self, value: int, length: int) -> Iterator[tuple[np.ndarray, None]]:
        while length:
            take = min(length, self.block - self.pending)
            self.values.append(value)
            self.lengths.append(take)
            self.pending += take
            length -= take
            if self.pending >= self.block:
                yield from self.flush()

    def flush(self) -> Iterator[tuple[np.ndarray, None]]:
        if self.values:
            out = np.repeat(self.reader._pack(self.values), self.lengths, axis=0)
            self.values, self.lengths, self.pending = [], [], 0
            self.total += len(out)
            yield out, None
