"""Lanes of the timeline and what each draws for a window: logic levels, vector values, decoded boxes.

No Qt here: a lane turns a window of the common timeline (ns, zero at the
trigger, after the session's per-source deskew) and a width in pixels into
arrays the timeline paints. Logic lanes give runs of level 0, 1 or "changing"
(at most one transition mark per pixel, see ``overview``); decoded lanes give
boxes with labels from long to short (the painter takes the longest that fits)
and, where boxes are narrower than two pixels, merged dense spans.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np
from nicrig.analysis.hostprobe import NET_RX, RECEIVE_CALLS, SEND_CALLS
from nicrig.decoders.tables import address_known
from nicrig.gui.overview import (
    RAW_SAMPLES_PER_PIXEL,
    RAW_SAMPLES_WHILE_BUILDING,
    READ_AHEAD_SAMPLES_PER_PIXEL,
    BlockCache,
    Columns,
    Pyramid,
    channel_states,
    runs,
    sample_period_ps,
)

if TYPE_CHECKING:
    from nicrig.acquisition.hostprobe.events import HostTrace

#: Box styles: name -> (fill colour, text colour). Warnings have their own colour everywhere.
STYLES: dict[str, tuple[str, str]] = {
    "csr": ("#3b6fd8", "#ffffff"),
    "dma": ("#2e9e5b", "#ffffff"),
    "msi": ("#8a4fd0", "#ffffff"),
    "config": ("#7a7a7a", "#ffffff"),
    "unknown": ("#9aa3ad", "#000000"),
    "frame": ("#15939b", "#ffffff"),
    "pause": ("#e08a1e", "#000000"),
    "interrupt": ("#c2357b", "#ffffff"),
    "activity": ("#5f8fa3", "#ffffff"),
    "value": ("#d9e3ee", "#000000"),
    "phase": ("#f2d24b", "#000000"),
    "warning": ("#d62728", "#ffffff"),
    "hardirq": ("#c2357b", "#ffffff"),
    "softirq": ("#e0a32e", "#000000"),
    "napi": ("#2e9e5b", "#ffffff"),
    "syscall": ("#3b6fd8", "#ffffff"),
    "packet": ("#15939b", "#ffffff"),
}
STYLE_NAMES = list(STYLES)
BAD_TERMINATIONS = (b"retry", b"target_abort", b"master_abort", b"disconnect_without_data")

LaneKind = Literal["header", "logic", "vector", "decoded"]
#: Rows per block of a lane's index of its longest boxes (``Boxes.widest``).
WIDE_BLOCK = 256
#: Rows in view per pixel beyond which a decoded lane is drawn from searches, not from every row in view.
CROWDED_ROWS_PER_PIXEL = 2
#: Buckets of a lane's start index (``Boxes.starts_index``) per pixel at least, for a view to use it (a pixel's edge
#: is then placed within 1/32 of a pixel of its time).
BUCKETS_PER_PIXEL = 16
#: Edges of a level of a lane's start index at most, for it to be made and kept (``edge_level``): a view's
#: ~1,600 pixel edges cost as much to gather from the lane's rows as ~50,000 edges to make.
KEPT_LEVEL_EDGES = 1 << 16
#: Labels (and their widths) kept between redraws, per lane and per font.
KEPT_LABELS = 20_000
#: Rows of a lane whose descriptions the event search makes when it needs them (more wait for the preparer's).
SEARCHED_HERE = 20_000

K = TypeVar("K")
V = TypeVar("V")


def kept(cache: dict[K, V], key: K, make: Callable[[], V]) -> V:
    """``cache[key]``, made by ``make()`` the first time; the cache is emptied once it holds more than
    :data:`KEPT_LABELS` entries, so a long session's labels and layouts never grow without bound."""
    found = cache.get(key)
    if found is None:
        if len(cache) > KEPT_LABELS:
            cache.clear()
        found = cache[key] = make()
    return found


@dataclass
class Boxes:
    """Events of one decoded lane on the common timeline (ns, before deskew), sorted by start."""

    t_ns: np.ndarray
    t_end_ns: np.ndarray
    style: np.ndarray  # index into STYLE_NAMES
    labeller: Callable[[int], list[str]]
    category: np.ndarray = field(default_factory=lambda: np.zeros(0, "S12"))  # event table kind of each row
    _reach: np.ndarray | None = None
    _widest: np.ndarray | None = None
    _starts: np.ndarray | None = None
    _levels: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: each row's description (its longest label), lower-cased, for the event search (None: not made yet)
    text: np.ndarray | None = None
    _labels: dict[int, list[str]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.t_ns)

    def search_text(self) -> np.ndarray | None:
        """:attr:`text`, made here for a lane of up to ``SEARCHED_HERE`` rows (a decoded table's is prepared in
        the background: None until then)."""
        if self.text is None and len(self) <= SEARCHED_HERE:
            self.text = np.array([self.labels(i)[0].lower().encode() for i in range(len(self))] or [b""],
                                 dtype="S")[:len(self)]
        return self.text

    def labels(self, i: int) -> list[str]:
        """Row ``i``'s labels, longest first (kept: a redraw asks again for the boxes in view)."""
        i = int(i)
        return kept(self._labels, i, lambda: self.labeller(i))

    def _index(self) -> None:
        self._reach, self._widest, self._starts = box_index(self.t_ns, self.t_end_ns)

    def reach(self) -> np.ndarray:
        """Running maximum of the end times: rows ending after T start at or after searchsorted(reach, T)."""
        if self._reach is None:
            self._index()
        return self._reach

    def widest(self) -> np.ndarray:
        """The longest box (ns) of each ``WIDE_BLOCK`` rows: where boxes wide enough to draw alone may be."""
        if self._widest is None:
            self._index()
        return self._widest

    def starts_index(self) -> np.ndarray:
        """The first row starting at or after each bucket edge (:func:`starts_index`)."""
        if self._starts is None:
            self._index()
        return self._starts

    def edge_rows(self, times: np.ndarray, px: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For each of ``times`` (ns, sorted, ``px`` apart): the first row starting at or after it, and the style
        and end time (ns) of the row before that one (row 0's where there is none).

        Looked up in the start index when its buckets are at most 1/``BUCKETS_PER_PIXEL`` of ``px`` (each time
        taken to its nearest bucket edge, of the coarsest such level), else searched among the starts (a search
        costs ~20 reads of the starts, far apart)."""
        index = self.starts_index()
        base = float(index[0])
        if not len(self) or base * BUCKETS_PER_PIXEL > px:
            k = np.searchsorted(self.t_ns, times, side="left")
            if not len(self):
                return k, np.zeros(len(k), np.int8), np.full(len(k), -np.inf)
            return with_rows_before(k, self.style, self.t_end_ns)
        level = int(np.floor(np.log2(px / (base * BUCKETS_PER_PIXEL))))
        bucket = base * (1 << level)
        kept_level = self._levels.get(level)
        if kept_level is None and -(-len(index) >> level) <= KEPT_LEVEL_EDGES:
            kept_level = self._levels[level] = edge_level(index, level, self.style, self.t_end_ns)
        j = np.rint((times - self.t_ns[0]) / bucket)
        if kept_level is not None:
            k_at, style_at, end_at = kept_level
            j = np.clip(j, 0, len(k_at) - 1).astype(np.int64)
            return k_at[j], style_at[j], end_at[j]
        # a level too large to make at a first visit (it would cost more than the gathers it saves)
        return with_rows_before(index[1:][np.clip(j * (1 << level), 0, len(index) - 2).astype(np.int64)],
                                self.style, self.t_end_ns)

    def visible(self, t0_ns: float, t1_ns: float) -> tuple[int, int]:
        """Row range that may overlap ``[t0_ns, t1_ns]``."""
        return int(np.searchsorted(self.reach(), t0_ns, side="left")), int(np.searchsorted(self.t_ns, t1_ns, "right"))

    def at(self, t_ns: float) -> int | None:
        """The last row covering ``t_ns``, or None."""
        i0, i1 = self.visible(t_ns, t_ns)
        while i1 > i0:  # backwards a block at a time: the row is nearly always in the first
            a = max(i0, i1 - WIDE_BLOCK)
            hit = np.flatnonzero((self.t_ns[a:i1] <= t_ns) & (self.t_end_ns[a:i1] >= t_ns))
            if len(hit):
                return a + int(hit[-1])
            i1 = a
        return None


def box_index(t_ns: np.ndarray, t_end_ns: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A lane's search arrays: the running maximum of its end times, its longest box per ``WIDE_BLOCK`` rows (ns)
    and its start index (:func:`starts_index`)."""
    if not len(t_ns):
        return np.asarray(t_end_ns, np.float64), np.zeros(0), starts_index(t_ns)
    reach = np.maximum.accumulate(t_end_ns)
    widest = np.maximum.reduceat(np.asarray(t_end_ns) - np.asarray(t_ns), np.arange(0, len(t_ns), WIDE_BLOCK))
    return reach, widest, starts_index(t_ns)


def starts_index(t_ns: np.ndarray) -> np.ndarray:
    """A lane's start index: its bucket width B (ns, the power of two making about as many buckets as rows),
    then the first row starting at or after ``t_ns[0] + j * B`` for every j up to the first edge past the last
    start (so the last entry is the number of rows). A wide view's pixel edges are looked up here instead of
    searched among the starts (:meth:`Boxes.edge_rows`)."""
    n = len(t_ns)
    if not n:
        return np.ones(1, np.int64)
    span = float(t_ns[-1]) - float(t_ns[0])
    bucket = int(2 ** np.ceil(np.log2(max(span / n, 1.0))))
    edges = float(t_ns[0]) + bucket * np.arange(int(span // bucket) + 2, dtype=np.float64)
    return np.concatenate(([bucket], np.searchsorted(t_ns, edges, side="left")))


def edge_level(index: np.ndarray, level: int, style: np.ndarray, t_end_ns: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Level ``level`` of a lane's start index (:func:`starts_index`: buckets 2**level times as wide): the first
    row at or after each bucket edge, and the style and end time (ns) of the row before each (row 0's where there
    is none), side by side: a wide view reads ~``BUCKETS_PER_PIXEL`` entries a pixel of these instead of gathering
    from the lane's every row."""
    return with_rows_before(np.concatenate((index[1::1 << level], [int(index[-1])])), style, t_end_ns)


def with_rows_before(k: np.ndarray, style: np.ndarray, t_end_ns: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``k`` of a lane, and the style and end time (ns) of the row before each (row 0's where there is
    none)."""
    before = np.maximum(k - 1, 0)
    return k, style[before], np.asarray(t_end_ns[before], np.float64)


@dataclass
class BoxDrawing:
    """Boxes wide enough to draw one by one (with labels), and dense spans (ns) where they crowd."""

    rows: np.ndarray
    x0: np.ndarray
    x1: np.ndarray
    style: np.ndarray
    dense_x0: np.ndarray
    dense_x1: np.ndarray
    dense_style: np.ndarray


@dataclass
class LogicDrawing:
    """Runs of a level: start and end (ns, view time) and state 0, 1 or 2 (changing within a pixel)."""

    x0: np.ndarray
    x1: np.ndarray
    state: np.ndarray
    covered_x: float  # beyond this the overview is still being built


def box_drawing(boxes: Boxes, t0_ns: float, t1_ns: float, pixels: int, shift_ns: float,
                min_px: float = 3.0) -> BoxDrawing:
    """What to draw of ``boxes`` (moved by ``shift_ns``) in the view ``[t0_ns, t1_ns]``.

    Boxes at least ``min_px`` pixels wide are drawn one by one; narrower ones as dense spans, each pixel column
    they touch taking the style of the last one there, and runs of columns of one style one block, so a crowded
    lane costs at most a rectangle per pixel. Where more rows are in view than ``CROWDED_ROWS_PER_PIXEL`` per
    pixel, the columns are found by searching the pixels' edges among the starts and the wide boxes among the
    blocks whose longest box is wide enough: the work grows with the pixels, not with the rows in view.
    """
    i0, i1 = boxes.visible(t0_ns - shift_ns, t1_ns - shift_ns)
    px = (t1_ns - t0_ns) / max(pixels, 1)
    if i1 - i0 > CROWDED_ROWS_PER_PIXEL * max(pixels, 1):
        return _crowded_drawing(boxes, i0, i1, t0_ns, px, pixels, shift_ns, min_px)
    rows = np.arange(i0, i1)
    x0 = boxes.t_ns[i0:i1] + shift_ns
    x1 = boxes.t_end_ns[i0:i1] + shift_ns
    keep = x1 >= t0_ns
    rows, x0, x1 = rows[keep], x0[keep], x1[keep]
    wide = (x1 - x0) >= min_px * px
    narrow = ~wide
    if not narrow.any():  # zoomed in: every box drawn alone
        nothing = np.zeros(0)
        return BoxDrawing(rows, x0, x1, boxes.style[rows], nothing, nothing, np.zeros(0, np.int8))
    # narrow boxes: each pixel column they touch takes the style of the last one there
    cols = np.full(pixels + 2, -1, dtype=np.int16)
    first = np.clip(np.floor((x0[narrow] - t0_ns) / px), -1, pixels).astype(np.int64) + 1
    last = np.clip(np.floor((x1[narrow] - t0_ns) / px), -1, pixels).astype(np.int64) + 1
    style = boxes.style[rows[narrow]]
    cols[first] = style
    cols[last] = style
    return BoxDrawing(rows[wide], x0[wide], x1[wide], boxes.style[rows[wide]], *_dense_runs(cols, t0_ns, px))


def _dense_runs(cols: np.ndarray, t0_ns: float, px: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Runs of pixel columns of one style (``cols[1 + c]`` for pixel ``c``, -1 none) as dense spans (ns)."""
    change = np.empty(len(cols), bool)
    change[0] = True
    np.not_equal(cols[1:], cols[:-1], out=change[1:])
    starts = np.flatnonzero(change)
    ends = np.concatenate((starts[1:] - 1, [len(cols) - 1]))
    style = cols[starts]
    drawn = style >= 0
    return t0_ns + (starts[drawn] - 1) * px, t0_ns + ends[drawn] * px, style[drawn].astype(np.int8)


def _crowded_drawing(boxes: Boxes, i0: int, i1: int, t0_ns: float, px: float, pixels: int, shift_ns: float,
                     min_px: float) -> BoxDrawing:
    """:func:`box_drawing` of a lane with many rows per pixel in view."""
    edges = (t0_ns - shift_ns) + np.arange(-1, pixels + 2) * px  # file time; pixel c spans edges[c + 1 : c + 2]
    k, style_before, end_before = boxes.edge_rows(edges, px)
    starts_in = k[1:] > k[:-1]  # a column takes the style of the last row starting in it
    # else of the last row starting before it, when that one reaches into it
    reaches = ~starts_in & (k[:-1] > 0) & (end_before[:-1] >= edges[:-1])
    cols = np.where(starts_in, style_before[1:], -1).astype(np.int16)
    cols[reaches] = style_before[:-1][reaches]
    cols[0] = cols[-1] = -1  # the column before the view and the one after it are not drawn
    threshold = min_px * px
    blocks = np.flatnonzero(boxes.widest()[i0 // WIDE_BLOCK:(i1 - 1) // WIDE_BLOCK + 1] >= threshold)
    rows = ((blocks + i0 // WIDE_BLOCK)[:, None] * WIDE_BLOCK + np.arange(WIDE_BLOCK)).ravel()
    rows = rows[(rows >= i0) & (rows < i1)]
    x0 = boxes.t_ns[rows] + shift_ns
    x1 = boxes.t_end_ns[rows] + shift_ns
    wide = ((x1 - x0) >= threshold) & (x1 >= t0_ns)
    rows, x0, x1 = rows[wide], x0[wide], x1[wide]
    return BoxDrawing(rows, x0, x1, boxes.style[rows], *_dense_runs(cols, t0_ns, px))


def vector_changes(cols: Columns, bits: list[int]) -> Columns:
    """Columns of one pseudo-channel (bit 0): held high, changing wherever any bit of the vector changes."""
    changing = np.zeros(len(cols), dtype=bool)
    for bit in bits:
        changing |= channel_states(cols, bit) == 2
    lo = np.where(changing, 0, 1).astype(np.uint8)[:, None]
    return Columns(cols.t_ps, lo, np.ones_like(lo), cols.end_ps, cols.covered_ps)


def logic_drawings(cols: Columns, bits: list[int], shift_ns: float) -> list[LogicDrawing]:
    """Runs of channels ``bits`` from columns (ps, file time) in view time (ns), one drawing per channel."""
    s, e, st, counts = runs(cols, bits)
    x0, x1 = s / 1000.0 + shift_ns, e / 1000.0 + shift_ns
    covered = cols.covered_ps / 1000.0 + shift_ns
    ends = np.cumsum(counts)
    return [LogicDrawing(x0[a:b], x1[a:b], st[a:b], covered) for a, b in zip(ends - counts, ends)]


class SourceData:
    """Reading side of one source: block cache, pyramid (built elsewhere), columns of the current view."""

    def __init__(self, source, pyramid: Pyramid | None = None):
        self.source = source
        self.pyramid = pyramid or Pyramid(source)
        self.cache = BlockCache(source, pyramid=self.pyramid)
        self._last: tuple[tuple[float, float, int], Columns] | None = None
        self._values: dict[float, np.ndarray | None] = {}
        n = source.num_samples
        self.first_ps = int(self.cache.read(0, 1)[1][0]) if n else 0
        self.end_ps = int(self.cache.read(n - 1, n)[1][0]) if n else 0

    def columns(self, t0_ps: float, t1_ps: float, pixels: int) -> Columns:
        """Columns of the window, from raw samples when few enough, else from the pyramid.

        While the pyramid builds, a window it does not cover yet is read from raw samples when it holds at most
        ``RAW_SAMPLES_WHILE_BUILDING`` of them; the result is kept per view and per state of the pyramid, so the
        lane is drawn anew as the pyramid grows and once it is complete.
        """
        p = self.pyramid
        n = self.estimated_samples(t0_ps, t1_ps)
        raw = n <= RAW_SAMPLES_PER_PIXEL * max(pixels, 1) or (
            not p.complete and p.covered_ps() < t1_ps and n <= RAW_SAMPLES_WHILE_BUILDING)
        key = (t0_ps, t1_ps, pixels, -1 if raw else p.bins, p.complete)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        if raw:
            cols = self.cache.columns(t0_ps, t1_ps, pixels)
        else:
            # still building and too wide for raw samples: its columns stop at covered_ps, the rest is pending
            cols = p.columns(t0_ps, t1_ps, pixels)
            if n <= READ_AHEAD_SAMPLES_PER_PIXEL * max(pixels, 1):
                self.cache.read_ahead((t0_ps, t1_ps))
        self._last = (key, cols)
        return cols

    def read_ahead(self, windows: list[tuple[float, float]], pixels: int) -> None:
        """Read ahead, on the read-ahead thread, the raw samples of those windows ``(t0_ps, t1_ps)`` that
        :meth:`columns` would draw from raw samples at ``pixels`` wide (views about to be shown)."""
        raw = [w for w in windows if self.estimated_samples(*w) <= RAW_SAMPLES_PER_PIXEL * max(pixels, 1)]
        if raw:
            self.cache.read_ahead(*raw)

    def settled(self) -> bool:
        """Whether the columns last given are the ones the view keeps: read from raw samples, or from a pyramid
        that covers their window (one still being built gives more of a window it does not cover as it grows)."""
        if self._last is None:
            return True
        (_, t1_ps, _, bins, complete), cols = self._last
        return bins == -1 or complete or cols.covered_ps >= t1_ps

    def estimated_samples(self, t0_ps: float, t1_ps: float) -> int:
        """Samples in a window: exact in timing mode, from the source's mean rate in state mode."""
        src = self.source
        n = src.num_samples
        if n < 2:
            return n
        dur = max(self.end_ps - self.first_ps, 1)
        return int((t1_ps - t0_ps) * (n - 1) / dur) + 1

    def value_at(self, t_ps: float) -> np.ndarray | None:
        """The packed sample holding at ``t_ps`` (the last at or before it), or None outside the source (the
        source's lanes at the two cursors ask for the same two samples: kept)."""
        found = self._values.get(t_ps, self)
        if found is not self:
            return found
        if len(self._values) >= 4:
            self._values.clear()
        self._values[t_ps] = found = self._value_at(t_ps)
        return found

    def _value_at(self, t_ps: float) -> np.ndarray | None:
        i = self.cache.sample_at(t_ps)
        if i < self.source.num_samples and self.cache.time_of(i) == int(np.ceil(t_ps)):
            return self.cache.read(i, i + 1)[0][0]
        if i == 0:
            return None
        return self.cache.read(i - 1, i)[0][0]


def vector_boxes(data: SourceData, bits: list[int], t0_ps: float, t1_ps: float) -> Boxes:
    """Value segments of a vector in a window of raw samples (the caller checks it is small enough)."""
    s = max(0, data.cache.sample_at(t0_ps) - 1)
    e = min(data.source.num_samples, data.cache.sample_at(t1_ps) + 1)
    packed, times = data.cache.read(s, e)
    values = np.zeros(len(packed), dtype=np.uint64)
    for weight, bit in enumerate(bits):
        values |= ((packed[:, bit // 8] >> (bit % 8)) & 1).astype(np.uint64) << np.uint64(weight)
    if not len(values):
        return Boxes(np.zeros(0), np.zeros(0), np.zeros(0, np.int8), lambda i: [])
    starts = np.flatnonzero(np.diff(values, prepend=values[0] ^ np.uint64(1)))
    t = times[starts] / 1000.0
    t_end = np.append(t[1:], (times[-1] + sample_period_ps(data.source)) / 1000.0)
    vals = values[starts]
    width = (len(bits) + 3) // 4

    def labels(i: int) -> list[str]:
        v = int(vals[i])
        return [f"0x{v:0{width}x}", f"{v:x}"]

    return Boxes(t, t_end, np.full(len(t), STYLE_NAMES.index("value"), np.int8), labels)


@dataclass
class Lane:
    """One row of the timeline."""

    id: str
    source: str
    title: str
    kind: LaneKind
    bit: int = -1  # logic
    bits: list[int] = field(default_factory=list)  # vector
    boxes: Boxes | None = None  # decoded
    height: float = 1.0
    group: str = ""
    #: measured phases: boxes alternate between two rows, and a label that does not fit in its box is
    #: written beside it (Hughes-Jones et al.'s (2003) annotated traces), as far as the next box of that row
    callouts: bool = False

    def value_text(self, data: SourceData | None, t_view_ns: float, shift_ns: float) -> str:
        """The lane's value at a time (what the cursor readout shows)."""
        t_file_ns = t_view_ns - shift_ns
        if self.kind == "header":
            return ""
        if self.kind == "decoded":
            if self.boxes is None:
                return "loading"
            i = self.boxes.at(t_file_ns)
            return self.boxes.labels(i)[0] if i is not None else "-"
        assert data is not None
        sample = data.value_at(t_file_ns * 1000.0)
        if sample is None:
            return "-"
        if self.kind == "logic":
            return str(int((sample[self.bit // 8] >> (self.bit % 8)) & 1))
        v = 0
        for weight, bit in enumerate(self.bits):
            v |= int((sample[bit // 8] >> (bit % 8)) & 1) << weight
        return f"0x{v:0{(len(self.bits) + 3) // 4}x}"


# -- decoded tables as boxes --------------------------------------------------------------------

def _s(v: bytes) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def format_ns(ns: float, digits: int = 4) -> str:
    """A time given in ns with the unit that suits it: ``850 ns``, ``1.75 us``, ``70.2 us``, ``3.1 ms``."""
    a = abs(ns)
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if a >= scale:
            return f"{ns / scale:.{digits}g} {unit}"
    return f"{ns:.{digits}g} ns"


def format_hz(hz: float) -> str:
    """A frequency with its unit: ``571.4 kHz``."""
    for scale, unit in ((1e9, "GHz"), (1e6, "MHz"), (1e3, "kHz")):
        if abs(hz) >= scale:
            return f"{hz / scale:.4g} {unit}"
    return f"{hz:.4g} Hz"


#: The lanes a decoder's table gives: id under ``<source>/decoded/``, title, height (ethernet: one per direction).
DECODED_LANES: dict[str, list[tuple[str, str, float]]] = {
    "pci": [("pci", "PCI transactions", 1.5)],
    "irq": [("irq", "interrupts", 1.3)],
    "linkactivity": [("linkactivity", "on the wire", 1.3)],
    "ethernet": [("ethernet/tx", "frames A->B (tx)", 1.5), ("ethernet/rx", "frames B->A (rx)", 1.5),
                 ("ethernet/any", "frames", 1.5)],
}
#: A wire source's ethernet lanes: the capturing interface's outbound and inbound frames, and those whose direction
#: the capture did not record (a GMII probe's frames always have one).
WIRE_TITLES = ("frames outbound", "frames inbound", "frames")
#: The columns, besides ``t_ns`` and ``t_end_ns``, that a decoder's lanes are drawn from (style, kind, lane).
DRAW_COLUMNS: dict[str, list[str]] = {"pci": ["kind", "termination", "parity_error"], "irq": [],
                                      "linkactivity": [],
                                      "ethernet": ["direction", "pause_quanta", "fcs_ok", "error_octets"]}
_DIRECTIONS = (b"tx", b"rx", b"")


@dataclass
class LaneArrays:
    """What one decoded lane draws from: its boxes' times (ns), styles and event kinds, the table row of each
    (None: every row of the table, in order) and the search arrays of :func:`box_index`."""

    t_ns: np.ndarray
    t_end_ns: np.ndarray
    style: np.ndarray
    category: np.ndarray
    rows: np.ndarray | None
    reach: np.ndarray
    widest: np.ndarray
    starts: np.ndarray


def _lane(t: np.ndarray, te: np.ndarray, style: np.ndarray, category: np.ndarray,
          rows: np.ndarray | None = None) -> LaneArrays:
    return LaneArrays(t, te, style, category, rows, *box_index(t, te))


def lane_arrays(decoder: str, cols: dict[str, np.ndarray]) -> list[LaneArrays]:
    """The lanes of ``DECODED_LANES[decoder]`` from a table's ``t_ns``, ``t_end_ns`` and ``DRAW_COLUMNS``.

    PCI transactions are coloured by kind (CSR, DMA, MSI...), STOP#-retried or aborted ones as warnings;
    frames by direction, PAUSE in its own colour, FCS or symbol errors as warnings."""
    t, te = cols["t_ns"].astype(np.float64), cols["t_end_ns"].astype(np.float64)
    n = len(t)
    if decoder == "pci":
        names, which = distinct(cols["kind"])
        per_name = np.array([STYLE_NAMES.index(k if k in STYLES else "unknown") for k in (_s(v) for v in names)],
                            dtype=np.int8)
        style = per_name[which] if n else np.zeros(0, np.int8)
        bad = np.isin(cols["termination"], BAD_TERMINATIONS) | (cols["parity_error"] == 1)
        style[bad] = STYLE_NAMES.index("warning")
        return [_lane(t, te, style, np.full(n, b"transaction", dtype="S12"))]
    if decoder == "ethernet":
        pause = cols["pause_quanta"] >= 0
        bad = ~cols["fcs_ok"] | (cols["error_octets"] > 0)
        style = np.full(n, STYLE_NAMES.index("frame"), np.int8)
        style[pause] = STYLE_NAMES.index("pause")
        style[bad] = STYLE_NAMES.index("warning")
        category = np.where(pause, b"PAUSE", b"frame").astype("S12")
        out = []
        for direction in _DIRECTIONS:
            rows = np.flatnonzero(cols["direction"] == direction)
            out.append(_lane(t[rows], te[rows], style[rows], category[rows], rows))
        return out
    kind = {"irq": ("interrupt", "interrupt"), "linkactivity": ("activity", "activity")}[decoder]
    return [_lane(t, te, np.full(n, STYLE_NAMES.index(kind[0]), np.int8), np.full(n, kind[1].encode(), "S12"))]


def distinct(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(words, return_inverse=True)`` of fixed-width byte strings (a decoded table's column of kinds):
    strings of up to 8 bytes sorted as the integers their bytes make, several times faster than as strings."""
    width = words.dtype.itemsize
    if words.dtype.kind != "S" or width > 8:
        return np.unique(words, return_inverse=True)
    size = next(n for n in (1, 2, 4, 8) if n >= width)
    keys = np.ascontiguousarray(words, dtype=f"S{size}").view(f"<u{size}")
    found, which = np.unique(keys, return_inverse=True)
    return found.view(f"S{size}"), which.reshape(-1)


@functools.cache
def field_positions(names: tuple[str, ...]) -> dict[str, int]:
    """Each field's position in a record's ``item()``, by name (``names``: its dtype's)."""
    return {n: k for k, n in enumerate(names)}


def pci_labels(r: np.void) -> list[str]:
    """A PCI transaction's labels, longest first."""
    # the row's fields as Python's, read at once and found by position: a zoom in names hundreds of rows, and each
    # read of a field of a NumPy record costs several times a tuple's (a dict of the row's fields, half of these
    # labels' instructions)
    v, at = r.item(), field_positions(r.dtype.names)
    kind = (_s(v[at["kind"]]) or "unknown").upper()
    term = _s(v[at["termination"]])
    cmd = _s(v[at["command"]])
    addr = f" {int(v[at['address']]):#x}" if address_known(r) else ""
    nbytes = f" {int(v[at['bytes']])} B" if v[at["bytes"]] >= 0 else ""
    dur = format_ns(float(v[at["t_end_ns"]] - v[at["t_ns"]]))
    flag = {"retry": "STOP# retry", "disconnect_with_data": "disconnect"}.get(term, term)
    flag = "" if term == "normal" else f" ({flag})"
    parity = " PARITY ERROR" if v[at["parity_error"]] == 1 else ""
    phases = int(v[at["data_phases"]])
    full = f"{kind}{(' ' + cmd) if cmd else ''}{addr}{nbytes}, {phases} data phases, {dur}{flag}{parity}"
    short = "STOP#" if term == "retry" else kind
    return [full, f"{kind} {phases}ph{flag}", short, short[0]]


def ethernet_labels(r: np.void) -> list[str]:
    """A frame's labels, longest first."""
    if r["pause_quanta"] >= 0:
        q = int(r["pause_quanta"])
        if q == 0:
            return ["XON (PAUSE 0): the partner may send again", "XON", "X"]
        return [f"PAUSE {q} quanta, stops the partner {format_ns(float(r['pause_ns']))}", "PAUSE", "P"]
    err = "" if r["fcs_ok"] and r["error_octets"] <= 0 else " BAD FCS/ERROR"
    if r["udp_dport"] >= 0:
        seq = f" seq {int(r['seq'])}" if r["seq"] >= 0 else ""
        full = (f"UDP{seq} {int(r['length'])} B {_s(r['ip_src'])}:{int(r['udp_sport'])} -> "
                f"{_s(r['ip_dst'])}:{int(r['udp_dport'])}{err}")
        return [full, f"UDP{seq} {int(r['length'])} B{err}", "frame", "F"]
    return [f"frame {int(r['length'])} B type {int(r['ethertype']):#06x}{err}", "frame", "F"]


def irq_labels(r: np.void) -> list[str]:
    """An interrupt line asserted: from assertion until the service deasserts it."""
    return [f"interrupt asserted {format_ns(float(r['duration_ns']))}", "interrupt", "IRQ", "I"]


def activity_labels(r: np.void) -> list[str]:
    """A one-wire frame-presence probe: the frame's time on the medium."""
    return [f"frame on the wire {format_ns(float(r['duration_ns']))}, ~{int(r['est_bytes'])} B", "on wire", "W"]


#: Each decoder's labels of one table row. A label says what happened, never when (its duration at most): the
#: search index describes rows equal but for their times once.
ROW_LABELS: dict[str, Callable[[np.void], list[str]]] = {"pci": pci_labels, "ethernet": ethernet_labels,
                                                         "irq": irq_labels, "linkactivity": activity_labels}


def decoded_lane(source: str, decoder: str, k: int, arrays: LaneArrays | None,
                 row: Callable[[int], np.void]) -> Lane:
    """Lane ``k`` of ``DECODED_LANES[decoder]`` on ``source``: its boxes from ``arrays`` (None while they load)
    and their labels from the table's rows (``row(i)``)."""
    suffix, title, height = DECODED_LANES[decoder][k]
    boxes = None
    if arrays is not None:
        labels, rows = ROW_LABELS[decoder], arrays.rows
        labeller = (lambda i: labels(row(i))) if rows is None else (lambda i: labels(row(int(rows[i]))))
        boxes = Boxes(arrays.t_ns, arrays.t_end_ns, arrays.style, labeller, arrays.category, arrays.reach,
                      arrays.widest, arrays.starts)
    return Lane(f"{source}/decoded/{suffix}", source, title, "decoded", boxes=boxes, height=height, group=source)


# -- the host probe: kernel events per host and CPU, and udpmon's packets -------------------------

#: System call names the syscall lane writes (x86-64 numbers, the analysis's send and receive calls and the
#: waits an engine makes between them; others show their number).
SYSCALL_NAMES = {**SEND_CALLS, **RECEIVE_CALLS, 7: "poll", 23: "select", 202: "futex", 230: "clock_nanosleep",
                 232: "epoll_wait", 270: "pselect6", 271: "ppoll"}
#: Calls that move datagrams (not read and write, which every program makes): the threads making them are the
#: engine's.
DATAGRAM_CALLS = {nr for nr, name in SYSCALL_NAMES.items() if name.startswith(("send", "recv"))}


def paired(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Indices (into starts, into ends) pairing each start with the first end at or after it (same CPU rows
    given in time order); a start without an end is left out."""
    k = np.searchsorted(ends["time_ns"], starts["time_ns"], side="left")
    ok = np.flatnonzero(k < len(ends))
    return ok, k[ok]


def _host_boxes(t: np.ndarray, t_end: np.ndarray, style: str, category: str,
                labeller: Callable[[int], list[str]]) -> Boxes:
    order = np.argsort(t, kind="stable")
    return Boxes(t[order].astype(np.float64), t_end[order].astype(np.float64),
                 np.full(len(t), STYLE_NAMES.index(style), np.int8), lambda i: labeller(int(order[i])),
                 np.full(len(t), category.encode(), dtype="S12"))


def host_lanes(trace: HostTrace, base_ns: int) -> list[Lane]:
    """A host's lanes per CPU (hard interrupts, softirqs, NAPI polls with their frames) and per recorded thread
    (its system calls), at ``time + clock offset - base_ns`` (the view's ns). The source (deskew key) is
    ``host:<name>``."""
    source = f"host:{trace.host}"
    shift = int(round(trace.clock_offset_ns)) - base_ns
    ev = trace.events
    softirq = trace.symbols.get("softirq", {})
    lanes = [Lane(f"{source}/", source, f"host {trace.host} ({trace.hostname})", "header", height=0.9, group=source)]
    for cpu in np.unique(ev["cpu"]):
        mine = ev[ev["cpu"] == cpu]
        of = (lambda name: mine[mine["event"] == trace.code(name)])
        entry, exit_ = of("irq:irq_handler_entry"), of("irq:irq_handler_exit")
        a, b = paired(entry, exit_)
        irq = (entry[a], exit_[b])
        s_entry, s_exit = of("irq:softirq_entry"), of("irq:softirq_exit")
        a, b = paired(s_entry, s_exit)
        soft = (s_entry[a], s_exit[b])
        polls = of("napi:napi_poll")
        # a poll's event comes at its end: draw it from the end of the poll before it in the same NET_RX run,
        # or from the run's start
        net_rx = soft[0][soft[0]["vector"] == NET_RX]
        k = np.searchsorted(net_rx["time_ns"], polls["time_ns"], side="right") - 1
        run_start = np.where(k >= 0, net_rx["time_ns"][np.maximum(k, 0)], polls["time_ns"])
        before = np.concatenate(([np.iinfo(np.int64).min], polls["time_ns"][:-1]))
        poll_start = np.maximum(run_start, before)

        def irq_label(i: int, rows=irq) -> list[str]:
            return [f"IRQ {int(rows[0]['irq'][i])} {_s(rows[0]['device'][i])} "
                    f"{format_ns(float(rows[1]['time_ns'][i] - rows[0]['time_ns'][i]))}", "IRQ", "I"]

        def soft_label(i: int, rows=soft) -> list[str]:
            name = softirq.get(int(rows[0]["vector"][i]), str(int(rows[0]["vector"][i])))
            return [f"softirq {name} {format_ns(float(rows[1]['time_ns'][i] - rows[0]['time_ns'][i]))}", name,
                    name[:1]]

        def poll_label(i: int, rows=polls) -> list[str]:
            r = rows[i]
            return [f"NAPI poll {_s(r['device'])}: {int(r['work'])} of {int(r['budget'])} frames",
                    f"poll {int(r['work'])}/{int(r['budget'])}", str(int(r["work"]))]

        boxes = [("hard IRQ", "hardirq", irq[0]["time_ns"], irq[1]["time_ns"], irq_label),
                 ("softirq", "softirq", soft[0]["time_ns"], soft[1]["time_ns"], soft_label),
                 ("NAPI poll", "napi", poll_start, polls["time_ns"], poll_label)]
        for title, style, t0, t1, labeller in boxes:
            lanes.append(Lane(f"{source}/cpu{int(cpu)}/{style}", source, f"cpu{int(cpu)} {title}", "decoded",
                              boxes=_host_boxes(t0 + shift, t1 + shift, style, style, labeller), height=1.1,
                              group=source))
    # the engine's threads (those that sent or received datagrams: one at a time on a daemon, a worker per
    # test) in one lane; a thread may block on one CPU and return on another, so calls pair per thread
    enters, exits = (ev[ev["event"] == trace.code(n)] for n in ("raw_syscalls:sys_enter", "raw_syscalls:sys_exit"))
    engine = np.unique(enters["pid"][np.isin(enters["syscall"], list(DATAGRAM_CALLS))])
    pairs = []
    for pid in engine:
        e, x = enters[enters["pid"] == pid], exits[exits["pid"] == pid]
        a, b = paired(e, x)
        pairs.append((e[a], x[b]))
    e = np.concatenate([p[0] for p in pairs]) if pairs else enters[:0]
    x = np.concatenate([p[1] for p in pairs]) if pairs else exits[:0]

    def call_label(i: int) -> list[str]:
        nr = int(e["syscall"][i])
        name = SYSCALL_NAMES.get(nr, f"syscall {nr}")
        return [f"{name} = {int(x['ret'][i])} (thread {int(e['pid'][i])}, cpu{int(e['cpu'][i])} to "
                f"cpu{int(x['cpu'][i])})", name, name[:1]]

    lanes.append(Lane(f"{source}/engine", source, "engine system calls", "decoded",
                      boxes=_host_boxes(e["time_ns"] + shift, x["time_ns"] + shift, "syscall", "syscall", call_label),
                      height=1.1, group=source))
    return lanes


def packet_lanes(name: str, series: list[tuple[str, np.ndarray, np.ndarray, Callable[[int], list[str]]]]
                 ) -> list[Lane]:
    """udpmon's packets as lanes: (title, start, end in the view's ns, labels) per lane. Source (deskew key):
    ``udpmon:<name>``."""
    source = f"udpmon:{name}"
    lanes = [Lane(f"{source}/", source, f"udpmon packets ({name})", "header", height=0.9, group=source)]
    for title, t0, t1, labels in series:
        lanes.append(Lane(f"{source}/{title}", source, title, "decoded",
                          boxes=_host_boxes(t0, t1, "packet", "packet", labels), height=1.1, group=source))
    return lanes


def udpmon_series(tables: dict[str, np.ndarray], far_offset_ns: float, base_ns: int
                  ) -> list[tuple[str, np.ndarray, np.ndarray, Callable[[int], list[str]]]]:
    """The packet lanes of a results file's raw tables (CLOCK_MONOTONIC ns; the far engine's moved by its
    offset): a stream's sends and the far engine's receive returns, a latency run's round trips."""
    out = []
    if "stream/sent" in tables:
        sent = tables["stream/sent"][tables["stream/sent"]["t_ns"] >= 0]
        got = tables["stream/received"]
        t_sent = sent["t_ns"] - base_ns
        t_got = got["user_ns"] + int(round(far_offset_ns)) - base_ns
        out.append(("sent (engine)", t_sent, t_sent + 100,
                    lambda i, r=sent: [f"packet {int(r['seq'][i])} of point {int(r['point'][i])} sent", "sent", "S"]))
        out.append(("received (far engine)", t_got, t_got + 100,
                    lambda i, r=got: [f"packet {int(r['seq'][i])} of point {int(r['point'][i])} returned to the "
                                      f"far engine", "received", "R"]))
    if "latency/rtt" in tables:
        rtt = tables["latency/rtt"][tables["latency/rtt"]["rtt_ns"] >= 0]
        t0 = rtt["t_ns"] - base_ns
        out.append(("round trips", t0, t0 + rtt["rtt_ns"],
                    lambda i, r=rtt: [f"{int(r['size_bytes'][i])} B response: RTT "
                                      f"{format_ns(float(r['rtt_ns'][i]))} (send time interpolated)",
                                      f"{int(r['size_bytes'][i])} B", "R"]))
    return out
