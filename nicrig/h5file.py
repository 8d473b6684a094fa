"""What every nicrig HDF5 file kind shares: format identity, atomic creation, validated opening, tables.

nicrig writes two kinds of file: capture sets (``nicrig.acquisition.capture``)
and udpmon results (``nicrig.udpmon.results``). Each is a subclass of
:class:`NicrigFile` naming its format; both are documented in
``docs/formats.md``. Tables are compound datasets whose columns carry their
units, written atomically (under a temporary name, then moved).

Writers hold files in HDF5's single-writer/multiple-reader (SWMR) mode from
the moment they open them: HDF5 then orders its writes so that the file on
disk is consistent at every instant, and a writer killed outright leaves a
file that opens in SWMR read mode with everything it had flushed (a killed
ordinary writer leaves one HDF5 refuses to open, "already open for write").
:func:`open_h5` falls back to that mode by itself, so such a file is read
like any other, and :attr:`NicrigFile.unclosed` says it was not closed.
Derived tables of a capture set go to a companion file
(:mod:`nicrig.companion`), never into the capture.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import h5py
import numpy as np
from h5py import h5d, h5f, h5p, h5z
from imagecodecs import h5checksum_fletcher32
from isal import isal_zlib

from nicrig import __version__
from nicrig._h5shuffle import shuffle
from nicrig.atomic import partial_path, publish, refuse_existing
from nicrig.errors import FormatError, UsageError

#: gzip (deflate) level 1 with the shuffle filter: every stock HDF5 tool reads it.
COMPRESSION = {"compression": "gzip", "compression_opts": 1, "shuffle": True}
#: How every dataset nicrig writes is stored: chunked, compressed, and with HDF5's Fletcher32
#: checksum on each chunk, so that a damaged chunk fails to read instead of reading as other
#: values (``nicrig verify`` reads every chunk to find such damage).
STORAGE = {**COMPRESSION, "fletcher32": True}

#: A dataset's filter pipeline as HDF5 runs it when writing a chunk: each filter's HDF5 id (H5Zpublic.h:
#: ``h5z.FILTER_SHUFFLE``...) with its parameters (``cd_values``), first filter first.
Filters = tuple[tuple[int, tuple[int, ...]], ...]


def dataset_filters(ds: h5py.Dataset) -> Filters:
    """The filters of ``ds``, in the order HDF5 applies them when writing, from its creation property list."""
    dcpl = ds.id.get_create_plist()
    return tuple((int(code), tuple(int(v) for v in values))
                 for code, _flags, values, _name in (dcpl.get_filter(i) for i in range(dcpl.get_nfilters())))


def storage_filters(itemsize: int) -> Filters:
    """The filters :data:`STORAGE` gives a dataset of ``itemsize``-byte elements, as :func:`dataset_filters`
    reports them (HDF5 sets the shuffle filter's one parameter, the element size, from the datatype).

    The order is h5py's (shuffle, deflate, Fletcher32); tests/test_h5_chunks.py checks it against the creation
    property list of datasets HDF5 made, and :class:`nicrig.acquisition.capture.SourceWriter` compares each
    dataset's own list with this one before it stores chunks it encoded itself.
    """
    return ((h5z.FILTER_SHUFFLE, (itemsize,)), (h5z.FILTER_DEFLATE, (int(COMPRESSION["compression_opts"]),)),
            (h5z.FILTER_FLETCHER32, ()))


#: The ISA-L compression level (0-3) :func:`encode_chunk` deflates with for a dataset's deflate level (the
#: ``cd_values`` of HDF5's deflate filter, which only advises encoders: the inflating reader needs no level).
#: ISA-L 2 for 1: an 18,000-frame stream simulate (11 us, Intel PRO/1000 on PCI 64/66) stores 57.0 MB of
#: datasets against zlib level 1's 57.6 (the probe 2.5% smaller, the PCI sources 3-7% larger), deflating
#: about five times faster; ISA-L 1 is ~8% faster than 2 and 0.5% larger than zlib in all, ISA-L 0 a fifth
#: larger, ISA-L 3 slower and larger on the PCI sources. nicrig declares level 1 only (:data:`COMPRESSION`).
ISAL_LEVEL = {1: 2}


def _isal_level(level: int | None) -> int:
    """The ISA-L level for HDF5 deflate ``level`` (:data:`ISAL_LEVEL`); another level is a :class:`UsageError`."""
    if level not in ISAL_LEVEL:
        raise UsageError(f"HDF5 deflate level {level}: nicrig encodes chunks for level "
                         f"{', '.join(map(str, ISAL_LEVEL))} only")
    return ISAL_LEVEL[level]


def encode_chunk(rows: np.ndarray, chunk_rows: int, filters: Filters) -> bytes:
    """One chunk of a dataset chunked along its first axis, run through ``filters`` (:func:`dataset_filters`) in
    HDF5's order, for ``H5Dwrite_chunk`` (h5py ``write_direct_chunk``, filter mask 0): bytes HDF5's filters
    decode to ``rows``.

    ``rows`` are the dataset's rows from the chunk's first, in the dataset's dtype, whole rows across the other
    axes; ``chunk_rows`` rows make a chunk. Fewer rows make an edge chunk (the dataset's end): HDF5 stores
    a whole chunk even then, the rows past the end holding the fill value, 0 for every dataset nicrig
    writes. Filters: shuffle (HDF5's byte planes, :func:`nicrig._h5shuffle.shuffle`), deflate and Fletcher32
    (HDF5's own ``H5_checksum_fletcher32``, from imagecodecs; HDF5 appends it least significant byte first); any
    other is a :class:`UsageError`. Deflate is ISA-L's (:data:`ISAL_LEVEL`), not the zlib HDF5 calls: a zlib stream
    (RFC 1950) like zlib's, which HDF5's deflate filter inflates, but not the same bytes, so the stored chunk
    differs from the one ``H5Dwrite`` would store while holding the same rows. Pure: no HDF5 call, so it runs
    in any thread (ISA-L and the checksum release the GIL) or process.
    """
    rows = np.ascontiguousarray(rows)
    if len(rows) > chunk_rows:
        raise UsageError(f"a chunk holds {chunk_rows} rows, not {len(rows)}")
    if len(rows) < chunk_rows:
        edge = np.zeros((chunk_rows, *rows.shape[1:]), dtype=rows.dtype)
        edge[:len(rows)] = rows
        rows = edge
    data: bytes | memoryview = memoryview(rows.reshape(-1).view(np.uint8))
    for code, values in filters:
        if code == h5z.FILTER_SHUFFLE:
            size = values[0] if values else rows.dtype.itemsize
            if size > 1:  # one-byte elements (packed samples) are their own planes
                data = shuffle(data, size)
        elif code == h5z.FILTER_DEFLATE:
            data = isal_zlib.compress(data, _isal_level(values[0] if values else None))
        elif code == h5z.FILTER_FLETCHER32:
            data = bytes(data) + struct.pack("<I", h5checksum_fletcher32(data))
        else:
            raise UsageError(f"HDF5 filter {code}: nicrig encodes chunks for shuffle, deflate and Fletcher32 only")
    return bytes(data)


#: Threads that encode chunks for the writers (:func:`store`, ``SourceWriter.append``): ISA-L, the checksum and
#: NumPy's copies release the GIL, so two keep both cores of a two-core machine compressing.
ENCODER_THREADS = 2
#: Runs of chunks :func:`store` hands each encoder thread: the first is written while the others are encoded.
_RUNS_PER_THREAD = 4
_encoders: tuple[int, ThreadPoolExecutor] | None = None


def encoder_pool() -> ThreadPoolExecutor:
    """This process's chunk encoders (a forked child gets its own: its parent's threads do not run in it)."""
    global _encoders
    if _encoders is None or _encoders[0] != os.getpid():
        _encoders = (os.getpid(), ThreadPoolExecutor(ENCODER_THREADS, thread_name_prefix="nicrig-chunk-encoder"))
    return _encoders[1]


def takes_encoded_chunks(ds: h5py.Dataset) -> bool:
    """Whether :func:`encode_chunk` makes ``ds``'s chunks: chunked along its first axis only, nicrig's filters
    (read from HDF5), fill value 0, and a datatype whose bytes in memory are those in the file (no variable-length
    parts)."""
    return (ds.chunks is not None and ds.chunks[1:] == ds.shape[1:] and not ds.dtype.hasobject
            and dataset_filters(ds) == storage_filters(ds.dtype.itemsize)
            and np.asarray(ds.fillvalue, dtype=ds.dtype).tobytes() == bytes(ds.dtype.itemsize))


#: HDF5 file format bounds: the 1.10 format, which SWMR and the superblock's status flags need.
LIBVER = ("v110", "latest")

#: Every nicrig file kind: format name -> what to call such a file in messages.
KINDS: dict[str, str] = {"nicrig-capture-set": "a capture set", "nicrig-results": "a udpmon results file"}

F = TypeVar("F", bound="NicrigFile")

#: What h5py raises when HDF5 cannot read what a file holds: damaged metadata, a missing object, or a
#: chunk whose Fletcher32 checksum fails ("filter returned failure during read").
HDF5_ERRORS = (OSError, RuntimeError, KeyError)


def damage_message(path: Path | str, what: str, exc: BaseException) -> str:
    """One line naming the file, what could not be read, and why (a failed checksum said in words)."""
    detail = " ".join(str(exc).split()).strip("'\"")
    if "filter returned failure" in detail or "checksum" in detail.lower():
        why = "its checksum fails: the stored bytes changed since nicrig wrote them"
    else:
        why = detail or type(exc).__name__
    return f"{path}: {what} cannot be read: damaged file ({why}); nicrig verify {path} says where"


@contextmanager
def reading(path: Path | str, what: str) -> Iterator[None]:
    """Turn an HDF5 read failure inside the block into a :class:`FormatError` naming ``path`` and ``what``.

    Only h5py calls belong inside: their errors mean the file, never nicrig.
    """
    try:
        yield
    except HDF5_ERRORS as exc:
        raise FormatError(damage_message(path, what, exc)) from None


# -- typed attribute checks: every attribute a nicrig file kind reads is checked once, when the file is opened
def attr_text(owner: str, attrs: Mapping[str, Any], key: str, default: str | None = None) -> str:
    """A string attribute (HDF5 variable- or fixed-length); a missing one is ``default`` or an error."""
    if key not in attrs:
        if default is None:
            raise FormatError(f"{owner}: no attribute {key!r}")
        return default
    value = attrs[key]
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            raise FormatError(f"{owner}: attribute {key!r} is not text") from None
    if not isinstance(value, str):
        raise FormatError(f"{owner}: attribute {key!r} is {_shown(value)}, not text")
    return value


def attr_int(owner: str, attrs: Mapping[str, Any], key: str, lo: int, hi: int, default: int | None = None) -> int:
    """A whole-number attribute in ``[lo, hi]``."""
    if key not in attrs:
        if default is None:
            raise FormatError(f"{owner}: no attribute {key!r}")
        return default
    value = attrs[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise FormatError(f"{owner}: attribute {key!r} is {_shown(value)}, not a whole number")
    if not lo <= int(value) <= hi:
        raise FormatError(f"{owner}: attribute {key!r} is {int(value)}, outside {lo}..{hi}")
    return int(value)


def attr_real(owner: str, attrs: Mapping[str, Any], key: str, lo: float, hi: float) -> float | None:
    """A finite real attribute in ``[lo, hi]``, or None when absent."""
    if key not in attrs:
        return None
    value = attrs[key]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise FormatError(f"{owner}: attribute {key!r} is {_shown(value)}, not a number")
    v = float(value)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise FormatError(f"{owner}: attribute {key!r} is {v:g}, outside {lo:g}..{hi:g}")
    return v


def attr_json(owner: str, attrs: Mapping[str, Any], key: str, check: Callable[[Any], bool] = lambda v: True,
              default: str = "{}") -> Any:
    """A JSON attribute whose value passes ``check`` (its type and shape)."""
    text = attr_text(owner, attrs, key, default)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"{owner}: attribute {key!r} is not JSON ({exc})") from None
    if not check(value):
        raise FormatError(f"{owner}: attribute {key!r} holds {_shown(value)}, not what nicrig writes there")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_mapping_of(kind: type) -> Callable[[Any], bool]:
    """A check for :func:`attr_json`: a JSON object whose values are all ``kind``."""
    return lambda v: isinstance(v, dict) and all(isinstance(x, kind) for x in v.values())


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def table_meta(path: str, data: np.ndarray, units: Mapping[str, str] | None, description: str,
               attrs: Mapping[str, Any] | None) -> dict[str, Any]:
    """The attributes a table is stored with: ``description``, ``units`` (JSON) and ``attrs`` (scalars as they
    are, anything else as JSON). A table is a structured array: anything else is a :class:`UsageError`."""
    if data.dtype.names is None:
        raise UsageError(f"table {path}: needs a structured array")
    meta: dict[str, Any] = {"description": description, "units": to_json(dict(units or {}))}
    for k, v in (attrs or {}).items():
        meta[k] = v if isinstance(v, (int, float, str, np.generic)) else to_json(v)
    return meta


def store(grp: h5py.Group, name: str, data: np.ndarray, attrs: Mapping[str, Any] | None = None) -> h5py.Dataset:
    """Dataset ``name`` of ``grp`` holding ``data`` as nicrig stores every dataset (:data:`STORAGE`), with
    ``attrs``. An empty one is chunked too (growable, so its chunk shape is legal): checksummed like the rest."""
    if not len(data) or data.dtype.hasobject:
        ds = grp.create_dataset(name, data=data, chunks=True,
                                maxshape=(None, *data.shape[1:]) if not len(data) else None, **STORAGE)
    else:  # the chunks h5py picks, compressed on the encoder threads and stored whole when it can
        ds = grp.create_dataset(name, shape=data.shape, dtype=data.dtype, chunks=True, **STORAGE)
        if ds.dtype == data.dtype and takes_encoded_chunks(ds):
            rows, filters, zeros = ds.chunks[0], dataset_filters(ds), (0,) * (data.ndim - 1)
            starts = range(0, len(data), rows)
            # A few runs of chunks a thread, not a task a chunk: the chunks h5py picks are small (302 rows of a
            # bus's transactions, 2,048 of them in a saturated stream's table of 100 MB) and handing each over
            # and back, under the GIL, cost a sixth of the table's CPU.
            per = -(-len(starts) // (_RUNS_PER_THREAD * ENCODER_THREADS))
            runs = [starts[i:i + per] for i in range(0, len(starts), per)]
            encoded = encoder_pool().map(lambda run: [encode_chunk(data[c:c + rows], rows, filters) for c in run], runs)
            for run, chunks in zip(runs, encoded):
                for c, chunk in zip(run, chunks):
                    ds.id.write_direct_chunk((c, *zeros), chunk)
        else:
            ds[...] = data
    for k, v in (attrs or {}).items():
        ds.attrs[k] = v
    return ds


def unstored_rows(ds: h5py.Dataset) -> list[tuple[int, int]]:
    """Row ranges ``[first, stop)`` (along the first axis) of ``ds`` that the file holds no storage for.

    HDF5 reads rows nobody wrote as the fill value, so a file whose dataspace says more rows than its chunks
    hold (a damaged header, a hand edit, ``(2**40, 6)`` samples in a 139 KB file) would read as zeros, or ask
    for memory it never had. nicrig writes every chunk of every dataset it declares: a chunk missing is
    damage. Costs a walk of the stored chunks' index, never of the declared rows: O(chunks stored).
    """
    if not ds.shape or not ds.size:
        return []
    rows = int(ds.shape[0])
    if ds.chunks is None:
        layout = ds.id.get_create_plist().get_layout()
        return [(0, rows)] if layout == h5d.CONTIGUOUS and ds.id.get_storage_size() < ds.nbytes else []
    across = math.prod(-(-int(n) // int(c)) for n, c in zip(ds.shape[1:], ds.chunks[1:]))
    if ds.id.get_num_chunks() >= across * -(-rows // int(ds.chunks[0])):
        return []  # every chunk stored (HDF5 counts them in C): the usual case, a fifth of walking them here
    per_start: dict[int, int] = {}

    def count(info: Any) -> None:
        start = int(info.chunk_offset[0])
        per_start[start] = per_start.get(start, 0) + 1

    ds.id.chunk_iter(count)
    step = int(ds.chunks[0])
    gaps: list[tuple[int, int]] = []
    expect = 0
    for start in sorted(s for s, n in per_start.items() if n >= across and s < rows):
        if start > expect:
            gaps.append((expect, start))
        expect = start + step
    if expect < rows:
        gaps.append((expect, rows))
    return gaps


def check_stored(path: Path | str, what: str, ds: h5py.Dataset) -> None:
    """A :class:`FormatError` naming ``path`` and ``what`` when ``ds`` declares rows the file does not store
    (:func:`unstored_rows`): checked before anything reads or allocates from the declared size."""
    with reading(path, what):
        gaps = unstored_rows(ds)
    if gaps:
        missing = sum(stop - first for first, stop in gaps)
        raise FormatError(f"{path}: {what} declares {int(ds.shape[0]):,} rows but the file stores none for "
                          f"{missing:,} of them (from row {gaps[0][0]:,}): damaged or cut short; nicrig verify "
                          f"{path} says where")


def _json_of(kind: type) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, kind)


#: Table attributes that readers parse, and what each holds (docs/formats.md, "Tables"): text, a whole
#: number, or JSON passing the check. Others are shown as they are.
TABLE_ATTRS: dict[str, str | Callable[[Any], bool]] = {
    "description": "text", "engine": "text", "units": is_mapping_of(str), "layout": "int",
    "decoders": _json_of(list), "decoder_versions": is_mapping_of(str),
    "wait_local_detail": _json_of(dict), "wait_remote_detail": _json_of(dict),
    "event_names": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
}


def check_table_attrs(owner: str, attrs: Mapping[str, Any]) -> None:
    """A :class:`FormatError` naming ``owner`` when an attribute of :data:`TABLE_ATTRS` is not what it holds."""
    for key, kind in TABLE_ATTRS.items():
        if key not in attrs:
            continue
        if kind == "text":
            attr_text(owner, attrs, key)
        elif kind == "int":
            attr_int(owner, attrs, key, 0, 2**31 - 1)
        else:
            attr_json(owner, attrs, key, kind)  # type: ignore[arg-type]


def check_format(h5: h5py.File | h5py.Group, path: Path | str, name: str, version: int) -> None:
    """Raise :class:`FormatError` unless ``h5`` (a file, or the group of a nested one) is a file of kind ``name``
    this nicrig can read."""
    if "format" not in h5.attrs:
        raise FormatError(f"{path}: an HDF5 file, but not a nicrig file (no 'format' attribute)")
    found = attr_text(str(path), h5.attrs, "format")
    if found != name:
        raise FormatError(f"{path}: is {KINDS.get(found, repr(found))}, not {KINDS.get(name, name)}")
    v = attr_int(str(path), h5.attrs, "format_version", -2**63, 2**63 - 1)
    if v < 1:
        raise FormatError(f"{path}: bad format_version {v}")
    if v > version:
        raise FormatError(f"{path}: format version {v} is newer than this nicrig reads ({version}); upgrade nicrig")
    for key in ("nicrig_version", "created_utc", "notes"):
        attr_text(str(path), h5.attrs, key, "")


def fsync_path(path: Path) -> None:
    """Flush a file's (or a folder's entries') data to the disk: a rename after it survives power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _swmr_writer(p: Path) -> h5py.File:
    """``p`` (a file nicrig created) opened for writing in SWMR mode: consistent on disk at every instant."""
    fapl = h5p.create(h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5f.LIBVER_V110, h5f.LIBVER_LATEST)
    return h5py.File(h5f.open(os.fsencode(p), h5f.ACC_RDWR | h5f.ACC_SWMR_WRITE, fapl=fapl))


def _leftovers(p: Path) -> str:
    """A hint naming partial files an interrupted writer of ``p`` left beside it."""
    left = sorted(q.name for q in p.parent.glob(f".{p.name}.*.partial")) if p.parent.is_dir() else []
    if not left:
        return ""
    return (f" ({', '.join(left)} beside it: what a writer of it left unfinished, still at work or killed "
            "outright; incomplete, since only a writer that finishes gives the file its name: once no writer runs, "
            "delete it and run the command again)")


def open_h5(p: Path, mode: str, what: str, swmr: bool = False) -> h5py.File:
    """Open ``p`` with a one-line :class:`FormatError` for every failure.

    Read-only opening of a file whose writer was killed (HDF5: "already open
    for write") falls back to SWMR reading, which sees what that writer had
    flushed; the returned file then has ``swmr_mode`` set.
    """
    if not p.exists():
        raise FormatError(f"{p}: no such file{_leftovers(p)}")
    if p.is_dir():
        raise FormatError(f"{p}: is a folder, not {what}")
    try:
        if mode == "r+":
            return h5py.File(p, "r+")
        try:
            return h5py.File(p, "r", swmr=swmr)
        except OSError as exc:
            if swmr or "already open for write" not in str(exc):
                raise
            return h5py.File(p, "r", swmr=True)
    except OSError as exc:
        detail = " ".join(str(exc).split())  # HDF5 messages can span lines; ours is one line
        if "already open for write" in detail:
            raise FormatError(f"{p}: not closed by its writer (killed, or still writing): nicrig reads it "
                              "but does not write to it") from None
        raise FormatError(f"{p}: not a readable HDF5 file (truncated, corrupt or foreign): {detail}") from None


#: Where each kind's class lives (imported on use: a capture set needs no udpmon, and back).
_CLASSES = {"nicrig-capture-set": ("nicrig.acquisition.capture", "CaptureSet"),
            "nicrig-results": ("nicrig.udpmon.results", "ResultsFile")}


def open_any(path: str | os.PathLike[str]) -> NicrigFile:
    """Open a nicrig file of whichever kind it is (read-only)."""
    import importlib

    p = Path(path)
    with open_h5(p, "r", "a nicrig file") as h5, reading(p, "its format attribute"):
        if "format" not in h5.attrs:
            raise FormatError(f"{p}: an HDF5 file, but not a nicrig file (no 'format' attribute)")
        name = attr_text(str(p), h5.attrs, "format")
    if name not in _CLASSES:
        raise FormatError(f"{p}: an HDF5 file, but not a nicrig file (format {name!r})")
    module, cls = _CLASSES[name]
    return getattr(importlib.import_module(module), cls).open(p)


class NicrigFile:
    """An open nicrig HDF5 file. Use :meth:`create`, :meth:`open` or :meth:`amend`, preferably as a context manager.

    Files made by :meth:`create` with ``atomic=True`` (the default) are written
    under a temporary name in the target's folder and renamed into place only
    when closed without an error, so a failed or interrupted run never leaves a
    half-written file where the user expects a good one. Every writer holds
    its file in SWMR mode (see the module's docstring), so a writer killed
    outright leaves a file nicrig still reads, with what had been flushed.

    A kind with ``COMPANION`` (capture sets) reads its derived tables from
    its companion file too (:mod:`nicrig.companion`): :meth:`table_names`,
    :meth:`read_table`, :meth:`table_info` and :meth:`table_attrs` see the
    tables of both, the companion's first.
    """

    FORMAT_NAME: ClassVar[str]  # a key of KINDS
    FORMAT_VERSION: ClassVar[int]
    #: Top-level groups that hold no tables (a capture set's samples).
    NOT_TABLES: ClassVar[tuple[str, ...]] = ()
    #: Whether derived tables of this kind live in a companion file beside it.
    COMPANION: ClassVar[bool] = False

    @classmethod
    def kind(cls) -> str:
        return KINDS[cls.FORMAT_NAME]

    def __init__(self, h5: h5py.File | h5py.Group, path: Path, final_path: Path | None = None,
                 owner: NicrigFile | None = None):
        self._h5 = h5
        self.path = path
        self._final_path = final_path
        # a file kept in a group of another (:meth:`nested`) belongs to that one: closing is the owner's business
        self._owner = owner
        self._publish_on_swmr = False
        self._overwrite = True  # whether giving the file its name may replace one there
        self._derived: h5py.File | None = None
        #: why a companion beside the file is not used ("" when none is, or it is)
        self.companion_note = ""
        #: the file's writer did not close it (killed, or still writing): it holds what was flushed
        self.unclosed = False

    # -- the subclass's part of the layout --------------------------------------------------
    def _init_layout(self) -> None:
        """Create the groups a new, empty file of this kind has."""

    def _validate(self) -> None:
        """Raise :class:`FormatError` when the file's layout is not this kind's."""

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def create(cls: type[F], path: str | os.PathLike[str], *, notes: str = "", overwrite: bool = True,
               atomic: bool = True) -> F:
        """A new, empty file of this kind, written under a temporary name beside ``path``.

        ``atomic``: renamed to ``path`` when closed without an error. Not
        atomic (an acquisition that readers follow as it grows): renamed by
        :meth:`start_swmr`, from when on a kill keeps what was flushed.
        Without ``overwrite`` an existing ``path`` is refused now and again,
        atomically, when the file gets its name (:func:`nicrig.atomic.publish`).
        """
        final = Path(path)
        if not overwrite:
            refuse_existing(final)
        target = partial_path(final)
        try:
            h5 = h5py.File(target, "w", libver=LIBVER)
        except OSError as exc:
            target.unlink(missing_ok=True)
            raise UsageError(f"{final}: cannot write: {exc}") from None
        f = cls(h5, target, final)
        f._publish_on_swmr = not atomic
        f._overwrite = overwrite
        f._stamp(notes)
        return f

    def _stamp(self, notes: str) -> None:
        """The attributes that make a new (empty) file of this kind, and its layout."""
        self._h5.attrs["format"] = self.FORMAT_NAME
        self._h5.attrs["format_version"] = np.int64(self.FORMAT_VERSION)
        self._h5.attrs["nicrig_version"] = __version__
        self._h5.attrs["created_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        if self.COMPANION:  # names the file to its companion of derived tables
            self._h5.attrs["capture_id"] = uuid.uuid4().hex
        self._h5.attrs["notes"] = notes
        self._init_layout()

    def has_nested(self, group: str) -> bool:
        """Whether group ``group`` of this file holds a nicrig file of its own (see :meth:`nested`)."""
        with reading(self.path, f"group {group}"):
            g = self._h5.get(group)
            return isinstance(g, h5py.Group) and "format" in g.attrs

    def nested(self, cls: type[F], group: str, *, create: bool = False, notes: str = "") -> F:
        """The file of kind ``cls`` kept in group ``group`` of this one, laid out as a file of that kind with its
        root attributes on the group (a simulated capture set's udpmon results); ``create`` makes it (the group
        must not exist). It is open while this file is; closing it does nothing."""
        if create:
            if group in self._h5:
                raise UsageError(f"{self.path}: {group!r} exists")
            f = cls(self._h5.create_group(group), self.path, owner=self)
            f._stamp(notes)
            return f
        with reading(self.path, f"group {group}"):
            g = self._h5.get(group)
            if not isinstance(g, h5py.Group):
                raise FormatError(f"{self.path}: no group {group!r} holding {cls.kind()}")
            check_format(g, f"{self.path} (group {group})", cls.FORMAT_NAME, cls.FORMAT_VERSION)
            f = cls(g, self.path, owner=self)
            f._validate()
        return f

    @classmethod
    def open(cls: type[F], path: str | os.PathLike[str], mode: Literal["r", "r+"] = "r", *, swmr: bool = False) -> F:
        """Open and validate; ``swmr=True`` (read-only) follows a file another process is writing in SWMR mode.

        ``r+`` writes in place (metadata of an acquisition's own file); to add
        data to a finished capture use :meth:`amend`, derived tables go to
        the companion (:func:`nicrig.companion.update`).
        """
        p = Path(path)
        if swmr and mode != "r":
            raise UsageError("SWMR reading is read-only: open with mode 'r'")
        h5 = open_h5(p, mode, cls.kind(), swmr)
        f = None
        try:
            with reading(p, "its metadata"):
                check_format(h5, p, cls.FORMAT_NAME, cls.FORMAT_VERSION)
                f = cls(h5, p)
                f.unclosed = mode == "r" and not swmr and h5.swmr_mode
                f._validate()
                if cls.COMPANION and mode == "r":
                    from nicrig import companion

                    f._derived, f.companion_note = companion.open_for(p, f.identity)
        except BaseException:
            if f is not None and f._derived is not None:
                f._derived.close()
            h5.close()
            raise
        return f

    @classmethod
    def amend(cls: type[F], path: str | os.PathLike[str]) -> F:
        """A copy of the file at ``path`` to add to, which replaces it atomically when closed without an error.

        For adding raw data to a finished file (``nicrig import --append``): a
        kill at any instant leaves the file as it was or as amended, never half.
        """
        final = Path(path)
        cls.open(final).close()  # validated, with its one-line errors
        tmp = partial_path(final)
        try:
            shutil.copyfile(final, tmp)
            f = cls(open_h5(tmp, "r+", cls.kind()), tmp, final)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return f

    def start_swmr(self) -> None:
        """Enter HDF5 single-writer/multiple-reader mode, so readers can follow datasets as they grow.

        From here until :meth:`close` the writer only appends to datasets that
        exist (``SourceWriter.append`` flushes each block): no new groups,
        datasets, tables or attributes (HDF5 cannot create objects crash-safely
        in this mode). The file is closed and reopened with SWMR writing set in
        the same superblock write as the open itself, so there is no instant at
        which a kill leaves it unreadable; a file created not ``atomic`` gets
        its final name here. Readers open it with ``open(path, swmr=True)`` and
        call ``refresh()`` to see new rows; a writer killed from here on leaves
        a file nicrig reads with every block flushed before the kill.
        """
        self._h5.close()
        if self._publish_on_swmr and self._final_path is not None:
            fsync_path(self.path)
            publish(self.path, self._final_path, overwrite=self._overwrite)
            self.path, self._final_path = self._final_path, None
        self._h5 = _swmr_writer(self.path)

    @property
    def identity(self) -> str:
        """What names this file to its companion (:func:`nicrig.companion.capture_identity`)."""
        from nicrig import companion

        return companion.capture_identity(self._h5.attrs)

    def close(self) -> None:
        """Close the file; an atomic file is flushed to the disk and renamed into place."""
        if self._derived is not None:
            self._derived.close()
            self._derived = None
        if self._owner is not None or not self._h5.id.valid:
            return
        self._h5.close()
        if self._final_path is not None:
            fsync_path(self.path)
            publish(self.path, self._final_path, overwrite=self._overwrite)
            fsync_path(self._final_path.parent if str(self._final_path.parent) else Path("."))
            self.path, self._final_path = self._final_path, None

    def abandon(self) -> None:
        """Close and delete a file being created atomically (after an error)."""
        if self._owner is not None:
            return
        if self._derived is not None:
            self._derived.close()
            self._derived = None
        if self._h5.id.valid:
            self._h5.close()
        if self._final_path is not None:
            self.path.unlink(missing_ok=True)

    def __enter__(self: F) -> F:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None and self._final_path is not None:
            self.abandon()
        else:
            self.close()

    # -- attributes -------------------------------------------------------------------------
    @property
    def notes(self) -> str:
        return attr_text(str(self.path), self._h5.attrs, "notes", "")

    @property
    def attrs(self) -> h5py.AttributeManager:
        return self._h5.attrs

    # -- tables -----------------------------------------------------------------------------
    def group(self, path: str, *, create: bool = False) -> h5py.Group | None:
        """The HDF5 group at ``path`` (made when ``create``), or None: for a layout's arrays and group attributes."""
        if create:
            return self._h5.require_group(path)
        grp = self._h5.get(path)
        return grp if isinstance(grp, h5py.Group) else None

    def write_table(self, path: str, data: np.ndarray, *, units: Mapping[str, str] | None = None,
                    description: str = "", attrs: Mapping[str, Any] | None = None) -> None:
        """Store a structured array as a compressed compound dataset at ``path`` (``truth/frames``...), whole
        (:meth:`write_array`)."""
        self.write_array(path, data, table_meta(path, data, units, description, attrs))

    def write_array(self, path: str, data: np.ndarray, attrs: Mapping[str, Any] | None = None) -> None:
        """Store ``data`` (a table, or raw rows such as a host trace's sub-buffers) at ``path`` with ``attrs``.

        The dataset is written under a temporary name and moved into place, so a
        reader never sees a half-written one under the final name, then flushed.
        """
        parent, _, name = path.rpartition("/")
        grp = self._h5.require_group(parent) if parent else self._h5
        tmp = f".{name}.partial"
        if tmp in grp:
            del grp[tmp]
        try:
            store(grp, tmp, data, attrs)
        except BaseException:
            if tmp in grp:
                del grp[tmp]
            raise
        with reading(self.path, f"the dataset {path} it replaces"):  # the old one's metadata may be damaged
            if name in grp:
                del grp[name]
        grp.move(tmp, name)
        self._h5.file.flush()  # on disk now: a kill from here on keeps it

    def derived_update(self) -> Any:
        """``with f.derived_update() as u: u.write_table(...)``: tables into the companion, replaced atomically."""
        from nicrig import companion

        return companion.update(self._final_path or self.path, self.identity)

    @property
    def companion_path(self) -> Path | None:
        """The companion file whose tables this file shows, or None."""
        return Path(self._derived.filename) if self._derived is not None else None

    def _table(self, path: str) -> h5py.Dataset | None:
        with reading(self.path, f"table {path}"):
            for h5 in (self._derived, self._h5):
                ds = h5.get(path) if h5 is not None else None
                if isinstance(ds, h5py.Dataset) and ds.dtype.names is not None:
                    return ds
        return None

    def _checked_table(self, path: str) -> tuple[h5py.Dataset, dict[str, Any]]:
        """Table ``path`` and its attributes, checked as every reader needs them: each declared row stored
        (:func:`check_stored`), the attributes readers parse of their types (:func:`check_table_attrs`)."""
        ds = self._table(path)
        if ds is None:
            raise UsageError(f"{self.path}: no table {path!r} (tables: {', '.join(self.table_names()) or 'none'})")
        where = Path(ds.file.filename)
        check_stored(where, f"table {path}", ds)
        with reading(where, f"the attributes of table {path}"):
            attrs = {k: ds.attrs[k] for k in ds.attrs}
        check_table_attrs(f"{where}: table {path}", attrs)
        return ds, attrs

    def table_location(self, path: str) -> str:
        """Which file holds table ``path``: this one's name or its companion's."""
        ds = self._table(path)
        return Path(ds.file.filename).name if ds is not None else ""

    def read_table(self, path: str) -> np.ndarray:
        """A table as a structured array (string columns as ``bytes``)."""
        ds = self.table_dataset(path)
        with reading(self.path, f"table {path}"):
            return ds[()]

    def table_dataset(self, path: str) -> h5py.Dataset:
        """A table's dataset, checked as every reader needs it (:meth:`_checked_table`), for readers that take
        some of its rows or its stored chunks."""
        return self._checked_table(path)[0]

    def table_attrs(self, path: str) -> dict[str, Any]:
        return self._checked_table(path)[1]

    def table_info(self, path: str) -> dict[str, Any]:
        """Rows, column names and dtypes, and attributes of a table, without reading its rows."""
        ds, attrs = self._checked_table(path)
        return {
            "rows": int(ds.shape[0]) if ds.shape else 1,
            "columns": list(ds.dtype.names),
            "dtypes": {n: str(ds.dtype.fields[n][0]) for n in ds.dtype.names},
            "attrs": attrs,
        }

    def check(self) -> None:
        """What readers check beyond opening, all of it, for ``nicrig verify``: a :class:`FormatError` for the
        first problem. Here every table (:meth:`_checked_table`); kinds add their own."""
        for name in self.table_names():
            self._checked_table(name)

    def checksum_coverage(self) -> dict[str, Any]:
        """How many datasets the file has, and which lack a Fletcher32 checksum (written before nicrig added it)."""
        datasets: list[str] = []
        unchecked: list[str] = []

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                datasets.append(name)
                if not obj.fletcher32:
                    unchecked.append(name)

        with reading(self.path, "its list of datasets"):
            self._h5.visititems(visit)
        return {"datasets": len(datasets), "unchecked": sorted(unchecked)}

    def table_names(self) -> list[str]:
        """Every table, of the file and its companion; leftovers of a killed writer (``.name.partial``) are not."""
        names: set[str] = set()

        def visit(name: str, obj: Any) -> None:
            if (isinstance(obj, h5py.Dataset) and obj.dtype.names is not None
                    and not name.startswith(tuple(f"{g}/" for g in self.NOT_TABLES))
                    and not any(part.startswith(".") for part in name.split("/"))):
                names.add(name)

        with reading(self.path, "its list of tables"):
            for h5 in (self._h5, self._derived):
                if h5 is not None:
                    h5.visititems(visit)
        return sorted(names)

    def root_attr(self, name: str) -> Any:
        """A root attribute of the companion (a derived one: ``gui_session``), else of the file, else None."""
        for h5 in (self._derived, self._h5):
            if h5 is not None and name in h5.attrs:
                return h5.attrs[name]
        return None
