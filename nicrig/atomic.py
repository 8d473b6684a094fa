"""Output files written whole or not at all: under a temporary name, renamed into place when complete.

The temporary file gets the mode a plain ``open()`` would give (``0666`` less the umask),
not ``mkstemp``'s ``0600``, so a colleague can read what nicrig writes as readily as any
other file in the folder.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nicrig.errors import UsageError


def give_ordinary_mode(path: str | os.PathLike[str]) -> None:
    """Set ``path``'s permission bits to ``0666`` less the process's umask."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def partial_path(final: Path) -> Path:
    """Create an empty temporary file beside ``final`` (ordinary mode) and return its path.

    A folder that is missing or not writable is a :class:`UsageError` naming ``final``.
    """
    folder = final.parent if str(final.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{final}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"{final}: folder {folder} is not writable")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".partial", dir=folder)
    except OSError as exc:
        raise UsageError(f"{final}: cannot write in {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    give_ordinary_mode(tmp)
    return Path(tmp)


def refuse_existing(final: Path) -> None:
    """A :class:`UsageError` when something (a file, a folder, a symbolic link, even a dangling one) has the
    name ``final``: recordings are not replaced without ``--force``."""
    if os.path.lexists(final):
        raise UsageError(f"{final}: exists (use another name, or give --force to replace it)")


def publish(tmp: Path, final: Path, *, overwrite: bool = True) -> None:
    """Give the complete file ``tmp`` (beside ``final``) its final name, atomically.

    ``rename(2)`` replaces what has the name, a symbolic link included (the link, never its target). Without
    ``overwrite`` an existing name is refused in the same step: ``link(2)`` fails on a name that exists, so a
    file that appeared while ``tmp`` was written is kept (and ``tmp`` with it, named in the error).
    """
    if overwrite:
        os.replace(tmp, final)
        return
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise UsageError(f"{final}: appeared while nicrig wrote it: kept; what nicrig wrote is {tmp}") from None
    except OSError:  # a file system without hard links: the check and the rename are two steps there
        refuse_existing(final)
        os.replace(tmp, final)
        return
    os.unlink(tmp)


@contextmanager
def replacing(final: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces ``final`` (:func:`publish`), on any error it is
    deleted."""
    final = Path(final)
    tmp = partial_path(final)
    try:
        yield tmp
        publish(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
