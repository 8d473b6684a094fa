"""Native kernels of the one-line pulse decoders ``irq`` and ``linkactivity``, in vectorized NumPy: their tables' rows.

Both PDs (``decoders/irq/pd.py``, ``decoders/linkactivity/pd.py``) read the
line's level on the first sample, then wait for the edge into the asserted
level and the edge out of it, in turn. With libsigrokdecode's ``wait()`` (no
edge on the first sample; the next search starts on the matched sample, where
an edge cannot match again) those edges are simply every change of the line
from one sample to the next, alternating, so a block is decoded with one
comparison of the line against itself shifted by a sample. A pulse counts when
both its edges fall inside the data: one under way at the first sample only
gives its end (linkactivity's gap to the next pulse starts there), one under
way at the end gives nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from nicrig.decoders import kernels, runtime, tables

#: What :class:`Pulses` gives for "no previous pulse" (samples are never negative).
NO_PULSE = -1


def _bit(call: runtime.Call) -> int:
    (bit,) = kernels.channel_bits(call).values()
    return bit


def nanoseconds(samples: np.ndarray, samplerate: int) -> np.ndarray:
    """``samples * 1e9 / samplerate`` (ns) as the PDs compute it, -1 where the sample rate is unknown."""
    if not samplerate:
        return np.full(samples.shape, -1.0)
    return samples * 1e9 / samplerate


class Pulses:
    """Complete pulses of one row bit at one level, block by block, as the pulse PDs find them."""

    def __init__(self, bit: int, active_level: int, start: int) -> None:
        self.bit, self.active, self.next = bit, active_level, start
        self.level: int | None = None      # the line's level on the last row seen
        self.open: int | None = None       # start of the pulse under way
        self.partial = False               # it was under way at the first sample
        self.last_end = NO_PULSE           # end of the last pulse, partial ones included

    def feed(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(ss, es, previous_end)`` of the pulses this block completes; previous_end is NO_PULSE for none."""
        line = rows[:, self.bit >> 3] & (1 << (self.bit & 7))  # 0 or the bit's value: one pass
        if self.level is None:
            self.level = int(line[0] != 0)
            if self.level == self.active:
                self.open, self.partial = self.next, True
        changes = np.flatnonzero(line[1:] != line[:-1]) + 1
        if (line[0] != 0) != self.level:
            changes = np.concatenate(([0], changes))
        edges = changes.astype(np.int64) + self.next
        self.next += len(rows)
        self.level = int(line[-1] != 0)
        ss, es, prev = [], [], []
        if self.open is not None and edges.size:
            if not self.partial:
                ss.append(self.open)
                es.append(int(edges[0]))
                prev.append(self.last_end)
            self.last_end, self.open = int(edges[0]), None
            edges = edges[1:]
        m = edges.size // 2
        starts, ends = edges[0:2 * m:2], edges[1:2 * m:2]
        before = np.concatenate(([self.last_end], ends[:-1])) if m else ends
        if m:
            self.last_end = int(ends[-1])
        if edges.size % 2:
            self.open, self.partial = int(edges[-1]), False
        if not ss:
            return starts, ends, before
        return (np.concatenate((ss, starts)).astype(np.int64), np.concatenate((es, ends)).astype(np.int64),
                np.concatenate((prev, before)).astype(np.int64))


def whole_ns(ns: np.ndarray, num: Callable[[float], Any]) -> np.ndarray:
    """The decoders' ``num(x)`` of each of ``ns`` as a table's integer column holds it (ns, int64).

    ``num`` gives an int when ``x`` is whole and ``round(x, 3)`` otherwise, and
    the integer column keeps the whole part (NumPy's cast): ``x``'s own whole
    part, unless ``round(x, 3)`` reaches the next integer, which only values
    within a thousandth of one can; the PD's ``num`` decides those.
    """
    r = np.rint(ns)
    out = np.trunc(ns)
    whole = np.abs(ns - r) < 1e-9
    out[whole] = r[whole]
    near = np.flatnonzero(~whole & (np.abs(ns - r) < 1e-3))
    out[near] = [num(float(x)) for x in ns[near]]
    return out.astype(np.int64)


class IrqKernel:
    """``irq``: one row per assertion of the interrupt line that starts and ends inside the data (its duration
    comes from the source's times, :func:`nicrig.decoders.tables.add_times`)."""

    output = "irq"

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None:
        (call,) = calls
        active = 0 if kernels.options(call)["polarity"] == "active-low" else 1
        self.pulses = Pulses(_bit(call), active, start)
        self.rows: list[np.ndarray] = []

    def feed(self, rows: np.ndarray) -> None:
        ss, es, _ = self.pulses.feed(rows)
        if ss.size:
            table = tables.defaults(self.output, ss.size)
            table["ss"], table["es"] = ss, es
            self.rows.append(table)

    def take(self) -> np.ndarray:
        return _joined(self.output, self.rows)

    finish = take


class LinkActivityKernel:
    """``linkactivity``: one row per frame-presence pulse that starts and ends inside the data."""

    output = "linkactivity"

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None:
        (call,) = calls
        options = kernels.options(call)
        active = 1 if options["polarity"] == "active-high" else 0
        self.pulses = Pulses(_bit(call), active, start)
        self.samplerate = samplerate
        self.rate = kernels.link_rate(options["link_rate"])
        pd = kernels.pd_namespace(call.id)
        self.num = pd["num"]
        self.overhead = pd["PREAMBLE_SFD_OCTETS"] if options["includes_preamble"] == "yes" else 0
        self.rows: list[np.ndarray] = []

    def feed(self, rows: np.ndarray) -> None:
        ss, es, prev = self.pulses.feed(rows)
        if not ss.size:
            return
        table = tables.defaults(self.output, ss.size)
        table["ss"], table["es"] = ss, es
        if self.samplerate:
            ns = nanoseconds(es - ss, self.samplerate)
            with np.errstate(over="ignore", invalid="ignore"):  # the PD fails on those: see below
                octets = ns * self.rate / 8e9 - self.overhead
            if not np.isfinite(octets).all():
                at = int(ss[~np.isfinite(octets)][0])
                raise runtime.DecoderFailed(f"linkactivity-1 raised at sample {at}: a pulse of {self.rate:g} bit/s "
                                            "has no finite size (option link_rate)")
            table["est_bytes"] = np.maximum(np.rint(octets), 0).astype(np.int64)
            after = prev != NO_PULSE
            table["gap_ns"][after] = whole_ns(nanoseconds(ss[after] - prev[after], self.samplerate), self.num)
        self.rows.append(table)

    def take(self) -> np.ndarray:
        return _joined(self.output, self.rows)

    finish = take


def _joined(output: str, rows: list[np.ndarray]) -> np.ndarray:
    """The tables in ``rows`` as one (emptied: taken)."""
    table = np.concatenate(rows) if rows else tables.defaults(output, 0)
    rows.clear()
    return table
