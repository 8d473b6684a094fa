"""Batch decoding: many capture sets, long sources split at idle points, local processes or a Dask cluster.

The unit of work is a :class:`Job`: one stack over one span of one source.
A long source is cut into chunks at *quiet points*, samples in the middle of
an idle stretch, where no transaction or frame is in progress:

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

Each chunk is decoded from the quiet point *before* its start (one burst of
warm-up, so that a decoder knows what the previous transaction, frame or gap
was) to the quiet point after its end, and keeps the records that start
inside it: the table equals a single pass (``tests/test_decode_batch.py``
checks it on captures whose naive cut points fall inside transactions).
What a record can depend on from further back (the ethernet decoder's table
of fragmented datagrams, which gives a later IPv4 fragment the first one's
sequence number) is checked at every cut when a kernel decodes the stack: the
chunk before the cut reports the kernel's carried state there, the chunk
after it the state it reached after its warm-up; where they differ, the
chunk after the cut is decoded again from the cut with the state of the
one before (:func:`reconcile`), so the table is still the single pass's.

Workers only read capture sets. The calling process joins and compresses
each table as soon as its jobs are in (while the workers decode the rest:
otherwise a serial step after the last job) and writes the file's tables
once all of its jobs are in, into the capture's companion file
(:mod:`nicrig.companion`: the capture itself is never opened for writing),
replaced atomically, with Ctrl-C held back while it writes; a file not
finished (an error, an interrupt) keeps its companion as it was. A table
already decoded by the same decoder versions with the same stack is skipped
unless ``force``.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition.capture import CaptureSet, Source
from nicrig.decoders import DecodeError, builtin, catalog, kernels, sigrok_cli, spec, tables
from nicrig.decoders.runtime import typed_option

from nicrig.errors import NicrigError, UsageError

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
class Job:
    """One stack over samples ``[start, stop)`` of one source, keeping records with ``keep[0] <= ss < keep[1]``."""

    path: str
    source: str
    stack: spec.Stack
    engine: str
    start: int
    stop: int
    keep: tuple[int, int]
    carry: Any = None  # the kernel's carried state at ``start`` (a rerun from a cut), or None


@dataclass
class Part:
    """What a job gives back: its table, and the kernel's carried state at its keep bounds (None: none)."""

    table: np.ndarray
    carried_in: Any = None
    carried_out: Any = None


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


def _quiet_points(source: _Rows, q: _Quiet, start: int, stop: int, block: int = 1 << 18) -> Iterator[tuple[int, int]]:
    """Quiet stretches ``(first, end)`` of at least ``q.samples`` samples within ``[start, stop)``, in order.

    Reads start small and grow to ``block``: the planner mostly wants the first
    stretch after a point, a few bus transactions away.
    """
    prev = None
    run_start = start
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
                yield int(run_starts[k]), int(idx[k])
            run_start = int(idx[-1]) + 1
        first += len(rows)
    if stop - run_start >= q.samples:
        yield run_start, stop


def _next_quiet(source: _Rows, q: _Quiet, at: int) -> tuple[int, int] | None:
    """The first quiet stretch that starts at or after ``at``."""
    for s, e in _quiet_points(source, q, at, source.num_samples):
        return s, e
    return None


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


def plan_chunks(source: Source, stack: spec.Stack, chunk_samples: int,
                engine: str = "builtin") -> list[tuple[int, int, int, int]]:
    """``(decode_start, decode_stop, keep_from, keep_to)`` per chunk for ``engine``; one chunk when no split is safe."""
    n = source.num_samples
    q = _quiet_rule(source, stack, engine)
    if q is None or n < 2 * chunk_samples:
        return [(0, n, 0, n)]
    rows = _Rows(source)
    cuts: list[int] = []
    quiet: list[tuple[int, int]] = []
    target = chunk_samples
    while target < n - chunk_samples // 2:
        found = _next_quiet(rows, q, max(target, cuts[-1] + 1 if cuts else 0))
        if found is None:
            break
        s, e = found
        cuts.append((s + e) // 2)
        quiet.append(found)
        target = max(target + chunk_samples, e + chunk_samples // 2)
    if not cuts:
        return [(0, n, 0, n)]
    bounds = [0] + cuts + [n]
    chunks = []
    for k in range(len(bounds) - 1):
        lo, hi = bounds[k], bounds[k + 1]
        start = 0
        if k > 0:
            # Warm up over the burst before the cut: start in the quiet stretch before it.
            prev = _prev_quiet(rows, q, quiet[k - 1][0])
            start = (prev[0] + prev[1]) // 2 if prev else 0
        stop = n
        if k < len(cuts):
            # Finish what started before the cut: run through the burst after it.
            nxt = _next_quiet(rows, q, quiet[k][1])
            stop = (nxt[0] + nxt[1]) // 2 if nxt else n
        chunks.append((start, stop, lo, hi))
    return chunks


# -- running jobs ------------------------------------------------------------------------------------

def run_job(job: Job, progress: Progress | None = None) -> Part:
    """Decode one job (in whatever process runs it); the records it keeps as a typed table, in sample order.

    The table is made here, in the worker, so that turning records into
    columns runs in parallel too and only arrays travel back.
    ``progress(samples_done, samples_in_job)`` follows the decode block by block.
    """
    local = (lambda n, _total: progress(n - job.start, job.stop - job.start)) if progress else None
    carried: list[Any] = [None, None]
    with CaptureSet.open(job.path) as cs:
        source = cs.source(job.source)
        if job.engine == "sigrok":
            records = sigrok_cli.run_stack(source, job.stack, local, start=job.start, stop=job.stop)
        elif _carried_by_kernel(job.stack, job.engine):
            records, carried = builtin.run_kernel(source, job.stack, local, start=job.start, stop=job.stop,
                                                  marks=job.keep, carry=job.carry)
        else:
            records = builtin.run_stack(source, job.stack, local, start=job.start, stop=job.stop,
                                        kernel=job.engine == "builtin")
        lo, hi = job.keep
        table = tables.records_to_table(job.stack.output, [r for r in records if lo <= r.get("ss", 0) < hi],
                                        source)
    return Part(table, *carried)


def reconcile(jobs: list[Job], parts: dict[int, Part]) -> int:
    """Make chunks whose kernel state at a cut differs from the chunk before's exact; how many were decoded again.

    Consecutive chunks of one stack meet at a cut: the earlier one's state
    there is exact when its own start was (the first chunk starts at the
    source's start), the later one's comes from its warm-up only. Where they
    differ, the later chunk is decoded again from the cut, starting from the
    earlier one's state, in this process and in order (each rerun's state at
    its end feeds the next comparison).
    """
    again = 0
    for i in range(1, len(jobs)):
        before, job = jobs[i - 1], jobs[i]
        if before.stack != job.stack or before.keep[1] != job.keep[0]:
            continue
        state = parts[i - 1].carried_out
        if state == parts[i].carried_in:
            continue
        parts[i] = run_job(replace(job, start=job.keep[0], carry=state))
        again += 1
    return again


@dataclass
class _FilePlan:
    result: FileResult
    groups: dict[tuple[str, str], list[spec.Stack]]           # (source, output) -> stacks
    jobs: dict[tuple[str, str], list[Job]]
    parts: dict[tuple[str, str], dict[int, Part]]             # job's index in jobs[key] -> what it gave
    pending: int = 0
    staged: set[tuple[str, str]] = field(default_factory=set)  # tables given to the companion update
    update_cm: Any = None  # the companion update (a context manager), open from the first staged table
    update: Any = None     # what it yielded (companion.Update)


def _stacks_for(source: Source, stack_texts: list[str] | None) -> list[spec.Stack]:
    return [spec.parse_stack(t, source) for t in stack_texts] if stack_texts else spec.auto_stacks(source)


def _attrs(group: list[spec.Stack], engine: str) -> dict[str, Any]:
    versions = {c.id: catalog.get(c.id).version for s in group for c in s.calls}
    made_by = sigrok_cli.version() if engine == "sigrok" else builtin.version(group, kernel=engine == "builtin")
    return tables.table_attrs([s.text() for s in group], made_by, versions)


def _up_to_date(cs: CaptureSet, table: str, attrs: dict[str, Any]) -> bool:
    if table not in cs.table_names():
        return False
    have = cs.table_attrs(table)
    return all(have.get(k) == attrs[k] for k in ("decoders", "decoder_versions", "layout"))


def plan_file(path: Path, *, sources: list[str] | None, stacks: list[str] | None, engine: str, force: bool,
              chunk_samples: int) -> _FilePlan:
    result = FileResult(str(path))
    plan = _FilePlan(result, {}, {}, {})
    with CaptureSet.open(path) as cs:
        for name in sources or cs.source_names:
            source = cs.source(name)
            by_output: dict[str, list[spec.Stack]] = {}
            for stack in _stacks_for(source, stacks):
                by_output.setdefault(stack.output, []).append(stack)
            result.written.setdefault(name, {})
            for output, group in by_output.items():
                if not force and _up_to_date(cs, f"decoded/{name}/{output}", _attrs(group, engine)):
                    result.skipped.setdefault(name, []).append(output)
                    continue
                key = (name, output)
                plan.groups[key] = group
                plan.parts[key] = {}
                plan.jobs[key] = [Job(str(path), name, stack, engine, a, b, (lo, hi)) for stack in group
                                  for a, b, lo, hi in plan_chunks(source, stack, chunk_samples, engine)]
                plan.pending += len(plan.jobs[key])
    return plan


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


def stage_table(plan: _FilePlan, key: tuple[str, str], engine: str) -> None:
    """Once all of a table's jobs are in: make its cuts exact, join it and give it to the file's companion
    update, which compresses it now, while the workers decode the rest (the file is written at the end)."""
    if plan.update is None:
        with CaptureSet.open(plan.result.path) as cs:
            plan.update_cm = cs.derived_update()
        plan.update = plan.update_cm.__enter__()
    name, output = key
    reconcile(plan.jobs[key], plan.parts[key])
    parts = plan.parts[key]
    joined = np.concatenate([parts[i].table for i in sorted(parts)])
    # In job order, then by start and end: ties keep their order, whichever job finished first.
    table = joined[np.lexsort((joined["es"], joined["ss"]))]
    plan.update.write_table(f"decoded/{name}/{output}", table, units=tables.units_of(table.dtype.names),
                            description=f"{output} decoder records for source {name}",
                            attrs=_attrs(plan.groups[key], engine))
    plan.staged.add(key)
    plan.parts[key].clear()  # compressed in the update now: the columns need not stay in memory
    plan.result.written[name][output] = len(table)


def write_tables(plan: _FilePlan, engine: str) -> None:
    """Stage the tables not staged yet, then replace the companion with Ctrl-C held back."""
    for key in plan.groups:
        if key not in plan.staged:
            stage_table(plan, key, engine)
    if plan.update is None:
        return
    cm, plan.update, plan.update_cm = plan.update_cm, None, None
    with _sigint_held():
        cm.__exit__(None, None, None)


def abandon_tables(plan: _FilePlan) -> None:
    """Drop what was staged for ``plan``'s file: its companion stays as it was."""
    if plan.update is None:
        return
    cm, plan.update, plan.update_cm = plan.update_cm, None, None
    cm.__exit__(DecodeError, DecodeError("not written"), None)


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


def _completed(executor: Any, futures: list[Any]) -> Iterator[Any]:
    if hasattr(executor, "gather"):  # a Dask client
        from distributed import as_completed as dask_completed

        return iter(dask_completed(futures))
    return as_completed(futures)


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
    total = sum(j.stop - j.start for p in plans for jobs in p.jobs.values() for j in jobs)
    done = 0

    def finish(plan: _FilePlan) -> None:
        if plan.result.error is None:
            try:
                write_tables(plan, engine)
            except NicrigError as exc:
                plan.result.error = str(exc)
        abandon_tables(plan)
        if on_file:
            on_file(plan.result)

    def job_done(plan: _FilePlan, key: tuple[str, str]) -> None:
        if plan.result.error is None and len(plan.parts[key]) == len(plan.jobs[key]):
            try:
                stage_table(plan, key, engine)
            except NicrigError as exc:
                _record_failure(plan, exc)
        plan.pending -= 1
        if plan.pending == 0:
            finish(plan)

    for plan in plans:
        if plan.pending == 0:
            finish(plan)
    jobs = [(plan, key, i, job) for plan in plans for key, js in plan.jobs.items() for i, job in enumerate(js)]
    try:
        with _CtrlC() as ctrl_c:
            executor = _executor(workers, scheduler)
            if executor is None:
                for plan, key, i, job in jobs:
                    base = done
                    if plan.result.error is None:
                        step = (lambda n, _t, base=base: progress(base + n, total)) if progress else None
                        try:
                            plan.parts[key][i] = run_job(job, step)
                        except NicrigError as exc:
                            _record_failure(plan, exc)
                    ctrl_c.check()
                    done = base + job.stop - job.start
                    if progress:
                        progress(done, total)
                    job_done(plan, key)
                return results
            try:
                if hasattr(executor, "gather"):
                    owner = {executor.submit(run_job, job, pure=False): (plan, key, i, job)
                             for plan, key, i, job in jobs}
                else:
                    owner = {executor.submit(run_job, job): (plan, key, i, job) for plan, key, i, job in jobs}
                for fut in _completed(executor, list(owner)):
                    plan, key, i, job = owner[fut]
                    try:
                        plan.parts[key][i] = fut.result()
                    except Exception as exc:  # noqa: BLE001 - a failed job fails its own file only
                        _record_failure(plan, exc)
                    ctrl_c.check()
                    done += job.stop - job.start
                    if progress:
                        progress(done, total)
                    job_done(plan, key)
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
