"""A source's sample blocks for the decoders, read ahead in a thread, and the times of the rows they give.

Reading a block (fetching its stored chunks and inflating them,
:func:`nicrig.chunked.read_rows`) runs without the GIL, as the C kernels do,
so :func:`blocks` reads the next block in a thread while the caller decodes
the last: a decode takes about as long as the longer of the two instead of
their sum. At most :data:`AHEAD` blocks wait, so memory holds a few blocks
whatever the source's length.

A decoded table's times (``t_ns``, ``t_end_ns``) are its rows' start and end
samples on the set's common timeline. In state mode they are stored
timestamps: :class:`Times` reads them with the blocks (in the same thread) and
keeps the last few, which hold the starts and ends of almost every row the
kernels give after a block; the others are read from the file.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from nicrig.acquisition.capture import Source
from nicrig.decoders import tables

#: Blocks read and waiting at most (besides the one being decoded).
AHEAD = 2
#: Timestamp blocks :class:`Times` keeps: the current one and the one before.
KEPT = 2


@dataclass(frozen=True)
class Block:
    """Rows ``[first, first + len(rows))`` of a source, and their common-timeline times (ps; state mode only)."""

    first: int
    rows: np.ndarray
    times_ps: np.ndarray | None


def _read(source: Source, first: int, stop: int, with_times: bool) -> Block:
    rows = np.ascontiguousarray(source.read_packed(first, stop))
    return Block(first, rows, source.times_ps(first, stop) if with_times else None)


def blocks(source: Source, start: int, stop: int, size: int, *, with_times: bool = False) -> Iterator[Block]:
    """Blocks of ``size`` rows over ``[start, stop)``, each read while the caller works on the one before.

    ``with_times``: also the rows' times (state mode). An error reading is
    raised here, at the block it concerns; a caller that stops early (an
    exception, ``close()``) stops the thread.
    """
    firsts = range(start, stop, size)
    if len(firsts) <= 1:
        for first in firsts:
            yield _read(source, first, min(first + size, stop), with_times)
        return
    ready: queue.Queue[Block | BaseException | None] = queue.Queue(AHEAD)
    stopping = threading.Event()

    def put(item: Block | BaseException | None) -> bool:
        while not stopping.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def reader() -> None:
        try:
            for first in firsts:
                if stopping.is_set() or not put(_read(source, first, min(first + size, stop), with_times)):
                    return
            put(None)
        except BaseException as exc:  # noqa: BLE001 - raised in the caller's thread, at this block
            put(exc)

    thread = threading.Thread(target=reader, name="nicrig-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stopping.set()
        thread.join()


class Times:
    """Common-timeline times of decoded rows' start and end samples, from the blocks last read where they hold them.

    ``add(block)`` after each block; ``fill(table)`` sets a table's times
    (:func:`nicrig.decoders.tables.add_times`). Timing-mode sources compute
    every time (nothing is read).
    """

    def __init__(self, source: Source) -> None:
        self.source = source
        self.kept: list[Block] = []

    def add(self, block: Block) -> None:
        if block.times_ps is not None:
            self.kept = [*self.kept[-(KEPT - 1):], block] if KEPT > 1 else [block]

    def fill(self, table: np.ndarray) -> np.ndarray:
        """``table`` with its times (in place)."""
        if not len(table) or not self.source.num_samples:
            return tables.add_times(table, None)
        if not self.kept:
            return tables.add_times(table, tables.times_of(table, self.source))
        samples = np.clip(np.concatenate([table["ss"], table["es"]]), 0, self.source.num_samples - 1)
        times = np.empty(len(samples), np.int64)
        missing = np.ones(len(samples), bool)
        for block in self.kept:
            at = samples - block.first
            here = missing & (at >= 0) & (at < len(block.rows))
            times[here] = block.times_ps[at[here]]  # type: ignore[index]
            missing &= ~here
        if missing.any():
            times[missing] = self.source.times_at(samples[missing])
        return tables.add_times(table, times)
