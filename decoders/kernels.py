"""Native decoder kernels: the one place that says which decoder stacks have one.

Each nicrig decoder has two implementations with one contract (DESIGN.md, "Two
layers of decoding"): the sigrok PD in ``decoders/<id>/pd.py`` is the reference
and the plug-in sigrok-cli and PulseView load; a *kernel* (compiled C or fully
vectorized NumPy) turns a source's packed sample rows into exactly the rows of
the stack's table that the PD's ``records`` binary output gives
(:func:`nicrig.decoders.tables.records_to_columns` of its records), at the
speed of reading the capture, without a Python object per record. The builtin
engine runs a stack's kernel when :data:`KERNELS` lists the stack and its PD
otherwise. A kernel never learns a behaviour its PD lacks: change the PD first,
then the kernel, then the conformance test.

The contract every kernel keeps (one class per stack, e.g. ``("pci",)``,
``("gmii", "ethernet")``, ``("irq",)``, ``("linkactivity",)``)::

    class Kernel:
        output: str   # the decoder id of the table it writes (tables.SCHEMAS)
        def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None
        def feed(self, rows: np.ndarray) -> None
        def take(self) -> np.ndarray
        def finish(self) -> np.ndarray

- ``calls``: the stack as :func:`nicrig.decoders.builtin.calls_for` gives it,
  bottom decoder first: decoder channel id -> bit index of the sample row, and
  the options as the user gave them. The kernel types them and applies the
  PD's defaults as the runtime does (:func:`options`, :func:`channel_bits`
  below), and refuses what the runtime refuses with
  :class:`~nicrig.decoders.runtime.DecoderFailed`.
- ``samplerate``: Hz, as the PD's ``metadata(SRD_CONF_SAMPLERATE)`` gets it.
- ``feed(rows)``: ``(n, unitsize)`` uint8, C-contiguous, consecutive blocks
  of the source starting at absolute sample ``start`` (sample numbers in the
  rows are absolute). Blocks may be of any size, down to one row; state
  carries across them and memory stays bounded by the block and the rows not
  yet taken, never by the source (sources of 10^9 samples). A C kernel runs
  without the GIL, so a thread reading the next block runs meanwhile.
- ``take()``: the table rows (``tables.dtype_of(output)``) of the records the
  PD has put since the last ``take()``, in the PD's emission order; each
  equal, byte for byte, to ``tables.records_to_columns`` of the PD's record,
  except the columns the source's times give (``t_ns``, ``t_end_ns``,
  ``duration_ns``: :func:`nicrig.decoders.tables.add_times`), which a kernel
  may leave as they are.
- ``finish()``: ``take()`` at the end of the data, handled as the PD handles
  ``wait()`` failing there.

A kernel whose rows depend on more than the samples since the last idle gap
(the ``gmii,ethernet`` kernel: ethernet's table of fragmented datagrams, whose
later fragments take the first one's nicrig sequence number) also has
``carried() -> state`` (a comparable value) and ``carry(state)`` (before the
first ``feed``: start from another run's state at this sample). The batch
planner uses them to cut such a source at short gaps and still give the rows
of one pass (:mod:`nicrig.decoders.batch`).

``tests/kernel_conformance.py`` holds every kernel to its PD on every capture
the suite has; a kernel that disagrees on any row is a failing test.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from nicrig.decoders import runtime, tables

#: Stacks with a kernel: the stack's decoder ids, bottom first -> ``"module:Class"``
#: (imported when first used). Add a line here when a kernel passes conformance.
KERNELS: dict[tuple[str, ...], str] = {
    ("pci",): "nicrig.decoders.pci_kernel:PciKernel",
    ("gmii", "ethernet"): "nicrig.decoders.gmii_kernel:GmiiEthernetKernel",
    ("irq",): "nicrig.decoders.pulse_kernels:IrqKernel",
    ("linkactivity",): "nicrig.decoders.pulse_kernels:LinkActivityKernel",
}


class Kernel(Protocol):
    """A stack's table rows from packed sample rows (the contract in this module's docstring)."""

    output: str

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None: ...

    def feed(self, rows: np.ndarray) -> None: ...

    def take(self) -> np.ndarray: ...

    def finish(self) -> np.ndarray: ...


def stack_key(calls: Sequence[Any]) -> tuple[str, ...]:
    """The registry key of a stack: its decoder ids, bottom first (``runtime.Call`` or ``spec.DecoderCall``)."""
    return tuple(c.id for c in calls)


@lru_cache(maxsize=None)
def _import(target: str) -> type[Kernel]:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def kernel_for(key: tuple[str, ...]) -> type[Kernel] | None:
    """The kernel class of the stack with decoder ids ``key``, or None when that stack runs its PD."""
    target = KERNELS.get(tuple(key))
    return None if target is None else _import(target)


def describe(key: tuple[str, ...]) -> str:
    """Which implementation decodes stack ``key`` in the builtin engine, for table attributes and messages.

    A kernel is named with a digest of its module's source files (the Python
    module, and a C file of the same stem with a leading underscore with the
    header it writes rows with), so a table says exactly which kernel made it.
    """
    target = KERNELS.get(tuple(key))
    if target is None:
        return "pd " + ",".join(key)
    module = importlib.import_module(target.partition(":")[0])
    here = Path(module.__file__ or "")
    native = here.with_name(f"_{here.stem}.c")
    h = hashlib.sha256()
    for f in (here, native, here.with_name("_table_rows.h") if native.is_file() else native):
        if f.is_file():
            h.update(f.read_bytes())
    return f"kernel {target} {h.hexdigest()[:16]}"


# -- shared pieces for kernels ---------------------------------------------------------------------

def options(call: runtime.Call) -> dict[str, Any]:
    """The options decoder ``call.id``'s PD sees: its defaults, the user's values typed as sigrok-cli types them."""
    return runtime.decoder_options(runtime.load(call.id), call)


def pd_namespace(decoder_id: str) -> dict[str, Any]:
    """The globals of decoder ``decoder_id``'s ``pd.py``: its constants and helper functions.

    A kernel takes the PD's own tables (command names, ...) and option parsers
    from here rather than keeping copies that could drift from the reference.
    """
    return runtime.load(decoder_id).decode.__globals__


def channel_bits(call: runtime.Call) -> dict[str, int]:
    """Decoder channel id -> bit of the sample row (-1: not mapped), for every channel the PD declares.

    Refuses unknown channels and unmapped required ones as the runtime does.
    """
    cls = runtime.load(call.id)
    ids = [c["id"] for c in getattr(cls, "channels", ())] + [c["id"] for c in getattr(cls, "optional_channels", ())]
    return dict(zip(ids, runtime.channel_bits(cls, call)))


def link_rate(value: Any) -> float:
    """A link rate option (bit/s) as the ethernet and linkactivity PDs read it: 1 Gb/s unless a positive number."""
    try:
        rate = float(value)
    except (TypeError, ValueError):
        return 1e9
    return rate if rate > 0 else 1e9


def bit_column(rows: np.ndarray, bit: int) -> np.ndarray:
    """The level (0/1, uint8) of row bit ``bit`` on every row of a ``(n, unitsize)`` block."""
    return (rows[:, bit >> 3] >> (bit & 7)) & 1


def table_rows(output: str, rows: bytearray) -> np.ndarray:
    """The rows a C kernel wrote (``decoders/_table_rows.h``) as decoder ``output``'s table, without a copy."""
    return np.frombuffer(rows, dtype=tables.dtype_of(output))


def carries_state(key: tuple[str, ...]) -> bool:
    """Whether stack ``key``'s kernel has ``carried``/``carry`` (rows that depend on more than the last gap)."""
    cls = kernel_for(key)
    return cls is not None and hasattr(cls, "carried")


def run(calls: Sequence[runtime.Call], blocks: Iterable[np.ndarray], *, samplerate: int, unitsize: int,
        start: int = 0) -> np.ndarray:
    """Run the stack's kernel over ``blocks`` (consecutive ``(n, unitsize)`` rows from ``start``); its table rows,
    in the PD's order, without times.

    Raises LookupError when the stack has no kernel, DecoderFailed when the
    kernel refuses the stack's channels or options.
    """
    return run_marked(calls, blocks, samplerate=samplerate, unitsize=unitsize, start=start)[0]


def run_marked(calls: Sequence[runtime.Call], blocks: Iterable[np.ndarray], *, samplerate: int, unitsize: int,
               start: int = 0, marks: Sequence[int] = (), carry: Any = None) -> tuple[np.ndarray, list[Any]]:
    """:func:`run`, also giving the kernel's ``carried()`` state at each sample of ``marks`` (ascending).

    The state at mark ``m`` is taken after the rows before ``m`` and before
    row ``m``; it is None for a kernel without ``carried``, or for a mark the
    blocks do not reach. ``carry``, when not None, is given to the kernel's
    ``carry`` before the first row.
    """
    cls = kernel_for(stack_key(calls))
    if cls is None:
        raise LookupError(f"no kernel for the stack {','.join(stack_key(calls))}")
    kernel = cls(calls, samplerate, unitsize, start)
    if carry is not None:
        kernel.carry(carry)
    feeder = Feeder([kernel], start, [(start, 2**62)], [marks])
    parts = []
    for block in blocks:
        feeder.feed(np.ascontiguousarray(block, dtype=np.uint8).reshape(-1, unitsize))
        if len(rows := kernel.take()):  # empty parts would only cost np.concatenate a dtype promotion each
            parts.append(rows)
    states = feeder.close()[0]
    parts.append(kernel.finish())
    return np.concatenate(parts), states


class Feeder:
    """Consecutive blocks of rows to several kernels at once, each kernel only the rows of its span, and each
    kernel's ``carried()`` state taken at its marks.

    ``spans[i]``: the samples ``[a, b)`` kernel ``i`` decodes (it was made
    with start ``a``); ``marks[i]``: its marks (ascending samples), whose
    states :meth:`close` gives (None for a kernel without ``carried``, or a
    mark the rows did not reach).
    """

    def __init__(self, kernels: Sequence[Kernel], start: int, spans: Sequence[tuple[int, int]],
                 marks: Sequence[Sequence[int]]) -> None:
        self.kernels = list(kernels)
        self.spans = list(spans)
        self.at = start
        self._carried = [getattr(k, "carried", None) for k in self.kernels]
        # Every kernel's marks in one ascending list: (sample, kernel, index among its marks).
        self._marks = sorted((m, i, j) for i, ms in enumerate(marks) if self._carried[i] for j, m in enumerate(ms))
        self.states: list[list[Any]] = [[None] * len(ms) for ms in marks]
        self._next = 0

    def feed(self, rows: np.ndarray) -> None:
        """Feed ``rows`` (C-contiguous ``(n, unitsize)`` uint8, the next after those fed before)."""
        while self._next < len(self._marks) and self._marks[self._next][0] < self.at + len(rows):
            cut = max(0, self._marks[self._next][0] - self.at)
            if cut:
                self._feed(rows[:cut])
                rows = rows[cut:]
            self._mark()
        if len(rows):
            self._feed(rows)

    def _feed(self, rows: np.ndarray) -> None:
        for kernel, (a, b) in zip(self.kernels, self.spans):
            first, last = max(a - self.at, 0), min(b - self.at, len(rows))
            if first < last:
                kernel.feed(rows[first:last])
        self.at += len(rows)

    def _mark(self) -> None:
        _, i, j = self._marks[self._next]
        self.states[i][j] = self._carried[i]()
        self._next += 1

    def close(self) -> list[list[Any]]:
        """Take the states at marks right at the end of the rows fed; every kernel's states."""
        while self._next < len(self._marks) and self._marks[self._next][0] == self.at:
            self._mark()
        return self.states
