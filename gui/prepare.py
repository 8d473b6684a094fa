"""Preparing a capture set for the view: overview pyramids, decoded lanes' arrays, the event search index.

The view never reads a deep capture whole: what it draws from is prepared
here once and kept in the capture set's cache folder (``overview.cache_paths``),
where the view maps it. For a deep capture this runs in a process of its own
(``python -m nicrig.gui.prepare CAPTURE``, started by the window), so that
the window's thread and the interpreter it runs in are never busy with it;
for a small one it runs in a thread of the window's process. Either way it
reports what it finished as messages (one JSON object a line on standard
output from the process): the view maps each piece as it comes.

Order: the decoded lanes (the tables' times and styles, a few columns of
each table read from its stored chunks) beside the pyramids (two threads),
then the search index (each event's description, lower-cased, for the event
table's search), the slowest and the last needed.

Messages: ``{"lanes": TABLE, "folder": F}``, ``{"pyramid": SOURCE, "folder":
F, "bins": N, "covered_ps": T}`` as it grows, ``{"pyramid": SOURCE, "folder": F,
"end_ps": T}`` when whole, ``{"text": TABLE, "folder": F}``, and ``{"progress":
[DONE, TOTAL], "title": WHAT}``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import operator
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from nicrig.gui import lanes, overview
from nicrig.gui.chunks import StoredChunks
from nicrig.gui.lanes import DECODED_LANES, DRAW_COLUMNS, ROW_LABELS, LaneArrays

from nicrig.errors import NicrigError
from nicrig.h5file import open_any

Message = dict[str, Any]
#: Distinct rows whose descriptions the search index keeps at once while it is made.
KNOWN_DESCRIPTIONS = 200_000
#: Stored chunks of a table read by one task of the preparer's threads.
CHUNKS_PER_TASK = 32
#: Progress messages of a phase at most: one per stored chunk (the search index) was 7,000 at 1 G samples and
#: one per growth of the overview 480, each read, parsed and shown by the window (a progress bar repaints at
#: once, ~1 ms; 2 s of the window's CPU in all, beside the preparer on two cores) for a bar a few hundred
#: pixels long.
PROGRESS_STEPS = 200
#: The parts of a lane kept in the cache, by file name.
LANE_PARTS = ("t_ns", "t_end_ns", "style", "category", "rows", "reach", "widest", "starts")
#: The lanes' drawing and labels change with the code that makes them: its text is part of the cache key.
_LANES_CODE = hashlib.sha256(Path(lanes.__file__).read_bytes()).hexdigest()[:16]


def stepped(say: Callable[[Message], None], title: str, total: int) -> Callable[[int], None]:
    """A progress reporter of ``done`` out of ``total`` that says so (``{"progress": [done, total], "title":
    title}``) when it has moved by 1/``PROGRESS_STEPS`` of ``total`` since it last did, and at the end."""
    shown = [-total]

    def at(done: int) -> None:
        if (done - shown[0]) * PROGRESS_STEPS >= total or done >= total:
            shown[0] = done
            say({"progress": [done, total], "title": title})

    return at


class Stopped(Exception):
    """Preparation was stopped (the window closed the file or ended the process)."""


def decoded_tables(names: list[str]) -> list[tuple[str, str, str]]:
    """(table, source, decoder) of every decoded table with lanes among a file's tables ``names``, in name
    order."""
    out = []
    for name in sorted(names):
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "decoded" and parts[2] in DECODED_LANES:
            out.append((name, parts[1], parts[2]))
    return out


def table_key(ds: h5py.Dataset) -> str:
    """What identifies a table's rows for the cache: its name, size, columns and stored first, middle and last
    chunks (a decoder run that wrote the same rows keeps the cache; other rows make a new key)."""
    h = hashlib.sha256(json.dumps({"code": _LANES_CODE, "name": ds.name, "rows": int(ds.shape[0]),
                                   "dtype": str(ds.dtype.descr)}).encode())
    n = int(ds.shape[0])
    if ds.chunks is not None and n:
        c = int(ds.chunks[0])
        for k in sorted({0, (n - 1) // c // 2, (n - 1) // c}):
            h.update(ds.id.read_direct_chunk((k * c,))[1])
    elif n:
        h.update(ds[()].tobytes())
    return h.hexdigest()[:24]


def table_folder(capture: Path, ds: h5py.Dataset, root: Path | None = None) -> Path | None:
    """Where a table's lanes are cached: the finished folder in any cache (``root`` None), or the one to write in
    ``root``."""
    name = f"table-{table_key(ds)}"
    if root is not None:
        return root / name
    for folder in overview.cache_paths(capture):
        if (folder / name / "lanes.json").is_file():
            return folder / name
    return None


def load_lanes(folder: Path) -> list[LaneArrays] | None:
    """A table's lanes from its cache folder, mapped; None when absent or damaged."""
    try:
        meta = json.loads((folder / "lanes.json").read_text())
        out = []
        for k in range(int(meta["lanes"])):
            parts = {p: overview.mapped(folder / f"{k}.{p}.npy") if (folder / f"{k}.{p}.npy").is_file()
                     else None for p in LANE_PARTS}
            if parts["rows"] is None and k:
                return None
            out.append(LaneArrays(**parts))  # type: ignore[arg-type]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return out


def load_text(folder: Path) -> np.ndarray | None:
    """A table's descriptions, lower-cased (row by row), mapped; None when not made yet."""
    try:
        return overview.mapped(folder / "text.npy")
    except (OSError, ValueError):
        return None


def _save(folder: Path, name: str, array: np.ndarray) -> None:
    np.save(folder / name, np.ascontiguousarray(array))


def _publish(work: Path, final: Path) -> Path:
    """Move a folder written under a name of its own into place (another preparer's equal one may be there)."""
    try:
        os.rename(work, final)
    except OSError:
        shutil.rmtree(work, ignore_errors=True)
    return final


def _columns(chunks: StoredChunks, names: list[str], pool: ThreadPoolExecutor) -> dict[str, np.ndarray]:
    # a task of many chunks: a table's chunks are small (a few hundred rows), a task per chunk costs as much
    batches = [range(k, min(k + CHUNKS_PER_TASK, len(chunks))) for k in range(0, len(chunks), CHUNKS_PER_TASK)]
    parts = list(pool.map(lambda ks: chunks.fields_of(ks, names), batches))
    if not parts:
        return {n: np.zeros(0, chunks.ds.dtype.fields[n][0]) for n in names}
    return {n: np.concatenate([p[n] for p in parts]) for n in names}


def table_lanes(cs: Any, table: str, decoder: str, pool: ThreadPoolExecutor) -> list[LaneArrays]:
    """A decoded table's lanes (``lanes.lane_arrays``), its columns read a stored chunk at a time."""
    chunks = StoredChunks(cs.table_dataset(table), str(cs.path), f"table {table}", every=True)
    return lanes.lane_arrays(decoder, _columns(chunks, ["t_ns", "t_end_ns", *DRAW_COLUMNS[decoder]], pool))


def prepare_lanes(cs: Any, table: str, decoder: str, root: Path, pool: ThreadPoolExecutor) -> Path:
    """Write a table's lanes (:func:`table_lanes`) into its cache folder under ``root``."""
    ds = cs.table_dataset(table)
    final = table_folder(cs.path, ds, root)
    assert final is not None
    if (final / "lanes.json").is_file():
        return final
    arrays = table_lanes(cs, table, decoder, pool)
    work = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for k, lane in enumerate(arrays):
        for part in LANE_PARTS:
            value = getattr(lane, part)
            if value is not None:
                _save(work, f"{k}.{part}.npy", value)
    (work / "lanes.json").write_text(json.dumps({"table": table, "decoder": decoder, "lanes": len(arrays),
                                                 "rows": int(ds.shape[0])}))
    return _publish(work, final)


def _as_bytes(rows: np.ndarray) -> np.ndarray:
    """Rows of a table as opaque items of their size (copied, joined and compared as bytes, at memory's speed:
    NumPy takes a structured array field by field)."""
    return rows.view(np.dtype((np.void, rows.dtype.itemsize)))


def descriptions(rows: np.ndarray, when: list[str], labels: Callable[[np.void], list[str]],
                 known: dict[bytes, bytes]) -> np.ndarray:
    """Each row's description (its longest label, lower-cased) as bytes, rows equal but for their place in time
    (the columns ``when`` zeroed, ``t_end_ns`` taken as the duration) described once: a bus repeats its
    transactions frame after frame, so a few distinct rows stand for thousands. ``known`` keeps the descriptions
    made, by the bytes of their rows so changed, from one call to the next."""
    if not len(rows):
        return np.zeros(0, "S1")
    key = _as_bytes(rows).copy().view(rows.dtype)
    if "t_ns" in when and "t_end_ns" in (rows.dtype.names or ()):
        key["t_end_ns"] -= key["t_ns"]  # the duration stays
    for n in when:
        key[n] = 0
    keys = _as_bytes(key).tolist()
    # looked up and found missing by C loops (map, compress): a loop in Python cost a second a million rows
    text = list(map(known.get, keys))
    for i in itertools.compress(range(len(text)), map(operator.is_, text, itertools.repeat(None))):
        found = known.get(keys[i])
        if found is None:
            found = known[keys[i]] = labels(rows[i])[0].lower().encode()
        text[i] = found
    return np.array(text, dtype="S")


def prepare_text(cs: Any, table: str, decoder: str, folder: Path, stop: Callable[[], None],
                 progress: Callable[[int], None]) -> None:
    """Write ``text.npy`` into a table's lanes folder: each row's description (:func:`descriptions`)."""
    if (folder / "text.npy").is_file():
        return
    ds = cs.table_dataset(table)
    chunks = StoredChunks(ds, str(cs.path), f"table {table}", every=True)
    labels = ROW_LABELS[decoder]
    when = [n for n in ("ss", "es", "t_ns") if n in (ds.dtype.names or ())]
    known: dict[bytes, bytes] = {}
    parts = []
    for k0 in range(0, len(chunks), CHUNKS_PER_TASK):
        ks = range(k0, min(k0 + CHUNKS_PER_TASK, len(chunks)))
        rows = np.concatenate([_as_bytes(chunks.rows(k)) for k in ks]).view(ds.dtype)
        if len(known) > KNOWN_DESCRIPTIONS:
            known.clear()
        parts.append(descriptions(rows, when, labels, known))
        stop()
        progress(len(rows))
    width = max((p.dtype.itemsize for p in parts), default=1)
    text = np.concatenate([p.astype(f"S{width}") for p in parts]) if parts else np.zeros(0, "S1")
    tmp = folder / f"text.npy.partial-{os.getpid()}"
    try:
        with open(tmp, "wb") as out:
            np.save(out, text)
        os.replace(tmp, folder / "text.npy")
    finally:
        tmp.unlink(missing_ok=True)


def prepare(capture: Path, emit: Callable[[Message], None], should_stop: Callable[[], bool] = lambda: False,
            threads: int = overview.BUILD_THREADS) -> None:
    """Prepare everything the view of ``capture`` lacks, reporting each piece to ``emit`` as it is done.

    The decoded lanes are made beside the pyramids, not before them: reading a few columns of each table is
    mostly waiting on small chunks, which the pyramids' threads fill, and the overview, the longest to make,
    starts at once."""
    root = overview.writable_cache(capture)
    if root is None:
        raise NicrigError(f"{capture}: no folder to keep the overview in (beside it or in the user's cache)")
    ended = threading.Event()  # the pyramids stopped or failed: the lanes beside them stop too
    said = threading.Lock()

    def say(message: Message) -> None:
        with said:
            emit(message)

    def stop() -> None:
        if should_stop() or ended.is_set():
            raise Stopped()

    with open_any(capture) as cs, ThreadPoolExecutor(max(threads, 1), thread_name_prefix="nicrig-prepare") as pool, \
            ThreadPoolExecutor(1, thread_name_prefix="nicrig-lanes") as beside:
        tables = decoded_tables(cs.table_names())
        sources = [cs.source(n) for n in getattr(cs, "source_names", [])]
        todo = [s for s in sources if s.num_samples and overview.load_cached(capture, s) is None]

        def all_lanes() -> dict[str, Path]:
            folders = {}
            for i, (table, _, decoder) in enumerate(tables):
                if not todo:  # the overview's progress is shown while it builds
                    say({"progress": [i, len(tables)], "title": "loading decoded lanes"})
                folders[table] = prepare_lanes(cs, table, decoder, root, pool)
                say({"lanes": table, "folder": str(folders[table])})
                stop()
            return folders

        made = beside.submit(all_lanes)
        try:
            building = stepped(say, "building overview", sum(s.num_samples for s in todo))
            base = 0
            for src in todo:
                def grew(folder: Path, bins: int, covered: int, src=src, base=base) -> None:
                    say({"pyramid": src.name, "folder": str(folder), "bins": bins, "covered_ps": covered})
                    building(base + min(bins * overview.BASE_BIN, src.num_samples))

                folder = overview.fill(capture, src, grew, should_stop, threads)
                stop()
                meta = overview.finished(folder) if folder is not None else None
                if meta is not None:
                    say({"pyramid": src.name, "folder": str(folder), "end_ps": int(meta["end_ps"])})
                base += src.num_samples
        except BaseException:
            ended.set()
            raise
        folders = made.result()
        indexing = stepped(say, "indexing events for search", sum(int(cs.table_dataset(t).shape[0])
                                                                   for t, _, _ in tables))
        done = 0
        for table, _, decoder in tables:
            def counted(k: int) -> None:
                nonlocal done
                done += k
                indexing(done)

            prepare_text(cs, table, decoder, folders[table], stop, counted)
            say({"text": table, "folder": str(folders[table])})


def main(argv: list[str] | None = None) -> int:
    """``python -m nicrig.gui.prepare CAPTURE``: prepare in this process, messages on standard output."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m nicrig.gui.prepare CAPTURE", file=sys.stderr)
        return 2

    def ended(signum: int, frame: object) -> None:
        raise Stopped()

    signal.signal(signal.SIGTERM, ended)

    def emit(message: Message) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    try:
        prepare(Path(args[0]), emit)
    except Stopped:
        return 3
    except NicrigError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
