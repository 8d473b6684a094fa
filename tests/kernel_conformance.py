"""Conformance of a native decoder kernel to its sigrok PD: the harness every kernel's tests use.

The PD is the reference (DESIGN.md, "Two layers of decoding"): run in-process
by :mod:`nicrig.decoders.runtime`, its stack's last decoder's ``records`` lines
are taken as they are put, in emission order, and turned into the table's rows
by :func:`nicrig.decoders.tables.records_to_columns` (what ``nicrig decode``
stores when the PD decodes). A kernel writes those rows itself: they must be
the same bytes, row for row, whatever blocks the samples come in and wherever
the batch planner cuts a source.

    from kernel_conformance import check_rows, check_source
    check_rows(calls, rows, samplerate)                 # packed (n, unitsize) rows, a runtime.Call stack
    check_source(source, stack)                          # a capture-set Source and a spec.Stack
    check_capture(path, "send_pci", outputs=["pci"])     # the stacks nicrig decode picks for a source

All raise AssertionError naming the first row that differs, and return the
PD's lines (so a test can also check that the capture exercised something).
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np
from nicrig.acquisition.capture import CaptureSet, Source
from nicrig.decoders import batch, builtin, kernels, runtime, samplerate_for, spec, tables

#: Block sizes the kernel is fed in besides one whole block: single rows, an odd size, a round one.
BLOCK_SIZES = (1, 7, 4096)
#: Chunk sizes for the batch planner (in samples); each gives its own cut points.
CHUNK_SAMPLES = (1 << 12, 1 << 16)


def _blocks(rows: np.ndarray, size: int | None) -> Iterator[np.ndarray]:
    if size is None:
        yield rows
        return
    for i in range(0, len(rows), size):
        yield rows[i:i + size]


def pd_lines(calls: Sequence[runtime.Call], blocks: Iterable[np.ndarray], *, samplerate: int, unitsize: int,
             start: int = 0) -> list[str]:
    """The stack's last decoder's ``records`` lines as its PD puts them (in-process runtime), in order."""
    return [line.decode("utf-8") for line in builtin.pd_lines(
        calls, iter([np.ascontiguousarray(b) for b in blocks]), samplerate=samplerate, unitsize=unitsize,
        start=start)]


def pd_rows(calls: Sequence[runtime.Call], lines: Sequence[str]) -> np.ndarray:
    """The table rows of the PD's ``lines`` (the stack's last decoder's records), in their order."""
    return tables.records_to_columns(calls[-1].id, [json.loads(line) for line in lines])


def kernel_rows(calls: Sequence[runtime.Call], blocks: Iterable[np.ndarray], *, samplerate: int, unitsize: int,
                start: int = 0) -> np.ndarray:
    """The kernel's table rows, in its order."""
    return kernels.run(calls, blocks, samplerate=samplerate, unitsize=unitsize, start=start)


def peak_memory(kernel: kernels.Kernel, block: np.ndarray, times: int) -> int:
    """Peak bytes Python allocated (tracemalloc) while ``kernel`` was fed ``block`` ``times`` more times."""
    tracemalloc.start()
    try:
        for _ in range(times):
            kernel.feed(block)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _described(row: np.void) -> str:
    return ", ".join(f"{name}={row[name]!r}" for name in row.dtype.names)


def assert_same(reference: np.ndarray, kernel: np.ndarray, where: str) -> None:
    """The same table rows, byte for byte, in the same order (the columns the source's times give set alike on
    both: they come from :func:`nicrig.decoders.tables.add_times`, not from the kernel); otherwise fail naming
    the first row that differs and its columns that do."""
    assert reference.dtype == kernel.dtype, f"{where}: the kernel's rows are {kernel.dtype}, the table's {reference.dtype}"
    reference, kernel = (tables.add_times(np.array(t), None) for t in (reference, kernel))
    for i in range(min(len(reference), len(kernel))):
        a, b = reference[i], kernel[i]
        if a.tobytes() != b.tobytes():
            differ = [n for n in reference.dtype.names if a[n].tobytes() != b[n].tobytes()]
            raise AssertionError(f"{where}: row {i} differs in {', '.join(differ)}\n  PD:     {_described(a)}\n"
                                 f"  kernel: {_described(b)}")
    if len(reference) != len(kernel):
        extra = reference[len(kernel)] if len(reference) > len(kernel) else kernel[len(reference)]
        raise AssertionError(f"{where}: PD gave {len(reference)} rows, the kernel {len(kernel)}; "
                             f"first unmatched: {_described(extra)}")


def check_rows(calls: Sequence[runtime.Call], rows: np.ndarray, samplerate: int, *, start: int = 0,
               block_sizes: Sequence[int] = BLOCK_SIZES, where: str = "rows") -> list[str]:
    """The kernel equals the PD on packed ``rows`` (numbered from ``start``), fed whole and in every block size."""
    rows = np.ascontiguousarray(rows, dtype=np.uint8)
    unitsize = rows.shape[1]
    reference = pd_lines(calls, [rows], samplerate=samplerate, unitsize=unitsize, start=start)
    want = pd_rows(calls, reference)
    for size in (None, *block_sizes):
        got = kernel_rows(calls, _blocks(rows, size), samplerate=samplerate, unitsize=unitsize, start=start)
        assert_same(want, got, f"{where}, {'one block' if size is None else f'blocks of {size}'}")
    return reference


def check_source(source: Source, stack: spec.Stack, *, chunk_samples: Sequence[int] = CHUNK_SAMPLES,
                 block_sizes: Sequence[int] = (7, builtin.BLOCK_SAMPLES)) -> list[str]:
    """The kernel equals the PD on a capture-set source: whole, in blocks, and on every span the planner cuts.

    For each of ``chunk_samples`` the batch planner chooses its chunks; on each
    chunk's decode span the kernel must give the PD's lines on that span.
    """
    calls = builtin.calls_for(source, stack)
    rate, unit = samplerate_for(source), source.unitsize
    where = f"source {source.name!r}, {stack.text()[:60]}"

    def span(a: int, b: int, block: int) -> Iterator[np.ndarray]:
        # Read once, then cut: the kernel sees the same blocks without a file read for each 7-sample one.
        rows = source.read_packed(a, b)
        for i in range(0, len(rows), block):
            yield np.ascontiguousarray(rows[i:i + block])

    n = source.num_samples
    reference = pd_lines(calls, span(0, n, builtin.BLOCK_SAMPLES), samplerate=rate, unitsize=unit)
    want = pd_rows(calls, reference)
    for size in block_sizes:
        got = kernel_rows(calls, span(0, n, size), samplerate=rate, unitsize=unit)
        assert_same(want, got, f"{where}, blocks of {size}")
    seen: set[tuple[int, int]] = set()
    for chunk in chunk_samples:
        for a, b, _, _ in batch.plan_chunks(source, stack, chunk):
            if (a, b) in seen or (a, b) == (0, n):
                continue
            seen.add((a, b))
            ref = pd_lines(calls, span(a, b, builtin.BLOCK_SAMPLES), samplerate=rate, unitsize=unit, start=a)
            got = kernel_rows(calls, span(a, b, builtin.BLOCK_SAMPLES), samplerate=rate, unitsize=unit, start=a)
            assert_same(pd_rows(calls, ref), got, f"{where}, chunk [{a}, {b}) of a {chunk}-sample plan")
    return reference


def check_capture(path: Path, source_name: str, *, outputs: Sequence[str] = (),
                  stacks: Sequence[str] = ()) -> dict[str, int]:
    """:func:`check_source` on a capture set's source, for the stacks ``nicrig decode`` would choose (or
    ``stacks`` in ``-P`` syntax) whose output is in ``outputs`` (default: all); each must have a kernel.

    Returns the number of records checked per stack.
    """
    checked: dict[str, int] = {}
    with CaptureSet.open(path) as cs:
        source = cs.source(source_name)
        chosen = [spec.parse_stack(t, source) for t in stacks] if stacks else spec.auto_stacks(source)
        for stack in chosen:
            if outputs and stack.output not in outputs:
                continue
            key = kernels.stack_key(stack.calls)
            assert kernels.kernel_for(key) is not None, f"the stack {','.join(key)} has no kernel"
            checked[stack.text()] = len(check_source(source, stack))
    assert checked, f"{path}: source {source_name!r} has no stack with output in {list(outputs)}"
    return checked
