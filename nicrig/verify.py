"""``nicrig verify FILE...``: check everything any command reads, and report damage by file, dataset and rows.

"ok" means every command reads the file: this command reads every attribute of every object (attributes
past a few live in storage of their own that opening an object does not touch), every stored chunk of every
dataset, finds rows a dataset declares but the file does not store, checks the format's invariants (a
source's timestamps never decrease), and runs every check a command makes when it opens the file (the
attributes' types and ranges, the sources' datasets against their attributes and the common timeline, every
table's attributes: :meth:`nicrig.h5file.NicrigFile.check`). A source holding fewer samples than its
instrument announced (an acquisition killed or cut short) is reported as short.

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

Exit status: 0 every file clean, 1 damage found or a source short of the
samples its instrument announced (a killed acquisition), 2 a file could not be
opened at all (not HDF5, truncated beyond its superblock, missing).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: Rows read at a time from a dataset stored without chunks (files of other tools).
_CONTIGUOUS_ROWS = 1 << 16


@dataclass
class Damage:
    """Rows ``[first, stop)`` of ``dataset`` that cannot be read (``first == stop == 0``: the object itself)."""

    dataset: str
    #: "sample" or "row"; "object": the dataset or group cannot be opened; "attributes": its attributes cannot
    #: be read; "format": the file's contents are not what its format says (a command refuses it)
    unit: str
    first: int
    stop: int
    error: str

    def text(self) -> str:
        if self.unit == "object":
            return f"{self.dataset}: cannot be opened: {self.error}"
        if self.unit == "attributes":
            return f"{self.dataset}: attributes cannot be read: {self.error}"
        if self.unit == "format":
            return f"not what its format says: {self.error}"
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
    short: list[str] = field(default_factory=list)       # sources holding less than their instrument announced
    error: str | None = None                             # the file could not be opened

    @property
    def status(self) -> str:
        if self.error is not None:
            return "unreadable"
        return "damaged" if self.damage else "short" if self.short else "ok"

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "status": self.status, **{k: v for k, v in asdict(self).items() if k != "path"}}


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _unit(name: str) -> str:
    return "sample" if name.startswith("sources/") else "row"


def _blocks(ds: Any) -> Iterator[tuple[int, int, tuple[slice, ...]]]:
    """``(first_row, stop_row, selection)`` per stored chunk of ``ds`` in row order (blocks of rows when it has
    no chunks): what the file holds, never the rows it only declares (:func:`nicrig.h5file.unstored_rows`)."""
    if ds.shape == ():
        yield 0, 1, ()
        return
    if ds.size == 0:
        return
    if ds.chunks is not None:
        starts: list[tuple[int, ...]] = []
        ds.id.chunk_iter(lambda info: starts.append(tuple(int(o) for o in info.chunk_offset)))
        for start in sorted(starts):
            if all(o < n for o, n in zip(start, ds.shape)):
                sel = tuple(slice(o, min(o + c, n)) for o, c, n in zip(start, ds.chunks, ds.shape))
                yield sel[0].start, sel[0].stop, sel
        return
    rows = ds.shape[0]
    for first in range(0, rows, _CONTIGUOUS_ROWS):
        stop = min(rows, first + _CONTIGUOUS_ROWS)
        yield first, stop, (slice(first, stop),)


def _add(found: FileCheck, bad: Damage | None, damage: Damage) -> Damage:
    """Record ``damage``, joined to ``bad`` (the last one of this dataset) when it continues it."""
    if bad is not None and bad.stop == damage.first and bad.error == damage.error:
        bad.stop = damage.stop
        return bad
    found.damage.append(damage)
    return damage


def _is_timestamps(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 3 and parts[0] == "sources" and parts[2] == "timestamps_ps"


def _check_dataset(name: str, ds: Any, found: FileCheck, progress: Callable[[int], None] | None) -> None:
    from nicrig.h5file import unstored_rows

    found.datasets += 1
    if not ds.fletcher32:
        found.unchecked.append(name)
    try:
        gaps = unstored_rows(ds)
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        found.damage.append(Damage(name, "object", 0, 0, f"its chunk index cannot be read: {_message(exc)}"))
        return
    for first, stop in gaps:
        found.damage.append(Damage(name, _unit(name), first, stop, "declared but never written: the file stores "
                                                                   "nothing for them"))
    ordered = _is_timestamps(name)  # the format's invariant: a source's timestamps never decrease
    last: int | None = None
    bad: Damage | None = None
    for first, stop, sel in _blocks(ds):
        found.chunks += 1
        try:
            rows = ds[sel]
        except (OSError, ValueError, RuntimeError) as exc:
            bad = _add(found, bad, Damage(name, _unit(name), first, stop, _message(exc)))
            last = None
        else:
            if ordered and len(rows):
                ts = np.concatenate(([last], rows)) if last is not None else rows
                down = np.flatnonzero(ts[1:] < ts[:-1])
                if down.size:
                    at = first + int(down[0]) + (0 if last is not None else 1)
                    bad = _add(found, bad, Damage(name, "sample", at, at + 1,
                                                  "timestamp smaller than the one before it (they never decrease)"))
                last = int(rows[-1])
        if progress:
            progress(1)


def _check_attributes(name: str, obj: Any, found: FileCheck) -> None:
    """Read every attribute of ``obj``, names and values: readers read them, and attributes past a few live in
    storage of their own (a fractal heap) that nothing else touches."""
    try:
        for key in list(obj.attrs.keys()):
            obj.attrs[key]
    except (OSError, ValueError, RuntimeError, KeyError, TypeError) as exc:
        found.damage.append(Damage(name or "/", "attributes", 0, 0, _message(exc)))


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
        _check_attributes(name, obj, found)
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


def _check_format(path: Path, h5: Any, found: FileCheck) -> None:
    """Everything a command checks when it reads the file (:func:`nicrig.h5file.open_any`, then
    :meth:`nicrig.h5file.NicrigFile.check`): the attributes' types and ranges, the sources' datasets against
    their attributes and the timeline, every table; a file naming no nicrig format is plain HDF5 to verify.
    A companion of derived tables is checked with its capture set."""
    from nicrig import companion
    from nicrig.errors import FormatError, NicrigError
    from nicrig.h5file import KINDS, attr_text, open_any

    try:
        if "format" not in h5.attrs:
            return
        name = attr_text(str(path), h5.attrs, "format")
        if name == companion.FORMAT_NAME:
            return
        if name not in KINDS:
            raise FormatError(f"{path}: an HDF5 file, but not a nicrig file (format {name!r})")
        with open_any(path) as f:
            f.check()
            found.short += [s.short_text() for s in getattr(f, "sources", {}).values() if s.short]
    except NicrigError as exc:  # the commands' own words, less their pointer to this command
        words = str(exc)
        if words.endswith(" says where") and "; nicrig verify " in words:
            words = words.rsplit("; nicrig verify ", 1)[0]
        found.damage.append(Damage("/", "format", 0, 0, words))
    except (OSError, ValueError, RuntimeError, KeyError) as exc:
        found.damage.append(Damage("/", "format", 0, 0, _message(exc)))


def check_file(path: str | Path, progress: Callable[[int, int], None] | None = None) -> FileCheck:
    """Read every attribute and stored chunk of ``path``, find rows declared but not stored, and run every check
    a command makes when it reads the file; ``progress(done, total)`` counts chunks."""
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
        _check_attributes("", h5, found)
        _walk(h5, "", found, step)
        _check_format(Path(path), h5, found)
    return found


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="capture sets (with their derived-table companions) or results files (.h5) to check")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON document")
    p.epilog = ("exit status: 0 every file clean, 1 damage found or a recording short of what its instrument "
                "announced, 2 a file could not be opened at all")


def _render(found: FileCheck) -> list[str]:
    if found.error is not None:
        return [f"{found.path}: UNREADABLE: {found.error}"]
    head = (f"{found.path}: {found.status.upper() if found.status != 'ok' else 'ok'} "
            f"({found.datasets} datasets, {found.chunks} chunks read)")
    lines = [head] + [f"  {d.text()}" for d in found.damage] + [f"  {s}" for s in found.short]
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
    return 1 if any(r.damage or r.short for r in results) else 0
