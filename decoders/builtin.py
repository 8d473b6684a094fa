"""The builtin decode engine: a decoder stack over a capture-set source, in this process.

Two layers (DESIGN.md, "Two layers of decoding"): a stack with a native
kernel (:mod:`nicrig.decoders.kernels` says which) is decoded by it; any
other stack, and every stack under ``reference``, by its PDs, the same
decoder files as the sigrok engine (:mod:`nicrig.decoders.sigrok_cli`), run by
:mod:`nicrig.decoders.runtime` straight over the source's chunked HDF5
samples. Either way the records are the stack's last decoder's ``records``
binary output, exactly as sigrok-cli's ``-B <decoder>=records`` would print
them (the kernels' conformance tests hold them to that).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from nicrig import __version__
from nicrig.acquisition.capture import Source
from nicrig.decoders import DecodeError, catalog, kernels, runtime, samplerate_for
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
    for first, block in source.iter_packed(start, stop, block=BLOCK_SAMPLES):
        yield np.ascontiguousarray(block)
        if progress:
            progress(first + len(block), total)


def run_stack(source: Source, stack: Stack, progress: Progress | None = None, *,
              start: int | None = None, stop: int | None = None,
              on_annotation: runtime.Annotation | None = None, kernel: bool = True) -> list[dict[str, Any]]:
    """Decode samples ``[start, stop)`` of ``source``; return the last decoder's records in sample order.

    Sample numbers stay those of the whole source. The stack's kernel runs
    when it has one and ``kernel`` is true; its PDs otherwise, and always when
    ``on_annotation`` is given (kernels make records, not annotations): that
    callback receives every annotation of every decoder of the stack as it is put.
    """
    if kernel and on_annotation is None and kernels.kernel_for(kernels.stack_key(stack.calls)) is not None:
        return run_kernel(source, stack, progress, start=start, stop=stop)[0]
    s, e = _span(source, start, stop)
    try:
        lines = pd_lines(calls_for(source, stack), _blocks(source, s, e, progress), samplerate=samplerate_for(source),
                         unitsize=source.unitsize, start=s, on_annotation=on_annotation)
        records = [_parsed(line) for line in lines]
    except (runtime.DecoderFailed, ValueError) as exc:
        raise DecodeError(f"decoding source {source.name!r} with {stack.text()}: {exc}") from None
    records.sort(key=_in_sample_order)
    return records


def run_kernel(source: Source, stack: Stack, progress: Progress | None = None, *, start: int | None = None,
               stop: int | None = None, marks: Sequence[int] = (),
               carry: Any = None) -> tuple[list[dict[str, Any]], list[Any]]:
    """:func:`run_stack` with the stack's kernel, also giving its carried state at ``marks``
    (:func:`nicrig.decoders.kernels.run_marked`) and starting from ``carry`` when given."""
    s, e = _span(source, start, stop)
    try:
        records, states = kernels.run_marked(calls_for(source, stack), _blocks(source, s, e, progress),
                                             samplerate=samplerate_for(source), unitsize=source.unitsize, start=s,
                                             marks=marks, carry=carry)
    except (runtime.DecoderFailed, ValueError) as exc:
        raise DecodeError(f"decoding source {source.name!r} with {stack.text()}: {exc}") from None
    records.sort(key=_in_sample_order)
    return records, states


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
