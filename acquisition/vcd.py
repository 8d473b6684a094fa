"""Value Change Dump files (IEEE 1364-2005 clause 18): read into and write from capture sets.

Reading (:class:`VcdReader`) turns the value changes of a VCD into packed samples,
streamed a block at a time:

- **timing mode**: sample ``i`` is taken at VCD time ``round(i * period)`` (ps) and holds
  the values after every change at or before that time. The period comes from the
  user's sample rate, from a nicrig export's header, or from the GCD of every time in
  the file (a first pass over the file), so that every change lands on a sample.
- **state mode** (``clock``): one sample per rising edge of the clock, holding the values
  as they stood just *before* the edge: a change at the edge's own time is not yet
  visible (setup semantics). Timestamps are the VCD times in ps.

Vectors are split into one channel per bit, ``NAME[k]`` named by the declared index
(``AD [31:0]``, ``AD [0:31]``, bit-blasted ``AD [5]``); ``x``/``z`` bits become 0, 1 or
the bit's previous value by policy and are counted. The header is parsed by pyvcd's
tokenizer; the value changes by a line-based scanner of ours, about 20 times faster
than a character-based one, which also reports a file cut inside a value change.

Writing (:func:`write_vcd`) uses pyvcd's writer: vectors as multi-bit wires (or bit by
bit, for sigrok's VCD input), single channels as 1-bit wires, times in ps from the common
timeline, only changes. A
state-mode source gets a clock wire whose rising edges are its samples, each sample's
values set at the previous edge, so any VCD reader sampling at rising edges with setup
semantics (our ``--clock``) gets the samples back exactly. A ``$comment`` starting with
``nicrig-export`` carries what a VCD cannot (sample rate, trigger, renamed channels);
:class:`VcdReader` reads it back so a round trip is exact.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

from nicrig.acquisition import limits

from nicrig.atomic import replacing
from nicrig.errors import FormatError, UsageError

#: Marks the ``$comment`` nicrig writes into its exports (followed by JSON).
META_TAG = "nicrig-export"
META_VERSION = 1
#: Samples per appended block: 1 Mi samples, 1 to 16 MiB for up to 128 channels.
BLOCK_SAMPLES = 1 << 20
#: Digits of a VCD time that can fit :data:`limits.MAX_TIME_PS` (checked before the text becomes a number).
_MAX_TIME_DIGITS = len(str(limits.MAX_TIME_PS))
_MAX_HEADER_BYTES = 64 << 20
#: Scopes named in a "no such scope" message's suggestions: the first this many declared.
_SCOPES_SUGGESTED = 1000

_UNIT_PS = {"s": 10**12, "ms": 10**9, "us": 10**6, "ns": 10**3, "ps": 1}
#: VCD variable types that carry no logic bits: skipped with a note.
_NON_LOGIC = {"real", "realtime", "real_parameter", "shortreal", "event", "string"}

# value characters: IEEE 1364 0 1 x z plus the VHDL std_logic states GHDL/nvc emit
_STATE_CHARS = frozenset(b"01xXzZuUwWhHlL-")
_VALUE_RE = re.compile(rb"[01xXzZuUwWhHlL-]+")
_ONE_CHARS = b"1hH"
_X_CHARS = b"xXuUwW-"
_Z_CHARS = b"zZ"


def _table(ones: bytes) -> bytes:
    return bytes(49 if i in ones else 48 for i in range(256))


_T_ONES, _T_X, _T_Z = _table(_ONE_CHARS), _table(_X_CHARS), _table(_Z_CHARS)

Policy = str  # "0", "1" or "hold"
Progress = Callable[[int, int], None]


# ---------------------------------------------------------------------------------------------
# header
# ---------------------------------------------------------------------------------------------
class Scope:
    """A scope a VCD header declares: its parent (None for the top level) and its name.

    A scope is kept as a link to its parent, never as a copy of its whole path, and :meth:`Scopes.enter`
    gives one object per distinct path: a header of n nested ``$scope`` declarations costs O(n) time and
    memory, not O(n²).
    """

    __slots__ = ("parent", "name", "depth")

    def __init__(self, parent: Scope | None, name: str):
        self.parent = parent
        self.name = name
        self.depth = 0 if parent is None else parent.depth + 1

    @property
    def names(self) -> tuple[str, ...]:
        """The scope's path from the top level (``("tb", "pci")``); O(depth)."""
        out: list[str] = []
        s: Scope | None = self
        while s is not None and s.parent is not None:
            out.append(s.name)
            s = s.parent
        return tuple(reversed(out))

    def tail(self, k: int) -> list[Scope]:
        """This scope and its ancestors, nearest first, at most ``k`` of them (the top level not counted)."""
        out: list[Scope] = []
        s: Scope | None = self
        while s is not None and s.parent is not None and len(out) < k:
            out.append(s)
            s = s.parent
        return out


class Scopes:
    """Every scope a header declares, each distinct path once, in the order first declared (parents first)."""

    def __init__(self) -> None:
        self.top = Scope(None, "")
        self.all: list[Scope] = [self.top]
        self._child: dict[tuple[int, str], Scope] = {}

    def enter(self, parent: Scope, name: str) -> Scope:
        """The scope ``name`` inside ``parent`` (the same object each time the path is declared again)."""
        key = (id(parent), name)
        s = self._child.get(key)
        if s is None:
            s = self._child[key] = Scope(parent, name)
            self.all.append(s)
        return s

    def ending_with(self, want: tuple[str, ...]) -> list[Scope]:
        """Scopes whose path ends in ``want`` (``("pci", "core")`` matches ``tb.pci.core``)."""
        return [s for s in self.all if s.depth >= len(want) and [t.name for t in s.tail(len(want))] == list(want[::-1])]

    def within(self, root: Scope) -> set[Scope]:
        """``root`` and every scope inside it: one pass, since a scope is declared after its parent."""
        inside = {root}
        for s in self.all:
            if s.parent in inside:
                inside.add(s)
        return inside


@dataclass
class VcdVar:
    """One ``$var`` declaration."""

    scope: Scope
    type: str
    size: int
    id_code: str
    reference: str
    bit_index: None | int | tuple[int, int]
    line: int

    @property
    def path(self) -> str:
        return ".".join((*self.scope.names, self.reference))


@dataclass
class VcdHeader:
    """What precedes ``$enddefinitions``: timescale, variables, comments, nicrig's metadata."""

    path: Path
    timescale_ps: int
    timescale_text: str
    variables: list[VcdVar]
    scopes: Scopes
    meta: dict[str, Any] | None
    notes: list[str]
    body_offset: int  # byte offset of the line after the one holding $enddefinitions $end
    body_line: int  # number of the line holding $enddefinitions $end
    body_rest: bytes  # what follows $enddefinitions $end on that line


def _scan_header(path: Path, f: io.BufferedReader) -> tuple[bytes, int, int, bytes]:
    """Find ``$enddefinitions $end`` without tokenizing; return the header bytes and where the body starts.

    The header is gathered into one buffer, not kept line by line: a line is a few dozen bytes, a Python
    object for each would cost more than its text."""
    header = bytearray()
    lineno = total = 0
    first, in_text, want_end = True, False, False
    text_blocks = {b"$comment", b"$date", b"$version", b"$attrbegin"}
    for lineno, raw in limits.bounded_lines(f, path, "a VCD file"):
        total += len(raw) + 1
        if total > _MAX_HEADER_BYTES:
            raise FormatError(f"{path}:{lineno}: no $enddefinitions in the first {total} bytes: not a VCD file")
        words = raw.split()
        for j, w in enumerate(words):
            if first:
                if not w.startswith(b"$"):
                    shown = w[:20].decode("ascii", "replace")
                    raise FormatError(f"{path}:{lineno}: not a VCD file: starts with {shown!r}, not a $ declaration")
                first = False
            if in_text:
                in_text = w != b"$end"
            elif want_end:
                if w != b"$end":
                    raise FormatError(f"{path}:{lineno}: expected $end after $enddefinitions, found {w[:20]!r}")
                header += b" ".join(words[: j + 1]) + b"\n"
                return bytes(header), total, lineno, b" ".join(words[j + 1:])
            elif w in text_blocks:
                in_text = True
            elif w == b"$enddefinitions":
                want_end = True
        header += raw
        header += b"\n"
    what = "is empty" if not lineno else "ends before $enddefinitions (truncated header?)"
    raise FormatError(f"{path}:{lineno}: {what}: not a complete VCD file")


_META_FIELDS: dict[str, Callable[[Any], bool]] = {
    "version": lambda v: type(v) is int and 0 < v <= META_VERSION,
    "source": lambda v: v is None or isinstance(v, str),
    "mode": lambda v: v in ("timing", "state"),
    "samplerate_hz": lambda v: v is None or (type(v) in (int, float) and limits.rate_ok(v)),
    "trigger_sample": lambda v: v is None or (type(v) is int and 0 <= v <= limits.MAX_SAMPLES),
    "offset_ps": lambda v: v is None or (type(v) is int and abs(v) <= limits.MAX_TIME_PS),
    "time_origin_ps": lambda v: v is None or (type(v) is int and abs(v) <= limits.MAX_TIME_PS),
    "clock": lambda v: v is None or isinstance(v, str),
    "channels": lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v),
    "names": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    "roles": lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    "bus": lambda v: isinstance(v, dict),
}


def read_meta(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """A ``nicrig-export`` comment's JSON, checked field by field: ``(meta, None)`` or ``(None, what is wrong)``.

    A comment any other tool could have written wrongly is ignored with a note,
    never trusted: each field must have the type and range :func:`write_vcd` gives it.
    """
    try:
        meta = json.loads(text)
    except ValueError as exc:
        return None, str(exc)
    if not isinstance(meta, dict):
        return None, "not a JSON object"
    if "version" not in meta or "mode" not in meta:
        return None, "no version or mode"
    bad = [k for k, ok in _META_FIELDS.items() if k in meta and not ok(meta[k])]
    if bad:
        return None, f"bad {', '.join(bad)}"
    return meta, None


def read_header(path: str | os.PathLike[str]) -> VcdHeader:
    """Parse a VCD's declarations (pyvcd's tokenizer) up to ``$enddefinitions``."""
    from vcd.reader import TokenKind, VCDParseError, tokenize

    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise FormatError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        head, offset, body_line, rest = _scan_header(path, f)
    notes: list[str] = []
    if not head.isascii():
        head = bytes(b if b < 128 else 63 for b in head)  # pyvcd reads ASCII: non-ASCII bytes become '?'
        notes.append("non-ASCII characters in the header were replaced by '?'")
    timescale: tuple[int, str] | None = None
    scopes = Scopes()
    scope = scopes.top
    variables: list[VcdVar] = []
    meta: dict[str, Any] | None = None
    try:
        for tok in tokenize(io.BytesIO(head)):
            kind = tok.kind
            if kind is TokenKind.TIMESCALE:
                timescale = (int(tok.timescale.magnitude), tok.timescale.unit.value)
                ts_line = tok.span.start.line
            elif kind is TokenKind.SCOPE:
                if scope.depth >= limits.MAX_VCD_SCOPE_DEPTH:
                    raise FormatError(f"{path}:{tok.span.start.line}: $scope nested deeper than "
                                      f"{limits.MAX_VCD_SCOPE_DEPTH} levels")
                scope = scopes.enter(scope, tok.scope.ident)
            elif kind is TokenKind.UPSCOPE:
                if scope.parent is None:
                    raise FormatError(f"{path}:{tok.span.start.line}: $upscope without a matching $scope")
                scope = scope.parent
            elif kind is TokenKind.VAR:
                v = tok.var
                line = tok.span.start.line
                if len(variables) >= limits.MAX_VCD_VARIABLES:
                    raise FormatError(f"{path}:{line}: more than {limits.MAX_VCD_VARIABLES:,} variables declared")
                if int(v.size) > limits.MAX_CHANNELS and v.type_.value not in _NON_LOGIC:
                    raise FormatError(f"{path}:{line}: {v.reference} is declared {int(v.size):,} bits wide; a "
                                      f"source holds at most {limits.MAX_CHANNELS:,} channels")
                variables.append(VcdVar(scope, v.type_.value, int(v.size), v.id_code, v.reference,
                                        v.bit_index, line))
            elif kind is TokenKind.COMMENT:
                text = tok.comment.strip()
                if text.startswith(META_TAG):
                    meta, problem = read_meta(text[len(META_TAG):])
                    if problem:
                        notes.append(f"ignored an unreadable {META_TAG} comment ({problem})")
            elif kind in (TokenKind.DUMPVARS, TokenKind.DUMPALL, TokenKind.DUMPON, TokenKind.DUMPOFF,
                          TokenKind.CHANGE_TIME, TokenKind.CHANGE_SCALAR, TokenKind.CHANGE_VECTOR):
                raise FormatError(f"{path}:{tok.span.start.line}: value changes before $enddefinitions")
    except VCDParseError as exc:
        raise FormatError(f"{path}:{exc.loc.line}: {str(exc).split(': ', 1)[-1]}") from None
    if timescale is None:
        raise FormatError(f"{path}: no $timescale declaration (add e.g. '$timescale 1 ns $end' to the header)")
    mag, unit = timescale
    if unit not in _UNIT_PS:
        raise FormatError(f"{path}:{ts_line}: timescale {mag} {unit} is finer than 1 ps; nicrig keeps time in ps")
    if mag <= 0:
        raise FormatError(f"{path}:{ts_line}: bad timescale magnitude {mag}")
    return VcdHeader(path, mag * _UNIT_PS[unit], f"{mag} {unit}", variables, scopes, meta, notes,
                     offset, body_line, rest)


# ---------------------------------------------------------------------------------------------
# naming: variables -> channels
# ---------------------------------------------------------------------------------------------
@dataclass
class _Placed:
    """A logic variable placed at bits ``shift .. shift + width - 1`` of the state, LSB first."""

    var: VcdVar
    display: str  # reference, scope-prefixed when the reference is not unique
    indices: list[int] | None  # declared index of each bit, LSB first; None: a plain 1-bit name
    reverse: bool  # leftmost value character is the lowest index ([0:31])
    shift: int = 0
    names: list[str] = field(default_factory=list)


def _indices(v: VcdVar, path: Path) -> tuple[list[int] | None, bool]:
    bi = v.bit_index
    if bi is None:
        return (None, False) if v.size == 1 else (list(range(v.size)), False)
    if isinstance(bi, int):
        if v.size == 1:
            return [bi], False
        return list(range(v.size)), False  # 'mem[3]' 8 bits wide: the index is part of the name
    msb, lsb = bi
    if abs(msb - lsb) + 1 != v.size:
        raise FormatError(f"{path}:{v.line}: {v.reference} [{msb}:{lsb}] spans {abs(msb - lsb) + 1} bits "
                          f"but is declared {v.size} bits wide")
    return list(range(min(msb, lsb), max(msb, lsb) + 1)), msb < lsb


def _distinct_tails(scopes: set[Scope]) -> dict[Scope, int]:
    """The fewest trailing scope names (the same count for all) that tell ``scopes`` apart: scope -> how many
    of its names to show (all of them when it has fewer). O(len(scopes) × that count): each step extends
    every scope's suffix by one name, the suffixes compared as interned keys, never as rebuilt tuples."""
    keys: dict[Scope, int] = {s: 0 for s in scopes}
    interned: dict[tuple[int, str], int] = {}
    cursor: dict[Scope, Scope | None] = {s: s for s in scopes}
    k = 0
    while len(set(keys.values())) < len(scopes) and any(c is not None and c.parent is not None
                                                        for c in cursor.values()):
        k += 1
        for s, c in cursor.items():
            if c is not None and c.parent is not None:
                keys[s] = interned.setdefault((keys[s], c.name), len(interned) + 1)
                cursor[s] = c.parent
    return {s: k for s in scopes}


def _name_variables(header: VcdHeader, scope_filter: str | None) -> tuple[list[_Placed], list[str]]:
    """Pick the logic variables (``--scope``), name their bits, skip the rest with notes."""
    path, notes = header.path, []
    variables = header.variables
    if scope_filter:
        want = tuple(p for p in scope_filter.split(".") if p)
        hits = header.scopes.ending_with(want) if want else []
        if not hits:
            # suggestions from the first scopes declared: a header of a million scopes is no list to show
            names = sorted({".".join(s.names) for s in header.scopes.all[1:_SCOPES_SUGGESTED + 1]})
            close = difflib.get_close_matches(scope_filter, names, n=5, cutoff=0.4) or names[:10]
            raise UsageError(f"{path}: no scope {scope_filter!r} (scopes: {', '.join(close) or 'none'})")
        if len(hits) > 1:
            shown = ", ".join(".".join(h.names) for h in hits[:5])
            shown += f" and {len(hits) - 5} more" if len(hits) > 5 else ""
            raise UsageError(f"{path}: scope {scope_filter!r} is ambiguous: {shown}; give more of its path")
        inside = header.scopes.within(hits[0])
        variables = [v for v in variables if v.scope in inside]
    is_logic = [v.type not in _NON_LOGIC and v.size > 0 for v in variables]
    logic = [v for v, ok in zip(variables, is_logic) if ok]
    skipped = [v for v, ok in zip(variables, is_logic) if not ok]
    if skipped:
        shown = ", ".join(f"{v.reference} ({v.type})" for v in skipped[:8])
        more = f" and {len(skipped) - 8} more" if len(skipped) > 8 else ""
        notes.append(f"skipped {len(skipped)} non-logic variable(s): {shown}{more}")

    # each variable but a clock is at least one channel: more than a source holds is refused before naming them
    if len(logic) > limits.MAX_CHANNELS + 1:
        raise FormatError(f"{path}: {len(logic):,} logic variables to import; a source holds at most "
                          f"{limits.MAX_CHANNELS:,} channels (use --scope for fewer)")
    names_map = dict((header.meta or {}).get("names", {}))
    # a reference declared in several scopes is prefixed with as many trailing scope names as needed
    by_ref: dict[str, set[Scope]] = {}
    for v in logic:
        by_ref.setdefault(names_map.get(v.reference, v.reference), set()).add(v.scope)
    display: dict[tuple[Scope, str], str] = {}
    prefixed = []
    for ref, scopes in by_ref.items():
        if len(scopes) == 1:
            display[(next(iter(scopes)), ref)] = ref
            continue
        for s, k in _distinct_tails(scopes).items():
            display[(s, ref)] = ".".join((*(t.name for t in reversed(s.tail(k))), ref))
        prefixed.append(ref)
    if prefixed:
        notes.append(f"names declared in several scopes got a scope prefix: {', '.join(sorted(prefixed)[:8])}")

    placed: list[_Placed] = []
    taken: dict[str, set[int | None]] = {}
    dup = []
    for v in logic:
        ref = names_map.get(v.reference, v.reference)
        disp = display[(v.scope, ref)]
        idx, rev = _indices(v, path)
        bits: set[int | None] = set(idx) if idx is not None else {None}
        have = taken.setdefault(disp, set())
        if have & bits:
            dup.append(v.path)
            continue
        have |= bits
        placed.append(_Placed(v, disp, idx, rev))
    if dup:
        notes.append(f"skipped {len(dup)} variable(s) declaring bits already declared: {', '.join(dup[:8])}")

    # channel names: NAME[k]; a vector whose bits are not 0..n-1 is renumbered or, with gaps, flattened
    rename: dict[str, Callable[[int], str]] = {}
    for disp, bits in taken.items():
        ints = sorted(b for b in bits if b is not None)
        if not ints or (ints[0] == 0 and ints[-1] == len(ints) - 1):
            continue
        if ints[-1] - ints[0] == len(ints) - 1:
            lo = ints[0]
            rename[disp] = lambda k, d=disp, lo=lo: f"{d}[{k - lo}]"
            notes.append(f"{disp}[{ints[-1]}:{ints[0]}] imported as {disp}[{len(ints) - 1}:0]")
        else:
            rename[disp] = lambda k, d=disp: f"{d}_{k}"
            notes.append(f"{disp} has gaps in its bit indices: imported as {disp}_<index> single channels")
    for p in placed:
        if p.indices is None:
            p.names = [p.display]
        else:
            fmt = rename.get(p.display, lambda k, d=p.display: f"{d}[{k}]")
            p.names = [fmt(k) for k in p.indices]
    return placed, notes


def _resolve_clock(placed: list[_Placed], clock: str, path: Path) -> _Placed:
    """The 1-bit variable ``clock`` names: a channel name, a full path (``tb.pci.CLK``) or its tail."""
    cands: dict[str, list[_Placed]] = {}
    for p in placed:
        keys = set(p.names) | {p.var.path, p.display, p.var.reference}
        if p.indices is not None and len(p.indices) == 1:
            keys |= {f"{p.var.path}[{p.indices[0]}]"}
        for k in keys:
            cands.setdefault(k, []).append(p)
    hits = cands.get(clock, [])
    if not hits:
        hits = [p for k, ps in cands.items() if k.endswith("." + clock) for p in ps]
    uniq = list({id(p): p for p in hits}.values())
    if not uniq:
        close = difflib.get_close_matches(clock, sorted(cands), n=6, cutoff=0.5)
        if not close:
            close = sorted(n for p in placed for n in p.names if clock.lower() in n.lower())[:6]
        hint = f"; close names: {', '.join(close)}" if close else f"; signals: {', '.join(sorted(cands)[:12])}"
        raise UsageError(f"{path}: no signal {clock!r} for --clock{hint}")
    if len(uniq) > 1:
        raise UsageError(f"--clock {clock!r} is ambiguous in {path}: {', '.join(p.var.path for p in uniq)}")
    p = uniq[0]
    if len(p.names) != 1:
        raise UsageError(f"--clock {clock!r}: {p.var.path} is {len(p.names)} bits wide; the clock must be 1 bit")
    return p


# ---------------------------------------------------------------------------------------------
# reading value changes
# ---------------------------------------------------------------------------------------------
@dataclass
class _Tgt:
    """What one identifier code drives: ``width`` bits of the state from ``shift`` (LSB first)."""

    shift: int
    width: int
    reverse: bool
    clock: bool = False
    also: list[_Tgt] = field(default_factory=list)  # other variables sharing the identifier code

    @property
    def simple(self) -> bool:
        return not (self.also or self.clock or self.reverse)


_HIGH = (b"1", b"h", b"H")


def _show(word: bytes) -> str:
    """A word of the file for a message: ASCII, at most 40 characters."""
    text = word[:40].decode("ascii", "replace")
    return text + "..." if len(word) > 40 else text


class VcdReader:
    """Stream a VCD into packed samples: construct, read the attributes, then iterate :meth:`blocks`.

    ``blocks()`` yields ``(packed, timestamps_ps or None)``. Attributes that depend on the
    data (``samplerate_hz``, ``offset_ps``) are final once the first block is out; after
    the iteration :attr:`stats` and :meth:`summary_notes` describe what was read.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: str | None = None,
                 sample_rate_hz: float | None = None, x_as: Policy = "0", z_as: Policy = "1",
                 scope: str | None = None, block_samples: int | None = None,
                 max_samples: int | None = None, progress: Progress | None = None):
        for opt, val in (("--x-as", x_as), ("--z-as", z_as)):
            if val not in ("0", "1", "hold"):
                raise UsageError(f"{opt} must be 0, 1 or hold, not {val!r}")
        if sample_rate_hz is not None and not limits.rate_ok(sample_rate_hz):
            raise UsageError(f"sample rate {sample_rate_hz:g} Hz is outside {limits.RATE_RANGE}")
        self.path = Path(path)
        self.header = read_header(self.path)
        meta = self.header.meta or {}
        self.meta = meta
        self.x_as, self.z_as = x_as, z_as
        self.block_samples = int(block_samples or BLOCK_SAMPLES)
        self.max_samples = int(max_samples or limits.MAX_SAMPLES)
        self.progress = progress
        self.notes: list[str] = list(self.header.notes)
        if clock is None and meta.get("mode") == "state" and meta.get("clock"):
            clock = str(meta["clock"])
        placed, naming_notes = _name_variables(self.header, scope)
        self.notes += naming_notes
        if not placed:
            raise FormatError(f"{self.path}: no logic variables to import" + (f" in scope {scope!r}" if scope else ""))
        self.clock = clock
        clk = _resolve_clock(placed, clock, self.path) if clock else None
        channel_vars = [p for p in placed if p is not clk]
        if not channel_vars:
            raise UsageError(f"{self.path}: the clock {clock!r} is the only logic signal: nothing to sample")
        shift = 0
        for p in channel_vars:
            p.shift = shift
            shift += len(p.names)
        self._natural = [n for p in channel_vars for n in p.names]
        limits.check_channels(self.path, len(self._natural), "logic bits to import (use --scope for fewer)")
        self._nch = len(self._natural)
        self._unit = max(1, (self._nch + 7) // 8)
        self._perm: np.ndarray | None = None
        self.channels = list(self._natural)
        order = meta.get("channels")
        if isinstance(order, list):  # a nicrig export: restore the source's channel order
            pos = {n: i for i, n in enumerate(self._natural)}
            first = [n for n in order if n in pos]
            listed = set(first)
            wanted = first + [n for n in self._natural if n not in listed]
            if wanted != self._natural:
                self._perm = np.array([pos[n] for n in wanted], dtype=np.intp)
                self.channels = wanted
        self._targets: dict[bytes, _Tgt | None] = {}
        for p in sorted(placed, key=lambda p: p is not clk):  # the clock first: it leads its identifier
            t = _Tgt(p.shift, len(p.names), p.reverse, clock=p is clk)
            key = p.var.id_code.encode("ascii", "replace")
            prev = self._targets.get(key)
            if prev is None:
                self._targets[key] = t
            else:
                prev.also.append(t)  # the same identifier declared again (another scope's alias)
        for v in self.header.variables:  # non-logic or outside --scope: read, not stored
            self._targets.setdefault(v.id_code.encode("ascii", "replace"), None)
        self._widths = {k: max([t.width] + [a.width for a in t.also]) if t else 0 for k, t in self._targets.items()}

        self.mode = "state" if clk else "timing"
        self.timescale_ps = self.header.timescale_ps
        self.trigger_sample = 0
        self.offset_ps = 0
        self.samplerate_hz: float | None = None
        self._origin_ps = 0  # added to VCD times (ps) to give state timestamps
        # a nicrig export read the way it was written: restore rate, trigger, offset, time origin
        self.restored = bool(meta) and meta.get("mode") == self.mode and (
            self.mode == "timing" or clock == meta.get("clock"))
        self._given_rate = sample_rate_hz
        if self.restored:
            self.trigger_sample = int(meta.get("trigger_sample") or 0)
            self.offset_ps = int(meta.get("offset_ps") or 0)
            self._origin_ps = int(meta.get("time_origin_ps") or 0) if self.mode == "state" else 0
            if meta.get("samplerate_hz"):
                if self.mode == "state":
                    self.samplerate_hz = float(meta["samplerate_hz"])
                elif sample_rate_hz is None:
                    self._given_rate = float(meta["samplerate_hz"])
            if self.mode == "timing" and self._given_rate != meta.get("samplerate_hz"):
                self.trigger_sample = 0  # another sample grid: the trigger index means nothing on it
        self.stats: dict[str, Any] = {}
        self._dumpoff: list[tuple[int, int | None]] = []

    # -- the body scanner -------------------------------------------------------------------
    def _err(self, line: int, msg: str) -> FormatError:
        return FormatError(f"{self.path}:{line}: {msg}")

    def _steps(self) -> Iterator[tuple[int, list[tuple[_Tgt, bytes, bool]]]]:
        """Yield ``(time, changes)`` per time step; a change is ``(target, value, in_dump_block)``.

        Validates as it goes, so every problem is reported with its line number.
        """
        targets, widths = self._targets, self._widths
        state_chars, value_re = _STATE_CHARS, _VALUE_RE
        h = self.header
        max_t = limits.MAX_TIME_PS // h.timescale_ps
        size = os.path.getsize(self.path)
        progress = self.progress
        t = 0
        changes: list[tuple[_Tgt, bytes, bool]] = []
        block: bytes | None = None  # the open $dump* keyword
        block_line = 0
        in_comment = False
        pending: bytes | None = None  # a vector/real/string value waiting for its identifier
        pending_line = 0
        off_at: int | None = None
        dumpoff: list[tuple[int, int | None]] = []
        nchanges = 0
        with open(self.path, "rb") as f:
            f.seek(h.body_offset)
            for lineno, raw in chain(((h.body_line, h.body_rest),),
                                     limits.bounded_lines(f, self.path, "a VCD file", h.body_line + 1)):
                if progress is not None and not lineno & 0xFFFF:
                    progress(f.tell(), size)
                for w in raw.split():
                    if pending is not None:
                        tg = targets.get(w, 0)
                        if tg == 0:
                            raise self._err(lineno, f"value change for undeclared identifier {_show(w)!r}")
                        if tg is not None and pending[0] in (98, 66):  # b B
                            v = pending[1:]
                            if not value_re.fullmatch(v):
                                raise self._err(pending_line, f"bad vector value {_show(pending)!r}")
                            wd = widths[w]
                            if len(v) > wd:
                                if v[: len(v) - wd].strip(b"0"):
                                    raise self._err(pending_line, f"value {_show(pending)!r} is wider than its "
                                                                  f"{wd}-bit variable")
                                v = v[len(v) - wd:]
                            changes.append((tg, v, block is not None))
                            nchanges += 1
                        pending = None
                    elif in_comment:
                        in_comment = w != b"$end"
                    elif w[0] in state_chars:
                        if len(w) == 1:
                            raise self._err(lineno, f"value {_show(w)!r} without an identifier code")
                        tg = targets.get(w[1:], 0)
                        if tg == 0:
                            raise self._err(lineno, f"value change for undeclared identifier {_show(w[1:])!r}")
                        if tg is not None:
                            changes.append((tg, w[:1], block is not None))
                            nchanges += 1
                    elif w[0] == 35:  # '#'
                        ts = w[1:]
                        if not ts.isdigit():
                            whole, dot, frac = ts.partition(b".")  # '#3.0' (Migen): zero fractions only
                            if not (whole.isdigit() and dot and frac.isdigit() and not frac.strip(b"0")):
                                raise self._err(lineno, f"bad time {_show(w)!r}")
                            ts = whole
                        if block is not None:
                            raise self._err(lineno, f"time {_show(w)} inside {block.decode()} "
                                                    f"(line {block_line}), before its $end")
                        # the digit count first: int() of a million digits would itself take long
                        if len(ts) > _MAX_TIME_DIGITS and len(ts.lstrip(b"0")) > _MAX_TIME_DIGITS:
                            raise self._err(lineno, f"time {_show(w)} is beyond {limits.MAX_TIME_PS:.3g} ps")
                        nt = int(ts)
                        if nt > max_t:
                            raise self._err(lineno, f"time {_show(w)} ({h.timescale_text} units) is beyond the "
                                                    f"{limits.MAX_TIME_PS:.3g} ps (about 106 days) a timestamp "
                                                    "can hold")
                        if nt < t:
                            raise self._err(lineno, f"time goes backwards: #{nt} after #{t}")
                        if nt > t:
                            yield t, changes
                            changes = []
                            t = nt
                    elif w[0] in (98, 66, 114, 82, 115, 83):  # b B r R s S: a value, then the identifier
                        pending, pending_line = w, lineno
                    elif w == b"$end":
                        if block is None:
                            raise self._err(lineno, "$end without an open $dumpvars, $dumpon, $dumpoff or $dumpall")
                        block = None
                    elif w in (b"$dumpvars", b"$dumpall", b"$dumpon", b"$dumpoff"):
                        if block is not None:
                            raise self._err(lineno, f"{w.decode()} inside {block.decode()} (line {block_line})")
                        block, block_line = w, lineno
                        if w == b"$dumpoff" and off_at is None:
                            off_at = t
                        elif w == b"$dumpon" and off_at is not None:
                            dumpoff.append((off_at, t))
                            off_at = None
                    elif w == b"$comment":
                        in_comment = True
                    elif w[0] == 36:  # '$'
                        raise self._err(lineno, f"unexpected {_show(w)} among the value changes")
                    else:
                        raise self._err(lineno, f"cannot read {_show(w)!r}: not a time, value change or $dump keyword")
            if pending is not None:
                raise self._err(pending_line, f"file ends inside the value change {_show(pending)!r} "
                                              "(no identifier): truncated")
            if in_comment:
                raise self._err(lineno, "file ends inside a $comment: truncated")
            if block is not None:
                raise self._err(block_line, f"file ends inside {block.decode()} (no $end): truncated")
        if off_at is not None:
            dumpoff.append((off_at, None))
        self._dumpoff = dumpoff
        self.stats["value_changes"] = nchanges
        self.stats["last_time"] = t
        if progress is not None:
            progress(size, size)
        yield t, changes

    # -- decoding values --------------------------------------------------------------------
    def _apply(self, tg: _Tgt, v: bytes, state: int, xs: int, zs: int) -> tuple[int, int, int]:
        """Set ``tg``'s bits from value ``v``: the general path (x/z, short values, [0:n] ranges, aliases)."""
        for t in (tg, *tg.also):
            if t.clock:
                continue
            w, s = t.width, t.shift
            if len(v) < w:  # IEEE 1364 18.2.3.9: left-extend with x or z if leftmost, else with 0
                pad = v[:1] if v[:1] in (b"x", b"X", b"z", b"Z") else b"0"
                vv = pad * (w - len(v)) + v
            else:
                vv = v[len(v) - w:]
            if t.reverse:
                vv = vv[::-1]
            ones = int(vv.translate(_T_ONES), 2)
            xm = int(vv.translate(_T_X), 2)
            zm = int(vv.translate(_T_Z), 2)
            hold = 0
            if xm:
                if self.x_as == "1":
                    ones |= xm
                elif self.x_as == "hold":
                    hold |= xm
            if zm:
                if self.z_as == "1":
                    ones |= zm
                elif self.z_as == "hold":
                    hold |= zm
            field_ = ((1 << w) - 1) << s
            write = field_ & ~(hold << s)
            state = (state & ~write) | ((ones << s) & write)
            xs = (xs & ~field_) | (xm << s)
            zs = (zs & ~field_) | (zm << s)
        return state, xs, zs

    def _initial(self) -> tuple[int, int, int]:
        """Until its first value, every variable is x."""
        full = (1 << self._nch) - 1
        return (full if self.x_as == "1" else 0), full, 0

    def _packed(self, states: list[int]) -> np.ndarray:
        unit = self._unit  # state bit k is channel k: little-endian bytes are sigrok's packing
        arr = np.frombuffer(b"".join(s.to_bytes(unit, "little") for s in states), dtype=np.uint8).reshape(-1, unit)
        if self._perm is not None:
            bits = np.unpackbits(arr, axis=1, count=self._nch, bitorder="little")[:, self._perm]
            arr = np.packbits(bits, axis=1, bitorder="little")
        return np.ascontiguousarray(arr)

    # -- passes -----------------------------------------------------------------------------
    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray | None]]:
        """Packed sample blocks (and their timestamps in state mode), in order."""
        if self.mode == "state":
            yield from self._state_blocks()
        else:
            yield from self._timing_blocks()

    def _grid(self) -> tuple[int | None, float]:
        """The sample period: integer ps when it is whole, else a float (ps)."""
        if self._given_rate is None:  # derived: the GCD of every time in the file (a first pass)
            g = last = 0
            for t, _ in self._steps():
                g = math.gcd(g, t)
                last = t
            if g == 0:
                raise UsageError(f"{self.path}: every change is at time {last}: no sample rate can be derived; "
                                 "give --sample-rate HZ (or --clock SIGNAL)")
            per = g * self.timescale_ps
            n = last // g + 1
            if n > self.max_samples:
                raise UsageError(
                    f"{self.path}: changes as close as {per} ps apart would make a timing-mode import of "
                    f"{n:,} samples (limit {self.max_samples:,}); give a coarser --sample-rate HZ, "
                    "or --clock SIGNAL for one sample per clock edge")
            self.samplerate_hz = limits.check_rate(self.path, 1e12 / per, "the change times give a sample rate of")
            return per, float(per)
        self.samplerate_hz = float(self._given_rate)
        per_f = 1e12 / self.samplerate_hz
        return (int(per_f) if per_f == round(per_f) and per_f >= 1 else None), per_f

    def _timing_blocks(self) -> Iterator[tuple[np.ndarray, None]]:
        ts_ps = self.timescale_ps
        per_i, per_f = self._grid()
        self.stats["period_ps"] = per_i if per_i is not None else per_f

        def first_index(tps: int) -> int:
            """The first sample that sees a change at ``tps``: the least i with round(i * period) >= tps."""
            if per_i is not None:
                return -(-tps // per_i)
            i = max(0, math.ceil((tps - 0.5) / per_f))
            while i > 0 and round((i - 1) * per_f) >= tps:
                i -= 1
            while round(i * per_f) < tps:
                i += 1
            return i

        block, limit = self.block_samples, self.max_samples
        state, xs, zs = self._initial()
        xcount: Counter[int] = Counter()
        zcount: Counter[int] = Counter()
        runs: list[int] = []
        lengths: list[int] = []
        pending = i_cur = collapsed = total = 0
        prev_changed = False
        apply = self._apply

        def run(length: int) -> Iterator[np.ndarray]:
            """The current state for ``length`` more samples, cut into blocks."""
            nonlocal runs, lengths, pending
            if xs:
                xcount[xs] += length
            if zs:
                zcount[zs] += length
            while length:
                take = min(length, block - pending)
                runs.append(state)
                lengths.append(take)
                pending += take
                length -= take
                if pending >= block:
                    out = np.repeat(self._packed(runs), lengths, axis=0)
                    runs, lengths, pending = [], [], 0
                    yield out

        def too_many(t: int) -> UsageError:
            unit = self.header.timescale_text.split()[1]
            return UsageError(f"{self.path}: more than {limit:,} samples at {self.samplerate_hz:g} Hz by time "
                              f"{t} {unit}; give a lower --sample-rate HZ, or --clock SIGNAL")

        for t, changes in self._steps():
            i_new = first_index(t * ts_ps)
            if i_new > i_cur:
                if i_new > limit:
                    raise too_many(t)
                for out in run(i_new - i_cur):
                    total += len(out)
                    yield out, None
                i_cur = i_new
            elif prev_changed:
                collapsed += 1  # the previous step's values were replaced before any sample saw them
            prev_changed = bool(changes)
            for tg, v, _ in changes:
                if tg.width == 1 and (v == b"1" or v == b"0") and tg.simple:
                    m = 1 << tg.shift
                    if v == b"1":
                        state |= m
                    else:
                        state &= ~m
                    if xs and xs & m:
                        xs &= ~m
                    if zs and zs & m:
                        zs &= ~m
                elif tg.simple and v.count(b"0") + v.count(b"1") == len(v):
                    fm = ((1 << tg.width) - 1) << tg.shift
                    state = (state & ~fm) | (int(v, 2) << tg.shift)
                    if xs and xs & fm:
                        xs &= ~fm
                    if zs and zs & fm:
                        zs &= ~fm
                else:
                    state, xs, zs = apply(tg, v, state, xs, zs)
        # the last step's values hold for the samples up to the last time of the file
        last_tps = self.stats["last_time"] * ts_ps
        n_total = last_tps // per_i + 1 if per_i is not None else first_index(last_tps + 1)
        if n_total > limit:
            raise too_many(self.stats["last_time"])
        if n_total > i_cur:
            for out in run(n_total - i_cur):
                total += len(out)
                yield out, None
        if runs:
            out = np.repeat(self._packed(runs), lengths, axis=0)
            total += len(out)
            yield out, None
        self.stats.update(samples=total, collapsed_steps=collapsed)
        self._finish_counts(xcount, zcount)

    def _state_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        ts_ps, origin = self.timescale_ps, self._origin_ps
        block = self.block_samples
        state, xs, zs = self._initial()
        xcount: Counter[int] = Counter()
        zcount: Counter[int] = Counter()
        rows: list[int] = []
        stamps: list[int] = []
        clk: bytes | None = None
        total = 0
        apply = self._apply

        def flush() -> tuple[np.ndarray, np.ndarray]:
            nonlocal rows, stamps
            packed = self._packed(rows)
            ts = np.asarray(stamps, dtype=np.int64)
            if total == 0:  # the first block: nominal rate, and the common timeline = VCD time
                if self.samplerate_hz is None:
                    d = np.diff(ts)
                    d = d[d > 0]
                    self.samplerate_hz = 1e12 / float(np.median(d)) if len(d) else None
                if not self.restored:
                    self.offset_ps = int(ts[0])
            rows, stamps = [], []
            return packed, ts

        for t, changes in self._steps():
            pre, pre_x, pre_z = state, xs, zs  # the values just before this time
            for tg, v, in_block in changes:
                if tg.clock:
                    # an edge: the clock becomes 1 from 0, x or z (not its first value, not in a $dump block)
                    if v in _HIGH and clk is not None and clk not in _HIGH and not in_block:
                        rows.append(pre)
                        stamps.append(t * ts_ps + origin)
                        if pre_x:
                            xcount[pre_x] += 1
                        if pre_z:
                            zcount[pre_z] += 1
                        if len(rows) >= block:
                            out = flush()
                            total += len(out[0])
                            yield out
                    clk = v
                    if not tg.also:
                        continue
                if tg.width == 1 and (v == b"1" or v == b"0") and tg.simple:
                    m = 1 << tg.shift
                    if v == b"1":
                        state |= m
                    else:
                        state &= ~m
                    if xs and xs & m:
                        xs &= ~m
                    if zs and zs & m:
                        zs &= ~m
                else:
                    state, xs, zs = apply(tg, v, state, xs, zs)
        if rows:
            out = flush()
            total += len(out[0])
            yield out
        if total == 0:
            raise FormatError(f"{self.path}: the clock {self.clock!r} never rises: no samples")
        self.stats.update(samples=total)
        self._finish_counts(xcount, zcount)

    def _finish_counts(self, xcount: Counter[int], zcount: Counter[int]) -> None:
        def per_channel(counts: Counter[int]) -> dict[str, int]:
            out = [0] * self._nch
            for mask, n in counts.items():
                k = 0
                while mask:
                    if mask & 1:
                        out[k] += n
                    mask >>= 1
                    k += 1
            return {self._natural[k]: n for k, n in enumerate(out) if n}

        self.stats["x_samples"] = per_channel(xcount)
        self.stats["z_samples"] = per_channel(zcount)

    # -- description ------------------------------------------------------------------------
    def summary_notes(self) -> list[str]:
        """Notes for the source: how it was sampled, the x/z policy and counts, what was skipped."""
        s = self.stats
        out = [f"imported from {self.path.name} (VCD, timescale {self.header.timescale_text})"]
        if self.mode == "state":
            out.append(f"one sample per rising edge of {self.clock}, values as they stood just before the edge")
        else:
            out.append(f"sampled every {s.get('period_ps', 0):g} ps ({self.samplerate_hz:g} Hz) from VCD time 0")
            if s.get("collapsed_steps"):
                out.append(f"{s['collapsed_steps']:,} change time(s) fell between two samples "
                           "(pulses shorter than the sample period may be lost)")
        for what, pol in (("x", self.x_as), ("z", self.z_as)):
            counts = s.get(f"{what}_samples", {})
            how = "as the previous value" if pol == "hold" else f"as {pol}"
            if counts:
                top = sorted(counts.items(), key=lambda kv: -kv[1])[:6]
                detail = ", ".join(f"{k} {n:,}" for k, n in top) + (", ..." if len(counts) > 6 else "")
                out.append(f"{what} read {how}: {sum(counts.values()):,} {what} samples on {len(counts)} "
                           f"channel(s) ({detail})")
            else:
                out.append(f"{what} read {how}: no {what} samples")
        if self._dumpoff:
            spans = ", ".join(f"{a}..{'end' if b is None else b}" for a, b in self._dumpoff[:5])
            out.append(f"dumping was off (values x) over VCD times {spans}")
        if self.restored:
            out.append(f"a nicrig export of source {self.meta.get('source')!r}: rate, trigger and offset restored")
        return out + self.notes


# ---------------------------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------------------------
_VCD_UNSAFE = re.compile(r"[^\x21-\x7e]")
_BIT_NAME = re.compile(r"^(?P<name>.+)\[(?P<bit>\d+)\]$")


def _vcd_name(name: str) -> str:
    """A reference that pyvcd writes and VCD readers read back whole: printable ASCII, no blanks."""
    safe = _VCD_UNSAFE.sub("_", name) or "_"
    return "_" + safe[1:] if safe[0] in "\\$" else safe


@dataclass
class _OutVar:
    base: str  # a vector's name, a lone vector bit's vector name, or a channel name
    cols: list[int]  # columns of its bits among the exported channels, LSB first
    bit: int | None = None  # a lone bit of an incomplete vector: AD[7]
    vector: bool = False  # a complete vector, even of one bit (V[0] is written V[0:0])
    ref: str = ""
    var: Any = None


def _group_vectors(channels: Sequence[str], split: bool = False) -> list[_OutVar]:
    """Complete vectors (``NAME[0]``..``NAME[n-1]``) become one variable, every other channel its own.

    With ``split`` every channel is its own 1-bit variable (``AD[3]``), for readers without
    vectors: libsigrok 0.5's VCD input stops reading values at the first vector change.
    """
    bits: dict[str, dict[int, int]] = {}
    for i, ch in enumerate(channels):
        m = _BIT_NAME.match(ch)
        if m:
            bits.setdefault(m["name"], {})[int(m["bit"])] = i
    complete = set() if split else {n for n, b in bits.items()
                                     if sorted(b) == list(range(len(b))) and n not in channels}
    out: list[_OutVar] = []
    seen: set[str] = set()
    for i, ch in enumerate(channels):
        m = _BIT_NAME.match(ch)
        if m and m["name"] in complete:
            if m["name"] not in seen:
                seen.add(m["name"])
                b = bits[m["name"]]
                out.append(_OutVar(m["name"], [b[k] for k in range(len(b))], vector=True))
        elif m:
            out.append(_OutVar(m["name"], [i], bit=int(m["bit"])))
        else:
            out.append(_OutVar(ch, [i]))
    return out


def _values(bits: np.ndarray, cols: list[int]) -> np.ndarray:
    """A variable's value per row: uint64 up to 64 bits, Python ints (object array) beyond."""
    sub = bits[:, cols]
    if len(cols) == 1:
        return sub[:, 0].astype(np.uint64)
    packed = np.packbits(sub, axis=1, bitorder="little")
    if len(cols) <= 64:
        wide = np.zeros((packed.shape[0], 8), dtype=np.uint8)
        wide[:, : packed.shape[1]] = packed
        return wide.view("<u8").ravel()
    return np.array([int.from_bytes(r.tobytes(), "little") for r in packed], dtype=object)


def nominal_rate(source: Any) -> float:
    """A state source's clock rate: its ``samplerate_hz``, else 1 / the median sample spacing."""
    if source.samplerate_hz:
        return float(source.samplerate_hz)
    ts = source.times_ps(0, min(source.num_samples, 100_001))
    d = np.diff(ts)
    d = d[d > 0]
    if not len(d):
        raise UsageError(f"source {source.name!r} has no sample rate and fewer than two distinct timestamps")
    return 1e12 / float(np.median(d))


def write_vcd(path: str | os.PathLike[str], source: Any, channels: Sequence[str] | None = None, *,
              split_vectors: bool = False, block_samples: int = 1 << 18,
              progress: Progress | None = None) -> dict[str, Any]:
    """Write ``channels`` (default: all, in the source's order) of ``source`` as a VCD; return a summary.

    Times are ps on the set's common timeline, shifted so the file starts at 0. A state
    source gets a clock wire (``CLK``): edge ``i`` rises at sample ``i``'s time, sample
    ``i``'s values are set at edge ``i - 1`` (sample 0's at time 0). ``split_vectors``
    writes every bit as its own wire (for sigrok's VCD input). The file is written under
    a temporary name and renamed into place when complete.
    """
    from vcd import VCDWriter

    from nicrig import __version__

    path = Path(path)
    chans = list(source.channels if channels is None else channels)
    n = source.num_samples
    if n == 0:
        raise UsageError(f"source {source.name!r} has no samples to export")
    all_cols = [source.channel_index(c) for c in chans]
    nsrc = len(source.channels)
    variables = _group_vectors(chans, split_vectors)
    names_map: dict[str, str] = {}
    used: set[str] = set()
    ref_of: dict[str, str] = {}  # lone bits of one vector share its reference
    for v in variables:
        if v.bit is not None and v.base in ref_of:
            v.ref = ref_of[v.base]
            continue
        ref = _vcd_name(v.base)
        if ref != v.base:
            stem, k = ref, 2
            while ref in used or ref in chans:
                ref, k = f"{stem}_{k}", k + 1
            names_map[ref] = v.base
        used.add(ref)
        v.ref = ref_of[v.base] = ref
    state = source.mode == "state"
    clock_name: str | None = None
    half = 0
    t_first = int(source.times_ps(0, 1)[0])
    if state:
        clock_name, k = "CLK", 2
        while clock_name in used or clock_name in chans:
            clock_name, k = f"CLK_{k}", k + 1
        half = max(1, round(1e12 / nominal_rate(source) / 2))
    origin = t_first - half  # the common-timeline time of VCD time 0
    sel = set(chans)
    roles = {r: t for r, t in source.roles.items()
             if t in sel or (t in source.vectors and set(source.vectors[t]) <= sel)}
    meta = {
        "version": META_VERSION, "source": source.name, "mode": source.mode,
        "samplerate_hz": source.samplerate_hz, "trigger_sample": source.trigger_sample,
        "offset_ps": source.offset_ps, "time_origin_ps": origin, "clock": clock_name,
        "channels": chans, "names": names_map, "bus": source.bus, "roles": roles,
    }
    # '$' would end the comment early in some readers: JSON lets it be escaped
    comment = f"{META_TAG} " + json.dumps(meta, sort_keys=True).replace("$", "\\u0024")
    nchanges = 0
    with replacing(path) as tmp:
        with open(tmp, "w", encoding="ascii", newline="\n") as f:
            w = VCDWriter(f, timescale="1 ps", comment=comment, version=f"nicrig {__version__}",
                          check_values=False)
            scope = (source.name,)
            bits0 = np.unpackbits(source.read_packed(0, 1), axis=1, count=nsrc, bitorder="little")[:, all_cols]
            for v in variables:
                init = int(_values(bits0, v.cols)[0])
                if v.vector:
                    v.var = w.register_var(scope, v.ref, "wire", size=len(v.cols), init=init,
                                           bit_index=(len(v.cols) - 1, 0))
                else:
                    v.var = w.register_var(scope, v.ref, "wire", size=1, init=init, bit_index=v.bit)
            clk = w.register_var(scope, clock_name, "wire", size=1, init=0) if clock_name else None
            objs = [v.var for v in variables] + [clk]
            nvar = len(variables)
            change = w.change
            for b0 in range(0, n, block_samples):
                b1 = min(n, b0 + block_samples)
                r1 = min(n, b1 + 1)  # one row more: the changes into sample b1 belong to this block
                bits = np.unpackbits(source.read_packed(b0, r1), axis=1, count=nsrc, bitorder="little")[:, all_cols]
                tt = source.times_ps(b0, r1) - origin
                if state and np.any(np.diff(tt) <= 0):
                    raise UsageError(f"source {source.name!r}: samples share a timestamp near sample {b0}; "
                                     "a VCD clock cannot have two rising edges at one time")
                ev_t: list[np.ndarray] = []
                ev_k: list[np.ndarray] = []
                ev_v: list[np.ndarray] = []
                ev_x: list[np.ndarray] = []
                for j, v in enumerate(variables):
                    vals = _values(bits, v.cols)
                    rows = np.nonzero(vals[1:] != vals[:-1])[0]  # row r + 1 differs from row r
                    if len(rows):
                        # timing: at sample r + 1's time; state: at edge r, the edge before sample r + 1
                        ev_t.append(tt[rows] if state else tt[rows + 1])
                        ev_k.append(np.full(len(rows), 2))
                        ev_v.append(np.full(len(rows), j))
                        ev_x.append(vals[rows + 1].astype(object))
                        nchanges += len(rows)
                if state:
                    m = b1 - b0
                    edge = tt[:m]
                    nxt = tt[1: m + 1]
                    fall = np.empty(m, dtype=np.int64)
                    fall[: len(nxt)] = edge[: len(nxt)] + np.maximum(1, (nxt - edge[: len(nxt)]) // 2)
                    if len(nxt) < m:
                        fall[-1] = edge[-1] + half  # the last sample of the source
                    ev_t += [fall, edge]
                    ev_k += [np.zeros(m, dtype=np.int64), np.ones(m, dtype=np.int64)]
                    ev_v += [np.full(m, nvar), np.full(m, nvar)]
                    ev_x += [np.zeros(m, dtype=object), np.ones(m, dtype=object)]
                if ev_t:
                    at, ak, av, ax = (np.concatenate(a) for a in (ev_t, ev_k, ev_v, ev_x))
                    order = np.lexsort((av, ak, at))  # by time; at one time: fall, rise, then data
                    for tv, vi, xv in zip(at[order].tolist(), av[order].tolist(), ax[order].tolist()):
                        change(objs[vi], tv, xv)
                if progress is not None:
                    progress(b1, n)
            last = int(source.times_ps(n - 1, n)[0]) - origin
            w.close(last + half if state else last)
    return {"path": str(path), "samples": n, "channels": len(chans), "variables": len(variables),
            "vectors": {v.base: len(v.cols) for v in variables if v.vector}, "changes": int(nchanges),
            "clock": clock_name, "renamed": names_map, "time_origin_ps": origin}
