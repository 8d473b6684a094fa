"""The builtin decode engine: a decoder stack over a capture-set source, in this process.

Two layers (DESIGN.md, "Two layers of decoding"): stacks with a native kernel
(:mod:`nicrig.decoders.kernels` says which) are decoded by them, all of a
source's in one pass over its samples, straight into table rows
(:func:`kernel_tables`); any other stack, and every stack under ``reference``,
by its PDs, the same decoder files as the sigrok engine
(:mod:`nicrig.decoders.sigrok_cli`), run by :mod:`nicrig.decoders.runtime`
straight over the source's chunked HDF5 samples, giving the stack's last
decoder's ``records`` binary output exactly as sigrok-cli's ``-B
<decoder>=records`` would print it (:func:`run_stack`). The kernels'
conformance tests hold their rows to those records' rows.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from nicrig import __version__
from nicrig.acquisition.capture import Source
from nicrig.decoders import DecodeError, catalog, kernels, readahead, runtime, samplerate_for, tables
from nicrig.decoders.spec import RECORDS, Stack

Progress = Callable[[int, int], None]

#: Samples read from the file per block: large enough that HDF5 reads run at
#: disk speed, small enough (11 MB at 11 bytes/sample) to stay out of the way.
BLOCK_SAMPLES = 1 << 20


def version(stacks: Sequence[Stack] = (), *, kernel: bool = True) -> str:
    """The engine, and what decodes each of ``stacks`` (a kernel, named with its digest, or the PDs)."""
    text = f"nicrig {__version__} {'builtin' if kernel else 'reference'} (libsigrokdecode 0.5.3 semantics)"
    for stack in stacks:
        key = kernels.stack_key(stack.calls)
        text += f"; {','.join(key)}: {kernels.describe(key) if kernel else 'pd ' + ','.join(key)}"
    return text


def calls_for(source: Source, stack: Stack) -> list[runtime.Call]:
    """The stack with the source's channel names turned into bit positions of its sample rows."""
    return [runtime.Call(c.id, {k: source.channel_index(v) for k, v in c.channels.items()}, dict(c.options))
            for c in stack.calls]


def _blocks(source: Source, start: int, stop: int, progress: Progress | None) -> Iterator[np.ndarray]:
    total = source.num_samples
    for block in readahead.blocks(source, start, stop, BLOCK_SAMPLES):
        yield block.rows
        if progress:
            progress(block.first + len(block.rows), total)


def run_stack(source: Source, stack: Stack, progress: Progress | None = None, *,
              start: int | None = None, stop: int | None = None,
              on_annotation: runtime.Annotation | None = None) -> list[dict[str, Any]]:
    """Decode samples ``[start, stop)`` of ``source`` with the stack's PDs; the last decoder's records in sample order.

    Sample numbers stay those of the whole source. ``on_annotation``, when
    given, receives every annotation of every decoder of the stack as it is put.
    """
    s, e = _span(source, start, stop)
    try:
        lines = pd_lines(calls_for(source, stack), _blocks(source, s, e, progress), samplerate=samplerate_for(source),
                         unitsize=source.unitsize, start=s, on_annotation=on_annotation)
        records = [_parsed(line) for line in lines]
    except (runtime.DecoderFailed, ValueError) as exc:
        raise DecodeError(f"decoding source {source.name!r} with {stack.text()}: {exc}") from None
    records.sort(key=_in_sample_order)
    return records


@dataclass
class Decoded:
    """What one stack's kernel gave: its table's rows (kept, with times, in stored order, in pieces) and its carried
    state at the keep bounds (None for a kernel without one)."""

    pieces: list[np.ndarray]
    states: list[Any]


def kernel_tables(source: Source, stacks: Sequence[Stack], progress: Progress | None = None, *,
                  spans: Sequence[tuple[int, int]] | None = None, keep: tuple[int, int] | None = None,
                  carries: Sequence[Any] | None = None) -> list[Decoded]:
    """Every stack's kernel over its span of ``source`` (default: all of it) in one pass (each block is read once,
    the next one while the kernels decode it); per stack, its table of the rows starting in ``keep`` (default:
    all).

    ``carries``: per stack, a state to start its kernel from (None: none).
    Every stack must have a kernel (:func:`nicrig.decoders.kernels.kernel_for`).
    ``progress(samples_done, samples_of_source)`` after each block.
    """
    spans = [_span(source, a, b) for a, b in spans] if spans is not None else [_span(source, None, None)] * len(stacks)
    s, e = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)
    lo, hi = keep if keep is not None else (s, e)
    rate = samplerate_for(source)
    try:
        found = []
        for i, (stack, (a, _)) in enumerate(zip(stacks, spans)):
            calls = calls_for(source, stack)
            cls = kernels.kernel_for(kernels.stack_key(calls))
            if cls is None:
                raise LookupError(f"no kernel for the stack {stack.text()}")
            kernel = cls(calls, rate, source.unitsize, a)
            if carries is not None and carries[i] is not None:
                kernel.carry(carries[i])
            found.append(kernel)
        feeder = kernels.Feeder(found, s, spans, [(lo, hi)] * len(found))
        times = readahead.Times(source)
        parts: list[list[np.ndarray]] = [[] for _ in found]

        def take(last: bool) -> None:
            for kernel, kept in zip(found, parts):
                rows = kernel.finish() if last else kernel.take()
                if len(rows):
                    ss = rows["ss"]
                    if ss.min() < lo or ss.max() >= hi:  # only around the cuts: elsewhere every row is kept
                        rows = rows[(ss >= lo) & (ss < hi)]
                    kept.append(times.fill(rows))

        for block in readahead.blocks(source, s, e, BLOCK_SAMPLES, with_times=source.mode == "state"):
            times.add(block)
            feeder.feed(block.rows)
            take(False)
            if progress:
                progress(block.first + len(block.rows), source.num_samples)
        states = feeder.close()
        take(True)
    except (runtime.DecoderFailed, ValueError) as exc:
        names = ", ".join(stack.text() for stack in stacks)
        raise DecodeError(f"decoding source {source.name!r} with {names}: {exc}") from None
    return [Decoded(tables.pieces_in_order(kept), st) for kept, st in zip(parts, states)]


def _span(source: Source, start: int | None, stop: int | None) -> tuple[int, int]:
    return max(0, start or 0), source.num_samples if stop is None else min(stop, source.num_samples)


def _in_sample_order(record: dict[str, Any]) -> tuple[int, int]:
    return record.get("ss", 0), record.get("es", 0)


def _parsed(line: bytes) -> dict[str, Any]:
    try:
        return json.loads(line)
    except ValueError:
        raise runtime.DecoderFailed(f"unreadable record {line[:200]!r}") from None


def pd_lines(calls: Sequence[runtime.Call], blocks: Iterator[np.ndarray], *, samplerate: int, unitsize: int,
             start: int = 0, on_annotation: runtime.Annotation | None = None) -> list[bytes]:
    """The stack's last decoder's ``records`` lines as its PD puts them, in order: the kernels' reference.

    The PDs run in the in-process runtime; raises DecoderFailed as it does.
    """
    output = calls[-1].id
    last = f"{output}-{sum(1 for c in calls if c.id == output)}"
    records_class = catalog.get(output).binary.index(RECORDS)
    lines: list[bytes] = []

    def on_binary(inst: str, ss: int, es: int, cls: int, data: bytes) -> None:
        if inst == last and cls == records_class:
            lines.extend(data.splitlines())

    session = runtime.Session(calls, samplerate=samplerate, on_binary=on_binary, on_annotation=on_annotation)
    session.run(blocks, unitsize, start)
    return lines
