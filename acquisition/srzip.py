"""sigrok session files (``.sr``, "srzip" v2): what PulseView and sigrok-cli open.

A session file is a zip archive holding ``version`` (``2``), an INI-style
``metadata`` file naming the channels, the sample rate and the unit size, and
the packed logic samples in ``logic-1-1``, ``logic-1-2``, ... chunks, laid out
exactly as nicrig stores them (channel ``k`` = bit ``k % 8`` of byte ``k // 8``).
"""

from __future__ import annotations

import configparser
import io
import os
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nicrig.errors import FormatError, UsageError

#: Bytes per ``logic-1-N`` member, as libsigrok writes them (4 MiB).
CHUNK_BYTES = 4 << 20


@dataclass
class SrSession:
    """The logic part of a session file: channel names, sample rate, packed samples."""

    channels: list[str]
    samplerate_hz: float
    samples: np.ndarray  # (n, unitsize) uint8


def write_sr(path: str | os.PathLike[str], channels: Sequence[str], samplerate_hz: float,
             blocks: Iterable[np.ndarray]) -> int:
    """Write packed sample ``blocks`` (each ``(n, unitsize)`` uint8) as a session file; return the sample count."""
    if not channels:
        raise UsageError("a session file needs at least one channel")
    unitsize = max(1, (len(channels) + 7) // 8)
    total = 0
    path = Path(path)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        zf.writestr("version", "2")
        meta = [
            "[global]",
            "sigrok version=0.5.1",
            "",
            "[device 1]",
            "capturefile=logic-1",
            f"total probes={len(channels)}",
            f"samplerate={int(round(samplerate_hz))} Hz",
            "total analog=0",
        ]
        meta += [f"probe{i + 1}={name}" for i, name in enumerate(channels)]
        meta.append(f"unitsize={unitsize}")
        zf.writestr("metadata", "\n".join(meta) + "\n")
        buf = bytearray()
        part = 1
        for block in blocks:
            block = np.asarray(block, dtype=np.uint8)
            if block.ndim != 2 or block.shape[1] != unitsize:
                raise UsageError(f"samples must be (n, {unitsize}) uint8 for {len(channels)} channels")
            buf += block.tobytes()
            total += block.shape[0]
            while len(buf) >= CHUNK_BYTES:
                cut = CHUNK_BYTES - CHUNK_BYTES % unitsize
                zf.writestr(f"logic-1-{part}", bytes(buf[:cut]))
                del buf[:cut]
                part += 1
        if buf or part == 1:
            zf.writestr(f"logic-1-{part}", bytes(buf))
    return total


def _parse_rate(text: str) -> float:
    """'66666667 Hz', '1 MHz', '200 kHz', '1.5 GHz' -> Hz."""
    t = text.strip().lower().removesuffix("hz").strip()
    scale = {"k": 1e3, "m": 1e6, "g": 1e9}
    if t and t[-1] in scale:
        return float(t[:-1]) * scale[t[-1]]
    return float(t)


def _member(zf: zipfile.ZipFile, path: Path, name: str) -> bytes:
    """One member's bytes; a damaged member (bad CRC, broken deflate stream) is a FormatError."""
    try:
        return zf.read(name)
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise FormatError(f"{path}: damaged member {name!r}: {exc}") from None


def read_sr(path: str | os.PathLike[str]) -> SrSession:
    """Read the logic channels of a session file written by sigrok, PulseView or :func:`write_sr`."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise FormatError(f"{path}: not a sigrok session file: {exc}") from None
    with zf:
        names = set(zf.namelist())
        if "metadata" not in names:
            raise FormatError(f"{path}: no 'metadata' member: not a sigrok session file")
        version = _member(zf, path, "version").decode("utf-8", "replace").strip() if "version" in names else "?"
        if version != "2":
            raise FormatError(f"{path}: session format version {version!r}; nicrig reads version 2")
        cfg = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            cfg.read_file(io.StringIO(_member(zf, path, "metadata").decode("utf-8", "replace")))
        except configparser.Error as exc:
            raise FormatError(f"{path}: unreadable metadata: {' '.join(str(exc).split())}") from None
        dev = next((s for s in cfg.sections() if s.startswith("device")), None)
        if dev is None:
            raise FormatError(f"{path}: metadata has no [device] section")
        sec = cfg[dev]
        try:
            nprobes = int(sec.get("total probes", "0"))
            unitsize = int(sec.get("unitsize", "1"))
            rate = _parse_rate(sec.get("samplerate", "0"))
        except ValueError as exc:
            raise FormatError(f"{path}: bad metadata value: {exc}") from None
        if nprobes <= 0:
            raise FormatError(f"{path}: no logic channels")
        if unitsize <= 0:
            raise FormatError(f"{path}: bad unitsize {unitsize}")
        channels = [sec.get(f"probe{i + 1}", f"D{i}") for i in range(nprobes)]
        prefix = sec.get("capturefile", "logic-1")
        parts = sorted(
            (n for n in names if n == prefix or (n.startswith(prefix + "-") and n[len(prefix) + 1:].isdigit())),
            key=lambda n: int(n.rsplit("-", 1)[-1]) if n != prefix else 0,
        )
        raw = b"".join(_member(zf, path, n) for n in parts)
    if len(raw) % unitsize:
        raise FormatError(f"{path}: {len(raw)} data bytes is not a whole number of {unitsize}-byte samples")
    samples = np.frombuffer(raw, dtype=np.uint8).reshape(-1, unitsize).copy()
    need = max(1, (nprobes + 7) // 8)
    if unitsize < need:
        raise FormatError(f"{path}: unitsize {unitsize} too small for {nprobes} channels")
    return SrSession(channels=channels, samplerate_hz=rate, samples=samples[:, :need])
