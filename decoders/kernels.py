"""Native decoder kernels: the one place that says which decoder stacks have one.

Each nicrig decoder has two implementations with one contract (DESIGN.md, "Two
layers of decoding"): the sigrok PD in ``decoders/<id>/pd.py`` is the reference
and the plug-in sigrok-cli and PulseView load; a *kernel* (compiled C or fully
vectorized NumPy) turns a source's packed sample rows into exactly the records
the PD's ``records`` binary output gives, at the speed of reading the capture.
The builtin engine runs a stack's kernel when :data:`KERNELS` lists the stack
and its PD otherwise. A kernel never learns a behaviour its PD lacks: change
the PD first, then the kernel, then the conformance test.

The contract every kernel keeps (one class per stack, e.g. ``("pci",)``,
``("gmii", "ethernet")``, ``("irq",)``, ``("linkactivity",)``)::

    class Kernel:
        def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None
        def feed(self, rows: np.ndarray) -> None
        def finish(self) -> list[dict]

- ``calls``: the stack as :func:`nicrig.decoders.builtin.calls_for` gives it,
  bottom decoder first: decoder channel id -> bit index of the sample row, and
  the options as the user gave them. The kernel types them and applies the
  PD's defaults as the runtime does (:func:`options`, :func:`channel_bits`
  below), and refuses what the runtime refuses with
  :class:`~nicrig.decoders.runtime.DecoderFailed`.
- ``samplerate``: Hz, as the PD's ``metadata(SRD_CONF_SAMPLERATE)`` gets it.
- ``feed(rows)``: ``(n, unitsize)`` uint8, C-contiguous, consecutive blocks
  of the source starting at absolute sample ``start`` (sample numbers in the
  records are absolute). Blocks may be of any size, down to one row; state
  carries across them and memory stays bounded by the block, never by the
  source (sources of 10^9 samples).
- ``finish()``: the end of the data, handled as the PD handles ``wait()``
  failing there; returns the stack's last decoder's records, in the PD's
  emission order, each dict equal (same keys in the same order, same values
  and types) to ``json.loads`` of the PD's records line:
  ``json.dumps(rec, separators=(', ', ': '))`` is that line, byte for byte.

A kernel whose records depend on more than the samples since the last idle
gap (the ``gmii,ethernet`` kernel: ethernet's table of fragmented datagrams,
whose later fragments take the first one's nicrig sequence number) also has
``carried() -> state`` (a comparable value) and ``carry(state)`` (before the
first ``feed``: start from another run's state at this sample). The batch
planner uses them to cut such a source at short gaps and still give the
records of one pass (:mod:`nicrig.decoders.batch`).

``tests/kernel_conformance.py`` holds every kernel to its PD on every capture
the suite has; a kernel that disagrees on any row is a failing test.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Iterable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from nicrig.decoders import runtime

#: Stacks with a kernel: the stack's decoder ids, bottom first -> ``"module:Class"``
#: (imported when first used). Add a line here when a kernel passes conformance.
KERNELS: dict[tuple[str, ...], str] = {
    ("pci",): "nicrig.decoders.pci_kernel:PciKernel",
    ("gmii", "ethernet"): "nicrig.decoders.gmii_kernel:GmiiEthernetKernel",
    ("irq",): "nicrig.decoders.pulse_kernels:IrqKernel",
    ("linkactivity",): "nicrig.decoders.pulse_kernels:LinkActivityKernel",
}


class Kernel(Protocol):
    """A stack's records from packed sample rows (the contract in this module's docstring)."""

    def __init__(self, calls: Sequence[runtime.Call], samplerate: int, unitsize: int, start: int) -> None: ...

    def feed(self, rows: np.ndarray) -> None: ...

    def finish(self) -> list[dict[str, Any]]: ...


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
    module and a C file of the same stem with a leading underscore), so a
    table says exactly which kernel made it.
    """
    target = KERNELS.get(tuple(key))
    if target is None:
        return "pd " + ",".join(key)
    module = importlib.import_module(target.partition(":")[0])
    here = Path(module.__file__ or "")
    h = hashlib.sha256()
    for f in (here, here.with_name(f"_{here.stem}.c")):
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


#: Rows a kernel is given per call at most (a few ms of work): a kernel holds the GIL while it makes
#: records, and the GUI decodes in a thread beside the one that paints.
FEED_ROWS = 1 << 16


def _pieces(blocks: Iterable[np.ndarray], unitsize: int) -> Iterator[np.ndarray]:
    """``blocks`` as C-contiguous ``(n, unitsize)`` uint8 rows, in pieces of at most :data:`FEED_ROWS`."""
    for block in blocks:
        rows = np.ascontiguousarray(block, dtype=np.uint8).reshape(-1, unitsize)
        for first in range(0, len(rows), FEED_ROWS):
            yield rows[first:first + FEED_ROWS]


def carries_state(key: tuple[str, ...]) -> bool:
    """Whether stack ``key``'s kernel has ``carried``/``carry`` (records that depend on more than the last gap)."""
    cls = kernel_for(key)
    return cls is not None and hasattr(cls, "carried")


def run(calls: Sequence[runtime.Call], blocks: Iterable[np.ndarray], *, samplerate: int, unitsize: int,
        start: int = 0) -> list[dict[str, Any]]:
    """Run the stack's kernel over ``blocks`` (consecutive ``(n, unitsize)`` rows from ``start``); its records.

    Raises LookupError when the stack has no kernel, DecoderFailed when the
    kernel refuses the stack's channels or options.
    """
    return run_marked(calls, blocks, samplerate=samplerate, unitsize=unitsize, start=start)[0]


def run_marked(calls: Sequence[runtime.Call], blocks: Iterable[np.ndarray], *, samplerate: int, unitsize: int,
               start: int = 0, marks: Sequence[int] = (), carry: Any = None) -> tuple[list[dict[str, Any]], list[Any]]:
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
    carried = getattr(kernel, "carried", None)
    states: list[Any] = [None] * len(marks)
    todo = 0 if carried else len(marks)
    at = start
    for rows in _pieces(blocks, unitsize):
        while todo < len(marks) and marks[todo] < at + len(rows):
            cut = max(0, marks[todo] - at)
            if cut:
                kernel.feed(rows[:cut])
                rows, at = rows[cut:], at + cut
            states[todo] = carried()
            todo += 1
        if len(rows):
            kernel.feed(rows)
            at += len(rows)
    while todo < len(marks) and marks[todo] == at:
        states[todo] = carried()
        todo += 1
    return kernel.finish(), states
