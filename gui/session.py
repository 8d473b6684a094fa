"""The GUI session of a capture set: per-source deskew, named markers, cursors, lanes shown and their order.

Saved as the JSON root attribute ``gui_session`` of the capture set's companion
file ``FILE.derived.h5`` (:mod:`nicrig.companion`: replaced atomically, the
capture itself is never opened for writing); capture sets written before
companions hold it as a root attribute of their own, which is still read. When
the folder cannot be written, or the file is a udpmon results file (no
companion), the session goes to ``FILE.h5.session.json`` beside it instead,
replaced whole (or, when that fails too, an error says so).
The deskew here is added to each source's recorded ``offset_ps`` on the
timeline; the samples and decoded tables in the file are left as recorded.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nicrig.acquisition.capture import CaptureSet
from nicrig.atomic import replacing
from nicrig.companion import companion_path
from nicrig.errors import FormatError, NicrigError, UsageError
from nicrig.h5file import NicrigFile

ATTR = "gui_session"
VERSION = 1


@dataclass
class Session:
    """What the user set up on a capture set's timeline; times in ns on the common timeline."""

    offsets_ns: dict[str, float] = field(default_factory=dict)
    markers: list[tuple[str, float]] = field(default_factory=list)
    hidden: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)
    view_ns: tuple[float, float] | None = None
    cursors_ns: tuple[float, float] | None = None

    def offset(self, source: str) -> float:
        return float(self.offsets_ns.get(source, 0.0))


def to_json(s: Session) -> str:
    return json.dumps({"version": VERSION, **asdict(s)}, sort_keys=True)


def _finite(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise FormatError(f"GUI session: {what} is not a finite number: {v!r}")
    return float(v)


def _pair(v: Any, what: str) -> tuple[float, float] | None:
    if v is None:
        return None
    if not isinstance(v, (list, tuple)) or len(v) != 2:
        raise FormatError(f"GUI session: {what} must be two numbers")
    return _finite(v[0], what), _finite(v[1], what)


def _names(v: Any, what: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise FormatError(f"GUI session: {what} must be a list of names")
    return list(v)


def from_json(text: str) -> Session:
    """Parse a saved session; a malformed one raises :class:`FormatError` naming what is wrong."""
    try:
        d = json.loads(text)
    except ValueError as exc:
        raise FormatError(f"GUI session: not JSON ({exc})") from None
    if not isinstance(d, dict):
        raise FormatError("GUI session: not a JSON object")
    version = d.get("version", 1)
    if isinstance(version, bool) or not isinstance(version, int):
        raise FormatError(f"GUI session: version must be an integer, not {version!r}")
    if version > VERSION:
        raise FormatError(f"GUI session: version {version} is newer than this nicrig reads")
    offsets = d.get("offsets_ns", {})
    if not isinstance(offsets, dict):
        raise FormatError("GUI session: offsets_ns must map source names to ns")
    markers = d.get("markers", [])
    if not isinstance(markers, list) or not all(isinstance(m, (list, tuple)) and len(m) == 2 and isinstance(m[0], str)
                                                for m in markers):
        raise FormatError("GUI session: markers must be [name, t_ns] pairs")
    return Session(
        offsets_ns={str(k): _finite(v, f"offset of {k}") for k, v in offsets.items()},
        markers=[(m[0], _finite(m[1], f"marker {m[0]!r}")) for m in markers],
        hidden=_names(d.get("hidden", []), "hidden"),
        order=_names(d.get("order", []), "order"),
        view_ns=_pair(d.get("view_ns"), "view_ns"),
        cursors_ns=_pair(d.get("cursors_ns"), "cursors_ns"),
    )


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".session.json")


def _saved(cs: CaptureSet) -> str | None:
    raw = cs.root_attr(ATTR)
    return raw.decode() if isinstance(raw, bytes) else raw


def load(path: Path, opened: NicrigFile | None = None) -> tuple[Session, str]:
    """The session saved with ``path`` (or beside it), and a note for the status bar; default when none.
    ``opened``: the file, open already (opened and checked again, a 100 M-sample capture set cost the window's
    first view 40 ms more); a session is kept only with a capture set."""
    text = None
    try:
        if opened is None:
            with CaptureSet.open(path) as cs:
                text = _saved(cs)
        elif isinstance(opened, CaptureSet):
            text = _saved(opened)
    except NicrigError:
        text = None
    if text is None and sidecar(path).is_file():
        text = sidecar(path).read_text(encoding="utf-8")
    if text is None:
        return Session(), ""
    try:
        return from_json(text), "session restored"
    except FormatError as exc:
        return Session(), f"{exc}: ignored"


def save(path: Path, s: Session) -> Path:
    """Write the session into the capture set's companion, else beside it; return where it went."""
    try:
        with CaptureSet.open(path) as cs:
            derived = cs.derived_update()
        with derived as update:
            update.root_attrs[ATTR] = to_json(s)
        sidecar(path).unlink(missing_ok=True)
        return companion_path(path)
    except (OSError, NicrigError):
        try:
            with replacing(sidecar(path)) as tmp:  # a kill mid-write keeps the previous session whole
                tmp.write_text(to_json(s), encoding="utf-8")
        except (OSError, UsageError) as exc:
            raise UsageError(f"{path}: cannot save the GUI session in the file or beside it: {exc}") from None
        return sidecar(path)
