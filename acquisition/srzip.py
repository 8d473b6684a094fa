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
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nicrig.acquisition import limits

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


#: Compression methods Python's zipfile reads; any other member is refused by name.
_READABLE = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
             zipfile.ZIP_LZMA: "lzma"}


def _readable(path: Path, info: zipfile.ZipInfo) -> zipfile.ZipInfo:
    """``info`` if its member can be read: not encrypted, a compression method zipfile knows."""
    if info.flag_bits & 0x1:
        raise FormatError(f"{path}: member {info.filename!r} is encrypted: sigrok session files are not")
    if info.compress_type not in _READABLE:
        raise FormatError(f"{path}: member {info.filename!r} uses compression method {info.compress_type}, "
                          f"which nicrig cannot read ({', '.join(_READABLE.values())} only)")
    return info


def _member(zf: zipfile.ZipFile, path: Path, name: str, limit: int = 1 << 20) -> bytes:
    """A small member's bytes (at most ``limit``); a damaged member (bad CRC, broken stream) is a FormatError."""
    info = _readable(path, zf.getinfo(name))
    if info.file_size > limit:
        raise FormatError(f"{path}: member {name!r} declares {info.file_size:,} bytes; at most {limit:,} expected")
    try:
        with zf.open(info) as f:
            return f.read(limit + 1)[:limit]
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError) as exc:
        raise FormatError(f"{path}: damaged member {name!r}: {exc}") from None


@dataclass
class SrStream:
    """A session file's logic channels, checked against the limits, its samples streamed by :meth:`blocks`."""

    path: Path
    channels: list[str]
    samplerate_hz: float
    unitsize: int
    parts: list[zipfile.ZipInfo]
    num_samples: int

    def blocks(self, block_samples: int = 1 << 20) -> Iterator[np.ndarray]:
        """``(n, ceil(channels / 8))`` uint8 blocks of at most ``block_samples`` samples, in order.

        Memory is one block, whatever the members' compression ratio; a member
        that holds other than it declared is a FormatError.
        """
        need = max(1, (len(self.channels) + 7) // 8)
        step = block_samples * self.unitsize
        buf = b""
        with zipfile.ZipFile(self.path) as zf:
            for info in self.parts:
                got = 0
                try:
                    with zf.open(info) as f:
                        while chunk := f.read(step):
                            got += len(chunk)
                            buf += chunk
                            cut = len(buf) - len(buf) % step if len(buf) >= step else 0
                            if cut:
                                yield _samples(buf[:cut], self.unitsize, need)
                                buf = buf[cut:]
                except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
                    raise FormatError(f"{self.path}: damaged member {info.filename!r}: {exc}") from None
                if got != info.file_size:
                    raise FormatError(f"{self.path}: member {info.filename!r} holds {got:,} bytes, "
                                      f"not the {info.file_size:,} it declares")
        if buf:
            yield _samples(buf, self.unitsize, need)


def _samples(raw: bytes, unitsize: int, need: int) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, unitsize)[:, :need].copy()


def open_sr(path: str | os.PathLike[str]) -> SrStream:
    """Check a session file's metadata and members against the limits (``acquisition.limits``), read nothing else."""
    path = Path(path)
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise FormatError(f"{path}: not a sigrok session file: {exc}") from None
    with zf:
        names = set(zf.namelist())
        if "metadata" not in names:
            raise FormatError(f"{path}: no 'metadata' member: not a sigrok session file")
        version = _member(zf, path, "version").decode("utf-8", "replace").strip() if "version" in names else "?"
        if version != "2":
            raise FormatError(f"{path}: session format version {version[:20]!r}; nicrig reads version 2")
        cfg = configparser.ConfigParser(interpolation=None, strict=False)
        try:
            cfg.read_file(io.StringIO(_member(zf, path, "metadata").decode("utf-8", "replace")))
        except configparser.Error as exc:
            raise FormatError(f"{path}: unreadable metadata: {' '.join(str(exc).split())[:200]}") from None
        dev = next((s for s in cfg.sections() if s.startswith("device")), None)
        if dev is None:
            raise FormatError(f"{path}: metadata has no [device] section")
        sec = cfg[dev]
        try:
            nprobes = int(sec.get("total probes", "0"))
            unitsize = int(sec.get("unitsize", "1"))
            rate = _parse_rate(sec.get("samplerate", "0"))
        except ValueError as exc:
            raise FormatError(f"{path}: bad metadata value: {str(exc)[:200]}") from None
        if nprobes <= 0:
            raise FormatError(f"{path}: no logic channels")
        limits.check_channels(path, nprobes, "probes")
        if not 1 <= unitsize <= limits.MAX_UNITSIZE:
            raise FormatError(f"{path}: bad unitsize {unitsize} (1 to {limits.MAX_UNITSIZE} bytes a sample)")
        if unitsize < (nprobes + 7) // 8:
            raise FormatError(f"{path}: unitsize {unitsize} too small for {nprobes} channels")
        if rate:
            limits.check_rate(path, rate, "samplerate")
        channels = [sec.get(f"probe{i + 1}", f"D{i}") for i in range(nprobes)]
        prefix = sec.get("capturefile", "logic-1")
        parts = [_readable(path, zf.getinfo(n)) for n in sorted(
            (n for n in names if n == prefix or (n.startswith(prefix + "-") and n[len(prefix) + 1:].isdigit())),
            key=lambda n: int(n.rsplit("-", 1)[-1]) if n != prefix else 0,
        )]
    size = sum(p.file_size for p in parts)
    if size % unitsize:
        raise FormatError(f"{path}: {size} data bytes is not a whole number of {unitsize}-byte samples")
    limits.check_samples(path, size // unitsize)
    return SrStream(path, channels, rate, unitsize, parts, size // unitsize)


def read_sr(path: str | os.PathLike[str]) -> SrSession:
    """Read the logic channels of a session file written by sigrok, PulseView or :func:`write_sr`, whole."""
    stream = open_sr(path)
    blocks = list(stream.blocks())
    need = max(1, (len(stream.channels) + 7) // 8)
    samples = np.concatenate(blocks) if blocks else np.zeros((0, need), dtype=np.uint8)
    return SrSession(channels=stream.channels, samplerate_hz=stream.samplerate_hz, samples=samples)
