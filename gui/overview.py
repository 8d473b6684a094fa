"""Fast views of deep sources: a block cache of samples and times, and a per-source min/max pyramid.

A logic lane is drawn as *columns*: for each pixel of the view, the AND and
the OR of the packed samples falling in it. Per channel bit, AND = OR means the
level held through the pixel; AND != OR means it changed there, which the lane
draws as one transition mark (so never more than one per pixel). The columns
come from raw samples when the window holds few samples, and otherwise from a
pyramid of bins (level 1: AND/OR of every ``BASE_BIN`` samples, each next level
``FACTOR`` bins of the one below), built lazily in the background one block at
a time and cached beside the capture set, so a 100 M-sample source is never
loaded whole and a second opening costs nothing.

Times here are picoseconds on the capture set's common timeline (``Source.times_ps``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from nicrig.acquisition.capture import DEFAULT_CHUNK_SAMPLES, Source

#: Samples per level-1 bin, and bins of a level per bin of the next.
BASE_BIN = 64
FACTOR = 8
#: Read raw samples while a window holds at most this many samples per pixel.
RAW_SAMPLES_PER_PIXEL = BASE_BIN
#: Until the pyramid is complete, read raw samples for windows of up to this many samples (the block cache
#: holds them), so lanes are drawn whole while it builds; only wider windows wait for it.
RAW_SAMPLES_WHILE_BUILDING = 1 << 21
#: Blocks the cache keeps per source (64 Ki samples each).
CACHE_BLOCKS = 48
#: Samples the pyramid builder reads per step (short, so the GUI thread's reads wait little).
BUILD_STEP = 1 << 18
CACHE_VERSION = 1


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


def bin_reduce(packed: np.ndarray, times_ps: np.ndarray, bin_samples: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """AND, OR and first time of every ``bin_samples`` consecutive samples (the last bin may be short)."""
    n = len(packed)
    starts = np.arange(0, n, bin_samples)
    if n == 0:
        return packed[:0], packed[:0], times_ps[:0]
    return (np.bitwise_and.reduceat(packed, starts, axis=0), np.bitwise_or.reduceat(packed, starts, axis=0),
            times_ps[starts])


def columns_from(t_ps: np.ndarray, and_: np.ndarray, or_: np.ndarray, t0_ps: float, px_ps: float,
                 end_ps: int, covered_ps: int) -> Columns:
    """Group consecutive items (samples or bins, sorted by time) by the pixel their start falls in."""
    if len(t_ps) == 0:
        return Columns(t_ps, and_, or_, end_ps, covered_ps)
    pixel = np.floor((t_ps - t0_ps) / px_ps).astype(np.int64)
    starts = np.flatnonzero(np.diff(pixel, prepend=pixel[0] - 1))
    return Columns(t_ps[starts], np.bitwise_and.reduceat(and_, starts, axis=0),
                   np.bitwise_or.reduceat(or_, starts, axis=0), end_ps, covered_ps)


def channel_states(cols: Columns, bit: int) -> np.ndarray:
    """Per column: 0 or 1 when channel ``bit`` held that level, 2 when it changed within the column."""
    lo = (cols.and_[:, bit // 8] >> (bit % 8)) & 1
    hi = (cols.or_[:, bit // 8] >> (bit % 8)) & 1
    return np.where(lo == hi, lo, 2).astype(np.int8)


def runs(states: np.ndarray, t_ps: np.ndarray, end_ps: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge equal consecutive states: (start ps, end ps, state) of each run."""
    if len(states) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int8)
    starts = np.flatnonzero(np.diff(states, prepend=states[0] - 1))
    t = t_ps[starts]
    return t, np.append(t[1:], end_ps), states[starts]


def sample_period_ps(source: Source) -> int:
    """How long the last sample lasts (ps): the sample period, or the nominal clock's in state mode."""
    return round(1e12 / source.samplerate_hz) if source.samplerate_hz else 1


class BlockCache:
    """Packed samples and common-timeline times of a source, read in 64 Ki-sample blocks and kept (LRU)."""

    def __init__(self, source: Source, blocks: int = CACHE_BLOCKS):
        self.source = source
        self.block = DEFAULT_CHUNK_SAMPLES
        self._keep = blocks
        self._blocks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        #: times (ps) of every BASE_BIN-th sample, when a finished pyramid offers them: narrows searches at once
        self.coarse: np.ndarray | None = None

    def _get(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        hit = self._blocks.get(b)
        if hit is not None:
            self._blocks.move_to_end(b)
            return hit
        s, e = b * self.block, min((b + 1) * self.block, self.source.num_samples)
        got = (self.source.read_packed(s, e), self.source.times_ps(s, e))
        self._blocks[b] = got
        while len(self._blocks) > self._keep:
            self._blocks.popitem(last=False)
        return got

    def read(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Packed samples and times (ps) of samples ``[start, stop)``."""
        n = self.source.num_samples
        start, stop = max(0, min(start, n)), max(0, min(stop, n))
        if stop <= start:
            return np.zeros((0, self.source.unitsize), np.uint8), np.zeros(0, np.int64)
        parts = [self._get(b) for b in range(start // self.block, (stop - 1) // self.block + 1)]
        first = (start // self.block) * self.block
        packed = np.concatenate([p for p, _ in parts]) if len(parts) > 1 else parts[0][0]
        times = np.concatenate([t for _, t in parts]) if len(parts) > 1 else parts[0][1]
        return packed[start - first:stop - first], times[start - first:stop - first]

    def time_of(self, i: int) -> int:
        return int(self.read(i, i + 1)[1][0])

    def sample_at(self, t_ps: float) -> int:
        """First sample at or after ``t_ps`` (``num_samples`` if none).

        Timing mode is arithmetic; state mode interpolates between known
        timestamps (one block read per step, nearly always exact at once on a
        bus clock) and falls back to halving when the guess does not narrow.
        """
        src = self.source
        n = src.num_samples
        if n == 0:
            return 0
        if src.mode == "timing":
            return src.sample_at(int(np.ceil(t_ps)))
        lo, hi = 0, n - 1
        if self.coarse is not None and len(self.coarse):
            k = int(np.searchsorted(self.coarse, t_ps, side="left"))
            lo = max(0, (k - 1) * BASE_BIN)
            hi = min(n - 1, k * BASE_BIN)
            _, times = self.read(lo, hi + 1)
            j = int(np.searchsorted(times, t_ps, side="left"))
            return lo + j if j <= hi - lo else n
        t_lo, t_hi = self.time_of(lo), self.time_of(hi)
        if t_ps <= t_lo:
            return 0
        if t_ps > t_hi:
            return n
        # invariant: time(lo) < t_ps <= time(hi)
        while hi - lo > 1:
            guess = lo + int((t_ps - t_lo) * (hi - lo) / max(t_hi - t_lo, 1))
            mid = min(max(guess, lo + 1), hi - 1)
            if hi - lo > 64 and (mid - lo < (hi - lo) // 64 or hi - mid < (hi - lo) // 64):
                mid = (lo + hi) // 2 if abs(mid - (lo + hi) // 2) > (hi - lo) // 4 else mid
            t_mid = self.time_of(mid)
            if t_mid < t_ps:
                lo, t_lo = mid, t_mid
            else:
                hi, t_hi = mid, t_mid
            if hi - lo <= self.block:
                _, times = self.read(lo, hi + 1)
                return lo + int(np.searchsorted(times, t_ps, side="left"))
        return hi

    def columns(self, t0_ps: float, t1_ps: float, pixels: int) -> Columns:
        """Raw-sample columns of the window (the caller checks the window is small enough)."""
        s, e = self.sample_at(t0_ps), self.sample_at(t1_ps)
        s = max(0, s - 1)  # the sample holding at t0 starts before it
        e = min(self.source.num_samples, e + 1)
        packed, times = self.read(s, e)
        px = (t1_ps - t0_ps) / max(pixels, 1)
        end = int(times[-1]) + sample_period_ps(self.source) if len(times) else int(t1_ps)
        return columns_from(times, packed, packed, t0_ps, px, end, end)



class Pyramid:
    """Per-bin AND/OR of a source's packed samples at several zoom levels, built block by block."""

    def __init__(self, source: Source):
        self.source = source
        self.total = source.num_samples
        self.built = 0
        # Level-1 bins as (t_ps, and, or) per step. The builder thread appends one tuple at a time and sets
        # ``built`` last, so a reader (the GUI thread) always sees whole steps and a complete pyramid's levels.
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.levels: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # finished: (t_ps, and, or) per level
        self.end_ps = 0

    @property
    def complete(self) -> bool:
        return self.built >= self.total

    def covered_ps(self) -> int:
        """Time up to which bins exist (all of the source once complete)."""
        if self.complete:
            return self.end_ps
        parts = self._parts
        return int(parts[-1][0][-1]) if parts and len(parts[-1][0]) else -(1 << 62)

    def step(self, cache: BlockCache | None = None) -> bool:
        """Reduce the next ``BUILD_STEP`` samples into level-1 bins; True while more remain."""
        if self.complete:
            return False
        s, e = self.built, min(self.total, self.built + BUILD_STEP)
        if cache is None:
            packed, times = self.source.read_packed(s, e), self.source.times_ps(s, e)
        else:
            packed, times = cache.read(s, e)
        a, o, t = bin_reduce(packed, times, BASE_BIN)
        self._parts.append((t, a, o))
        if e >= self.total:
            self.end_ps = int(times[-1]) + sample_period_ps(self.source)
            self.set_level_one(*self._joined())
        self.built = e
        return not self.complete

    def _joined(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        parts = list(self._parts)
        if not parts:
            u = self.source.unitsize
            return np.zeros(0, np.int64), np.zeros((0, u), np.uint8), np.zeros((0, u), np.uint8)
        return (np.concatenate([t for t, _, _ in parts]), np.concatenate([a for _, a, _ in parts]),
                np.concatenate([o for _, _, o in parts]))

    def set_level_one(self, t: np.ndarray, a: np.ndarray, o: np.ndarray) -> None:
        """The whole source's level-1 bins (built or from the cache): every coarser level follows."""
        self._parts = [(t, a, o)]
        self.levels = build_levels(t, a, o)

    def level_one(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Level-1 bins built so far."""
        return self.levels[0] if self.levels else self._joined()

    def columns(self, t0_ps: float, t1_ps: float, pixels: int) -> Columns:
        """Columns of the window from the coarsest level whose bins are no wider than a pixel."""
        px = (t1_ps - t0_ps) / max(pixels, 1)
        covered = self.covered_ps()  # before the bins: the builder thread only ever adds some
        t, a, o = self.level_one()
        for lt, la, lo in self.levels[1:]:
            if len(lt) < 2:
                break
            bin_ps = (int(lt[-1]) - int(lt[0])) / (len(lt) - 1)
            if bin_ps > px:
                break
            t, a, o = lt, la, lo
        i0 = max(0, int(np.searchsorted(t, t0_ps, side="right")) - 1)
        i1 = int(np.searchsorted(t, t1_ps, side="right"))
        return columns_from(t[i0:i1], a[i0:i1], o[i0:i1], t0_ps, px, covered, covered)


def build_levels(t: np.ndarray, a: np.ndarray, o: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Level 1 and every coarser level down to a few hundred bins."""
    levels = [(t, a, o)]
    while len(levels[-1][0]) > 512:
        lt, la, lo = levels[-1]
        starts = np.arange(0, len(lt), FACTOR)
        levels.append((lt[starts], np.bitwise_and.reduceat(la, starts, axis=0),
                       np.bitwise_or.reduceat(lo, starts, axis=0)))
    return levels


# -- the cache beside the capture set ------------------------------------------------------------

def source_key(source: Source) -> str:
    """What identifies a source's samples for the cache (decoding or a session change leaves it valid)."""
    n = source.num_samples
    ends = source.times_ps(0, 1).tolist() + source.times_ps(n - 1, n).tolist() if n else []
    ident = {"v": CACHE_VERSION, "name": source.name, "n": n, "unitsize": source.unitsize,
             "channels": source.channels, "mode": source.mode, "rate": source.samplerate_hz,
             "trigger": source.trigger_sample, "offset": source.offset_ps, "ends": ends, "bin": BASE_BIN}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:24]


def cache_paths(capture: Path) -> list[Path]:
    """Where a capture set's pyramids are cached: beside it, else in the user's cache folder."""
    capture = capture.resolve()
    user = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "nicrig" / "overview"
    digest = hashlib.sha256(str(capture).encode()).hexdigest()[:16]
    return [capture.with_name(f".{capture.name}.overview"), user / f"{capture.stem}-{digest}"]


def load_cached(capture: Path, source: Source) -> Pyramid | None:
    """The cached pyramid of ``source``, or None when there is none or it is stale or unreadable."""
    key = source_key(source)
    for folder in cache_paths(capture):
        f = folder / f"{source.name}-{key}.npz"
        if not f.is_file():
            continue
        try:
            with np.load(f) as z:
                t, a, o = z["t"], z["and_"], z["or_"]
                end = int(z["end_ps"])
        except (OSError, ValueError, KeyError):
            continue
        if a.shape != o.shape or len(a) != len(t) or (a.ndim == 2 and a.shape[1] != source.unitsize):
            continue
        p = Pyramid(source)
        p.end_ps = end
        p.set_level_one(t, a, o)
        p.built = p.total
        return p
    return None


def save_cached(capture: Path, pyramid: Pyramid) -> Path | None:
    """Store a complete pyramid beside the capture set (or in the user cache); None when nowhere is writable."""
    t, a, o = pyramid.level_one()
    key = source_key(pyramid.source)
    for folder in cache_paths(capture):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob(f"{pyramid.source.name}-*.npz"):
                old.unlink()
            fd, tmp = tempfile.mkstemp(dir=folder, suffix=".partial")
            with os.fdopen(fd, "wb") as out:
                np.savez(out, t=t, and_=a, or_=o, end_ps=np.int64(pyramid.end_ps))
            final = folder / f"{pyramid.source.name}-{key}.npz"
            os.replace(tmp, final)
            return final
        except OSError:
            continue
    return None


def fill(capture: Path, pyramid: Pyramid, should_stop: Callable[[], bool] = lambda: False,
         progress: Callable[[int, int], None] | None = None) -> bool:
    """Build ``pyramid`` step by step (readers may use it meanwhile) and cache it; False when stopped early."""
    while pyramid.step():
        if progress:
            progress(pyramid.built, pyramid.total)
        if should_stop():
            return False
    if progress:
        progress(pyramid.built, pyramid.total)
    save_cached(capture, pyramid)
    return True
