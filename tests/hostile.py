"""Hostile and damaged files, made the way an attacker, a broken tool or a hand edit makes them: for the tests
(tests/test_import_limits.py, tests/test_hostile_files.py) and bench/hostile.py alike.

    nested_vcd(path, depth, repeats)     variables deep inside scopes
    one_long_line(path, head, size)      a text file ending in one endless line
    declared(path, dataset, rows)        a dataset declaring rows the file never stores
    rewritten(h5, name, rows)            a table replaced by some of its rows, written as nicrig writes tables
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np


def nested_vcd(path: Path, depth: int, repeats: int = 1, name: str = "m") -> Path:
    """A VCD whose variables sit ``depth`` scopes deep, ``repeats`` times over (each time other scope names
    unless ``name`` is the same at every level: ``m.m.m...``); written a repeat at a time."""
    with open(path, "w") as f:
        f.write("$timescale 1 ns $end\n")
        for r in range(repeats):
            f.write("".join(f"$scope module {name if name else f's{r}_{k}'} $end\n" for k in range(depth)))
            f.write(f"$var wire 1 {chr(33 + r % 90)} a $end\n" + "$upscope $end\n" * depth)
        f.write("$enddefinitions $end\n#0\n0!\n#10\n1!\n")
    return path


def one_long_line(path: Path, head: str, size: int) -> Path:
    """``head`` followed by a line of about ``size`` bytes of zeros and commas, no newline: written in pieces."""
    with open(path, "w") as f:
        f.write(head)
        piece = "0," * (1 << 19)
        for _ in range(max(1, size // len(piece))):
            f.write(piece)
    return path


def rewritten(h5: h5py.File, name: str, data: np.ndarray, growable: bool = True) -> h5py.Dataset:
    """Replace dataset ``name`` by ``data``, with its attributes and chunk shape, chunked, compressed and
    checksummed as nicrig stores tables (``growable``: ``maxshape`` unlimited along the rows, as nicrig makes its
    empty tables)."""
    old = h5[name]
    attrs, chunks = dict(old.attrs), old.chunks if len(data) else True
    del h5[name]
    ds = h5.create_dataset(name, data=data, maxshape=(None, *data.shape[1:]) if growable else None, chunks=chunks,
                           compression="gzip", shuffle=True, fletcher32=True)
    for k, v in attrs.items():
        ds.attrs[k] = v
    return ds


def declared(path: Path, dataset: str, rows: int) -> None:
    """Give ``dataset`` of ``path`` a dataspace of ``rows`` rows without storing any: what a damaged header or a
    hand edit leaves (h5py resizes the extent; no chunk is written). A dataset of fixed size is first made
    growable, with the same rows, chunks and attributes."""
    with h5py.File(path, "r+") as h5:
        ds = h5[dataset]
        if ds.maxshape[0] is not None:
            ds = rewritten(h5, dataset, ds[()])
        ds.resize((rows, *ds.shape[1:]))
