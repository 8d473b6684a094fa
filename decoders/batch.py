"""Batch decoding: many capture sets, long sources split at idle points, local processes or a Dask cluster.

The unit of work is a :class:`Job`: all the stacks to decode on one source,
over one :class:`Chunk` of it; the stacks a kernel decodes share one reading
of its samples. A long source is cut into chunks at *quiet points*, samples
in the middle of an idle stretch, where no transaction or frame is in
progress:

- PCI: at least :data:`QUIET_CLOCKS` bus clocks with FRAME# and IRDY#
  deasserted (the bus's Idle state, PCI Local Bus Specification 3.0) and
  none of the decoder's other lines moving;
- GMII: EN and ER low (IEEE 802.3 Table 35-1, normal inter-frame; the data
  lines may carry anything) for at least :data:`IFG_CLOCKS` clocks, the
  minimum inter-frame gap (IEEE 802.3 §4.4.2: 96 bit times, 12 octets of
  GMII) when a kernel that carries its state decodes the stack, so even a
  saturated link is cut at every gap; :data:`QUIET_CLOCKS` for the PDs;
- an interrupt line deasserted for :data:`QUIET_CLOCKS` clocks, a
  link-activity line for :data:`IFG_CLOCKS` (it follows the frames).

The cuts fall at quiet points of the stacks whose kernels carry state (or of
the first stack); each stack decodes a chunk from a quiet point of its own
before the cut (one burst of warm-up, so that a decoder knows what the
previous transaction, frame or gap was) to one after the next cut, and keeps
the records that start between the cuts: the table equals a single pass
(``tests/test_decode_batch.py`` checks it on captures whose naive cut points
fall inside transactions). What a record can depend on from further back
(the ethernet decoder's table of fragmented datagrams, which gives a later
IPv4 fragment the first one's sequence number) is checked at every cut when
a kernel decodes the stack: the chunk before the cut reports the kernel's
carried state there, the chunk after it the state it reached after its
warm-up; where they differ, that stack of the chunk after the cut is decoded
again from the cut with the state of the one before (:func:`reconcile`), so
the table is still the single pass's.

Workers only read capture sets. The calling process appends each chunk's
rows to its tables as soon as the chunks before it are in (while the workers
decode the rest), compressed on the encoder threads into the companion
update's staging file (:mod:`nicrig.companion`: the capture itself is never
opened for writing), and replaces the companion atomically once all of the
file's chunks are in, with Ctrl-C held back while it writes; a file not
finished (an error, an interrupt) keeps its companion as it was. Chunks go
to the workers a few at a time, so memory holds a few chunks' rows, never a
whole table. A table already decoded by the same decoder versions with the
same stack is skipped unless ``force``.
"""

from __future__ import annotations

import json
import signal
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition import wire
from nicrig.acquisition.capture import CaptureSet, Source
from nicrig.decoders import DecodeError, builtin, catalog, kernels, sigrok_cli, spec, tables, wire_frames
from nicrig.decoders.runtime import typed_option

from nicrig.errors import FormatError, NicrigError, UsageError

#: A stretch this long (in bus clocks) without a change on the stack's lines is
#: taken as idle: four times PCI's longest legal wait (16 clocks to the first
#: data phase), longer than any stall inside a transaction or a frame.
QUIET_CLOCKS = 64
#: The minimum inter-frame gap in GMII clocks (IEEE 802.3 §4.4.2: 96 bit times, one octet a clock).
IFG_CLOCKS = 12
#: Sources shorter than this are decoded in one piece.
DEFAULT_CHUNK_SAMPLES = 4 << 20
#: ``builtin``: kernels where a stack has one, the PDs in-process otherwise; ``reference``: the PDs
#: in-process always; ``sigrok``: the PDs in libsigrokdecode, through sigrok-cli.
ENGINES = ("builtin", "reference", "sigrok")
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class _Idle:
    """When a decoder is idle: lines at resting levels for a number of clocks."""

    levels: Callable[[dict[str, Any]], dict[str, int]]  # channel -> resting level, from the options
    clocks: int              # the shortest idle stretch, in bus clocks
    others_still: bool       # the decoder's other lines (its clock aside) must not move either
    carried_clocks: int = 0  # the shortest stretch when a kernel that carries its state decodes it (0: clocks)


#: Idle rules by decoder, from the decoder's options (its defaults included)
#: where it has a polarity option. Decoders not listed are never split.
_IDLE: dict[str, _Idle] = {
    "pci": _Idle(lambda o: {"frame": 1, "irdy": 1}, QUIET_CLOCKS, True),
    "gmii": _Idle(lambda o: {"en": 0, "er": 0}, QUIET_CLOCKS, False, IFG_CLOCKS),
    "irq": _Idle(lambda o: {"irq": 0 if o["polarity"] == "active-high" else 1}, QUIET_CLOCKS, True),
    # The line is the frame: at rest it is still, and the row it falls on already counts (a 12-clock gap).
    "linkactivity": _Idle(lambda o: {"act": 1 if o["polarity"] == "active-low" else 0}, IFG_CLOCKS, False),
}
_NEVER_STILL = ("clk",)  # clocks toggle through idle time


@dataclass(frozen=True)
class Chunk:
    """A part of a source decoded on its own: the rows starting in ``keep`` of each stack, which decodes the samples
    of its ``spans`` entry (an idle point of its own before ``keep[0]`` to one after ``keep[1]``)."""

    keep: tuple[int, int]
    spans: tuple[tuple[int, int], ...]

    @property
    def start(self) -> int:
        return min(a for a, _ in self.spans)

    @property
    def stop(self) -> int:
        return max(b for _, b in self.spans)


@dataclass(frozen=True)
class Job:
    """Stacks over a chunk of one source; the stacks a kernel decodes share one reading of the samples its spans
    cover."""

    path: str
    source: str
    stacks: tuple[spec.Stack, ...]
    engine: str
    chunk: Chunk
    carries: tuple[Any, ...] | None = None  # per stack, its kernel's carried state at its span's start, or None


@dataclass
class Part:
    """What a job gives back, per stack of it: its table's rows in stored order, in pieces, and its kernel's
    carried state at the keep bounds (None: none)."""

    tables: list[list[np.ndarray]]
    carried_in: list[Any]
    carried_out: list[Any]


@dataclass
class FileResult:
    """What happened to one capture set: rows per written table, skipped tables, or the error."""

    path: str
    written: dict[str, dict[str, int]] = field(default_factory=dict)   # source -> output -> rows
    skipped: dict[str, list[str]] = field(default_factory=dict)        # source -> outputs
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        if self.error is not None:
            return {"error": self.error}
        out: dict[str, Any] = {}
        for name, outputs in self.written.items():
            out.setdefault(name, {}).update(outputs)
        for name, outputs in self.skipped.items():
            out.setdefault(name, {}).update({o: "up to date" for o in outputs})
        return out


# -- quiet points ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Quiet:
    """Which bits of a source's rows must stay still, at which levels some must rest, and for how long."""

    still: np.ndarray      # (unitsize,) uint8 mask of bits that must not change
    level_mask: np.ndarray  # (unitsize,) uint8 mask of bits with a resting level
    level: np.ndarray      # (unitsize,) uint8 the resting levels
    samples: int           # the shortest quiet stretch


def quiet_samples(source: Source, clocks: int = QUIET_CLOCKS) -> int:
    """``clocks`` bus clocks in samples: one sample a clock in state mode, the rate ratio in timing mode
    (16 when the source does not say its bus clock)."""
    clock = float(source.bus.get("clock_hz") or 0)
    if source.mode == "state" or not clock or not source.samplerate_hz:
        return clocks if source.mode == "state" else 16 * clocks
    return clocks * max(1, round(source.samplerate_hz / clock))


def _carried_by_kernel(stack: spec.Stack, engine: str) -> bool:
    """Whether ``engine`` decodes ``stack`` with a kernel whose carried state the batch checks at cuts."""
    return engine == "builtin" and kernels.carries_state(kernels.stack_key(stack.calls))


def _quiet_rule(source: Source, stack: spec.Stack, engine: str) -> _Quiet | None:
    """When ``stack`` is idle on ``source``; None when its decoder has no idle rule (never split)."""
    first = stack.calls[0]
    rule = _IDLE.get(first.id)
    if rule is None:
        return None
    info = catalog.get(first.id)
    options = {**info.options, **{k: typed_option(info.id, k, v, info.options.get(k))
                                  for k, v in first.options.items()}}
    u = source.unitsize
    still, level_mask, level = (np.zeros(u, np.uint8) for _ in range(3))
    for ch, name in first.channels.items():
        if ch in _NEVER_STILL or not rule.others_still:
            continue
        bit = source.channel_index(name)
        still[bit >> 3] |= 1 << (bit & 7)
    for ch, lvl in rule.levels(options).items():
        name = first.channels.get(ch)
        if name is None:
            continue
        bit = source.channel_index(name)
        level_mask[bit >> 3] |= 1 << (bit & 7)
        level[bit >> 3] |= lvl << (bit & 7)
    clocks = rule.carried_clocks if rule.carried_clocks and _carried_by_kernel(stack, engine) else rule.clocks
    return _Quiet(still, level_mask, level, quiet_samples(source, clocks))


def _together(rules: Sequence[_Quiet]) -> _Quiet | None:
    """Idle under every one of ``rules`` at once; None when two want a line at different levels."""
    still, level_mask, level = (np.bitwise_or.reduce([getattr(r, a) for r in rules]) for a in
                                ("still", "level_mask", "level"))
    for r in rules:
        if ((r.level ^ level) & r.level_mask).any():
            return None
    return _Quiet(still, level_mask, level, max(r.samples for r in rules))


def _busy(rows: np.ndarray, prev: np.ndarray, q: _Quiet) -> np.ndarray:
    """Per row: did a still line change since the row before, or is a line off its resting level.

    Column by column over the few bytes that hold such lines (a reduction
    along the rows' short axis is several times slower).
    """
    busy = np.zeros(len(rows), bool)
    for j in np.flatnonzero(q.still | q.level_mask):
        col = rows[:, j]
        if q.still[j]:
            busy[0] |= bool((col[0] ^ prev[j]) & q.still[j])
            busy[1:] |= ((col[1:] ^ col[:-1]) & q.still[j]) != 0
        if q.level_mask[j]:
            busy |= (col & q.level_mask[j]) != q.level[j]
    return busy


class _Rows:
    """A source's packed rows for the planner, read in aligned blocks and the last few kept.

    The searches around one cut (the stretch at the target, the one before
    the burst preceding it, the one after the burst following it) mostly fall
    in the same block: each stored chunk is read (decompressed) about once per
    cut instead of once per search window.
    """

    BLOCK = 1 << 16  # rows: nicrig's sample chunks hold 64 KiB-1 MiB (docs/formats.md)
    KEEP_BYTES = 32 << 20  # the windows looking back for the burst before a cut grow 4x at a time

    def __init__(self, source: Source) -> None:
        self.source = source
        self.num_samples = source.num_samples
        self._blocks: dict[int, np.ndarray] = {}

    def _block(self, b: int) -> np.ndarray:
        rows = self._blocks.pop(b, None)
        if rows is None:
            rows = np.asarray(self.source.read_packed(b * self.BLOCK, min(self.num_samples, (b + 1) * self.BLOCK)))
            while self._blocks and (len(self._blocks) + 1) * rows.nbytes > self.KEEP_BYTES:
                del self._blocks[next(iter(self._blocks))]
        self._blocks[b] = rows  # most recently used last
        return rows

    def read_packed(self, first: int, stop: int) -> np.ndarray:
        """Rows ``[first, stop)``."""
        parts = [self._block(b)[max(first - b * self.BLOCK, 0):stop - b * self.BLOCK]
                 for b in range(first // self.BLOCK, (stop - 1) // self.BLOCK + 1)]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _quiet_points(source: _Rows, q: _Quiet, start: int, stop: int, block: int = 1 << 18,
                  whole: bool = True) -> Iterator[tuple[int, int]]:
    """Quiet stretches ``(first, end)`` of at least ``q.samples`` samples within ``[start, stop)``, in order.

    Reads start small and grow to ``block``: the planner mostly wants the first
    stretch after a point, a few bus transactions away. Without ``whole``, each
    stretch comes as soon as its first ``q.samples`` are read, as ``(first, first
    + q.samples)``: where one begins is known without reading a quiet line to
    the end of its rest.
    """
    prev = None
    run_start, told = start, start - 1  # told: the stretch already given in part (not whole)
    first, size = start, min(block, max(4096, 16 * q.samples))
    while first < stop:
        rows = np.asarray(source.read_packed(first, min(stop, first + size)))
        size = min(block, 4 * size)
        busy = _busy(rows, rows[0] if prev is None else prev, q)
        if prev is None:
            busy[0] = bool(((rows[0] & q.level_mask) != q.level).any())
        prev = rows[-1]
        idx = np.flatnonzero(busy) + first
        if idx.size:
            run_starts = np.concatenate([[run_start], idx[:-1] + 1])
            for k in np.flatnonzero(idx - run_starts >= q.samples):
                if run_starts[k] != told:
                    yield int(run_starts[k]), int(idx[k]) if whole else int(run_starts[k]) + q.samples
            run_start = int(idx[-1]) + 1
        first += len(rows)
        if not whole and run_start != told and first - run_start >= q.samples:
            told = run_start
            yield run_start, run_start + q.samples
    if stop - run_start >= q.samples and run_start != told:
        yield run_start, stop if whole else run_start + q.samples


def _next_quiet(source: _Rows, q: _Quiet, at: int, whole: bool = True) -> tuple[int, int] | None:
    """The first quiet stretch that starts at or after ``at`` (without ``whole``: its first ``q.samples``,
    :func:`_quiet_points`)."""
    return next(_quiet_points(source, q, at, source.num_samples, whole=whole), None)


def _prev_quiet(source: _Rows, q: _Quiet, before: int) -> tuple[int, int] | None:
    """The last quiet stretch that ends before ``before`` with activity in between, looking back in growing windows."""
    span = q.samples * 64
    while True:
        lo = max(0, before - span)
        found = None
        for s, e in _quiet_points(source, q, lo, before):
            # A stretch cut by the window's start may be longer, one reaching
            # ``before`` is the very stretch ``before`` lies in: neither counts.
            if (s > lo or lo == 0) and e < before:
                found = (s, e)
        if found or lo == 0:
            return found
        span *= 4


def _quiet_prefix(source: _Rows, q: _Quiet) -> int:
    """How far from the source's start the line is quiet (0: busy from the start or soon after)."""
    first = _next_quiet(source, q, 0)
    return first[1] if first is not None and first[0] == 0 else 0


def _start_for(source: _Rows, q: _Quiet, cut: int, prefix: int) -> int:
    """Where a stack decodes from for the rows after ``cut``: the middle of the quiet stretch before the burst
    preceding the cut (rows such as linkactivity's gap need the pulse before them). On a line quiet from the
    source's start up to the cut (``prefix``, :func:`_quiet_prefix`) that is the cut itself, as the search
    back to the start would find at a cost that grows with every cut: a line that never moves (a stream's
    return direction) would be read again from the start for every chunk."""
    if cut <= prefix:
        return cut
    stretch = _prev_quiet(source, q, cut)
    return (stretch[0] + stretch[1]) // 2 if stretch else 0


def _stop_for(source: _Rows, q: _Quiet, cut: int) -> int:
    """Where a stack that decoded up to ``cut`` may stop: half the shortest quiet stretch into the first quiet
    stretch from the cut on, as its middle would if it were the shortest (a line that stays quiet is decoded a
    few clocks past the cut, neither to the middle of all its quiet rest nor read to its end to find that)."""
    first = _next_quiet(source, q, cut, whole=False)
    return source.num_samples if first is None else first[0] + q.samples // 2


def plan_source(source: Source, stacks: Sequence[spec.Stack], chunk_samples: int,
                engine: str = "builtin") -> list[Chunk]:
    """The chunks of ``source`` for ``stacks`` decoded together by ``engine``; one chunk when no split is safe.

    Cuts fall about every ``chunk_samples`` samples in stretches where the
    stacks whose kernels carry state are all idle (their state is compared
    there), or else the first stack is. A cut need not be idle for the
    others: each stack warms up from an idle point of its own before a cut
    and runs on to one after it, so every row is decoded whole by the chunk
    its start falls in.
    """
    n = source.num_samples
    whole = [Chunk((0, n), ((0, n),) * len(stacks))]
    rules = [_quiet_rule(source, stack, engine) for stack in stacks]
    if not stacks or any(r is None for r in rules) or n < 2 * chunk_samples:
        return whole
    carried = [r for r, stack in zip(rules, stacks) if _carried_by_kernel(stack, engine)]
    q = _together(carried) if carried else rules[0]
    if q is None:
        return whole
    rows = _Rows(source)
    cuts: list[int] = []
    target = chunk_samples
    while target < n - chunk_samples // 2:
        found = _next_quiet(rows, q, max(target, cuts[-1] + 1 if cuts else 0))
        if found is None:
            break
        s, e = found
        cuts.append((s + e) // 2)
        target = max(target + chunk_samples, e + chunk_samples // 2)
    if not cuts:
        return whole
    # Per stack and cut: warm up over the burst before the cut (from the idle stretch before it), finish what
    # started before the cut (on to the first idle stretch after it).
    prefixes = [_quiet_prefix(rows, r) for r in rules]
    starts = [[_start_for(rows, r, c, prefix) for c in cuts] for r, prefix in zip(rules, prefixes)]
    stops = [[_stop_for(rows, r, c) for c in cuts] for r in rules]
    bounds = [0] + cuts + [n]
    return [Chunk((bounds[k], bounds[k + 1]),
                  tuple((starts[i][k - 1] if k else 0, stops[i][k] if k < len(cuts) else n) for i in range(len(rules))))
            for k in range(len(bounds) - 1)]


def plan_chunks(source: Source, stack: spec.Stack, chunk_samples: int,
                engine: str = "builtin") -> list[tuple[int, int, int, int]]:
    """``(decode_start, decode_stop, keep_from, keep_to)`` per chunk of ``stack`` decoded alone by ``engine``."""
    return [(c.spans[0][0], c.spans[0][1], *c.keep) for c in plan_source(source, [stack], chunk_samples, engine)]


# -- running jobs ------------------------------------------------------------------------------------

def run_job(job: Job, progress: Progress | None = None) -> Part:
    """Decode one job (in whatever process runs it); per stack, the rows it keeps as a table with times, in
    stored order.

    Tables are made here, in the worker, so that everything but writing runs
    in parallel and only arrays travel back. The stacks with a kernel (builtin
    engine) share one reading of the samples; each other stack reads its span.
    ``progress(samples_done, samples_in_job)`` follows the decode block by block.
    """
    kernel_stacks = [i for i, stack in enumerate(job.stacks)
                     if job.engine == "builtin" and kernels.kernel_for(kernels.stack_key(stack.calls))]
    others = [i for i in range(len(job.stacks)) if i not in kernel_stacks]
    passes = [(job.chunk.start, job.chunk.stop)] * bool(kernel_stacks) + [job.chunk.spans[i] for i in others]
    total = sum(b - a for a, b in passes)

    def local(k: int) -> Progress | None:
        if progress is None:
            return None
        before, first = sum(b - a for a, b in passes[:k]), passes[k][0]
        return lambda n, _total: progress(before + n - first, total)

    n = len(job.stacks)
    part = Part([[] for _ in range(n)], [None] * n, [None] * n)
    lo, hi = job.chunk.keep
    with CaptureSet.open(job.path) as cs:
        source = cs.source(job.source)
        if kernel_stacks:
            decoded = builtin.kernel_tables(source, [job.stacks[i] for i in kernel_stacks], local(0),
                                            spans=[job.chunk.spans[i] for i in kernel_stacks], keep=job.chunk.keep,
                                            carries=[job.carries[i] if job.carries else None for i in kernel_stacks])
            for i, d in zip(kernel_stacks, decoded):
                part.tables[i] = d.pieces
                part.carried_in[i], part.carried_out[i] = d.states
        for k, i in enumerate(others, start=int(bool(kernel_stacks))):
            stack, (a, b) = job.stacks[i], job.chunk.spans[i]
            run = sigrok_cli.run_stack if job.engine == "sigrok" else builtin.run_stack
            records = run(source, stack, local(k), start=a, stop=b)
            part.tables[i] = [tables.records_to_table(stack.output, [r for r in records if lo <= r.get("ss", 0) < hi],
                                                      source)]
    return part


def _reconcile(before_job: Job, before: Part, job: Job, part: Part) -> int:
    """Decode again from the cut the stacks of ``job`` whose kernel state there differs from the one ``before``
    reached (the job before it, over the samples just before); how many were."""
    if (before_job.path, before_job.source, before_job.stacks) != (job.path, job.source, job.stacks) \
            or before_job.chunk.keep[1] != job.chunk.keep[0]:
        return 0
    differ = [j for j in range(len(job.stacks)) if before.carried_out[j] != part.carried_in[j]]
    if not differ:
        return 0
    spans = tuple((job.chunk.keep[0], job.chunk.spans[j][1]) for j in differ)
    again = run_job(replace(job, stacks=tuple(job.stacks[j] for j in differ), chunk=Chunk(job.chunk.keep, spans),
                            carries=tuple(before.carried_out[j] for j in differ)))
    for k, j in enumerate(differ):
        part.tables[j], part.carried_out[j] = again.tables[k], again.carried_out[k]
    return len(differ)


def reconcile(jobs: list[Job], parts: dict[int, Part]) -> int:
    """Make chunks whose kernel state at a cut differs from the chunk before's exact; how many stacks were decoded
    again.

    Consecutive chunks of one source meet at a cut: the earlier one's state
    there is exact when its own start was (the first chunk starts at the
    source's start), the later one's comes from its warm-up only. Where they
    differ, the later chunk's stack is decoded again from the cut, starting
    from the earlier one's state, in this process and in order (each rerun's
    state at its end feeds the next comparison).
    """
    return sum(_reconcile(jobs[i - 1], parts[i - 1], jobs[i], parts[i]) for i in range(1, len(jobs)))


@dataclass
class _Output:
    """One table being written: its stacks' places in its source's jobs, and where its rows go."""

    source: str
    output: str
    group: list[spec.Stack]
    places: list[int]
    attrs: dict[str, Any]
    appender: Any = None  # nicrig.chunked.Appender, from the first rows on


@dataclass
class _FilePlan:
    result: FileResult
    outputs: list[_Output]
    jobs: list[Job]                                     # source by source, chunk by chunk
    parts: dict[int, Part] = field(default_factory=dict)  # done, not yet written (index in jobs)
    written: int = 0      # jobs whose rows are in the tables, in order
    pending: int = 0      # jobs not done (run, failed or skipped) yet
    last: tuple[Job, Part] | None = None  # the job written last (its carried states)
    update_cm: Any = None  # the companion update (a context manager), open from the first rows
    update: Any = None     # what it yielded (companion.Update)
    wire: list[str] = field(default_factory=list)  # wire sources whose ethernet table to make


def _stacks_for(source: Source, stack_texts: list[str] | None) -> list[spec.Stack]:
    return [spec.parse_stack(t, source) for t in stack_texts] if stack_texts else spec.auto_stacks(source)


def _attrs(group: list[spec.Stack], engine: str) -> dict[str, Any]:
    versions = {c.id: catalog.get(c.id).version for s in group for c in s.calls}
    made_by = sigrok_cli.version() if engine == "sigrok" else builtin.version(group, kernel=engine == "builtin")
    return tables.table_attrs([s.text() for s in group], made_by, versions)


def _up_to_date(cs: CaptureSet, table: str, attrs: dict[str, Any]) -> bool:
    if table not in cs.table_names():
        return False
    try:
        have = cs.table_attrs(table)
    except FormatError:  # a damaged derived table: decoding makes it again
        return False
    return all(have.get(k) == attrs[k] for k in ("decoders", "decoder_versions", "layout"))


def plan_file(path: Path, *, sources: list[str] | None, stacks: list[str] | None, engine: str, force: bool,
              chunk_samples: int) -> _FilePlan:
    """The jobs of one file: each source's stacks whose tables are not up to date, cut into chunks together."""
    result = FileResult(str(path))
    plan = _FilePlan(result, [], [])
    with CaptureSet.open(path) as cs:
        wired = wire.names(cs)
        for name in [n for n in sources or wired if n in wired] if not stacks else []:
            result.written.setdefault(name, {})
            if not force and _up_to_date(cs, f"decoded/{name}/ethernet", wire_frames.table_attrs()):
                result.skipped.setdefault(name, []).append("ethernet")
            else:
                plan.wire.append(name)
        for name in [n for n in sources or cs.source_names if n not in wired]:
            source = cs.source(name)
            by_output: dict[str, list[spec.Stack]] = {}
            for stack in _stacks_for(source, stacks):
                by_output.setdefault(stack.output, []).append(stack)
            result.written.setdefault(name, {})
            todo: list[spec.Stack] = []
            for output, group in by_output.items():
                attrs = _attrs(group, engine)
                if not force and _up_to_date(cs, f"decoded/{name}/{output}", attrs):
                    result.skipped.setdefault(name, []).append(output)
                    continue
                plan.outputs.append(_Output(name, output, group, list(range(len(todo), len(todo) + len(group))),
                                            attrs))
                todo += group
            if todo:
                plan.jobs += [Job(str(path), name, tuple(todo), engine, c)
                              for c in plan_source(source, todo, chunk_samples, engine)]
    plan.pending = len(plan.jobs)
    return plan


def _open_update(plan: _FilePlan) -> None:
    """Start the file's companion update, once."""
    if plan.update is None:
        with CaptureSet.open(plan.result.path) as cs:
            plan.update_cm = cs.derived_update()
        plan.update = plan.update_cm.__enter__()


def _write_wire(plan: _FilePlan) -> None:
    """Make the ethernet tables of the file's wire sources (in this process: frames need no cuts) and give them
    to the companion update."""
    dtype = tables.dtype_of("ethernet")
    for name in plan.wire:
        _open_update(plan)
        appender = plan.update.append_table(f"decoded/{name}/ethernet", dtype, units=tables.units_of(dtype.names),
                                            description=f"ethernet decoder records for wire source {name}",
                                            attrs=wire_frames.table_attrs())
        with CaptureSet.open(plan.result.path) as cs:
            for block in wire_frames.ethernet_blocks(wire.WireSource(cs, name)):
                appender.append(block)
        plan.result.written[name]["ethernet"] = appender.close().shape[0]
    plan.wire = []


def _write_parts(plan: _FilePlan) -> None:
    """Write the rows of the jobs done, in order, up to the first one not done: each table's rows go to its
    appender in the file's companion update (which compresses them on the encoder threads)."""
    while plan.written in plan.parts:
        i = plan.written
        job, part = plan.jobs[i], plan.parts.pop(i)
        if plan.last is not None:
            _reconcile(*plan.last, job, part)
        _open_update(plan)
        for out in (o for o in plan.outputs if o.source == job.source):
            if out.appender is None:
                dtype = tables.dtype_of(out.output)
                out.appender = plan.update.append_table(
                    f"decoded/{out.source}/{out.output}", dtype, units=tables.units_of(dtype.names),
                    description=f"{out.output} decoder records for source {out.source}", attrs=out.attrs)
            pieces = part.tables[out.places[0]]
            if len(out.places) > 1:  # the group's stacks' rows, merged
                joined = [p for j in out.places for p in part.tables[j]]
                pieces = [tables.in_order(np.concatenate(joined))] if joined else []
            # The rows of a chunk all start within it: appended chunk by chunk, the table is in stored order.
            for rows in pieces:
                out.appender.append(rows)
        part.tables = []  # written: only the carried states are kept, for the next job's cut
        plan.last = (job, part)
        plan.written += 1
        if plan.written == len(plan.jobs) or plan.jobs[plan.written].source != job.source:
            for out in (o for o in plan.outputs if o.source == job.source):
                plan.result.written[out.source][out.output] = out.appender.close().shape[0]


def write_tables(plan: _FilePlan) -> None:
    """Replace the file's companion with one holding the tables written (and the wire sources' ethernet tables),
    Ctrl-C held back meanwhile."""
    _write_wire(plan)
    if plan.update is None:
        return
    cm, plan.update, plan.update_cm = plan.update_cm, None, None
    with _sigint_held():
        cm.__exit__(None, None, None)


def abandon_tables(plan: _FilePlan) -> None:
    """Drop what was written for ``plan``'s file: its companion stays as it was."""
    for out in plan.outputs:
        if out.appender is not None:
            out.appender.abandon()
    if plan.update is None:
        return
    cm, plan.update, plan.update_cm = plan.update_cm, None, None
    cm.__exit__(DecodeError, DecodeError("not written"), None)


@contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold Ctrl-C back while tables are written: an interrupt lands after, never halfway."""
    try:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    except (ValueError, OSError):  # not the main thread of the main interpreter
        yield
        return
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _CtrlC:
    """Ctrl-C that is never lost while a batch runs (in the main thread).

    Python raises KeyboardInterrupt in whatever code runs when SIGINT
    arrives, and only prints and drops it when that is a finalizer (h5py's
    weak-reference callbacks run often here): the batch remembers the signal
    and stops at the next job boundary, before writing another file's tables.
    """

    def __init__(self) -> None:
        self.seen = False
        self.installed = False

    def __enter__(self) -> _CtrlC:
        try:
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._handler)
                self.installed = True
        except ValueError:  # not the main thread of the main interpreter: no signals here
            pass
        return self

    def _handler(self, signum: int, frame: Any) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        if self.installed:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _executor(workers: int, scheduler: str | None) -> Any:
    if scheduler:
        try:
            from distributed import Client
        except ImportError:
            raise UsageError("--scheduler needs Dask distributed (pip install 'dask[distributed]')") from None
        try:
            return Client(scheduler, timeout="10s")
        except (OSError, TimeoutError) as exc:
            raise UsageError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    return ProcessPoolExecutor(max_workers=workers) if workers > 1 else None


def _first_done(executor: Any, futures: list[Any]) -> list[Any]:
    """The futures among ``futures`` that are done, waiting for one if none is."""
    if hasattr(executor, "gather"):  # a Dask client
        from distributed import wait as dask_wait

        return list(dask_wait(futures, return_when="FIRST_COMPLETED").done)
    return list(wait(futures, return_when=FIRST_COMPLETED).done)


def _record_failure(plan: _FilePlan, exc: BaseException) -> None:
    if plan.result.error is not None:
        return
    if isinstance(exc, BrokenProcessPool):
        plan.result.error = "a decode worker died (killed or out of memory)"
    elif isinstance(exc, NicrigError):
        plan.result.error = str(exc)
    else:
        plan.result.error = f"{type(exc).__name__}: {exc}"


def decode_files(paths: list[Path], *, sources: list[str] | None = None, stacks: list[str] | None = None,
                 engine: str = "builtin", force: bool = False, workers: int = 1, scheduler: str | None = None,
                 chunk_samples: int = DEFAULT_CHUNK_SAMPLES, progress: Progress | None = None,
                 on_file: Callable[[FileResult], None] | None = None) -> list[FileResult]:
    """Decode every file; each file's tables are written as soon as its jobs are done.

    ``progress(done_samples, total_samples)`` is called as jobs finish (and,
    in-process, as blocks are decoded); raising from it cancels the batch.
    A file that cannot be read or decoded is reported in its result and the
    others go on.
    """
    if engine not in ENGINES:
        raise UsageError(f"no engine {engine!r} (engines: {', '.join(ENGINES)})")
    if stacks and not sources:
        raise UsageError("-P needs --source: say which source the channel names belong to")
    plans: list[_FilePlan] = []
    results: list[FileResult] = []
    for path in paths:
        try:
            plan = plan_file(Path(path), sources=sources, stacks=stacks, engine=engine, force=force,
                             chunk_samples=max(4 * QUIET_CLOCKS, chunk_samples))
        except NicrigError as exc:
            results.append(FileResult(str(path), error=str(exc)))
            if on_file:
                on_file(results[-1])
            continue
        plans.append(plan)
        results.append(plan.result)
    total = sum(j.chunk.stop - j.chunk.start for p in plans for j in p.jobs)
    done = 0

    def finish(plan: _FilePlan) -> None:
        if plan.result.error is None:
            try:
                write_tables(plan)
            except NicrigError as exc:
                plan.result.error = str(exc)
        abandon_tables(plan)
        if on_file:
            on_file(plan.result)

    def job_done(plan: _FilePlan, i: int, part: Part | None) -> None:
        """Job ``i`` of ``plan`` is done (``part``; None: failed or skipped): write what is in order."""
        if part is not None and plan.result.error is None:
            plan.parts[i] = part
            try:
                _write_parts(plan)
            except NicrigError as exc:
                _record_failure(plan, exc)
        plan.pending -= 1
        if plan.pending == 0:
            finish(plan)

    for plan in plans:
        if plan.pending == 0:
            finish(plan)
    todo = deque((plan, i) for plan in plans for i in range(len(plan.jobs)))
    try:
        with _CtrlC() as ctrl_c:
            executor = _executor(workers, scheduler)
            if executor is None:
                while todo:
                    plan, i = todo.popleft()
                    job, base, part = plan.jobs[i], done, None
                    if plan.result.error is None:
                        step = (lambda n, _t, base=base: progress(base + n, total)) if progress else None
                        try:
                            part = run_job(job, step)
                        except NicrigError as exc:
                            _record_failure(plan, exc)
                    ctrl_c.check()
                    done = base + job.chunk.stop - job.chunk.start
                    if progress:
                        progress(done, total)
                    job_done(plan, i, part)
                return results
            # Jobs go out a few more at a time than there are workers, as earlier ones are in: tables are
            # written in job order, and only the parts done ahead of the next one to write wait in memory.
            slots = sum(executor.ncores().values()) if hasattr(executor, "gather") else workers
            window = 2 * max(slots, 1)
            running: dict[Any, tuple[_FilePlan, int]] = {}
            try:
                while todo or running:
                    while todo and len(running) < window:
                        plan, i = todo.popleft()
                        if plan.result.error is not None:
                            done += plan.jobs[i].chunk.stop - plan.jobs[i].chunk.start
                            job_done(plan, i, None)
                            continue
                        extra = {"pure": False} if hasattr(executor, "gather") else {}
                        running[executor.submit(run_job, plan.jobs[i], **extra)] = (plan, i)
                    if not running:
                        continue
                    for fut in _first_done(executor, list(running)):
                        plan, i = running.pop(fut)
                        part = None
                        try:
                            part = fut.result()
                        except Exception as exc:  # noqa: BLE001 - a failed job fails its own file only
                            _record_failure(plan, exc)
                        ctrl_c.check()
                        done += plan.jobs[i].chunk.stop - plan.jobs[i].chunk.start
                        if progress:
                            progress(done, total)
                        job_done(plan, i, part)
            finally:
                if isinstance(executor, ProcessPoolExecutor):
                    executor.shutdown(wait=True, cancel_futures=True)
                else:
                    executor.close()
    finally:
        for plan in plans:  # interrupted, or a job raised: files not finished keep their companions
            abandon_tables(plan)
    return results


def decode_file(path: Path, *, sources: list[str] | None = None, stacks: list[str] | None = None,
                engine: str = "builtin", force: bool = False, progress: Progress | None = None) -> dict[str, Any]:
    """Decode one capture set in this process (the GUI's call); raise DecodeError if it failed."""
    (result,) = decode_files([path], sources=sources, stacks=stacks, engine=engine, force=force,
                             progress=progress)
    if result.error is not None:
        raise DecodeError(result.error)
    return result.as_dict()


def summary_json(results: list[FileResult]) -> str:
    return json.dumps({r.path: r.as_dict() for r in results}, indent=2)
