"""Fast views of deep sources: a block cache of samples and times, and a per-source min/max pyramid.

A logic lane is drawn as *columns*: for each pixel of the view, the AND and
the OR of the packed samples falling in it. Per channel bit, AND = OR means the
level held through the pixel; AND != OR means it changed there, which the lane
draws as one transition mark (so never more than one per pixel). The columns
come from raw samples when the window holds few samples, and otherwise from a
pyramid of bins (level 1: AND/OR of every ``BASE_BIN`` samples, each next level
``FACTOR`` bins of the one below), built in the background (another process
for a deep capture: :mod:`nicrig.gui.prepare`) from the stored chunks in two
threads, written into files beside the capture set that the view maps while
they grow, so a billion-sample source is never loaded whole and a second
opening maps the finished files at once.

Times here are picoseconds on the capture set's common timeline (``Source.times_ps``).
"""

from __future__ import annotations

import hashlib
import json
import math
import mmap
import os
import re
import shutil
import tempfile
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from nicrig.acquisition.capture import DEFAULT_CHUNK_SAMPLES, Source
from nicrig.gui import _fold
from nicrig.gui.chunks import StoredChunks

#: Samples per level-1 bin, and bins of a level per bin of the next.
BASE_BIN = 64
FACTOR = 8
#: Read raw samples while a window holds at most this many samples per pixel.
RAW_SAMPLES_PER_PIXEL = BASE_BIN
#: A window drawn from the pyramid with at most this many samples per pixel has its samples read ahead: zoomed in
#: up to 8 times (a wheel turn of a few notches) it is drawn from raw samples already in memory.
READ_AHEAD_SAMPLES_PER_PIXEL = 8 * RAW_SAMPLES_PER_PIXEL
#: Until the pyramid covers a window, read raw samples for it when it holds up to this many samples (the block
#: cache holds them), so lanes are drawn whole while it builds; only wider windows wait for it.
RAW_SAMPLES_WHILE_BUILDING = 1 << 19
#: Blocks the cache keeps per source (64 Ki samples each).
CACHE_BLOCKS = 48
#: Level-1 bins the builder reduces per task: FACTOR**5, so every level up to the sixth closes its bins at each
#: block's end and a partial pyramid has those levels too (a wide window reads a few bins per pixel even then).
BLOCK_BINS = FACTOR ** 5
BLOCK_LEVELS = 6
#: Threads that read and reduce blocks (inflating a chunk and the checksum release the GIL).
BUILD_THREADS = 2
#: How much lower (nice levels) the builder's threads run than the thread that starts them.
BUILD_NICENESS = 5
CACHE_VERSION = 2


@dataclass(frozen=True)
class Columns:
    """Per-pixel aggregates of a window: start time (ps) and packed AND/OR of the samples in each column.

    A column lasts until the next one starts; the last until ``end_ps``.
    ``covered_ps`` is how far the data reach (the pyramid may still be building).
    """

    t_ps: np.ndarray
    and_: np.ndarray
    or_: np.ndarray
    end_ps: int
    covered_ps: int

    def __len__(self) -> int:
        return len(self.t_ps)


def search(a: np.ndarray, x: float, side: Literal["left", "right"]) -> int:
    """``np.searchsorted(a, x, side)`` of one time in sorted integer times, as an integer: searched with a float,
    NumPy would first convert the whole array to floats (a copy of all of it, at every redraw)."""
    bound = math.ceil(x) if side == "left" else math.floor(x)
    info = np.iinfo(a.dtype)
    return int(np.searchsorted(a, a.dtype.type(min(max(bound, info.min), info.max)), side=side))


def _folded(x: np.ndarray, width: int, keep: int) -> list[np.ndarray | None]:
    """The AND and the OR (``keep``: 1 the AND, 2 the OR, 3 both; None where not kept) of every ``width``
    consecutive rows of packed samples ``x`` (rows x bytes), the last group maybe shorter. One pass in C
    (:mod:`nicrig.gui._fold`), without the GIL."""
    u = x.shape[1]
    return [None if b is None else np.frombuffer(b, np.uint8).reshape(-1, u)
            for b in _fold.fold(np.ascontiguousarray(x, dtype=np.uint8), u, width, keep)]


def folds(x: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """The AND and the OR of every ``width`` consecutive rows of packed samples ``x`` (rows x bytes); the last
    group may be shorter."""
    a, o = _folded(x, width, 3)
    return a, o


def fold(x: np.ndarray, width: int, op: np.ufunc) -> np.ndarray:
    """``op`` (``np.bitwise_and`` or ``np.bitwise_or``) of every ``width`` consecutive rows of packed samples
    ``x`` (rows x bytes); the last group may be shorter. Only that one is folded."""
    keep = 1 if op is np.bitwise_and else 2
    return _folded(x, width, keep)[keep - 1]


def columns_from(t_ps: np.ndarray, and_: np.ndarray, or_: np.ndarray, t0_ps: float, px_ps: float,
                 end_ps: int, covered_ps: int) -> Columns:
    """Group consecutive items (samples or bins, sorted by time) by the pixel their start falls in."""
    n = len(t_ps)
    if n == 0:
        return Columns(t_ps, and_, or_, end_ps, covered_ps)
    first, last = (math.floor((float(t_ps[k]) - t0_ps) / px_ps) for k in (0, -1))
    if last - first >= n:  # no more items than pixels: each item's pixel
        pixel = np.floor((t_ps - t0_ps) / px_ps).astype(np.int64)
        starts = np.flatnonzero(np.diff(pixel, prepend=pixel[0] - 1))
    else:  # many items a pixel: each pixel's first item, its left edge searched among the starts
        edges = t0_ps + np.arange(first + 1, last + 1) * px_ps
        if t_ps.dtype.kind in "iu":  # an integer time is at or after an edge when at or after its ceiling
            edges = np.ceil(edges).astype(t_ps.dtype)
        k = np.searchsorted(t_ps, edges, side="left")
        # the last edge, rounded up, can pass the last item by a fraction (t0 + last * px is not exact): no item
        # starts that pixel
        k = k[k < n]
        starts = np.concatenate(([0], k[np.diff(k, prepend=0) > 0]))
    return Columns(t_ps[starts], np.bitwise_and.reduceat(and_, starts, axis=0),
                   np.bitwise_or.reduceat(or_, starts, axis=0), end_ps, covered_ps)


def channel_states(cols: Columns, bit: int | np.ndarray) -> np.ndarray:
    """Per column: 0 or 1 when channel ``bit`` held that level, 2 when it changed within the column (for an array
    of bits: columns x bits)."""
    lo = (cols.and_[:, bit // 8] >> (bit % 8)) & 1
    hi = (cols.or_[:, bit // 8] >> (bit % 8)) & 1
    return np.where(lo == hi, lo, 2).astype(np.int8)


def runs(cols: Columns, bits: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The runs of channels ``bits`` over the columns (equal states of consecutive columns merged, see
    :func:`channel_states`): start ps, end ps and state of each run, channel after channel, and how many runs each
    channel has. One pass in C over the columns (:mod:`nicrig.gui._fold`): a redraw takes them for every lane."""
    n, k = len(cols), len(bits)
    start, end = np.empty(n * k, np.int64), np.empty(n * k, np.int64)
    state, counts = np.empty(n * k, np.int8), np.zeros(k, np.int64)
    unit = cols.and_.shape[1] if cols.and_.ndim == 2 else 1
    total = _fold.runs(np.ascontiguousarray(cols.and_, np.uint8), np.ascontiguousarray(cols.or_, np.uint8), unit,
                       np.ascontiguousarray(cols.t_ps, np.int64), int(cols.end_ps), np.asarray(bits, np.int64),
                       start, end, state, counts)
    return start[:total], end[:total], state[:total], counts


def sample_period_ps(source: Source) -> int:
    """How long the last sample lasts (ps): the sample period, or the nominal clock's in state mode."""
    return round(1e12 / source.samplerate_hz) if source.samplerate_hz else 1


class SampleReader:
    """The samples and times of a source read from its stored chunks (thread-safe: each call reads its own);
    ``every``: most of them will be read (the builder)."""

    def __init__(self, source: Source, every: bool = False):
        self.source = source
        samples, stamps = source.datasets
        self.samples = StoredChunks(samples, source.path, f"source {source.name!r} samples", every)
        self.stamps = StoredChunks(stamps, source.path, f"source {source.name!r} timestamps", every) \
            if stamps is not None else None
        if self.stamps is not None and source.num_samples:
            first_local = int(self.stamps.fields(0, [""], 1)[""][0])
            self.base_ps = int(source.times_ps(0, 1)[0]) - first_local
        else:
            self.base_ps = 0

    def _rows(self, chunks: StoredChunks, s: int, e: int, step: int = 1) -> np.ndarray:
        """Rows ``s, s + step, ... < e`` of a dataset read by whole chunks."""
        c = chunks.chunk_rows
        k0, k1 = s // c, (e - 1) // c + 1
        if step > 1 and c % step == 0 and s % step == 0:
            parts = [chunks.fields(k, [""], step)[""] for k in range(k0, k1)]
            return np.concatenate(parts)[(s - k0 * c) // step:][:len(range(s, e, step))]
        parts = [chunks.rows(k) for k in range(k0, k1)]
        return np.concatenate(parts)[s - k0 * c:e - k0 * c:step] if len(parts) > 1 else \
            parts[0][s - k0 * c:e - k0 * c:step]

    def packed(self, s: int, e: int) -> np.ndarray:
        """Packed samples ``[s, e)``."""
        return self._rows(self.samples, s, e)

    def times(self, s: int, e: int, step: int = 1) -> np.ndarray:
        """Times (ps, common timeline) of samples ``s, s + step, ... < e``."""
        if self.stamps is None:
            return self.source.times_at(np.arange(s, e, step))
        return self._rows(self.stamps, s, e, step).astype(np.int64) + self.base_ps

    def block(self, b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Level-1 bins (t_ps, and, or) of the builder's block ``b``."""
        s = b * BLOCK_BINS * BASE_BIN
        e = min(self.source.num_samples, s + BLOCK_BINS * BASE_BIN)
        c = self.samples.chunk_rows
        if c % BASE_BIN or s % c:  # bins straddle chunks: the block's samples together
            parts = [self.packed(s, e)]
        else:  # a chunk at a time: no copy of the block
            parts = [self.samples.rows(k)[:e - k * c] for k in range(s // c, (e - 1) // c + 1)]
        both = [folds(p, BASE_BIN) for p in parts]
        a = np.concatenate([f[0] for f in both])
        o = np.concatenate([f[1] for f in both])
        return self.times(s, e, BASE_BIN), a, o


_READ_AHEAD: list[ThreadPoolExecutor] = []


def _read_ahead_thread() -> ThreadPoolExecutor:
    """The one thread that reads blocks ahead for every source's cache, at the builder's lower priority: the
    window's thread comes first."""
    if not _READ_AHEAD:
        _READ_AHEAD.append(ThreadPoolExecutor(1, thread_name_prefix="nicrig-read-ahead", initializer=yield_cores))
    return _READ_AHEAD[0]


class ReadAhead:
    """One piece of reading ahead at a time on the read-ahead thread, for one reader; stopped before its file is
    closed. A piece asked for in place of the running one (:meth:`replace`) makes that one give up at its next
    step: what it reads ahead is for a view no longer coming, and every reader's pieces queued behind it wait."""

    def __init__(self) -> None:
        self.future: Future | None = None
        self.stopping = False
        self._asked = 0  # pieces asked for so far
        self._running = 0  # which of them runs (the read-ahead thread runs one at a time)

    def busy(self) -> bool:
        """Whether a piece is still running (or the reader is stopping): the next is not started then."""
        return self.stopping or (self.future is not None and not self.future.done())

    def start(self, work: Callable[..., None], *args: object) -> None:
        """Run ``work(*args)`` on the read-ahead thread unless :meth:`busy`; ``work`` returns early once
        :meth:`dropped`."""
        if not self.busy():
            self.replace(work, *args)

    def replace(self, work: Callable[..., None], *args: object) -> None:
        """Run ``work(*args)`` on the read-ahead thread after the running piece, which gives up at its next step
        (:meth:`dropped`); nothing once stopping."""
        if self.stopping:
            return
        self._asked += 1
        asked = self._asked

        def run() -> None:
            self._running = asked
            work(*args)

        self.future = _read_ahead_thread().submit(run)

    def dropped(self) -> bool:
        """Whether the running piece is to give up: the reader is stopping, or another piece was asked for."""
        return self.stopping or self._running != self._asked

    def wait(self) -> None:
        """Wait for the running piece and those asked for after it (its errors are the window's own reads' to meet
        and report)."""
        if self.future is not None:
            try:
                self.future.result()
            except Exception:  # noqa: BLE001 - the window's own reads meet a damaged chunk and say so
                pass

    def stop(self) -> None:
        """Start no more pieces, and wait for the running one."""
        self.stopping = True
        self.wait()


class Kept:
    """Pieces of a file as read (sample blocks, table chunks), the most recently used ones kept, shared with the
    read-ahead thread, each read by one thread: the window's thread asking for a piece the read-ahead thread is
    reading at that moment waits for that one read, and reads at once one it has not begun. The read-ahead thread
    runs every reader's work in turn, at a lower priority: waiting until it came to a piece queued behind other
    readers' would hold the window's frame for all of theirs."""

    def __init__(self, keep: int):
        self.keep = keep
        self._items: OrderedDict[int, np.ndarray] = OrderedDict()
        #: the pieces being read, each with what is set once it is read (or its read failed)
        self._reading: dict[int, threading.Event] = {}
        self._lock = threading.Lock()

    def __contains__(self, key: int) -> bool:
        with self._lock:
            return key in self._items

    def get(self, key: int, read: Callable[[], np.ndarray]) -> np.ndarray:
        """Piece ``key``, read by ``read()`` unless kept or being read on another thread (then that read's)."""
        while True:
            with self._lock:
                hit = self._items.get(key)
                if hit is not None:
                    self._items.move_to_end(key)
                    return hit
                other = self._reading.get(key)
                if other is None:
                    mine = self._reading[key] = threading.Event()
                    break
            other.wait()  # kept once it is set, unless that read failed: then read here, which meets the error
        return self._read(key, read, mine)

    def fill(self, key: int, read: Callable[[], np.ndarray]) -> None:
        """Read piece ``key`` ahead by ``read()``, unless it is kept or being read."""
        with self._lock:
            if key in self._items or key in self._reading:
                return
            mine = self._reading[key] = threading.Event()
        self._read(key, read, mine)

    def _read(self, key: int, read: Callable[[], np.ndarray], claim: threading.Event) -> np.ndarray:
        """``read()`` piece ``key``, which this thread has claimed (``claim``, set once done), and keep it."""
        try:
            got = read()
            with self._lock:
                self._items[key] = got
                while len(self._items) > self.keep:
                    self._items.popitem(last=False)
            return got
        finally:
            with self._lock:
                del self._reading[key]
            claim.set()


class BlockCache:
    """Packed samples and common-timeline times of a source, read in 64 Ki-sample blocks and kept (LRU, times
    apart: a search reads times only); the blocks of a view about to be read from raw samples are read ahead on a
    thread of their own (:meth:`read_ahead`)."""

    def __init__(self, source: Source, blocks: int = CACHE_BLOCKS, pyramid: Pyramid | None = None):
        self.source = source
        self.reader = SampleReader(source)
        self.block = DEFAULT_CHUNK_SAMPLES
        self._keep = blocks
        self.ahead = ReadAhead()
        self._packed = Kept(blocks)
        self._times = Kept(blocks)
        self.pyramid = pyramid

    @property
    def coarse(self) -> np.ndarray | None:
        """Times (ps) of every ``BASE_BIN``-th sample as far as the pyramid has them (None without one): narrows
        searches at once."""
        return None if self.pyramid is None else self.pyramid.level_one()[0]

    def _block(self, b: int, read: Callable[[int, int], np.ndarray]) -> Callable[[], np.ndarray]:
        """What reads block ``b`` by ``read(start, stop)``."""
        return lambda: read(b * self.block, min((b + 1) * self.block, self.source.num_samples))

    def _span(self, kept: Kept, read: Callable[[int, int], np.ndarray], start: int, stop: int) -> np.ndarray:
        parts = [kept.get(b, self._block(b, read)) for b in range(start // self.block, (stop - 1) // self.block + 1)]
        first = (start // self.block) * self.block
        joined = np.concatenate(parts) if len(parts) > 1 else parts[0]
        return joined[start - first:stop - first]

    def read_ahead(self, *windows: tuple[float, float]) -> None:
        """Read the blocks holding each window ``(t0_ps, t1_ps)`` (found in :attr:`coarse`) into the cache on the
        read-ahead thread, unless a read ahead is still running or they would crowd out half the cache: a view zoomed
        in from this one, or one a click jumps to, reads its raw samples from memory instead of inflating them in the
        window's thread."""
        coarse = self.coarse
        if coarse is None or not len(coarse) or self.ahead.busy():
            return
        wanted: dict[int, None] = {}  # the blocks in order, each once
        for t0_ps, t1_ps in windows:
            if t1_ps > coarse[-1]:
                continue
            s = max(0, (search(coarse, t0_ps, "left") - 1) * BASE_BIN)
            e = min(self.source.num_samples, (search(coarse, t1_ps, "right") + 1) * BASE_BIN)
            first, last = s // self.block, max(e - 1, s) // self.block
            if last - first >= self._keep // 2:
                return
            wanted.update(dict.fromkeys(range(first, last + 1)))
        missing = [b for b in wanted if b not in self._packed or b not in self._times]
        if missing and len(wanted) <= self._keep // 2:
            self.ahead.start(self._fill, missing)

    def _fill(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ahead.dropped():
                return
            self._packed.fill(b, self._block(b, self.reader.packed))
            self._times.fill(b, self._block(b, self.reader.times))

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Packed samples and times (ps) of samples ``[start, stop)``."""
        n = self.source.num_samples
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        if stop <= start:
            return np.zeros((0, self.source.unitsize), np.uint8), np.zeros(0, np.int64)
        return (self._span(self._packed, self.reader.packed, start, stop),
                self._span(self._times, self.reader.times, start, stop))

    def times(self, start: int, stop: int) -> np.ndarray:
        """Times (ps) of samples ``[start, stop)`` (within the source)."""
        return self._span(self._times, self.reader.times, start, stop)

    def time_of(self, i: int) -> int:
        return int(self.times(i, i + 1)[0])

    def sample_at(self, t_ps: float) -> int:
        """First sample at or after ``t_ps`` (``num_samples`` if none).

        Timing mode is arithmetic; state mode interpolates between known
        timestamps (nearly always within a block at once on a bus clock: a
        block of times read or two) and halves when a guess does not narrow.
        """
        src = self.source
        n = src.num_samples
        if n == 0:
            return 0
        if src.mode == "timing":
            return src.sample_at(int(np.ceil(t_ps)))
        lo, hi = 0, n - 1
        coarse = self.coarse
        if coarse is not None and len(coarse) and t_ps <= coarse[-1]:
            k = search(coarse, t_ps, "left")
            lo = max(0, (k - 1) * BASE_BIN)
            hi = min(n - 1, k * BASE_BIN)
            times = self.times(lo, hi + 1)
            j = search(times, t_ps, "left")
            return lo + j if j <= hi - lo else n
        t_lo, t_hi = self.time_of(lo), self.time_of(hi)
        if t_ps <= t_lo:
            return 0
        if t_ps > t_hi:
            return n
        # invariant: time(lo) < t_ps <= time(hi). A probe at the interpolated guess and one a block beyond it, on
        # the side the target is: on a bus clock the target is then bracketed within a block at once; a step
        # that does not halve the span is followed by a halving one
        halve = False
        while hi - lo > self.block:
            span = hi - lo
            guess = (lo + hi) // 2 if halve else lo + int((t_ps - t_lo) * span / max(t_hi - t_lo, 1))
            g = min(max(guess, lo + 1), hi - 1)
            t_g = self.time_of(g)
            if t_g < t_ps:
                lo, t_lo = g, t_g
                other = min(g + self.block, hi - 1)
            else:
                hi, t_hi = g, t_g
                other = max(g - self.block, lo + 1)
            if lo < other < hi:
                t_o = self.time_of(other)
                if t_o < t_ps:
                    lo, t_lo = other, t_o
                else:
                    hi, t_hi = other, t_o
            halve = hi - lo > span // 2
        return lo + search(self.times(lo, hi + 1), t_ps, "left")

    def columns(self, t0_ps: float, t1_ps: float, pixels: int) -> Columns:
        """Raw-sample columns of the window (the caller checks the window is small enough)."""
        s, e = self.sample_at(t0_ps), self.sample_at(t1_ps)
        s = max(0, s - 1)  # the sample holding at t0 starts before it
        e = min(self.source.num_samples, e + 1)
        packed, times = self.read(s, e)
        px = (t1_ps - t0_ps) / max(pixels, 1)
        end = int(times[-1]) + sample_period_ps(self.source) if len(times) else int(t1_ps)
        return columns_from(times, packed, packed, t0_ps, px, end, end)



def mapped(path: Path) -> np.ndarray:
    """The array saved at ``path`` (``.npy``) mapped read-only, as a plain ndarray over the mapping: a redraw
    takes hundreds of slices, and each slice of a ``np.memmap`` pays for the subclass's bookkeeping. The file is
    opened once and its header read by NumPy's own reader (``np.load(mmap_mode=...)`` opened it twice and built a
    ``np.memmap`` on the way: a millisecond a file, and a decoded capture's cached first view maps dozens). A ValueError
    when it is no array NumPy wrote, or shorter than its header says."""
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"{path}: .npy format version {version} is not one this reader maps")
        if dtype.hasobject:
            raise ValueError(f"{path}: holds Python objects, which cannot be mapped")
        offset = f.tell()
        view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        return np.ndarray(shape, dtype, buffer=view, offset=offset, order="F" if fortran else "C")
    except TypeError as exc:  # the buffer is shorter than the header's shape
        raise ValueError(f"{path}: {exc}") from None


class Pyramid:
    """Per-bin AND/OR of a source's packed samples at several zoom levels, read from the files :func:`build` writes.

    While the builder runs (in another process or thread) the level files are
    mapped as they are and :meth:`advance` says how far they are written:
    level 1 and every level up to :data:`BLOCK_LEVELS` are whole up to the same
    block, so a wide window reads a few bins per pixel even then; the coarser
    levels are read once the source is complete.
    """

    def __init__(self, source: Source):
        self.source = source
        self.total = source.num_samples
        self.bins = 0  # level-1 bins written, from the first
        self.done = self.total == 0
        self.sizes = level_sizes(-(-self.total // BASE_BIN))
        self.folder: Path | None = None
        self._levels: list[tuple[np.ndarray, np.ndarray, np.ndarray] | None] = []  # (t_ps, and, or), mapped
        #: the levels of a finished pyramid being mapped on the read-ahead thread (None: none)
        self.mapping: Future | None = None
        self.end_ps = 0
        self._covered = -(1 << 62)

    @property
    def complete(self) -> bool:
        return self.done

    @property
    def built(self) -> int:
        """Samples reduced, from the first."""
        return self.total if self.done else min(self.bins * BASE_BIN, self.total)

    def attach(self, folder: Path, finished: bool = False) -> None:
        """Read the levels from the files in ``folder``: mapped at once while the builder writes them (it moves
        the folder when done), else the first at once and the others on the read-ahead thread (or when first
        drawn, if sooner): mapping a level's three files takes ~1 ms, paid by the first view otherwise, or by a
        zoom's first visit to each level."""
        self._levels = [None] * len(self.sizes)
        self.folder = folder
        for k in range(1, (len(self.sizes) if finished else min(len(self.sizes), BLOCK_LEVELS)) + 1):
            if not finished or k == 1:
                self.level(k)
        self.mapping = _read_ahead_thread().submit(self._map_levels, self._levels) if finished else None

    def _map_levels(self, levels: list) -> None:
        for k in range(2, len(levels) + 1):
            if levels is not self._levels:  # attached again meanwhile: its own mapping follows
                return
            self.level(k)

    def level(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Level ``k`` (1-based): bin start times (ps), AND and OR of the packed samples in each bin."""
        found = self._levels[k - 1]
        if found is None:
            assert self.folder is not None
            found = self._levels[k - 1] = tuple(  # type: ignore[assignment]
                mapped(self.folder / f"L{k}.{part}.npy") for part in ("t", "and", "or"))
        return found  # type: ignore[return-value]

    def advance(self, bins: int, covered_ps: int) -> None:
        """The builder has written level-1 bins ``[0, bins)`` (and the levels above them): data up to
        ``covered_ps``."""
        self._covered = covered_ps
        self.bins = bins

    def finish(self, folder: Path, end_ps: int) -> None:
        """The builder is done: every level in ``folder`` is whole."""
        self.attach(folder, finished=True)
        self.end_ps = end_ps
        self.bins = self.sizes[0]
        self.done = True

    def covered_ps(self) -> int:
        """Time up to which bins exist (all of the source once complete)."""
        return self.end_ps if self.complete else self._covered

    def _usable(self, k: int) -> int:
        """Bins of level ``k`` (1-based) written whole."""
        if self.folder is None or k > len(self.sizes):
            return 0
        if self.complete:
            return self.sizes[k - 1]
        if k > BLOCK_LEVELS:
            return 0
        return min(self.sizes[k - 1], self.bins // FACTOR ** (k - 1))

    def level_one(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Level-1 bins built so far."""
        n = self._usable(1)
        if not n:
            u = self.source.unitsize
            return np.zeros(0, np.int64), np.zeros((0, u), np.uint8), np.zeros((0, u), np.uint8)
        t, a, o = self.level(1)
        return t[:n], a[:n], o[:n]

    def columns(self, t0_ps: float, t1_ps: float, pixels: int) -> Columns:
        """Columns of the window from the coarsest level whose bins are no wider than a pixel."""
        px = (t1_ps - t0_ps) / max(pixels, 1)
        covered = self.covered_ps()  # before the bins: the builder only ever adds some
        t, a, o = self.level_one()
        k = 1
        if len(t) > 1:  # the coarsest level whose mean bin is no wider than a pixel (only it is mapped)
            bin_ps = (int(t[-1]) - int(t[0])) / (len(t) - 1)
            while k < len(self.sizes) and self._usable(k + 1) > 1 and bin_ps * FACTOR ** k <= px:
                k += 1
        if k > 1:
            n = self._usable(k)
            lt, la, lo = self.level(k)
            t, a, o = lt[:n], la[:n], lo[:n]
        i0 = max(0, search(t, t0_ps, "right") - 1)
        i1 = search(t, t1_ps, "right")
        return columns_from(np.asarray(t[i0:i1]), np.asarray(a[i0:i1]), np.asarray(o[i0:i1]), t0_ps, px, covered,
                            covered)


def level_sizes(bins: int) -> list[int]:
    """Bins of level 1 (``bins``) and of every coarser level down to a few hundred."""
    sizes = [bins]
    while sizes[-1] > 512:
        sizes.append(-(-sizes[-1] // FACTOR))
    return sizes


def reduce_level(t: np.ndarray, a: np.ndarray, o: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The next coarser level: every ``FACTOR`` bins as one (the last may hold fewer)."""
    return t[::FACTOR], fold(a, FACTOR, np.bitwise_and), fold(o, FACTOR, np.bitwise_or)


# -- building ---------------------------------------------------------------------------------------------------

def yield_cores() -> None:
    """Lower the calling thread's priority by ``BUILD_NICENESS`` (Linux: a thread's nice value is its own), so that
    the overview's threads take the cores the view does not: the decoded lanes prepared beside them come as soon as
    if made alone, and the window's thread answers at once when a small capture is prepared in its process."""
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(os.getpriority(os.PRIO_PROCESS, tid) + BUILD_NICENESS, 19))
    except (AttributeError, OSError):  # no per-thread priority here: the threads share the cores evenly
        pass


def build(source: Source, folder: Path, progress: Callable[[int, int], None] | None = None,
          should_stop: Callable[[], bool] = lambda: False, threads: int = BUILD_THREADS) -> bool:
    """Write the pyramid of ``source`` into ``folder`` (``L<k>.{t,and,or}.npy``, then ``pyramid.json``), block by
    block in ``threads`` threads; ``progress(bins, covered_ps)`` after each block. False when stopped early."""
    n = source.num_samples
    sizes = level_sizes(-(-n // BASE_BIN))
    u = source.unitsize
    folder.mkdir(parents=True, exist_ok=True)
    files = [tuple(np.lib.format.open_memmap(folder / f"L{k}.{part}.npy", mode="w+", dtype=dtype,
                                             shape=(m,) if part == "t" else (m, u))
                   for part, dtype in (("t", np.int64), ("and", np.uint8), ("or", np.uint8)))
             for k, m in enumerate(sizes, 1)]
    reader = SampleReader(source, every=True)
    blocks = -(-n // (BLOCK_BINS * BASE_BIN))
    with ThreadPoolExecutor(max(threads, 1), thread_name_prefix="nicrig-overview", initializer=yield_cores) as pool:
        pending: deque[Future] = deque()
        queued = 0
        for b in range(blocks):
            while queued < blocks and len(pending) < 2 * max(threads, 1):
                pending.append(pool.submit(reader.block, queued))
                queued += 1
            level = pending.popleft().result()
            for k in range(1, min(BLOCK_LEVELS, len(sizes)) + 1):
                at = b * BLOCK_BINS // FACTOR ** (k - 1)
                for out, part in zip(files[k - 1], level):
                    out[at:at + len(part)] = part
                level = reduce_level(*level)
            if should_stop():
                for f in pending:
                    f.cancel()
                return False
            if progress is not None:
                bins = min((b + 1) * BLOCK_BINS, sizes[0])
                progress(bins, int(files[0][0][bins - 1]))
    for k in range(BLOCK_LEVELS + 1, len(sizes) + 1):
        for out, part in zip(files[k - 1], reduce_level(*files[k - 2])):
            out[:] = part
    for f in files:
        for part in f:
            part.flush()
    end_ps = int(source.times_ps(n - 1, n)[0]) + sample_period_ps(source) if n else 0
    meta = {"version": CACHE_VERSION, "samples": n, "end_ps": end_ps, "levels": sizes}
    (folder / "pyramid.json").write_text(json.dumps(meta))
    return True


# -- the cache beside the capture set ------------------------------------------------------------

def source_key(source: Source) -> str:
    """What identifies a source's samples for the cache (decoding or a session change leaves it valid)."""
    n = source.num_samples
    ends = source.times_ps(0, 1).tolist() + source.times_ps(n - 1, n).tolist() if n else []
    ident = {"v": CACHE_VERSION, "name": source.name, "n": n, "unitsize": source.unitsize,
             "channels": source.channels, "mode": source.mode, "rate": source.samplerate_hz,
             "trigger": source.trigger_sample, "offset": source.offset_ps, "ends": ends, "bin": BASE_BIN}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


def pyramid_name(source: Source) -> str:
    """The folder name of a source's pyramid in the cache."""
    return f"pyramid-{source.name}-{source_key(source)}"


def cache_paths(capture: Path) -> list[Path]:
    """Where a capture set's overviews are cached: beside it, else in the user's cache folder."""
    capture = capture.resolve()
    user = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nicrig" / "overview"
    digest = hashlib.sha256(str(capture).encode()).hexdigest()[:16]
    return [capture.with_name(f".{capture.name}.overview"), user / f"{capture.stem}-{digest}"]


def writable_cache(capture: Path) -> Path | None:
    """The first cache folder that can be written (made if need be), or None."""
    for folder in cache_paths(capture):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe = tempfile.NamedTemporaryFile(dir=folder, suffix=".partial")
            probe.close()
            return folder
        except OSError:
            continue
    return None


def finished(folder: Path) -> dict | None:
    """The metadata of a finished pyramid folder, or None (absent, being built, unreadable)."""
    try:
        meta = json.loads((folder / "pyramid.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("version") != CACHE_VERSION:
        return None
    return meta


def load_cached(capture: Path, source: Source) -> Pyramid | None:
    """The cached pyramid of ``source``, mapped (nothing is read until drawn), or None when there is none or it
    is stale or damaged."""
    name = pyramid_name(source)
    u = source.unitsize
    for root in cache_paths(capture):
        folder = root / name
        meta = finished(folder)
        if meta is None:
            continue
        p = Pyramid(source)
        # whole files, of the sizes the source's samples make (the levels are mapped when drawn)
        if meta.get("samples") != p.total or meta.get("levels") != p.sizes or any(
                not _holds(folder / f"L{k}.{part}.npy", m * (8 if part == "t" else u))
                for k, m in enumerate(p.sizes, 1) for part in ("t", "and", "or")):
            continue
        try:
            p.finish(folder, int(meta["end_ps"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        return p
    return None


def _holds(f: Path, nbytes: int) -> bool:
    """Whether ``f`` is an .npy file long enough for ``nbytes`` of data after its header."""
    try:
        return f.stat().st_size >= nbytes + 64
    except OSError:
        return False


def fill(capture: Path, source: Source, progress: Callable[[Path, int, int], None] | None = None,
         should_stop: Callable[[], bool] = lambda: False, threads: int = BUILD_THREADS) -> Path | None:
    """Build the pyramid of ``source`` into the capture set's cache (under a name of its own, moved into place
    when whole, so that readers and other builders never take a partial one); ``progress(folder, bins,
    covered_ps)`` as it grows. The finished folder, or None when stopped or nowhere is writable."""
    root = writable_cache(capture)
    if root is None:
        return None
    final = root / pyramid_name(source)
    for stale in root.glob("*.partial-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if not pid.isdigit() or not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    for old in root.glob("*.npz"):  # the format before pyramids were mapped
        old.unlink(missing_ok=True)
    work = root / f"{final.name}.partial-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    try:
        done = build(source, work, None if progress is None else lambda b, c: progress(work, b, c), should_stop,
                     threads)
        if not done:
            return None
        for old in root.glob(f"pyramid-{source.name}-*"):
            if old != final and re.fullmatch(rf"pyramid-{re.escape(source.name)}-[0-9a-f]{{24}}", old.name):
                shutil.rmtree(old, ignore_errors=True)
        try:
            os.rename(work, final)
        except OSError:  # another builder finished first: its pyramid is the same
            if finished(final) is None:
                raise
        return final
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
