"""The decoders nicrig ships: discovery, metadata, versions, and ``nicrig decoders list|install``.

A protocol decoder is a folder with ``__init__.py`` and ``pd.py`` written
against libsigrokdecode's ``sigrokdecode`` module. To read a decoder's
metadata (channels, options, outputs) without libsigrokdecode, its module is
loaded against nicrig's own ``sigrokdecode`` (``nicrig.decoders.runtime``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nicrig.decoders import DECODERS_DIR

from nicrig.errors import UsageError

#: Where libsigrokdecode (sigrok-cli, PulseView) looks for a user's decoders.
USER_DECODERS_DIR = Path(os.environ.get("XDG_DATA_HOME", Path.home() / ".local" / "share")) / \
    "libsigrokdecode" / "decoders"


@dataclass(frozen=True)
class DecoderInfo:
    """What a decoder declares: identity, channels, options, outputs."""

    id: str
    name: str
    longname: str
    desc: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    channels: tuple[str, ...]
    optional_channels: tuple[str, ...]
    options: dict[str, Any]  # option id -> default
    binary: tuple[str, ...]
    path: Path

    @property
    def all_channels(self) -> tuple[str, ...]:
        return self.channels + self.optional_channels

    @property
    def version(self) -> str:
        """A digest of the decoder's files: a table decoded by another version is stale."""
        return _copy_version(self.path)


def _load(folder: Path) -> DecoderInfo:
    from nicrig.decoders import runtime

    d = runtime.import_decoder(folder, runtime).Decoder
    return DecoderInfo(
        id=d.id, name=d.name, longname=d.longname, desc=d.desc,
        inputs=tuple(d.inputs), outputs=tuple(d.outputs),
        channels=tuple(c["id"] for c in getattr(d, "channels", ())),
        optional_channels=tuple(c["id"] for c in getattr(d, "optional_channels", ())),
        options={o["id"]: o.get("default") for o in getattr(d, "options", ())},
        binary=tuple(b[0] for b in getattr(d, "binary", ())),
        path=folder,
    )


_CACHE: dict[str, DecoderInfo] = {}


def available() -> dict[str, DecoderInfo]:
    """Every decoder shipped in ``decoders/``, by id."""
    if not _CACHE:
        for folder in sorted(p.parent for p in DECODERS_DIR.glob("*/pd.py")):
            info = _load(folder)
            _CACHE[info.id] = info
    return dict(_CACHE)


def get(decoder_id: str) -> DecoderInfo:
    found = available()
    if decoder_id not in found:
        raise UsageError(f"no decoder {decoder_id!r} (nicrig's decoders: {', '.join(found)})")
    return found[decoder_id]


def _copy_version(folder: Path) -> str:
    """A digest of the ``*.py`` files of a decoder folder (nicrig's own or an installed copy)."""
    h = hashlib.sha256()
    for f in sorted(folder.glob("*.py")):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def sigrok_finds(decoder_ids: list[str]) -> Path | None:
    """The folder from which libsigrokdecode (PulseView, sigrok-cli) loads this version of every decoder named.

    libsigrokdecode searches ``$SIGROKDECODE_DIR`` first, then the user's data folder
    (:data:`USER_DECODERS_DIR`); None when neither holds current copies of them all.
    """
    folders = [Path(os.environ["SIGROKDECODE_DIR"])] if os.environ.get("SIGROKDECODE_DIR") else []
    for folder in folders + [USER_DECODERS_DIR]:
        infos = [get(d) for d in decoder_ids]
        if all((folder / i.path.name / "pd.py").is_file() and _copy_version(folder / i.path.name) == i.version
               for i in infos):
            return folder
    return None


def install(target: Path) -> list[Path]:
    """Copy every decoder folder into ``target`` (replacing older copies); return what was written."""
    try:
        target.mkdir(parents=True, exist_ok=True)
        written = []
        for info in available().values():
            dest = target / info.path.name
            if dest.exists():
                shutil.rmtree(dest)
            shutil.copytree(info.path, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            written.append(dest)
    except OSError as exc:
        raise UsageError(f"cannot install decoders into {target}: {exc}") from None
    return written


# -- nicrig decoders list | install ---------------------------------------------------------------

def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    ls = sub.add_parser("list", help="the decoders nicrig ships, with channels and options")
    ls.add_argument("--json", action="store_true", help="as JSON")
    inst = sub.add_parser("install", help="copy the decoders where sigrok-cli and PulseView find them")
    inst.add_argument("--dir", type=Path, default=USER_DECODERS_DIR,
                      help=f"target folder (default: {USER_DECODERS_DIR})")


def run(args: argparse.Namespace) -> int:
    if args.action == "install":
        written = install(args.dir)
        for path in written:
            print(f"installed {path}")
        if args.dir != USER_DECODERS_DIR:
            print(f"sigrok-cli and PulseView find them with: SIGROKDECODE_DIR={args.dir}")
        return 0
    decoders = available()
    if args.json:
        import json

        print(json.dumps({k: {"name": v.name, "longname": v.longname, "desc": v.desc, "inputs": v.inputs,
                              "outputs": v.outputs, "channels": v.channels,
                              "optional_channels": v.optional_channels, "options": v.options,
                              "binary": v.binary, "version": v.version} for k, v in decoders.items()},
                         indent=2, default=str))
        return 0
    for info in decoders.values():
        print(f"{info.id:13s} {info.longname}")
        print(f"{'':13s} stacks on: {', '.join(info.inputs)}; channels: {', '.join(info.channels) or '-'}"
              + (f" (+{len(info.optional_channels)} optional)" if info.optional_channels else ""))
        if info.options:
            print(f"{'':13s} options: " + ", ".join(f"{k}={v}" for k, v in info.options.items()))
        if info.binary:
            print(f"{'':13s} binary outputs: {', '.join(info.binary)}")
    return 0
