"""The builtin decode engine: a decoder stack over a capture-set source, in this process.

The same decoder files as the sigrok engine (:mod:`nicrig.decoders.sigrok_cli`),
run by :mod:`nicrig.decoders.runtime` straight over the source's chunked
HDF5 samples; the stack's last decoder's ``records`` binary output becomes
the records, exactly as sigrok-cli's ``-B <decoder>=records`` would print them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from nicrig import __version__
from nicrig.acquisition.capture import Source
from nicrig.decoders import DecodeError, catalog, runtime, samplerate_for
from nicrig.decoders.spec import RECORDS, Stack

Progress = Callable[[int, int], None]

#: Samples read from the file per block: large enough that HDF5 reads run at
#: disk speed, small enough (11 MB at 11 bytes/sample) to stay out of the way.
BLOCK_SAMPLES = 1 << 20


def version() -> str:
    return f"nicrig {__version__} builtin (libsigrokdecode 0.5.3 semantics)"


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
              on_annotation: runtime.Annotation | None = None) -> list[dict[str, Any]]:
    """Decode samples ``[start, stop)`` of ``source``; return the last decoder's records in sample order.

    Sample numbers stay those of the whole source. ``on_annotation`` receives
    every annotation of every decoder of the stack as it is put.
    """
    records: list[dict[str, Any]] = []
    last = f"{stack.output}-{sum(1 for c in stack.calls if c.id == stack.output)}"
    records_class = catalog.get(stack.output).binary.index(RECORDS)
    bad: list[bytes] = []

    def on_binary(inst: str, ss: int, es: int, cls: int, data: bytes) -> None:
        if inst != last or cls != records_class:
            return
        for line in data.splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                bad.append(line[:200])

    s = max(0, start or 0)
    e = source.num_samples if stop is None else min(stop, source.num_samples)
    session = runtime.Session(calls_for(source, stack), samplerate=samplerate_for(source),
                              on_binary=on_binary, on_annotation=on_annotation)
    try:
        session.run(_blocks(source, s, e, progress), source.unitsize, s)
    except runtime.DecoderFailed as exc:
        raise DecodeError(f"decoding source {source.name!r} with {stack.text()}: {exc}") from None
    if bad:
        raise DecodeError(f"decoding source {source.name!r} with {stack.text()}: unreadable record {bad[0]!r}")
    records.sort(key=lambda r: (r.get("ss", 0), r.get("es", 0)))
    return records
