"""Deskew: line the sources of a capture set up on a reference edge that every instrument saw at the same instant.

Wire one signal (a pulse generator, or the rig's REF) to a spare bit of every
instrument's probe map. Each source's first rising edge of it is found on the
source's own timeline (trigger at 0, before any offset); the offsets that
bring every edge onto the reference source's edge are::

    offset_ps[s] = edge_ps[reference] + offset_ps[reference] - edge_ps[s]

They absorb the instruments' different trigger delays (cables, trigger
paths). ``nicrig instrument deskew CAP.h5 --signal REF`` applies them to a
capture (or writes them to a file for later runs); ``nicrig acquire`` does it
after fetching when the rig configuration names ``deskew_signal``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from nicrig.acquisition.capture import CaptureSet, Source
from nicrig.acquisition.instruments.tomlfile import read_toml

from nicrig.atomic import replacing
from nicrig.errors import UsageError

BLOCK = 1 << 20


def first_rising_edge(source: Source, channel: str) -> int | None:
    """Index of the first sample where ``channel`` goes 0 -> 1, or None."""
    prev = None
    for start in range(0, source.num_samples, BLOCK):
        level = source.read_channel(channel, start, start + BLOCK)
        if prev is not None:
            level = np.concatenate(([prev], level))
        hits = np.flatnonzero((level[:-1] == 0) & (level[1:] == 1))
        if hits.size:
            return int(hits[0]) + start + (0 if prev is not None else 1)
        prev = level[-1]
    return None


def edge_ps(source: Source, channel: str) -> int | None:
    """Time of the first rising edge of ``channel`` on the source's own timeline (ps, offset excluded)."""
    i = first_rising_edge(source, channel)
    return None if i is None else int(source.times_ps(i, i + 1)[0]) - source.offset_ps


def offsets(edges: Mapping[str, int], reference: str, reference_offset_ps: int = 0) -> dict[str, int]:
    """Offsets (ps) that put every source's edge where the reference source's is."""
    target = edges[reference] + reference_offset_ps
    return {name: target - t for name, t in edges.items()}


def measure(cs: CaptureSet, signal: str, reference: str | None = None, prefer: Sequence[str] = ()) -> dict[str, Any]:
    """Edges and offsets for every source that recorded ``signal``.

    The reference source keeps its offset: ``reference``, else the first of
    ``prefer`` that has an edge, else the first by name.
    """
    edges: dict[str, int] = {}
    unaligned: dict[str, str] = {}
    for name, src in cs.sources.items():
        if signal not in src.channels:
            unaligned[name] = f"no channel {signal}"
            continue
        t = edge_ps(src, signal)
        if t is None:
            unaligned[name] = f"no rising edge of {signal} in its record"
        else:
            edges[name] = t
    if not edges:
        raise UsageError(f"{cs.path}: no source has a rising edge of {signal!r} to deskew on "
                         f"({'; '.join(f'{n}: {why}' for n, why in unaligned.items())})")
    ref = reference or next((n for n in prefer if n in edges), None) or next(iter(sorted(edges)))
    if ref not in edges:
        raise UsageError(f"reference source {ref!r}: {unaligned.get(ref, 'no such source')}")
    return {"signal": signal, "reference": ref, "edges_ps": edges,
            "offsets_ps": offsets(edges, ref, cs.source(ref).offset_ps), "unaligned": unaligned}


def apply(cs: CaptureSet, signal: str, reference: str | None = None, prefer: Sequence[str] = ()) -> dict[str, Any]:
    """Measure and set the offsets of ``cs`` (opened for writing); what was measured."""
    result = measure(cs, signal, reference, prefer)
    for name, off in result["offsets_ps"].items():
        cs.writer(name).set_offset(off)
    return result


def save(path: str | Path, result: Mapping[str, Any]) -> None:
    """Write measured offsets as TOML (``[offsets_ps]`` source = ps), for ``deskew_file`` in a rig configuration."""
    lines = [f"# deskew measured on the rising edge of {result['signal']}, reference source {result['reference']}",
             "[offsets_ps]"] + [f"{name} = {off}" for name, off in sorted(result["offsets_ps"].items())]
    with replacing(path) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")


def load(path: str | Path) -> dict[str, int]:
    """Offsets saved by :func:`save`."""
    p = Path(path)
    table = read_toml(p, "deskew file").get("offsets_ps")
    if not isinstance(table, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in table.values()):
        raise UsageError(f"{p}: needs an [offsets_ps] table of source = integer picoseconds")
    return dict(table)
