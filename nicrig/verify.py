"""``nicrig verify FILE...``: read every chunk of every dataset and report damage by file, dataset and rows.

Every dataset nicrig writes carries HDF5's Fletcher32 checksum on each chunk
(:data:`nicrig.h5file.STORAGE`), so a flipped bit in stored data makes that
chunk fail to read instead of reading as other values. This command reads the
files chunk by chunk, so a damaged chunk costs only its own rows, and names
each damaged stretch as a sample range (a source's ``samples`` and
``timestamps_ps``) or a row range (a table). Damage to HDF5's own metadata
(object headers, B-trees: checksummed by HDF5 in the format nicrig writes)
shows as an object that cannot be opened. Datasets written before nicrig
checksummed its data are read too, but damage in them can go unseen: they are
listed as unchecked.

A capture set's companion file of derived tables (``X.derived.h5``,
:mod:`nicrig.companion`) is checked with it.

Progress (chunks read) goes to standard error as for every long command
(:mod:`nicrig.progress`: a bar on a terminal, else a line every few seconds).

Exit status: 0 every file clean, 1 damage found, 2 a file could not be opened
at all (not HDF5, truncated beyond its superblock, missing).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: Rows read at a time from a dataset stored without chunks (files of other tools).
_CONTIGUOUS_ROWS = 1 << 16


@dataclass
class Damage:
    """Rows ``[first, stop)`` of ``dataset`` that cannot be read (``first == stop == 0``: the object itself)."""

    dataset: str
    unit: str      # "sample" or "row"; "object" when the dataset or group cannot be opened
    first: int
    stop: int
    error: str

    def text(self) -> str:
        if self.unit == "object":
            return f"{self.dataset}: cannot be opened: {self.error}"
        one = self.stop == self.first + 1
        span = f"{self.unit} {self.first}" if one else f"{self.unit}s {self.first}-{self.stop - 1}"
        return f"{self.dataset}: {span} unreadable: {self.error}"


@dataclass
class FileCheck:
    """What :func:`check_file` found in one file."""

    path: str
    datasets: int = 0
    chunks: int = 0
    damage: list[Damage] = field(default_factory=list)
    unchecked: list[str] = field(default_factory=list)   # datasets without a Fletcher32 checksum
    error: str | None = None                             # the file could not be opened

    @property
    def status(self) -> str:
        return "unreadable" if self.error is not None else "damaged" if self.damage else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, **{k: v for k, v in asdict(self).items() if k != "path"}}


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _unit(name: str) -> str:
    return "sample" if name.startswith("sources/") else "row"


def _blocks(ds: Any) -> Iterator[tuple[int, int, tuple[slice, ...]]]:
    """``(first_row, stop_row, selection)`` per chunk of ``ds`` (blocks of rows when it has no chunks)."""
    if ds.shape == ():
        yield 0, 1, ()
        return
    if ds.size == 0:
        return
    if ds.chunks is not None:
        for sel in ds.iter_chunks():
            yield sel[0].start, sel[0].stop, sel
        return
    rows = ds.shape[0]
    for first in range(0, rows, _CONTIGUOUS_ROWS):
        stop = min(rows, first + _CONTIGUOUS_ROWS)
        yield first, stop, (slice(first, stop),)


def _check_dataset(name: str, ds: Any, found: FileCheck, progress: Callable[[int], None] | None) -> None:
    found.datasets += 1
    if not ds.fletcher32:
        found.unchecked.append(name)
    bad: Damage | None = None
    for first, stop, sel in _blocks(ds):
        found.chunks += 1
        try:
            ds[sel]
        except (OSError, ValueError, RuntimeError) as exc:
            error = _message(exc)
            if bad is not None and bad.stop == first and bad.error == error:
                bad.stop = stop                      # one stretch of neighbouring damaged chunks
            else:
                bad = Damage(name, _unit(name), first, stop, error)
                found.damage.append(bad)
        if progress:
            progress(1)


def _walk(group: Any, prefix: str, found: FileCheck, progress: Callable[[int], None] | None) -> None:
    import h5py

    try:
        names = list(group.keys())
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        found.damage.append(Damage(prefix.rstrip("/") or "/", "object", 0, 0, _message(exc)))
        return
    for key in names:
        name = prefix + key
        try:
            obj = group[key]
        except (OSError, ValueError, RuntimeError, KeyError) as exc:
            found.damage.append(Damage(name, "object", 0, 0, _message(exc)))
            continue
        if isinstance(obj, h5py.Group):
            _walk(obj, name + "/", found, progress)
        elif isinstance(obj, h5py.Dataset):
            _check_dataset(name, obj, found, progress)


def _total_chunks(h5: Any) -> int:
    """Chunks to read, for the progress bar (0 where the metadata cannot be read: verify finds out later)."""
    import h5py

    total = 0

    def visit(_name: str, obj: Any) -> None:
        nonlocal total
        if isinstance(obj, h5py.Dataset):
            total += sum(1 for _ in _blocks(obj))

    try:
        h5.visititems(visit)
    except (OSError, ValueError, RuntimeError, KeyError):
        return 0
    return total


def check_file(path: str | Path, progress: Callable[[int, int], None] | None = None) -> FileCheck:
    """Read every chunk of every dataset of ``path``; ``progress(done, total)`` counts chunks."""
    from nicrig.errors import FormatError
    from nicrig.h5file import open_h5

    found = FileCheck(str(path))
    try:
        h5 = open_h5(Path(path), "r", "an HDF5 file")
    except FormatError as exc:
        found.error = str(exc)
        return found
    with h5:
        step = None
        if progress is not None:
            total, done = _total_chunks(h5), 0

            def step(n: int) -> None:
                nonlocal done
                done += n
                progress(done, max(total, done))
        _walk(h5, "", found, step)
    return found


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="capture sets (with their derived-table companions) or results files (.h5) to check")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON document")
    p.epilog = "exit status: 0 every file clean, 1 damage found, 2 a file could not be opened at all"


def _render(found: FileCheck) -> list[str]:
    if found.error is not None:
        return [f"{found.path}: UNREADABLE: {found.error}"]
    head = (f"{found.path}: {'DAMAGED' if found.damage else 'ok'} "
            f"({found.datasets} datasets, {found.chunks} chunks read)")
    lines = [head] + [f"  {d.text()}" for d in found.damage]
    if found.unchecked:
        lines.append(f"  no checksum on {len(found.unchecked)} dataset(s) (written before nicrig checksummed its "
                     f"data): damage in them can read as other values: {', '.join(found.unchecked)}")
    return lines


def run(args: argparse.Namespace) -> int:
    from nicrig.companion import companion_path
    from nicrig.progress import Progress

    paths: list[str] = []
    for path in args.files:
        paths.append(path)
        companion = companion_path(Path(path))
        if companion.is_file() and str(companion) not in args.files:
            paths.append(str(companion))
    results: list[FileCheck] = []
    with Progress() as bar:
        for path in paths:
            found = check_file(path, bar.task(f"verify: {Path(path).name}", unit="chunks"))
            results.append(found)
            if not args.json:
                print("\n".join(_render(found)), flush=True)
    if args.json:
        json.dump({"files": [r.as_dict() for r in results]}, sys.stdout, indent=2)
        sys.stdout.write("\n")
    if any(r.error is not None for r in results):
        return 2
    return 1 if any(r.damage for r in results) else 0
