"""A decoder stack's records by its PD and by its native kernel, compared byte for byte.

The PD runs in nicrig's in-process libsigrokdecode (:mod:`nicrig.decoders.runtime`,
held to the real one by ``test_runtime_conformance.py``); its records are the
lines its ``records`` binary output writes, in the order it writes them. The
kernel's records are dicts; ``json.dumps(rec, separators=(', ', ': '))`` of
each must be the PD's line, byte for byte. When the PD fails on the data, the
kernel must refuse it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from nicrig.acquisition.capture import Source
from nicrig.decoders import builtin, catalog, runtime, samplerate_for
from nicrig.decoders.gmii_kernel import GmiiEthernetKernel
from nicrig.decoders.pulse_kernels import IrqKernel, LinkActivityKernel
from nicrig.decoders.spec import RECORDS, Stack

KERNELS: dict[tuple[str, ...], type] = {
    ("gmii", "ethernet"): GmiiEthernetKernel,
    ("irq",): IrqKernel,
    ("linkactivity",): LinkActivityKernel,
}
SEPARATORS = (", ", ": ")


def blocks(rows: np.ndarray, cuts: Sequence[int] = ()) -> Iterator[np.ndarray]:
    """``rows`` in consecutive C-contiguous blocks, split before each index of ``cuts`` (empty blocks dropped)."""
    for piece in np.split(rows, sorted(cuts)):
        if len(piece):
            yield np.ascontiguousarray(piece)


def pd_lines(calls: Sequence[runtime.Call], pieces: Sequence[np.ndarray], samplerate: int, start: int = 0
             ) -> list[str]:
    """The stack's last decoder's records lines, as its PD writes them, in its order."""
    last = f"{calls[-1].id}-{sum(c.id == calls[-1].id for c in calls)}"
    records_class = catalog.get(calls[-1].id).binary.index(RECORDS)
    lines: list[str] = []

    def on_binary(inst: str, ss: int, es: int, cls: int, data: bytes) -> None:
        if inst == last and cls == records_class:
            lines.extend(data.decode("utf-8").splitlines())

    unitsize = pieces[0].shape[1] if pieces else 1
    runtime.Session(calls, samplerate=samplerate, on_binary=on_binary).run(iter(pieces), unitsize, start)
    return lines


def kernel_lines(calls: Sequence[runtime.Call], pieces: Sequence[np.ndarray], samplerate: int, unitsize: int,
                 start: int = 0) -> list[str]:
    """The stack's kernel's records over the same blocks, each as the PD would write it."""
    kernel = KERNELS[tuple(c.id for c in calls)](calls, samplerate, unitsize, start)
    for piece in pieces:
        kernel.feed(piece)
    return [json.dumps(rec, separators=SEPARATORS) for rec in kernel.finish()]


def assert_same(want: list[str], got: list[str], where: str = "") -> None:
    """Equal lists of records lines; on a difference, the first row that differs, PD line first."""
    for i, (w, g) in enumerate(zip(want, got)):
        assert g == w, f"{where} record {i} differs:\n PD:     {w}\n kernel: {g}"
    assert len(got) == len(want), f"{where} PD gave {len(want)} records, the kernel {len(got)}"


def assert_conforms(calls: Sequence[runtime.Call], rows: np.ndarray, samplerate: int, *, start: int = 0,
                    cuts: Sequence[int] = (), pd_cuts: Sequence[int] | None = None) -> list[str]:
    """The kernel gives the PD's records on ``rows`` (sample ``start`` first) fed in blocks cut at ``cuts``."""
    pieces = list(blocks(rows, cuts))
    try:
        want = pd_lines(calls, list(blocks(rows, cuts if pd_cuts is None else pd_cuts)), samplerate, start)
    except runtime.DecoderFailed:
        with pytest.raises(runtime.DecoderFailed):
            kernel_lines(calls, pieces, samplerate, rows.shape[1], start)
        return []
    got = kernel_lines(calls, pieces, samplerate, rows.shape[1], start)
    assert_same(want, got, f"{','.join(c.id for c in calls)} from sample {start}:")
    return want


def assert_source_conforms(source: Source, stack: Stack, start: int = 0, stop: int | None = None,
                           block: int = 1 << 16) -> list[str]:
    """The kernel gives the PD's records on samples ``[start, stop)`` of a capture-set source."""
    calls = builtin.calls_for(source, stack)
    stop = source.num_samples if stop is None else stop
    pieces = [np.ascontiguousarray(b) for _, b in source.iter_packed(start, stop, block=block)]
    rate = samplerate_for(source)
    want = pd_lines(calls, pieces, rate, start)
    got = kernel_lines(calls, pieces, rate, source.unitsize, start)
    assert_same(want, got, f"{source.name} {stack.text()} [{start}, {stop}):")
    return want


def has_kernel(stack: Stack) -> bool:
    return tuple(c.id for c in stack.calls) in KERNELS
