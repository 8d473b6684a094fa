"""What an imported file may declare: the limits every importer checks before it allocates.

A few hundred bytes of a file can declare a billion probes, a million-bit vector, a
sample rate of 1e30 Hz or a time of 10^40: each importer (``vcd``, ``srzip``,
``csv_logic``) compares what a file declares against these limits first, and refuses
with one line naming the file and the value. The limits are documented in
docs/import-export.md ("Limits").
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import IO, AnyStr

from nicrig.errors import FormatError

#: Logic channels in one source: 512 bytes per packed sample, 32 MiB per stored chunk.
MAX_CHANNELS = 4096
#: Bytes per packed sample (sigrok's ``unitsize``) that :data:`MAX_CHANNELS` needs.
MAX_UNITSIZE = MAX_CHANNELS // 8
#: Samples in one imported source.
MAX_SAMPLES = 2_000_000_000
#: Sample rates (Hz): nicrig keeps time in whole picoseconds, so at most 1 THz; at least 1 mHz.
MIN_SAMPLE_RATE_HZ = 1e-3
MAX_SAMPLE_RATE_HZ = 1e12
#: Times (ps) are stored as signed 64-bit integers: about 106 days.
MAX_TIME_PS = 2**63 - 1
#: Bytes (characters, in a CSV read as text) in one line of a text file: a CSV row of :data:`MAX_CHANNELS` quoted
#: fields is about 25 KB, a VCD line a time step or a value change; a longer line is no such file.
MAX_LINE_BYTES = 1 << 20
#: Bytes (characters) read at a time by :func:`bounded_lines`.
READ_BLOCK = 1 << 18
#: Variables a VCD header may declare (each a few dozen bytes of header), whatever ``--scope`` imports.
MAX_VCD_VARIABLES = 1_000_000
#: How deep VCD ``$scope`` declarations may nest: designs are a few dozen levels deep; the limit bounds the
#: work of naming a variable by its trailing scope names.
MAX_VCD_SCOPE_DEPTH = 256


def check_channels(path: Path, count: int, what: str = "logic channels") -> None:
    """Refuse more than :data:`MAX_CHANNELS` channels (``what`` says what the file declared)."""
    if count > MAX_CHANNELS:
        raise FormatError(f"{path}: declares {count:,} {what}; a source holds at most {MAX_CHANNELS:,}")


#: What a refusal of a sample rate says the range is, and why.
RATE_RANGE = (f"{MIN_SAMPLE_RATE_HZ:g} Hz to {MAX_SAMPLE_RATE_HZ:g} Hz "
              "(nicrig keeps time in whole picoseconds)")


def rate_ok(rate_hz: float) -> bool:
    """Whether ``rate_hz`` (Hz) is finite and within [:data:`MIN_SAMPLE_RATE_HZ`, :data:`MAX_SAMPLE_RATE_HZ`]."""
    return math.isfinite(rate_hz) and MIN_SAMPLE_RATE_HZ <= rate_hz <= MAX_SAMPLE_RATE_HZ


def check_rate(path: Path, rate_hz: float, where: str = "sample rate") -> float:
    """``rate_hz`` if :func:`rate_ok`; else a FormatError naming the file."""
    if not rate_ok(rate_hz):
        raise FormatError(f"{path}: {where} {rate_hz:g} Hz is outside {RATE_RANGE}")
    return rate_hz


def check_samples(path: Path, count: int) -> None:
    """Refuse more than :data:`MAX_SAMPLES` samples."""
    if count > MAX_SAMPLES:
        raise FormatError(f"{path}: {count:,} samples; an imported source holds at most {MAX_SAMPLES:,}")


def bounded_lines(f: IO[AnyStr], path: Path, what: str, first_line: int = 1,
                  max_bytes: int = MAX_LINE_BYTES) -> Iterator[tuple[int, AnyStr]]:
    """``(line number, line without its "\\n")`` for each line of ``f`` (text or binary) from where it stands,
    the first numbered ``first_line``; a line longer than ``max_bytes`` is a FormatError naming ``path``, the line
    and ``what`` the file should be, read no further than a block past the limit: a 200 MB file of one line costs
    a few MB, not 200. Read by blocks of :data:`READ_BLOCK` split at once (a ``readline`` a line costs twice as much),
    so ``f``'s position is a block ahead: count the lines' lengths (+1 each) for offsets."""
    lineno = first_line - 1
    pending = f.read(0)
    nl = "\n" if isinstance(pending, str) else b"\n"
    while True:
        block = f.read(READ_BLOCK)
        if not block:
            break
        parts = (pending + block).split(nl)  # type: ignore[operator]
        pending = parts.pop()
        for line in parts:
            lineno += 1
            if len(line) >= max_bytes:
                break
            yield lineno, line
        else:
            if len(pending) < max_bytes:
                continue
            lineno += 1
        raise FormatError(f"{path}:{lineno}: a line longer than {max_bytes:,} characters: not {what}")
    if pending:
        yield lineno + 1, pending
