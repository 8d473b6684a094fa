"""What every nicrig HDF5 file kind shares: format identity, atomic creation, validated opening, tables.

nicrig writes two kinds of file: capture sets (``nicrig.acquisition.capture``)
and udpmon results (``nicrig.udpmon.results``). Each is a subclass of
:class:`NicrigFile` naming its format; both are documented in
``docs/formats.md``. Tables are compound datasets whose columns carry their
units, written atomically (under a temporary name, then moved).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar

import h5py
import numpy as np

from nicrig import __version__
from nicrig.atomic import partial_path
from nicrig.errors import FormatError, UsageError

#: gzip (deflate) level 1 with the shuffle filter: every stock HDF5 tool reads it.
COMPRESSION = {"compression": "gzip", "compression_opts": 1, "shuffle": True}
#: How every dataset nicrig writes is stored: chunked, compressed, and with HDF5's Fletcher32
#: checksum on each chunk, so that a damaged chunk fails to read instead of reading as other
#: values (``nicrig verify`` reads every chunk to find such damage).
STORAGE = {**COMPRESSION, "fletcher32": True}

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


def open_h5(p: Path, mode: str, what: str, swmr: bool = False) -> h5py.File:
    if not p.exists():
        raise FormatError(f"{p}: no such file")
    if p.is_dir():
        raise FormatError(f"{p}: is a folder, not {what}")
    try:
        return h5py.File(p, mode, swmr=swmr) if swmr else h5py.File(p, mode)
    except OSError as exc:
        detail = " ".join(str(exc).split())  # HDF5 messages can span lines; ours is one line
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
    """An open nicrig HDF5 file. Use :meth:`create` or :meth:`open`, preferably as a context manager.

    Files made by :meth:`create` with ``atomic=True`` (the default) are written
    under a temporary name in the target's folder and renamed into place only
    when closed without an error, so a failed or interrupted run never leaves a
    half-written file where the user expects a good one.
    """

    FORMAT_NAME: ClassVar[str]  # a key of KINDS
    FORMAT_VERSION: ClassVar[int]
    #: Top-level groups that hold no tables (a capture set's samples).
    NOT_TABLES: ClassVar[tuple[str, ...]] = ()

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

    # -- the subclass's part of the layout --------------------------------------------------
    def _init_layout(self) -> None:
        """Create the groups a new, empty file of this kind has."""

    def _validate(self) -> None:
        """Raise :class:`FormatError` when the file's layout is not this kind's."""

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def create(cls: type[F], path: str | os.PathLike[str], *, notes: str = "", overwrite: bool = True,
               atomic: bool = True) -> F:
        final = Path(path)
        if final.exists() and not overwrite:
            raise UsageError(f"{final}: exists (use another name or allow overwriting)")
        folder = final.parent if str(final.parent) else Path(".")
        if not folder.is_dir():
            raise UsageError(f"{final}: folder {folder} does not exist")
        if not os.access(folder, os.W_OK):
            raise UsageError(f"{final}: folder {folder} is not writable")
        target = final
        if atomic:
            target = partial_path(final)
        try:
            h5 = h5py.File(target, "w", libver=("v110", "latest"))
        except OSError as exc:
            if atomic:
                target.unlink(missing_ok=True)
            raise UsageError(f"{final}: cannot write: {exc}") from None
        f = cls(h5, target, final if atomic else None)
        f._stamp(notes)
        return f

    def _stamp(self, notes: str) -> None:
        """The attributes that make a new (empty) file of this kind, and its layout."""
        self._h5.attrs["format"] = self.FORMAT_NAME
        self._h5.attrs["format_version"] = np.int64(self.FORMAT_VERSION)
        self._h5.attrs["nicrig_version"] = __version__
        self._h5.attrs["created_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
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
        """Open and validate; ``swmr=True`` (read-only) follows a file another process is writing in SWMR mode."""
        p = Path(path)
        if swmr and mode != "r":
            raise UsageError("SWMR reading is read-only: open with mode 'r'")
        h5 = open_h5(p, mode, cls.kind(), swmr)
        try:
            with reading(p, "its metadata"):
                check_format(h5, p, cls.FORMAT_NAME, cls.FORMAT_VERSION)
                f = cls(h5, p)
                f._validate()
        except BaseException:
            h5.close()
            raise
        return f

    def start_swmr(self) -> None:
        """Enter HDF5 single-writer/multiple-reader mode, so readers can watch datasets grow.

        From here until :meth:`close` the writer may only append to datasets
        that exist (``SourceWriter.append`` flushes each block for readers):
        no new groups, datasets, tables or attributes. Readers open the file
        with ``open(path, swmr=True)`` and call ``refresh()`` to see new rows.
        """
        self._h5.swmr_mode = True

    def close(self) -> None:
        """Close the file; an atomic file is renamed into place."""
        if self._owner is not None or not self._h5.id.valid:
            return
        self._h5.close()
        if self._final_path is not None:
            os.replace(self.path, self._final_path)
            self.path, self._final_path = self._final_path, None

    def abandon(self) -> None:
        """Close and delete a file being created atomically (after an error)."""
        if self._owner is not None:
            return
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

    def group(self, path: str, *, create: bool = False) -> h5py.Group | None:
        """The HDF5 group at ``path`` (made when ``create``), or None: for a layout's arrays and group attributes."""
        if create:
            return self._h5.require_group(path)
        grp = self._h5.get(path)
        return grp if isinstance(grp, h5py.Group) else None

    # -- tables -----------------------------------------------------------------------------
    def write_table(self, path: str, data: np.ndarray, *, units: Mapping[str, str] | None = None,
                    description: str = "", attrs: Mapping[str, Any] | None = None) -> None:
        """Store a structured array as a compressed compound dataset at ``path`` (``truth/frames``...).

        The table is written under a temporary name and moved into place, so a
        reader never sees a half-written table under the final name.
        """
        if data.dtype.names is None:
            raise UsageError(f"table {path}: needs a structured array")
        parent, _, name = path.rpartition("/")
        grp = self._h5.require_group(parent) if parent else self._h5
        tmp = f".{name}.partial"
        if tmp in grp:
            del grp[tmp]
        # an empty table is chunked too (growable, so its chunk shape is legal): checksummed like the rest
        ds = grp.create_dataset(tmp, data=data, chunks=True, maxshape=(None,) if not len(data) else None,
                                **STORAGE)
        try:
            ds.attrs["description"] = description
            ds.attrs["units"] = to_json(dict(units or {}))
            for k, v in (attrs or {}).items():
                ds.attrs[k] = v if isinstance(v, (int, float, str, np.generic)) else to_json(v)
        except BaseException:
            del grp[tmp]
            raise
        if name in grp:
            del grp[name]
        grp.move(tmp, name)

    def read_table(self, path: str) -> np.ndarray:
        """A table as a structured array (string columns as ``bytes``)."""
        with reading(self.path, f"table {path}"):
            ds = self._h5.get(path)
            if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None:
                raise UsageError(f"{self.path}: no table {path!r} (tables: {', '.join(self.table_names()) or 'none'})")
            return ds[()]

    def table_attrs(self, path: str) -> dict[str, Any]:
        with reading(self.path, f"the attributes of table {path}"):
            ds = self._h5[path]
            return {k: ds.attrs[k] for k in ds.attrs}

    def table_info(self, path: str) -> dict[str, Any]:
        """Rows, column names and dtypes, and attributes of a table, without reading its rows."""
        with reading(self.path, f"table {path}"):
            ds = self._h5.get(path)
            if not isinstance(ds, h5py.Dataset) or ds.dtype.names is None:
                raise UsageError(f"{self.path}: no table {path!r}")
            return {
                "rows": int(ds.shape[0]) if ds.shape else 1,
                "columns": list(ds.dtype.names),
                "dtypes": {n: str(ds.dtype.fields[n][0]) for n in ds.dtype.names},
                "attrs": {k: ds.attrs[k] for k in ds.attrs},
            }

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
        """Every table; leftovers of a killed writer (``.name.partial``) are not tables."""
        names: list[str] = []

        def visit(name: str, obj: Any) -> None:
            if (isinstance(obj, h5py.Dataset) and obj.dtype.names is not None
                    and not name.startswith(tuple(f"{g}/" for g in self.NOT_TABLES))
                    and not any(part.startswith(".") for part in name.split("/"))):
                names.append(name)

        with reading(self.path, "its list of tables"):
            self._h5.visititems(visit)
        return sorted(names)
