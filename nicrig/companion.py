"""Derived tables beside a capture set: ``X.h5`` -> ``X.derived.h5``, replaced whole and atomically.

A capture may be impossible to take again, so nothing that derives from it
(decoding, the GUI's session) opens it for writing. What they produce goes to
a *companion* file beside it, which nicrig reads together with the capture
(:class:`nicrig.h5file.NicrigFile` lists, reads and describes the tables of
both as one file). The companion is never modified in place: an update copies
the tables it keeps from the current companion into a new file in the same
folder, adds the new ones, flushes it to disk (``fsync``) and renames it over
the old one (``rename(2)`` is atomic), so a kill at any instant leaves either
the old companion or the new one, each complete, and repeated updates do not
grow anything: each is a fresh file holding exactly the current tables.

A companion names its capture by the capture's ``capture_id`` (or, for a
capture written before nicrig gave them one, its ``created_utc``): when the
capture is replaced by another one of the same name, the old companion no
longer matches and is ignored, then replaced by the next update.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from nicrig import __version__
from nicrig.atomic import partial_path, publish
from nicrig.chunked import Appender, check_rows
from nicrig.errors import UsageError
from nicrig.h5file import LIBVER, fsync_path, store, table_meta, unstored_rows

#: Root attributes every companion has, written afresh by each update; the others are kept.
_OWN_ATTRS = ("format", "format_version", "nicrig_version", "updated_utc", "capture", "capture_file")
FORMAT_NAME = "nicrig-derived"
FORMAT_VERSION = 1
SUFFIX = ".derived.h5"


def companion_path(capture: Path) -> Path:
    """``run.h5`` -> ``run.derived.h5`` (a name without ``.h5`` gets the suffix appended)."""
    stem = capture.name[:-3] if capture.name.endswith(".h5") else capture.name
    return capture.with_name(stem + SUFFIX)


def capture_identity(attrs: h5py.AttributeManager) -> str:
    """What a companion records to name its capture: its ``capture_id``, else its creation time."""
    for key in ("capture_id", "created_utc"):
        if key in attrs:
            value = attrs[key]
            return f"{key}:{value.decode() if isinstance(value, bytes) else value}"
    return ""


def open_for(capture: Path, identity: str) -> tuple[h5py.File | None, str]:
    """The capture's companion opened read-only, or None; and a note when one exists but is not used."""
    path = companion_path(capture)
    if not path.is_file():
        return None, ""
    try:
        h5 = h5py.File(path, "r")
    except OSError as exc:
        return None, f"{path.name}: unreadable, ignored ({' '.join(str(exc).split())}); decode again to replace it"
    if h5.attrs.get("format") != FORMAT_NAME or h5.attrs.get("capture") != identity:
        h5.close()
        return None, f"{path.name}: belongs to another capture of this name, ignored (the next decode replaces it)"
    return h5, ""


@dataclass
class Update:
    """Tables and root attributes to put into a capture's companion (see :func:`update`).

    A table is compressed when it is given, into a staging HDF5 file beside
    the companion (unlinked as soon as it is open: nothing is left behind, even
    by a kill), and copied chunk for chunk (no second compression) into the new
    companion at the end: a caller that gives tables as they are ready (``nicrig
    decode``, while its workers decode the rest) leaves only that copy for the
    end, and a table given in pieces (:meth:`append_table`) is never whole in
    memory.
    """

    capture: Path = Path("capture.h5")
    tables: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> its attributes
    root_attrs: dict[str, Any] = field(default_factory=dict)
    staged: h5py.File | None = None  # the tables, compressed

    def _staging(self) -> h5py.File:
        if self.staged is None:
            folder = companion_path(self.capture).parent
            try:
                fd, name = tempfile.mkstemp(prefix=".nicrig-update-", suffix=".h5", dir=folder)
            except OSError as exc:
                raise UsageError(f"{self.capture}: cannot write derived tables beside it: folder {folder}: "
                                 f"{exc.strerror or exc}") from None
            os.close(fd)
            try:
                self.staged = h5py.File(name, "w", libver=LIBVER)
            finally:
                os.unlink(name)  # the open file keeps its data until it is closed
        return self.staged

    def write_table(self, path: str, data: np.ndarray, *, units: Mapping[str, str] | None = None,
                    description: str = "", attrs: Mapping[str, Any] | None = None) -> None:
        """Add (or replace) table ``path`` (``decoded/send_pci/pci``...), as :meth:`NicrigFile.write_table`."""
        meta = table_meta(path, data, units, description, attrs)
        staged = self._staging()
        if path in staged:
            del staged[path]
        store(staged, path, data)
        self.tables[path] = meta

    def append_table(self, path: str, dtype: np.dtype, *, units: Mapping[str, str] | None = None,
                     description: str = "", attrs: Mapping[str, Any] | None = None) -> Appender:
        """Add (or replace) table ``path`` of ``dtype`` given in pieces: append its rows in order to what this
        returns, then close it (:class:`nicrig.chunked.Appender`)."""
        meta = table_meta(path, np.zeros(0, dtype), units, description, attrs)
        staged = self._staging()
        if path in staged:
            del staged[path]
        parent, _, leaf = path.rpartition("/")
        appender = Appender(staged.require_group(parent) if parent else staged, leaf, dtype)
        self.tables[path] = meta
        return appender

    def close(self) -> None:
        if self.staged is not None:
            self.staged.close()
            self.staged = None


@contextmanager
def _folder_lock(folder: Path) -> Iterator[None]:
    """One updater of a folder's companions at a time (two decodes of one capture must not lose tables)."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _readable(h5: h5py.File, skip: Iterable[str] = ()) -> list[str]:
    """The tables of a companion that read whole, but those in ``skip`` (about to be replaced: not read at all);
    one that cannot be read, or declares rows it does not store, is left out (derived data: decoding again
    makes it), so damage is never carried into the next companion nor read by its declared size."""
    names: list[str] = []
    h5.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
    skipped = set(skip)
    found = []
    for name in (n for n in names if n not in skipped):
        try:
            ds = h5[name]
            if unstored_rows(ds):
                continue
            check_rows(ds)
            {k: ds.attrs[k] for k in ds.attrs}
        except (OSError, KeyError, ValueError, RuntimeError):
            continue
        found.append(name)
    return found


@contextmanager
def update(capture: Path, identity: str) -> Iterator[Update]:
    """Collect tables and attributes, then replace the capture's companion with one holding them too.

    ``with update(path, identity) as u: u.write_table(...)``; nothing is
    written if the block raises. The new companion holds the old one's tables
    and attributes (when it belongs to this capture) except those replaced.
    """
    pending = Update(capture)
    try:
        yield pending
        if pending.tables or pending.root_attrs:
            _replace(capture, identity, pending)
    finally:
        pending.close()


def _replace(capture: Path, identity: str, pending: Update) -> None:
    target = companion_path(capture)
    folder = target.parent
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{capture}: cannot write derived tables beside it: folder {folder} is not writable")
    with _folder_lock(folder):
        for stale in folder.glob(f".{target.name}.*.partial"):  # left by a killed update (we hold the lock)
            stale.unlink(missing_ok=True)
        tmp = partial_path(target)
        try:
            old, _ = open_for(capture, identity)
            with old if old is not None else nullcontext(), h5py.File(tmp, "w", libver=LIBVER) as new:
                kept = _readable(old, skip=pending.tables) if old is not None else []
                kept_attrs = {k: v for k, v in old.attrs.items() if k not in _OWN_ATTRS} if old is not None else {}
                new.attrs["format"] = FORMAT_NAME
                new.attrs["format_version"] = np.int64(FORMAT_VERSION)
                new.attrs["nicrig_version"] = __version__
                new.attrs["updated_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
                new.attrs["capture"] = identity
                new.attrs["capture_file"] = capture.name
                for k, v in {**kept_attrs, **pending.root_attrs}.items():
                    new.attrs[k] = v
                for path in sorted({*kept, *pending.tables}):
                    parent, _, leaf = path.rpartition("/")
                    grp = new.require_group(parent) if parent else new
                    # Stored chunks copied as they are (no second compression): the new tables' from the
                    # staging file, the kept ones' from the old companion (read whole above).
                    new.copy(pending.staged[path] if path in pending.tables else old[path], grp, name=leaf)
                    for k, v in pending.tables.get(path, {}).items():
                        grp[leaf].attrs[k] = v
            fsync_path(tmp)
            publish(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_path(folder)

